"""Moving datasets between their on-disk form (:mod:`qval.schema`) and the database."""

from __future__ import annotations

import numpy as np
from django.db import transaction

from qval import paper, schema
from qval.envs import registry
from qval.predictions import SplitIndex
from qval.scoring import Truth

from .models import Candidate, Dataset, Environment, Label, LabelSet, State


class DatasetConflict(RuntimeError):
    """A dataset version already exists with different content (datasets are immutable)."""


def load_dataset(ds: schema.Dataset) -> tuple[Dataset, bool]:
    """Validate ``ds`` and store it in the database; return ``(dataset, created)``.

    Loading the same content twice is a no-op; loading different content under an
    existing ``slug@version`` raises :class:`DatasetConflict`.
    """
    ds.validate()
    return store_dataset(ds, ds.compute_fingerprint())


@transaction.atomic
def store_dataset(ds: schema.Dataset, fingerprint: str) -> tuple[Dataset, bool]:
    """:func:`load_dataset` for a dataset already validated whose fingerprint is ``fingerprint``
    (a caller that stores one build more than once computes both once)."""
    m = ds.manifest
    existing = Dataset.objects.filter(slug=m.slug, version=m.version).first()
    if existing is not None:
        if existing.fingerprint != fingerprint:
            raise DatasetConflict(
                f"{m.key} already exists with fingerprint {existing.fingerprint[:12]}…, "
                f"the new build has {fingerprint[:12]}…; a changed build needs a new version"
            )
        return existing, False
    env, _ = Environment.objects.get_or_create(slug=m.environment, defaults=registry.catalogue(m.environment))
    manifest = {k: v for k, v in vars(m).items()}
    manifest["fingerprint"] = fingerprint
    dataset = Dataset.objects.create(
        environment=env,
        slug=m.slug,
        version=m.version,
        name=m.name,
        description=m.description,
        fingerprint=fingerprint,
        modalities=list(m.modalities),
        manifest=manifest,
    )
    states = State.objects.bulk_create(
        State(
            dataset=dataset,
            external_id=s.id,
            position=i,
            split=s.split,
            trajectory=s.trajectory,
            step=s.step,
            task=s.task,
            observation=s.observation,
            history=list(s.history),
            image=s.image,
            end_image=s.end_image,
            task_type=s.task_type,
        )
        for i, s in enumerate(ds.states)
    )
    Candidate.objects.bulk_create(
        Candidate(
            state=db_state,
            external_id=c.id,
            index=c.index,
            action=c.action,
            next_state=c.next_state,
            is_actor=c.is_actor,
            next_image=c.next_image,
            end_image=c.end_image,
        )
        for db_state, s in zip(states, ds.states)
        for c in s.candidates
    )
    lab = m.labelling
    labelset = LabelSet.objects.create(
        dataset=dataset,
        reference_policy=lab["reference_policy"],
        discount=lab["discount"],
        num_rollouts=lab["num_rollouts"],
        aggregation=lab.get("aggregation", "max"),
        horizon=lab.get("horizon"),
    )
    labels = []
    for s in ds.states:
        labels.append(Label(labelset=labelset, split=s.split, target="v", item_id=s.id, value=ds.v_labels[s.id]))
        labels.extend(
            Label(labelset=labelset, split=s.split, target="q", item_id=c.id, value=ds.q_labels[c.id])
            for c in s.candidates
        )
    Label.objects.bulk_create(labels, batch_size=5000)
    return dataset, True


def split_index(dataset: Dataset, split: str, target: str) -> SplitIndex:
    """The evaluation ids (dataset order) and every other acceptable id of a split/target; no labels."""
    states = State.objects.filter(dataset=dataset, split=split).order_by("position")
    if target == "v":
        return SplitIndex(states.values_list("external_id", flat=True))
    cands = Candidate.objects.filter(state__in=states).order_by("state__position", "index")
    rows = list(cands.values_list("external_id", "is_actor"))
    return SplitIndex((cid for cid, is_actor in rows if is_actor), (cid for cid, _ in rows))


def truth_for(dataset: Dataset, split: str, target: str) -> Truth:
    """The hidden labels of a split/target as a :class:`qval.scoring.Truth` (worker only), with each
    point's trajectory and task, which its intervals resample (:mod:`qval.sampling`).

    A dataset we do not host (a paper's, :mod:`submissions.importing`) has its labels in the paper's data
    instead (:meth:`qval.paper.base.PublishedResults.truth`; its rows are all on one split).
    """
    if not dataset.hosted:
        return paper.truth(dataset.slug, target)
    labels = dict(
        Label.objects.filter(labelset__dataset=dataset, split=split, target=target).values_list("item_id", "value")
    )
    point_ids = split_index(dataset, split, target).expected_ids
    point_labels = np.array([labels[i] for i in point_ids], dtype=np.float64)
    states = State.objects.filter(dataset=dataset, split=split).order_by("position")
    drawn = list(states.values_list("trajectory", "task"))  # one point per state, in the points' order
    design = {"trajectories": [t for t, _ in drawn], "tasks": [k for _, k in drawn]}
    if target == "v":
        return Truth(point_ids=point_ids, point_labels=point_labels, **design)
    group_ids: list[list[str]] = []
    current_state = None
    cands = Candidate.objects.filter(state__dataset=dataset, state__split=split).order_by("state__position", "index")
    for state_id, cid in cands.values_list("state_id", "external_id"):
        if state_id != current_state:
            group_ids.append([])
            current_state = state_id
        group_ids[-1].append(cid)
    group_labels = [np.array([labels[c] for c in g], dtype=np.float64) for g in group_ids]
    return Truth(point_ids=point_ids, point_labels=point_labels, group_ids=group_ids, group_labels=group_labels,
                 **design)


def inputs_for(dataset: Dataset, split: str, *, hidden_goal_images: bool = False) -> schema.Dataset:
    """The manifest and one split's states and candidates as a :class:`qval.schema.Dataset`,
    with no labels at all (what :func:`qval.containers.write_input` needs for a method container).

    Goal images (``end_image``) are named only where :func:`qval.schema.goal_images_public` allows
    it; ``hidden_goal_images=True`` names them on hidden splits too — the platform-only path for
    built-in methods the platform runs itself, never for containers, downloads or pages.
    """
    goal = hidden_goal_images or schema.goal_images_public(split)
    fields = set(schema.Manifest.__dataclass_fields__)
    manifest = schema.Manifest(**{k: v for k, v in dataset.manifest.items() if k in fields})
    db_states = list(State.objects.filter(dataset=dataset, split=split).order_by("position"))
    by_state: dict[int, list[schema.Candidate]] = {s.pk: [] for s in db_states}
    ids = {s.pk: s.external_id for s in db_states}
    for c in Candidate.objects.filter(state__in=db_states).order_by("state__position", "index"):
        by_state[c.state_id].append(schema.Candidate(
            id=c.external_id, state_id=ids[c.state_id], index=c.index, action=c.action,
            next_state=c.next_state, is_actor=c.is_actor, next_image=c.next_image,
            end_image=c.end_image if goal else None,
        ))
    states = [
        schema.State(id=s.external_id, split=s.split, trajectory=s.trajectory, step=s.step, task=s.task,
                     observation=s.observation, history=tuple(s.history), candidates=tuple(by_state[s.pk]),
                     image=s.image, end_image=s.end_image if goal else None, task_type=s.task_type)
        for s in db_states
    ]
    return schema.Dataset(manifest=manifest, states=states, q_labels={}, v_labels={})

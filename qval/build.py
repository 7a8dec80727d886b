"""Build a QVal dataset: collect trajectories, sample states, label candidates, split.

The pipeline (:func:`build_dataset`) uses only the :class:`~qval.envs.base.Environment`
interface, so every environment is built the same way:

1. **Collect.**  Trajectory ``i`` plays task ``env.tasks[i % len(env.tasks)]`` with the
   collecting actor (:meth:`~qval.envs.base.Environment.actor_action`: the reference policy
   with ε-uniform noise) until the episode is done.  Its RNG is
   ``random.Random(f"{seed}/actor/{i}")``.
2. **Sample.**  A *turn* is a state in which the actor acted.  The first and the last turn
   are never sampled (the first is, with ``spec.sample_first_turn``: for tasks solved in two
   actions); among the others up to ``max_states_per_trajectory`` are drawn without
   replacement by ``random.Random(f"{seed}/sample/{i}")`` (all of them when there are fewer)
   and kept in step order.
3. **Candidates.**  :meth:`~qval.envs.base.Environment.sample_candidates` of the state with
   ``random.Random(f"{seed}/candidates/{trajectory}/{step}")`` (FrozenLake: all four moves,
   no draw; ALFWorld: the actor's action and three other admissible commands), the actor's
   own action marked ``is_actor``; ``next_state`` is the observation after restoring the
   state and forcing the candidate.
4. **Images.**  When the spec lists the ``image`` modality, the adapter's
   :meth:`~qval.envs.base.Environment.observation_image` of the state and of every
   candidate's next state is stored as a PNG (:func:`encode_png`: deterministic bytes):
   ``State.image = "{state id}.png"``, ``Candidate.next_image = "{candidate id}-next.png"``;
   :meth:`schema.Dataset.write` puts them in ``images/`` and the fingerprint covers their bytes.
   ``"image"`` is in ``Manifest.modalities`` exactly when the dataset has images.
5. **Labels.**  :func:`qval.labelling.label_state` (Max-Value Monte Carlo under the reference
   policy), which also reads the candidates' next states (for a deterministic environment off the
   labelling rollouts themselves: :func:`qval.labelling.shares_rollouts`).
6. **Split.**  Whole trajectories, never states.  The split *cycle* is ``spec.split_cycle``
   (default: ``spec.splits``; a split listed several times gets that many shares).
   ``split_by="trajectory"`` (default): the ``n``-th trajectory of each task goes to
   ``cycle[n % len(cycle)]``, so every task appears in every split.  ``split_by="task"``: task
   ``j`` (in ``env.tasks`` order) and all its trajectories go to ``cycle[j % len(cycle)]``, so
   no task appears in two splits.  The rule (and the cycle, when given) is recorded in
   ``Manifest.config``.

**Resume.**  With a work directory (``build(..., work_dir=…)`` or ``build_dataset(...,
checkpoint=…)``), every labelled state — its record, labels, PNGs and labelling time — is
appended to ``{work_dir}/{slug}-{version}-{key}/checkpoint.jsonl`` (PNGs beside it in
``images/``), where ``key`` hashes the spec, the environment's config and the checkpoint
format (:func:`build_key`), so a changed configuration never reuses old work.  A rerun
collects again (deterministic and cheap) and labels only the states the checkpoint lacks;
an unreadable line (a build killed mid-write) is dropped.  The result is identical, with the
same fingerprint, to an uninterrupted build.  :func:`build` removes the checkpoint once the
dataset is written.

Ids: state ``t{trajectory:03d}-s{step:02d}``, candidate ``{state id}-a{index}``.
A build is deterministic: the same spec and environment give the same fingerprint; the
build timings go to ``Manifest.build_info``, which the fingerprint leaves out.

:data:`BUILDERS` names the datasets :func:`build` can make.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from qval import hidden, labelling, schema
from qval.envs.base import Environment, Snapshot
from qval.envs.frozenlake import MAP_SEEDS, FrozenLake

if TYPE_CHECKING:
    from PIL import Image

SPLIT_RULES = {
    "trajectory": "the n-th trajectory of each task goes to splits[n % len(splits)]",
    "task": "task j (in the environment's task order) and all its trajectories go to splits[j % len(splits)]",
}
"""``DatasetSpec.split_by`` → the rule recorded in ``Manifest.config`` (default cycle: the splits)."""

CYCLE_RULES = {
    "trajectory": "the n-th trajectory of each task goes to split_cycle[n % len(split_cycle)]",
    "task": "task j (in the environment's task order) and all its trajectories go to "
    "split_cycle[j % len(split_cycle)]",
}
"""The same rules with an explicit ``DatasetSpec.split_cycle``."""

CHECKPOINT_FORMAT = 1
"""Bumped whenever a checkpoint line or what a state holds changes (part of :func:`build_key`)."""

Progress = Callable[[int, int, str], None]
"""``progress(done, total, stage)``: called at the start of a stage and after each item.

Stages: ``collect`` (trajectories), then ``label`` (sampled states; on a resumed build the
first call already counts the states found in the checkpoint).  An exception raised by the
callback stops the build (what a checkpointed build resumes from)."""


@dataclass(frozen=True)
class DatasetSpec:
    """Everything about a dataset that is not the environment itself."""

    slug: str
    name: str
    version: str
    description: str
    modalities: tuple[str, ...]
    num_trajectories: int
    max_states_per_trajectory: int
    epsilon: float
    seed: int
    discount: float
    num_rollouts: int = 1
    splits: tuple[str, ...] = ("dev", "test")
    split_by: str = "trajectory"
    split_cycle: tuple[str, ...] | None = None
    """Weighted split assignment: position ``j`` goes to ``split_cycle[j % len(split_cycle)]``
    (e.g. ``("train", "dev", "train", "test", "train")`` gives train 3 shares in 5)."""
    secret_test: bool = False
    """The test split's tasks and RNG seeds come from the maintainer's secret (:mod:`qval.hidden`);
    needs ``split_by="task"``.  Without the secret only the other splits are built."""
    end_images: bool = False
    """Store the goal image of every point: the final state of its reference rollout
    (``State.end_image``, ``Candidate.end_image``); needs the image modality."""
    sample_first_turn: bool = False
    """Let the first turn (the state after reset) be sampled too, so that a task solved in two
    actions gives a state; the last turn is still never sampled."""

    def __post_init__(self) -> None:
        if self.split_by not in SPLIT_RULES:
            raise ValueError(f"split_by must be one of {', '.join(SPLIT_RULES)}, got {self.split_by!r}")
        if self.split_cycle is not None and set(self.split_cycle) != set(self.splits):
            raise ValueError(f"split_cycle {self.split_cycle} must use every split of {self.splits} and no other")
        unknown = set(self.modalities) - {"text", "image"}
        if unknown:
            raise ValueError(f"unknown modalities {sorted(unknown)}; expected text and/or image")
        if self.secret_test and (self.split_by != "task" or "test" not in self.splits):
            raise ValueError("secret_test needs split_by='task' and a test split")
        if self.end_images and not self.images:
            raise ValueError("end_images needs the image modality")

    @property
    def cycle(self) -> tuple[str, ...]:
        """The split cycle: ``split_cycle`` or else ``splits``."""
        return self.split_cycle or self.splits

    @property
    def images(self) -> bool:
        """Whether the dataset stores image observations."""
        return "image" in self.modalities

    def config(self) -> dict[str, Any]:
        """The collection settings recorded in ``Manifest.config``."""
        config: dict[str, Any] = {
            "num_trajectories": self.num_trajectories,
            "task_assignment": "trajectory i plays task i % number of tasks",
            "actor": "reference policy with epsilon-uniform random actions",
            "epsilon": self.epsilon,
            "seed": self.seed,
            "actor_rng": "random.Random(f'{seed}/actor/{trajectory}')",
            "max_states_per_trajectory": self.max_states_per_trajectory,
            "state_sampling": "uniform without replacement among turns except the first and the last",
            "sample_rng": "random.Random(f'{seed}/sample/{trajectory}')",
            "splits": list(self.splits),
            "split_rule": SPLIT_RULES[self.split_by],
        }
        if self.split_cycle is not None:  # absent otherwise, so older datasets keep their fingerprints
            config["split_rule"] = CYCLE_RULES[self.split_by]
            config["split_cycle"] = list(self.split_cycle)
            config["split_weights"] = {s: self.split_cycle.count(s) for s in self.splits}
        if self.images:
            config["images"] = (
                "PNG of the adapter's observation_image() for every state ({state id}.png) and every candidate's "
                "next state ({candidate id}-next.png), in images/"
            )
        if self.end_images:
            config["end_images"] = (
                "goal images: PNG of the final state of the reference rollout that gave each label, from every "
                "candidate ({candidate id}-end.png, after forcing it) and every state ({state id}-end.png), in images/"
            )
        if self.sample_first_turn:  # absent otherwise, so older datasets keep their fingerprints
            config["state_sampling"] = "uniform without replacement among turns except the last"
            config["sample_first_turn"] = True
        if self.secret_test:
            config["secret_test"] = (
                "the test positions' tasks are instances drawn from seeds HMAC-SHA256(secret, '<slug>@<version>/task/"
                "<task>') and the test trajectories' actor, sample and candidate RNGs use a seed derived the same way "
                "from the maintainer's secret; the test split's fingerprint is an HMAC keyed by it. Train and dev do "
                "not depend on it"
            )
        return config

    def split_of(self, position: int) -> str:
        """The split of task position (``split_by="task"``) or per-task trajectory number ``position``."""
        return self.cycle[position % len(self.cycle)]

    def hidden_tasks(self, env: Environment) -> list[str]:
        """The tasks drawn from the secret: those at the test positions (none unless ``secret_test``)."""
        if not self.secret_test:
            return []
        return [task for j, task in enumerate(env.tasks) if self.split_of(j) == "test"]


def hide_test_tasks(env: Environment, spec: DatasetSpec, secret: str | None) -> None:
    """Replace ``spec``'s test tasks by instances drawn from ``secret`` (hidden and unplayable
    without it); nothing unless ``spec.secret_test``, nor when ``env`` hides tasks already."""
    tasks = spec.hidden_tasks(env)
    if tasks and not env.hidden:
        key = f"{spec.slug}@{spec.version}"
        env.hide_tasks({t: hidden.derive_seed(secret, key, "task", t) if secret else None for t in tasks})


def trajectory_seed(spec: DatasetSpec, split: str, secret: str | None) -> str:
    """The seed of a trajectory's RNGs: ``spec.seed``, or for a secret test split one derived from the secret."""
    if spec.secret_test and split == "test":
        if not secret:
            raise ValueError(f"{spec.slug}@{spec.version}: the test split needs the secret")
        return hidden.rng_seed(secret, f"{spec.slug}@{spec.version}")
    return str(spec.seed)


@dataclass(frozen=True)
class Turn:
    """A state of a trajectory in which the actor acted."""

    snapshot: Snapshot
    observation: str
    action: str


@dataclass(frozen=True)
class Trajectory:
    """One collected episode."""

    index: int
    task: str
    split: str
    turns: tuple[Turn, ...]
    seed: str
    """The seed of its RNGs (:func:`trajectory_seed`)."""


def split_of_trajectory(env: Environment, index: int, spec: DatasetSpec) -> str:
    """The split trajectory ``index`` goes to (step 6 of the pipeline)."""
    tasks = env.tasks
    position = index % len(tasks) if spec.split_by == "task" else index // len(tasks)
    return spec.split_of(position)


def collect(env: Environment, index: int, spec: DatasetSpec, secret: str | None = None) -> Trajectory:
    """Play trajectory ``index`` with the collecting actor (``secret``: see :func:`trajectory_seed`)."""
    tasks = env.tasks
    task = tasks[index % len(tasks)]
    split = split_of_trajectory(env, index, spec)
    seed = trajectory_seed(spec, split, secret)
    rng = random.Random(f"{seed}/actor/{index}")
    observation = env.reset(task)
    turns: list[Turn] = []
    while not env.done:
        action = env.actor_action(rng, spec.epsilon)
        turns.append(Turn(snapshot=env.snapshot(), observation=observation, action=action))
        observation = env.step(action).observation
    return Trajectory(index=index, task=task, split=split, turns=tuple(turns), seed=seed)


def sample_turns(trajectory: Trajectory, spec: DatasetSpec) -> list[Turn]:
    """Up to ``max_states_per_trajectory`` turns, never the last, nor the first unless
    ``spec.sample_first_turn``, in step order."""
    eligible = range(0 if spec.sample_first_turn else 1, len(trajectory.turns) - 1)
    rng = random.Random(f"{trajectory.seed}/sample/{trajectory.index}")
    picked = rng.sample(eligible, min(spec.max_states_per_trajectory, len(eligible)))
    return [trajectory.turns[i] for i in sorted(picked)]


_PNG_CACHE: dict[bytes, bytes] = {}
_PNG_CACHE_BYTES = 64 * 1024 * 1024
_png_cached = [0]  # bytes held by _PNG_CACHE


def encode_png(image: "Image.Image") -> bytes:
    """``image`` as PNG bytes: RGB(A)/L kept, no metadata, zlib level 6 — the same pixels, the same bytes.

    Identical pixels are encoded once (a bounded cache keyed by a digest of the raw pixels).
    """
    if image.mode not in ("RGB", "RGBA", "L"):
        image = image.convert("RGB")
    raw = image.tobytes()
    key = hashlib.blake2b(f"{image.mode}{image.size}".encode() + raw, digest_size=32).digest()
    png = _PNG_CACHE.get(key)
    if png is None:
        buf = io.BytesIO()
        image.save(buf, format="PNG", compress_level=6)
        png = buf.getvalue()
        if _png_cached[0] + len(png) > _PNG_CACHE_BYTES:
            _PNG_CACHE.clear()
            _png_cached[0] = 0
        _PNG_CACHE[key] = png
        _png_cached[0] += len(png)
    return png


def _render(env: Environment, where: str) -> bytes:
    """The PNG of the current state; drawn and encoded once per :meth:`Environment.image_key`."""
    key = env.image_key()
    cache_key = None
    if key is not None:
        cache_key = b"key:" + hashlib.blake2b(repr((env.name, key)).encode(), digest_size=32).digest()
        png = _PNG_CACHE.get(cache_key)
        if png is not None:
            return png
    image = env.observation_image()
    if image is None:
        raise RuntimeError(f"{where}: the spec lists the image modality but {env.name} renders no image")
    png = encode_png(image)
    if cache_key is not None:
        _PNG_CACHE[cache_key] = png  # counted once, by encode_png
    return png


def make_state(
    env: Environment,
    trajectory: Trajectory,
    turn: Turn,
    spec: DatasetSpec,
    images: dict[str, bytes] | None = None,
) -> tuple[schema.State, labelling.StateLabels]:
    """The dataset state of ``turn`` with its candidates, and their labels.

    When ``spec`` lists the image modality, the PNGs of the state and of the candidates' next
    states are put in ``images`` (file name → bytes) and named by the records.
    """
    snap = turn.snapshot
    env.restore(snap)
    if env.observation() != turn.observation:
        raise RuntimeError(f"trajectory {trajectory.index} step {snap.step}: restore changed the observation")
    state_id = f"t{trajectory.index:03d}-s{snap.step:02d}"
    pictures: dict[str, bytes] = {} if images is None else images
    state_image = None
    if spec.images:
        state_image = f"{state_id}.png"
        pictures[state_image] = _render(env, state_id)
    rng = random.Random(f"{trajectory.seed}/candidates/{trajectory.index}/{snap.step}")
    actions = tuple(env.sample_candidates(turn.action, rng))
    if turn.action not in actions:
        raise RuntimeError(f"trajectory {trajectory.index} step {snap.step}: actor action {turn.action!r} not a candidate")

    def at_next(e: Environment) -> tuple[str, bytes | None]:
        """A candidate's next state: its observation and (with images) its PNG."""
        return e.observation(), _render(e, f"{state_id} next state") if spec.images else None

    at_end = (lambda e: _render(e, f"{state_id} rollout end")) if spec.end_images else None
    labels = labelling.label_state(
        env, snap, actions, discount=spec.discount, num_rollouts=spec.num_rollouts, at_end=at_end,
        at_next=at_next, at_snapshot=True,
    )
    candidates = []
    for index, (action, (next_state, png)) in enumerate(zip(actions, labels.next)):
        cand_id = f"{state_id}-a{index}"
        next_image = None
        if png is not None:
            next_image = f"{cand_id}-next.png"
            pictures[next_image] = png
        candidates.append(
            schema.Candidate(
                id=cand_id,
                state_id=state_id,
                index=index,
                action=action,
                next_state=next_state,
                is_actor=action == turn.action,
                next_image=next_image,
            )
        )
    state_end = None
    if spec.end_images:
        state_end = f"{state_id}-end.png"
        pictures[state_end] = labels.v_end
        for i, png in enumerate(labels.q_end):
            candidates[i] = replace(candidates[i], end_image=f"{candidates[i].id}-end.png")
            pictures[f"{candidates[i].id}-end.png"] = png
    state = schema.State(
        id=state_id,
        split=trajectory.split,
        trajectory=trajectory.index,
        step=snap.step,
        task=trajectory.task,
        observation=turn.observation,
        history=snap.history,
        candidates=tuple(candidates),
        image=state_image,
        end_image=state_end,
        task_type=env.task_type(trajectory.task),
    )
    return state, labels


# -- checkpoints ---------------------------------------------------------------------------
def build_key(env: Environment, spec: DatasetSpec, secret: str | None = None) -> str:
    """SHA-256 (hex) naming the work of one build: checkpoint format, environment config and spec
    (and, for a secret test split, a tag derived from the secret, so secrets never share work)."""
    spec_fields = asdict(spec)
    if not spec.sample_first_turn:  # absent when unset, so builds checkpointed before the option still resume
        del spec_fields["sample_first_turn"]
    identity: dict[str, Any] = {
        "checkpoint_format": CHECKPOINT_FORMAT,
        "environment": env.name,
        "reference_policy": env.reference_policy,
        "environment_config": env.config(),
        "spec": spec_fields,
    }
    if spec.secret_test and secret:
        identity["secret_tag"] = hidden.derive(secret, f"{spec.slug}@{spec.version}", "checkpoint").hex()
    return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Labelled:
    """One labelled state as the checkpoint keeps it."""

    state: schema.State
    q: tuple[float, ...]
    v: float
    seconds: float


class Checkpoint:
    """The labelled states of one build, one JSON line each, and their PNGs in ``images/``.

    A line is ``{"state": record with its candidates, "q": [...], "v": ..., "seconds": ...,
    "images": {name: sha256}}``; its PNGs are written (atomically) before the line.
    """

    FILE = "checkpoint.jsonl"

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / self.FILE
        self.image_dir = self.directory / "images"

    @classmethod
    def for_build(
        cls, work_dir: str | Path, env: Environment, spec: DatasetSpec, secret: str | None = None
    ) -> "Checkpoint":
        """The checkpoint of ``spec`` on ``env`` under ``work_dir`` (folder named by :func:`build_key`)."""
        return cls(Path(work_dir) / f"{spec.slug}-{spec.version}-{build_key(env, spec, secret)[:16]}")

    def load(self) -> dict[str, Labelled]:
        """Every readable entry by state id; unreadable lines (and entries whose PNGs are missing
        or differ) are dropped and the file is rewritten without them."""
        if not self.path.is_file():
            return {}
        entries: dict[str, Labelled] = {}
        good: list[bytes] = []
        raw = self.path.read_bytes()
        lines = raw.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                entry = self._parse(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a killed build, or garbage
            if entry is None:
                continue
            entries[entry.state.id] = entry
            good.append(line)
        cleaned = b"".join(line + b"\n" for line in good)
        if cleaned != raw:
            tmp = self.path.with_name(self.FILE + ".tmp")
            tmp.write_bytes(cleaned)
            tmp.replace(self.path)
        return entries

    def _parse(self, rec: dict[str, Any]) -> Labelled | None:
        state_rec = dict(rec["state"])
        candidates = tuple(schema.Candidate(**c) for c in state_rec.pop("candidates"))
        state_rec["history"] = tuple(state_rec["history"])
        state = schema.State(**state_rec, candidates=candidates)
        q = tuple(float(x) for x in rec["q"])
        if len(q) != len(candidates):
            return None
        for name, digest in rec["images"].items():
            path = self.image_dir / name
            if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                return None
        return Labelled(state=state, q=q, v=float(rec["v"]), seconds=float(rec["seconds"]))

    def append(self, entry: Labelled, images: dict[str, bytes]) -> None:
        """Write ``images`` then one line for ``entry`` (flushed to disk)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if images:
            self.image_dir.mkdir(exist_ok=True)
        for name, data in images.items():
            tmp = self.image_dir / f".{name}.tmp"
            tmp.write_bytes(data)
            tmp.replace(self.image_dir / name)
        record = schema._state_record(entry.state)
        record["candidates"] = [schema._candidate_record(c) for c in entry.state.candidates]
        line = {
            "state": record,
            "q": list(entry.q),
            "v": entry.v,
            "seconds": entry.seconds,
            "images": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(images.items())},
        }
        with self.path.open("ab") as fh:
            fh.write(json.dumps(line, sort_keys=True, ensure_ascii=False).encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())

    def remove(self) -> None:
        """Delete the checkpoint folder."""
        shutil.rmtree(self.directory, ignore_errors=True)


def _matches(entry: Labelled, trajectory: Trajectory, turn: Turn) -> bool:
    s = entry.state
    return (s.split, s.task, s.trajectory, s.step, s.observation, s.history) == (
        trajectory.split, trajectory.task, trajectory.index, turn.snapshot.step, turn.observation, turn.snapshot.history
    )


# -- the pipeline --------------------------------------------------------------------------
def build_dataset(
    env: Environment,
    spec: DatasetSpec,
    progress: Progress | None = None,
    checkpoint: Checkpoint | str | Path | None = None,
    secret: str | None = None,
) -> schema.Dataset:
    """Collect, sample, label and split; the returned dataset is validated but not written.

    ``checkpoint``: a :class:`Checkpoint`, or a work directory in which the build keeps its
    checkpoint (:meth:`Checkpoint.for_build`); states found there are not labelled again.
    ``Manifest.build_info`` records the timings (``label``: the labelling time of every state,
    summed over the runs that made them) and how many states were resumed.

    ``secret``: the maintainer's test-split secret for a spec with ``secret_test``; without it
    the test trajectories are skipped (train and dev come out exactly the same).
    """
    report: Progress = progress or (lambda done, total, stage: None)
    hide_test_tasks(env, spec, secret)
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        checkpoint = Checkpoint.for_build(checkpoint, env, spec, secret)
    started = time.perf_counter()

    skip_test = spec.secret_test and not secret
    report(0, spec.num_trajectories, "collect")
    trajectories = []
    for i in range(spec.num_trajectories):
        if not (skip_test and split_of_trajectory(env, i, spec) == "test"):
            trajectories.append(collect(env, i, spec, secret))
        report(i + 1, spec.num_trajectories, "collect")
    sampled = [(t, turn) for t in trajectories for turn in sample_turns(t, spec)]
    collected = time.perf_counter()

    saved = checkpoint.load() if checkpoint is not None else {}
    ids = [f"t{t.index:03d}-s{turn.snapshot.step:02d}" for t, turn in sampled]
    reuse = {sid for sid, (t, turn) in zip(ids, sampled) if sid in saved and _matches(saved[sid], t, turn)}
    images: dict[str, bytes] = {}
    done = len(reuse)
    report(done, len(sampled), "label")
    entries: list[Labelled] = []
    labelled_now = 0
    for sid, (trajectory, turn) in zip(ids, sampled):
        if sid in reuse:
            entries.append(saved[sid])
            continue
        t0 = time.perf_counter()
        pictures: dict[str, bytes] = {}
        state, labels = make_state(env, trajectory, turn, spec, pictures)
        entry = Labelled(state=state, q=tuple(labels.q), v=labels.v, seconds=round(time.perf_counter() - t0, 3))
        if checkpoint is not None:
            checkpoint.append(entry, pictures)
        else:
            images.update(pictures)
        entries.append(entry)
        labelled_now += 1
        done += 1
        report(done, len(sampled), "label")
    labelled = time.perf_counter()

    states = [e.state for e in entries]
    q_labels = {c.id: q for e in entries for c, q in zip(e.state.candidates, e.q)}
    v_labels = {e.state.id: e.v for e in entries}
    has_images = any(s.image or any(c.next_image for c in s.candidates) for s in states)
    modalities = [m for m in spec.modalities if m != "image"] + (["image"] if has_images else [])
    label_seconds = sum(e.seconds for e in entries)
    manifest = schema.Manifest(
        slug=spec.slug,
        name=spec.name,
        version=spec.version,
        environment=env.name,
        description=spec.description,
        modalities=modalities,
        labelling={
            "reference_policy": env.reference_policy,
            "discount": spec.discount,
            "num_rollouts": spec.num_rollouts,
            "aggregation": labelling.AGGREGATION,
            "horizon": env.horizon,
            "horizon_counted_from": "episode start",
        },
        config={"environment": env.config(), "collection": spec.config()},
        build_info={
            "timings_s": {
                "collect": round(collected - started, 3),
                "label": round(label_seconds, 3),
                "total": round(collected - started + label_seconds, 3),
            },
            "this_run_s": round(labelled - started, 3),
            "states_resumed": len(reuse),
            "states_labelled": labelled_now,
            **({"test_split": "not built: no secret"} if skip_test else {}),
        },
    )
    ds_images = schema.ImageFolder(checkpoint.image_dir) if checkpoint is not None else images
    ds = schema.Dataset(manifest=manifest, states=states, q_labels=q_labels, v_labels=v_labels, images=ds_images,
                        secret=secret if spec.secret_test else None)
    ds.validate()
    return ds


FROZENLAKE_SPLIT_CYCLE: tuple[str, ...] = ("train", "dev", "train", "test", "train")
"""``frozenlake-8x8@1.1`` and ``1.2``: map ``j`` goes to ``FROZENLAKE_SPLIT_CYCLE[j % 5]`` (train 3 : dev 1 : test 1)."""


def frozenlake_8x8() -> tuple[Environment, DatasetSpec]:
    """``frozenlake-8x8@1.2``: ``1.1``'s train and dev exactly, a test split drawn from the maintainer's
    secret (four secret maps, secret RNG seeds), and goal images for every point."""
    env, spec = frozenlake_8x8_v1_1()
    return env, replace(
        spec,
        version="1.2",
        description=(
            "Gymnasium FrozenLake 8×8 (is_slippery=False), 20 maps; 100 trajectories (5 per map) of at most 30 "
            "steps by a shortest-path actor with ε=0.1 uniform noise; up to 5 states per trajectory (not the first "
            "or last turn); all 4 moves as candidates. Labels: restore the state, force the candidate, follow the "
            "shortest-path policy until the 30-step horizon (counted from the episode start); reward 1 at the goal, "
            "γ=0.95. Observation: the ASCII grid with @ for the agent and a 512×512 RGB drawing of it for every state "
            "and candidate next state, plus goal images: the drawing of the final state of the reference rollout "
            "from every state and candidate. Map j goes to (train, dev, train, test, train)[j mod 5]: the 12 train "
            "and 4 dev maps (generate_random_map seeds 42–61 at their positions) and their states are those of 1.1, "
            "byte for byte; the 4 test maps and the test trajectories' random draws come from the maintainer's "
            "secret, so the test split cannot be rebuilt from public information. Supersedes 1.1."
        ),
        secret_test=True,
        end_images=True,
    )


def frozenlake_8x8_v1_1() -> tuple[Environment, DatasetSpec]:
    """``frozenlake-8x8@1.1`` (superseded by 1.2, whose test split is secret; kept so that it can be
    rebuilt with its fingerprint): 20 random maps split by map into train/dev/test, text and 512×512 images."""
    env = FrozenLake(map_seeds=tuple(range(42, 62)), size=8, horizon=30)
    spec = DatasetSpec(
        slug="frozenlake-8x8",
        name="FrozenLake 8×8",
        version="1.1",
        description=(
            "Gymnasium FrozenLake 8×8 (is_slippery=False) on 20 random maps (generate_random_map seeds 42–61). "
            "100 trajectories (5 per map) of at most 30 steps by a shortest-path actor with ε=0.1 uniform noise; up "
            "to 5 states per trajectory (not the first or last turn); all 4 moves as candidates. Labels: restore the "
            "state, force the candidate, follow the shortest-path policy until the 30-step horizon (counted from the "
            "episode start); reward 1 at the goal, γ=0.95. Observation: the ASCII grid with @ for the agent, and a "
            "512×512 RGB drawing of the same grid for every state and every candidate's next state. Train, dev and "
            "test hold disjoint maps: map j goes to (train, dev, train, test, train)[j mod 5], so 12 maps train, 4 "
            "dev and 4 test. Supersedes 1.0, whose dev and test shared maps."
        ),
        modalities=("text", "image"),
        num_trajectories=100,
        max_states_per_trajectory=5,
        epsilon=0.1,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
        split_cycle=FROZENLAKE_SPLIT_CYCLE,
    )
    return env, spec


def frozenlake_8x8_v1_0() -> tuple[Environment, DatasetSpec]:
    """``frozenlake-8x8@1.0`` (superseded by 1.1; kept so that it can be rebuilt with its fingerprint).

    Deterministic 8×8 FrozenLake on the 8 random maps of seeds 42..49, text only, dev and test
    alternating by trajectory within each map (so both splits share every map).
    """
    env = FrozenLake(map_seeds=MAP_SEEDS, size=8, horizon=30)
    spec = DatasetSpec(
        slug="frozenlake-8x8",
        name="FrozenLake 8×8",
        version="1.0",
        description=(
            "Gymnasium FrozenLake 8×8 (is_slippery=False) on 8 random maps (generate_random_map seeds 42–49). "
            "50 trajectories of at most 30 steps by a shortest-path actor with ε=0.1 uniform noise; up to 5 "
            "states per trajectory (not the first or last turn); all 4 moves as candidates. Labels: restore "
            "the state, force the candidate, follow the shortest-path policy until the 30-step horizon "
            "(counted from the episode start); reward 1 at the goal, γ=0.95. Observation: the ASCII grid with "
            "@ for the agent. Dev and test alternate by trajectory within each map."
        ),
        modalities=("text",),
        num_trajectories=50,
        max_states_per_trajectory=5,
        epsilon=0.1,
        seed=42,
        discount=0.95,
        num_rollouts=1,
    )
    return env, spec


def alfworld_text() -> tuple[Environment, DatasetSpec]:
    """``alfworld-pick-place@1.1``: ``1.0``'s train and dev exactly, and a test split of 10 scenes drawn
    from the maintainer's secret (ids ``hidden-{position}``, floorplan and scene seed from the secret)."""
    env, spec = alfworld_text_v1_0()
    return env, replace(
        spec,
        version="1.1",
        description=spec.description.replace(
            "Train, dev and test hold disjoint scenes (scene j goes to split j mod 3).",
            "Train, dev and test hold disjoint scenes (scene j goes to split j mod 3). Train and dev are those of "
            "1.0, byte for byte; the 10 test scenes (ids hidden-j) and the test trajectories' random draws come from "
            "the maintainer's secret, so the test split cannot be rebuilt from public information. Supersedes 1.0.",
        ),
        secret_test=True,
    )


def alfworld_text_v1_0() -> tuple[Environment, DatasetSpec]:
    """``alfworld-pick-place@1.0`` (superseded by 1.1, whose test split is secret; kept so that it can be
    rebuilt with its fingerprint): ALFWorld text ``pick_and_place_simple`` on 30 generated scenes.

    30 scenes × 2 trajectories × up to 3 states give about 60 points per split, so every split
    clears the 50-point minimum of the global correlations.
    """
    from qval.envs.alfworld import ALFWorld, choose_scenes  # TextWorld + fast-downward: imported when used

    env = ALFWorld(choose_scenes(30, seed=0), horizon=40)
    spec = DatasetSpec(
        slug="alfworld-pick-place",
        name="ALFWorld pick & place (text)",
        version="1.0",
        description=(
            "ALFWorld (text) pick_and_place_simple games generated from the FloorPlan layouts the alfworld 0.4.2 "
            "wheel ships: 30 scenes on distinct floorplans (scene seed 0), played in TextWorld's PDDL engine. 60 "
            "trajectories (2 per scene) of at most 40 steps by ALFWorld's handcoded expert with ε=0.2 random "
            "admissible commands; up to 3 states per trajectory (not the first or last turn); candidates: the "
            "actor's command and 3 other admissible commands. Labels: restore the state, force the candidate, follow "
            "the handcoded expert until the 40-step horizon (counted from the episode start); reward 1 when the goal "
            "holds, γ=0.95. Observation: the scene description and task, the last command and its feedback, and the "
            "admissible commands. Train, dev and test hold disjoint scenes (scene j goes to split j mod 3)."
        ),
        modalities=("text",),
        num_trajectories=60,
        max_states_per_trajectory=3,
        epsilon=0.2,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
    )
    return env, spec


ALFWORLD_SCENES_PER_TYPE = 21
"""``alfworld-all-types``: scenes of each task type (a multiple of 3: each split gets a third of each type)."""

ALFWORLD_ALL_TYPES_SCENES: tuple[tuple[int, int, str], ...] = (
    (313, 528894, "pick_and_place_simple"), (15, 86872, "pick_and_place_simple"), (429, 241648, "pick_and_place_simple"),
    (309, 247312, "look_at_obj_in_light"), (205, 383698, "look_at_obj_in_light"), (320, 474881, "look_at_obj_in_light"),
    (5, 215741, "pick_clean_then_place_in_recep"), (423, 909043, "pick_clean_then_place_in_recep"), (424, 98365, "pick_clean_then_place_in_recep"),
    (23, 802887, "pick_heat_then_place_in_recep"), (8, 688509, "pick_heat_then_place_in_recep"), (7, 50872, "pick_heat_then_place_in_recep"),
    (21, 926886, "pick_cool_then_place_in_recep"), (12, 215869, "pick_cool_then_place_in_recep"), (24, 947392, "pick_cool_then_place_in_recep"),
    (317, 673827, "pick_two_obj_and_place"), (321, 245788, "pick_two_obj_and_place"), (416, 915319, "pick_two_obj_and_place"),
    (301, 90238, "pick_and_place_simple"), (413, 339875, "pick_and_place_simple"), (307, 678695, "pick_and_place_simple"),
    (327, 977539, "look_at_obj_in_light"), (215, 352128, "look_at_obj_in_light"), (319, 905660, "look_at_obj_in_light"),
    (407, 61779, "pick_clean_then_place_in_recep"), (6, 853328, "pick_clean_then_place_in_recep"), (23, 638609, "pick_clean_then_place_in_recep"),
    (16, 801724, "pick_heat_then_place_in_recep"), (21, 834584, "pick_heat_then_place_in_recep"), (13, 188462, "pick_heat_then_place_in_recep"),
    (3, 609502, "pick_cool_then_place_in_recep"), (16, 51943, "pick_cool_then_place_in_recep"), (28, 779189, "pick_cool_then_place_in_recep"),
    (23, 105508, "pick_two_obj_and_place"), (229, 596964, "pick_two_obj_and_place"), (415, 772132, "pick_two_obj_and_place"),
    (27, 904897, "pick_and_place_simple"), (207, 590186, "pick_and_place_simple"), (221, 826708, "pick_and_place_simple"),
    (304, 715646, "look_at_obj_in_light"), (302, 733433, "look_at_obj_in_light"), (324, 383108, "look_at_obj_in_light"),
    (405, 409238, "pick_clean_then_place_in_recep"), (412, 872157, "pick_clean_then_place_in_recep"), (429, 736372, "pick_clean_then_place_in_recep"),
    (10, 407359, "pick_heat_then_place_in_recep"), (12, 739608, "pick_heat_then_place_in_recep"), (28, 767023, "pick_heat_then_place_in_recep"),
    (20, 280741, "pick_cool_then_place_in_recep"), (13, 86874, "pick_cool_then_place_in_recep"), (15, 300529, "pick_cool_then_place_in_recep"),
    (413, 310190, "pick_two_obj_and_place"), (217, 42460, "pick_two_obj_and_place"), (408, 497153, "pick_two_obj_and_place"),
    (415, 758195, "pick_and_place_simple"), (16, 340539, "pick_and_place_simple"), (3, 716025, "pick_and_place_simple"),
    (323, 676633, "look_at_obj_in_light"), (225, 342302, "look_at_obj_in_light"), (328, 678431, "look_at_obj_in_light"),
    (415, 403100, "pick_clean_then_place_in_recep"), (15, 851769, "pick_clean_then_place_in_recep"), (420, 901784, "pick_clean_then_place_in_recep"),
    (25, 251128, "pick_heat_then_place_in_recep"), (20, 76016, "pick_heat_then_place_in_recep"), (14, 157567, "pick_heat_then_place_in_recep"),
    (26, 21720, "pick_cool_then_place_in_recep"), (11, 816971, "pick_cool_then_place_in_recep"), (2, 625272, "pick_cool_then_place_in_recep"),
    (20, 953221, "pick_two_obj_and_place"), (206, 202633, "pick_two_obj_and_place"), (226, 258166, "pick_two_obj_and_place"),
    (227, 304903, "pick_and_place_simple"), (320, 294310, "pick_and_place_simple"), (304, 16195, "pick_and_place_simple"),
    (305, 848392, "look_at_obj_in_light"), (314, 71686, "look_at_obj_in_light"), (216, 56127, "look_at_obj_in_light"),
    (29, 466607, "pick_clean_then_place_in_recep"), (410, 620835, "pick_clean_then_place_in_recep"), (426, 379315, "pick_clean_then_place_in_recep"),
    (27, 989124, "pick_heat_then_place_in_recep"), (9, 733914, "pick_heat_then_place_in_recep"), (2, 528122, "pick_heat_then_place_in_recep"),
    (4, 446173, "pick_cool_then_place_in_recep"), (22, 984011, "pick_cool_then_place_in_recep"), (19, 697670, "pick_cool_then_place_in_recep"),
    (424, 559983, "pick_two_obj_and_place"), (16, 794952, "pick_two_obj_and_place"), (221, 820235, "pick_two_obj_and_place"),
    (206, 715126, "pick_and_place_simple"), (29, 17854, "pick_and_place_simple"), (11, 695342, "pick_and_place_simple"),
    (210, 426839, "look_at_obj_in_light"), (303, 908950, "look_at_obj_in_light"), (224, 509745, "look_at_obj_in_light"),
    (21, 871903, "pick_clean_then_place_in_recep"), (417, 684909, "pick_clean_then_place_in_recep"), (27, 475178, "pick_clean_then_place_in_recep"),
    (26, 966221, "pick_heat_then_place_in_recep"), (6, 930738, "pick_heat_then_place_in_recep"), (29, 427331, "pick_heat_then_place_in_recep"),
    (30, 641818, "pick_cool_then_place_in_recep"), (6, 730082, "pick_cool_then_place_in_recep"), (18, 929250, "pick_cool_then_place_in_recep"),
    (414, 245791, "pick_two_obj_and_place"), (13, 916983, "pick_two_obj_and_place"), (1, 213602, "pick_two_obj_and_place"),
    (323, 117701, "pick_and_place_simple"), (407, 862242, "pick_and_place_simple"), (13, 905504, "pick_and_place_simple"),
    (308, 397409, "look_at_obj_in_light"), (317, 238437, "look_at_obj_in_light"), (218, 706885, "look_at_obj_in_light"),
    (411, 489814, "pick_clean_then_place_in_recep"), (419, 952501, "pick_clean_then_place_in_recep"), (406, 888711, "pick_clean_then_place_in_recep"),
    (15, 510723, "pick_heat_then_place_in_recep"), (19, 146923, "pick_heat_then_place_in_recep"), (4, 739773, "pick_heat_then_place_in_recep"),
    (27, 474045, "pick_cool_then_place_in_recep"), (25, 700964, "pick_cool_then_place_in_recep"), (8, 376030, "pick_cool_then_place_in_recep"),
    (18, 774638, "pick_two_obj_and_place"), (330, 903047, "pick_two_obj_and_place"), (208, 83743, "pick_two_obj_and_place"),
)
"""``alfworld-all-types``' scenes ``(floorplan, seed, task type)``: ``qval.envs.alfworld.choose_typed_scenes(21,
seed=0, solved_within=30)`` (whose expert check plays every candidate scene, minutes), pinned."""


def alfworld_all_types() -> tuple[Environment, DatasetSpec]:
    """``alfworld-all-types@1.1``: ``1.0``'s scenes, sizes and splits with images — a schematic render of the
    simulator state for every state and candidate next state (:meth:`qval.envs.alfworld.ALFWorld.observation_image`),
    and goal images (the final state of every label's reference rollout)."""
    env, spec = alfworld_all_types_v1_0()
    return env, replace(
        spec,
        name="ALFWorld all task types (text and schematic images)",
        version="1.1",
        description=spec.description.replace(
            "every state names its task type.",
            "every state names its task type. Image: a schematic render of the simulator state, not THOR's "
            "egocentric camera (AI2-THOR cannot run here): a 512×512 drawing, made with PIL from the PDDL facts "
            "the engine holds, of the task line, the receptacle the agent stands at (a closed one as a shut door, "
            "nothing of its contents drawn; an open one or a surface with the objects in or on it), what the agent "
            "holds, each object with the states 'examine' reports (hot, cold, clean, sliced; a lamp on or off), and "
            "the room's receptacles by class and number with the current one highlighted; nothing a text agent "
            "could not know (no hidden contents, no goal flag). For every state and candidate next state, plus goal "
            "images: the render of the final state of the reference rollout from every state and candidate.",
        ).replace(
            "so the test split cannot be rebuilt from public information.",
            "so the test split cannot be rebuilt from public information. Train and dev have 1.0's states, "
            "candidates and labels; the test scenes are drawn for this version. Supersedes 1.0 (text only).",
        ),
        modalities=("text", "image"),
        end_images=True,
    )


def alfworld_all_types_v1_0() -> tuple[Environment, DatasetSpec]:
    """``alfworld-all-types@1.0`` (superseded by 1.1, which adds images; kept so that it can be rebuilt with its
    fingerprint): ALFWorld's six task types (QVal's ``all-types``) on generated scenes, text only, the test
    split's scenes drawn from the maintainer's secret.

    21 scenes per type × 2 trajectories × up to 3 states give up to 252 points per split (7 scenes of
    each type per split), so the test split clears 200 points.
    """
    from qval.envs.alfworld import TASK_TYPES, ALFWorld  # TextWorld + fast-downward: imported when used

    per_type = ALFWORLD_SCENES_PER_TYPE
    env = ALFWorld(ALFWORLD_ALL_TYPES_SCENES, horizon=50, solved_within=30)
    spec = DatasetSpec(
        slug="alfworld-all-types",
        name="ALFWorld all task types (text)",
        version="1.0",
        description=(
            "ALFWorld (text) games of its six task types (" + ", ".join(TASK_TYPES) + f"), {per_type} scenes of "
            "each, generated from the FloorPlan layouts the alfworld 0.4.2 wheel ships (distinct floorplans within "
            "a type; heat and cool in kitchens with a microwave or fridge, clean where there is a sink basin, look "
            "in the light where a desk lamp stands; only games ALFWorld's handcoded expert solves within 30 "
            "steps: choose_typed_scenes(21, seed=0, solved_within=30)), played in TextWorld's PDDL engine. "
            f"{2 * per_type * len(TASK_TYPES)} trajectories (2 per scene) of at most 50 steps by ALFWorld's "
            "handcoded expert with ε=0.2 random admissible commands; up to 3 states per trajectory (not the first "
            "or last turn); candidates: the actor's command and 3 other admissible commands. Labels: restore the "
            "state, force the candidate, follow the handcoded expert until the 50-step horizon (counted from the "
            "episode start); reward 1 when the goal holds, γ=0.95. The expert is told of a put as 'put' (alfworld "
            "0.4.2's expert tracks puts by that word while its commands say 'move'; without it no pick-two game is "
            "ever finished). Observation: the scene description and task, the last command and its feedback, and "
            "the admissible commands; every state names its task type. Train, dev and test hold disjoint scenes "
            "(scene j goes to split j mod 3, listed in blocks of three of one type, so every split has a third of "
            "each type); the test scenes (ids hidden-j, of the same types, also "
            "solved by the expert within 30 steps) and the test trajectories' random draws "
            "come from the maintainer's secret, so the test split cannot be rebuilt from public information."
        ),
        modalities=("text",),
        num_trajectories=2 * per_type * len(TASK_TYPES),
        max_states_per_trajectory=3,
        epsilon=0.2,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
        secret_test=True,
    )
    return env, spec


MINIWOB_TASKS: tuple[str, ...] = (
    "login-user",
    "enter-password",
    "click-checkboxes",
    "use-spinner",
    "click-option",
    "enter-text-2",
)
"""``miniwob@1.1``'s MiniWoB task names: those of :data:`qval.envs.miniwob.TASK_NAMES` whose collected
trajectories have middle turns (the others are solved in two actions and give no state)."""

MINIWOB_SPLIT_CYCLE: tuple[str, ...] = ("dev", "test", "train", "train", "dev", "test")
"""Task ``j`` goes to ``MINIWOB_SPLIT_CYCLE[j % 6]``: with the tasks listed seed-major, one MiniWoB task
name per position, so dev = login-user + click-option, test = enter-password + enter-text-2, train =
click-checkboxes + use-spinner (about the same number of states each)."""


MINIWOB_2_TASKS: tuple[str, ...] = (
    "enter-text",
    "enter-text-2",
    "enter-text-dynamic",
    "login-user",
    "login-user-popup",
    "enter-password",
    "click-checkboxes",
    "click-option",
    "use-spinner",
    "enter-date",
    "enter-time",
    "form-sequence-2",
    "multi-orderings",
    "multi-layouts",
    "click-tab-2",
    "click-tab-2-hard",
)
"""``miniwob@2.0``'s MiniWoB task names: those of :data:`qval.envs.miniwob.TASK_NAMES` whose goal changes with
the seed (Best-of-N draws instances whose goal is none of the dataset's, so click-button-sequence and read-table-2,
whose goal never changes, and find-word, with 14 goals, are left out).  Sixteen, not a multiple of 3: with the
tasks listed seed-major, name ``i`` with seed ``s`` is task ``16 s + i``, in split ``(s + i) mod 3``, so every name
is in every split."""

MINIWOB_2_SEEDS = 14
"""``miniwob@2.0``: BrowserGym seeds of each task name (0–13; the test positions' seeds come from the secret)."""


def miniwob() -> tuple[Environment, DatasetSpec]:
    """``miniwob@2.0``: 16 MiniWoB++ task names × 14 seeds, every name in every split (split by task:
    task ``j`` goes to ``(train, dev, test)[j mod 3]``), the test instances drawn from the maintainer's
    secret, the first turn sampled too (most tasks take two actions), the goal drawn above every image.

    Size: 224 trajectories, 74 of them test (4–5 instances of each name).  Measured (64 trajectories, every
    name on seeds 0–3, collected with these settings on 2026-11-27): 1.77 sampled states per
    trajectory (two-action tasks 1, multi-orderings and multi-layouts nearly 3), so about 400 states, about
    130 of them test.  Labelling a state costs about 14 s with images on an idle 2-core machine
    (``miniwob@1.2``'s builds) and collecting a trajectory a few seconds, so the build takes about 100
    minutes (about 55 at the 7 s a state that faster restores aim at); resume makes it safe to interrupt.
    """
    from qval.envs.miniwob import MiniWoB  # BrowserGym + Playwright: imported when used

    names, seeds = MINIWOB_2_TASKS, MINIWOB_2_SEEDS
    env = MiniWoB(task_names=names, seeds=range(seeds), horizon=12, goal_banner=True, name_as_task_type=True)
    spec = DatasetSpec(
        slug="miniwob",
        name="MiniWoB++ (BrowserGym)",
        version="2.0",
        description=(
            f"MiniWoB++ through BrowserGym 0.14.3 (miniwob 1.1.0 pages, Debian's headless Chromium): {len(names)} "
            "tasks (" + ", ".join(names) + ") whose goal changes with the instance, most solved in two to five "
            f"actions; instances from BrowserGym reset seeds 0–{seeds - 1}. {seeds * len(names)} trajectories (one "
            "per task and seed) of at most 12 steps by a scripted policy per task (reads the goal, the accessibility "
            "tree and, where the tree hides it, the page: field values, hidden tab panels, field labels) with "
            "ε=0.25 random candidate actions; up to 3 states per trajectory, drawn among every turn but the last "
            "(the first turn is sampled too, so two-action tasks give a state). Candidates: the actor's action and 3 "
            "others among click on the interactive (set-of-marks) elements and fill of the text, date and time "
            "fields with the goal's quoted strings and the policy's own text. Labels: restore the state "
            "(reset(seed) and replay), force the candidate, follow the scripted policy until the 12-step horizon "
            "(counted from the episode start); reward 1 when MiniWoB's raw reward is positive, γ=0.95. The scripted "
            "policy is optimal except on click-checkboxes, where MiniWoB also counts a submit with more right boxes "
            "than wrong as a success, so an early submit can score above it; the labels are those of the scripted "
            "policy. Observation: the goal and BrowserGym's flattened accessibility tree with element ids; image: "
            "the goal written in a banner above the screenshot (BrowserGym empties MiniWoB's own goal box) with "
            "set-of-marks ids, for every state and candidate next state, and goal images (the final screenshot of "
            "the reference rollout from every state and candidate). Split by task: task j (listed seed-major, so "
            f"name i with seed s is task {len(names)}s + i) goes to (train, dev, test)[j mod 3]; with {len(names)} "
            "names every name is in every split, on different instances; every state names its MiniWoB task as its "
            "task type. The test instances (ids "
            "'{task}:hidden-{position}') use BrowserGym seeds derived from the maintainer's secret, and so do the "
            "test trajectories' random draws. Size: a full collection sampled 396 states (1.77 per trajectory; "
            "74 of the 224 trajectories are test ones, so about 130 test points). Supersedes 1.2 (6 tasks, about 20 test points)."
        ),
        modalities=("text", "image"),
        num_trajectories=seeds * len(names),
        max_states_per_trajectory=3,
        epsilon=0.25,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
        secret_test=True,
        end_images=True,
        sample_first_turn=True,
    )
    if len(names) % len(spec.cycle) == 0:
        raise ValueError("miniwob@2.0's task names must not be a multiple of the split cycle, so that every name "
                         "reaches every split")
    return env, spec


def miniwob_v1_2() -> tuple[Environment, DatasetSpec]:
    """``miniwob@1.2`` (superseded by 2.0; kept so that it can be rebuilt with its fingerprint): ``1.1``'s
    train and dev exactly, a test split whose instances (BrowserGym seeds) come from the maintainer's
    secret, and goal images for every point."""
    env, spec = miniwob_v1_1()
    return env, replace(
        spec,
        version="1.2",
        description=spec.description.replace(
            "Supersedes 1.0 (no train split, about 20 states).",
            "Goal images: the screenshot of the final state of the reference rollout from every state and "
            "candidate. Train and dev are those of 1.1 (goal images aside); the test tasks' instances (ids "
            "'{task}:hidden-{position}') use BrowserGym seeds derived from the maintainer's secret, and so do the "
            "test trajectories' random draws. Supersedes 1.1 (public test seeds) and 1.0.",
        ),
        secret_test=True,
        end_images=True,
    )


def miniwob_v1_1() -> tuple[Environment, DatasetSpec]:
    """``miniwob@1.1`` (superseded by 1.2, whose test split is secret; kept so that it can be rebuilt with
    its fingerprint): six multi-step MiniWoB++ tasks through BrowserGym in Debian's Chromium, split by task."""
    from qval.envs.miniwob import MiniWoB  # BrowserGym + Playwright: imported when used

    seeds = 16
    env = MiniWoB(task_names=MINIWOB_TASKS, seeds=range(seeds), horizon=12)
    spec = DatasetSpec(
        slug="miniwob",
        name="MiniWoB++ (BrowserGym)",
        version="1.1",
        description=(
            "MiniWoB++ through BrowserGym 0.14.3 (miniwob 1.1.0 pages, Debian's headless Chromium): 6 tasks that "
            "need two or more actions (" + ", ".join(MINIWOB_TASKS) + f"), instances from BrowserGym reset seeds "
            f"0–{seeds - 1}. {seeds * len(MINIWOB_TASKS)} trajectories (one per task and seed) of at most 12 steps by "
            "a scripted optimal policy with ε=0.25 random candidate actions; up to 4 states per trajectory (not the "
            "first or last turn); candidates: the actor's action and 3 others among click on the interactive "
            "(set-of-marks) elements and fill of the text fields with the goal's strings. Labels: restore the state "
            "(reset(seed) and replay), force the candidate, follow the scripted policy until the 12-step horizon "
            "(counted from the episode start); reward 1 on MiniWoB success, γ=0.95. Observation: the goal and "
            "BrowserGym's flattened accessibility tree with element ids; image: the screenshot with set-of-marks "
            "ids, for every state and candidate next state. Train, dev and test hold disjoint MiniWoB tasks (dev: "
            "login-user, click-option; test: enter-password, enter-text-2; train: click-checkboxes, use-spinner). "
            "Size: chosen so that the build takes about 30 minutes (labelling a state replays it in the browser "
            "five times, about 14 s a state on an idle 2-core machine), which gives roughly 30–40 states per split "
            "— fewer than the 50 pairs the global correlations need, so on this version they may be reported as "
            "insufficient and the per-state ranking is the main measure. Supersedes 1.0 (no train split, about 20 "
            "states)."
        ),
        modalities=("text", "image"),
        num_trajectories=seeds * len(MINIWOB_TASKS),
        max_states_per_trajectory=4,
        epsilon=0.25,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
        split_cycle=MINIWOB_SPLIT_CYCLE,
    )
    if len(MINIWOB_TASKS) % len(spec.cycle):
        raise ValueError("MiniWoB task names must be a multiple of the split cycle so that split_by='task' keeps names apart")
    return env, spec


TERMINAL_TRAJECTORIES_PER_TASK = 2
"""``terminalbench-lite@1.1``: trajectories of each of its 60 tasks (every task file twice; about 2.07 states per
trajectory in 1.0's collection: about 124 test points over the 30 files, 62 train and 62 dev)."""

TERMINAL_SPLIT_CYCLE: tuple[str, ...] = ("train", "dev") * 15 + ("test",) * 30
"""``terminalbench-lite@1.1``: task ``j`` goes to ``TERMINAL_SPLIT_CYCLE[j % 60]``: the first copy of the 30 files
alternates train and dev (file-name order), the second copy, every file with secret parameters, is the test split."""


def terminalbench_lite() -> tuple[Environment, DatasetSpec]:
    """``terminalbench-lite@1.1``: 30 shell tasks of Terminal-Bench's easy-tier kinds, every command run in a
    podman sandbox; train and dev hold 15 task files each with their default parameters, the test split every
    one of the 30 files with parameters drawn from the maintainer's secret."""
    from qval.envs.terminal import KINDS, Terminal  # podman and the terminal image: needed when used

    env = Terminal(copies=2)
    files = len(env.templates)
    per_task = TERMINAL_TRAJECTORIES_PER_TASK
    spec = DatasetSpec(
        slug="terminalbench-lite",
        name="TerminalBench-lite (shell tasks, text)",
        version="1.1",
        description=(
            f"{files} shell tasks written for QVal in Terminal-Bench's layout (an instruction, a scripted "
            "solution, tests that decide success), of the easy tier's kinds (" + ", ".join(KINDS) + "), each "
            "command run in a fresh podman container (scripts/build-terminal-image.sh: Debian bookworm's bash, "
            "coreutils, git, tar, gzip, python3; no network, memory, CPU and pids limits, an unprivileged user) on "
            f"the task's /app. Every task file is played twice: its default parameters (train and dev: "
            f"{files // 2} files each, alternating in file-name order) and parameters drawn from the maintainer's "
            f"secret (the test split: all {files} files, ids hidden-j, such as other file names, ports and "
            f"versions). {per_task * len(env.tasks)} trajectories ({per_task} per task) of at most {env.horizon} "
            "steps by the scripted solution with ε=0.3 random candidate commands; up to 3 states per trajectory "
            "(not the first or last turn); candidates: the actor's command, the reference command and 2 others "
            "among the solution step after it, near misses, harmful and neutral commands and a premature submit. "
            "Reward 1 when the task's tests pass at submit (which ends the episode). Labels: restore the state (a "
            "tar of /app), force the candidate, follow the scripted solution (the next solution step not yet run, "
            "then submit; no repair step) until the horizon (counted from the episode start), γ=0.95. "
            "Observation: the instruction and every command so far with its output. The test trajectories' random "
            "draws come from the secret too. Supersedes 1.0 (split by file: 10 files per split)."
        ),
        modalities=("text",),
        num_trajectories=per_task * len(env.tasks),
        max_states_per_trajectory=3,
        epsilon=0.3,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
        split_cycle=TERMINAL_SPLIT_CYCLE,
        secret_test=True,
    )
    if len(env.tasks) != len(TERMINAL_SPLIT_CYCLE):
        raise ValueError(f"the split cycle covers {len(TERMINAL_SPLIT_CYCLE)} tasks, the environment lists {len(env.tasks)}")
    return env, spec


def terminalbench_lite_v1_0() -> tuple[Environment, DatasetSpec]:
    """``terminalbench-lite@1.0`` (superseded by 1.1, whose test split plays every task file; kept so that it can be
    rebuilt with its fingerprint): 30 shell tasks split by file, the test files' parameters drawn from the secret."""
    from qval.envs.terminal import KINDS, Terminal  # podman and the terminal image: needed when used

    env = Terminal()
    per_task = 7
    spec = DatasetSpec(
        slug="terminalbench-lite",
        name="TerminalBench-lite (shell tasks, text)",
        version="1.0",
        description=(
            f"{len(env.tasks)} shell tasks written for QVal in Terminal-Bench's layout (an instruction, a scripted "
            "solution, tests that decide success), of the easy tier's kinds (" + ", ".join(KINDS) + "), each "
            "command run in a fresh podman container (scripts/build-terminal-image.sh: Debian bookworm's bash, "
            "coreutils, git, tar, gzip, python3; no network, memory, CPU and pids limits, an unprivileged user) on "
            f"the task's /app. {per_task * len(env.tasks)} trajectories ({per_task} per task) of at most "
            f"{env.horizon} steps by the scripted solution with ε=0.3 random candidate commands; up to 3 states per "
            "trajectory (not the first or last turn); candidates: the actor's command, the reference command and "
            "2 others among the solution step after it, near misses, harmful and neutral commands and a "
            "premature submit. Reward 1 when the task's tests pass at submit (which ends the episode). Labels: "
            "restore the state (a tar of /app), force the candidate, follow the scripted solution (the next "
            "solution step not yet run, then submit; no repair step) until the horizon (counted from the episode "
            "start), γ=0.95. Observation: the instruction and every command so far with its output. Train, dev "
            "and test hold disjoint tasks (task j goes to split j mod 3); the test tasks (ids hidden-j: the task "
            "file of that position with parameter values, such as file names and ports, drawn from the "
            "maintainer's secret) and the test trajectories' random draws come from the secret."
        ),
        modalities=("text",),
        num_trajectories=per_task * len(env.tasks),
        max_states_per_trajectory=3,
        epsilon=0.3,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("train", "dev", "test"),
        split_by="task",
        secret_test=True,
    )
    return env, spec


BUILDERS: dict[str, Callable[[], tuple[Environment, DatasetSpec]]] = {
    "frozenlake": frozenlake_8x8,
    "alfworld": alfworld_text,
    "alfworld-all-types": alfworld_all_types,
    "miniwob": miniwob,
    "terminalbench-lite": terminalbench_lite,
}
"""Dataset name → a function returning its environment and spec."""

VERSIONS: dict[str, Callable[[], tuple[Environment, DatasetSpec]]] = {
    "frozenlake-8x8@1.2": frozenlake_8x8,
    "frozenlake-8x8@1.1": frozenlake_8x8_v1_1,
    "frozenlake-8x8@1.0": frozenlake_8x8_v1_0,
    "alfworld-pick-place@1.1": alfworld_text,
    "alfworld-pick-place@1.0": alfworld_text_v1_0,
    "alfworld-all-types@1.1": alfworld_all_types,
    "alfworld-all-types@1.0": alfworld_all_types_v1_0,
    "miniwob@2.0": miniwob,
    "miniwob@1.2": miniwob_v1_2,
    "miniwob@1.1": miniwob_v1_1,
    "terminalbench-lite@1.1": terminalbench_lite,
    "terminalbench-lite@1.0": terminalbench_lite_v1_0,
}
"""Every dataset version a builder makes (``slug@version`` → builder), the superseded ones included: what a
loaded dataset's environment is looked up by (:func:`builder_for`, :func:`qval.learned.methods.environment_for`)."""

REFRESH_MARK = "-r"
"""What separates a version from its refresh number: ``1.2-r3`` is the third fresh hidden split of ``1.2``."""


def refreshed(spec: DatasetSpec, refresh: int) -> DatasetSpec:
    """``spec`` with fresh hidden split number ``refresh`` (0: ``spec`` itself): version ``<version>-r<refresh>``.

    The test tasks and the test trajectories' random draws are HMAC derivations of the secret keyed by
    ``slug@version`` (:func:`hide_test_tasks`, :func:`trajectory_seed`), so a new version is a new hidden
    split; train and dev do not depend on the version and come out identical (their fingerprints too).
    Only a spec with ``secret_test`` has a split to refresh."""
    if refresh == 0:
        return spec
    if refresh < 0 or not spec.secret_test:
        raise ValueError(f"{spec.slug}@{spec.version}: only a secret test split is refreshed (refresh {refresh})")
    return replace(spec, version=f"{spec.version}{REFRESH_MARK}{refresh}", description=(
        f"{spec.description} Fresh hidden split number {refresh} of {spec.slug}@{spec.version}: the same train "
        f"and dev splits, a test split drawn anew from the maintainer's secret (the earlier one's information "
        f"budget was spent or its time was up)."))


def split_version(version: str) -> tuple[str, int]:
    """``(base version, refresh number)`` of a version: ``("1.2", 3)`` for ``1.2-r3``, ``("1.2", 0)`` for ``1.2``."""
    base, mark, number = version.rpartition(REFRESH_MARK)
    if mark and base and number.isdigit() and int(number) > 0:
        return base, int(number)
    return version, 0


def builder_for(key: str) -> Callable[[], tuple[Environment, DatasetSpec]] | None:
    """The builder of dataset ``slug@version`` (:data:`VERSIONS`, a fresh hidden split's included), or ``None``."""
    slug, _, version = key.partition("@")
    base, refresh = split_version(version)
    make = VERSIONS.get(f"{slug}@{base}")
    if make is None or refresh == 0:
        return make

    def make_refreshed() -> tuple[Environment, DatasetSpec]:
        env, spec = make()
        return env, refreshed(spec, refresh)

    return make_refreshed


def builder_name(key: str) -> str | None:
    """The name in :data:`BUILDERS` that builds dataset ``slug@version``'s base version now (``None`` for a
    superseded or unknown version): the one a fresh hidden split of it is built with."""
    slug, _, version = key.partition("@")
    base = f"{slug}@{split_version(version)[0]}"
    return next((name for name, make in BUILDERS.items() if VERSIONS.get(base) is make), None)


def build(
    name: str,
    out_dir: str | Path,
    progress: Progress | None = None,
    work_dir: str | Path | None = None,
    secret: str | None = None,
    refresh: int = 0,
) -> schema.Dataset:
    """Build the dataset ``name`` (a key of :data:`BUILDERS`), write it to ``out_dir``, return it.

    ``secret``: the maintainer's test-split secret (:mod:`qval.hidden`); a dataset whose test
    split is secret is built without its test split when it is ``None``.  ``refresh``: build fresh
    hidden split number ``refresh`` instead (:func:`refreshed`: a new version, same train and dev).

    ``work_dir``: where the build keeps its checkpoint (:class:`Checkpoint`, in a folder keyed
    by the spec and environment config), so that rerunning an interrupted build labels only the
    states it had not labelled yet; the checkpoint is removed once the dataset is written.
    Without it nothing is kept and an interrupted build starts over.

    The returned dataset's ``manifest.fingerprint`` is set (by :meth:`schema.Dataset.write`) and
    its images (if any) are read from ``out_dir/images``.
    """
    if name not in BUILDERS:
        raise KeyError(f"unknown dataset {name!r}; choose one of {', '.join(BUILDERS)}")
    env, spec = BUILDERS[name]()
    try:
        spec = refreshed(spec, refresh)
        hide_test_tasks(env, spec, secret)
        checkpoint = Checkpoint.for_build(work_dir, env, spec, secret) if work_dir is not None else None
        ds = build_dataset(env, spec, progress, checkpoint, secret)
        ds.write(out_dir)
        if checkpoint is not None:
            checkpoint.remove()
    finally:
        env.close()
    return ds

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

The engine knows no environment: each dataset version (its spec and the adapter it is built in) is declared
in its environment's folder and found through :mod:`qval.envs.registry`.
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

Builder = Callable[[], "tuple[Environment, DatasetSpec]"]
"""What a dataset is built from: a callable returning a new environment and the spec to build in it (a registered
dataset version, :class:`qval.envs.entry.DatasetVersion`, is one)."""

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


def build(
    builder: Builder,
    out_dir: str | Path,
    progress: Progress | None = None,
    work_dir: str | Path | None = None,
    secret: str | None = None,
    refresh: int = 0,
) -> schema.Dataset:
    """Build what ``builder`` makes (an environment and a spec: a registered one is
    :func:`qval.envs.registry.builder`), write it to ``out_dir``, return it.

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
    env, spec = builder()
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

"""Build a QVal dataset: collect trajectories, sample states, label candidates, split.

The pipeline (:func:`build_dataset`) uses only the :class:`~qval.envs.base.Environment`
interface, so every environment is built the same way:

1. **Collect.**  Trajectory ``i`` plays task ``env.tasks[i % len(env.tasks)]`` with the
   collecting actor (:meth:`~qval.envs.base.Environment.actor_action`: the reference policy
   with ε-uniform noise) until the episode is done.  Its RNG is
   ``random.Random(f"{seed}/actor/{i}")``.
2. **Sample.**  A *turn* is a state in which the actor acted.  The first and the last turn
   are never sampled; among the others up to ``max_states_per_trajectory`` are drawn
   without replacement by ``random.Random(f"{seed}/sample/{i}")`` (all of them when there
   are fewer) and kept in step order.
3. **Candidates.**  :meth:`~qval.envs.base.Environment.sample_candidates` of the state with
   ``random.Random(f"{seed}/candidates/{trajectory}/{step}")`` (FrozenLake: all four moves,
   no draw; ALFWorld: the actor's action and three other admissible commands), the actor's
   own action marked ``is_actor``; ``next_state`` is the observation after restoring the
   state and forcing the candidate.
4. **Labels.**  :func:`qval.labelling.label_state` (Max-Value Monte Carlo under the reference
   policy).
5. **Split.**  Whole trajectories, never states.  ``split_by="trajectory"`` (default): the
   ``n``-th trajectory of each task goes to ``splits[n % len(splits)]`` (dev, test, dev, …),
   so every task appears in every split.  ``split_by="task"``: task ``j`` (in
   ``env.tasks`` order) and all its trajectories go to ``splits[j % len(splits)]``, so no task
   appears in two splits.

Ids: state ``t{trajectory:03d}-s{step:02d}``, candidate ``{state id}-a{index}``.
A build is deterministic: the same spec and environment give the same fingerprint; the
build timings go to ``Manifest.build_info``, which the fingerprint leaves out.

:data:`BUILDERS` names the datasets :func:`build` can make.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from qval import labelling, schema
from qval.envs.base import Environment, Snapshot
from qval.envs.frozenlake import MAP_SEEDS, FrozenLake

SPLIT_RULES = {
    "trajectory": "the n-th trajectory of each task goes to splits[n % len(splits)]",
    "task": "task j (in the environment's task order) and all its trajectories go to splits[j % len(splits)]",
}
"""``DatasetSpec.split_by`` → the rule recorded in ``Manifest.config``."""

Progress = Callable[[int, int, str], None]
"""``progress(done, total, stage)``: called at the start of a stage and after each item."""


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

    def __post_init__(self) -> None:
        if self.split_by not in SPLIT_RULES:
            raise ValueError(f"split_by must be one of {', '.join(SPLIT_RULES)}, got {self.split_by!r}")

    def config(self) -> dict[str, Any]:
        """The collection settings recorded in ``Manifest.config``."""
        return {
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


def collect(env: Environment, index: int, spec: DatasetSpec) -> Trajectory:
    """Play trajectory ``index`` with the collecting actor."""
    tasks = env.tasks
    task = tasks[index % len(tasks)]
    rng = random.Random(f"{spec.seed}/actor/{index}")
    observation = env.reset(task)
    turns: list[Turn] = []
    while not env.done:
        action = env.actor_action(rng, spec.epsilon)
        turns.append(Turn(snapshot=env.snapshot(), observation=observation, action=action))
        observation = env.step(action).observation
    position = tasks.index(task) if spec.split_by == "task" else index // len(tasks)
    split = spec.splits[position % len(spec.splits)]
    return Trajectory(index=index, task=task, split=split, turns=tuple(turns))


def sample_turns(trajectory: Trajectory, spec: DatasetSpec) -> list[Turn]:
    """Up to ``max_states_per_trajectory`` turns, never the first or the last, in step order."""
    middle = range(1, len(trajectory.turns) - 1)
    rng = random.Random(f"{spec.seed}/sample/{trajectory.index}")
    picked = rng.sample(middle, min(spec.max_states_per_trajectory, len(middle)))
    return [trajectory.turns[i] for i in sorted(picked)]


def make_state(
    env: Environment, trajectory: Trajectory, turn: Turn, spec: DatasetSpec
) -> tuple[schema.State, labelling.StateLabels]:
    """The dataset state of ``turn`` with its candidates, and their labels."""
    snap = turn.snapshot
    env.restore(snap)
    if env.observation() != turn.observation:
        raise RuntimeError(f"trajectory {trajectory.index} step {snap.step}: restore changed the observation")
    rng = random.Random(f"{spec.seed}/candidates/{trajectory.index}/{snap.step}")
    actions = tuple(env.sample_candidates(turn.action, rng))
    if turn.action not in actions:
        raise RuntimeError(f"trajectory {trajectory.index} step {snap.step}: actor action {turn.action!r} not a candidate")
    state_id = f"t{trajectory.index:03d}-s{snap.step:02d}"
    candidates = []
    for index, action in enumerate(actions):
        env.restore(snap)
        candidates.append(
            schema.Candidate(
                id=f"{state_id}-a{index}",
                state_id=state_id,
                index=index,
                action=action,
                next_state=env.step(action).observation,
                is_actor=action == turn.action,
            )
        )
    state = schema.State(
        id=state_id,
        split=trajectory.split,
        trajectory=trajectory.index,
        step=snap.step,
        task=trajectory.task,
        observation=turn.observation,
        history=snap.history,
        candidates=tuple(candidates),
    )
    labels = labelling.label_state(env, snap, actions, discount=spec.discount, num_rollouts=spec.num_rollouts)
    return state, labels


def build_dataset(env: Environment, spec: DatasetSpec, progress: Progress | None = None) -> schema.Dataset:
    """Collect, sample, label and split; the returned dataset is validated but not written."""
    report: Progress = progress or (lambda done, total, stage: None)
    started = time.perf_counter()

    report(0, spec.num_trajectories, "collect")
    trajectories = []
    for i in range(spec.num_trajectories):
        trajectories.append(collect(env, i, spec))
        report(i + 1, spec.num_trajectories, "collect")
    sampled = [(t, turn) for t in trajectories for turn in sample_turns(t, spec)]
    collected = time.perf_counter()

    report(0, len(sampled), "label")
    states: list[schema.State] = []
    q_labels: dict[str, float] = {}
    v_labels: dict[str, float] = {}
    for done, (trajectory, turn) in enumerate(sampled, 1):
        state, labels = make_state(env, trajectory, turn, spec)
        states.append(state)
        q_labels.update((c.id, q) for c, q in zip(state.candidates, labels.q))
        v_labels[state.id] = labels.v
        report(done, len(sampled), "label")
    labelled = time.perf_counter()

    manifest = schema.Manifest(
        slug=spec.slug,
        name=spec.name,
        version=spec.version,
        environment=env.name,
        description=spec.description,
        modalities=list(spec.modalities),
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
                "label": round(labelled - collected, 3),
                "total": round(labelled - started, 3),
            }
        },
    )
    ds = schema.Dataset(manifest=manifest, states=states, q_labels=q_labels, v_labels=v_labels)
    ds.validate()
    return ds


def frozenlake_8x8() -> tuple[Environment, DatasetSpec]:
    """``frozenlake-8x8@1.0``: deterministic 8×8 FrozenLake on the 8 random maps of seeds 42..49."""
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
    """``alfworld-pick-place@1.0``: ALFWorld text ``pick_and_place_simple`` on 30 generated scenes.

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


def miniwob() -> tuple[Environment, DatasetSpec]:
    """``miniwob@1.0``: ten multi-step MiniWoB++ tasks through BrowserGym in Debian's Chromium."""
    from qval.envs.miniwob import TASK_NAMES, MiniWoB  # BrowserGym + Playwright: imported when used

    env = MiniWoB(task_names=TASK_NAMES, seeds=range(2), horizon=12)
    spec = DatasetSpec(
        slug="miniwob",
        name="MiniWoB++ (BrowserGym)",
        version="1.0",
        description=(
            "MiniWoB++ through BrowserGym 0.14.3 (miniwob 1.1.0 pages, Debian's headless Chromium): 10 tasks that "
            "need two or more actions (" + ", ".join(TASK_NAMES) + "), instances from BrowserGym reset seeds 0 "
            "and 1. 20 trajectories (one per task and seed) of at most 12 steps by a scripted optimal policy with "
            "ε=0.25 random candidate actions; up to 2 states per trajectory (not the first or last turn); "
            "candidates: the actor's action and 3 others among click on the interactive (set-of-marks) elements and "
            "fill of the text fields with the goal's strings. Labels: restore the state (reset(seed) and replay), "
            "force the candidate, follow the scripted policy until the 12-step horizon (counted from the episode "
            "start); reward 1 on MiniWoB success, γ=0.95. Observation: the goal and BrowserGym's flattened "
            "accessibility tree with element ids (image: the screenshot with set-of-marks ids). Dev and test hold "
            "disjoint MiniWoB tasks (the j-th task name goes to split j mod 2)."
        ),
        modalities=("text", "image"),
        num_trajectories=20,
        max_states_per_trajectory=2,
        epsilon=0.25,
        seed=42,
        discount=0.95,
        num_rollouts=1,
        splits=("dev", "test"),
        split_by="task",
    )
    if len(TASK_NAMES) % len(spec.splits):
        raise ValueError("MiniWoB task names must be a multiple of the splits so that split_by='task' keeps names apart")
    return env, spec


BUILDERS: dict[str, Callable[[], tuple[Environment, DatasetSpec]]] = {
    "frozenlake": frozenlake_8x8,
    "alfworld": alfworld_text,
    "miniwob": miniwob,
}
"""Dataset name → a function returning its environment and spec."""


def build(name: str, out_dir: str | Path, progress: Progress | None = None) -> schema.Dataset:
    """Build the dataset ``name`` (a key of :data:`BUILDERS`), write it to ``out_dir``, return it.

    The returned dataset's ``manifest.fingerprint`` is set (by :meth:`schema.Dataset.write`).
    """
    if name not in BUILDERS:
        raise KeyError(f"unknown dataset {name!r}; choose one of {', '.join(BUILDERS)}")
    env, spec = BUILDERS[name]()
    ds = build_dataset(env, spec, progress)
    ds.write(out_dir)
    return ds

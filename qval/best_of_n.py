"""The Best-of-N track: does a method's Q-alignment pay off when its scores choose the actions?

On tasks of its own (:func:`environment`, :func:`episode_tasks`) a fixed set of seeded episodes is
played (:func:`run_episodes`).  The track never plays the dataset's scored tasks: its tasks sit at
the test split's positions (so they are the same kind of task, e.g. the same MiniWoB pages) but are
instances drawn from the maintainer's secret under a key of their own
(``HMAC(secret, "<slug>@<version>/best-of-n/<task>/<draw>")``, :mod:`qval.hidden`), and a draw whose
instance (:meth:`~qval.envs.base.Environment.instance`: the FrozenLake map, the ALFWorld scene and
task, the MiniWoB goal) is that of any task of the dataset, any split, is drawn again.  Every
observation shows its instance, so no episode state is a state of the dataset: a Best-of-N record
says nothing about a hidden label.  In every state of an episode:

1. the dataset's collecting actor (:meth:`~qval.envs.base.Environment.actor_action`, the
   reference policy with the dataset's ε noise) proposes its action, and the environment's
   candidate sampler (:meth:`~qval.envs.base.Environment.sample_candidates`) adds others; of
   those the actor's action and ``n - 1`` others drawn by the same RNG are kept, in the
   sampler's order (:func:`propose`);
2. a :data:`Picker` scores the candidates and the first best-scored one is taken (NaN scores
   never win; all NaN: the actor's action);
3. the episode continues from the state the chosen action leads to.

The RNG of step ``t`` of episode ``i`` is ``random.Random(f"{seed}/best-of-n/{i}/{t}")`` and a
picker's own draws come from ``random.Random(f"{seed}/best-of-n/{i}/{t}/pick")``, so every picker
sees the same candidates in the same state, and a run is reproducible under its seed.  Episode
``i`` plays ``tasks[i % len(tasks)]``.

Pickers: :data:`BUILTIN_PICKERS` -- ``oracle`` (the reference Q-value of each candidate by the
labeller's rollout, :func:`qval.labelling.q_value`), ``random`` (uniform) and ``base`` (the
actor's own choice) --, any registered method of :mod:`qval.methods.registry`
(:func:`method_picker`) and any ``score`` callable (:func:`score_picker`).  The reference policy
itself is the baseline :data:`REFERENCE` (no candidates: it acts).

Stepping (:data:`STEPPINGS`): ``restore`` returns to the state after scoring (and inside the
oracle's rollouts) with the adapter's direct restore; ``replay`` uses plain snapshots, which the
adapters restore by resetting and replaying the history (``benchmarks/best_of_n.py`` compares
the two).  Both play the same episodes.

An episode's success is a positive undiscounted reward sum (FrozenLake: the goal; ALFWorld and
MiniWoB: the task solved); its return is discounted with the dataset's discount, as the labels.
:func:`summarise` gives the success rate and mean return with 95% bootstrap CIs over episodes,
:func:`gain` a picker's paired difference to another's.  Django-free.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from qval import build, hidden, labelling, metrics, schema
from qval.envs import registry
from qval.envs.base import Environment, Snapshot

DATASET_SLUGS: dict[str, str] = registry.best_of_n()
"""The datasets (builders of :mod:`qval.envs.registry`) whose environments the track plays, and their slugs: each
environment folder names its own (:attr:`qval.envs.entry.EnvironmentEntry.best_of_n`)."""
ENVIRONMENTS: tuple[str, ...] = tuple(DATASET_SLUGS)

STEPPINGS: tuple[str, ...] = ("restore", "replay")
REFERENCE = "reference"
"""The baseline in which the reference policy acts (no candidates, no picker)."""
BASELINES: tuple[str, ...] = ("base", "random", REFERENCE, "oracle")
"""What every method's Best-of-N result is shown against."""
MAX_DRAWS = 100
"""Draws of one Best-of-N task before :func:`environment` gives up (a draw showing a dataset instance is redrawn)."""


class BestOfNError(ValueError):
    """A run that cannot be played as asked (unknown environment or picker, missing secret...)."""


@dataclass(frozen=True)
class Turn:
    """What a picker gets in one state: the environment (in that state), its snapshot and the candidates."""

    env: Environment
    snapshot: Snapshot
    episode: int
    candidates: tuple[str, ...]
    actor_action: str
    rng: random.Random
    """The picker's own RNG (:func:`step_rng` ``/pick``)."""
    discount: float


Picker = Callable[[Turn], Sequence[float]]
"""Scores for ``turn.candidates`` (same order; NaN: unscored).  May move the environment."""


@dataclass(frozen=True)
class StepRecord:
    """One step of an episode: the candidates, their scores, the index chosen and the reward."""

    step: int
    observation: str
    candidates: tuple[str, ...]
    scores: tuple[float | None, ...]
    chosen: int
    reward: float

    @property
    def action(self) -> str:
        """The action taken."""
        return self.candidates[self.chosen]

    @property
    def candidate_scores(self) -> list[tuple[str, float | None]]:
        """``(candidate, score)`` pairs, in candidate order."""
        return list(zip(self.candidates, self.scores))


@dataclass(frozen=True)
class Episode:
    """One played episode."""

    index: int
    task: str
    steps: tuple[StepRecord, ...]
    discounted_return: float
    success: bool

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (:meth:`from_json` reads it back)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Episode:
        """The episode :meth:`to_json` wrote."""
        steps = tuple(
            StepRecord(step=int(s["step"]), observation=str(s["observation"]), candidates=tuple(s["candidates"]),
                       scores=tuple(s["scores"]), chosen=int(s["chosen"]), reward=float(s["reward"]))
            for s in data["steps"]
        )
        return cls(index=int(data["index"]), task=str(data["task"]), steps=steps,
                   discounted_return=float(data["discounted_return"]), success=bool(data["success"]))


@dataclass(frozen=True)
class Setting:
    """What fixes a run's episodes: environment, tasks, actor ε, discount, N, seed and count."""

    environment: str
    tasks: tuple[str, ...]
    epsilon: float
    discount: float
    n: int
    seed: int
    num_episodes: int
    stepping: str = "restore"

    def __post_init__(self) -> None:
        if self.n < 2:
            raise BestOfNError(f"n must be at least 2 candidates, got {self.n}")
        if self.num_episodes < 1:
            raise BestOfNError(f"num_episodes must be positive, got {self.num_episodes}")
        if not self.tasks:
            raise BestOfNError(f"{self.environment}: no Best-of-N tasks to play")
        if self.stepping not in STEPPINGS:
            raise BestOfNError(f"stepping must be one of {', '.join(STEPPINGS)}, got {self.stepping!r}")

    def task_of(self, episode: int) -> str:
        """The task episode ``episode`` plays."""
        return self.tasks[episode % len(self.tasks)]


# -- environments ------------------------------------------------------------------------
def environment(name: str, secret: str | None, *,
                builder: build.Builder | None = None
                ) -> tuple[Environment, build.DatasetSpec]:
    """The environment and spec of dataset ``name`` (:data:`ENVIRONMENTS`) with its Best-of-N tasks drawn from
    ``secret`` (the maintainer's test-split secret; module docstring): at each test position, the first draw
    whose instance is none of the dataset's tasks' (train, dev and the secret test split).  ``builder`` stands in
    for the registered builder ``name`` (the same environment with fewer tasks, where every reset costs seconds)."""
    if name not in ENVIRONMENTS:
        raise BestOfNError(f"unknown environment {name!r}; expected one of {', '.join(ENVIRONMENTS)}")
    env, spec = (builder or registry.builder(name))()
    if not spec.secret_test:
        raise BestOfNError(f"{spec.slug}@{spec.version}: its test split is public, so Best-of-N has no secret tasks")
    if not secret:
        raise BestOfNError(f"{spec.slug}@{spec.version}: Best-of-N tasks come from the test-split secret, which is not set")
    build.hide_test_tasks(env, spec, secret)
    key = f"{spec.slug}@{spec.version}"
    drawn = _DRAWS.get((name, key, secret, builder))
    if drawn is None:
        drawn = _DRAWS[name, key, secret, builder] = _draw_tasks(env, key, secret)
    else:
        env.hide_tasks(drawn)
    return env, spec


_DRAWS: dict[tuple[str, str, str, build.Builder | None], dict[str, int]] = {}
"""The seeds :func:`_draw_tasks` chose, by environment, dataset version, secret and builder: deterministic, and
reading every task's instance costs a reset each (ALFWorld's 40 resets, half a minute; MiniWoB's browser resets),
so a worker draws once and its later runs hide the same seeds."""


def _draw_tasks(env: Environment, key: str, secret: str) -> dict[str, int]:
    """Draw each of ``env``'s test positions again under Best-of-N's own key until its instance is none of the
    dataset's tasks' (train, dev and the secret test split); return the seed each was hidden with."""
    dataset = {_instance(env, task) for task in env.tasks}
    drawn: dict[str, int] = {}
    for task in episode_tasks(env):
        for draw in range(MAX_DRAWS):
            drawn[task] = hidden.derive_seed(secret, key, "best-of-n", task, draw)
            env.hide_tasks({task: drawn[task]})
            if _instance(env, task) not in dataset:
                break
        else:
            raise BestOfNError(f"{key}: {MAX_DRAWS} draws of Best-of-N task {task} all showed a dataset instance")
    return drawn


def _instance(env: Environment, task: str) -> str:
    """The instance task ``task`` plays (:meth:`~qval.envs.base.Environment.instance`)."""
    env.reset(task)
    return env.instance()


def episode_tasks(env: Environment) -> tuple[str, ...]:
    """The tasks Best-of-N plays in ``env`` (from :func:`environment`): the secret-drawn ones, in the environment's order."""
    return tuple(t for t in env.tasks if t in env.hidden)


def setting_for(name: str, env: Environment, spec: build.DatasetSpec, *, n: int, seed: int, num_episodes: int,
                stepping: str = "restore") -> Setting:
    """The :class:`Setting` of ``env`` (from :func:`environment`): its Best-of-N tasks, actor ε and discount."""
    return Setting(environment=name, tasks=episode_tasks(env), epsilon=spec.epsilon, discount=spec.discount, n=n,
                   seed=seed, num_episodes=num_episodes, stepping=stepping)


def step_rng(seed: int, episode: int, step: int, suffix: str = "") -> random.Random:
    """The RNG of step ``step`` of episode ``episode`` (``suffix="/pick"``: the picker's)."""
    return random.Random(f"{seed}/best-of-n/{episode}/{step}{suffix}")


def propose(env: Environment, rng: random.Random, epsilon: float, n: int) -> tuple[str, tuple[str, ...]]:
    """The actor's action and the ``n`` candidates of the current state (module docstring, step 1)."""
    actor = env.actor_action(rng, epsilon)
    pool = env.sample_candidates(actor, rng)
    others = [a for a in pool if a != actor]
    kept = set(rng.sample(others, min(n - 1, len(others)))) | {actor}
    return actor, tuple(a for a in pool if a in kept)


def _snapshot(env: Environment, stepping: str) -> Snapshot:
    """The adapter's own snapshot (``restore``) or a plain one that restores by replay (``replay``)."""
    return env.snapshot() if stepping == "restore" else Snapshot(task=env.task, history=env.history)


def best_index(scores: Sequence[float | None], fallback: int) -> int:
    """The first index of the highest finite score; ``fallback`` when none is finite."""
    finite = [(s, i) for i, s in enumerate(scores) if s is not None and math.isfinite(s)]
    if not finite:
        return fallback
    top = max(s for s, _ in finite)
    return min(i for s, i in finite if s == top)


def play_episode(env: Environment, setting: Setting, index: int, picker: Picker | None) -> Episode:
    """Play episode ``index`` of ``setting`` with ``picker`` (``None``: the reference policy acts)."""
    task = setting.task_of(index)
    env.reset(task)
    records: list[StepRecord] = []
    total, weight, reward_sum = 0.0, 1.0, 0.0
    while not env.done:
        step = env.steps
        observation = env.observation()
        if picker is None:
            candidates: tuple[str, ...] = (env.reference_action(),)
            scores: tuple[float | None, ...] = (1.0,)
            chosen = 0
        else:
            snapshot = _snapshot(env, setting.stepping)
            actor, candidates = propose(env, step_rng(setting.seed, index, step), setting.epsilon, setting.n)
            turn = Turn(env=env, snapshot=snapshot, episode=index, candidates=candidates, actor_action=actor,
                        rng=step_rng(setting.seed, index, step, "/pick"), discount=setting.discount)
            raw = list(picker(turn))
            if len(raw) != len(candidates):
                raise BestOfNError(f"episode {index} step {step}: picker gave {len(raw)} scores for {len(candidates)} candidates")
            scores = tuple(None if s is None or not math.isfinite(float(s)) else float(s) for s in raw)
            chosen = best_index(scores, candidates.index(actor))
            if env.history != snapshot.history or env.done:  # the picker moved the environment
                env.restore(snapshot)
        reward = env.step(candidates[chosen]).reward
        records.append(StepRecord(step=step, observation=observation, candidates=candidates, scores=scores,
                                  chosen=chosen, reward=reward))
        total += weight * reward
        weight *= setting.discount
        reward_sum += reward
    return Episode(index=index, task=task, steps=tuple(records), discounted_return=total, success=reward_sum > 0)


def run_episodes(env: Environment, setting: Setting, picker: Picker | None, *, done: Iterable[int] = (),
                 on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
    """Play every episode of ``setting`` not in ``done`` (resume), calling ``on_episode`` after each; return them."""
    skip = set(done)
    played = []
    for index in range(setting.num_episodes):
        if index in skip:
            continue
        episode = play_episode(env, setting, index, picker)
        played.append(episode)
        if on_episode is not None:
            on_episode(episode)
    return played


def replay_episode(env: Environment, setting: Setting, episode: Episode) -> None:
    """Replay a recorded episode's chosen actions from the start of its task; raise :class:`BestOfNError`
    at the first step whose observation, candidates or reward differ from the record."""
    if episode.task != setting.task_of(episode.index):
        raise BestOfNError(f"episode {episode.index} played {episode.task!r}, the setting gives {setting.task_of(episode.index)!r}")
    env.reset(episode.task)
    for record in episode.steps:
        if env.observation() != record.observation:
            raise BestOfNError(f"episode {episode.index} step {record.step}: the observation differs from the record")
        if not set(record.candidates) <= set(env.candidates()):
            raise BestOfNError(f"episode {episode.index} step {record.step}: a recorded candidate is not available")
        reward = env.step(record.action).reward
        if reward != record.reward:
            raise BestOfNError(f"episode {episode.index} step {record.step}: reward {reward}, recorded {record.reward}")
    if not env.done:
        raise BestOfNError(f"episode {episode.index}: the record ends after {len(episode.steps)} steps, the episode goes on")


# -- pickers -----------------------------------------------------------------------------
def oracle_picker(turn: Turn) -> list[float]:
    """The reference Q-value of each candidate (the labeller's rollout under the reference policy)."""
    return [labelling.q_value(turn.env, turn.snapshot, a, discount=turn.discount) for a in turn.candidates]


def random_picker(turn: Turn) -> list[float]:
    """Uniform random scores (a uniformly random choice)."""
    return [turn.rng.random() for _ in turn.candidates]


def base_picker(turn: Turn) -> list[float]:
    """1 for the actor's own action, 0 for the others: the base policy."""
    return [1.0 if a == turn.actor_action else 0.0 for a in turn.candidates]


BUILTIN_PICKERS: dict[str, Picker] = {"oracle": oracle_picker, "random": random_picker, "base": base_picker}


def turn_states(turn: Turn, *, one_state: bool) -> list[schema.State]:
    """The dataset states of a turn: one state with every candidate (``one_state``, for ranking methods), or
    one state per candidate with that candidate as the actor's (pointwise methods score actor candidates).

    Candidate ids are ``bon-e{episode}-s{step}-a{index}``; next states come from restoring the turn's state
    and taking the candidate.
    """
    env, snap = turn.env, turn.snapshot
    env.restore(snap)
    observation = env.observation()
    sid = f"bon-e{turn.episode:03d}-s{snap.step:02d}"
    next_states = []
    for action in turn.candidates:
        env.restore(snap)
        next_states.append(env.step(action).observation)
    env.restore(snap)

    def candidate(i: int, state_id: str, is_actor: bool) -> schema.Candidate:
        return schema.Candidate(id=f"{sid}-a{i}", state_id=state_id, index=0 if not one_state else i,
                                action=turn.candidates[i], next_state=next_states[i], is_actor=is_actor)

    def state(state_id: str, candidates: tuple[schema.Candidate, ...]) -> schema.State:
        return schema.State(id=state_id, split="test", trajectory=turn.episode, step=snap.step, task=snap.task,
                            observation=observation, history=snap.history, candidates=candidates)

    if one_state:
        return [state(sid, tuple(candidate(i, sid, a == turn.actor_action) for i, a in enumerate(turn.candidates)))]
    return [state(f"{sid}-c{i}", (candidate(i, f"{sid}-c{i}", True),)) for i in range(len(turn.candidates))]


ScoreStates = Callable[[list[schema.State]], Mapping[str, float]]
"""Scores by candidate id for the given states (what a learned method's ``score`` provides)."""


def score_picker(score: ScoreStates, *, one_state: bool = True) -> Picker:
    """A picker that scores a turn's candidates with ``score`` on :func:`turn_states`."""

    def pick(turn: Turn) -> list[float]:
        states = turn_states(turn, one_state=one_state)
        scores = score(states)
        sid = f"bon-e{turn.episode:03d}-s{turn.snapshot.step:02d}"
        return [float(scores.get(f"{sid}-a{i}", math.nan)) for i in range(len(turn.candidates))]

    return pick


def method_picker(name: str, dataset: schema.Dataset, backbone: str, *, seed: int = 0, cache_dir: Any = None,
                  options: dict[str, Any] | None = None, dataset_dir: Any = None) -> Picker:
    """A picker that runs registered method ``name`` (target ``q``) on each turn's states.

    Ranking methods get one state with every candidate; pointwise methods one state per candidate.
    ``dataset`` (and ``dataset_dir``, for methods that read its files) gives the method its environment
    texts (its manifest); the states are the turn's.
    Text methods only: the track renders no images.
    """
    from pathlib import Path

    from qval.methods.registry import MethodContext, MethodError, get_method

    spec = get_method(name)
    if spec.modality != "text":
        raise MethodError(f"{name} reads images; the Best-of-N track scores text methods")
    if not spec.supports("q"):
        raise MethodError(f"{name} scores {', '.join(spec.targets)}, not candidates (target q)")

    def score(states: list[schema.State]) -> Mapping[str, float]:
        ctx = MethodContext(dataset=dataset, split="test", target="q", points=states, backbone=backbone, seed=seed,
                            cache_dir=Path(cache_dir) if cache_dir else None, options=dict(options or {}),
                            dataset_dir=Path(dataset_dir) if dataset_dir else None)
        return spec.run(ctx).scores

    return score_picker(score, one_state="ranking" in spec.targets)


# -- statistics --------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """An estimate and its 95% bootstrap interval."""

    value: float
    low: float
    high: float

    @property
    def has_bounds(self) -> bool:
        """Whether the interval is defined (no bound is NaN: some resample gave a value)."""
        return math.isfinite(self.low) and math.isfinite(self.high)


@dataclass(frozen=True)
class Summary:
    """Success rate and mean discounted return of a set of episodes, with 95% bootstrap CIs."""

    episodes: int
    success: Interval
    mean_return: Interval
    extra: dict[str, Any] = field(default_factory=dict)


def _bootstrap(values: np.ndarray, seed: int, resamples: int) -> Interval:
    """Mean of ``values`` and the 2.5/97.5 percentiles of its resampled means."""
    means = metrics.bootstrap(lambda draws: values[draws.idx].mean(axis=1), len(values), resamples, seed)
    return Interval(float(values.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5)))


def summarise(episodes: Sequence[Episode], *, seed: int = 0, resamples: int = 1000) -> Summary:
    """Success rate and mean return of ``episodes`` with 95% bootstrap CIs (episodes resampled, seeded)."""
    if not episodes:
        raise BestOfNError("no episodes to summarise")
    success = np.array([float(e.success) for e in episodes])
    returns = np.array([e.discounted_return for e in episodes])
    return Summary(episodes=len(episodes), success=_bootstrap(success, seed, resamples),
                   mean_return=_bootstrap(returns, seed, resamples))


def gain(episodes: Sequence[Episode], baseline: Sequence[Episode], *, seed: int = 0,
         resamples: int = 1000) -> Interval:
    """Success-rate gain of ``episodes`` over ``baseline``, paired by episode index, with a 95% bootstrap CI."""
    base = {e.index: e for e in baseline}
    shared = sorted(e.index for e in episodes if e.index in base)
    if not shared:
        raise BestOfNError("no episode index is shared with the baseline")
    mine = {e.index: e for e in episodes}
    diffs = np.array([float(mine[i].success) - float(base[i].success) for i in shared])
    return _bootstrap(diffs, seed, resamples)


def rank_correlation(x: Sequence[float], y: Sequence[float], *, seed: int = 0, resamples: int = 1000
                     ) -> Interval | None:
    """Spearman ρ of ``x`` and ``y`` (one pair per method) with a 95% bootstrap CI over methods;
    ``None`` with fewer than three pairs, or when one side is the same for every method (ρ is undefined).
    Resamples whose ρ is undefined (a constant side) are skipped; with none left the bounds are NaN."""
    from scipy.stats import spearmanr

    xs, ys = np.asarray(x, float), np.asarray(y, float)
    if len(xs) < 3 or np.ptp(xs) == 0 or np.ptp(ys) == 0:
        return None
    rho = float(spearmanr(xs, ys).statistic)
    resampled = metrics.bootstrap(metrics.spearman_resampler(xs, ys), len(xs), resamples, seed)
    values = resampled[~np.isnan(resampled)]
    if not values.size:
        return Interval(rho, math.nan, math.nan)
    return Interval(rho, float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5)))

"""The environment adapter interface used by the labeller and the dataset builder.

:mod:`qval.labelling` and :mod:`qval.build` talk to environments only through
:class:`Environment`, so a new environment (FrozenLake now; ALFWorld, MiniWoB later) is
added by writing one adapter.

Conventions every adapter follows:

* **Actions are text.**  An action is identified by the text an agent would read and emit
  (FrozenLake: ``"move left"``); the adapter maps it to its native action.  The trajectory
  history is therefore the list of action texts, which is what a dataset state stores.
* **Stateful.**  An adapter holds one current episode: :meth:`Environment.reset` starts a
  task, :meth:`Environment.step` advances it, :meth:`Environment.observation` renders it.
* **Horizon counted from the start of the episode.**  The episode is *done* when the
  environment terminates or when ``horizon`` actions have been taken since
  :meth:`Environment.reset`.  A restored state keeps its step count, so the actions left
  after restoring a state at step ``t`` are ``horizon - t``.
* **Snapshots.**  :meth:`Environment.snapshot` captures the current state and
  :meth:`Environment.restore` returns to it.  The generic restore resets the task and
  replays the action history; an adapter may store a direct state in a subclass of
  :class:`Snapshot` and restore it without replay.
* **Determinism.**  An adapter whose episodes are a function of the task and the actions sets
  :attr:`Environment.deterministic`, which lets the labeller share rollouts between labels.
* **Policies.**  :meth:`Environment.reference_action` is the strong reference policy the
  labels follow; :meth:`Environment.actor_action` is the collecting actor, the reference
  policy with ε-uniform noise drawn from a caller-seeded RNG.
* **Dataset candidates.**  :meth:`Environment.sample_candidates` chooses the actions a
  dataset state offers (they must include the actor's action): by default every candidate,
  an adapter with many actions (ALFWorld's admissible commands) samples a few.
* **Images (optional).**  An adapter that can render its current state as a picture
  overrides :meth:`Environment.observation_image` (FrozenLake: a drawing of the map;
  MiniWoB: the screenshot with set-of-marks ids); the builder then stores a PNG for every
  state and candidate next state of a dataset whose spec lists the ``image`` modality.
  The rendering must be deterministic: the same state gives the same pixels.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Hashable, Sequence

if TYPE_CHECKING:
    from PIL import Image


class EpisodeOver(RuntimeError):
    """:meth:`Environment.step` was called on an episode that is done."""


@dataclass(frozen=True)
class Snapshot:
    """What :meth:`Environment.restore` needs to return to a state.

    ``task`` and ``history`` (the action texts taken since reset) are enough for the
    generic restore by replay; adapters may subclass this to add a direct state.
    """

    task: str
    history: tuple[str, ...]

    @property
    def step(self) -> int:
        """Actions taken since the start of the episode."""
        return len(self.history)


@dataclass(frozen=True)
class StepResult:
    """The outcome of one :meth:`Environment.step`."""

    observation: str
    reward: float
    done: bool


class Environment(ABC):
    """An environment adapter: one current episode of one task at a time.

    Subclasses implement the ``_reset``/``_step`` hooks and the abstract methods; this base
    class keeps the task, the action history and the horizon bookkeeping.
    """

    name: ClassVar[str]
    """Environment id recorded in a dataset manifest (``Manifest.environment``)."""

    reference_policy: ClassVar[str]
    """Human-readable name of the reference policy (``Manifest.labelling``)."""

    deterministic: bool = False
    """The same actions from :meth:`reset` always give the same states, rewards and observations (text and
    image), and :meth:`reference_action` depends on the state alone: the labeller may then read several
    labels off one rollout (:func:`qval.labelling.shares_rollouts`).  Default: not declared."""

    def __init__(self, horizon: int) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be positive, got {horizon}")
        self.horizon = horizon
        self.hidden: frozenset[str] = frozenset()
        """The ids of the tasks :meth:`hide_tasks` replaced."""
        self._task: str | None = None
        self._history: list[str] = []
        self._terminated = False

    # -- what an adapter implements ----------------------------------------------------
    @property
    @abstractmethod
    def tasks(self) -> Sequence[str]:
        """The task ids :meth:`reset` accepts, in a fixed order."""

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """JSON-serialisable settings that define the environment (recorded in a manifest)."""

    @abstractmethod
    def _reset(self, task: str) -> None:
        """Start a new episode of ``task`` (already checked to be in :attr:`tasks`)."""

    @abstractmethod
    def _step(self, action: str) -> tuple[float, bool]:
        """Apply ``action`` (a candidate of the current state); return (reward, terminated)."""

    @abstractmethod
    def observation(self) -> str:
        """The text observation of the current state."""

    @abstractmethod
    def candidates(self) -> list[str]:
        """The candidate actions of the current state, in a fixed order."""

    def observation_image(self) -> "Image.Image | None":
        """The image observation of the current state, or ``None`` (default) for a text-only adapter."""
        return None

    def image_key(self) -> Hashable | None:
        """A key such that two states with equal keys have the same :meth:`observation_image`
        (lets a build draw and encode each picture once), or ``None`` (default: no such key)."""
        return None

    def hide_tasks(self, seeds: dict[str, int | None]) -> None:
        """Play each task named in ``seeds`` as the instance drawn from its seed instead (secret test
        splits, :mod:`qval.hidden`); ``None``: the task is hidden but not playable (a build without
        the secret).  A hidden task keeps its position in :attr:`tasks` but may get a new id (an id
        must not reveal the instance); :attr:`hidden` then holds the ids, and hiding one of them again
        plays a new draw under the same id (Best-of-N's redraws).  :meth:`config` must
        describe those tasks as hidden, never their seeds or content, identically with or without
        the seeds.  Default: the adapter cannot hide tasks."""
        raise NotImplementedError(f"{self.name} cannot draw hidden tasks from a secret")

    def instance(self) -> str:
        """What every (non-terminal) observation of the current episode shows of its task's instance, such
        that two episodes whose instances differ share no observation (FrozenLake: the map; ALFWorld: the
        scene and task; MiniWoB: the goal).  Best-of-N redraws a task of its own until its instance is none
        of the dataset's (:func:`qval.best_of_n.environment`).  Default: the adapter cannot say."""
        raise NotImplementedError(f"{self.name} cannot name the instance its observations show")

    def task_type(self, task: str) -> str | None:
        """The kind of task ``task`` is, where an environment has several (ALFWorld's six task types);
        recorded on every dataset state (``State.task_type``).  Default: ``None`` (one kind)."""
        return None

    @abstractmethod
    def reference_action(self) -> str:
        """The reference policy's action in the current state."""

    # -- episode bookkeeping -----------------------------------------------------------
    @property
    def task(self) -> str:
        """The task of the current episode."""
        if self._task is None:
            raise RuntimeError("no episode: call reset() first")
        return self._task

    @property
    def steps(self) -> int:
        """Actions taken since the start of the current episode."""
        return len(self._history)

    @property
    def history(self) -> tuple[str, ...]:
        """The action texts taken since the start of the current episode."""
        return tuple(self._history)

    @property
    def done(self) -> bool:
        """Whether the episode has terminated or used up its horizon."""
        return self._terminated or self.steps >= self.horizon

    def reset(self, task: str) -> str:
        """Start a new episode of ``task``; return its first observation."""
        if task not in self.tasks:
            raise KeyError(f"unknown task {task!r} for environment {self.name!r}")
        self._reset(task)
        self._task = task
        self._history = []
        self._terminated = False
        return self.observation()

    def step(self, action: str) -> StepResult:
        """Take ``action``; raises :class:`EpisodeOver` when the episode is done."""
        if self.done:
            raise EpisodeOver(f"episode of {self.task!r} is done after {self.steps} steps")
        if action not in self.candidates():
            raise ValueError(f"{action!r} is not a candidate action here: {self.candidates()}")
        reward, terminated = self._step(action)
        self._history.append(action)
        self._terminated = terminated
        return StepResult(observation=self.observation(), reward=reward, done=self.done)

    # -- snapshots ---------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The current state, for :meth:`restore`."""
        return Snapshot(task=self.task, history=self.history)

    def restore(self, snapshot: Snapshot) -> None:
        """Return to ``snapshot``: generic version, reset the task and replay its history."""
        self.reset(snapshot.task)
        for action in snapshot.history:
            self.step(action)

    def sample_candidates(self, actor_action: str, rng: random.Random) -> list[str]:
        """The candidate actions a dataset state offers, including ``actor_action``, in a fixed order.

        Default: every candidate of the current state, without drawing from ``rng``.
        """
        return self.candidates()

    def close(self) -> None:
        """Release what the adapter holds outside Python (a browser, a sandbox folder); the
        environment is not used afterwards.  Default: nothing to release (as gymnasium's ``Env.close``)."""

    # -- the collecting actor ----------------------------------------------------------
    def actor_action(self, rng: random.Random, epsilon: float) -> str:
        """The reference action, or with probability ``epsilon`` a uniformly random candidate.

        Exactly one ``rng.random()`` draw per call, plus one ``rng.choice`` when exploring.
        """
        if rng.random() < epsilon:
            return rng.choice(self.candidates())
        return self.reference_action()

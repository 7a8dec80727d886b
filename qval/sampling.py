"""How a dataset's evaluation points were drawn, and bootstrap resamples that follow it.

A QVal dataset does not draw its points one by one: it collects *trajectories* (up to a few states
each) on *tasks* (FrozenLake maps, ALFWorld games, MiniWoB seeds), so points of one trajectory, and of
one task, are correlated (ALFWorld dev: the labels' intraclass correlation by trajectory is 0.63).  A
bootstrap that resamples points as if they were independent gives intervals that are too narrow and
paired tests that reject too often.  A :class:`Design` holds each point's trajectory and task and
draws resamples of *what was drawn*:

* **many tasks** (at least :data:`MIN_CLUSTERS`): whole tasks are resampled, each with all its
  trajectories and points.  Resampling the first stage of a two-stage sample carries the variation of
  both stages; resampling both stages would count the second one twice (Davison & Hinkley 1997,
  section 3.8; Field & Welsh 2007);
* **few tasks** (2 to :data:`MIN_CLUSTERS` - 1, e.g. 4 FrozenLake maps): with so few, a bootstrap of
  tasks cannot estimate the spread between tasks (four maps give four values).  The tasks are held as
  strata -- the interval is about *these* tasks -- and each task's trajectories are resampled within it
  (a stratified cluster bootstrap);
* **one task**, or no tasks known: trajectories are resampled.

A resample is given as how often it draws each point (:meth:`Design.draw`), which is what the
vectorised resamplers of :mod:`qval.metrics` read, so a cluster resample costs what a point resample
costs.  Resamples differ in size when clusters do.

**Small samples.** With ``G`` clusters (``H`` strata) the bootstrap variance of a mean is ``(G - H) / G``
times the unbiased one; :attr:`Design.variance_factor` is the inverse, and the intervals of
:mod:`qval.metrics` and :mod:`qval.compare` widen by its square root and use Student's t with
:attr:`Design.dof` degrees of freedom (the small-sample rule of cluster-robust standard errors).

Nothing here knows about Django.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

MIN_CLUSTERS: int = 20
"""Fewest tasks that are resampled as the unit; with fewer they are strata (see the module doc)."""

POINT, TRAJECTORY, TASK = "point", "trajectory", "task"
UNITS: tuple[str, ...] = (POINT, TRAJECTORY, TASK)
"""What an interval may have resampled: points (no design known), trajectories (within tasks, when
there are few), or tasks."""

IntArray = NDArray[np.intp]


def _codes(values: Sequence[Hashable] | ArrayLike) -> IntArray:
    """Dense codes ``0..k-1`` of ``values`` in order of first appearance."""
    codes, _ = pd.factorize(pd.Series(list(values) if not isinstance(values, np.ndarray) else values), sort=False)
    if (codes < 0).any():
        raise ValueError(f"a trajectory or task is missing (None or NaN) at point {int(np.flatnonzero(codes < 0)[0])}")
    return codes.astype(np.intp)


@dataclass(frozen=True, eq=False)
class Design:
    """Each point's ``trajectory`` and ``task`` (dense codes, one per point; a trajectory lies in one
    task).  Build one with :meth:`of`."""

    trajectory: IntArray
    task: IntArray
    known: bool = True
    """Whether the points' trajectories are known; :meth:`independent` makes one that is not."""

    @classmethod
    def independent(cls, n: int) -> "Design":
        """The design of ``n`` points whose trajectories are not known (a published summary file records
        none): each point its own unit, resampled as a point (:data:`POINT`)."""
        return cls(np.arange(n, dtype=np.intp), np.zeros(n, dtype=np.intp), known=False)

    @classmethod
    def of(cls, trajectories: Sequence[Hashable] | ArrayLike, tasks: Sequence[Hashable] | ArrayLike | None = None
           ) -> "Design":
        """The design of points whose trajectories (any hashable ids; the same id in two tasks is two
        trajectories) and tasks are given, one per point; without ``tasks`` every point is in one task.
        ``ValueError`` when the lengths differ or an id is missing."""
        traj = list(trajectories) if not isinstance(trajectories, np.ndarray) else trajectories.tolist()
        task = [0] * len(traj) if tasks is None else (list(tasks) if not isinstance(tasks, np.ndarray) else tasks.tolist())
        if len(task) != len(traj):
            raise ValueError(f"trajectories and tasks differ in length: {len(traj)} != {len(task)}")
        task_codes = _codes(task)
        return cls(_codes(list(zip(task_codes.tolist(), traj))), task_codes)

    def __post_init__(self) -> None:
        if self.trajectory.shape != self.task.shape or self.trajectory.ndim != 1:
            raise ValueError("a design needs one trajectory and one task per point")

    def __len__(self) -> int:
        return int(self.trajectory.size)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Design) and self.known == other.known and np.array_equal(self.trajectory, other.trajectory)
                and np.array_equal(self.task, other.task))

    def __hash__(self) -> int:
        return hash((self.known, self.trajectory.tobytes(), self.task.tobytes()))

    def subset(self, keep: ArrayLike) -> "Design":
        """The design of the points ``keep`` selects (a boolean mask or indices), codes made dense again."""
        if not self.known:
            return Design.independent(int(self.trajectory[keep].size))
        return Design.of(self.trajectory[keep], self.task[keep])

    @property
    def num_trajectories(self) -> int:
        """Trajectories holding at least one point."""
        return int(np.unique(self.trajectory).size)

    @property
    def num_tasks(self) -> int:
        """Tasks holding at least one point."""
        return int(np.unique(self.task).size)

    @property
    def unit(self) -> str:
        """What a resample draws: :data:`POINT` when the trajectories are not known, :data:`TASK` with at
        least :data:`MIN_CLUSTERS` tasks, else :data:`TRAJECTORY` (within each task when there are several)."""
        if not self.known:
            return POINT
        return TASK if self.num_tasks >= MIN_CLUSTERS else TRAJECTORY

    @property
    def strata(self) -> int:
        """Strata the units are resampled within: the tasks when they are few (and more than one), else 1."""
        return self.num_tasks if self.unit == TRAJECTORY and self.num_tasks > 1 else 1

    @property
    def clusters(self) -> int:
        """How many units a resample draws from (tasks or trajectories)."""
        return self.num_tasks if self.unit == TASK else self.num_trajectories

    @property
    def dof(self) -> int:
        """Degrees of freedom of the variance between units: clusters minus strata (at least 1)."""
        return max(1, self.clusters - self.strata)

    @property
    def variance_factor(self) -> float:
        """``G / (G - H)``: how much the bootstrap variance over ``G`` clusters in ``H`` strata
        understates the unbiased one (1 when no unit can vary)."""
        return self.clusters / self.dof if self.clusters > self.strata else 1.0

    def describe(self) -> str:
        """What a resample draws, in words (:func:`describe`)."""
        return describe(self.as_details())

    def as_details(self) -> dict[str, Any]:
        """The design as an interval's details record it: ``unit``, ``clusters``, ``strata``."""
        return {"unit": self.unit, "clusters": self.clusters, "strata": self.strata}

    def draw(self, rng: np.random.Generator, rows: int) -> NDArray[np.int64]:
        """``rows`` resamples as how often each drawn point is taken: ``(rows, n)`` counts.  Units are
        drawn with replacement, as many as there are (per stratum when stratified); a drawn unit brings
        all its points."""
        if self.unit == POINT:
            return _uniform_counts(rng, rows, len(self))
        if self.unit == TASK:
            picked = _uniform_counts(rng, rows, self.num_tasks)
            return picked[:, self.task]
        if self.strata == 1:
            return _uniform_counts(rng, rows, int(self.trajectory.max()) + 1)[:, self.trajectory]
        counts = np.zeros((rows, int(self.trajectory.max()) + 1), dtype=np.int64)
        owner = np.zeros(counts.shape[1], dtype=np.intp)
        owner[self.trajectory] = self.task
        for stratum in range(int(self.task.max()) + 1):
            members = np.flatnonzero(owner == stratum)
            counts[:, members] = _uniform_counts(rng, rows, members.size)
        return counts[:, self.trajectory]

    def subsample(self, limit: int, seed: int) -> IntArray | None:
        """``None`` when the design has at most ``limit`` points; else the sorted points of a seeded random
        choice of whole units (per stratum in proportion) holding about ``limit`` points, so that a
        large sample's bootstrap resamples what was drawn at the cost of ``limit`` points."""
        n = len(self)
        if n <= limit:
            return None
        rng = np.random.default_rng([seed, n, 1])
        unit = self.task if self.unit == TASK else self.trajectory
        keep = np.zeros(n, dtype=bool)
        strata = np.zeros(n, dtype=np.intp) if self.strata == 1 else self.task
        for stratum in np.unique(strata):
            members = np.unique(unit[strata == stratum])
            order = rng.permutation(members)
            sizes = np.bincount(unit, minlength=int(unit.max()) + 1)[order]
            want = limit * np.count_nonzero(strata == stratum) / n
            take = order[: max(2, int(np.searchsorted(np.cumsum(sizes), want)) + 1)]
            keep |= np.isin(unit, take) & (strata == stratum)
        return np.flatnonzero(keep)


def describe(resampled: Mapping[str, Any] | None) -> str:
    """What an interval's resamples drew (:meth:`Design.as_details`, a result's ``ci95_resampled``), in
    words: ``"20 trajectories"``, ``"19 trajectories, within each of 4 tasks"``, ``"40 tasks (each with
    its trajectories)"``, ``"100 points (their trajectories are not known)"``; an interval stored before
    intervals recorded it (``None``) resampled points."""
    if not resampled:
        return "points (computed before intervals resampled trajectories)"
    unit, clusters, strata = resampled.get("unit"), resampled.get("clusters"), resampled.get("strata") or 1
    if unit == TASK:
        return f"{clusters} tasks (each with its trajectories)"
    if unit == TRAJECTORY:
        text = f"{clusters} trajector{'y' if clusters == 1 else 'ies'}"
        return text + (f", within each of {strata} tasks" if strata > 1 else "")
    return f"{clusters} points (their trajectories are not known)"


def _uniform_counts(rng: np.random.Generator, rows: int, units: int) -> NDArray[np.int64]:
    """``rows`` draws of ``units`` units with replacement, as counts per unit: ``(rows, units)``."""
    if units == 1:
        return np.ones((rows, 1), dtype=np.int64)
    return rng.multinomial(units, np.full(units, 1.0 / units), size=rows)


__all__ = ["Design", "MIN_CLUSTERS", "POINT", "TASK", "TRAJECTORY", "UNITS", "describe"]

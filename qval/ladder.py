"""The Ladder: when a new submission may change what a hidden test board shows.

A board that shows the exact score of every submission on a hidden split answers every
query an adversary asks of the labels: a few hundred submissions that each change a little
can fit the split itself.  The Ladder (Blum & Hardt, ICML 2015) answers instead with the
best score so far, and moves only when a submission beats that best by a margin.  This is
its parameter-free form: the margin is the standard error of the *paired* difference
between the new submission and the current best on the same points, so no step size is
chosen by hand, and a submission that differs from the best by noise leaves the board where
it was.

The rule (:func:`decide`), per metric of :data:`LADDER_METRICS` that a board shows:

* **global ρ** (``spearman``): the difference of the two submissions' Spearman ρ on the points
  both score, and its standard error from a seeded paired bootstrap of that difference
  (:func:`qval.compare.paired_bootstrap`);
* **state-local ρ** (``ranking_spearman``, a mean of per-state values): the mean of the
  per-state differences over the states valid in both, and their standard deviation over
  ``sqrt(n)`` (the paired per-state differences give the Ladder's ``s`` directly).

A submission *climbs* (the board shows its score) when it is the first of its scope, or when
it is significantly better -- difference above its standard error -- on at least one of these
metrics, or shows one that the best does not, and the board would not lose or lower any of
them.  Otherwise the board keeps the best's score.  Nothing here knows about Django; the site
decides which submissions share a ladder (:mod:`submissions.ladder`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from qval import metrics
from qval.compare import paired_bootstrap

LADDER_METRICS: tuple[str, ...] = ("spearman", "ranking_spearman")
"""The board's headline metrics the Ladder decides on (see the module doc)."""
RESAMPLES = 1000
"""Bootstrap resamples behind the global ρ's standard error."""
SEED = 0
"""Seed of that bootstrap: the same two submissions always get the same decision."""


@dataclass(frozen=True)
class Entry:
    """A submission as the Ladder sees it.

    ``points``: the score of each evaluation point, in the truth's point order, NaN where the
    submission gives none (:func:`qval.scoring.point_scores`); ``states``: each state's ranking
    Spearman, NaN where it has none (:func:`qval.scoring.state_ranking_values`); ``board``: the
    value the board would show of each metric of :data:`LADDER_METRICS`, ``None`` where it
    shows none (on a hidden split, as :func:`qval.scoring.disclose` rounds it).
    """

    points: np.ndarray
    states: np.ndarray
    board: Mapping[str, float | None]


@dataclass(frozen=True)
class Step:
    """How a new submission compares with the best on one metric.

    ``difference``: new minus best on the points (or states) both have, ``None`` when it is
    undefined there; ``margin``: its standard error, ``None`` when fewer than two points or
    resamples leave it undefined; ``num_paired``: the points (states) compared.
    """

    metric: str
    difference: float | None
    margin: float | None
    num_paired: int

    @property
    def significant(self) -> bool:
        """Whether the new submission is better by more than one standard error."""
        return self.difference is not None and self.margin is not None and self.difference > self.margin


@dataclass(frozen=True)
class Decision:
    """Outcome of :func:`decide`.

    ``climbs``: whether the board shows the new submission's score; ``first``: there was no
    best to beat; ``steps``: the comparison on each metric both submissions show;
    ``reason``: one sentence for the submission's record (it names no number computed on the
    labels, only which metric moved or blocked the ladder).
    """

    climbs: bool
    first: bool
    steps: tuple[Step, ...]
    reason: str


def global_step(labels: ArrayLike, new: ArrayLike, best: ArrayLike, *, rules: str = metrics.QVAL_RULES) -> Step:
    """The global ρ's :class:`Step`: paired bootstrap (:data:`RESAMPLES`, :data:`SEED`) of
    ``spearman(labels, new) - spearman(labels, best)`` on the points both score."""
    pc = paired_bootstrap(labels, new, best, metric="spearman", resamples=RESAMPLES, seed=SEED, rules=rules)
    return Step("spearman", pc.difference, pc.std_error, pc.num_points)


def state_step(new: ArrayLike, best: ArrayLike) -> Step:
    """The state-local ρ's :class:`Step` from two submissions' per-state values (NaN: none).

    Over the states where both have a value: the mean of the differences and their sample
    standard deviation over the square root of their number.
    """
    a, b = np.asarray(new, dtype=np.float64), np.asarray(best, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"the two submissions have values for different numbers of states: {a.size}, {b.size}")
    d = (a - b)[~(np.isnan(a) | np.isnan(b))]
    n = int(d.size)
    if n == 0:
        return Step("ranking_spearman", None, None, 0)
    margin = float(d.std(ddof=1)) / math.sqrt(n) if n > 1 else None
    return Step("ranking_spearman", float(d.mean()), margin, n)


def decide(labels: ArrayLike, new: Entry, best: Entry | None, *, rules: str = metrics.QVAL_RULES) -> Decision:
    """Whether the board moves to ``new`` from its current ``best`` (``None``: the first of its scope).

    ``labels``: the points' labels, in the order of :attr:`Entry.points`.  For each metric of
    :data:`LADDER_METRICS` the best shows: the new submission must show it too, at least as
    high on the board, and a :class:`Step` is computed.  It climbs when nothing blocks it and
    a step is :attr:`Step.significant` or it shows a metric the best does not.
    """
    if best is None:
        return Decision(True, True, (), "the first submission of its scope: the board shows its score")
    steps: list[Step] = []
    gains: list[str] = []
    for metric in LADDER_METRICS:
        was, now = best.board.get(metric), new.board.get(metric)
        if was is None:
            if now is not None:
                gains.append(f"it adds the {metric} the best lacks")
            continue
        if now is None:
            return Decision(False, False, tuple(steps), f"the board would lose the best's {metric}")
        step = global_step(labels, new.points, best.points, rules=rules) if metric == "spearman" \
            else state_step(new.states, best.states)
        steps.append(step)
        if now < was:
            return Decision(False, False, tuple(steps), f"its {metric} on the board would be lower than the best's")
        if step.significant:
            gains.append(f"its {metric} is significantly better (by more than one standard error)")
    if not gains:
        return Decision(False, False, tuple(steps), "not significantly better than the best on any metric")
    return Decision(True, False, tuple(steps), "; ".join(gains))


__all__ = ["Decision", "Entry", "LADDER_METRICS", "RESAMPLES", "SEED", "Step", "decide", "global_step", "state_step"]

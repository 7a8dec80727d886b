"""The Ladder: when a new submission may change what a hidden test board shows.

A board that shows the exact score of every submission on a hidden split answers every
query an adversary asks of the labels: a few hundred submissions that each change a little
can fit the split itself.  The Ladder (Blum & Hardt, ICML 2015) answers instead with the
best score so far, and moves only when a submission beats that best by a margin.

The rule (:func:`decide`), per metric of :data:`LADDER_METRICS` that both the new submission and
the account's best show:

* **global ρ** (``spearman``): the difference of the two submissions' Spearman ρ on the points
  both score, its standard error from a seeded paired bootstrap of that difference
  (:func:`qval.compare.paired_bootstrap`);
* **state-local ρ** (``ranking_spearman``, a mean of per-state values): the mean of the
  per-state differences over the states valid in both, and their standard deviation over
  ``sqrt(n)``.

The margin does not shrink with the perturbation (a margin of one paired standard error let
13-17% of label-free perturbations of the best climb: a public ρ of 0.26 from nothing).  It is
the larger of

* a **fixed step** (Blum & Hardt's Algorithm 1): :data:`STEP` times the spread a label-free
  submission's value has -- ``1 / sqrt(n - 1)`` for the global ρ on ``n`` points, the per-state
  values' spread over ``sqrt(states)`` for the state-local ρ -- whatever the two submissions
  share; and
* a **test at a level spent over the account's attempts** (alpha spending): the ``j``-th
  submission of a ladder must be better by ``z`` standard errors of the paired difference, ``z``
  the one-sided quantile of ``ALPHA * 6 / (pi² j²) / tests`` (``tests``: the metrics compared), so
  that all the false climbs of an account that knows nothing of the labels have probability at
  most :data:`ALPHA` together.

A submission *climbs* when it is the first of its ladder, or when it is better by more than the
margin on at least one metric both show, and the board would neither lose nor lower any of them
(no free climb: showing a metric the best lacks is no reason to climb).  Every climb is a
release and spends from the split's shared budget (:func:`release`, :mod:`qval.budget`).  Nothing
here knows about Django; the site decides which submissions share a ladder (:mod:`submissions.ladder`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats

from qval import metric_registry, metrics
from qval.budget import Ledger, affordable
from qval.compare import paired_bootstrap
from qval.sampling import Design

LADDER_METRICS: tuple[str, ...] = metric_registry.HEADLINES
"""The board's headline metrics the Ladder decides on (see the module doc)."""
RESAMPLES = 1000
"""Bootstrap resamples behind the global ρ's standard error."""
SEED = 0
"""Seed of that bootstrap: the same two submissions always get the same decision."""
ALPHA = 0.05
"""Probability that an account whose submissions know nothing of the labels climbs even once after its
first, over all its attempts (the levels ``ALPHA * 6 / (pi² j²)`` sum to it)."""
STEP = 1.0
"""The fixed step, in spreads of a label-free submission's value (module doc)."""


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
    undefined there; ``std_error``: its standard error, ``None`` when fewer than two points or
    resamples leave it undefined; ``step``: the fixed step (:data:`STEP` label-free spreads);
    ``num_paired``: the points (states) compared; ``z``: the standard errors the attempt's level asks
    for (:func:`z_for`; set by :func:`decide`).
    """

    metric: str
    difference: float | None
    std_error: float | None
    step: float | None
    num_paired: int
    z: float = 1.0

    @property
    def margin(self) -> float | None:
        """What the difference must exceed: the larger of the fixed step and ``z`` standard errors."""
        if self.std_error is None or self.step is None:
            return None
        return max(self.step, self.z * self.std_error)

    @property
    def significant(self) -> bool:
        """Whether the new submission is better by more than :attr:`margin`."""
        margin = self.margin
        return self.difference is not None and margin is not None and self.difference > margin


@dataclass(frozen=True)
class Decision:
    """Outcome of :func:`decide` (and of :func:`release`).

    ``climbs``: whether the board shows the new submission's score; ``first``: there was no
    best to beat; ``steps``: the comparison on each metric both submissions show;
    ``reason``: one sentence for the submission's record (it names no number computed on the
    labels, only which metric moved or blocked the ladder); ``held``: it was not decided because
    the split's budget is spent (:func:`release`); ``released``: the metrics a climb shows, each one number
spent from that budget (:func:`qval.budget.affordable`).
    """

    climbs: bool
    first: bool
    steps: tuple[Step, ...]
    reason: str
    held: bool = False
    released: tuple[str, ...] = ()

    @property
    def cost(self) -> int:
        """Numbers the release spent from the split's budget."""
        return len(self.released)


def alpha_for(attempt: int) -> float:
    """The level of an account's ``attempt``-th submission of a ladder (1 for the first):
    ``ALPHA * 6 / (pi² attempt²)``, so the levels of all attempts sum to :data:`ALPHA`."""
    if attempt < 1:
        raise ValueError(f"attempts count from 1, got {attempt}")
    return ALPHA * 6.0 / (math.pi**2 * attempt**2)


def z_for(attempt: int, tests: int = 1) -> float:
    """Standard errors the ``attempt``-th submission must beat the best by on one of ``tests`` metrics:
    the one-sided normal quantile of ``alpha_for(attempt) / tests`` (Bonferroni over the metrics)."""
    return float(stats.norm.isf(alpha_for(attempt) / max(tests, 1)))


def global_step(labels: ArrayLike, new: ArrayLike, best: ArrayLike, *, rules: str = metrics.QVAL_RULES,
                design: Design | None = None) -> Step:
    """The global ρ's :class:`Step`: paired bootstrap (:data:`RESAMPLES`, :data:`SEED`) of
    ``spearman(labels, new) - spearman(labels, best)`` on the points both score, resampling what the
    points' ``design`` drew (:mod:`qval.sampling`; points when ``None``); the fixed step is
    :data:`STEP` over ``sqrt(n - 1)`` (the spread of a label-free file's ρ on those ``n`` points)."""
    pc = paired_bootstrap(labels, new, best, metric=metric_registry.HEADLINE, resamples=RESAMPLES, seed=SEED, rules=rules,
                          design=design)
    step = STEP / math.sqrt(pc.num_points - 1) if pc.num_points > 1 else None
    return Step(metric_registry.HEADLINE, pc.difference, pc.std_error, step, pc.num_points)


def _mean_std_error(d: np.ndarray, design: Design | None) -> float:
    """The standard error of ``d.mean()``: ``sd / sqrt(n)`` for independent values; with a ``design``
    whose trajectories are known, the cluster-robust one over its trajectories (states of a trajectory
    are correlated): ``sqrt(G / (G - 1) * sum over trajectories of their summed deviations squared) / n``."""
    n = d.size
    if design is None or not design.known or design.num_trajectories < 2:
        return float(d.std(ddof=1)) / math.sqrt(n)
    sums = np.bincount(design.trajectory, weights=d - d.mean())
    g = design.num_trajectories
    return math.sqrt(g / (g - 1) * float((sums ** 2).sum())) / n


def state_step(new: ArrayLike, best: ArrayLike, design: Design | None = None) -> Step:
    """The state-local ρ's :class:`Step` from two submissions' per-state values (NaN: none).

    Over the states where both have a value: the mean of the differences and its standard error
    (over the trajectories of the states' ``design`` when given, else as if the states were
    independent); the fixed step is :data:`STEP` times the two submissions' pooled per-state
    standard deviation over the square root of their number (the spread of a mean of per-state
    values, whatever the two share).
    """
    a, b = np.asarray(new, dtype=np.float64), np.asarray(best, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"the two submissions have values for different numbers of states: {a.size}, {b.size}")
    both = ~(np.isnan(a) | np.isnan(b))
    d = (a - b)[both]
    n = int(d.size)
    if n == 0:
        return Step(metric_registry.LOCAL_HEADLINE, None, None, None, 0)
    if n < 2:
        return Step(metric_registry.LOCAL_HEADLINE, float(d.mean()), None, None, n)
    spread = math.sqrt((float(a[both].var(ddof=1)) + float(b[both].var(ddof=1))) / 2)
    kept = None if design is None else design.subset(both)
    return Step(metric_registry.LOCAL_HEADLINE, float(d.mean()), _mean_std_error(d, kept), STEP * spread / math.sqrt(n), n)


def decide(labels: ArrayLike, new: Entry, best: Entry | None, *, attempt: int = 2,
           rules: str = metrics.QVAL_RULES, design: Design | None = None) -> Decision:
    """Whether the board moves to ``new`` from its current ``best`` (``None``: the first of its scope).

    ``labels``: the points' labels, in the order of :attr:`Entry.points`; ``attempt``: how many
    submissions of this ladder the account has made, this one included (its level, :func:`z_for`);
    ``design``: how the points (one per state) were drawn, which the standard errors resample.
    For each metric of :data:`LADDER_METRICS` the best shows the new submission must show it
    too, at least as high on the board, and a :class:`Step` is computed.  It climbs when nothing
    blocks it and a step is :attr:`Step.significant`.
    """
    if best is None:
        return Decision(True, True, (), "the first submission of its scope: the board shows its score")
    shared = [m for m in LADDER_METRICS if best.board.get(m) is not None]
    lost = [m for m in shared if new.board.get(m) is None]
    if lost:
        return Decision(False, False, (), f"the board would lose the best's {lost[0]}")
    lower = [m for m in shared if new.board[m] < best.board[m]]  # type: ignore[operator]
    if lower:
        return Decision(False, False, (), f"its {lower[0]} on the board would be lower than the best's")
    z = z_for(attempt, len(shared))
    steps: list[Step] = []
    gains: list[str] = []
    for metric in shared:
        step = global_step(labels, new.points, best.points, rules=rules, design=design) if metric == metric_registry.HEADLINE \
            else state_step(new.states, best.states, design)
        step = Step(step.metric, step.difference, step.std_error, step.step, step.num_paired, z)
        steps.append(step)
        if step.significant:
            gains.append(f"its {metric} is better than the best's by more than the margin (attempt {attempt}: "
                         f"{z:.2f} standard errors of the paired difference, and at least the fixed step)")
    if not gains:
        return Decision(False, False, tuple(steps), "not better than the best by the margin on any metric both show")
    return Decision(True, False, tuple(steps), "; ".join(gains))


def release(labels: ArrayLike, new: Entry, best: Entry | None, ledger: Ledger, *, attempt: int = 1,
            rules: str = metrics.QVAL_RULES, design: Design | None = None) -> Decision:
    """The site's release rule: :func:`decide`, and a climb spends its numbers from the split's ``ledger``
    (:func:`charge`).

    A ledger that is not open holds the submission undecided (``held``; nothing released, so nothing
    is said of whether it would have climbed); otherwise a climb releases the metrics of ``new``'s
    board that the ledger affords (:func:`qval.budget.affordable`: the global ρ at least) and spends
    one number each.  ``ledger`` is changed in place.
    """
    if ledger.state != "open":
        return held(ledger, first=best is None)
    return charge(decide(labels, new, best, attempt=attempt, rules=rules, design=design), new.board, ledger)


def held(ledger: Ledger, *, first: bool) -> Decision:
    """The decision of a submission held undecided by a ``ledger`` that is not open (``first``: it had no best)."""
    return Decision(False, first, (), f"the split's information budget is {ledger.state}: nothing more "
                    "is released about it", held=True)


def charge(decision: Decision, board: Mapping[str, float | None], ledger: Ledger) -> Decision:
    """A :func:`decide` ``decision`` on an open ``ledger``: a climb releases the metrics of ``board`` (the new
    submission's) that the ledger affords and spends one number each (``ledger`` is changed in place); a hold
    releases nothing. Split from :func:`decide` so the statistics can be computed before the ledger is locked."""
    if not decision.climbs:
        return decision
    released = affordable(board, ledger.remaining)
    ledger.spend(len(released))
    return Decision(True, decision.first, decision.steps, decision.reason, released=released)


__all__ = ["ALPHA", "Decision", "Entry", "LADDER_METRICS", "RESAMPLES", "SEED", "STEP", "Step", "alpha_for",
           "charge", "decide", "global_step", "held", "release", "state_step", "z_for"]

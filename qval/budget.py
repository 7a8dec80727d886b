"""The information budget of a hidden split: how many numbers computed on its labels may leave the site.

Every number released about a hidden split from predictions an account chose (an uploaded file, a method
container's output) answers a query on the labels, and a coalition of accounts is one analyst with more
queries: issue 32's attack fitted a file to 59 released global ρ values of 32 accounts.
Spearman ρ is Pearson's r of ranks, so each released value is about one linear equation in the hidden ranks,
and least squares on ``m`` of them reaches a hidden ρ of about ``sqrt(m / n)`` on ``n`` points.  So the site
keeps **one budget per hidden split** (dataset version x split x target), shared by every account, counted in
**released numbers**, and sized from the split's number of points (:func:`budget_size`): ``floor(n /
POINTS_PER_NUMBER)`` numbers, ``sqrt(1 / POINTS_PER_NUMBER) = 0.2`` on one target, ``0.28`` when both targets'
budgets of one split are pooled (V is a state's best Q, so the two are related), calibrated by the 60-account
reconstruction of ``benchmarks/hidden_budget.py``.

What a release carries (:func:`released_rows`): on a hidden split a user-controlled row shows the metrics the
Ladder decides on (:data:`RELEASED_METRICS`: the global ρ, and the state-local ρ of a file scoring every
candidate), each rounded as :func:`qval.scoring.disclose` rounds it; its p-value and 95% interval are
computed **from the released value and the number of points alone** (Fisher's z with Bonett & Wright's
standard error for Spearman), so they carry nothing new; every other metric is withheld (*not released*).
Its cost is the number of values it shows (:func:`affordable`).  A comparison of a user-controlled row on a
hidden split releases one more number per metric compared (:data:`COMPARE_COST`: the standard error of the
paired difference; the difference, its interval and p-value follow from it and the released values).

The state (:class:`Ledger`): ``open`` while a number is left, then ``spent``: nothing more is released about
the split, whether a submission would have climbed or not, so the switch depends on the releases alone (a
climb always releases its global ρ while the split is open, and its state-local ρ too when a second number
is left: :func:`affordable`); a spent split is replaced by a fresh one (a new dataset
version: :mod:`qval.hidden`, README *Threat model*).  Django-free: the site stores a ledger per split
and spends under its row lock (:mod:`budgets`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scipy import stats

from qval import metric_registry
from qval.metrics import significance_marks
from qval.scoring import DISCLOSED_DIGITS, MetricRow, disclose_p_value, disclose_value

POINTS_PER_NUMBER = 25
"""Points of a hidden split per number the split may release (:func:`budget_size`)."""
RELEASED_METRICS: tuple[str, ...] = metric_registry.HEADLINES
"""What a user-controlled row shows on a hidden split: the Ladder's metrics (:data:`qval.ladder.LADDER_METRICS`)."""
COMPARE_COST = 1
"""Numbers one compared metric releases on a hidden split: the paired difference's standard error."""
LEVEL = 0.95
"""Level of a released interval."""
NO_ROOM = ("not released: the hidden split's shared information budget had no room left for this number "
           "(a fresh split replaces a spent one)")
"""Why a Ladder metric of a climb shows no value when the budget could afford only the global ρ."""
NOT_RELEASED = ("not released on a hidden split: of a user's submission the board shows the Ladder's metrics "
                "only (global and state-local ρ); every other number computed on the hidden labels would spend "
                "the split's shared information budget")
"""Why a metric other than :data:`RELEASED_METRICS` shows no value on a user's hidden-split row."""
SPENT, OPEN, RETIRED = "spent", "open", "retired"
STATES: tuple[str, ...] = (OPEN, SPENT, RETIRED)
"""A split budget's states: ``open`` (releases fit), ``spent`` (nothing more is released; a fresh split is
built), ``retired`` (its dataset version was replaced; its board is frozen)."""


class BudgetSpent(RuntimeError):
    """A release that the split's budget cannot afford (:meth:`Ledger.spend`)."""


def budget_size(num_points: int, scale: float = 1.0) -> int:
    """Numbers a hidden split of ``num_points`` points may release in all: ``floor(scale * num_points /
    POINTS_PER_NUMBER)``.  ``scale`` (``QVAL_BUDGET_SCALE``) lets maintainers trade protection for feedback
    (a test sets a tiny budget); the hidden ρ a reconstruction reaches grows like ``sqrt(scale / 25)``."""
    if num_points < 0 or scale < 0:
        raise ValueError(f"points and scale must be non-negative, got {num_points} and {scale}")
    return int(math.floor(scale * num_points / POINTS_PER_NUMBER + 1e-9))


def affordable(board: Mapping[str, float | None], remaining: int) -> tuple[str, ...]:
    """The metrics of ``board`` (those with a value, in :data:`RELEASED_METRICS` order: the global ρ first)
    that a release may show with ``remaining`` numbers left: what a climb releases, the rest withheld as
    :data:`NO_ROOM`.  What fits depends on the file (which metrics it shows) and the budget, never on the labels."""
    return tuple(m for m in RELEASED_METRICS if board.get(m) is not None)[:max(remaining, 0)]


def reconstruction_rho(numbers: int, num_points: int) -> float:
    """About the hidden ρ a least-squares fit reaches from ``numbers`` released correlations on ``num_points``
    points, ``sqrt(numbers / num_points)`` (capped at 1): what :func:`budget_size` keeps below 0.3."""
    return min(1.0, math.sqrt(numbers / num_points)) if num_points else 1.0


def transcript_bits(size: int, submissions: int, bits_per_number: float | None = None) -> float:
    """Blum & Hardt's description-length bound on what a split's whole transcript says about its labels.

    The transcript (which submissions climbed and the released values) is fixed by the releases: each
    names its position among ``submissions`` (``log2`` of it) and its values; a non-climb follows from them.
    At most ``size`` numbers are released, each a rounded value in [-1, 1] (``bits_per_number``, default
    ``log2(2 * 10**DISCLOSED_DIGITS + 1)``, about 11): at most ``size * (log2(submissions) +
    bits_per_number)`` bits."""
    bits = math.log2(2 * 10**DISCLOSED_DIGITS + 1) if bits_per_number is None else bits_per_number
    return size * (math.log2(max(submissions, 1)) + bits)


@dataclass
class Ledger:
    """A split's budget: ``size`` numbers, ``spent`` so far; ``retired`` once its dataset version is
    replaced.  :attr:`state` is ``open`` while a number is left."""

    size: int
    spent: int = 0
    retired: bool = False

    @property
    def remaining(self) -> int:
        """Numbers still to release."""
        return max(self.size - self.spent, 0)

    @property
    def state(self) -> str:
        """``retired``, ``open`` while a number is left, else ``spent``."""
        if self.retired:
            return RETIRED
        return OPEN if self.remaining >= 1 else SPENT

    def spend(self, cost: int) -> None:
        """Spend ``cost`` numbers; raise :class:`BudgetSpent` when the ledger is not open or they do not fit."""
        if cost < 0:
            raise ValueError(f"a release costs at least nothing, got {cost}")
        if self.state != OPEN or cost > self.remaining:
            raise BudgetSpent(f"the split's budget of {self.size} numbers is {self.state} ({self.spent} spent)")
        self.spent += cost


def correlation_interval(value: float | None, num_points: int, metric: str = "spearman",
                         level: float = LEVEL) -> tuple[float, float] | None:
    """A ``level`` interval of a correlation from its (released) value and number of points alone, on Fisher's
    z = atanh(r): standard error ``sqrt((1 + r²/2) / (n - 3))`` for Spearman (Bonett & Wright 2000),
    ``1 / sqrt(n - 3)`` for Pearson; ``None`` below four points or without a value.  It assumes independent
    points (a trajectory's points are not), so it is the narrowest honest interval, never one read off the labels."""
    if value is None or num_points < 4:
        return None
    r = max(min(float(value), 0.999999), -0.999999)
    se = math.sqrt((1 + r * r / 2) / (num_points - 3)) if metric == "spearman" else 1 / math.sqrt(num_points - 3)
    z = math.atanh(r)
    half = float(stats.norm.isf((1 - level) / 2)) * se
    return math.tanh(z - half), math.tanh(z + half)


def correlation_p_value(value: float | None, num_points: int) -> float | None:
    """The two-sided p-value of "no correlation" from a correlation's value and number of points alone (the
    t test with ``n - 2`` degrees of freedom, scipy's for Spearman and Pearson); ``None`` below three points."""
    if value is None or num_points < 3:
        return None
    r = max(min(float(value), 1.0), -1.0)
    if abs(r) >= 1.0:
        return 0.0
    t = r * math.sqrt((num_points - 2) / (1 - r * r))
    return float(2 * stats.t.sf(abs(t), num_points - 2))


def released_rows(rows: Sequence[MetricRow]) -> list[MetricRow]:
    """``rows`` (disclosed by :func:`qval.scoring.disclose`) as a user-controlled row releases them on a hidden
    split: :data:`RELEASED_METRICS` keep their rounded values, their intervals and p-values recomputed from
    value and points (:func:`correlation_interval`, :func:`correlation_p_value`); every other metric is
    withheld with :data:`NOT_RELEASED`.  Idempotent."""
    out: list[MetricRow] = []
    for row in rows:
        if row.metric not in RELEASED_METRICS:
            out.append(MetricRow(metric=row.metric, value=None, p_value=None, num_points=row.num_points,
                                 num_dropped=row.num_dropped, coverage=row.coverage,
                                 details={"withheld": row.details.get("withheld") or NOT_RELEASED,
                                          **({"num_states": row.details["num_states"]}
                                             if "num_states" in row.details else {})}))
            continue
        if row.metric != metric_registry.HEADLINE or row.value is None:
            out.append(row)
            continue
        details = {k: v for k, v in row.details.items() if k in ("samples",)}
        interval = correlation_interval(row.value, row.num_points)
        p_value = correlation_p_value(row.value, row.num_points)
        if interval is not None:
            details["ci95"] = [disclose_value(interval[0]), disclose_value(interval[1])]
            details["interval"] = "fisher-z"
        details["significance"] = significance_marks(p_value)
        out.append(MetricRow(metric=row.metric, value=row.value, p_value=disclose_p_value(p_value),
                             num_points=row.num_points, num_dropped=row.num_dropped, coverage=row.coverage,
                             insufficient=row.insufficient, details=details))
    return out


__all__ = ["COMPARE_COST", "LEVEL", "NOT_RELEASED", "OPEN", "POINTS_PER_NUMBER", "RELEASED_METRICS", "RETIRED",
           "SPENT", "STATES", "BudgetSpent", "Ledger", "budget_size", "correlation_interval", "correlation_p_value",
           "NO_ROOM", "affordable", "reconstruction_rho", "released_rows", "transcript_bits"]

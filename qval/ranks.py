"""The rank of a row on a board, as a range that follows what the data can tell apart.

Row *j* is **significantly better** than row *i* when

* both rows share their points (one dataset version, split and target, the same points scored: their
  per-point predictions are known) -- by a **paired test** of their difference on those points, the
  resamples drawing the same trajectories for every row (:func:`paired_outcomes`: the bootstrap's standard
  error and Student's t over the resampled units, as *Compare*), with **Holm's correction** over every pair
  of the rows that share those points, so that the chance of calling any equal pair different stays at
  :data:`ALPHA`;
* otherwise (a reported number, rows on different points) -- when *j*'s whole 95% interval lies beyond
  *i*'s (Chatbot Arena's rule).  A row reported without an interval gets an **approximate** one from its
  point count (:func:`qval.metrics.approximate_ci`: Fisher's z, Bonett & Wright's standard error for
  Spearman's rho) and its rank is marked approximate; a row with neither counts as spanning the metric's
  whole range, so it is never ranked as if exact.

*i*'s **best rank** is 1 + the number of rows significantly better than *i*; its **worst rank** is the number
of rows not significantly worse than *i* (*i* itself included).  So rows that cannot be told apart share
ranks, and no row gets a point rank between rows ranked by ranges.  Nothing here knows about Django.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from qval import sampling

ALPHA: float = 0.05
"""Family-wise level of the paired tests among the rows that share their points (Holm)."""


@dataclass(frozen=True)
class Row:
    """What a rank is computed from: a value and its 95% interval ``[ci_low, ci_high]``, ``approximate``
    when it was not bootstrapped (:func:`qval.metrics.approximate_ci`, or the metric's whole range)."""

    value: float
    ci_low: float
    ci_high: float
    approximate: bool = False

    def __post_init__(self) -> None:
        if not math.isfinite(self.value):
            raise ValueError(f"a ranked value must be finite, got {self.value!r}")
        if not (math.isfinite(self.ci_low) and math.isfinite(self.ci_high)):
            raise ValueError(f"interval ends must be finite, got [{self.ci_low!r}, {self.ci_high!r}]")
        if self.ci_low > self.ci_high:
            raise ValueError(f"interval low end {self.ci_low!r} is above its high end {self.ci_high!r}")


@dataclass(frozen=True)
class Rank:
    """A row's rank: ``best`` to ``worst`` (1 is first); ``approximate`` when the row's interval is
    approximate (:attr:`Row.approximate`)."""

    best: int
    worst: int
    approximate: bool = False

    @property
    def label(self) -> str:
        """``"1"`` for a single rank, ``"2–4"`` (en dash) for a range."""
        return str(self.best) if self.best == self.worst else f"{self.best}\u2013{self.worst}"


def significantly_better(a: Row, b: Row, *, higher_is_better: bool = True) -> bool:
    """Whether ``a``'s interval lies wholly beyond ``b``'s."""
    return a.ci_low > b.ci_high if higher_is_better else a.ci_high < b.ci_low


def holm(p_values: Sequence[float] | np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Which of ``p_values`` Holm's step-down procedure rejects at family-wise level ``alpha`` (a boolean
    array): the smallest against ``alpha / m``, the next against ``alpha / (m - 1)``, ..., stopping at the
    first that is not rejected."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    passes = p[order] <= alpha / (m - np.arange(m))
    stop = int(np.argmin(passes)) if not passes.all() else m
    rejected = np.zeros(m, dtype=bool)
    rejected[order[:stop]] = True
    return rejected


def paired_outcomes(
    values: Sequence[float], resampled: np.ndarray, design: sampling.Design, *, higher_is_better: bool = True,
    alpha: float = ALPHA,
) -> dict[tuple[int, int], int]:
    """Paired tests of every pair of rows that share their points.

    ``values``: each row's value on the shared points; ``resampled``: ``(resamples, rows)``, each row's
    value on the same resamples of ``design``'s units (a resample where some row is undefined is left
    out).  For each pair ``(i, j)``, ``i < j``: the standard error of ``values[i] - values[j]`` from the
    resampled differences (their variance ``var_i + var_j - 2 cov_ij``, times the design's small-sample
    factor as in :func:`qval.metrics.cluster_se`), its two-sided Student's t p-value with the design's
    degrees of freedom (:func:`qval.compare.t_p_value`), and Holm's correction over all pairs.  The
    outcome is ``1`` when ``i`` is significantly better, ``-1`` when ``j`` is, ``0`` when they cannot be
    told apart."""
    k = len(values)
    if resampled.ndim != 2 or resampled.shape[1] != k:
        raise ValueError(f"resampled values must be (resamples, {k}), got {resampled.shape}")
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    if not pairs:
        return {}
    defined = resampled[~np.isnan(resampled).any(axis=1)]
    v = np.asarray(values, dtype=np.float64)
    first, second = (np.array(side, dtype=np.intp) for side in zip(*pairs))
    difference = v[first] - v[second]
    if defined.shape[0] < 2:
        p_values = np.ones(len(pairs))
    else:
        cov = np.atleast_2d(np.cov(defined, rowvar=False, ddof=1))
        variance = cov[first, first] + cov[second, second] - 2.0 * cov[first, second]
        se = np.sqrt(np.maximum(variance, 0.0) * design.variance_factor)
        with np.errstate(divide="ignore", invalid="ignore"):
            p_values = 2.0 * stats.t.sf(np.abs(difference) / se, design.dof)
        p_values = np.where(difference == 0.0, 1.0, np.where(se == 0.0, 0.0, p_values))  # as compare.t_p_value
    sign = 1.0 if higher_is_better else -1.0
    rejected = holm(p_values, alpha)
    return {pair: (int(np.sign(sign * d)) if reject else 0) for pair, d, reject in zip(pairs, difference, rejected)}


def rank(
    rows: Sequence[Row], *, higher_is_better: bool = True, paired: Mapping[tuple[int, int], int] | None = None,
) -> list[Rank]:
    """The :class:`Rank` of each of ``rows``, in their order (see the module doc for the rule).

    ``paired``: the outcomes of paired tests (:func:`paired_outcomes`, keys ``(i, j)`` with ``i < j`` in
    ``rows``' indices) for the pairs that share their points; every other pair is judged by its
    intervals.  Quadratic in the number of rows, which a board (one slice, best per entry) keeps in the
    hundreds."""
    decided = paired or {}

    def better(i: int, j: int) -> bool:
        key, flip = ((i, j), 1) if i < j else ((j, i), -1)
        if key in decided:
            return decided[key] * flip == 1
        return significantly_better(rows[i], rows[j], higher_is_better=higher_is_better)

    out = []
    for i, row in enumerate(rows):
        above = sum(1 for j in range(len(rows)) if j != i and better(j, i))
        below = sum(1 for j in range(len(rows)) if j != i and better(i, j))
        out.append(Rank(above + 1, len(rows) - below, approximate=row.approximate))
    return out


__all__ = ["ALPHA", "Rank", "Row", "holm", "paired_outcomes", "rank", "significantly_better"]

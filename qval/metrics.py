"""The numeric scoring engine: correlations, ranking and selection metrics, bootstrap CIs.

Pointwise metrics follow the QVal v1.0 reference implementation (checked number for number
against its published summary files, see :mod:`qval.reference`):

* a pair is dropped when either value is NaN; ``num_points`` counts the pairs that remain;
* ``spearman``, ``kendall_tau`` (tau-b) and ``pearson`` are :func:`scipy.stats.spearmanr`,
  :func:`scipy.stats.kendalltau` and :func:`scipy.stats.pearsonr` with their default
  two-sided p-values (Spearman is computed here by scipy's formula, without
  ``spearmanr``'s overhead, and agrees with it to rounding);
* a constant input (labels or predictions) has no correlation: value and p-value are ``None``;
* ``sign_agreement`` is the fraction of pairs with ``numpy.sign(label) == numpy.sign(score)``
  (so 0 agrees with 0), its p-value the two-sided ``scipy.stats.binomtest(k, n, 0.5)``;
* fewer than ``min_points`` pairs (default :data:`MIN_USABLE_POINTS`) is *insufficient*: the
  value and p-value are ``None``;
* aggregates and ranking summaries use the sample standard deviation (``ddof=1``).

Values must be finite or NaN; an infinite value is rejected with :class:`ValueError`.
Only numpy and scipy are used; nothing here knows about Django.

**Rules.** Functions that differ between our rules and the reference code take
``rules`` (:data:`RULES`): ``"qval"`` (ours, the default) or ``"qval-v1.0"``, which
reproduces the reference code exactly:

* a state where the method gives every candidate the same score has an undefined (NaN)
  ranking Spearman, which makes the ranking mean and std undefined (ours: 0.0);
* a state with a missing or NaN candidate score is skipped whole (ours: the candidate is
  dropped and the state kept);
* the std over exactly one valid state (even one whose value is NaN), and the aggregate
  std over exactly one valid sample, are 0.0 (ours: ``None``);
* infinite values are kept (ours: rejected).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special, stats

from qval import metric_registry

MIN_USABLE_POINTS: int = 50
"""Fewest pairs a pointwise correlation is reported on (the reference's
``min_usable_correlation_points``)."""

POINT_METRICS: tuple[str, ...] = metric_registry.POINT
"""Every pointwise metric, in the order they are reported (from :mod:`qval.metric_registry`)."""

_CORRELATION_METRICS: frozenset[str] = frozenset({"spearman", "kendall_tau", "pearson"})
"""Metrics that are undefined (``None``) when either side is constant."""

BOOTSTRAP_CHUNK_ELEMENTS: int = 1 << 21
"""Resampled pairs held in memory at once by the vectorised bootstrap (per array)."""

BOOTSTRAP_MAX_WORK: int = 100_000_000
"""Cap on resamples x pairs for the vectorised bootstrap metrics (pearson, spearman,
sign_agreement); beyond it fewer resamples are drawn, but never fewer than
:data:`BOOTSTRAP_MIN_CAPPED_RESAMPLES`."""

KENDALL_BOOTSTRAP_MAX_WORK: int = 10_000_000
"""The same cap for ``kendall_tau`` (vectorised up to :data:`KENDALL_VECTOR_MAX_POINTS`
points, one resample at a time beyond)."""

KENDALL_VECTOR_MAX_POINTS: int = 20_000
"""Largest sample whose bootstrap Kendall tau is computed by :class:`_KendallResampler`
(vectorised over resamples; its block matrices grow as ``n ** 1.5``, 23 MB at the limit); larger samples
call :func:`scipy.stats.kendalltau` once per resample."""

BOOTSTRAP_MIN_CAPPED_RESAMPLES: int = 100
"""Resamples drawn at least when a work cap applies (unless fewer were requested)."""

FloatArray = NDArray[np.float64]

QVAL_RULES, REFERENCE_RULES, RULES = metric_registry.QVAL_RULES, metric_registry.REFERENCE_RULES, metric_registry.RULES


def check_rules(rules: str) -> None:
    """``ValueError`` unless ``rules`` is one of :data:`RULES`."""
    if rules not in RULES:
        raise ValueError(f"unknown rules {rules!r}; expected one of {', '.join(RULES)}")


def significance_marks(p_value: float | None) -> str:
    """The paper's significance marks: ``***`` p<.001, ``**`` p<.01, ``*`` p<.10, else ``""``.

    ``None`` or NaN gives ``""``.
    """
    if p_value is None or math.isnan(p_value):
        return ""
    if p_value < 0.001:
        return "***"
    if p_value < 0.01:
        return "**"
    if p_value < 0.10:
        return "*"
    return ""


@dataclass(frozen=True)
class Correlation:
    """One pointwise metric of (labels, scores).

    ``value``/``p_value`` are ``None`` when the metric is undefined (a constant input) or
    when ``insufficient`` (fewer than ``min_points`` pairs).  ``num_points`` is the number of
    pairs used after dropping the ``num_dropped`` pairs that had a NaN on either side.
    """

    metric: str
    value: float | None
    p_value: float | None
    num_points: int
    num_dropped: int
    insufficient: bool

    def significance(self) -> str:
        """Significance marks of :attr:`p_value` (see :func:`significance_marks`)."""
        return significance_marks(self.p_value)


def _finite_or_nan(values: ArrayLike, name: str, rules: str = QVAL_RULES) -> FloatArray:
    """``values`` as a 1-D float64 array; ``ValueError`` if it is not 1-D or, under our
    rules, holds ±inf."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if rules == QVAL_RULES and np.isinf(array).any():
        raise ValueError(f"{name} contains an infinite value at index {int(np.flatnonzero(np.isinf(array))[0])}")
    return array


def _paired(labels: ArrayLike, scores: ArrayLike, rules: str = QVAL_RULES) -> tuple[FloatArray, FloatArray, int]:
    """Labels and scores with every pair holding a NaN removed, and how many were removed."""
    check_rules(rules)
    x = _finite_or_nan(labels, "labels", rules)
    y = _finite_or_nan(scores, "scores", rules)
    if x.shape != y.shape:
        raise ValueError(f"labels and scores differ in length: {x.size} != {y.size}")
    keep = ~(np.isnan(x) | np.isnan(y))
    dropped = int(x.size - np.count_nonzero(keep))
    if dropped:
        return x[keep], y[keep], dropped
    return x, y, 0


def _is_constant(values: FloatArray) -> bool:
    """Whether every entry equals the first (what scipy calls a constant input)."""
    return bool(values.size == 0 or values.min() == values.max())


def _optional(value: float) -> float | None:
    """``value`` as a Python float, or ``None`` when it is NaN."""
    value = float(value)
    return None if math.isnan(value) else value


def _check_metric(metric: str) -> None:
    if metric not in POINT_METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(POINT_METRICS)}")


def _check_min_points(min_points: int) -> None:
    if min_points < 2:
        raise ValueError(f"min_points must be at least 2, got {min_points}")


def _statistic(x: FloatArray, y: FloatArray, metric: str) -> tuple[float | None, float | None]:
    """(value, p-value) of ``metric`` on NaN-free pairs (at least two of them)."""
    if metric == "sign_agreement":
        agree = int(np.count_nonzero(np.sign(x) == np.sign(y)))
        return agree / x.size, float(stats.binomtest(agree, x.size, 0.5).pvalue)
    if _is_constant(x) or _is_constant(y):
        return None, None
    if metric == "spearman":
        return _spearman(x, y)
    if metric == "kendall_tau":
        result = stats.kendalltau(x, y)
    else:
        with np.errstate(invalid="ignore"):  # an infinite value (reference rules): undefined, no warning
            result = stats.pearsonr(x, y)
    value = _optional(result.statistic)
    return value, (None if value is None else _optional(result.pvalue))


def _average_ranks(values: FloatArray) -> FloatArray:
    """1-based ranks, ties getting their average rank: ``scipy.stats.rankdata(values)``.

    One unstable sort: the order among tied values does not change their rank.
    """
    order = np.argsort(values)
    ordered = values[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    stops = np.append(starts[1:], values.size)
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat((starts + stops + 1) / 2.0, stops - starts)
    return ranks


def _spearman(x: FloatArray, y: FloatArray) -> tuple[float | None, float | None]:
    """``scipy.stats.spearmanr(x, y)`` (non-constant, NaN-free inputs), without its overhead.

    The Pearson correlation of the average ranks, and scipy's two-sided p-value from
    Student's t with ``n - 2`` degrees of freedom.
    """
    rx = _average_ranks(x)
    rx -= rx.mean()
    ry = _average_ranks(y)
    ry -= ry.mean()
    rho = float(np.dot(rx, ry) / math.sqrt(float(np.dot(rx, rx)) * float(np.dot(ry, ry))))
    rho = min(1.0, max(-1.0, rho))
    dof = np.float64(x.size - 2)
    r = np.float64(rho)
    with np.errstate(divide="ignore", invalid="ignore"):  # |rho| = 1: t is infinite, as in scipy
        t = r * np.sqrt(np.clip(dof / ((r + 1.0) * (1.0 - r)), 0.0, None))
    p_value = 2.0 * float(special.stdtr(dof, -abs(t)))
    return _optional(rho), _optional(p_value)


def _correlation(x: FloatArray, y: FloatArray, metric: str, num_dropped: int, min_points: int) -> Correlation:
    if x.size < min_points:
        return Correlation(metric, None, None, int(x.size), num_dropped, insufficient=True)
    value, p_value = _statistic(x, y, metric)
    return Correlation(metric, value, p_value, int(x.size), num_dropped, insufficient=False)


def correlate(
    labels: ArrayLike, scores: ArrayLike, metric: str, *, min_points: int = MIN_USABLE_POINTS,
    rules: str = QVAL_RULES,
) -> Correlation:
    """One pointwise metric (one of :data:`POINT_METRICS`) of ``scores`` against ``labels``.

    Pairs with a NaN on either side are dropped first.  ``min_points`` must be at least 2.
    """
    _check_metric(metric)
    _check_min_points(min_points)
    x, y, dropped = _paired(labels, scores, rules)
    return _correlation(x, y, metric, dropped, min_points)


def point_metrics(
    labels: ArrayLike,
    scores: ArrayLike,
    *,
    metrics: Sequence[str] = POINT_METRICS,
    min_points: int = MIN_USABLE_POINTS,
    rules: str = QVAL_RULES,
) -> dict[str, Correlation]:
    """Several pointwise metrics at once, keyed by metric name in the order given.

    NaN pairs are dropped once and each metric is one vectorised pass (Spearman ranks with
    one sort per side, Kendall is scipy's O(n log n) ``kendalltau``), so a million points
    take about half a second.
    """
    for metric in metrics:
        _check_metric(metric)
    _check_min_points(min_points)
    x, y, dropped = _paired(labels, scores, rules)
    return {metric: _correlation(x, y, metric, dropped, min_points) for metric in metrics}


# -- ranking within states --------------------------------------------------------------


@dataclass(frozen=True)
class RankingSummary:
    """Per-state ranking Spearman values and their summary (the reference's rule 7).

    ``mean`` is ``None`` without valid states, ``std`` (sample, ``ddof=1``) with fewer than
    two.  ``num_points`` is the number of states, valid or skipped; ``per_state`` holds each
    state's value, ``None`` for a skipped state.
    """

    mean: float | None
    std: float | None
    num_valid: int
    num_skipped: int
    num_points: int
    per_state: list[float | None]


def state_ranking_spearman(labels: ArrayLike, scores: ArrayLike, rules: str = QVAL_RULES) -> float | None:
    """Spearman between one state's candidate labels and predicted scores.

    Candidates with a NaN label or score are dropped first.  ``None`` (skipped): fewer than
    two candidates remain, or all their labels are equal.  If every remaining candidate got
    the same score the method abstained and the result is ``0.0`` (not skipped, so
    abstaining cannot raise a mean).  Otherwise the value equals
    ``scipy.stats.spearmanr(labels, scores).statistic``: the Pearson correlation of the
    average ranks.

    Under the reference rules a state with any NaN score is skipped (``None``) and one
    where every candidate got the same score is NaN.
    """
    if rules == REFERENCE_RULES and np.isnan(_finite_or_nan(scores, "scores", rules)).any():
        return None
    x, y, _ = _paired(labels, scores, rules)
    if x.size < 2 or _is_constant(x):
        return None
    if _is_constant(y):
        return math.nan if rules == REFERENCE_RULES else 0.0
    rx = stats.rankdata(x)
    ry = stats.rankdata(y)
    rx -= rx.mean()
    ry -= ry.mean()
    rho = float(np.dot(rx, ry) / math.sqrt(float(np.dot(rx, rx)) * float(np.dot(ry, ry))))
    return min(1.0, max(-1.0, rho))


def _valid(values: Sequence[float | None]) -> FloatArray:
    """The entries of ``values`` that are neither ``None`` nor NaN, as float64."""
    array = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
    return array[~np.isnan(array)]


def _std(valid: FloatArray, rules: str) -> float | None:
    """Sample std (``ddof=1``) of ``valid``: ``None`` below two values, except that the
    reference rules give 0.0 for exactly one."""
    if valid.size >= 2:
        return float(valid.std(ddof=1))
    return 0.0 if valid.size == 1 and rules == REFERENCE_RULES else None


def ranking_summary(per_state: Sequence[float | None], rules: str = QVAL_RULES) -> RankingSummary:
    """Mean and sample std of the non-``None`` per-state values (the reference's rule 7).

    NaN counts as ``None`` under our rules; under the reference rules a NaN state counts as
    valid and makes the mean and std undefined (``None``), except that the std of exactly one
    valid state is 0.0 there, as the reference writes it.
    """
    check_rules(rules)
    if rules == REFERENCE_RULES and any(v is not None and math.isnan(v) for v in per_state):
        num_valid = sum(v is not None for v in per_state)
        return RankingSummary(  # the reference's std of exactly one value is 0.0, even of a NaN
            mean=None, std=0.0 if num_valid == 1 else None, num_valid=num_valid, num_skipped=len(per_state) - num_valid,
            num_points=len(per_state),
            per_state=[None if v is None or math.isnan(v) else float(v) for v in per_state],
        )
    valid = _valid(per_state)
    return RankingSummary(
        mean=float(valid.mean()) if valid.size else None,
        std=_std(valid, rules),
        num_valid=int(valid.size),
        num_skipped=len(per_state) - int(valid.size),
        num_points=len(per_state),
        per_state=[None if v is None or math.isnan(v) else float(v) for v in per_state],
    )


def ranking_spearman(groups: Iterable[tuple[ArrayLike, ArrayLike]], rules: str = QVAL_RULES) -> RankingSummary:
    """:func:`state_ranking_spearman` of every ``(labels, scores)`` state, summarised."""
    return ranking_summary([state_ranking_spearman(labels, scores, rules) for labels, scores in groups], rules)


# -- aggregates over samples ------------------------------------------------------------


@dataclass(frozen=True)
class Aggregate:
    """Summary of several samples' values (the reference's rule 6).

    Statistics are over the non-``None`` values: ``None`` when there are none (``std``, the
    sample standard deviation with ``ddof=1``, when there are fewer than two).
    ``num_samples`` counts the non-``None`` values, ``num_nan`` the ``None`` (or NaN) ones.
    """

    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    median: float | None
    num_samples: int
    num_nan: int


def aggregate(values: Sequence[float | None], rules: str = QVAL_RULES) -> Aggregate:
    """:class:`Aggregate` of ``values`` (``None`` and NaN are missing); the std of one value
    is 0.0 under the reference rules."""
    check_rules(rules)
    valid = _valid(values)
    if not valid.size:
        return Aggregate(None, None, None, None, None, 0, len(values))
    return Aggregate(
        mean=float(valid.mean()),
        std=_std(valid, rules),
        min=float(valid.min()),
        max=float(valid.max()),
        median=float(np.median(valid)),
        num_samples=int(valid.size),
        num_nan=len(values) - int(valid.size),
    )


# -- selection --------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """How well a method's scores pick and order candidate actions.

    ``top1_accuracy``: fraction of states where the top-scored candidate has the state's
    best label.  ``regret_at_1``: mean of (best label - label of the top-scored candidate).
    ``pairwise_accuracy``: over all candidate pairs with different labels (pooled across
    states), the fraction ordered like their labels, a tied score counting 0.5.
    ``num_states``: states evaluated; ``num_pairs``: pairs behind ``pairwise_accuracy``.
    A metric is ``None`` when there is nothing to average.
    """

    top1_accuracy: float | None
    regret_at_1: float | None
    pairwise_accuracy: float | None
    num_states: int
    num_pairs: int


def selection_metrics(groups: Iterable[tuple[ArrayLike, ArrayLike]], rules: str = QVAL_RULES) -> Selection:
    """Top-1 accuracy, regret@1 and pairwise accuracy over ``(labels, scores)`` states.

    Rules:

    * candidates with a NaN label are ignored; a state whose remaining candidates all have a
      NaN score is skipped (not counted in ``num_states``);
    * the chosen candidate is the one with the highest score among the scored candidates;
      ties go to the lowest index among the tied;
    * the state's best label is the maximum over all its labelled candidates, scored or not,
      so leaving candidates unscored cannot make a choice look better;
    * pairs only involve candidates that have both a label and a score.
    """
    correct = 0
    regret = 0.0
    num_states = 0
    pair_credit = 0.0
    num_pairs = 0
    for labels, scores in groups:
        x = _finite_or_nan(labels, "labels", rules)
        y = _finite_or_nan(scores, "scores", rules)
        if x.shape != y.shape:
            raise ValueError(f"labels and scores differ in length: {x.size} != {y.size}")
        labelled = ~np.isnan(x)
        x, y = x[labelled], y[labelled]
        scored = ~np.isnan(y)
        if not scored.any():
            continue
        num_states += 1
        best = float(x.max())
        chosen = float(x[scored][int(np.argmax(y[scored]))])
        correct += chosen == best
        regret += best - chosen
        xs, ys = x[scored], y[scored]
        upper = np.triu_indices(xs.size, k=1)
        label_diff = np.sign((xs[:, None] - xs[None, :])[upper])
        score_diff = np.sign((ys[:, None] - ys[None, :])[upper])
        differ = label_diff != 0
        num_pairs += int(np.count_nonzero(differ))
        pair_credit += float(np.count_nonzero(differ & (label_diff == score_diff)))
        pair_credit += 0.5 * float(np.count_nonzero(differ & (score_diff == 0)))
    return Selection(
        top1_accuracy=correct / num_states if num_states else None,
        regret_at_1=regret / num_states if num_states else None,
        pairwise_accuracy=pair_credit / num_pairs if num_pairs else None,
        num_states=num_states,
        num_pairs=num_pairs,
    )


# -- bootstrap confidence intervals -----------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A percentile bootstrap interval.

    ``low``/``high`` are ``None`` when the statistic cannot be bootstrapped (too few values,
    undefined on the full sample, or undefined on every resample).  ``resamples`` is the
    number of resamples drawn, which a work cap may make smaller than requested.
    """

    low: float | None
    high: float | None
    level: float
    resamples: int


def _check_bootstrap(resamples: int, level: float) -> None:
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")


def _percentile_interval(statistics: FloatArray, level: float, resamples: int) -> Interval:
    """Percentile interval of the defined (non-NaN) resample statistics."""
    defined = statistics[~np.isnan(statistics)]
    if not defined.size:
        return Interval(None, None, level, resamples)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(defined, [tail, 1.0 - tail])
    return Interval(float(low), float(high), level, resamples)


def _capped(resamples: int, n: int, max_work: int) -> int:
    """Resamples to draw for ``n`` values under a resamples x values budget of ``max_work``."""
    return min(resamples, max(BOOTSTRAP_MIN_CAPPED_RESAMPLES, max_work // max(n, 1)))


def _row_pearson(a: FloatArray, b: FloatArray) -> FloatArray:
    """Pearson correlation of each row of ``a`` with the same row of ``b`` (NaN if constant)."""
    constant = (a.min(axis=1) == a.max(axis=1)) | (b.min(axis=1) == b.max(axis=1))
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.einsum("ij,ij->i", a, b) / np.sqrt(np.einsum("ij,ij->i", a, a) * np.einsum("ij,ij->i", b, b))
    r[constant] = np.nan
    return np.clip(r, -1.0, 1.0)


def _resample_ranks(dense: NDArray[np.intp], num_groups: int, idx: NDArray[np.intp]) -> FloatArray:
    """Average ranks (1-based, ties averaged) of the values drawn in each row of ``idx``.

    ``dense[i]`` is the dense rank (0-based) of value ``i`` among ``num_groups`` distinct
    values.  Counting how often each distinct value was drawn gives every rank without
    sorting a resample: a value's average rank is the number of drawn values below it plus
    (its count + 1) / 2.
    """
    rows, n = idx.shape
    drawn = dense[idx] + (np.arange(rows) * num_groups)[:, None]
    counts = np.bincount(drawn.ravel(), minlength=rows * num_groups).astype(np.float64)
    counts = counts.reshape(rows, num_groups)
    average = np.cumsum(counts, axis=1) - (counts - 1.0) / 2.0
    return average.ravel()[drawn]


def _resample_counts(idx: NDArray[np.intp], n: int, dtype: type = np.float64) -> NDArray[np.floating]:
    """How often each of ``n`` points is drawn in each row of ``idx``: an ``(n + 1, rows)``
    array whose last row is zero (the padding slot of :class:`_KendallResampler`)."""
    rows = idx.shape[0]
    counts = np.zeros((n + 1, rows), dtype=dtype)
    counts[:n] = np.bincount((idx * rows + np.arange(rows)[:, None]).ravel(), minlength=n * rows).reshape(n, rows)
    return counts


def _runs(ordered: NDArray[np.intp]) -> NDArray[np.intp]:
    """Start positions of the runs of equal values in ``ordered``."""
    return np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))


def _blocks(dense: NDArray[np.intp], order: NDArray[np.intp], size: int) -> tuple[NDArray[np.intp], int]:
    """Consecutive blocks of about ``size`` points along ``order`` (sorted by ``dense``) that
    never split a run of tied values: the block of each point, and how many blocks."""
    starts = _runs(dense[order])
    sizes = np.diff(np.append(starts, order.size))
    ids = np.empty(starts.size, dtype=np.intp)
    block = fill = 0
    for group, count in enumerate(sizes.tolist()):
        if fill and fill + count > size:
            block, fill = block + 1, 0
        ids[group] = block
        fill += count
    out = np.empty(order.size, dtype=np.intp)
    out[order] = np.repeat(ids, sizes)
    return out, block + 1


class _KendallResampler:
    """Kendall's tau-b of ``(x, y)`` on many bootstrap resamples at once, equal to
    :func:`scipy.stats.kendalltau` on each resample (NaN where a side is constant).

    A resample is given by how often it draws each point (:func:`_resample_counts`), so a
    pair of points ``(i, j)`` counts ``c_i * c_j`` times.  The discordant pairs are split
    three ways: points in different blocks of ``x`` *and* of ``y`` (blocks of about
    ``2 sqrt(n)`` points along each sorted side, never splitting ties) are discordant as
    their blocks are, counted on the grid of block pairs with two cumulative sums; pairs
    within one ``x`` block, and pairs within one ``y`` block but different ``x`` blocks,
    are quadratic forms with fixed small 0/1 matrices, one batched matrix product each.
    Ties in ``x``, in ``y`` and in both are sums of counts over runs of equal values.
    Every count is an exact integer, so tau is scipy's formula on the same integers.
    """

    def __init__(self, x: FloatArray, y: FloatArray) -> None:
        xd = stats.rankdata(x, method="dense").astype(np.intp) - 1
        yd = stats.rankdata(y, method="dense").astype(np.intp) - 1
        n = self.n = int(xd.size)
        # Integer counts up to n are exact in float32 below 2**24 (and the products stay sums of them).
        self.dtype = np.float32 if n < 1 << 24 else np.float64
        size = max(16, 2 * math.isqrt(n))  # balances the block matrices (n * size) and the grid ((n / size) ** 2)
        self.by_x, self.by_y = np.lexsort((yd, xd)), np.lexsort((xd, yd))
        self.x_runs, self.y_runs = _runs(xd[self.by_x]), _runs(yd[self.by_y])
        self.joint_runs = np.flatnonzero(
            np.concatenate(([True], (np.diff(xd[self.by_x]) != 0) | (np.diff(yd[self.by_x]) != 0))))
        bx, self.kx = _blocks(xd, self.by_x, size)
        by, self.ky = _blocks(yd, self.by_y, size)
        self.x_slots, self.x_pairs = self._within(self.by_x, bx, self.kx, xd, yd, None)
        self.y_slots, self.y_pairs = self._within(self.by_y, by, self.ky, xd, yd, bx)
        cell = bx * self.ky + by
        self.by_cell = np.argsort(cell, kind="stable")
        self.cell_runs = _runs(cell[self.by_cell])
        self.cells = cell[self.by_cell][self.cell_runs]
        self.total = n * (n - 1) // 2

    def _within(
        self, order: NDArray[np.intp], block: NDArray[np.intp], blocks: int, xd: NDArray[np.intp],
        yd: NDArray[np.intp], apart: NDArray[np.intp] | None,
    ) -> tuple[NDArray[np.intp], NDArray[np.floating]]:
        """Points of each block (padded with ``n``) and the 0/1 matrix of its discordant pairs
        ``[s, t]`` (``x_t < x_s`` and ``y_t > y_s``; with ``apart``, only pairs in different
        ``apart`` blocks); blocks without a discordant pair are left out."""
        n = self.n
        ordered = block[order]
        sizes = np.bincount(ordered, minlength=blocks)
        slots = np.full((blocks, int(sizes.max())), n, dtype=np.intp)
        slots[ordered, np.arange(n) - np.repeat(np.cumsum(sizes) - sizes, sizes)] = order
        real = slots < n
        xs, ys = np.append(xd, 0)[slots], np.append(yd, 0)[slots]
        pairs = (xs[:, None, :] < xs[:, :, None]) & (ys[:, None, :] > ys[:, :, None])
        pairs &= real[:, :, None] & real[:, None, :]
        if apart is not None:
            group = np.append(apart, -1)[slots]
            pairs &= group[:, :, None] != group[:, None, :]
        used = pairs.any(axis=(1, 2))
        return slots[used], pairs[used].astype(self.dtype)

    @staticmethod
    def _quadratic(counts: NDArray[np.floating], slots: NDArray[np.intp], pairs: NDArray[np.floating]) -> FloatArray:
        """Per resample, the weighted number of pairs ``pairs`` marks in each block."""
        if not slots.size:
            return np.zeros(counts.shape[1])
        drawn = counts[slots]  # blocks x slots x resamples
        return np.einsum("bsr,bsr->r", np.matmul(pairs, drawn), drawn, dtype=np.float64)

    @staticmethod
    def _tied(ordered: NDArray[np.floating], runs: NDArray[np.intp]) -> FloatArray:
        """Per resample, the pairs drawn within runs of equal values (``ordered``: counts in sorted order)."""
        totals = ordered if runs.size == ordered.shape[0] else np.add.reduceat(ordered, runs, axis=0)
        totals = totals.astype(np.float64)
        return (totals * (totals - 1.0)).sum(axis=0) / 2.0

    def __call__(self, counts: NDArray[np.floating]) -> FloatArray:
        """Tau-b of each resample (a column of ``counts``, from :func:`_resample_counts` with :attr:`dtype`)."""
        rows = counts.shape[1]
        grid = np.zeros((self.kx * self.ky, rows), dtype=self.dtype)
        grid[self.cells] = np.add.reduceat(counts[self.by_cell], self.cell_runs, axis=0)
        grid = grid.reshape(self.kx, self.ky, rows)
        before = np.cumsum(grid, axis=0) - grid  # earlier x blocks
        above = np.cumsum(before[:, ::-1], axis=1)[:, ::-1] - before  # ... and later y blocks
        discordant = (
            np.einsum("pqr,pqr->r", grid, above, dtype=np.float64)
            + self._quadratic(counts, self.x_slots, self.x_pairs)
            + self._quadratic(counts, self.y_slots, self.y_pairs)
        )
        by_x = counts[self.by_x]
        x_ties, joint_ties = self._tied(by_x, self.x_runs), self._tied(by_x, self.joint_runs)
        y_ties = self._tied(counts[self.by_y], self.y_runs)
        total = self.total
        with np.errstate(invalid="ignore", divide="ignore"):
            tau = (total - x_ties - y_ties + joint_ties - 2.0 * discordant) / np.sqrt(total - x_ties) / np.sqrt(total - y_ties)
        tau[(x_ties == total) | (y_ties == total)] = np.nan
        return np.clip(tau, -1.0, 1.0)


def _resample_statistic(x: FloatArray, y: FloatArray, metric: str) -> Callable[[NDArray[np.intp]], FloatArray]:
    """A function giving ``metric`` on each resample ``(x[idx[r]], y[idx[r]])`` of an index
    matrix ``idx``, NaN where it is undefined (a constant side)."""
    if metric == "sign_agreement":
        agree = (np.sign(x) == np.sign(y)).astype(np.float64)
        return lambda idx: agree[idx].mean(axis=1)
    if metric == "pearson":
        return lambda idx: _row_pearson(x[idx], y[idx])
    if metric == "spearman":
        x_dense = stats.rankdata(x, method="dense").astype(np.intp) - 1
        y_dense = stats.rankdata(y, method="dense").astype(np.intp) - 1
        x_groups, y_groups = int(x_dense.max()) + 1, int(y_dense.max()) + 1
        return lambda idx: _row_pearson(
            _resample_ranks(x_dense, x_groups, idx), _resample_ranks(y_dense, y_groups, idx)
        )
    if x.size <= KENDALL_VECTOR_MAX_POINTS:
        tau = _KendallResampler(x, y)
        return lambda idx: tau(_resample_counts(idx, x.size, tau.dtype))

    def kendall(idx: NDArray[np.intp]) -> FloatArray:
        out = np.full(idx.shape[0], np.nan)
        for row, draw in enumerate(idx):
            xs, ys = x[draw], y[draw]
            if not (_is_constant(xs) or _is_constant(ys)):
                out[row] = stats.kendalltau(xs, ys).statistic
        return out

    return kendall


def bootstrap_point_ci(
    labels: ArrayLike,
    scores: ArrayLike,
    metric: str,
    *,
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    rules: str = QVAL_RULES,
) -> Interval:
    """Seeded percentile-bootstrap interval of a pointwise metric, resampling pairs.

    NaN pairs are dropped first; each resample draws that many pairs with replacement.
    Resamples on which the metric is undefined (a constant side) are left out of the
    percentiles.  Every metric is vectorised over resamples (Kendall's tau up to
    :data:`KENDALL_VECTOR_MAX_POINTS` points, one resample at a time beyond).  Work is capped at
    :data:`BOOTSTRAP_MAX_WORK` (:data:`KENDALL_BOOTSTRAP_MAX_WORK` for Kendall) resampled
    pairs, never going below :data:`BOOTSTRAP_MIN_CAPPED_RESAMPLES` resamples.  The same
    inputs and ``seed`` always give the same interval.
    """
    _check_metric(metric)
    _check_bootstrap(resamples, level)
    x, y, _ = _paired(labels, scores, rules)
    n = int(x.size)
    if n < 2 or (metric in _CORRELATION_METRICS and (_is_constant(x) or _is_constant(y))):
        return Interval(None, None, level, 0)
    max_work = KENDALL_BOOTSTRAP_MAX_WORK if metric == "kendall_tau" else BOOTSTRAP_MAX_WORK
    total = _capped(resamples, n, max_work)
    statistic = _resample_statistic(x, y, metric)
    rng = np.random.default_rng(seed)
    chunk = max(1, BOOTSTRAP_CHUNK_ELEMENTS // n)
    parts = [
        statistic(rng.integers(0, n, size=(min(chunk, total - start), n))) for start in range(0, total, chunk)
    ]
    return _percentile_interval(np.concatenate(parts), level, total)


def bootstrap_ranking_ci(
    per_state: Sequence[float | None],
    *,
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Seeded percentile-bootstrap interval of the mean ranking Spearman, resampling states.

    Skipped states (``None`` or NaN) are left out first; fewer than two valid states give
    ``None`` bounds.
    """
    _check_bootstrap(resamples, level)
    valid = _valid(per_state)
    n = int(valid.size)
    if n < 2:
        return Interval(None, None, level, 0)
    total = _capped(resamples, n, BOOTSTRAP_MAX_WORK)
    rng = np.random.default_rng(seed)
    chunk = max(1, BOOTSTRAP_CHUNK_ELEMENTS // n)
    means = [
        valid[rng.integers(0, n, size=(min(chunk, total - start), n))].mean(axis=1)
        for start in range(0, total, chunk)
    ]
    return _percentile_interval(np.concatenate(means), level, total)

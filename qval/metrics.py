"""The numeric scoring engine: correlations, ranking and selection metrics, bootstrap CIs.

Pointwise metrics follow the QVal v1.0 reference implementation (checked number for number
against its published summary files, see :mod:`qval.paper.qval_v1.reference`):

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

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import sparse, special, stats

from qval import metric_registry, sampling

MIN_USABLE_POINTS: int = 50
"""Fewest pairs a pointwise correlation is reported on (the reference's
``min_usable_correlation_points``)."""

POINT_METRICS: Sequence[str] = metric_registry.POINT
"""Every pointwise metric, in the order they are reported (read from :mod:`qval.metric_registry`
each time, so a registered metric is among them)."""

BOOTSTRAP_CHUNK_ELEMENTS: int = 1 << 21
"""Resampled pairs held in memory at once by the vectorised bootstrap (per array)."""

BOOTSTRAP_SUBSAMPLE_POINTS: int = 20_000
"""Largest sample a bootstrap resamples whole; a larger one is bootstrapped on a seeded
random choice of whole units holding about this many points, its spread rescaled (:func:`plan`)."""

KENDALL_VECTOR_MAX_POINTS: int = BOOTSTRAP_SUBSAMPLE_POINTS
"""Largest sample whose bootstrap Kendall tau is computed by :class:`KendallResampler`
(vectorised over resamples; its block matrices grow as ``n ** 1.5``, 23 MB at the limit); larger samples
(only when the subsample is made larger) call :func:`scipy.stats.kendalltau` once per resample."""

BOOTSTRAP_MIN_CAPPED_RESAMPLES: int = 100
"""Resamples drawn at least when a work cap applies (unless fewer were requested)."""

FloatArray = NDArray[np.float64]
T = TypeVar("T")

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


def finite_or_nan(values: ArrayLike, name: str, rules: str = QVAL_RULES) -> FloatArray:
    """``values`` as a 1-D float64 array; ``ValueError`` if it is not 1-D or, under our
    rules, holds ±inf."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if rules == QVAL_RULES and np.isinf(array).any():
        raise ValueError(f"{name} contains an infinite value at index {int(np.flatnonzero(np.isinf(array))[0])}")
    return array


def _paired_mask(
    labels: ArrayLike, scores: ArrayLike, rules: str = QVAL_RULES
) -> tuple[FloatArray, FloatArray, NDArray[np.bool_]]:
    """Labels and scores with every pair holding a NaN removed, and the mask of the pairs kept."""
    check_rules(rules)
    x = finite_or_nan(labels, "labels", rules)
    y = finite_or_nan(scores, "scores", rules)
    if x.shape != y.shape:
        raise ValueError(f"labels and scores differ in length: {x.size} != {y.size}")
    keep = ~(np.isnan(x) | np.isnan(y))
    if keep.all():
        return x, y, keep
    return x[keep], y[keep], keep


def _paired(labels: ArrayLike, scores: ArrayLike, rules: str = QVAL_RULES) -> tuple[FloatArray, FloatArray, int]:
    """Labels and scores with every pair holding a NaN removed, and how many were removed."""
    x, y, keep = _paired_mask(labels, scores, rules)
    return x, y, int(keep.size - np.count_nonzero(keep))


def _is_constant(values: FloatArray) -> bool:
    """Whether every entry equals the first (what scipy calls a constant input)."""
    return bool(values.size == 0 or values.min() == values.max())


def _optional(value: float) -> float | None:
    """``value`` as a Python float, or ``None`` when it is NaN."""
    value = float(value)
    return None if math.isnan(value) else value


def point_metric(metric: str) -> metric_registry.MetricSpec:
    """The registry entry of the point metric ``metric``; ``ValueError`` naming the point metrics."""
    if metric not in POINT_METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(POINT_METRICS)}")
    return metric_registry.get(metric)


def check_min_points(min_points: int) -> None:
    """``ValueError`` unless ``min_points`` is at least 2."""
    if min_points < 2:
        raise ValueError(f"min_points must be at least 2, got {min_points}")


def _statistic(x: FloatArray, y: FloatArray, spec: metric_registry.MetricSpec) -> tuple[float | None, float | None]:
    """(value, p-value) of the point metric ``spec`` on NaN-free pairs (at least two of them):
    its registered function, or ``(None, None)`` when it is undefined on a constant side."""
    if spec.constant_undefined and (_is_constant(x) or _is_constant(y)):
        return None, None
    value, p_value = spec.compute(x, y)
    return (None if value is None else float(value)), (None if p_value is None else float(p_value))


def _scipy_result(value: float, p_value: float) -> tuple[float | None, float | None]:
    """A scipy (statistic, p-value) with NaN as ``None`` (no p-value without a value)."""
    value_ = _optional(value)
    return value_, (None if value_ is None else _optional(p_value))


def sign_agreement(x: FloatArray, y: FloatArray) -> tuple[float, float]:
    """Fraction of pairs with ``sign(x) == sign(y)`` and the two-sided binomial p-value against 0.5."""
    agree = int(np.count_nonzero(np.sign(x) == np.sign(y)))
    return agree / x.size, float(stats.binomtest(agree, x.size, 0.5).pvalue)


def both_signs(labels: ArrayLike) -> bool:
    """Whether some label is positive and some negative (NaN ignored).  Without both, sign agreement
    measures nothing: with labels that are all positive or zero, any positive score agrees with every
    positive label (:func:`qval.metric_registry.shown`)."""
    values = np.asarray(labels, dtype=float)
    return bool(np.any(values > 0) and np.any(values < 0))


def kendall_tau(x: FloatArray, y: FloatArray) -> tuple[float | None, float | None]:
    """:func:`scipy.stats.kendalltau` (tau-b) and its two-sided p-value."""
    result = stats.kendalltau(x, y)
    return _scipy_result(result.statistic, result.pvalue)


def pearson(x: FloatArray, y: FloatArray) -> tuple[float | None, float | None]:
    """:func:`scipy.stats.pearsonr` and its two-sided p-value (an infinite value, kept under the
    reference rules, makes it undefined without a warning)."""
    with np.errstate(invalid="ignore"):
        result = stats.pearsonr(x, y)
    return _scipy_result(result.statistic, result.pvalue)


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


def spearman(x: FloatArray, y: FloatArray) -> tuple[float | None, float | None]:
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
    return _optional(rho), _optional(spearman_p_value(rho, int(x.size)))


def spearman_p_value(rho: float, num_points: int) -> float:
    """scipy's two-sided p-value of a Spearman ``rho`` over ``num_points`` pairs: Student's t with
    ``num_points - 2`` degrees of freedom (NaN with fewer than three points)."""
    if num_points < 3:
        return math.nan
    dof = np.float64(num_points - 2)
    r = np.float64(min(1.0, max(-1.0, rho)))
    with np.errstate(divide="ignore", invalid="ignore"):  # |rho| = 1: t is infinite, as in scipy
        t = r * np.sqrt(np.clip(dof / ((r + 1.0) * (1.0 - r)), 0.0, None))
    return 2.0 * float(special.stdtr(dof, -abs(t)))


def _correlation(x: FloatArray, y: FloatArray, metric: str, num_dropped: int, min_points: int) -> Correlation:
    if x.size < min_points:
        return Correlation(metric, None, None, int(x.size), num_dropped, insufficient=True)
    value, p_value = _statistic(x, y, metric_registry.get(metric))
    return Correlation(metric, value, p_value, int(x.size), num_dropped, insufficient=False)


def correlate(
    labels: ArrayLike, scores: ArrayLike, metric: str, *, min_points: int = MIN_USABLE_POINTS,
    rules: str = QVAL_RULES,
) -> Correlation:
    """One pointwise metric (one of :data:`POINT_METRICS`) of ``scores`` against ``labels``.

    Pairs with a NaN on either side are dropped first.  ``min_points`` must be at least 2.
    """
    point_metric(metric)
    check_min_points(min_points)
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
        point_metric(metric)
    check_min_points(min_points)
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
    if rules == REFERENCE_RULES and np.isnan(finite_or_nan(scores, "scores", rules)).any():
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
        x = finite_or_nan(labels, "labels", rules)
        y = finite_or_nan(scores, "scores", rules)
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


def top1_accuracy(selection: Selection) -> tuple[float | None, int]:
    """The selection row ``top1_accuracy``: its value and the states it is over."""
    return selection.top1_accuracy, selection.num_states


def regret_at_1(selection: Selection) -> tuple[float | None, int]:
    """The selection row ``regret_at_1``: its value and the states it is over."""
    return selection.regret_at_1, selection.num_states


def pairwise_accuracy(selection: Selection) -> tuple[float | None, int]:
    """The selection row ``pairwise_accuracy``: its value and the candidate pairs it is over."""
    return selection.pairwise_accuracy, selection.num_pairs


# -- bootstrap confidence intervals -----------------------------------------------------


INTERVAL_SCALES: tuple[str, ...] = ("fisher_z", "logit", "identity")
"""Scales an interval is computed on (a metric's :attr:`qval.metric_registry.MetricSpec.interval_scale`):
Fisher's ``z = atanh(r)`` for a correlation, the logit for a proportion, the value itself for a
difference; the interval is mapped back, so it stays in the metric's range."""

_EDGE = 1e-12
"""How far inside its range a value at the edge (a correlation of exactly 1) is put before the scale is
taken, so that its transform is finite."""


def _forward(scale: str, values: FloatArray) -> FloatArray:
    """``values`` on ``scale`` (one of :data:`INTERVAL_SCALES`)."""
    if scale == "fisher_z":
        return np.arctanh(np.clip(values, -1.0 + _EDGE, 1.0 - _EDGE))
    if scale == "logit":
        p = np.clip(values, _EDGE, 1.0 - _EDGE)
        return np.log(p) - np.log1p(-p)
    if scale == "identity":
        return np.asarray(values, dtype=np.float64)
    raise ValueError(f"unknown interval scale {scale!r}; expected one of {', '.join(INTERVAL_SCALES)}")


def _backward(scale: str, values: FloatArray) -> FloatArray:
    """The inverse of :func:`_forward`."""
    if scale == "fisher_z":
        return np.tanh(values)
    if scale == "logit":
        return special.expit(values)
    return values


@dataclass(frozen=True)
class Interval:
    """A bootstrap interval of a statistic, resampling what was drawn (:mod:`qval.sampling`).

    ``low``/``high`` are ``None`` when the statistic cannot be bootstrapped (too few values,
    undefined on the full sample, or defined on fewer than two resamples).  ``resamples`` is the
    number of resamples drawn, which a work cap may make smaller than requested;
    ``subsample``: the points resampled when the sample was larger than
    :data:`BOOTSTRAP_SUBSAMPLE_POINTS` (:meth:`qval.sampling.Design.subsample`), else ``None``.
    ``unit``, ``clusters``, ``strata``: what the resamples drew (:meth:`qval.sampling.Design.as_details`),
    which every page and API answer that shows the interval names.
    """

    low: float | None
    high: float | None
    level: float
    resamples: int
    subsample: int | None = None
    unit: str = sampling.POINT
    clusters: int | None = None
    strata: int = 1

    def resampled(self) -> dict[str, object]:
        """What the resamples drew, as a result's details record it (``ci95_resampled``)."""
        return {"unit": self.unit, "clusters": self.clusters, "strata": self.strata}


def check_bootstrap(resamples: int, level: float) -> None:
    """``ValueError`` unless ``resamples`` is at least 1 and ``level`` lies in (0, 1)."""
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")


def cluster_se(resampled: FloatArray, design: sampling.Design, *, scale: str = "identity", shrink: float = 1.0
               ) -> float | None:
    """The standard error of a statistic from its resampled values (NaN ones left out) on ``scale``:
    their standard deviation times ``shrink`` (``sqrt(m / n)`` when ``m`` of ``n`` points were resampled)
    and times ``sqrt(design.variance_factor)`` (the bootstrap's small-sample shortfall over ``G``
    clusters, :attr:`qval.sampling.Design.variance_factor`); ``None`` with fewer than two values."""
    defined = resampled[~np.isnan(resampled)]
    if defined.size < 2:
        return None
    return float(np.std(_forward(scale, defined), ddof=1)) * shrink * math.sqrt(design.variance_factor)


def t_quantile(level: float, design: sampling.Design) -> float:
    """Student's t quantile of a two-sided ``level`` with the design's degrees of freedom
    (:attr:`qval.sampling.Design.dof`: clusters minus strata)."""
    return float(stats.t.ppf(0.5 + level / 2.0, design.dof))


def t_interval(
    estimate: float | None, resampled: FloatArray, design: sampling.Design, *, level: float, resamples: int,
    scale: str = "identity", shrink: float = 1.0, subsample: int | None = None,
) -> Interval:
    """The interval ``g(f(estimate) ± t · se)`` on ``scale`` (``f``, its inverse ``g``): ``se`` is
    :func:`cluster_se` of the resampled values and ``t`` :func:`t_quantile`.  On Fisher's z a
    correlation's interval stays in [-1, 1].

    Why not the percentile interval: with 20 trajectories of 5 states (label ICC 0.6) the percentile
    interval of a trajectory bootstrap covered the true Spearman rho in 92-93% of data sets and its paired
    test rejected equal methods in 9% (4 maps as strata); this one covers 94-95% and rejects in 3%
    (``benchmarks/uncertainty.py``)."""
    base = Interval(None, None, level, resamples, subsample, **design.as_details())  # type: ignore[arg-type]
    se = cluster_se(resampled, design, scale=scale, shrink=shrink)
    if estimate is None or se is None:
        return base
    centre = float(_forward(scale, np.array([estimate]))[0])
    half = t_quantile(level, design) * se
    low, high = _backward(scale, np.array([centre - half, centre + half]))
    return dataclasses.replace(base, low=float(low), high=float(high))


def capped_resamples(resamples: int, n: int, max_work: int) -> int:
    """Resamples to draw for ``n`` values under a resamples x values budget of ``max_work``
    (never fewer than :data:`BOOTSTRAP_MIN_CAPPED_RESAMPLES`, unless fewer were asked)."""
    return min(resamples, max(BOOTSTRAP_MIN_CAPPED_RESAMPLES, max_work // max(n, 1)))


class Resamples:
    """One chunk of bootstrap resamples of ``n`` points: either ``idx[r]``, the points resample ``r``
    draws (a resample of points, ``n`` draws each), or ``drawn[r]``, how often resample ``r`` draws each
    point (a resample of clusters, :meth:`qval.sampling.Design.draw`, whose size :attr:`totals` varies
    with the clusters drawn).  What several statistics read is derived once per chunk and shared: how
    often each point is drawn (:meth:`counts`, :meth:`point_counts`) and anything a statistic keeps with
    :meth:`shared` (the labels' resampled ranks, which both methods of a comparison use)."""

    def __init__(self, idx: NDArray[np.intp] | None, n: int, *, drawn: NDArray[np.integer] | None = None) -> None:
        if (idx is None) == (drawn is None):
            raise ValueError("a chunk of resamples is given by drawn indices or by drawn counts, exactly one")
        self.idx = idx
        self.n = n
        self.rows = int(idx.shape[0] if idx is not None else drawn.shape[0])  # type: ignore[union-attr]
        self._shared: dict[object, object] = {}
        if drawn is not None:
            self._shared["drawn"] = drawn

    def shared(self, key: object, make: Callable[[], T]) -> T:
        """``make()``, computed once per chunk for ``key``."""
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]  # type: ignore[return-value]

    @property
    def totals(self) -> FloatArray:
        """Points each resample draws (``n`` for a resample of points), ``(rows,)`` float64."""
        if self.idx is not None:
            return np.full(self.rows, float(self.n))
        return self.shared("totals", lambda: self._drawn().sum(axis=1).astype(np.float64))

    @property
    def dtype(self) -> type:
        """The float type of :meth:`counts`: float32 while every count, rank and cumulative count is
        an exact float32 (below 2**22 drawn points), else float64."""
        largest = self.n if self.idx is not None else float(self.totals.max(initial=0.0))
        return np.float32 if largest < 1 << 22 else np.float64

    def indices(self, row: int) -> NDArray[np.intp]:
        """The points resample ``row`` draws (each as often as it is drawn)."""
        if self.idx is not None:
            return self.idx[row]
        return np.repeat(np.arange(self.n), self._drawn()[row])

    def _drawn(self) -> NDArray[np.integer]:
        """How often each point is drawn, ``(rows, n)`` integers."""
        def make() -> NDArray[np.intp]:
            assert self.idx is not None
            flat = (self.idx + (np.arange(self.rows) * self.n)[:, None]).ravel()  # one resample at a time
            return np.bincount(flat, minlength=self.rows * self.n).reshape(self.rows, self.n)
        return self.shared("drawn", make)

    def counts(self) -> NDArray[np.floating]:
        """How often each point is drawn in each resample: an ``(n, rows)`` array of :attr:`dtype`
        (point major, so gathering points copies contiguous rows; column ``r`` sums to ``totals[r]``)."""
        return self.point_counts(self.dtype)[: self.n]

    def point_counts(self, dtype: type = np.float64) -> NDArray[np.floating]:
        """How often each point is drawn, ``(n + 1, rows)`` in ``dtype``, whose last row is zero
        (the padding slot of :class:`KendallResampler`)."""
        def make() -> NDArray[np.floating]:
            out = np.zeros((self.n + 1, self.rows), dtype=dtype)
            out[: self.n] = self._drawn().T
            return out
        return self.shared(("point_counts", dtype), make)


def bootstrap(
    statistic: Callable[[Resamples], FloatArray], n: int, resamples: int, seed: int,
    design: "sampling.Design | None" = None,
) -> FloatArray:
    """The one bootstrap loop: ``statistic`` of ``resamples`` seeded resamples of ``n`` points, in chunks
    of at most :data:`BOOTSTRAP_CHUNK_ELEMENTS` points.  Without ``design`` each resample draws ``n``
    indices with replacement; with one (a :class:`qval.sampling.Design` of the ``n`` points) it draws the
    design's units (:meth:`qval.sampling.Design.draw`).  The same ``seed`` draws the same resamples."""
    if design is not None and len(design) != n:
        raise ValueError(f"the design has {len(design)} points, the sample {n}")
    rng = np.random.default_rng(seed)
    chunk = max(1, BOOTSTRAP_CHUNK_ELEMENTS // max(n, 1))
    parts = []
    for start in range(0, resamples, chunk):
        rows = min(chunk, resamples - start)
        if design is None or design.unit == sampling.POINT:
            draws = Resamples(rng.integers(0, n, size=(rows, n)), n)
        else:
            draws = Resamples(None, n, drawn=design.draw(rng, rows))
        parts.append(statistic(draws))
    return np.concatenate(parts) if parts else np.empty(0)


def design_of(design: sampling.Design | None, keep: NDArray[np.bool_]) -> sampling.Design:
    """The design of the points ``keep`` leaves (``design`` is of all of them; ``None``: points whose
    trajectories are not known); ``ValueError`` when its length is not the sample's."""
    if design is None:
        return sampling.Design.independent(int(np.count_nonzero(keep)))
    if len(design) != keep.size:
        raise ValueError(f"the design has {len(design)} points, the sample {keep.size}")
    return design if keep.all() else design.subset(keep)


@dataclass(frozen=True)
class Plan:
    """What a bootstrap of a sample resamples (:func:`plan`): ``points`` (sorted indices; ``None``: all of
    them), their ``design``, and ``shrink = sqrt(m / n)``, by which the spread of a statistic on ``m`` of
    ``n`` points is brought to the whole sample's."""

    points: NDArray[np.intp] | None
    design: sampling.Design
    shrink: float


def plan(design: sampling.Design, seed: int) -> Plan:
    """The whole sample up to :data:`BOOTSTRAP_SUBSAMPLE_POINTS` points; beyond, a seeded choice of whole
    units holding about that many (:meth:`qval.sampling.Design.subsample`).

    A statistic with ``sqrt(n)`` asymptotics (every correlation here) varies on ``m`` points
    ``sqrt(n / m)`` times as much as on ``n``, so the subsample's bootstrap spread times ``sqrt(m / n)`` is
    the whole sample's (subsampling, Politis & Romano 1994), at the cost of the ``m``-point bootstrap.
    """
    points = design.subsample(BOOTSTRAP_SUBSAMPLE_POINTS, seed)
    if points is None:
        return Plan(None, design, 1.0)
    return Plan(points, design.subset(points), math.sqrt(points.size / len(design)))


def _centred_ranks(values: FloatArray) -> Callable[[Resamples], NDArray[np.floating]]:
    """Per resample, the average rank (ties averaged, as :func:`scipy.stats.rankdata`) of each
    point among the drawn values, minus the mean rank ``(n + 1) / 2``: ``(n, rows)``.

    Counting how often each distinct value is drawn gives every rank without sorting a resample:
    a value's average rank is the number of drawn values below it plus (its count + 1) / 2.
    Every rank is a multiple of 1/2 (exact in :attr:`Resamples.dtype`), so the count-weighted sums
    of products are exact in float64."""
    dense = stats.rankdata(values, method="dense").astype(np.intp) - 1
    order = np.argsort(dense, kind="stable")
    runs = _runs(dense[order])
    tied = runs.size < values.size
    position = dense if tied else np.argsort(order)  # where each point's rank is in ``average``

    def ranks(draws: Resamples) -> NDArray[np.floating]:
        group = np.take(draws.counts(), order, axis=0)
        if tied:
            group = np.add.reduceat(group, runs, axis=0)
        average = np.cumsum(group, axis=0)
        group -= 1.0
        group *= 0.5
        group += (draws.totals + 1.0).astype(group.dtype) / 2.0
        average -= group
        return np.take(average, position, axis=0)

    return ranks


def _weighted_correlation(
    counts: NDArray[np.floating], a: NDArray[np.floating], b: NDArray[np.floating]
) -> FloatArray:
    """Per column of ``counts`` (how often each point is drawn), the Pearson correlation of the
    drawn ``a`` and ``b``, each already centred on its drawn mean (NaN where a side is exactly 0)."""
    def weighted(u: NDArray[np.floating], v: NDArray[np.floating]) -> FloatArray:
        return np.einsum("ir,ir,ir->r", counts, u, v, dtype=np.float64)

    with np.errstate(invalid="ignore", divide="ignore"):
        r = weighted(a, b) / np.sqrt(weighted(a, a) * weighted(b, b))
    return np.clip(r, -1.0, 1.0)


def spearman_resampler(x: FloatArray, y: FloatArray) -> Callable[[Resamples], FloatArray]:
    """Spearman rho of each resample, as :func:`scipy.stats.spearmanr` on the drawn pairs (NaN on a
    constant side): the correlation of the resampled average ranks weighted by how often each point
    is drawn.  The ranks of ``x`` are shared by every statistic on the same ``x`` array and chunk."""
    rank_x, rank_y = _centred_ranks(x), _centred_ranks(y)

    def statistic(draws: Resamples) -> FloatArray:
        rx = draws.shared(("ranks", id(x)), lambda: (x, rank_x(draws)))[1]
        ry = rank_y(draws)
        return _weighted_correlation(draws.counts(), rx, ry)  # a constant side: exactly 0 / 0

    return statistic


def _counts64(draws: Resamples) -> FloatArray:
    """:meth:`Resamples.counts` in float64 (for the matrix products of real values), once per chunk."""
    return draws.shared("counts64", lambda: draws.counts().astype(np.float64))


#: A Pearson resample whose variance on a side is below this share of that side's largest square is
#: computed again in two passes: ``sxx - sx * sx`` keeps about ``eps / share`` relative accuracy.
PEARSON_RECHECK_SHARE = 1e-4


def _unit_scaled(centred: FloatArray) -> FloatArray:
    """Each row of ``centred`` (the whole of a 1-D array) divided by its largest magnitude (rows of zeros
    unchanged)."""
    scale = np.max(np.abs(centred), axis=-1, keepdims=True, initial=0.0)
    return centred / np.where(scale > 0.0, scale, 1.0)


def pearson_resampler(x: FloatArray, y: FloatArray) -> Callable[[Resamples], FloatArray]:
    """Pearson r of each resample (NaN on a constant side), from the count-weighted sums of the
    values centred on the whole sample's means, products and squares (one matrix product).

    Each side is divided by its largest centred magnitude first (r does not change), so that squares
    of tiny values such as 1e-240 do not underflow to zero, as :func:`scipy.stats.pearsonr` does."""
    xc, yc = _unit_scaled(x - x.mean()), _unit_scaled(y - y.mean())
    columns = np.column_stack([xc, yc, xc * xc, yc * yc, xc * yc])
    # Below this share of the largest square, a resample's variance loses digits to cancellation in
    # ``sxx - sx * sx`` (it may be a constant side): such resamples are computed again in two passes.
    tol_x = PEARSON_RECHECK_SHARE * float(np.max(xc * xc, initial=0.0))
    tol_y = PEARSON_RECHECK_SHARE * float(np.max(yc * yc, initial=0.0))

    def statistic(draws: Resamples) -> FloatArray:
        sx, sy, sxx, syy, sxy = columns.T @ _counts64(draws) / draws.totals
        vx, vy = sxx - sx * sx, syy - sy * sy
        with np.errstate(invalid="ignore", divide="ignore"):
            r = (sxy - sx * sy) / np.sqrt(np.maximum(vx, 0.0) * np.maximum(vy, 0.0))
        for row in np.flatnonzero((vx <= tol_x) | (vy <= tol_y)):
            drawn = draws.indices(int(row))
            r[row] = _pearson_rows(x[drawn][None], y[drawn][None])[0]
        return np.clip(r, -1.0, 1.0)

    return statistic


def _pearson_rows(x: FloatArray, y: FloatArray) -> FloatArray:
    """Pearson r of each row pair, in two passes as :func:`scipy.stats.pearsonr` (NaN on a constant row)."""
    dx = _unit_scaled(x - x.mean(axis=1, keepdims=True))
    dy = _unit_scaled(y - y.mean(axis=1, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.einsum("ij,ij->i", dx, dy) / np.sqrt(np.einsum("ij,ij->i", dx, dx) * np.einsum("ij,ij->i", dy, dy))
    r[(np.ptp(x, axis=1) == 0) | (np.ptp(y, axis=1) == 0)] = np.nan
    return r


def sign_agreement_resampler(x: FloatArray, y: FloatArray) -> Callable[[Resamples], FloatArray]:
    """Sign agreement of each resample: the count-weighted mean of the per-point agreement."""
    agree = (np.sign(x) == np.sign(y)).astype(np.float64)
    return lambda draws: agree @ _counts64(draws) / draws.totals


def kendall_resampler(x: FloatArray, y: FloatArray) -> Callable[[Resamples], FloatArray]:
    """Kendall tau-b of each resample, as :func:`scipy.stats.kendalltau` on the drawn pairs (NaN on
    a constant side): :class:`KendallResampler` up to :data:`KENDALL_VECTOR_MAX_POINTS` points,
    one scipy call per resample beyond."""
    if x.size <= KENDALL_VECTOR_MAX_POINTS:
        tau = KendallResampler(x, y)
        return lambda draws: tau(draws.point_counts(tau.dtype))

    def statistic(draws: Resamples) -> FloatArray:
        out = np.full(draws.rows, np.nan)
        for row in range(draws.rows):
            draw = draws.indices(row)
            xs, ys = x[draw], y[draw]
            if not (_is_constant(xs) or _is_constant(ys)):
                out[row] = stats.kendalltau(xs, ys).statistic
        return out

    return statistic


def _runs(ordered: NDArray[np.intp]) -> NDArray[np.intp]:
    """Start positions of the runs of equal values in ``ordered``."""
    return np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))


def _blocks(dense: NDArray[np.intp], order: NDArray[np.intp], size: int) -> tuple[NDArray[np.intp], int]:
    """Consecutive blocks of about ``size`` points along ``order`` (sorted by ``dense``) that
    never split a run of tied values: the block of each point, and how many blocks."""
    starts = _runs(dense[order])
    sizes = np.diff(np.append(starts, order.size))
    before = np.concatenate(([0], np.cumsum(sizes)))  # points before each run
    ids = np.empty(starts.size, dtype=np.intp)
    block = first = 0
    while first < starts.size:  # a block takes the next runs while they fit, and at least one
        stop = max(first + 1, int(np.searchsorted(before, before[first] + size, side="right")) - 1)
        ids[first:stop] = block
        block, first = block + 1, stop
    out = np.empty(order.size, dtype=np.intp)
    out[order] = np.repeat(ids, sizes)
    return out, block


class KendallResampler:
    """Kendall's tau-b of ``(x, y)`` on many bootstrap resamples at once, equal to
    :func:`scipy.stats.kendalltau` on each resample (NaN where a side is constant).

    A resample is given by how often it draws each point (:meth:`Resamples.point_counts`), so a
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
        cell = bx * self.ky + by  # each point's cell of the block grid: one sparse sum per resample
        self.cell_sums = sparse.csr_matrix((np.ones(n, dtype=self.dtype), (cell, np.arange(n))),
                                           shape=(self.kx * self.ky, n + 1))
        self.no_ties = self.x_runs.size == self.y_runs.size == n  # then every tie is a point drawn twice

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
        """Tau-b of each resample (a column of ``counts``, from :meth:`Resamples.point_counts` with :attr:`dtype`)."""
        rows = counts.shape[1]
        grid = np.asarray(self.cell_sums @ counts).reshape(self.kx, self.ky, rows)
        # A pair of cells (p', q'), (p, q) with p' < p and q' > q is discordant: summed over q' as
        # (points of earlier x blocks in y block q') x (points of x block p in earlier y blocks than q').
        before = np.cumsum(grid, axis=0) - grid  # earlier x blocks
        left = np.cumsum(grid, axis=1) - grid  # earlier y blocks
        discordant = (
            np.einsum("pqr,pqr->r", before, left, dtype=np.float64)
            + self._quadratic(counts, self.x_slots, self.x_pairs)
            + self._quadratic(counts, self.y_slots, self.y_pairs)
        )
        if self.no_ties:  # the same sum in any order: the pairs of a point drawn more than once
            x_ties = y_ties = joint_ties = self._tied(counts[: self.n], self.x_runs)
        else:
            by_x = counts[self.by_x]
            x_ties, joint_ties = self._tied(by_x, self.x_runs), self._tied(by_x, self.joint_runs)
            y_ties = self._tied(counts[self.by_y], self.y_runs)
        drawn = counts.sum(axis=0, dtype=np.float64)  # points each resample draws (n unless clusters were drawn)
        total = drawn * (drawn - 1.0) / 2.0
        with np.errstate(invalid="ignore", divide="ignore"):
            tau = (total - x_ties - y_ties + joint_ties - 2.0 * discordant) / np.sqrt(total - x_ties) / np.sqrt(total - y_ties)
        tau[(x_ties == total) | (y_ties == total)] = np.nan
        return np.clip(tau, -1.0, 1.0)


def bootstrap_point_ci(
    labels: ArrayLike,
    scores: ArrayLike,
    metric: str,
    *,
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    rules: str = QVAL_RULES,
    design: sampling.Design | None = None,
) -> Interval:
    """Seeded bootstrap interval of a pointwise metric, resampling what was drawn.

    NaN pairs are dropped first (and their points from ``design``, the :class:`qval.sampling.Design` of
    the given points; ``None``: trajectories not known, points are resampled).  Each resample draws the
    design's units with replacement and the metric's registered resampler (:mod:`qval.metric_registry`)
    evaluates it on every resample at once; the interval is :func:`t_interval` on the metric's
    ``interval_scale``.  Resamples on which the metric is undefined (a constant side) are left out.
    Work is capped at the metric's ``bootstrap_max_work`` resampled pairs, never going below
    :data:`BOOTSTRAP_MIN_CAPPED_RESAMPLES` resamples.  Above :data:`BOOTSTRAP_SUBSAMPLE_POINTS` pairs a
    seeded choice of whole units is resampled and its spread rescaled (:func:`plan`).  The same inputs and
    ``seed`` always give the same interval; a metric without a bootstrap gives ``None`` bounds.
    """
    spec = point_metric(metric)
    check_bootstrap(resamples, level)
    x, y, keep = _paired_mask(labels, scores, rules)
    design = design_of(design, keep)
    n = int(x.size)
    if spec.resampler is None or n < 2 or (spec.constant_undefined and (_is_constant(x) or _is_constant(y))):
        return Interval(None, None, level, 0, **design.as_details())  # type: ignore[arg-type]
    estimate = _statistic(x, y, spec)[0]
    how = plan(design, seed)
    xs, ys = (x, y) if how.points is None else (x[how.points], y[how.points])
    m = int(xs.size)
    total = capped_resamples(resamples, m, spec.bootstrap_max_work)
    drawn = bootstrap(spec.resample(xs, ys), m, total, seed, how.design)
    return t_interval(estimate, drawn, design, level=level, resamples=total, scale=spec.interval_scale,
                      shrink=how.shrink, subsample=None if how.points is None else m)


def bootstrap_ranking_ci(
    per_state: Sequence[float | None],
    *,
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    design: sampling.Design | None = None,
) -> Interval:
    """Seeded bootstrap interval of the mean ranking Spearman, resampling what was drawn.

    Skipped states (``None`` or NaN) are left out first, and from ``design`` (the
    :class:`qval.sampling.Design` of the given states; ``None``: states are resampled one by one);
    fewer than two valid states give ``None`` bounds.  The interval is :func:`t_interval` on Fisher's z.
    """
    check_bootstrap(resamples, level)
    values = np.array([math.nan if v is None else v for v in per_state], dtype=np.float64)
    keep = ~np.isnan(values)
    valid = values[keep]
    design = design_of(design, keep)
    n = int(valid.size)
    if n < 2:
        return Interval(None, None, level, 0, **design.as_details())  # type: ignore[arg-type]
    total = capped_resamples(resamples, n, metric_registry.DEFAULT_BOOTSTRAP_MAX_WORK)
    drawn = bootstrap(lambda draws: valid @ _counts64(draws) / draws.totals, n, total, seed, design)
    return t_interval(float(valid.mean()), drawn, design, level=level, resamples=total, scale="fisher_z")


# -- approximate intervals of reported numbers ----------------------------------------------


def approximate_ci(
    metric: str, value: float, num_points: int, *, std: float | None = None, level: float = 0.95,
) -> tuple[float, float] | None:
    """An approximate interval of a number reported without one, from its point count alone: on Fisher's
    ``z = atanh(r)`` with the standard error of the metric, mapped back (so it stays in [-1, 1]):

    * ``spearman``: Bonett & Wright (Psychometrika 2000), ``sqrt((1 + r^2 / 2) / (n - 3))``;
    * ``kendall_tau``: Fieller, Hartley & Pearson (1957), ``sqrt(0.437 / (n - 4))``;
    * ``pearson``: ``1 / sqrt(n - 3)``;
    * ``ranking_spearman`` (a mean over ``n`` states): with the states' ``std``, the delta method's
      ``std / sqrt(n) / (1 - r^2)``.

    Each treats the points as independent, which points drawn in trajectories are not: the interval is
    too narrow by the design effect, which a reported number does not let us estimate, so pages mark it
    approximate.  ``None`` for another metric, too few points, or a state-local value without ``std``."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    r = min(1.0 - _EDGE, max(-1.0 + _EDGE, float(value)))
    if metric == "spearman" and num_points > 3:
        se = math.sqrt((1.0 + r * r / 2.0) / (num_points - 3))
    elif metric == "kendall_tau" and num_points > 4:
        se = math.sqrt(0.437 / (num_points - 4))
    elif metric == "pearson" and num_points > 3:
        se = 1.0 / math.sqrt(num_points - 3)
    elif metric == "ranking_spearman" and std is not None and num_points > 1:
        se = std / math.sqrt(num_points) / (1.0 - r * r)
    else:
        return None
    z, half = math.atanh(r), float(stats.norm.ppf(0.5 + level / 2.0)) * se
    return math.tanh(z - half), math.tanh(z + half)

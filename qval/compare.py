"""Comparing methods and summarising evaluations: the statistics behind the comparison pages.

* :func:`paired_bootstrap` -- is method A's correlation with the labels higher than method
  B's on the same points?  A paired bootstrap of ``metric(A) - metric(B)`` that resamples what was
  drawn (trajectories or tasks, :mod:`qval.sampling`).
* :func:`friedman_nemenyi` -- do several methods differ over many evaluations (e.g. one
  correlation per environment x backbone)?  The Friedman test, average ranks and the
  Nemenyi critical difference, with the groups a critical-difference diagram draws
  (Demšar 2006, "Statistical comparisons of classifiers over multiple data sets").
* :func:`mean_ci` -- a mean (e.g. over backbones) with a Student-t confidence interval.
* :func:`distribution` -- the five-number summary and mean (e.g. per family, over
  evaluations).

Only numpy and scipy are used; nothing here knows about Django.  Missing values (``None``
or NaN) are left out and counted, never silently turned into numbers; an infinite value is
rejected with :class:`ValueError`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from qval import metric_registry, metrics, sampling
from qval.metrics import MIN_USABLE_POINTS

FloatArray = NDArray[np.float64]

# -- paired bootstrap -------------------------------------------------------------------


@dataclass(frozen=True)
class PairedComparison:
    """Outcome of :func:`paired_bootstrap` for one metric.

    ``rho_a``/``rho_b``: the metric of A and of B on the common points; ``difference``:
    ``rho_a - rho_b``.  ``low``/``high``: percentile bootstrap interval of the difference at
    ``level`` and ``p_value`` the two-sided p-value of "no difference", both from the bootstrap's
    standard error and Student's t over the resampled units (:func:`paired_bootstraps`).  Any of these is
    ``None`` when it is undefined: ``insufficient`` (fewer than ``min_points`` common
    points), a constant side, or no resample on which both metrics are defined.
    ``num_points``: points where the label, A and B are all finite; ``num_dropped``: the
    other points.  ``resamples``: resamples drawn (a work cap may make it smaller than
    requested; 0 when nothing was resampled); ``num_undefined``: resamples left out because
    a metric was undefined on them.  ``std_error``: the standard error of ``difference`` (the bootstrap
    differences' spread with the small-sample factor of :func:`qval.metrics.cluster_se`; the margin of
    :mod:`qval.ladder`).  ``unit``, ``clusters``, ``strata``: what the resamples drew
    (:meth:`qval.sampling.Design.as_details`).
    """

    metric: str
    rho_a: float | None
    rho_b: float | None
    difference: float | None
    low: float | None
    high: float | None
    p_value: float | None
    level: float
    num_points: int
    num_dropped: int
    resamples: int
    num_undefined: int
    seed: int
    insufficient: bool
    std_error: float | None = None
    unit: str = sampling.POINT
    clusters: int | None = None
    strata: int = 1

    def significance(self) -> str:
        """Significance marks of :attr:`p_value` (see :func:`qval.metrics.significance_marks`)."""
        return metrics.significance_marks(self.p_value)


def _common_points(
    labels: ArrayLike, scores_a: ArrayLike, scores_b: ArrayLike, rules: str
) -> tuple[FloatArray, FloatArray, FloatArray, NDArray[np.bool_]]:
    """Labels, A and B at the points where none of the three is NaN, and the mask of those points."""
    x = metrics.finite_or_nan(labels, "labels", rules)
    a = metrics.finite_or_nan(scores_a, "scores_a", rules)
    b = metrics.finite_or_nan(scores_b, "scores_b", rules)
    if not x.shape == a.shape == b.shape:
        raise ValueError(f"labels, scores_a and scores_b differ in length: {x.size}, {a.size}, {b.size}")
    keep = ~(np.isnan(x) | np.isnan(a) | np.isnan(b))
    return x[keep], a[keep], b[keep], keep


def t_p_value(difference: float, std_error: float, design: sampling.Design) -> float:
    """Two-sided p-value of "no difference": Student's t of ``difference / std_error`` with the design's
    degrees of freedom (:attr:`qval.sampling.Design.dof`); 1 for a zero difference, 0 for a nonzero one
    with no spread."""
    if difference == 0.0:
        return 1.0
    if std_error == 0.0:
        return 0.0
    return float(2.0 * stats.t.sf(abs(difference) / std_error, design.dof))


def paired_bootstrap(
    labels: ArrayLike,
    scores_a: ArrayLike,
    scores_b: ArrayLike,
    *,
    metric: str = metric_registry.HEADLINE,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    min_points: int = MIN_USABLE_POINTS,
    rules: str = metrics.QVAL_RULES,
    design: sampling.Design | None = None,
) -> PairedComparison:
    """Paired bootstrap of ``metric(labels, A) - metric(labels, B)``: :func:`paired_bootstraps`
    of one metric."""
    return paired_bootstraps(labels, scores_a, scores_b, metric_names=(metric,), resamples=resamples, seed=seed,
                             level=level, min_points=min_points, rules=rules, design=design)[metric]


def paired_bootstraps(
    labels: ArrayLike,
    scores_a: ArrayLike,
    scores_b: ArrayLike,
    *,
    metric_names: Sequence[str] = metrics.POINT_METRICS,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
    min_points: int = MIN_USABLE_POINTS,
    rules: str = metrics.QVAL_RULES,
    design: sampling.Design | None = None,
) -> dict[str, PairedComparison]:
    """Paired bootstrap of ``metric(labels, A) - metric(labels, B)`` for each of ``metric_names``
    (point metrics of :mod:`qval.metric_registry`), keyed by metric in the order given.

    Points where the label, A or B is NaN are dropped first (and from ``design``, the
    :class:`qval.sampling.Design` of the given points: each point's trajectory and task; ``None`` when
    they are not known, and then points are resampled).  Each resample draws the design's units with
    replacement (trajectories, or tasks, :mod:`qval.sampling`) and evaluates both methods on the *same*
    draw, so the difference keeps the pairing (the two methods' errors on the same points are
    correlated).  The standard error of the difference is the resampled differences' spread with the
    small-sample factor of :func:`qval.metrics.cluster_se`; the interval is ``difference ± t · se`` and
    the p-value Student's t (:func:`t_p_value`), both with the design's degrees of freedom (clusters
    minus strata).  Every metric reads the same resamples (one :func:`qval.metrics.bootstrap` pass per
    distinct work cap), each with its registered resampler, so what they share (how often each point is
    drawn, the labels' ranks) is computed once.  Resamples on which either metric is undefined (a
    constant side) are left out.  Work is capped as in :func:`qval.metrics.bootstrap_point_ci`, and
    above :data:`qval.metrics.BOOTSTRAP_SUBSAMPLE_POINTS` common points a seeded choice of whole units
    is resampled and its spread rescaled (:func:`qval.metrics.plan`).  The same inputs and ``seed``
    always give the same result, a metric the same whichever others are asked with it, and swapping A
    and B negates the difference and the interval.  ``rules`` (:data:`qval.metrics.RULES`) are those
    both submissions were scored under: ``qval-v1.0`` keeps infinite scores as
    :func:`qval.metrics.correlate` does, ours refuse them.
    """
    metrics.check_rules(rules)
    specs = {name: metrics.point_metric(name) for name in metric_names}
    metrics.check_min_points(min_points)
    metrics.check_bootstrap(resamples, level)
    x, a, b, keep = _common_points(labels, scores_a, scores_b, rules)
    design = metrics.design_of(design, keep)
    n = int(x.size)
    dropped = int(keep.size - n)

    def result(
        metric: str,
        rho_a: float | None = None,
        rho_b: float | None = None,
        differences: FloatArray | None = None,
        drawn: int = 0,
        shrink: float = 1.0,
    ) -> PairedComparison:
        difference = None if rho_a is None or rho_b is None else rho_a - rho_b
        low = high = p_value = std_error = None
        undefined = 0
        if differences is not None:
            undefined = int(np.count_nonzero(np.isnan(differences)))
            std_error = metrics.cluster_se(differences, design, shrink=shrink)
            if std_error is not None and difference is not None:
                half = metrics.t_quantile(level, design) * std_error
                low, high = difference - half, difference + half
                p_value = t_p_value(difference, std_error, design)
        return PairedComparison(
            metric, rho_a, rho_b, difference, low, high, p_value, level, n, dropped, drawn, undefined, seed,
            insufficient=n < min_points, std_error=std_error, **design.as_details(),
        )

    if n < min_points:
        return {name: result(name) for name in specs}
    estimates = {name: (metrics.correlate(x, a, name, min_points=min_points, rules=rules).value,
                        metrics.correlate(x, b, name, min_points=min_points, rules=rules).value) for name in specs}
    out = {name: result(name, *estimates[name]) for name in specs}
    how = metrics.plan(design, seed)
    points = (x, a, b) if how.points is None else (x[how.points], a[how.points], b[how.points])
    m = int(points[0].size)
    todo = [name for name in specs if None not in estimates[name] and specs[name].resampler is not None]
    by_total: dict[int, list[str]] = {}
    for name in todo:
        by_total.setdefault(metrics.capped_resamples(resamples, m, specs[name].bootstrap_max_work), []).append(name)
    for total, names in by_total.items():
        differences = _paired_differences(points, [specs[name] for name in names], total, seed, how.design)
        for name, d in zip(names, differences):
            out[name] = result(name, *estimates[name], differences=d, drawn=total, shrink=how.shrink)
    return out


def _paired_differences(
    points: tuple[FloatArray, FloatArray, FloatArray], specs: Sequence[metric_registry.MetricSpec], total: int,
    seed: int, design: sampling.Design | None = None,
) -> list[FloatArray]:
    """``metric(x, a) - metric(x, b)`` of each metric of ``specs`` on the same ``total`` seeded
    resamples of ``design``'s units (points without one; NaN where undefined), ``points = (x, a, b)``."""
    x, a, b = points
    pairs = [(spec.resample(x, a), spec.resample(x, b)) for spec in specs]

    def statistic(draws: metrics.Resamples) -> FloatArray:
        return np.stack([stat_a(draws) - stat_b(draws) for stat_a, stat_b in pairs], axis=1)

    return list(metrics.bootstrap(statistic, int(x.size), total, seed, design).reshape(total, len(specs)).T)


# -- Friedman test and Nemenyi critical difference --------------------------------------


@dataclass(frozen=True)
class CriticalDifference:
    """Outcome of :func:`friedman_nemenyi`.

    ``methods`` and ``average_ranks`` are in the caller's column order (rank 1 = best).
    ``order`` lists column indices from best to worst average rank (ties keep column order);
    ``cliques`` are the bars of a critical-difference diagram: ``(start, end)`` positions
    in ``order``, inclusive, each a maximal run of methods whose average ranks differ by
    less than ``cd`` (so not significantly different); a method in no bar differs from all
    others.  ``statistic``/``p_value``: the Friedman chi-square test (``None`` when every
    evaluation ties all methods).  ``num_evaluations``: rows used; ``num_dropped``: rows
    left out because they held a missing value.
    """

    methods: tuple[str, ...]
    average_ranks: tuple[float, ...]
    order: tuple[int, ...]
    statistic: float | None
    p_value: float | None
    cd: float
    q_alpha: float
    alpha: float
    num_evaluations: int
    num_dropped: int
    cliques: tuple[tuple[int, int], ...]

    @property
    def ranked_methods(self) -> tuple[str, ...]:
        """Method names from best to worst average rank."""
        return tuple(self.methods[i] for i in self.order)

    def groups(self) -> list[list[str]]:
        """Method names of each clique, best first."""
        return [[self.methods[i] for i in self.order[start : end + 1]] for start, end in self.cliques]

    def differ(self, first: int, second: int) -> bool:
        """Whether methods (column indices) ``first`` and ``second`` differ significantly."""
        return abs(self.average_ranks[first] - self.average_ranks[second]) >= self.cd


def nemenyi_q(num_methods: int, alpha: float = 0.05) -> float:
    """Critical value ``q_alpha`` of the Nemenyi test for ``num_methods`` methods.

    The studentized range quantile with infinite degrees of freedom divided by sqrt(2)
    (2.569 for four methods at alpha = 0.05, Demšar 2006, Table 5a).
    """
    if num_methods < 2:
        raise ValueError(f"the Nemenyi test needs at least 2 methods, got {num_methods}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha}")
    return float(stats.studentized_range.ppf(1.0 - alpha, num_methods, np.inf) / math.sqrt(2.0))


def _cliques(sorted_ranks: FloatArray, cd: float) -> tuple[tuple[int, int], ...]:
    """Maximal runs ``(i, j)``, ``i < j``, of sorted ranks with ``rank[j] - rank[i] < cd``."""
    bars: list[tuple[int, int]] = []
    k = sorted_ranks.size
    for i in range(k):
        j = i
        while j + 1 < k and sorted_ranks[j + 1] - sorted_ranks[i] < cd:
            j += 1
        if j > i and not (bars and bars[-1][1] >= j):  # not inside the previous bar
            bars.append((i, j))
    return tuple(bars)


def friedman_nemenyi(matrix: ArrayLike, methods: Sequence[str], *, alpha: float = 0.05) -> CriticalDifference:
    """Friedman test, average ranks and Nemenyi critical difference of several methods.

    ``matrix`` is evaluations x methods (one column per entry of ``methods``) of scores
    where higher is better, e.g. Spearman rho per environment x backbone.  Rows holding a
    missing value (NaN or ``None``) are dropped and counted.  In each row the best method
    gets rank 1 and tied methods share their average rank.  ``CD = q_alpha *
    sqrt(k (k + 1) / (6 N))`` for ``k`` methods and ``N`` evaluations; two methods whose
    average ranks differ by at least ``CD`` are significantly different.  Raises
    :class:`ValueError` for fewer than 3 methods or fewer than 2 complete evaluations
    (where the Friedman test is not defined), a shape that does not match ``methods``,
    duplicate method names or an infinite value.
    """
    values = np.asarray(matrix, dtype=np.float64)
    names = tuple(str(m) for m in methods)
    if values.ndim != 2:
        raise ValueError(f"matrix must be two-dimensional (evaluations x methods), got shape {values.shape}")
    if values.shape[1] != len(names):
        raise ValueError(f"matrix has {values.shape[1]} columns but {len(names)} methods were named")
    if len(set(names)) != len(names):
        raise ValueError("method names must be distinct")
    if np.isinf(values).any():
        raise ValueError("matrix contains an infinite value")
    k = len(names)
    if k < 3:
        raise ValueError(f"the Friedman test needs at least 3 methods, got {k}")
    complete = ~np.isnan(values).any(axis=1)
    values = values[complete]
    n = int(values.shape[0])
    dropped = int(complete.size - n)
    if n < 2:
        raise ValueError(f"the Friedman test needs at least 2 evaluations without missing values, got {n}")

    ranks = stats.rankdata(-values, axis=1)  # rank 1 = highest score, ties averaged
    average = ranks.mean(axis=0)
    if bool((values == values[:, :1]).all()):
        statistic: float | None = None  # every row ties every method: no test
        p_value: float | None = None
    else:
        result = stats.friedmanchisquare(*values.T)
        statistic, p_value = float(result.statistic), float(result.pvalue)
    q_alpha = nemenyi_q(k, alpha)
    cd = q_alpha * math.sqrt(k * (k + 1) / (6.0 * n))
    order = np.argsort(average, kind="stable")
    return CriticalDifference(
        methods=names,
        average_ranks=tuple(float(r) for r in average),
        order=tuple(int(i) for i in order),
        statistic=statistic,
        p_value=p_value,
        cd=cd,
        q_alpha=q_alpha,
        alpha=alpha,
        num_evaluations=n,
        num_dropped=dropped,
        cliques=_cliques(average[order], cd),
    )


# -- summaries over evaluations ---------------------------------------------------------


@dataclass(frozen=True)
class MeanInterval:
    """A mean with its Student-t confidence interval (:func:`mean_ci`).

    ``n``: values used; ``num_missing``: ``None``/NaN values left out.  ``mean`` is
    ``None`` without values; ``std`` (sample, ``ddof=1``), ``low`` and ``high`` are ``None``
    with fewer than two.
    """

    n: int
    mean: float | None
    std: float | None
    low: float | None
    high: float | None
    level: float
    num_missing: int


def _present(values: Sequence[float | None] | ArrayLike) -> tuple[FloatArray, int]:
    """The values that are neither ``None`` nor NaN, and how many were left out."""
    raw = values.tolist() if isinstance(values, np.ndarray) else list(values)  # type: ignore[arg-type]
    array = np.array([math.nan if v is None else v for v in raw], dtype=np.float64).reshape(-1)
    if np.isinf(array).any():
        raise ValueError("values contain an infinite value")
    present = array[~np.isnan(array)]
    return present, int(array.size - present.size)


def mean_ci(values: Sequence[float | None] | ArrayLike, level: float = 0.95) -> MeanInterval:
    """Mean of ``values`` with a two-sided Student-t interval at ``level``.

    ``mean ± t_{(1 + level) / 2, n - 1} * std / sqrt(n)`` with the sample standard
    deviation; ``None`` and NaN are left out and counted.  With a single value there is no
    interval; with identical values the interval is the single point ``[mean, mean]``.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    present, missing = _present(values)
    n = int(present.size)
    if n == 0:
        return MeanInterval(0, None, None, None, None, level, missing)
    mean = float(present.mean())
    if n == 1:
        return MeanInterval(1, mean, None, None, None, level, missing)
    std = float(present.std(ddof=1))
    half = float(stats.t.ppf((1.0 + level) / 2.0, n - 1)) * std / math.sqrt(n)
    return MeanInterval(n, mean, std, mean - half, mean + half, level, missing)


@dataclass(frozen=True)
class Distribution:
    """Five-number summary and mean of some values (:func:`distribution`).

    Quartiles are numpy's default (linear interpolation) quantiles.  Every statistic is
    ``None`` when ``n`` is 0; ``num_missing`` counts the ``None``/NaN values left out.
    """

    n: int
    min: float | None
    q1: float | None
    median: float | None
    q3: float | None
    max: float | None
    mean: float | None
    num_missing: int


def distribution(values: Sequence[float | None] | ArrayLike) -> Distribution:
    """:class:`Distribution` of ``values`` (``None`` and NaN are left out and counted)."""
    present, missing = _present(values)
    if not present.size:
        return Distribution(0, None, None, None, None, None, None, missing)
    q = np.quantile(present, [0.0, 0.25, 0.5, 0.75, 1.0])
    return Distribution(
        n=int(present.size),
        min=float(q[0]),
        q1=float(q[1]),
        median=float(q[2]),
        q3=float(q[3]),
        max=float(q[4]),
        mean=float(present.mean()),
        num_missing=missing,
    )


__all__ = [
    "CriticalDifference",
    "Distribution",
    "MeanInterval",
    "PairedComparison",
    "distribution",
    "friedman_nemenyi",
    "mean_ci",
    "nemenyi_q",
    "paired_bootstrap",
]

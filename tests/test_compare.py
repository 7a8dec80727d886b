"""Properties of :mod:`qval.compare` checked against independent computations: scipy on
hand-cleaned data and on each resample, ``scipy.stats.rankdata`` row by row, the textbook
Friedman formula, Demšar's (2006) table of Nemenyi critical values, ``scipy.stats.t`` and
the ``statistics`` module."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from qval import compare, metric_registry, metrics
from qval.compare import (
    CriticalDifference,
    Distribution,
    MeanInterval,
    distribution,
    friedman_nemenyi,
    mean_ci,
    nemenyi_q,
    paired_bootstrap,
)

SCIPY = {"spearman": stats.spearmanr, "kendall_tau": stats.kendalltau, "pearson": stats.pearsonr}


def _data(seed: int, n: int, noise_b: float = 1.0, ties: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    a = x + rng.normal(size=n)
    b = x + noise_b * rng.normal(size=n)
    if ties:
        x, a, b = np.round(x), np.round(a, 1), np.round(b)
    return x, a, b


@st.composite
def triples(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels and two methods' scores (60-120 points, some ties, some NaN)."""
    n = draw(st.integers(60, 120))
    seed = draw(st.integers(0, 2**32 - 1))
    x, a, b = _data(seed, n, noise_b=draw(st.floats(0.2, 3.0)), ties=draw(st.booleans()))
    rng = np.random.default_rng(seed + 1)
    for v in (x, a, b):
        v[rng.random(n) < draw(st.floats(0.0, 0.1))] = np.nan
    return x, a, b


# -- paired bootstrap -------------------------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(triples(), st.sampled_from(sorted(SCIPY)))
def test_difference_is_scipy_on_the_common_points(data: tuple, metric: str) -> None:
    x, a, b = data
    keep = [i for i in range(x.size) if not (math.isnan(x[i]) or math.isnan(a[i]) or math.isnan(b[i]))]
    assume(len(keep) >= 50)
    result = paired_bootstrap(x, a, b, metric=metric, resamples=20)
    expected_a = float(SCIPY[metric](x[keep], a[keep]).statistic)
    expected_b = float(SCIPY[metric](x[keep], b[keep]).statistic)
    assert (result.num_points, result.num_dropped) == (len(keep), x.size - len(keep))
    assert result.rho_a == pytest.approx(expected_a, abs=1e-12)
    assert result.rho_b == pytest.approx(expected_b, abs=1e-12)
    assert result.difference == pytest.approx(expected_a - expected_b, abs=1e-12)
    assert not result.insufficient


@settings(deadline=None, max_examples=30)
@given(triples(), st.sampled_from(["spearman", "pearson", "sign_agreement"]), st.integers(0, 1000))
def test_swapping_a_and_b_negates_difference_and_interval(data: tuple, metric: str, seed: int) -> None:
    x, a, b = data
    ab = paired_bootstrap(x, a, b, metric=metric, resamples=300, seed=seed)
    ba = paired_bootstrap(x, b, a, metric=metric, resamples=300, seed=seed)
    assume(ab.difference is not None)
    assert ba.difference == pytest.approx(-ab.difference, abs=1e-12)
    assert (ba.rho_a, ba.rho_b) == (ab.rho_b, ab.rho_a)
    assert ba.low == pytest.approx(-ab.high, abs=1e-9)
    assert ba.high == pytest.approx(-ab.low, abs=1e-9)
    assert ba.p_value == ab.p_value


@settings(deadline=None, max_examples=20)
@given(triples(), st.sampled_from(sorted(SCIPY)))
def test_identical_methods_differ_by_zero_with_p_one(data: tuple, metric: str) -> None:
    x, a, _ = data
    result = paired_bootstrap(x, a, a.copy(), metric=metric, resamples=50 if metric == "kendall_tau" else 300)
    assume(not result.insufficient and result.rho_a is not None)
    assert result.difference == 0.0
    assert (result.low, result.high, result.p_value) == (0.0, 0.0, 1.0)


def test_a_clearly_better_method_is_significant() -> None:
    x, a, b = _data(3, 2000, noise_b=3.0)
    result = paired_bootstrap(x, a, b, resamples=1000, seed=5)
    assert result.difference > 0.1
    assert result.p_value < 0.001
    assert 0.0 < result.low < result.difference < result.high
    assert result.significance() == "***"
    # points whose trajectories are not known are resampled one by one: 2000 units, one stratum
    assert (result.unit, result.clusters, result.strata) == ("point", 2000, 1)


def test_equally_good_methods_are_not_significant() -> None:
    x, a, b = _data(4, 500, noise_b=1.0)
    b = x + np.random.default_rng(99).normal(size=x.size)  # same noise level, other draw
    result = paired_bootstrap(x, a, b, resamples=1000)
    assert result.low < 0.0 < result.high
    assert result.p_value > 0.05


@pytest.mark.parametrize("metric", ["spearman", "pearson", "sign_agreement", "kendall_tau"])
def test_reproducible_under_a_seed(metric: str) -> None:
    x, a, b = _data(5, 400, ties=True)
    resamples = 100 if metric == "kendall_tau" else 500
    first = paired_bootstrap(x, a, b, metric=metric, resamples=resamples, seed=1)
    assert first == paired_bootstrap(x, a, b, metric=metric, resamples=resamples, seed=1)
    assert first != paired_bootstrap(x, a, b, metric=metric, resamples=resamples, seed=2)
    assert (first.resamples, first.seed, first.level, first.num_undefined) == (resamples, 1, 0.95, 0)


@pytest.mark.parametrize("metric", sorted(SCIPY))
def test_each_resample_is_scipy_on_the_same_indices_for_both(metric: str) -> None:
    x, a, b = _data(6, 80, ties=True)
    total = 30
    got = compare._paired_differences((x, a, b), [metric_registry.get(metric)], total, seed=4)[0]
    idx = np.random.default_rng(4).integers(0, x.size, size=(total, x.size))  # one chunk
    fn = SCIPY[metric]
    expected = [float(fn(x[i], a[i]).statistic) - float(fn(x[i], b[i]).statistic) for i in idx]
    np.testing.assert_allclose(got, expected, atol=1e-12)
    result = paired_bootstrap(x, a, b, metric=metric, resamples=total, seed=4)
    # the interval and p-value: the resampled differences' spread, the small-sample factor n / (n - 1) and
    # Student's t with n - 1 degrees of freedom (each point its own unit)
    n = x.size
    se = float(np.std(expected, ddof=1)) * math.sqrt(n / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * se
    assert result.std_error == pytest.approx(se, rel=1e-9)
    assert (result.low, result.high) == (pytest.approx(result.difference - half, abs=1e-12),
                                         pytest.approx(result.difference + half, abs=1e-12))
    assert result.p_value == pytest.approx(2 * stats.t.sf(abs(result.difference) / se, n - 1), rel=1e-9)


def _kendall_case(case: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = 300 if case != "long tie run" else 400
    x = rng.normal(size=n)
    if case == "continuous":
        return x, x + rng.normal(size=n)
    if case == "heavy ties":
        return np.round(x * 2), np.round(x + rng.normal(size=n))
    if case == "binary scores":
        return np.round(x, 1), (x + rng.normal(size=n) > 0).astype(float)
    if case == "nearly constant":  # some resamples draw one value only: tau undefined there
        return x, np.where(np.arange(n) < 3, 1.0, 0.0)
    # One tied value held by more points than a block (longer than sqrt(n)), both sides.
    x[:150] = 0.25
    y = x + rng.normal(size=n)
    y[100:220] = -1.0
    return x, y


@pytest.mark.parametrize("seed, case", list(enumerate(["continuous", "heavy ties", "binary scores", "nearly constant",
                                                        "long tie run"])))
def test_vectorised_kendall_is_scipy_on_each_resample(seed: int, case: str) -> None:
    rng = np.random.default_rng(seed)
    x, y = _kendall_case(case, rng)
    idx = rng.integers(0, x.size, size=(200, x.size))
    tau = metrics.KendallResampler(x, y)
    got = tau(metrics.Resamples(idx, x.size).point_counts(tau.dtype))
    expected = np.array([stats.kendalltau(x[i], y[i]).statistic for i in idx])
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    if case == "nearly constant":
        assert np.isnan(expected).any()
    np.testing.assert_allclose(got[~np.isnan(got)], expected[~np.isnan(expected)], rtol=0, atol=1e-12)


def test_kendall_beyond_the_vectorised_size_gives_the_same_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    x, a, b = _data(8, 500, ties=True)
    vectorised = paired_bootstrap(x, a, b, metric="kendall_tau", resamples=120, seed=3)
    single = metrics.bootstrap_point_ci(x, a, "kendall_tau", resamples=120, seed=3)
    monkeypatch.setattr(metrics, "KENDALL_VECTOR_MAX_POINTS", 10)  # one scipy call per resample
    looped = paired_bootstrap(x, a, b, metric="kendall_tau", resamples=120, seed=3)
    assert (looped.low, looped.high, looped.p_value) == pytest.approx(
        (vectorised.low, vectorised.high, vectorised.p_value), abs=1e-12)
    again = metrics.bootstrap_point_ci(x, a, "kendall_tau", resamples=120, seed=3)
    assert (again.low, again.high) == pytest.approx((single.low, single.high), abs=1e-12)


def test_too_few_common_points_is_insufficient() -> None:
    x, a, b = _data(7, 60)
    a[:11] = np.nan  # 49 common points left
    result = paired_bootstrap(x, a, b)
    assert result.insufficient
    assert (result.num_points, result.num_dropped, result.resamples) == (49, 11, 0)
    assert (result.rho_a, result.rho_b, result.difference, result.low, result.high, result.p_value) == (None,) * 6
    assert not paired_bootstrap(x, a, b, min_points=40).insufficient


def test_a_constant_method_has_no_difference() -> None:
    x, a, _ = _data(8, 100)
    result = paired_bootstrap(x, a, np.zeros(100))
    assert result.rho_b is None and result.difference is None and result.p_value is None
    assert result.rho_a == pytest.approx(float(stats.spearmanr(x, a).statistic))


def test_bad_inputs_are_rejected() -> None:
    x, a, b = _data(9, 100)
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap(x, a, b[:-1])
    with pytest.raises(ValueError, match="infinite"):
        paired_bootstrap(x, np.r_[a[:-1], np.inf], b)
    with pytest.raises(ValueError, match="unknown metric"):
        paired_bootstrap(x, a, b, metric="r2")
    with pytest.raises(ValueError, match="level"):
        paired_bootstrap(x, a, b, level=1.0)
    with pytest.raises(ValueError, match="unknown rules"):
        paired_bootstrap(x, a, b, rules="mine")


def test_reference_rules_keep_infinite_scores_as_the_scorer_does() -> None:
    """Under ``qval-v1.0`` an infinite score is a score (ranked above every other), as
    :func:`qval.metrics.correlate` keeps it there; under ours it is refused (above)."""
    x, a, b = _data(10, 100)
    a[np.argmax(a)] = np.inf  # still the largest: every rank, so rho_a, is unchanged
    result = paired_bootstrap(x, a, b, rules="qval-v1.0", resamples=200)
    finite = paired_bootstrap(x, np.where(np.isinf(a), 1e9, a), b, resamples=200)
    assert result.num_points == 100 and result.rho_a == pytest.approx(float(stats.spearmanr(x, a).statistic))
    assert (result.difference, result.low, result.high, result.p_value) == pytest.approx(
        (finite.difference, finite.low, finite.high, finite.p_value))


# -- Friedman / Nemenyi -----------------------------------------------------------------

scores_matrix = st.integers(3, 7).flatmap(
    lambda k: st.lists(
        st.lists(st.one_of(st.integers(-3, 3).map(float), st.floats(-1, 1, allow_nan=False)), min_size=k, max_size=k),
        min_size=2,
        max_size=25,
    )
)


def _independent_average_ranks(rows: list[list[float]]) -> list[float]:
    k = len(rows[0])
    ranked = [stats.rankdata([-v for v in row]) for row in rows]  # rank 1 = highest
    return [sum(r[j] for r in ranked) / len(rows) for j in range(k)]


@settings(deadline=None, max_examples=100)
@given(scores_matrix)
def test_friedman_matches_scipy_and_ranks_match_rankdata(rows: list[list[float]]) -> None:
    k = len(rows[0])
    assume(any(len(set(row)) > 1 for row in rows))
    result = friedman_nemenyi(rows, [f"m{j}" for j in range(k)])
    expected = stats.friedmanchisquare(*[[row[j] for row in rows] for j in range(k)])
    assert result.statistic == pytest.approx(float(expected.statistic), rel=1e-12, abs=1e-12)
    assert result.p_value == pytest.approx(float(expected.pvalue), rel=1e-9, abs=1e-12)
    assert list(result.average_ranks) == pytest.approx(_independent_average_ranks(rows), abs=1e-12)
    assert sum(result.average_ranks) == pytest.approx(k * (k + 1) / 2)
    assert sorted(result.order) == list(range(k))
    assert [result.average_ranks[i] for i in result.order] == sorted(result.average_ranks)


@settings(deadline=None, max_examples=50)
@given(st.integers(3, 6), st.integers(2, 30), st.integers(0, 2**32 - 1))
def test_friedman_statistic_is_the_textbook_formula_without_ties(k: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = np.array([rng.permutation(k) for _ in range(n)], dtype=float)  # no ties
    result = friedman_nemenyi(rows, list("abcdef")[:k])
    ranks = np.array(_independent_average_ranks(rows.tolist()))
    chi2 = 12 * n / (k * (k + 1)) * (float(np.sum(ranks**2)) - k * (k + 1) ** 2 / 4)
    assert result.statistic == pytest.approx(chi2, rel=1e-12, abs=1e-12)
    assert result.p_value == pytest.approx(float(stats.chi2.sf(chi2, k - 1)), rel=1e-9, abs=1e-15)


def test_critical_difference_for_four_methods_and_ten_evaluations() -> None:
    # Demšar (2006), Table 5a: q_0.05 = 2.569 for k = 4; CD = 2.569 * sqrt(4 * 5 / (6 * 10)).
    rows = np.random.default_rng(0).normal(size=(10, 4))
    result = friedman_nemenyi(rows, ["a", "b", "c", "d"])
    assert result.q_alpha == pytest.approx(2.569, abs=5e-4)
    assert result.cd == pytest.approx(2.569 * math.sqrt(20 / 60), abs=1e-3)
    assert result.cd == pytest.approx(1.483, abs=1e-3)
    assert (result.num_evaluations, result.alpha) == (10, 0.05)


@pytest.mark.parametrize(
    ("k", "q05", "q10"), [(2, 1.960, 1.645), (3, 2.343, 2.052), (5, 2.728, 2.459), (10, 3.164, 2.920)]
)
def test_nemenyi_q_matches_demsar_table(k: int, q05: float, q10: float) -> None:
    # The table gives three decimals, not always rounded to nearest (2.3437 is 2.343).
    assert nemenyi_q(k, 0.05) == pytest.approx(q05, abs=1e-3)
    assert nemenyi_q(k, 0.10) == pytest.approx(q10, abs=1e-3)


@settings(deadline=None, max_examples=50)
@given(scores_matrix, st.integers(0, 2**32 - 1))
def test_ranks_are_invariant_under_monotone_transforms_of_each_row(rows: list[list[float]], seed: int) -> None:
    k = len(rows[0])
    names = [f"m{j}" for j in range(k)]
    rng = np.random.default_rng(seed)
    transforms = [np.exp, lambda v: v**3, lambda v: 5 * v - 2, np.arctan]
    moved = [transforms[rng.integers(len(transforms))](np.array(row)) + rng.normal() for row in rows]
    assume(all(len(set(m.tolist())) == len(set(row)) for m, row in zip(moved, rows)))  # no new ties by rounding
    assume(any(len(set(row)) > 1 for row in rows))
    before, after = friedman_nemenyi(rows, names), friedman_nemenyi(moved, names)
    assert after.average_ranks == pytest.approx(before.average_ranks, abs=1e-12)
    assert after.statistic == pytest.approx(before.statistic, rel=1e-9, abs=1e-12)
    assert (after.order, after.cliques, after.cd) == (before.order, before.cliques, before.cd)


@settings(deadline=None, max_examples=100)
@given(scores_matrix)
def test_cliques_join_exactly_the_methods_closer_than_cd(rows: list[list[float]]) -> None:
    k = len(rows[0])
    result = friedman_nemenyi(rows, [f"m{j}" for j in range(k)])
    ranks = [result.average_ranks[i] for i in result.order]
    for i in range(k):
        for j in range(i + 1, k):
            together = any(s <= i and j <= e for s, e in result.cliques)
            assert together == (ranks[j] - ranks[i] < result.cd)
            assert result.differ(result.order[i], result.order[j]) == (not together)
    for s, e in result.cliques:
        assert s < e
        assert not any((s2, e2) != (s, e) and s2 <= s and e <= e2 for s2, e2 in result.cliques)


def test_a_worked_critical_difference_diagram() -> None:
    # Average ranks 1, 2, 3, 4 with CD ~ 1.48 (k = 4, N = 10): bars {a, b} {b, c} {c, d}.
    rows = [[4.0, 3.0, 2.0, 1.0]] * 10
    result = friedman_nemenyi(rows, ["a", "b", "c", "d"])
    assert result.average_ranks == (1.0, 2.0, 3.0, 4.0)
    assert result.cliques == ((0, 1), (1, 2), (2, 3))
    assert result.groups() == [["a", "b"], ["b", "c"], ["c", "d"]]
    # Columns out of order: positions refer to the ranking.
    shuffled = friedman_nemenyi([[2.0, 4.0, 1.0, 3.0]] * 40, ["c", "a", "d", "b"])
    assert shuffled.ranked_methods == ("a", "b", "c", "d")
    assert shuffled.order == (1, 3, 0, 2)
    assert shuffled.cliques == ()  # CD ~ 0.74 with N = 40: every pair differs


def test_rows_with_missing_values_are_dropped_and_counted() -> None:
    rows = [[1.0, 2.0, 3.0], [None, 1.0, 2.0], [3.0, 1.0, 2.0], [1.0, math.nan, 0.0], [2.0, 3.0, 1.0]]
    result = friedman_nemenyi(rows, ["a", "b", "c"])
    assert (result.num_evaluations, result.num_dropped) == (3, 2)
    assert result == replace(friedman_nemenyi([rows[0], rows[2], rows[4]], ["a", "b", "c"]), num_dropped=2)


def test_all_ties_have_no_test_but_ranks() -> None:
    result = friedman_nemenyi([[1.0, 1.0, 1.0]] * 4, ["a", "b", "c"])
    assert (result.statistic, result.p_value) == (None, None)
    assert result.average_ranks == (2.0, 2.0, 2.0)
    assert result.cliques == ((0, 2),)


@pytest.mark.parametrize(
    ("rows", "methods", "match"),
    [
        ([[1.0, 2.0], [2.0, 1.0]], ["a", "b"], "at least 3 methods"),
        ([[1.0, 2.0, 3.0]], ["a", "b", "c"], "at least 2 evaluations"),
        ([[1.0, 2.0, 3.0], [1.0, None, 3.0]], ["a", "b", "c"], "at least 2 evaluations"),
        ([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], ["a", "b"], "columns"),
        ([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], ["a", "b", "a"], "distinct"),
        ([1.0, 2.0, 3.0], ["a", "b", "c"], "two-dimensional"),
        ([[1.0, 2.0, math.inf], [1.0, 2.0, 3.0]], ["a", "b", "c"], "infinite"),
    ],
)
def test_friedman_rejects_what_it_cannot_test(rows: list, methods: list[str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        friedman_nemenyi(rows, methods)


# -- mean with a t interval, distribution -----------------------------------------------

summary_values = st.lists(
    st.one_of(st.floats(-10, 10, allow_nan=False), st.none(), st.just(math.nan)), min_size=0, max_size=30
)


@settings(deadline=None, max_examples=150)
@given(summary_values, st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_mean_ci_matches_scipy_t_interval(values: list[float | None], level: float) -> None:
    present = [v for v in values if v is not None and not math.isnan(v)]
    result = mean_ci(values, level)
    assert isinstance(result, MeanInterval)
    assert (result.n, result.num_missing, result.level) == (len(present), len(values) - len(present), level)
    if not present:
        assert (result.mean, result.std, result.low, result.high) == (None,) * 4
        return
    assert result.mean == pytest.approx(statistics.fmean(present), abs=1e-9)
    if len(present) == 1:
        assert (result.std, result.low, result.high) == (None, None, None)
        return
    assert result.std == pytest.approx(statistics.stdev(present), abs=1e-9)
    sem = stats.sem(present)
    if sem == 0:
        assert result.low == result.high == result.mean
        return
    low, high = stats.t.interval(level, len(present) - 1, loc=statistics.fmean(present), scale=sem)
    assert (result.low, result.high) == (pytest.approx(low, abs=1e-9), pytest.approx(high, abs=1e-9))


def test_mean_ci_by_hand() -> None:
    # mean 2, sd 1, n 4: 2 ± 3.182446 * 1 / 2 (t_{0.975, 3} = 3.182).
    result = mean_ci([1.0, 2.0, 2.0, 3.0, None])
    assert result.std == pytest.approx(math.sqrt(2 / 3))
    assert result.high - result.mean == pytest.approx(3.182446 * math.sqrt(2 / 3) / 2, abs=1e-6)
    assert result.num_missing == 1
    with pytest.raises(ValueError, match="level"):
        mean_ci([1.0, 2.0], level=95)


@settings(deadline=None, max_examples=150)
@given(summary_values)
def test_distribution_matches_the_statistics_module(values: list[float | None]) -> None:
    present = [v for v in values if v is not None and not math.isnan(v)]
    result = distribution(values)
    assert isinstance(result, Distribution)
    assert (result.n, result.num_missing) == (len(present), len(values) - len(present))
    if not present:
        assert result == Distribution(0, None, None, None, None, None, None, len(values))
        return
    assert (result.min, result.max) == (min(present), max(present))
    assert result.median == pytest.approx(statistics.median(present), abs=1e-9)
    assert result.mean == pytest.approx(statistics.fmean(present), abs=1e-9)
    if len(present) >= 2:
        q1, _, q3 = statistics.quantiles(present, n=4, method="inclusive")
        assert (result.q1, result.q3) == (pytest.approx(q1, abs=1e-9), pytest.approx(q3, abs=1e-9))
    assert result.min <= result.q1 <= result.median <= result.q3 <= result.max


def test_distribution_of_an_array_and_infinite_values() -> None:
    assert distribution(np.array([4.0, 1.0, 3.0, 2.0, 5.0])) == Distribution(5, 1.0, 2.0, 3.0, 4.0, 5.0, 3.0, 0)
    with pytest.raises(ValueError, match="infinite"):
        distribution([1.0, math.inf])
    with pytest.raises(ValueError, match="infinite"):
        mean_ci([1.0, -math.inf])


def test_results_are_plain_dataclasses() -> None:
    assert isinstance(friedman_nemenyi([[1, 2, 3], [3, 2, 1]], ["a", "b", "c"]), CriticalDifference)

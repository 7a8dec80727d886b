"""Properties of the scoring engine (:mod:`qval.metrics`) checked against independent
computations: plain-Python filtering and counting, the ``statistics`` module, scipy on
hand-cleaned data, and hand-worked examples."""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from qval import metric_registry, metrics
from qval.metrics import (
    MIN_USABLE_POINTS,
    POINT_METRICS,
    Aggregate,
    Interval,
    Selection,
    aggregate,
    bootstrap_point_ci,
    bootstrap_ranking_ci,
    correlate,
    point_metrics,
    ranking_spearman,
    ranking_summary,
    selection_metrics,
    significance_marks,
    state_ranking_spearman,
)

SCIPY: dict[str, Callable[..., object]] = {
    "spearman": stats.spearmanr,
    "kendall_tau": stats.kendalltau,
    "pearson": stats.pearsonr,
}

# Values with plenty of ties (small integers) mixed with arbitrary floats.
values = st.one_of(
    st.integers(-4, 4).map(float),
    st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False),
)
maybe_nan = st.one_of(values, st.just(math.nan))

STRICTLY_INCREASING: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "cube": lambda v: v**3,
    "exp": lambda v: np.exp(v / 100.0),
    "affine": lambda v: 3.0 * v - 7.0,
    "odd-log": lambda v: np.sign(v) * np.log1p(np.abs(v)),
}


def _expected(labels: list[float], scores: list[float], metric: str) -> tuple[float | None, float | None]:
    """Reference value of one metric on pairs already free of NaN (plain Python + scipy)."""
    if metric == "sign_agreement":
        agree = sum(1 for a, b in zip(labels, scores) if np.sign(a) == np.sign(b))
        return agree / len(labels), stats.binomtest(agree, len(labels), 0.5).pvalue
    if len(set(labels)) == 1 or len(set(scores)) == 1:
        return None, None
    result = SCIPY[metric](labels, scores)
    return float(result.statistic), float(result.pvalue)


# -- pointwise correlations ----------------------------------------------------------------


@settings(deadline=None, max_examples=150)
@given(st.lists(st.tuples(maybe_nan, maybe_nan), min_size=0, max_size=40))
def test_point_metrics_drop_nan_pairs_then_match_scipy(pairs: list[tuple[float, float]]) -> None:
    labels = [a for a, _ in pairs]
    scores = [b for _, b in pairs]
    kept = [(a, b) for a, b in pairs if not (math.isnan(a) or math.isnan(b))]
    result = point_metrics(labels, scores, min_points=3)
    assert list(result) == list(POINT_METRICS)
    for metric, corr in result.items():
        assert corr == correlate(labels, scores, metric, min_points=3)
        assert corr.metric == metric
        assert corr.num_points == len(kept)
        assert corr.num_dropped == len(pairs) - len(kept)
        assert corr.insufficient == (len(kept) < 3)
        if corr.insufficient:
            assert (corr.value, corr.p_value) == (None, None)
            continue
        value, p_value = _expected([a for a, _ in kept], [b for _, b in kept], metric)
        if value is None:
            assert (corr.value, corr.p_value) == (None, None)
        else:
            assert corr.value == pytest.approx(value, abs=1e-12)
            assert corr.p_value == pytest.approx(p_value, abs=1e-12, rel=1e-9)


@settings(deadline=None)
@given(
    st.lists(st.tuples(values, st.integers(-1000, 1000)), min_size=3, max_size=40),
    st.sampled_from(sorted(STRICTLY_INCREASING)),
)
def test_rank_metrics_are_invariant_under_increasing_transforms(
    pairs: list[tuple[float, int]], transform_name: str
) -> None:
    labels = np.array([a for a, _ in pairs])
    scores = np.array([float(b) for _, b in pairs])
    transformed = STRICTLY_INCREASING[transform_name](scores)
    assert np.all(np.diff(transformed[np.argsort(scores)]) >= 0)  # still ordered, ties kept
    for metric in ("spearman", "kendall_tau"):
        before = correlate(labels, scores, metric, min_points=3)
        after = correlate(labels, transformed, metric, min_points=3)
        if before.value is None:
            assert after.value is None
        else:
            assert after.value == pytest.approx(before.value, abs=1e-12)
            assert after.p_value == pytest.approx(before.p_value, abs=1e-12, rel=1e-9)
    before_state = state_ranking_spearman(labels, scores)
    after_state = state_ranking_spearman(labels, transformed)
    assert after_state == pytest.approx(before_state, abs=1e-12) if before_state is not None else after_state is None


@settings(deadline=None)
@given(st.lists(st.integers(-10**6, 10**6), min_size=3, max_size=60, unique=True))
def test_perfect_order_gives_one_and_reversed_order_minus_one(raw: list[int]) -> None:
    labels = np.array(raw, dtype=np.float64)  # distinct, and so are their transforms below
    for metric in ("spearman", "kendall_tau", "pearson"):
        assert correlate(labels, 3.0 * labels + 1.0, metric, min_points=3).value == pytest.approx(1.0, abs=1e-9)
        assert correlate(labels, -labels, metric, min_points=3).value == pytest.approx(-1.0, abs=1e-9)
    for metric in ("spearman", "kendall_tau"):
        assert correlate(labels, labels**3, metric, min_points=3).value == pytest.approx(1.0, abs=1e-12)
    assert state_ranking_spearman(labels, np.exp(labels / 1e6)) == pytest.approx(1.0, abs=1e-12)
    assert correlate(labels, labels, "sign_agreement", min_points=3).value == 1.0


def test_fewer_than_min_usable_points_is_insufficient() -> None:
    assert MIN_USABLE_POINTS == 50
    rng = np.random.default_rng(7)
    labels = rng.normal(size=53)
    scores = labels + rng.normal(size=53)
    scores[[3, 10]] = np.nan
    labels[20] = np.nan  # 53 - 3 = 50 usable pairs
    at_threshold = point_metrics(labels, scores)
    assert all(not c.insufficient and c.value is not None for c in at_threshold.values())
    assert {(c.num_points, c.num_dropped) for c in at_threshold.values()} == {(50, 3)}
    labels[30] = np.nan  # 49 usable pairs
    below = point_metrics(labels, scores)
    for corr in below.values():
        assert corr.insufficient
        assert (corr.value, corr.p_value, corr.num_points, corr.num_dropped) == (None, None, 49, 4)
        assert corr.significance() == ""


def test_constant_predictions_have_no_correlation() -> None:
    labels = np.linspace(-1.0, 1.0, 60)
    result = point_metrics(labels, np.full(60, 0.1))
    for metric in ("spearman", "kendall_tau", "pearson"):
        corr = result[metric]
        assert (corr.value, corr.p_value, corr.num_points, corr.insufficient) == (None, None, 60, False)
    # sign agreement stays defined: the 30 positive labels agree with the positive constant
    assert result["sign_agreement"].value == 0.5
    assert result["sign_agreement"].p_value == pytest.approx(1.0)
    assert correlate(np.zeros(60), labels, "pearson").value is None  # constant labels too


def test_sign_agreement_counts_zero_as_agreeing_with_zero() -> None:
    labels = [0.0, 0.0, 1.0, -2.0, 3.0, -1.0]
    scores = [0.0, 0.5, 2.0, -0.1, -3.0, 0.0]
    # agreeing: (0, 0), (1, 2), (-2, -0.1) -> 3 of 6
    corr = correlate(labels, scores, "sign_agreement", min_points=2)
    assert corr.value == 0.5
    assert corr.p_value == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("p_value", "marks"),
    [(None, ""), (math.nan, ""), (0.0, "***"), (0.000999, "***"), (0.001, "**"), (0.00999, "**"),
     (0.01, "*"), (0.0999, "*"), (0.10, ""), (0.5, "")],
)
def test_significance_marks(p_value: float | None, marks: str) -> None:
    assert significance_marks(p_value) == marks
    assert metrics.Correlation("spearman", 0.3, p_value, 60, 0, False).significance() == marks


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: correlate([1.0, 2.0], [1.0], "spearman"), "differ in length"),
        (lambda: correlate([1.0, math.inf], [1.0, 2.0], "spearman"), "infinite value at index 1"),
        (lambda: correlate([[1.0]], [[1.0]], "spearman"), "one-dimensional"),
        (lambda: correlate([1.0], [1.0], "r2"), "unknown metric"),
        (lambda: point_metrics([1.0], [1.0], metrics=("spearman", "tau")), "unknown metric"),
        (lambda: correlate([1.0], [1.0], "pearson", min_points=1), "at least 2"),
    ],
)
def test_invalid_input_is_rejected(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_point_metrics_on_a_million_points_is_fast() -> None:
    rng = np.random.default_rng(0)
    labels = rng.normal(size=1_000_000)
    scores = labels + rng.normal(size=1_000_000)
    scores[::10] = np.nan
    start = time.perf_counter()
    result = point_metrics(labels, scores)
    elapsed = time.perf_counter() - start
    assert {c.num_points for c in result.values()} == {900_000}
    assert result["pearson"].value == pytest.approx(1 / math.sqrt(2), abs=0.01)
    assert elapsed < 20.0, f"point_metrics took {elapsed:.1f} s on 1e6 points"


# -- ranking within states -----------------------------------------------------------------


@settings(deadline=None)
@given(st.lists(st.tuples(maybe_nan, maybe_nan), min_size=0, max_size=8))
def test_state_ranking_spearman_matches_scipy_on_the_scored_candidates(pairs: list[tuple[float, float]]) -> None:
    kept = [(a, b) for a, b in pairs if not (math.isnan(a) or math.isnan(b))]
    labels = [a for a, _ in kept]
    scores = [b for _, b in kept]
    result = state_ranking_spearman([a for a, _ in pairs], [b for _, b in pairs])
    if len(kept) < 2 or len(set(labels)) == 1:
        assert result is None
    elif len(set(scores)) == 1:
        assert result == 0.0
    else:
        assert result == pytest.approx(float(stats.spearmanr(labels, scores).statistic), abs=1e-12)


@given(st.lists(values, min_size=2, max_size=6).filter(lambda v: len(set(v)) > 1), values)
def test_a_state_with_all_equal_scores_counts_zero(labels: list[float], score: float) -> None:
    assert state_ranking_spearman(labels, [score] * len(labels)) == 0.0
    assert state_ranking_spearman(labels + [7.0], [score] * len(labels) + [math.nan]) == 0.0


@given(values, st.lists(values, min_size=2, max_size=6))
def test_a_state_with_all_equal_labels_is_skipped(label: float, scores: list[float]) -> None:
    assert state_ranking_spearman([label] * len(scores), scores) is None


def test_state_ranking_spearman_skips_too_few_candidates() -> None:
    assert state_ranking_spearman([], []) is None
    assert state_ranking_spearman([1.0], [0.3]) is None
    assert state_ranking_spearman([1.0, 2.0, 3.0], [0.3, math.nan, math.nan]) is None
    assert state_ranking_spearman([1.0, 2.0, math.nan], [0.3, 0.4, 0.5]) == pytest.approx(1.0)


@given(st.lists(st.one_of(st.none(), st.floats(-1, 1, allow_nan=False)), max_size=30))
def test_ranking_summary_matches_the_statistics_module(per_state: list[float | None]) -> None:
    valid = [v for v in per_state if v is not None]
    summary = ranking_summary(per_state)
    assert (summary.num_valid, summary.num_skipped, summary.num_points) == (
        len(valid), len(per_state) - len(valid), len(per_state),
    )
    assert summary.per_state == per_state
    if valid:
        assert summary.mean == pytest.approx(statistics.fmean(valid), abs=1e-12)
    else:
        assert summary.mean is None
    if len(valid) >= 2:
        assert summary.std == pytest.approx(statistics.stdev(valid), abs=1e-12)
    else:
        assert summary.std is None


def test_ranking_spearman_summarises_states() -> None:
    groups = [
        ([1.0, 2.0, 3.0], [0.1, 0.2, 0.3]),  # 1.0
        ([1.0, 2.0, 3.0], [0.3, 0.2, 0.1]),  # -1.0
        ([1.0, 2.0, 3.0], [0.5, 0.5, 0.5]),  # abstained: 0.0
        ([2.0, 2.0, 2.0], [0.1, 0.2, 0.3]),  # equal labels: skipped
        ([1.0, 2.0, 3.0], [0.1, math.nan, math.nan]),  # one scored candidate: skipped
    ]
    summary = ranking_spearman(groups)
    assert summary.per_state == [1.0, -1.0, 0.0, None, None]
    assert (summary.num_valid, summary.num_skipped, summary.num_points) == (3, 2, 5)
    assert summary.mean == pytest.approx(0.0)
    assert summary.std == pytest.approx(1.0)  # sqrt((1 + 1 + 0) / 2)


def test_ranking_summary_treats_nan_as_skipped() -> None:
    summary = ranking_summary([0.5, math.nan, None])
    assert (summary.mean, summary.std, summary.num_valid, summary.num_skipped) == (0.5, None, 1, 2)
    assert summary.per_state == [0.5, None, None]


# -- aggregates ----------------------------------------------------------------------------


@given(st.lists(st.one_of(st.none(), st.floats(-1, 1, allow_nan=False)), max_size=20))
def test_aggregate_matches_the_statistics_module(samples: list[float | None]) -> None:
    valid = [v for v in samples if v is not None]
    result = aggregate(samples)
    assert (result.num_samples, result.num_nan) == (len(valid), len(samples) - len(valid))
    if not valid:
        assert result == Aggregate(None, None, None, None, None, 0, len(samples))
        return
    assert result.mean == pytest.approx(statistics.fmean(valid), abs=1e-12)
    assert result.median == pytest.approx(statistics.median(valid), abs=1e-12)
    assert (result.min, result.max) == (min(valid), max(valid))
    assert result.std == (pytest.approx(statistics.stdev(valid), abs=1e-12) if len(valid) >= 2 else None)


def test_aggregate_uses_the_sample_std() -> None:
    result = aggregate([0.1, None, 0.3, 0.5])
    assert result == Aggregate(
        mean=pytest.approx(0.3), std=pytest.approx(0.2), min=0.1, max=0.5, median=0.3, num_samples=3, num_nan=1
    )


# -- selection -----------------------------------------------------------------------------


def test_selection_metrics_hand_worked() -> None:
    groups = [
        # A: picks index 1 (label 3, the best): correct, regret 0.
        #    pairs (0,1) (0,2) (1,2) all ordered like the labels: 3 of 3.
        ([1.0, 3.0, 2.0], [0.1, 0.9, 0.5]),
        # B: scores tie at 0.7 on indices 0 and 1 -> lowest index 0 (label 0): wrong, regret 1.
        #    (0,1) tied score 0.5; (0,2) labels 0<0.5 but scores 0.7>0.2: 0; (1,2) right: 1 -> 1.5 of 3.
        ([0.0, 1.0, 0.5], [0.7, 0.7, 0.2]),
        # C: picks index 0 (label 2 = best of equal labels): correct, regret 0; no pair with different labels.
        ([2.0, 2.0], [0.3, 0.1]),
        # D: nothing scored: skipped.
        ([1.0, 0.0], [math.nan, math.nan]),
        # E: index 0 unscored; picks index 2 (label 3) but the best label is 5: wrong, regret 2.
        #    one scored pair (1,2): labels 1<3, scores 0.2<0.4: 1 of 1.
        ([5.0, 1.0, 3.0], [math.nan, 0.2, 0.4]),
    ]
    result = selection_metrics(groups)
    assert result.num_states == 4
    assert result.num_pairs == 7
    assert result.top1_accuracy == pytest.approx(2 / 4)
    assert result.regret_at_1 == pytest.approx((0 + 1 + 0 + 2) / 4)
    assert result.pairwise_accuracy == pytest.approx(5.5 / 7)


def test_selection_metrics_tie_goes_to_the_lowest_index() -> None:
    # three-way tie on the top score: index 1 is chosen (label 0.2); best label 0.9 -> regret 0.7
    result = selection_metrics([([0.5, 0.2, 0.9, 0.9], [0.1, 0.8, 0.8, 0.8])])
    assert (result.top1_accuracy, result.regret_at_1) == (0.0, pytest.approx(0.7))
    # pairs with different labels: (0,1) 0.5>0.2 vs 0.1<0.8 wrong; (0,2) (0,3) right;
    # (1,2) (1,3) tied scores 0.5 each; (2,3) equal labels, not a pair -> 3 of 5
    assert (result.num_pairs, result.pairwise_accuracy) == (5, pytest.approx(3 / 5))
    reversed_ties = selection_metrics([([0.9, 0.2, 0.5], [0.8, 0.8, 0.1])])
    assert (reversed_ties.top1_accuracy, reversed_ties.regret_at_1) == (1.0, 0.0)


def test_selection_metrics_without_anything_to_score() -> None:
    assert selection_metrics([]) == Selection(None, None, None, 0, 0)
    assert selection_metrics([([1.0, 2.0], [math.nan, math.nan])]) == Selection(None, None, None, 0, 0)
    assert selection_metrics([([1.0, 1.0], [0.2, 0.1])]) == Selection(1.0, 0.0, None, 1, 0)
    with pytest.raises(ValueError, match="differ in length"):
        selection_metrics([([1.0, 2.0], [0.1])])


# -- bootstrap -----------------------------------------------------------------------------


@settings(deadline=None, max_examples=40)
@given(
    st.lists(st.tuples(st.integers(-3, 3), values), min_size=2, max_size=30),
    st.sampled_from(POINT_METRICS),
    st.integers(0, 2**32 - 1),
)
# Found in CI: 2.5e-240 squared underflows to zero unless each side is rescaled first.
@example(pairs=[(0, 0.0), (0, 0.0), (0, 2.5092392963672417e-240), (1, 0.0)], metric="pearson", seed=0)
# Found in CI: a resample of (0, 0.0078125) and (1, 0) beside an outlier of 68 lost digits to cancellation.
@example(pairs=[(0, 0.0), (0, 68.0), (0, 0.0), (1, 0.0078125)], metric="pearson", seed=0)
def test_resample_statistics_match_scipy_on_each_resample(
    pairs: list[tuple[int, float]], metric: str, seed: int
) -> None:
    x = np.array([float(a) for a, _ in pairs])
    y = np.array([b for _, b in pairs])
    idx = np.random.default_rng(seed).integers(0, x.size, size=(6, x.size))
    idx[0] = 0  # a resample of one repeated pair: undefined except for sign agreement
    got = metric_registry.get(metric).resample(x, y)(metrics.Resamples(idx, x.size))
    for row, draw in enumerate(idx):
        value, _ = _expected(list(x[draw]), list(y[draw]), metric)
        if value is None:
            assert math.isnan(got[row])
        else:
            assert got[row] == pytest.approx(value, abs=1e-9)


@pytest.fixture(scope="module")
def large_sample() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    labels = rng.normal(size=3000)
    scores = 0.6 * labels + rng.normal(size=3000)
    scores[::97] = np.nan
    return labels, scores


@pytest.mark.parametrize("metric", POINT_METRICS)
def test_bootstrap_point_ci_is_reproducible_and_covers_the_estimate(
    large_sample: tuple[np.ndarray, np.ndarray], metric: str
) -> None:
    labels, scores = large_sample
    resamples = 200 if metric == "kendall_tau" else 1000
    ci = bootstrap_point_ci(labels, scores, metric, resamples=resamples, seed=11)
    assert ci == bootstrap_point_ci(labels, scores, metric, resamples=resamples, seed=11)
    assert ci != bootstrap_point_ci(labels, scores, metric, resamples=resamples, seed=12)
    estimate = correlate(labels, scores, metric).value
    assert ci.low is not None and ci.high is not None
    assert ci.low < estimate < ci.high
    assert ci.high - ci.low < 0.2
    assert (ci.level, ci.resamples) == (0.95, resamples)
    narrower = bootstrap_point_ci(labels, scores, metric, resamples=resamples, level=0.5, seed=11)
    assert ci.low < narrower.low < narrower.high < ci.high


def test_bootstrap_point_ci_undefined_cases() -> None:
    labels = np.linspace(0.0, 1.0, 60)
    assert bootstrap_point_ci(labels, np.full(60, 0.2), "spearman") == Interval(None, None, 0.95, 0, clusters=60)
    assert bootstrap_point_ci([1.0], [2.0], "pearson") == Interval(None, None, 0.95, 0, clusters=1)
    # sign agreement is defined even for constant predictions
    assert bootstrap_point_ci(labels, np.full(60, 0.2), "sign_agreement", resamples=50).low is not None
    with pytest.raises(ValueError, match="level"):
        bootstrap_point_ci(labels, labels, "pearson", level=1.0)
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_point_ci(labels, labels, "pearson", resamples=0)


def test_bootstrap_work_is_capped() -> None:
    """The cap is the registry entry's: a copy of Kendall's entry with a smaller one, registered."""
    labels = np.arange(600.0)
    scores = labels + np.random.default_rng(0).normal(scale=100.0, size=600)
    kendall = metric_registry.get("kendall_tau")
    for name, cap in (("kendall_capped", 150 * 600), ("kendall_tiny_cap", 10)):
        metric_registry.register(dataclasses.replace(kendall, name=name, bootstrap_max_work=cap))
    try:
        assert bootstrap_point_ci(labels, scores, "kendall_capped", resamples=1000).resamples == 150
        assert bootstrap_point_ci(labels, scores, "kendall_capped", resamples=120).resamples == 120
        assert bootstrap_point_ci(labels, scores, "kendall_tiny_cap", resamples=1000).resamples == (
            metrics.BOOTSTRAP_MIN_CAPPED_RESAMPLES
        )
    finally:
        metric_registry.unregister("kendall_capped")
        metric_registry.unregister("kendall_tiny_cap")


def test_bootstrap_ranking_ci() -> None:
    rng = np.random.default_rng(5)
    per_state: list[float | None] = [float(v) for v in rng.uniform(-1, 1, size=400)] + [None] * 20
    ci = bootstrap_ranking_ci(per_state, seed=1)
    assert ci == bootstrap_ranking_ci(per_state, seed=1)
    assert ci != bootstrap_ranking_ci(per_state, seed=2)
    mean = ranking_summary(per_state).mean
    assert ci.low is not None and ci.high is not None
    assert ci.low < mean < ci.high
    # the standard error of the mean of 400 U(-1, 1) values is about 0.029
    assert 0.08 < ci.high - ci.low < 0.15
    assert bootstrap_ranking_ci([0.5, None]) == Interval(None, None, 0.95, 0, clusters=1)

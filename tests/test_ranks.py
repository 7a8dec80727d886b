"""The rank-range rule of the boards (:mod:`qval.ranks`): paired tests with Holm's correction among rows that
share their points, CI non-overlap for the others, approximate intervals for reported numbers
(:func:`qval.metrics.approximate_ci`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from qval import metrics, sampling
from qval.ranks import Rank, Row, holm, paired_outcomes, rank, significantly_better


def labels(rows: list[Row], **kw: bool) -> list[str]:
    return [r.label for r in rank(rows, **kw)]


def test_two_rows_whose_intervals_overlap_share_a_rank_range() -> None:
    rows = [Row(0.70, 0.60, 0.80), Row(0.65, 0.55, 0.75)]
    assert labels(rows) == ["1–2", "1–2"]


def test_disjoint_intervals_do_not_share_a_rank() -> None:
    rows = [Row(0.70, 0.65, 0.75), Row(0.50, 0.45, 0.55)]
    assert labels(rows) == ["1", "2"]
    # Touching ends overlap: the low end must be strictly above the other's high end.
    assert labels([Row(0.70, 0.55, 0.75), Row(0.50, 0.45, 0.55)]) == ["1–2", "1–2"]


def test_a_row_overlapping_two_separated_ones_bridges_them() -> None:
    top, middle, bottom = Row(0.9, 0.85, 0.95), Row(0.7, 0.4, 0.9), Row(0.4, 0.35, 0.45)
    assert labels([top, middle, bottom]) == ["1–2", "1–3", "2–3"]


def test_chatbot_arena_example_of_five_rows() -> None:
    rows = [Row(0.9, 0.88, 0.92), Row(0.8, 0.75, 0.86), Row(0.78, 0.70, 0.84), Row(0.6, 0.58, 0.62), Row(0.3, 0.1, 0.5)]
    assert labels(rows) == ["1", "2–3", "2–3", "4", "5"]


def test_ties_share_a_range() -> None:
    assert labels([Row(0.5, 0.4, 0.6), Row(0.5, 0.4, 0.6), Row(0.1, 0.0, 0.2)]) == ["1–2", "1–2", "3"]


def test_one_row_is_first() -> None:
    assert rank([Row(-0.3, -0.5, -0.1)]) == [Rank(1, 1)]
    assert rank([Row(0.2, -1.0, 1.0, approximate=True)]) == [Rank(1, 1, True)]
    assert rank([]) == []


def test_a_reported_number_is_ranked_by_its_approximate_interval_never_as_exact() -> None:
    """The issue's live case: FrozenLake's re-scored codegen-avg (0.976, [0.958, 0.983]) was ranked behind
    reported 0.9875 and 0.9834 taken as exact; with their Bonett-Wright intervals from 100 points they overlap."""
    rescored = Row(0.976, 0.958, 0.983)
    reported = [Row(v, *metrics.approximate_ci("spearman", v, 100), approximate=True)  # type: ignore[misc]
                for v in (0.9875, 0.9834)]
    got = rank([reported[0], reported[1], rescored])
    assert [r.label for r in got] == ["1–3", "1–3", "1–3"] and [r.approximate for r in got] == [True, True, False]
    # Far apart, an approximate interval still separates.
    far = Row(0.9, *metrics.approximate_ci("spearman", 0.9, 200), approximate=True)  # type: ignore[misc]
    assert labels([far, Row(0.2, 0.1, 0.3)]) == ["1", "2"]


def test_bonett_wright_interval_by_hand() -> None:
    r, n = 0.6, 103
    se = math.sqrt((1 + r * r / 2) / (n - 3))
    low, high = metrics.approximate_ci("spearman", r, n)  # type: ignore[misc]
    assert (low, high) == pytest.approx((math.tanh(math.atanh(r) - 1.959964 * se),
                                         math.tanh(math.atanh(r) + 1.959964 * se)), abs=1e-6)
    edge = metrics.approximate_ci("spearman", 0.999, 10)
    assert edge is not None and -1 < edge[0] < edge[1] <= 1
    assert metrics.approximate_ci("ranking_spearman", 0.3, 80) is None  # a mean of states needs their std
    low, high = metrics.approximate_ci("ranking_spearman", 0.3, 80, std=0.4)  # type: ignore[misc]
    se = 0.4 / math.sqrt(80) / (1 - 0.09)  # the delta method on Fisher's z
    assert (low, high) == pytest.approx((math.tanh(math.atanh(0.3) - 1.959964 * se),
                                         math.tanh(math.atanh(0.3) + 1.959964 * se)), abs=1e-6)
    assert metrics.approximate_ci("regret_at_1", 0.3, 80) is None


def test_holm_steps_down() -> None:
    assert holm([0.01, 0.04, 0.03, 0.2], 0.05).tolist() == [True, False, False, False]  # 0.03 > 0.05 / 3
    assert holm([0.001, 0.011, 0.02, 0.2], 0.05).tolist() == [True, True, True, False]
    assert holm([0.5, 0.6]).tolist() == [False, False]


def test_paired_tests_use_the_covariance_of_the_resampled_rows() -> None:
    rng = np.random.default_rng(0)
    shared = rng.normal(0, 0.1, size=2000)  # rows that move together on the same resamples
    resampled = np.column_stack([0.50 + shared + rng.normal(0, 0.003, 2000),
                                 0.47 + shared + rng.normal(0, 0.003, 2000), 0.0 + rng.normal(0, 0.02, 2000)])
    design = sampling.Design.of(np.arange(40) // 2)  # 20 trajectories
    got = paired_outcomes([0.50, 0.47, 0.0], resampled, design)
    # 0.50 vs 0.47: their intervals overlap (spread 0.1 each), but the paired spread is 0.004: significant
    assert got == {(0, 1): 1, (0, 2): 1, (1, 2): 1}
    se = math.sqrt(np.var(resampled[:, 0] - resampled[:, 1], ddof=1) * 20 / 19)
    assert 2 * stats.t.sf(0.03 / se, 19) < 0.05 / 3
    far = resampled.copy()
    far[:, 1] = 0.47 + rng.normal(0, 0.1, 2000)  # no longer moving with row 0: no longer told apart
    assert paired_outcomes([0.50, 0.47, 0.0], far, design)[(0, 1)] == 0
    rows = [Row(0.5, 0.3, 0.7), Row(0.47, 0.27, 0.67)]
    assert [r.label for r in rank(rows, paired={(0, 1): 1})] == ["1", "2"]
    assert [r.label for r in rank(rows, paired={(0, 1): 0})] == ["1–2", "1–2"]
    lower = paired_outcomes([0.50, 0.47, 0.0], resampled, design, higher_is_better=False)
    assert lower == {pair: -outcome for pair, outcome in got.items()}


def test_lower_is_better_mirrors_the_rule() -> None:
    rows = [Row(0.1, 0.05, 0.15), Row(0.3, 0.25, 0.35), Row(0.32, 0.2, 0.4)]
    assert labels(rows, higher_is_better=False) == ["1", "2–3", "2–3"]
    assert labels(rows) == ["3", "1–2", "1–2"]


@pytest.mark.parametrize("bad", [
    dict(value=float("nan"), ci_low=0.0, ci_high=0.2), dict(value=0.1, ci_low=0.2, ci_high=0.0),
    dict(value=0.1, ci_low=float("-inf"), ci_high=0.2),
])
def test_bad_rows_are_refused_with_the_reason(bad: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match="finite|interval"):
        Row(**bad)


@st.composite
def boards(draw: st.DrawFn) -> list[Row]:
    rows = []
    for _ in range(draw(st.integers(1, 12))):
        value = draw(st.integers(-20, 20)) / 20
        rows.append(Row(value, value - draw(st.integers(0, 8)) / 20, value + draw(st.integers(0, 8)) / 20,
                        approximate=draw(st.booleans())))
    return rows


@given(boards(), st.booleans())
def test_ranges_follow_the_intervals(rows: list[Row], higher: bool) -> None:
    """Every range lies in 1..n; rows whose intervals overlap have ranges that overlap; a row significantly
    better than another has both ends of its range strictly better."""
    ranks = rank(rows, higher_is_better=higher)
    n = len(rows)
    for a, ra in zip(rows, ranks):
        assert 1 <= ra.best <= ra.worst <= n
        assert ra.approximate == a.approximate
        for b, rb in zip(rows, ranks):
            if a.ci_low <= b.ci_high and b.ci_low <= a.ci_high:
                assert ra.best <= rb.worst and rb.best <= ra.worst
            if significantly_better(a, b, higher_is_better=higher):
                assert ra.best < rb.best and ra.worst < rb.worst


@given(st.lists(st.integers(-50, 50), min_size=1, max_size=15, unique=True))
def test_separated_intervals_give_the_plain_order(values: list[int]) -> None:
    rows = [Row(v / 50, v / 50 - 0.004, v / 50 + 0.004) for v in values]
    order = sorted(values, reverse=True)
    assert [r.label for r in rank(rows)] == [str(order.index(v) + 1) for v in values]

"""The rank-range rule of the boards (:mod:`qval.ranks`): Chatbot Arena's, on CI non-overlap."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qval.ranks import Rank, Row, rank, significantly_better


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


def test_ties_share_a_range_and_tied_point_ranks_share_a_rank() -> None:
    assert labels([Row(0.5, 0.4, 0.6), Row(0.5, 0.4, 0.6), Row(0.1, 0.0, 0.2)]) == ["1–2", "1–2", "3"]
    points = rank([Row(0.5), Row(0.7), Row(0.5), Row(0.2)])
    assert points == [Rank(2, 2, True), Rank(1, 1, True), Rank(2, 2, True), Rank(4, 4, True)]


def test_one_row_is_first() -> None:
    assert rank([Row(-0.3, -0.5, -0.1)]) == [Rank(1, 1)]
    assert rank([Row(0.2)]) == [Rank(1, 1, True)]
    assert rank([]) == []


def test_a_row_without_an_interval_gets_a_point_rank_and_counts_as_its_value() -> None:
    with_ci, without = Row(0.6, 0.5, 0.7), Row(0.65)
    assert rank([with_ci, without]) == [Rank(1, 2), Rank(1, 1, True)]
    # Its value is above the whole interval: significantly better, so the other ranks second.
    assert rank([with_ci, Row(0.75)]) == [Rank(2, 2), Rank(1, 1, True)]
    assert rank([with_ci, Row(0.45)]) == [Rank(1, 1), Rank(2, 2, True)]


def test_lower_is_better_mirrors_the_rule() -> None:
    rows = [Row(0.1, 0.05, 0.15), Row(0.3, 0.25, 0.35), Row(0.32, 0.2, 0.4)]
    assert labels(rows, higher_is_better=False) == ["1", "2–3", "2–3"]
    assert labels(rows) == ["3", "1–2", "1–2"]


@pytest.mark.parametrize("bad", [
    dict(value=float("nan")), dict(value=0.1, ci_low=0.2, ci_high=0.0), dict(value=0.1, ci_low=0.0),
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
        if draw(st.booleans()) or not rows:
            rows.append(Row(value, value - draw(st.integers(0, 8)) / 20, value + draw(st.integers(0, 8)) / 20))
        else:
            rows.append(Row(value))
    return rows


@given(boards(), st.booleans())
def test_ranges_follow_the_intervals(rows: list[Row], higher: bool) -> None:
    """Every range lies in 1..n; rows whose intervals overlap have ranges that overlap; a row significantly
    better than another has both ends of its range strictly better."""
    ranks = rank(rows, higher_is_better=higher)
    n = len(rows)
    for a, ra in zip(rows, ranks):
        assert 1 <= ra.best <= ra.worst <= n
        assert ra.point == (not a.has_ci)
        for b, rb in zip(rows, ranks):
            if not (a.has_ci and b.has_ci):
                continue
            if a.low <= b.high and b.low <= a.high:
                assert ra.best <= rb.worst and rb.best <= ra.worst
            if significantly_better(a, b, higher_is_better=higher):
                assert ra.best < rb.best and ra.worst < rb.worst


@given(st.lists(st.integers(-50, 50), min_size=1, max_size=15, unique=True))
def test_separated_intervals_give_the_plain_order(values: list[int]) -> None:
    rows = [Row(v / 50, v / 50 - 0.004, v / 50 + 0.004) for v in values]
    order = sorted(values, reverse=True)
    assert [r.label for r in rank(rows)] == [str(order.index(v) + 1) for v in values]

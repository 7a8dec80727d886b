"""Scoring submissions with several samples per id (:func:`qval.scoring.score_samples`),
checked against independent computations: pandas group means and scipy for the main value,
scipy per sample and numpy for the per-sample aggregate."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from qval.paper.qval_v1 import published
from qval.scoring import MetricRow, Truth, sample_table, score, score_samples

SCIPY = {"spearman": stats.spearmanr, "kendall_tau": stats.kendalltau, "pearson": stats.pearsonr}


def _truth(n: int, seed: int = 0, states: int = 0) -> Truth:
    """``n`` points ``p0..``; with ``states`` each point is the actor of a state with 3 candidates."""
    rng = np.random.default_rng(seed)
    ids = [f"p{i}" for i in range(n)]
    labels = np.round(rng.normal(size=n), 2)
    if not states:
        return Truth(point_ids=ids, point_labels=labels)
    group_ids = [[ids[i], f"p{i}-b", f"p{i}-c"] for i in range(n)]
    group_labels = [np.r_[labels[i], rng.normal(size=2)] for i in range(n)]
    return Truth(point_ids=ids, point_labels=labels, group_ids=group_ids, group_labels=group_labels)


def _long(truth: Truth, table: np.ndarray, numbers: list[int] | None = None, seed: int = 0) -> tuple:
    """``(ids, scores, samples)`` rows of an ids x samples table, in shuffled order."""
    ids = [i for group in truth.group_ids for i in group] or list(truth.point_ids)
    numbers = list(range(table.shape[1])) if numbers is None else numbers
    frame = pd.DataFrame(table, index=ids[: table.shape[0]], columns=numbers).stack(future_stack=True).reset_index()
    frame = frame.sample(frac=1.0, random_state=seed)
    return frame["level_0"].to_numpy(object), frame[0].to_numpy(np.float64), frame["level_1"].to_numpy(np.int64)


@st.composite
def sampled(draw: st.DrawFn) -> tuple[Truth, np.ndarray]:
    """A truth of 55-90 points and a points x samples table (1-6 samples, ties, some NaN)."""
    n = draw(st.integers(55, 90))
    k = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    truth = _truth(n, seed)
    rng = np.random.default_rng(seed + 1)
    table = truth.point_labels[:, None] + draw(st.floats(0.1, 3.0)) * rng.normal(size=(n, k))
    if draw(st.booleans()):
        table = np.round(table)
    table[rng.random(table.shape) < draw(st.floats(0.0, 0.2))] = np.nan
    return truth, table


def _rows(rows: list[MetricRow]) -> dict[str, MetricRow]:
    return {row.metric: row for row in rows}


@settings(deadline=None, max_examples=40)
@given(sampled())
def test_main_value_is_scipy_on_the_mean_of_the_samples(data: tuple[Truth, np.ndarray]) -> None:
    truth, table = data
    ids, scores, samples = _long(truth, table)
    rows = _rows(score(truth, ids, scores, samples=samples, bootstrap_resamples=0))
    means = pd.DataFrame({"id": ids, "score": scores}).groupby("id")["score"].mean()  # skips NaN
    joined = pd.DataFrame({"label": truth.point_labels, "mean": means.reindex(truth.point_ids).to_numpy()})
    usable = joined.dropna()
    for metric, fn in SCIPY.items():
        row = rows[metric]
        assert row.num_points == len(usable)
        assert row.num_dropped == len(joined) - len(usable)
        assert row.coverage == 1.0
        if len(usable) < 50 or usable["label"].nunique() < 2 or usable["mean"].nunique() < 2:
            assert row.value is None
            continue
        expected = fn(usable["label"], usable["mean"])
        assert row.value == pytest.approx(float(expected.statistic), abs=1e-9)
        assert row.p_value == pytest.approx(float(expected.pvalue), abs=1e-9, rel=1e-9)


@settings(deadline=None, max_examples=40)
@given(sampled())
def test_per_sample_aggregate_is_numpy_over_scipy_per_sample(data: tuple[Truth, np.ndarray]) -> None:
    truth, table = data
    numbers = [3 * s + 1 for s in range(table.shape[1])]
    ids, scores, samples = _long(truth, table, numbers)
    rows = _rows(score_samples(truth, ids, scores, samples, bootstrap_resamples=0))
    for metric, fn in SCIPY.items():
        expected: list[float | None] = []
        for s in range(table.shape[1]):
            ok = ~np.isnan(table[:, s])
            x, y = truth.point_labels[ok], table[ok, s]
            defined = ok.sum() >= 50 and np.ptp(x) > 0 and np.ptp(y) > 0
            expected.append(float(fn(x, y).statistic) if defined else None)
        got = rows[metric].details["samples"]
        assert got["num_samples"] == table.shape[1]
        assert got["sample_numbers"] == numbers
        assert got["aggregation"] == "mean_prediction"
        assert got["values"] == [None if e is None else pytest.approx(e, abs=1e-9) for e in expected]
        valid = np.array([e for e in expected if e is not None])
        agg = got["aggregate"]
        assert (agg["num_samples"], agg["num_nan"]) == (valid.size, len(expected) - valid.size)
        if not valid.size:
            assert [agg[k] for k in ("mean", "std", "min", "max", "median")] == [None] * 5
            continue
        assert agg["mean"] == pytest.approx(np.mean(valid), abs=1e-9)
        assert agg["min"] == pytest.approx(np.min(valid), abs=1e-9)
        assert agg["max"] == pytest.approx(np.max(valid), abs=1e-9)
        assert agg["median"] == pytest.approx(np.median(valid), abs=1e-9)
        assert agg["std"] == (pytest.approx(np.std(valid, ddof=1), abs=1e-9) if valid.size > 1 else None)


def test_a_constant_sample_is_left_out_of_the_aggregate() -> None:
    truth = _truth(80, seed=1)
    rng = np.random.default_rng(2)
    table = truth.point_labels[:, None] + rng.normal(size=(80, 4))
    table[:, 2] = 0.5  # a sampled function that always answers 0.5
    rows = _rows(score_samples(truth, *_long(truth, table), bootstrap_resamples=0))
    for metric, fn in SCIPY.items():
        details = rows[metric].details["samples"]
        assert details["values"][2] is None
        others = [float(fn(truth.point_labels, table[:, s]).statistic) for s in (0, 1, 3)]
        assert details["aggregate"]["num_samples"] == 3
        assert details["aggregate"]["num_nan"] == 1
        assert details["aggregate"]["mean"] == pytest.approx(np.mean(others), abs=1e-12)
        assert details["aggregate"]["std"] == pytest.approx(np.std(others, ddof=1), abs=1e-12)
        # The constant sample still takes part in the mean prediction.
        expected = fn(truth.point_labels, table.mean(axis=1)).statistic
        assert rows[metric].value == pytest.approx(float(expected), abs=1e-12)
    assert rows["sign_agreement"].details["samples"]["values"][2] is not None  # defined for a constant


def test_a_sample_with_too_few_scores_is_insufficient_and_left_out() -> None:
    truth = _truth(70, seed=3)
    table = truth.point_labels[:, None] + np.random.default_rng(4).normal(size=(70, 3))
    table[30:, 1] = np.nan  # sample 1 scores only 30 points
    rows = _rows(score_samples(truth, *_long(truth, table), bootstrap_resamples=0))
    assert rows["spearman"].details["samples"]["values"][1] is None
    assert rows["spearman"].details["samples"]["aggregate"]["num_samples"] == 2
    assert rows["spearman"].num_points == 70 and rows["spearman"].num_dropped == 0  # the mean uses the others


def test_ids_missing_from_a_sample_are_not_provided() -> None:
    truth = _truth(100, seed=5)
    table = truth.point_labels[:, None] + np.random.default_rng(6).normal(size=(100, 2))
    ids, scores, samples = _long(truth, table)
    keep = ~((samples == 1) & np.isin(ids, [f"p{i}" for i in range(10)]))  # sample 1 leaves out p0..p9
    rows = _rows(score(truth, ids[keep], scores[keep], samples=samples[keep], bootstrap_resamples=0))
    assert rows["spearman"].coverage == pytest.approx(0.9)
    assert (rows["spearman"].num_points, rows["spearman"].num_dropped) == (90, 0)
    expected = stats.spearmanr(truth.point_labels[10:], table[10:].mean(axis=1)).statistic
    assert rows["spearman"].value == pytest.approx(float(expected), abs=1e-12)
    per_sample = rows["spearman"].details["samples"]["values"]
    assert per_sample[1] == pytest.approx(float(stats.spearmanr(truth.point_labels[10:], table[10:, 1]).statistic))


def test_one_sample_scores_like_a_file_without_samples() -> None:
    truth = _truth(120, seed=7, states=120)
    rng = np.random.default_rng(8)
    all_ids = [i for group in truth.group_ids for i in group]
    flat = np.concatenate(truth.group_labels) + rng.normal(size=len(all_ids))
    single = score(truth, np.array(all_ids, dtype=object), flat, bootstrap_resamples=100, seed=3)
    multi = score_samples(truth, *_long(truth, flat[:, None], [7]), bootstrap_resamples=100, seed=3)
    assert [r.metric for r in multi] == [r.metric for r in single]
    assert "ranking_spearman" in {r.metric for r in multi}
    for a, b in zip(single, multi):
        extra = b.details.pop("samples", None)
        assert a == b
        if extra is not None:
            assert extra["values"] == [a.value]


def test_mean_prediction_rows_equal_scoring_the_means_directly() -> None:
    truth = _truth(90, seed=9, states=90)
    rng = np.random.default_rng(10)
    all_ids = [i for group in truth.group_ids for i in group]
    table = np.concatenate(truth.group_labels)[:, None] + rng.normal(size=(len(all_ids), 5))
    table[rng.random(table.shape) < 0.1] = np.nan
    multi = score_samples(truth, *_long(truth, table), bootstrap_resamples=200, seed=1)
    means = np.nanmean(np.where(np.isnan(table).all(axis=1)[:, None], 0.0, table), axis=1)
    means[np.isnan(table).all(axis=1)] = np.nan
    direct = score(truth, np.array(all_ids, dtype=object), means, bootstrap_resamples=200, seed=1)
    for a, b in zip(direct, multi):
        b.details.pop("samples", None)
        assert a.metric == b.metric
        counts = ("num_points", "num_dropped", "coverage", "insufficient")
        assert [getattr(a, c) for c in counts] == [getattr(b, c) for c in counts]
        assert a.value == pytest.approx(b.value, abs=1e-12)
        for key in ("ci95", "std"):
            if key in a.details:
                assert b.details[key] == pytest.approx(a.details[key], abs=1e-12)


def test_row_order_does_not_matter_and_details_are_json() -> None:
    truth = _truth(60, seed=11)
    table = truth.point_labels[:, None] + np.random.default_rng(12).normal(size=(60, 4))
    first = score_samples(truth, *_long(truth, table, seed=1), bootstrap_resamples=50)
    second = score_samples(truth, *_long(truth, table, seed=2), bootstrap_resamples=50)
    assert first == second
    json.dumps([row.details for row in first], allow_nan=False)


def test_a_repeated_id_and_sample_pair_is_an_error() -> None:
    truth = _truth(60)
    ids = np.array(["p0", "p1", "p0"], dtype=object)
    with pytest.raises(ValueError, match="more than once"):
        score(truth, ids, np.array([1.0, 2.0, 3.0]), samples=np.array([0, 0, 0]))
    with pytest.raises(ValueError, match="differ in length"):
        sample_table(ids, np.array([1.0, 2.0]), np.array([0, 0, 1]))


def test_sample_table() -> None:
    table = sample_table(
        np.array(["b", "a", "b", "a", "c"], dtype=object),
        np.array([1.0, 2.0, 3.0, math.nan, 5.0]),
        np.array([4, 4, 2, 2, 2]),
    )
    assert table.ids.tolist() == ["b", "a", "c"]
    assert table.sample_numbers.tolist() == [2, 4]
    np.testing.assert_array_equal(table.table, [[3.0, 1.0], [math.nan, 2.0], [5.0, math.nan]])
    assert table.in_every_sample().tolist() == [True, True, False]
    np.testing.assert_array_equal(table.mean_scores(), [2.0, 2.0, 5.0])


@pytest.mark.django_db
def test_the_worker_scores_a_file_with_a_sample_column(api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
    from tests.test_site import actor_points, finish, upload

    ids, labels = actor_points(frozenlake, "dev")  # per-sample values are disclosed on public splits only
    rng = np.random.default_rng(13)
    table = labels[:, None] + rng.normal(0, 0.3, size=(len(ids), 3))
    frame = pd.DataFrame({"id": np.repeat(ids, 3), "sample": np.tile([0, 1, 2], len(ids)), "score": table.ravel()})
    res = finish(upload(api, frame.to_csv(index=False).encode(), method_name="sampled", split="dev")["id"])
    expected = stats.spearmanr(labels, table.mean(axis=1))
    assert res["spearman"].value == pytest.approx(float(expected.statistic), abs=1e-9)
    assert res["spearman"].coverage == 1.0
    per_sample = [float(stats.spearmanr(labels, table[:, s]).statistic) for s in range(3)]
    stored = res["spearman"].details["samples"]
    assert stored["values"] == pytest.approx(per_sample, abs=1e-9)
    assert stored["aggregate"]["mean"] == pytest.approx(np.mean(per_sample), abs=1e-9)


def test_the_mean_prediction_is_the_references_to_the_last_bit() -> None:
    """Averaging in another order changes the last bit of a mean, which moves ties and so ρ: the mean of each
    re-scored ``codegen`` file's samples equals the authors' stored ``codegen-avg`` predictions exactly."""
    checked = 0
    for path in published.rescored_files():
        evaluations = published.rescored(path)
        for sampled in (ev for ev in evaluations if ev.samples is not None):
            stored = next(ev for ev in evaluations
                          if ev.method == "codegen-avg" and ev.target == sampled.target and ev.values is not None)
            n = len(sampled.samples[0])
            ids = np.array([f"p{i}" for s in sampled.samples for i in range(len(s))], dtype=object)
            scores = np.array([np.nan if x is None else x for s in sampled.samples for x in s], dtype=np.float64)
            numbers = np.concatenate([np.full(len(s), k) for k, s in enumerate(sampled.samples)])
            means = sample_table(ids, scores, numbers).mean_scores()
            expected = np.array([np.nan if x is None else x for x in stored.values], dtype=np.float64)
            assert len(expected) == n
            np.testing.assert_array_equal(means, expected, err_msg=f"{path.name} {sampled.target}")
            checked += 1
    assert checked == 7  # codegen Q and V of ALFWorld, FrozenLake and OpenApps; Q of TerminalBench

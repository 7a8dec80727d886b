"""Resampling what was drawn (qval/sampling.py): the design's rule, the draws, the resamplers' exactness on
cluster resamples, and the issue's Done-when checks on clustered synthetic data (coverage of the 95% interval
and compare's false-positive rate), calling the functions scoring and *Compare* call, with the data of
benchmarks/uncertainty.py."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from scipy import stats

from qval import compare, metric_registry, metrics, sampling, scoring
from qval.metrics import POINT_METRICS
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from uncertainty import EQUAL_BETA, clustered, truth  # noqa: E402

DATASETS = 300
"""Data sets per Done-when check (the issue's number)."""
RESAMPLES = 400
"""Resamples per interval in the Done-when checks: the interval needs the bootstrap's standard error, which
400 resamples give within 3.5% (its relative error is about 1 / sqrt(2 B)); the site draws 1000."""


def test_the_unit_follows_how_many_tasks_there_are() -> None:
    one = sampling.Design.of(np.repeat(np.arange(20), 5))
    assert (one.unit, one.clusters, one.strata, one.dof) == ("trajectory", 20, 1, 19)
    assert one.describe() == "20 trajectories"
    maps = sampling.Design.of(np.repeat(np.arange(19), 5), np.repeat(np.arange(19) % 4, 5))
    assert (maps.unit, maps.clusters, maps.strata, maps.dof) == ("trajectory", 19, 4, 15)
    assert maps.describe() == "19 trajectories, within each of 4 tasks"
    assert maps.variance_factor == pytest.approx(19 / 15)
    many = sampling.Design.of(np.repeat(np.arange(60), 2), np.repeat(np.arange(60) // 2, 2))
    assert (many.unit, many.clusters, many.strata) == ("task", 30, 1)
    assert many.describe() == "30 tasks (each with its trajectories)"
    unknown = sampling.Design.independent(7)
    assert (unknown.unit, unknown.clusters, unknown.dof) == ("point", 7, 6)
    assert sampling.describe(None).startswith("points (computed before")
    # the same trajectory number in two tasks is two trajectories
    assert sampling.Design.of([0, 0, 0, 0], ["a", "a", "b", "b"]).num_trajectories == 2
    with pytest.raises(ValueError, match="differ in length"):
        sampling.Design.of([0, 1], ["a"])


def test_a_draw_takes_whole_units_as_many_as_there_are_per_stratum() -> None:
    traj = np.repeat(np.arange(12), [1, 2, 3, 4] * 3)
    design = sampling.Design.of(traj, traj % 3)  # 3 tasks of 4 trajectories each: strata
    drawn = design.draw(np.random.default_rng(0), 500)
    for t in range(12):  # every point of a trajectory is drawn as often as the trajectory
        assert (drawn[:, traj == t] == drawn[:, traj == t][:, :1]).all()
    per_traj = np.stack([drawn[:, traj == t][:, 0] for t in range(12)], axis=1)
    for task in range(3):
        assert (per_traj[:, np.arange(12) % 3 == task].sum(axis=1) == 4).all()  # its own 4 trajectories
    tasks = sampling.Design.of(np.arange(40), np.arange(40) // 2)  # 20 tasks: tasks are drawn
    drawn = tasks.draw(np.random.default_rng(1), 300)
    assert (drawn[:, 0::2] == drawn[:, 1::2]).all() and (drawn.sum(axis=1) == 40).all()


@pytest.mark.parametrize("metric", POINT_METRICS)
def test_resample_statistics_are_scipy_on_each_cluster_resample(metric: str) -> None:
    rng = np.random.default_rng(5)
    traj = np.repeat(np.arange(15), rng.integers(1, 8, size=15))  # unequal trajectories: resamples vary in size
    x = np.round(rng.normal(size=traj.size), 1)  # ties
    y = np.round(x + rng.normal(size=traj.size), 1)
    design = sampling.Design.of(traj, traj % 3)
    draws = metrics.Resamples(None, x.size, drawn=design.draw(rng, 40))
    got = metric_registry.get(metric).resample(x, y)(draws)
    assert len(set(draws.totals.tolist())) > 1
    scipy_metric = {"spearman": stats.spearmanr, "kendall_tau": stats.kendalltau, "pearson": stats.pearsonr}
    for row in range(draws.rows):
        drawn = draws.indices(row)
        xs, ys = x[drawn], y[drawn]
        if metric == "sign_agreement":
            expected = float(np.mean(np.sign(xs) == np.sign(ys)))
        elif np.ptp(xs) == 0 or np.ptp(ys) == 0:
            expected = math.nan
        else:
            expected = float(scipy_metric[metric](xs, ys).statistic)
        if math.isnan(expected):
            assert math.isnan(got[row])
        else:
            assert got[row] == pytest.approx(expected, abs=1e-9)


def test_the_state_local_interval_resamples_states_by_trajectory() -> None:
    rng = np.random.default_rng(2)
    traj = np.repeat(np.arange(30), 4)
    values = np.clip(rng.normal(0.3, 0.3, 30)[traj] + rng.normal(0, 0.1, traj.size), -1, 1)
    per_state: list[float | None] = [float(v) for v in values]
    per_state[5] = None  # a skipped state leaves the design too
    design = sampling.Design.of(traj)
    by_trajectory = metrics.bootstrap_ranking_ci(per_state, design=design)
    by_state = metrics.bootstrap_ranking_ci(per_state)
    assert (by_trajectory.unit, by_trajectory.clusters) == ("trajectory", 30)
    assert (by_state.unit, by_state.clusters) == ("point", 119)
    # states of a trajectory move together: resampling them one by one makes the interval much too narrow
    assert by_trajectory.high - by_trajectory.low > 1.5 * (by_state.high - by_state.low)
    assert by_trajectory.low < np.nanmean(np.array(per_state, dtype=float)) < by_trajectory.high


def test_scoring_stores_the_interval_of_the_truths_design_and_says_what_it_resampled() -> None:
    rng = np.random.default_rng(4)
    data = clustered(rng, (EQUAL_BETA,), maps=4)
    n = data.labels.size
    ids = [f"p{i}" for i in range(n)]
    traj = data.design.trajectory
    truth = scoring.Truth(point_ids=ids, point_labels=data.labels, trajectories=traj.tolist(),
                          tasks=[f"map-{t}" for t in data.design.task])
    scores = data.scores[0].copy()
    scores[:5] = np.nan  # the first trajectory scores nothing: it leaves the design
    rows = {r.metric: r for r in scoring.score(truth, np.array(ids, dtype=object), scores, bootstrap_resamples=300)}
    spearman = rows["spearman"]
    expected = metrics.bootstrap_point_ci(data.labels[5:], scores[5:], "spearman", resamples=300,
                                          design=data.design.subset(np.arange(5, n)))
    assert spearman.details["ci95"] == [expected.low, expected.high]
    assert spearman.details["ci95_resampled"] == {"unit": "trajectory", "clusters": 19, "strata": 4}
    shown = scoring.disclose([spearman], hidden=True)[0]
    assert shown.details["ci95_resampled"] == spearman.details["ci95_resampled"]
    with pytest.raises(ValueError, match="one trajectory and task per point"):
        scoring.Truth(point_ids=ids, point_labels=data.labels, trajectories=[0])


def test_intervals_stay_in_the_metrics_range() -> None:
    x = np.arange(60.0)
    y = x + np.where(np.arange(60) % 7 == 0, 30.0, 0.0)  # rho near 1
    design = sampling.Design.of(np.arange(60) // 5)
    ci = metrics.bootstrap_point_ci(x, y, "spearman", design=design)
    assert -1.0 <= ci.low < ci.high <= 1.0  # type: ignore[operator]
    sign = metrics.bootstrap_point_ci(x - 10, y - 12, "sign_agreement", design=design)
    assert 0.0 <= sign.low < sign.high <= 1.0  # type: ignore[operator]


# -- the Done-when: coverage and false-positive rate on clustered data ---------------------------


@pytest.mark.parametrize("maps", [None, 4], ids=["20 trajectories", "4 maps"])
def test_the_95_interval_covers_the_true_rho_in_93_to_97_percent(maps: int | None) -> None:
    rho = truth(EQUAL_BETA, maps)[0]
    rng = np.random.default_rng(100 + (maps or 0))
    covered = 0
    for i in range(DATASETS):
        data = clustered(rng, (EQUAL_BETA,), maps=maps)
        truth_ = scoring.Truth(point_ids=[f"p{k}" for k in range(data.labels.size)], point_labels=data.labels,
                               trajectories=data.design.trajectory.tolist(), tasks=data.design.task.tolist())
        ci = metrics.bootstrap_point_ci(data.labels, data.scores[0], "spearman", resamples=RESAMPLES, seed=i,
                                        design=truth_.design)
        covered += ci.low <= rho <= ci.high  # type: ignore[operator]
    assert 0.93 <= covered / DATASETS <= 0.97, covered


@pytest.mark.parametrize("maps", [None, 4], ids=["20 trajectories", "4 maps"])
def test_compare_rejects_equal_methods_at_most_7_percent_of_the_time(maps: int | None) -> None:
    rng = np.random.default_rng(200 + (maps or 0))
    rejected = 0
    for i in range(DATASETS):
        data = clustered(rng, (EQUAL_BETA, EQUAL_BETA), maps=maps)
        result = compare.paired_bootstraps(data.labels, data.scores[0], data.scores[1], metric_names=("spearman",),
                                           resamples=RESAMPLES, seed=i, design=data.design)["spearman"]
        rejected += result.p_value < 0.05  # type: ignore[operator]
    assert rejected / DATASETS <= 0.07, rejected

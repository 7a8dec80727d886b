"""Benchmark: do the site's intervals and tests hold their level on data drawn like the hosted datasets?

The hosted datasets draw trajectories, not points: FrozenLake's test split holds 19 trajectories of 5 states
on 4 maps, ALFWorld dev's labels have an intraclass correlation of 0.63 by trajectory.  This script draws
many synthetic data sets of that shape and counts how often each interval the site shows covers the true
value and how often each test it runs rejects, with the site's own functions, before (main at 5bc2723:
points resampled, percentile intervals, rank ranges by interval overlap, the critical difference over
every evaluation) and after (issue 33: :mod:`qval.sampling`).

**Data** (:func:`clustered`): ``trajectories`` x ``states`` points (20 x 5); label = trajectory effect
(variance ``icc`` = 0.6) + state noise (0.4), plus, in the *4 maps* design, a fixed effect per map
(-1, -0.3, 0.3, 1: the maps are the benchmark's, trajectories are drawn on them, and the interval is about
these maps); a method's score = ``beta`` x label + its own error, half of whose variance is shared by the
trajectory (a method errs alike on the states of one trajectory).  The true value of a metric is its value on
10^6 points drawn the same way.  State-local rho: 4 candidates per state, Q = state label + candidate offset,
a score = Q + noise whose scale is drawn per trajectory (a method is sure or unsure along a trajectory).

**Rows printed** (each over ``--datasets`` data sets, 300 by default, 1000 resamples each):

* coverage of the 95% interval of the global Spearman rho, of Kendall's tau and of the state-local rho
  (:func:`qval.metrics.bootstrap_point_ci`, :func:`qval.metrics.bootstrap_ranking_ci`, what scoring stores);
* compare (:func:`qval.compare.paired_bootstrap`, what *Compare* runs): false-positive rate at alpha = 0.05
  for two equally good methods, and power for a true 0.69 against 0.55;
* board ranks (:func:`qval.ranks.rank`): how often two equally good methods get disjoint rank ranges when
  both are re-scored (paired) and when one is a reported number (before: a point rank; after: an approximate
  Bonett-Wright interval), and how often 0.69 and 0.55 get disjoint ranges;
* the critical difference over 4 environments x 6 backbones of 5 equally good methods whose ranks agree
  within an environment (Kendall's W about 0.7, as the published results): how often it finds a difference
  (the Friedman test at 0.05), with every evaluation as a block (before) and the environments (after).

Usage::

    python benchmarks/uncertainty.py                 # every row, 300 data sets (a few minutes on one core)
    python benchmarks/uncertainty.py --datasets 100  # quicker, coarser
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from qval import compare, metrics, ranks, sampling  # noqa: E402

MAP_EFFECTS = np.array([-1.0, -0.3, 0.3, 1.0])
"""The fixed label effect of each map in the *4 maps* design."""
EQUAL_BETA = 0.8
"""How strongly a method's score follows the label in the false-positive rows (true Spearman rho 0.61)."""
POWER_BETAS = (1.0, 0.6)
"""The two methods of the power rows (true Spearman rho 0.69 and 0.55 on 20 trajectories x 5 states)."""
CANDIDATES = 4


@dataclass(frozen=True)
class Data:
    """One synthetic data set: ``labels``, ``scores`` of each method (rows), the ``design`` of its points,
    and per-state ranking values of each method (``per_state``, rows)."""

    labels: np.ndarray
    scores: np.ndarray
    design: sampling.Design
    per_state: np.ndarray


def _state_ranking(q: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Spearman rho of each row of ``q`` with the same row of ``s`` (no ties: continuous draws)."""
    rq = np.argsort(np.argsort(q, axis=1), axis=1).astype(float)
    rs = np.argsort(np.argsort(s, axis=1), axis=1).astype(float)
    rq -= rq.mean(axis=1, keepdims=True)
    rs -= rs.mean(axis=1, keepdims=True)
    return (rq * rs).sum(axis=1) / np.sqrt((rq * rq).sum(axis=1) * (rs * rs).sum(axis=1))


def clustered(
    rng: np.random.Generator, betas: tuple[float, ...], *, trajectories: int = 20, states: int = 5,
    icc: float = 0.6, maps: int | None = None, error_icc: float = 0.5,
) -> Data:
    """A data set of ``trajectories`` x ``states`` points drawn as the module doc says, with one method per
    entry of ``betas`` (each with its own errors); ``maps``: 4 for the *4 maps* design (trajectory ``t`` on
    map ``t % 4``), ``None`` for one task."""
    traj = np.repeat(np.arange(trajectories), states)
    n = traj.size
    task = traj % maps if maps else np.zeros(n, dtype=int)
    labels = rng.normal(0.0, math.sqrt(icc), trajectories)[traj] + rng.normal(0.0, math.sqrt(1.0 - icc), n)
    if maps:
        labels = labels + MAP_EFFECTS[task]
    scores = np.empty((len(betas), n))
    per_state = np.empty((len(betas), n))
    offsets = rng.normal(size=(n, CANDIDATES))
    q = labels[:, None] + offsets
    for k, beta in enumerate(betas):
        shared = rng.normal(0.0, math.sqrt(error_icc), trajectories)[traj]
        scores[k] = beta * labels + shared + rng.normal(0.0, math.sqrt(1.0 - error_icc), n)
        unsure = np.exp(rng.normal(0.0, 0.7, trajectories))[traj] / beta  # per trajectory: how noisy its states are
        per_state[k] = _state_ranking(q, q + unsure[:, None] * rng.normal(size=(n, CANDIDATES)))
    return Data(labels, scores, sampling.Design.of(traj, task), per_state)


@lru_cache(maxsize=None)
def truth(beta: float, maps: int | None) -> tuple[float, float, float]:
    """The true Spearman rho, Kendall tau and state-local rho of a method of ``beta`` (10^6 points)."""
    rng = np.random.default_rng(20_261_128)
    data = clustered(rng, (beta,), trajectories=200_000, maps=maps)
    x, y = data.labels, data.scores[0]
    sub = slice(0, 100_000)  # Kendall's tau on 10^5 points (scipy's O(n log n)): its error is below 0.003
    return (float(stats.spearmanr(x, y).statistic), float(stats.kendalltau(x[sub], y[sub]).statistic),
            float(data.per_state[0].mean()))


# -- the rules before issue 33 (main at 5bc2723), kept here only to print the "before" rows --------------


def before_interval(x: np.ndarray, y: np.ndarray, metric: str, resamples: int, seed: int) -> tuple[float, float]:
    """The interval main showed: points resampled, the percentile interval."""
    drawn = metrics.bootstrap(metrics.point_metric(metric).resample(x, y), x.size, resamples, seed)
    low, high = np.quantile(drawn[~np.isnan(drawn)], [0.025, 0.975])
    return float(low), float(high)


def before_ranking_interval(values: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """main's state-local interval: states resampled one by one, the percentile interval."""
    drawn = metrics.bootstrap(lambda d: values[d.idx].mean(axis=1), values.size, resamples, seed)
    low, high = np.quantile(drawn, [0.025, 0.975])
    return float(low), float(high)


def before_compare_p(x: np.ndarray, a: np.ndarray, b: np.ndarray, resamples: int, seed: int) -> float:
    """main's compare p-value: points resampled, the percentile p-value ``2 min(P(d* <= 0), P(d* >= 0))``."""
    spec = metrics.point_metric("spearman")
    sa, sb = spec.resample(x, a), spec.resample(x, b)
    d = metrics.bootstrap(lambda draws: sa(draws) - sb(draws), x.size, resamples, seed)
    total = d.size + 1
    return float(min(1.0, 2.0 * min((1 + np.sum(d <= 0)) / total, (1 + np.sum(d >= 0)) / total)))


# -- the rows ------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One printed row: what is measured, its target, and the rate before and after."""

    what: str
    design: str
    target: str
    before: float | None
    after: float


def _rate(hits: int, total: int) -> float:
    return hits / total


def interval_rows(datasets: int, resamples: int, maps: int | None) -> list[Row]:
    """Coverage of the 95% intervals of the global rho, tau and state-local rho."""
    label = "4 maps x 5 trajectories x 5 states" if maps else "20 trajectories x 5 states"
    rho, tau, local = truth(EQUAL_BETA, maps)
    rng = np.random.default_rng(1 if maps else 0)
    hits = {key: [0, 0] for key in ("spearman", "kendall_tau", "ranking")}
    for i in range(datasets):
        data = clustered(rng, (EQUAL_BETA,), maps=maps)
        x, y = data.labels, data.scores[0]
        for metric, true in (("spearman", rho), ("kendall_tau", tau)):
            low, high = before_interval(x, y, metric, resamples, i)
            hits[metric][0] += low <= true <= high
            ci = metrics.bootstrap_point_ci(x, y, metric, resamples=resamples, seed=i, design=data.design)
            hits[metric][1] += ci.low <= true <= ci.high  # type: ignore[operator]
        low, high = before_ranking_interval(data.per_state[0], resamples, i)
        hits["ranking"][0] += low <= local <= high
        ci = metrics.bootstrap_ranking_ci(list(data.per_state[0]), resamples=resamples, seed=i, design=data.design)
        hits["ranking"][1] += ci.low <= local <= ci.high  # type: ignore[operator]
    names = {"spearman": "95% interval of global rho: coverage", "kendall_tau": "95% interval of tau: coverage",
             "ranking": "95% interval of state-local rho: coverage"}
    return [Row(names[k], label, "93-97%", _rate(b, datasets), _rate(a, datasets)) for k, (b, a) in hits.items()]


def compare_rows(datasets: int, resamples: int, maps: int | None) -> list[Row]:
    """Compare's false-positive rate (equal methods) and power (0.69 vs 0.55) at alpha = 0.05."""
    label = "4 maps x 5 trajectories x 5 states" if maps else "20 trajectories x 5 states"
    out = []
    for what, betas, target in (("compare, equal methods: p < .05", (EQUAL_BETA, EQUAL_BETA), "<= 7%"),
                                ("compare, 0.69 vs 0.55: p < .05 (power)", POWER_BETAS, "higher is better")):
        rng = np.random.default_rng(2 if maps else 3)
        before = after = 0
        for i in range(datasets):
            data = clustered(rng, betas, maps=maps)
            x, (a, b) = data.labels, data.scores
            before += before_compare_p(x, a, b, resamples, i) < 0.05
            pc = compare.paired_bootstrap(x, a, b, resamples=resamples, seed=i, design=data.design)
            after += pc.p_value is not None and pc.p_value < 0.05
        out.append(Row(what, label, target, _rate(before, datasets), _rate(after, datasets)))
    return out


def _old_rank_row(value: float, interval: tuple[float, float] | None) -> tuple[float, float]:
    """main's rank rule: an interval, or a reported value as an interval of width zero (a point rank)."""
    return interval if interval is not None else (value, value)


def _disjoint(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] > b[1] or b[0] > a[1]


def rank_rows(datasets: int, resamples: int) -> list[Row]:
    """How often two methods get disjoint rank ranges: equal methods both re-scored (paired), equal methods
    one of them reported (no interval), and 0.69 vs 0.55 both re-scored (power); 20 trajectories x 5 states."""
    label = "20 trajectories x 5 states"
    out = []
    for what, betas, reported, target in (
            ("ranks, equal methods, both re-scored: disjoint ranges", (EQUAL_BETA, EQUAL_BETA), False, "<= 5%"),
            ("ranks, equal methods, one reported: disjoint ranges", (EQUAL_BETA, EQUAL_BETA), True, "<= 5%"),
            ("ranks, 0.69 vs 0.55, both re-scored: disjoint (power)", POWER_BETAS, False, "higher is better")):
        rng = np.random.default_rng(4)
        before = after = 0
        for i in range(datasets):
            data = clustered(rng, betas, maps=None)
            x, (a, b) = data.labels, data.scores
            ra, rb = (float(stats.spearmanr(x, s).statistic) for s in (a, b))
            old_a = before_interval(x, a, "spearman", resamples, i)
            old_b = None if reported else before_interval(x, b, "spearman", resamples, i)
            before += _disjoint(_old_rank_row(ra, old_a), _old_rank_row(rb, old_b))
            ci_a = metrics.bootstrap_point_ci(x, a, "spearman", resamples=resamples, seed=i, design=data.design)
            if reported:
                low, high = metrics.approximate_ci("spearman", rb, x.size)  # type: ignore[misc]
                rows = [ranks.Row(ra, ci_a.low, ci_a.high), ranks.Row(rb, low, high, approximate=True)]  # type: ignore[arg-type]
                paired = None
            else:
                ci_b = metrics.bootstrap_point_ci(x, b, "spearman", resamples=resamples, seed=i, design=data.design)
                rows = [ranks.Row(ra, ci_a.low, ci_a.high), ranks.Row(rb, ci_b.low, ci_b.high)]  # type: ignore[arg-type]
                spec = metrics.point_metric("spearman")
                sa, sb = spec.resample(x, a), spec.resample(x, b)
                both = metrics.bootstrap(lambda d: np.stack([sa(d), sb(d)], axis=1), x.size, resamples, i, data.design)
                paired = ranks.paired_outcomes([ra, rb], both, data.design)
            got = ranks.rank(rows, paired=paired)
            after += got[0].worst < got[1].best or got[1].worst < got[0].best
        out.append(Row(what, label, target, _rate(before, datasets), _rate(after, datasets)))
    return out


def cd_rows(datasets: int) -> list[Row]:
    """How often the critical difference's Friedman test finds a difference among 5 equally good methods over
    4 environments x 6 backbones, when a method's strength varies by environment (shared by its backbones:
    Kendall's W about 0.7 within an environment) -- every evaluation as a block (before) or the environments
    (after, board.aggregates' default)."""
    rng = np.random.default_rng(5)
    before = after = 0
    for _ in range(datasets):
        by_environment = rng.normal(0.0, 0.1, size=(4, 1, 5))  # method x environment: shared by the backbones
        values = 0.4 + by_environment + rng.normal(0.0, 0.05, size=(4, 6, 5))
        before += stats.friedmanchisquare(*values.reshape(24, 5).T).pvalue < 0.05
        after += stats.friedmanchisquare(*values.mean(axis=1).T).pvalue < 0.05
    return [Row("critical difference, equal methods: Friedman p < .05", "4 environments x 6 backbones", "<= 5%",
                _rate(before, datasets), _rate(after, datasets))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=int, default=300, help="synthetic data sets per row (default 300)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows: list[Row] = []
    steps: list[Callable[[], list[Row]]] = [
        lambda: interval_rows(args.datasets, args.resamples, None),
        lambda: interval_rows(args.datasets, args.resamples, 4),
        lambda: compare_rows(args.datasets, args.resamples, None),
        lambda: compare_rows(args.datasets, args.resamples, 4),
        lambda: rank_rows(args.datasets, args.resamples),
        lambda: cd_rows(args.datasets),
    ]
    for step in steps:
        rows.extend(step())
    print(f"{args.datasets} data sets per row, {args.resamples} resamples, {time.perf_counter() - started:.0f} s\n")
    print("| measured | data | target | before | after |")
    print("|---|---|---|---|---|")
    for r in rows:
        before = "—" if r.before is None else f"{100 * r.before:.1f}%"
        print(f"| {r.what} | {r.design} | {r.target} | {before} | {100 * r.after:.1f}% |")


if __name__ == "__main__":
    main()

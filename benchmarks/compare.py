"""Benchmark: the vectorised paired bootstrap against per-resample scipy loops.

:func:`qval.compare.paired_bootstrap` evaluates both methods' metric on the same resampled
points, vectorised over resamples (Kendall's tau-b through
:class:`qval.metrics._KendallResampler`).  Measured in the same run:

* Spearman ρ against the obvious implementation (``scipy.stats.spearmanr`` twice per
  resample, on fewer resamples);
* Kendall τ-b against the implementation it replaced (``scipy.stats.kendalltau`` twice per
  resample, the same number of resamples);
* a whole cold A vs B comparison (every pointwise metric, as the compare page computes it),
  its Kendall part done both ways.

CPU (process) time and wall time are printed for each, and their ratios (old / new).

Usage::

    python benchmarks/compare.py                  # 10^4 points, 1000 resamples (the site's default)
    python benchmarks/compare.py --points 30000 --resamples 300
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import stats

from qval import metrics
from qval.compare import paired_bootstrap


def _data(n: int, seed: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    return x, x + rng.normal(size=n), x + rng.normal(size=n)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``, and the CPU and wall seconds it took."""
    cpu, wall = time.process_time(), time.perf_counter()
    value = fn()
    return value, time.process_time() - cpu, time.perf_counter() - wall


def _scipy_loop(fn: Callable[..., Any], x: np.ndarray, a: np.ndarray, b: np.ndarray, resamples: int) -> np.ndarray:
    """``fn(x, a) - fn(x, b)`` on ``resamples`` paired resamples, one at a time."""
    rng = np.random.default_rng(0)
    out = np.empty(resamples)
    for r in range(resamples):
        idx = rng.integers(0, x.size, x.size)
        out[r] = fn(x[idx], a[idx]).statistic - fn(x[idx], b[idx]).statistic
    return out


def _line(name: str, cpu: float, wall: float, per: int | None = None) -> None:
    each = f"  {cpu / per * 1e3:8.3f} ms CPU/resample" if per else ""
    print(f"{name:34s} CPU {cpu:7.3f} s  wall {wall:7.3f} s{each}")


def main() -> None:
    """Run the benchmark and print the times and their ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--baseline-resamples", type=int, default=200)
    args = parser.parse_args()
    x, a, b = _data(args.points)
    print(f"points={args.points} resamples={args.resamples}")

    result, cpu, wall = _timed(lambda: paired_bootstrap(x, a, b, resamples=args.resamples))
    _, base_cpu, base_wall = _timed(lambda: _scipy_loop(stats.spearmanr, x, a, b, args.baseline_resamples))
    _line("spearman paired_bootstrap", cpu, wall, result.resamples)
    _line(f"spearman scipy loop ({args.baseline_resamples})", base_cpu, base_wall, args.baseline_resamples)
    print(f"  ratio per resample (loop / ours): CPU {base_cpu / args.baseline_resamples / (cpu / result.resamples):.1f}x")

    tau, tau_cpu, tau_wall = _timed(lambda: paired_bootstrap(x, a, b, metric="kendall_tau", resamples=args.resamples))
    saved = metrics.KENDALL_VECTOR_MAX_POINTS
    metrics.KENDALL_VECTOR_MAX_POINTS = 0  # the old path: scipy.stats.kendalltau once per resample
    try:
        old, old_cpu, old_wall = _timed(
            lambda: paired_bootstrap(x, a, b, metric="kendall_tau", resamples=args.resamples))
    finally:
        metrics.KENDALL_VECTOR_MAX_POINTS = saved
    assert (tau.low, tau.high, tau.p_value) == (old.low, old.high, old.p_value), "the two Kendall paths disagree"
    _line("kendall_tau vectorised", tau_cpu, tau_wall, tau.resamples)
    _line("kendall_tau scipy per resample", old_cpu, old_wall, old.resamples)
    print(f"  ratio (old / new): CPU {old_cpu / tau_cpu:.1f}x, wall {old_wall / tau_wall:.1f}x")

    def everything() -> list[Any]:
        return [paired_bootstrap(x, a, b, metric=m, resamples=args.resamples) for m in metrics.POINT_METRICS]

    _, all_cpu, all_wall = _timed(everything)
    compare_old_cpu, compare_old_wall = all_cpu - tau_cpu + old_cpu, all_wall - tau_wall + old_wall
    _line("cold compare, every metric", all_cpu, all_wall)
    _line("  the same with the old kendall_tau", compare_old_cpu, compare_old_wall)
    print(f"  ratio (old / new): CPU {compare_old_cpu / all_cpu:.1f}x, wall {compare_old_wall / all_wall:.1f}x")


if __name__ == "__main__":
    main()

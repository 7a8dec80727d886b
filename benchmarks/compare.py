"""Benchmark: the paired bootstrap behind *Compare* and the bootstrap intervals of scoring.

Measured in the same run, CPU (process) time next to wall time for each:

* **Cold compare** (the compare page's computation for a pair not cached): every pointwise
  metric of the registry, 1000 resamples, on ``--points`` common points, by
  :func:`qval.compare.paired_bootstraps` (one pass of resamples shared by every metric: the
  draws, how often each point is drawn, the labels' ranks), best of ``--repeat``.  Target:
  under 1 s at 10^4 points.
* **Baseline**: the obvious implementation, each metric's scipy function on A and on B once per
  resample (``--baseline-resamples`` resamples, scaled per resample), and the ratio
  baseline / ours per resample.
* **Per metric**: the same compare one :func:`qval.compare.paired_bootstrap` call per metric
  (nothing shared between metrics), and its ratio to the shared pass.
* **Large sample** (``--large-points``, 10^6): the point estimate of every metric
  (:func:`qval.metrics.point_metrics`) against their bootstrap intervals
  (:func:`qval.metrics.bootstrap_point_ci`, 1000 resamples; above
  :data:`qval.metrics.BOOTSTRAP_SUBSAMPLE_POINTS` points a subsample is resampled).  Target:
  the intervals within 10x the point estimate.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/compare.py     # 10^4 points, 10^6 for the intervals
    python benchmarks/compare.py --points 30000 --large-points 0
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from qval import metrics  # noqa: E402
from qval.compare import paired_bootstrap, paired_bootstraps  # noqa: E402

SCIPY: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "spearman": lambda x, y: float(stats.spearmanr(x, y).statistic),
    "kendall_tau": lambda x, y: float(stats.kendalltau(x, y).statistic),
    "pearson": lambda x, y: float(stats.pearsonr(x, y).statistic),
    "sign_agreement": lambda x, y: float(np.mean(np.sign(x) == np.sign(y))),
}
"""The baseline's per-resample statistic of each built-in point metric."""


def _data(n: int, seed: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    return x, x + rng.normal(size=n), x + rng.normal(size=n)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``, and the CPU and wall seconds it took."""
    cpu, wall = time.process_time(), time.perf_counter()
    value = fn()
    return value, time.process_time() - cpu, time.perf_counter() - wall


def _best(repeat: int, fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()`` run ``repeat`` times: its value and the least CPU and wall seconds."""
    runs = [_timed(fn) for _ in range(repeat)]
    return runs[0][0], min(r[1] for r in runs), min(r[2] for r in runs)


def _scipy_loop(x: np.ndarray, a: np.ndarray, b: np.ndarray, resamples: int) -> None:
    """Every metric's ``scipy(x, a) - scipy(x, b)`` on ``resamples`` paired resamples, one at a time."""
    rng = np.random.default_rng(0)
    for _ in range(resamples):
        idx = rng.integers(0, x.size, x.size)
        for fn in SCIPY.values():
            fn(x[idx], a[idx]) - fn(x[idx], b[idx])


def _line(name: str, cpu: float, wall: float) -> None:
    print(f"{name:44s} CPU {cpu:8.3f} s  wall {wall:8.3f} s")


def _verdict(what: str, ok: bool) -> None:
    print(f"{what}: {'met' if ok else 'NOT met'}")


def compare_section(args: argparse.Namespace) -> bool:
    """The cold compare, its baseline and the per-metric calls; whether the 1 s target is met."""
    x, a, b = _data(args.points)
    print(f"cold compare: points={args.points} resamples={args.resamples} metrics={', '.join(metrics.POINT_METRICS)}")
    shared, cpu, wall = _best(args.repeat, lambda: paired_bootstraps(x, a, b, resamples=args.resamples))
    drawn = max(r.resamples for r in shared.values())
    _, base_cpu, base_wall = _timed(lambda: _scipy_loop(x, a, b, args.baseline_resamples))
    _, one_cpu, one_wall = _best(args.repeat, lambda: [
        paired_bootstrap(x, a, b, metric=m, resamples=args.resamples) for m in metrics.POINT_METRICS])
    _line(f"paired_bootstraps, every metric (best of {args.repeat})", cpu, wall)
    _line("one paired_bootstrap per metric", one_cpu, one_wall)
    _line(f"scipy loop ({args.baseline_resamples} resamples)", base_cpu, base_wall)
    per_base_cpu, per_base_wall = base_cpu / args.baseline_resamples, base_wall / args.baseline_resamples
    print(f"  per resample: ours {cpu / drawn * 1e3:.3f} ms CPU, scipy loop {per_base_cpu * 1e3:.3f} ms CPU; "
          f"ratio (loop / ours) CPU {per_base_cpu / (cpu / drawn):.1f}x, wall {per_base_wall / (wall / drawn):.1f}x")
    print(f"  shared pass vs one call per metric: CPU {one_cpu / cpu:.2f}x, wall {one_wall / wall:.2f}x")
    return cpu < 1.0


def large_section(args: argparse.Namespace) -> bool:
    """Point estimates against bootstrap intervals at ``--large-points``; whether within 10x."""
    rng = np.random.default_rng(1)
    x = np.round(rng.normal(size=args.large_points), 2)  # labels with ties
    y = 0.5 * x + rng.normal(size=args.large_points)
    print(f"\nintervals: points={args.large_points} resamples={args.resamples} "
          f"(subsample above {metrics.BOOTSTRAP_SUBSAMPLE_POINTS} points)")
    _, point_cpu, point_wall = _timed(lambda: metrics.point_metrics(x, y))
    _line("point estimates, every metric", point_cpu, point_wall)
    boot_cpu = boot_wall = 0.0
    for metric in metrics.POINT_METRICS:
        ci, cpu, wall = _timed(lambda: metrics.bootstrap_point_ci(x, y, metric, resamples=args.resamples))
        _line(f"  bootstrap_point_ci {metric} ({ci.resamples} resamples)", cpu, wall)
        boot_cpu, boot_wall = boot_cpu + cpu, boot_wall + wall
    _line("bootstrap intervals, every metric", boot_cpu, boot_wall)
    print(f"  ratio (intervals / point estimates): CPU {boot_cpu / point_cpu:.1f}x, wall {boot_wall / point_wall:.1f}x")
    return boot_cpu <= 10 * point_cpu


def main() -> None:
    """Run the benchmark and print the times, their ratios and the targets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--baseline-resamples", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--large-points", type=int, default=1_000_000, help="0 skips the large-sample part")
    args = parser.parse_args()
    compare_ok = compare_section(args)
    large_ok = large_section(args) if args.large_points else None
    print()
    _verdict(f"cold compare at {args.points} points under 1 s CPU", compare_ok)
    if large_ok is not None:
        _verdict(f"intervals at {args.large_points} points within 10x the point estimates (CPU)", large_ok)


if __name__ == "__main__":
    main()

"""Benchmark: the vectorised paired bootstrap against a per-resample scipy loop.

:func:`qval.compare.paired_bootstrap` evaluates both methods' Spearman ρ on the same
resampled indices, vectorised over resamples.  The baseline, measured in the same run, is
the obvious implementation: for each of a smaller number of resamples, draw the indices and
call ``scipy.stats.spearmanr`` twice.  The script prints seconds per resample of each and
their ratio (baseline / ours, higher is better).

Usage::

    python benchmarks/compare.py                  # 10^4 points, 2000 resamples
    python benchmarks/compare.py --points 100000 --resamples 500
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from qval.compare import paired_bootstrap


def _data(n: int, seed: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    return x, x + rng.normal(size=n), x + rng.normal(size=n)


def _scipy_loop(x: np.ndarray, a: np.ndarray, b: np.ndarray, resamples: int) -> float:
    """Seconds for ``resamples`` paired resamples done one at a time with scipy."""
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(resamples):
        idx = rng.integers(0, x.size, x.size)
        stats.spearmanr(x[idx], a[idx])
        stats.spearmanr(x[idx], b[idx])
    return time.perf_counter() - start


def main() -> None:
    """Run the benchmark and print the per-resample times and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--baseline-resamples", type=int, default=200)
    args = parser.parse_args()
    x, a, b = _data(args.points)
    start = time.perf_counter()
    result = paired_bootstrap(x, a, b, resamples=args.resamples)
    ours = time.perf_counter() - start
    base = _scipy_loop(x, a, b, args.baseline_resamples)
    per_ours = ours / max(result.resamples, 1)
    per_base = base / args.baseline_resamples
    print(f"points={args.points} resamples drawn={result.resamples}")
    print(f"paired_bootstrap   {ours:8.3f} s  {per_ours * 1e3:8.3f} ms/resample")
    print(f"scipy loop         {base:8.3f} s  {per_base * 1e3:8.3f} ms/resample ({args.baseline_resamples} resamples)")
    print(f"ratio (scipy loop / ours per resample): {per_base / per_ours:.1f}x")


if __name__ == "__main__":
    main()

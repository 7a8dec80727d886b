"""Benchmark: end-to-end scoring of a prediction file against bare scipy.

For each size, synthetic labels (Q-like: a discrete set of discounted returns plus
continuous values, so with many ties) and correlated predictions (some rounded, some
missing) are written as CSV, JSON Lines and Parquet to a temporary directory.  One run
then prints, per size and format:

* ``scipy``: the bare baseline, ``scipy.stats.spearmanr`` + ``kendalltau`` on preloaded,
  NaN-free numpy arrays (best of ``--repeat``);
* ``end-to-end``: :func:`qval.predictions.parse` + :func:`qval.predictions.validate` +
  :func:`qval.scoring.score` with ``bootstrap_resamples=0`` (every point metric with its
  p-value, no bootstrap), best of ``--repeat``, split into its three stages;
* ``ratio``: end-to-end / scipy;
* ``bootstrap``: the four :func:`qval.metrics.bootstrap_point_ci` calls ``score`` makes
  with its default 1000 resamples (one run, format-independent);
* ``index``: building the labels' id index (:attr:`qval.scoring.Truth.index`), done once
  when the labels are loaded and so, like loading the labels, outside the timed runs;

and, for the largest size, the peak memory (``VmHWM``, see :func:`max_rss_mib`) of a fresh child process that
only loads the labels and scores one file, next to that process's RSS right after
importing numpy/pandas/pyarrow/scipy/qval.

Targets (checked at 10^6 points): end-to-end within 3x of scipy, peak memory under 1 GiB.

Usage::

    python benchmarks/scoring.py                      # 10^3 .. 10^6, all formats
    python benchmarks/scoring.py --quick              # small sizes, one repeat
    python benchmarks/scoring.py --sizes 1000000 --formats parquet --repeat 5
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
from scipy import stats

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from qval import metrics  # noqa: E402
from qval import predictions as qpred  # noqa: E402
from qval.scoring import Truth, score  # noqa: E402

RATIO_TARGET = 3.0
MEMORY_TARGET_MIB = 1024.0
TARGET_SIZE = 1_000_000
EXTENSIONS = {"csv": "csv", "jsonl": "jsonl", "parquet": "parquet"}


# -- synthetic data ----------------------------------------------------------------------
def make_data(n: int, seed: int = 0) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Point ids (dataset order), labels, predictions, and the file's row order."""
    rng = np.random.default_rng(seed)
    ids = [f"s{i // 4:07d}/a{i % 4}" for i in range(n)]
    discrete = rng.random(n) < 0.5
    returns = np.where(rng.random(n) < 0.2, 0.0, 0.99 ** rng.integers(0, 30, n))
    labels = np.where(discrete, returns, rng.normal(0.4, 0.3, n)).round(6)
    preds = labels + rng.normal(0.0, 0.3, n)
    rounded = rng.random(n) < 0.2
    preds[rounded] = preds[rounded].round(1)  # ties on the prediction side too
    preds[rng.random(n) < 0.005] = np.nan  # a few missing scores
    return ids, labels, preds, rng.permutation(n)


def write_files(
    directory: Path, ids: list[str], preds: np.ndarray, order: np.ndarray, formats: list[str]
) -> dict[str, Path]:
    """The predictions, shuffled, in each format (missing scores as empty/null)."""
    id_array = pa.array(ids, pa.string()).take(pa.array(order))
    shuffled = preds[order]
    table = pa.table({"id": id_array, "score": pa.array(shuffled, mask=np.isnan(shuffled))})
    paths: dict[str, Path] = {}
    for fmt in formats:
        path = directory / f"predictions_{len(ids)}.{EXTENSIONS[fmt]}"
        if fmt == "csv":
            pa_csv.write_csv(table, path)
        elif fmt == "parquet":
            pq.write_table(table, path)
        else:
            frame = table.to_pandas()
            frame.to_json(path, orient="records", lines=True, double_precision=15)
        paths[fmt] = path
    return paths


def write_truth(directory: Path, ids: list[str], labels: np.ndarray) -> Path:
    path = directory / f"truth_{len(ids)}.parquet"
    pq.write_table(pa.table({"id": pa.array(ids, pa.string()), "label": labels}), path)
    return path


def load_truth(ids: list[str], labels: np.ndarray) -> tuple[Truth, float]:
    """Labels as a scorer loads them, with the id index built; and the seconds the index took."""
    truth = Truth(point_ids=ids, point_labels=labels)
    t0 = time.perf_counter()
    truth.index  # noqa: B018 - built once per set of labels (per job in the worker)
    return truth, time.perf_counter() - t0


def read_truth(path: Path) -> Truth:
    table = pq.read_table(path)
    return load_truth(table["id"].to_pylist(), table["label"].to_numpy())[0]


# -- measured paths ----------------------------------------------------------------------
def end_to_end(truth: Truth, path: Path, stages: dict[str, float] | None = None) -> list[Any]:
    """What the CLI does for a pointwise file: parse, validate, score (no bootstrap).

    ``truth`` comes with its id index built (see :func:`load_truth`), as the labels come to
    the baseline: loaded beforehand.
    """
    t0 = time.perf_counter()
    preds = qpred.parse(path, path.name)
    t1 = time.perf_counter()
    qpred.validate(preds, truth.index)
    t2 = time.perf_counter()
    rows = score(truth, preds.ids, preds.scores, codes=preds.codes(truth.index), bootstrap_resamples=0)
    t3 = time.perf_counter()
    if stages is not None:
        stages.update(parse=t1 - t0, validate=t2 - t1, score=t3 - t2)
    return rows


def bare_scipy(x: np.ndarray, y: np.ndarray) -> None:
    stats.spearmanr(x, y)
    stats.kendalltau(x, y)


def bootstrap_all(x: np.ndarray, y: np.ndarray) -> None:
    """The bootstrap work score() adds with its default resamples."""
    for metric in metrics.POINT_METRICS:
        metrics.bootstrap_point_ci(x, y, metric, resamples=1000, seed=0)


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def max_rss_mib() -> float:
    """Peak resident memory of this process so far, in MiB.

    On Linux this is ``VmHWM`` (the high-water mark of this address space):
    ``ru_maxrss`` of a process started by ``subprocess`` (vfork + exec) starts at the
    *parent's* peak, which would hide the child's own figure.  Elsewhere: ``ru_maxrss``.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    scale = 1024.0 if sys.platform == "darwin" else 1.0  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0 / scale


def child_main(truth_path: str, file_path: str) -> None:
    """Run in a fresh process: load the labels, score one file, report peak RSS."""
    after_import = max_rss_mib()
    truth = read_truth(Path(truth_path))
    after_truth = max_rss_mib()
    end_to_end(truth, Path(file_path))
    print(json.dumps({"import": after_import, "truth": after_truth, "peak": max_rss_mib()}))


def measure_memory(truth_path: Path, file_path: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(truth_path), str(file_path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- report ------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000", help="comma-separated point counts")
    parser.add_argument("--formats", default="csv,jsonl,parquet", help="comma-separated: csv, jsonl, parquet")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (best is kept)")
    parser.add_argument("--quick", action="store_true", help="sizes 1000,10000 and one repeat (a smoke run)")
    parser.add_argument("--child", nargs=2, metavar=("TRUTH", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(*args.child)
        return 0
    if args.quick:
        args.sizes, args.repeat = "1000,10000", 1
    sizes = [int(s) for s in args.sizes.split(",") if s]
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in EXTENSIONS]
    if unknown or not sizes or args.repeat < 1:
        parser.error(f"bad arguments (unknown formats: {unknown})")

    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, pandas {pd.__version__}, "
          f"pyarrow {pa.__version__}, scipy {__import__('scipy').__version__}; best of {args.repeat}")
    header = f"{'points':>9} {'format':<8} {'scipy s':>8} {'e2e s':>8} {'ratio':>6} " \
             f"{'parse':>7} {'valid.':>7} {'score':>7} {'bootstrap s':>11} {'index s':>8}"
    print(header)
    print("-" * len(header))
    ratios: dict[tuple[int, str], float] = {}
    memory: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="qval-bench-") as tmp:
        directory = Path(tmp)
        for n in sizes:
            ids, labels, preds, order = make_data(n)
            paths = write_files(directory, ids, preds, order, formats)
            truth, index_time = load_truth(ids, labels)
            keep = ~np.isnan(preds)
            x, y = np.ascontiguousarray(labels[keep]), np.ascontiguousarray(preds[keep])
            baseline = best_of(args.repeat, functools.partial(bare_scipy, x, y))
            boot = best_of(1, functools.partial(bootstrap_all, x, y))
            for i, fmt in enumerate(formats):
                stages: dict[str, float] = {}
                best, best_stages = float("inf"), {}
                for _ in range(args.repeat):
                    gc.collect()
                    t0 = time.perf_counter()
                    end_to_end(truth, paths[fmt], stages)
                    elapsed = time.perf_counter() - t0
                    if elapsed < best:
                        best, best_stages = elapsed, dict(stages)
                ratios[(n, fmt)] = best / baseline
                boot_text = f"{boot:11.2f} {index_time:8.3f}" if i == 0 else ""
                print(f"{n:>9,} {fmt:<8} {baseline:8.3f} {best:8.3f} {best / baseline:6.2f} "
                      f"{best_stages['parse']:7.3f} {best_stages['validate']:7.3f} "
                      f"{best_stages['score']:7.3f} {boot_text}".rstrip(), flush=True)
            if n == max(sizes):
                truth_path = write_truth(directory, ids, labels)
                for fmt in formats:
                    memory[fmt] = measure_memory(truth_path, paths[fmt])
            del ids, labels, preds, order, truth, x, y
            gc.collect()

    largest = max(sizes)
    print()
    print(f"peak memory of a fresh process scoring one {largest:,}-row file (VmHWM, MiB):")
    print(f"  {'format':<8} {'after imports':>13} {'+ labels':>9} {'peak':>8}")
    for fmt, m in memory.items():
        print(f"  {fmt:<8} {m['import']:13.0f} {m['truth']:9.0f} {m['peak']:8.0f}")

    print()
    if TARGET_SIZE in sizes:
        for fmt in formats:
            r = ratios[(TARGET_SIZE, fmt)]
            ok = r <= RATIO_TARGET
            print(f"target: {fmt:<8} end-to-end / scipy at 10^6 = {r:.2f} <= {RATIO_TARGET:g}: {verdict(ok)}")
        for fmt, m in memory.items():
            ok = m["peak"] < MEMORY_TARGET_MIB
            limit = f"{MEMORY_TARGET_MIB:.0f} MiB"
            print(f"target: {fmt:<8} peak memory at 10^6 = {m['peak']:.0f} MiB < {limit}: {verdict(ok)}")
    else:
        print(f"targets are checked at {TARGET_SIZE:,} points; not in --sizes, not checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())

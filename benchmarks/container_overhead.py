"""Benchmark: what running a method as a sandboxed container costs over running it as a process.

The starter-kit method (``examples/method-container/method.py``) scores one FrozenLake split
twice per repeat, and the script prints, from one run:

* ``process``: the baseline, start to scored: write the input folder
  (:func:`qval.containers.write_input`), run ``method.py`` as a plain ``python3`` process on it,
  then parse, validate and score its ``predictions.jsonl`` as an upload is scored;
* ``container``: start to scored exactly as the worker does it: a fresh job, load the saved
  image archive, write the input folder, run the image under the default sandbox limits, score
  (:func:`qval.containers.evaluate`), and remove the job -- split into ``load``, ``run``,
  ``score`` and ``clean-up``.  ``first`` is the first job of an archive (an empty image cache:
  the archive is sanitised and loaded into its read-only store, :class:`qval.containers.ImageCache`);
  ``rerun`` is every later job of the same archive (the cached store is reused, found by the
  archive's SHA-256 stored at upload, as the worker finds it);
* ``overhead`` = container - process (seconds) and ``ratio`` = container / process, for both.

Both paths score the same predictions; the script checks that the two give the same metrics.
Needs podman and runc (``scripts/install.sh``) and root, like the worker.

Usage::

    python benchmarks/container_overhead.py              # FrozenLake dev and test, 3 repeats
    python benchmarks/container_overhead.py --repeat 5
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from qval import build, containers, schema
from qval.envs import registry
from qval import predictions as qpred
from qval.scoring import score, truth_from_dataset

REPO = Path(__file__).resolve().parent.parent
KIT = REPO / "examples" / "method-container"
KIT_IMAGE = "localhost/qval-bench-kit:latest"
BENCH_SECRET = "container-overhead-benchmark"
"""FrozenLake's test split is drawn from a secret (:mod:`qval.hidden`): a fixed one gives the benchmark a test split."""


def prepare(work: Path, engine: containers.Engine) -> tuple[schema.Dataset, Path]:
    """The FrozenLake dataset and the starter kit saved as an archive (the file a user uploads)."""
    ds = build.build(registry.builder("frozenlake"), work / "frozenlake", secret=BENCH_SECRET)
    base = subprocess.run([str(REPO / "scripts" / "build-base-image.sh")], capture_output=True, text=True)
    if base.returncode != 0:
        sys.exit(f"building the base image failed:\n{base.stderr}")
    for args in (("build", "-q", "-t", KIT_IMAGE, str(KIT)), ("save", "-o", str(work / "kit.tar"), KIT_IMAGE)):
        done = engine.call(*args)
        if done.returncode != 0:
            sys.exit(f"podman {args[0]} failed:\n{done.stderr}")
    return ds, work / "kit.tar"


def as_process(ds: schema.Dataset, split: str, work: Path) -> tuple[float, dict[str, float | None]]:
    """Seconds from nothing to scored with ``method.py`` run as a plain process; and the metrics."""
    start = time.perf_counter()
    folder = Path(tempfile.mkdtemp(dir=work))
    (folder / "input").mkdir()
    (folder / "output").mkdir()
    containers.write_input(ds, split, "q", folder / "input")
    env = dict(os.environ, QVAL_INPUT=str(folder / "input"), QVAL_OUTPUT=str(folder / "output"))
    subprocess.run(["python3", str(KIT / "method.py")], env=env, check=True, capture_output=True)
    truth = truth_from_dataset(ds, split, "q")
    preds = qpred.parse(folder / "output" / "predictions.jsonl", "predictions.jsonl")
    qpred.validate(preds, truth.index)
    rows = score(truth, preds.ids, preds.scores, codes=preds.codes(truth.index), bootstrap_resamples=0)
    return time.perf_counter() - start, {r.metric: r.value for r in rows}


def as_container(
    ds: schema.Dataset, split: str, archive: Path, archive_sha256: str, engine: containers.Engine
) -> tuple[dict[str, float], dict[str, float | None]]:
    """Stage timings of one worker-style container job (``total`` included); and the metrics.
    ``archive_sha256``: the archive's SHA-256, which the site stores at upload."""
    t0 = time.perf_counter()
    job = containers.Job(engine)
    try:
        image_id = job.load_cached(archive_sha256) or job.load(archive)
        t1 = time.perf_counter()
        containers.write_input(ds, split, "q", job.input_dir)
        result = job.run(image_id, containers.Limits(timeout_s=120))
        t2 = time.perf_counter()
        evaluation = containers.evaluate(result, truth_from_dataset(ds, split, "q"), bootstrap_resamples=0)
        t3 = time.perf_counter()
    finally:
        job.close()
    t4 = time.perf_counter()
    if evaluation.outcome != "finished":
        sys.exit(f"the container failed: {evaluation.error}\n{result.stderr}")
    stages = {"load": t1 - t0, "run": t2 - t1, "score": t3 - t2, "clean-up": t4 - t3, "total": t4 - t0}
    return stages, {r.metric: r.value for r in evaluation.rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per split and path (the median is printed)")
    parser.add_argument("--work-root", default="/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir(),
                        help="where job folders go (a tmpfs: removing an image store from disk is slow here)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    # Short paths: podman refuses a --runroot longer than 50 characters.
    with tempfile.TemporaryDirectory(prefix="qb", dir=args.work_root) as tmp:
        work = Path(tmp)
        engine = containers.Engine(work_root=work / "j")
        (work / "j").mkdir()
        ds, archive = prepare(work, engine)
        archive_sha256 = containers.file_sha256(archive)  # hashed at upload, not by the job
        size_mb = archive.stat().st_size / 2**20
        print(f"starter kit archive {size_mb:.0f} MiB; {ds.manifest.key}; median of {args.repeat}")
        header = (f"{'split':<6} {'job':<6} {'points':>6} {'process s':>9} {'container s':>11} {'overhead s':>10}"
                  f" {'ratio':>6} {'load':>6} {'run':>6} {'score':>6} {'clean-up':>8}")
        print(header)
        print("-" * len(header))
        try:
            for split in ("dev", "test"):
                plain, first, rerun = [], [], []
                for i in range(args.repeat):
                    seconds, plain_metrics = as_process(ds, split, work)
                    plain.append(seconds)
                    # first: a cache of its own, empty; rerun: the same archive again with that cache.
                    cold = dataclasses.replace(engine, image_cache=work / f"c{split}{i}")
                    for runs in (first, rerun):
                        stages, container_metrics = as_container(ds, split, archive, archive_sha256, cold)
                        runs.append(stages)
                        if plain_metrics != container_metrics:
                            sys.exit(f"the two paths scored differently: {plain_metrics} vs {container_metrics}")
                    shutil.rmtree(cold.images.root)
                p = statistics.median(plain)
                points = len(ds.states_in(split))
                for job, runs in (("first", first), ("rerun", rerun)):
                    med = {k: statistics.median(s[k] for s in runs) for k in runs[0]}
                    print(f"{split:<6} {job:<6} {points:>6} {p:9.3f} {med['total']:11.3f} {med['total'] - p:10.3f} "
                          f"{med['total'] / p:6.1f} {med['load']:6.2f} {med['run']:6.2f} {med['score']:6.3f} "
                          f"{med['clean-up']:8.2f}", flush=True)
        finally:
            engine.call("rmi", "-f", KIT_IMAGE)
            containers.sweep(engine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

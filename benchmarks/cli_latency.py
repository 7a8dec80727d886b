"""Benchmark: how long ``qval`` takes to start and to report a result the server already has.

Against a running site (``make up``, or the compose stack) with FrozenLake loaded, the script
prints, from one run:

* start-up: ``qval --help`` against a bare ``python -c pass`` (the baseline) and against a
  process that imports what the CLI used to import at start (pandas, requests, the scoring and
  container modules);
* per upload of a dev-split predictions file with ``qval submit`` (a fresh process each time,
  as a user runs it): ``cli s`` from the command's start to its exit, ``server s`` from the
  upload's arrival (``received``) to its result (``finished`` or ``failed``) in the
  submission's timeline, and ``lag s`` = exit − result time: how long after the server had the
  result the user saw it.

Usage::

    QVAL_TOKEN=... python benchmarks/cli_latency.py --server http://127.0.0.1:8000 [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
import requests

QVAL = [sys.executable, "-m", "qval.cli"]
OLD_IMPORTS = "import pandas, requests, qval.containers, qval.predictions, qval.scoring"


def seconds(argv: list[str], repeat: int) -> float:
    """Median wall time of a command."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def predictions_file(server: str, dataset: str, folder: Path) -> Path:
    """A dev-split predictions file scored by the labels plus noise (downloaded from the site)."""
    body = requests.get(f"{server}/api/v1/datasets/{dataset}/download/", params={"split": "dev", "format": "parquet"},
                        timeout=60)
    body.raise_for_status()
    frame = pd.read_parquet(io.BytesIO(body.content))
    frame = frame[frame.is_actor]
    path = folder / "preds.csv"
    pd.DataFrame({"id": frame.candidate_id, "score": frame.q_label + 0.01 * (frame.index % 7)}).to_csv(path, index=False)
    return path


def one_submit(server: str, token: str, dataset: str, path: Path) -> tuple[float, float, float]:
    """``(cli s, server s, lag s)`` of one ``qval submit`` run to the end."""
    env = dict(os.environ, QVAL_TOKEN=token, QVAL_SERVER=server)
    start_wall, start = time.time(), time.perf_counter()
    done = subprocess.run([*QVAL, "submit", str(path), "--dataset", dataset, "--split", "dev", "--target", "q",
                           "--method", "cli-latency"], env=env, capture_output=True, text=True)
    cli = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"qval submit failed: {done.stderr}")
    sub_id = done.stderr.split()[1].rstrip(":")  # "submission N: received"
    end_wall = start_wall + cli
    sub = requests.get(f"{server}/api/v1/submissions/{sub_id}/", headers={"Authorization": f"Token {token}"},
                       timeout=30).json()
    timeline = {k: datetime.fromisoformat(v).timestamp() for k, v in sub["timeline"].items()}
    result_at = timeline.get("finished", timeline.get("failed"))
    if result_at is None:
        sys.exit(f"submission {sub_id} is not final: {json.dumps(sub)[:500]}")
    return cli, result_at - timeline["received"], end_wall - result_at


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("QVAL_SERVER", "http://127.0.0.1:8000"))
    parser.add_argument("--dataset", default="frozenlake-8x8")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    token = os.environ.get("QVAL_TOKEN")

    bare = seconds([sys.executable, "-c", "pass"], args.repeat)
    old = seconds([sys.executable, "-c", OLD_IMPORTS], args.repeat)
    helped = seconds([*QVAL, "--help"], args.repeat)
    print(f"start-up (median of {args.repeat}): python -c pass {bare:.3f} s; qval --help {helped:.3f} s "
          f"(+{helped - bare:.3f} s); the old start-up imports alone {old:.3f} s (+{old - bare:.3f} s)")
    if not token:
        print("no QVAL_TOKEN: skipping the submit timings")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = predictions_file(args.server, args.dataset, Path(tmp))
        rows = [one_submit(args.server, token, args.dataset, path) for _ in range(args.repeat)]
    print(f"{'run':>3} {'cli s':>7} {'server s':>8} {'lag s':>6}")
    for i, (cli, server, lag) in enumerate(rows, 1):
        print(f"{i:>3} {cli:7.3f} {server:8.3f} {lag:6.3f}")
    med = [statistics.median(r[i] for r in rows) for i in range(3)]
    print(f"med {med[0]:7.3f} {med[1]:8.3f} {med[2]:6.3f}   (lag: result on the server -> the command exits)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

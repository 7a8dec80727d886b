"""Benchmark: a burst of uploads against a whole site on loopback (tests/stack.py: private
PostgreSQL and Redis, gunicorn, scoring workers with beat).

``--users`` accounts upload ``--uploads`` predictions files of 100 points (the dev split's actor
candidates, target q, random scores) spread evenly over ``--seconds``. Then every submission
must end final (none lost), there must be exactly as many submissions as uploads and each a
full set of results once (none duplicated). Printed:

* p50 / p95 latency from the start of an upload to its ``finished`` time (the submission's own
  timeline; client and site share the clock on loopback);
* the leaderboard API's p95 response time while idle (before the burst) and during it, and their
  ratio.

Usage (ports 18880-18882 by default, all on 127.0.0.1; about two minutes)::

    python benchmarks/load.py
    python benchmarks/load.py --uploads 40 --users 4 --seconds 10 --port 18883
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qval import build  # noqa: E402
from qval.envs import registry  # noqa: E402
from qval import schema  # noqa: E402
from tests.stack import Stack  # noqa: E402


def predictions(ds: schema.Dataset, seed: int) -> bytes:
    """A 100-point JSON Lines predictions file: the dev split's actor candidates, random scores."""
    rng = random.Random(seed)
    ids = [c.id for s in ds.states_in("dev") for c in s.candidates if c.is_actor]
    return "".join(json.dumps({"id": i, "score": rng.random()}) + "\n" for i in ids).encode()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def leaderboard_times(stack: Stack, stop: threading.Event, out: list[float]) -> None:
    """Time GET /api/v1/leaderboard/ back to back until ``stop``."""
    while not stop.is_set():
        t = time.perf_counter()
        resp = requests.get(f"{stack.url}/api/v1/leaderboard/", params={"dataset": "frozenlake-8x8"}, timeout=60)
        resp.raise_for_status()
        out.append(time.perf_counter() - t)
        time.sleep(0.05)


def run(stack: Stack, ds: schema.Dataset, uploads: int, users: int, seconds: float) -> dict[str, Any]:
    """Drive the burst on a started stack; return the measurements and the correctness checks."""
    tokens = [stack.token(f"load{u}") for u in range(users)]
    files = [predictions(ds, i) for i in range(uploads)]
    for _ in range(5):  # warm the web workers up: the idle baseline is the site at rest, not starting
        requests.get(f"{stack.url}/api/v1/leaderboard/", params={"dataset": "frozenlake-8x8"}, timeout=60)
    idle: list[float] = []
    stop = threading.Event()
    poller = threading.Thread(target=leaderboard_times, args=(stack, stop, idle))
    poller.start()
    time.sleep(5)
    stop.set()
    poller.join()

    started: dict[int, tuple[float, str]] = {}
    errors: list[str] = []
    t0 = time.time()

    def upload(i: int) -> None:
        time.sleep(max(0.0, t0 + i * seconds / uploads - time.time()))
        token = tokens[i % users]
        begin = time.time()
        resp = stack.upload(token, files[i], method_name=f"load-{i}")
        if resp.status_code != 201:
            errors.append(f"upload {i}: {resp.status_code} {resp.text[:200]}")
            return
        started[resp.json()["id"]] = (begin, token)

    busy: list[float] = []
    stop = threading.Event()
    poller = threading.Thread(target=leaderboard_times, args=(stack, stop, busy))
    poller.start()
    with ThreadPoolExecutor(max_workers=users) as pool:
        list(pool.map(upload, range(uploads)))
    burst_s = time.time() - t0
    finals = {pk: stack.wait_final(token, pk, timeout=600) for pk, (_, token) in started.items()}
    stop.set()
    poller.join()
    latencies = [datetime.fromisoformat(d["timeline"]["finished"]).timestamp() - started[pk][0]
                 for pk, d in finals.items() if d["state"] == "finished"]
    return {
        "uploads": uploads, "accepted": len(started), "errors": errors, "burst_s": burst_s,
        "finished": sum(d["state"] == "finished" for d in finals.values()),
        "failed": {pk: d["error"] for pk, d in finals.items() if d["state"] != "finished"},
        "submissions_stored": stack.count("Submission.objects.count()"),
        "distinct_ids": len(set(started)),
        "results_per_submission": sorted({len(d["results"]) for d in finals.values() if d["state"] == "finished"}),
        "duplicate_results": stack.count(
            "Result.objects.values('submission','metric').annotate(n=__import__('django').db.models.Count('id'))"
            ".filter(n__gt=1).count()"),
        "latency_p50_s": percentile(latencies, 50) if latencies else None,
        "latency_p95_s": percentile(latencies, 95) if latencies else None,
        "leaderboard_idle_p95_s": percentile(idle, 95),
        "leaderboard_busy_p95_s": percentile(busy, 95),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uploads", type=int, default=200)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--port", type=int, default=18880, help="PostgreSQL; Redis and web use the next two")
    parser.add_argument("--scoring-concurrency", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="qval-load-") as tmp:
        root = Path(tmp)
        ds = build.build(registry.builder("frozenlake"), root / "built" / "frozenlake-8x8-1.1")
        stack = Stack(root / "stack", args.port, env={"QVAL_BOOTSTRAP_RESAMPLES": "1000"})
        try:
            stack.start(root / "built" / "frozenlake-8x8-1.1", scoring_concurrency=args.scoring_concurrency)
            out = run(stack, ds, args.uploads, args.users, args.seconds)
        finally:
            stack.close()
    print(f"{out['uploads']} uploads from {args.users} users in {out['burst_s']:.1f} s: {out['accepted']} accepted, "
          f"{out['finished']} finished, {len(out['failed'])} failed, {out['submissions_stored']} stored, "
          f"duplicated results: {out['duplicate_results']}")
    print(f"upload -> result latency: p50 {out['latency_p50_s']:.2f} s, p95 {out['latency_p95_s']:.2f} s")
    ratio = out["leaderboard_busy_p95_s"] / out["leaderboard_idle_p95_s"]
    print(f"leaderboard p95: idle {out['leaderboard_idle_p95_s'] * 1000:.0f} ms, during the burst "
          f"{out['leaderboard_busy_p95_s'] * 1000:.0f} ms (ratio {ratio:.1f})")
    ok = (out["finished"] == out["uploads"] == out["submissions_stored"] == out["distinct_ids"]
          and not out["errors"] and out["duplicate_results"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

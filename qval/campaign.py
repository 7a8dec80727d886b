"""A GPU campaign, the site's side of ``scripts/gpu-campaign.sh``: queue every text method on every hosted dataset
with one backbone, then follow the runs until each has ended.

    python -m qval.campaign --site URL --key WORKER_KEY --backbone NAME [--description TEXT]
        [--datasets SLUG,...] [--methods NAME,...] [--targets q,v] [--timeout S]

It asks the site (``POST /api/v1/workers/campaign``, with ``QVAL_WORKER_KEY``: the key remote workers register
with) to register the backbone and queue a baseline run of each text method of a chat model on the test split of
each hosted dataset (or the ones named) for a remote worker that serves it; the site queues only the runs missing
(a rerun of the command resumes a campaign). The runs go to the ``campaign`` queue, which the remote worker the
script starts consumes (:func:`qval.remote_worker.run_baseline_job`); the site scores each run as it arrives and
lists it as a verified baseline row. It then polls ``GET /api/v1/workers/campaign?backbone=NAME`` every ``--poll``
seconds, printing each run as it ends, and exits 0 when every run finished, 1 when one failed (its reason is
printed), 2 at ``--timeout``.  Django-free.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import requests

FINAL = ("finished", "failed")


def _get(site: str, key: str, backbone: str) -> list[dict[str, Any]]:
    resp = requests.get(f"{site}/api/v1/workers/campaign", params={"backbone": backbone},
                        headers={"Authorization": f"Worker {key}"}, timeout=60)
    resp.raise_for_status()
    return list(resp.json()["runs"])


def queue(site: str, key: str, backbone: str, description: str = "", datasets: list[str] | None = None,
          methods: list[str] | None = None, targets: list[str] | None = None) -> dict[str, Any]:
    """Queue the campaign of ``backbone`` on ``site``; the site's answer (``queued``: ids, ``runs``: every run of
    it). ``RuntimeError`` naming the site's reason when it refuses."""
    body: dict[str, Any] = {"backbone": backbone, "description": description}
    body.update({k: v for k, v in (("datasets", datasets), ("methods", methods), ("targets", targets)) if v})
    resp = requests.post(f"{site}/api/v1/workers/campaign", json=body, headers={"Authorization": f"Worker {key}"},
                         timeout=300)
    if resp.status_code != 201:
        raise RuntimeError(f"the site refused the campaign: {resp.status_code} {resp.text[:500]}")
    return dict(resp.json())


def follow(site: str, key: str, backbone: str, ids: set[int], timeout_s: float, poll_s: float = 5.0,
           out: Any = sys.stdout) -> list[dict[str, Any]]:
    """Poll the runs ``ids`` of the campaign of ``backbone`` until each is final or ``timeout_s`` passed, printing
    each as it ends; return their last states."""
    deadline, reported = time.monotonic() + timeout_s, set()
    while True:
        runs = [r for r in _get(site, key, backbone) if r["id"] in ids]
        for run in runs:
            if run["state"] in FINAL and run["id"] not in reported:
                reported.add(run["id"])
                head = run["headline"]
                outcome = f"{head['metric']} {head['value']:.3f}" if head["value"] is not None else run["error"]
                print(f"run {run['id']} {run['method']} on {run['dataset']} (target {run['target']}): {run['state']}, "
                      f"{outcome}", file=out, flush=True)
        if all(r["state"] in FINAL for r in runs) or time.monotonic() > deadline:
            return runs
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qval.campaign", description=__doc__.split("\n")[0])
    parser.add_argument("--site", required=True, help="the site's URL (QVAL_SITE_URL)")
    parser.add_argument("--key", required=True, help="the site's QVAL_WORKER_KEY")
    parser.add_argument("--backbone", required=True, help="the name the worker serves the model as")
    parser.add_argument("--description", default="", help="the backbone's description on the site")
    parser.add_argument("--datasets", default="", help="comma-separated dataset keys (default: every hosted one)")
    parser.add_argument("--methods", default="", help="comma-separated methods (default: every text method)")
    parser.add_argument("--targets", default="", help="q, v or q,v (default q,v)")
    parser.add_argument("--timeout", type=float, default=7 * 86400, help="seconds to follow the runs")
    parser.add_argument("--poll", type=float, default=5.0)
    args = parser.parse_args(argv)
    site = args.site.rstrip("/")

    def split(text: str) -> list[str] | None:
        return [x.strip() for x in text.split(",") if x.strip()] or None

    try:
        answer = queue(site, args.key, args.backbone, args.description, split(args.datasets), split(args.methods),
                       split(args.targets))
    except (RuntimeError, requests.RequestException) as exc:
        print(f"campaign: {exc}", file=sys.stderr)
        return 1
    ids = {r["id"] for r in answer["runs"] if r["state"] not in FINAL or r["id"] in answer["queued"]}
    print(f"campaign of {args.backbone}: {len(answer['queued'])} runs queued, {len(ids)} to follow, "
          f"{len(answer['runs']) - len(ids)} already ended", flush=True)
    runs = follow(site, args.key, args.backbone, ids, args.timeout, args.poll)
    states = [r["state"] for r in runs]
    print(f"campaign of {args.backbone}: {states.count('finished')} finished, {states.count('failed')} failed, "
          f"{len(states) - states.count('finished') - states.count('failed')} not ended", flush=True)
    if any(s not in FINAL for s in states):
        return 2
    return 1 if "failed" in states else 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: server time of the leaderboard, the figure pages and the leaderboard API with
10^4 results in the database, under 50 concurrent clients.

The script fills the database named by ``DATABASE_URL`` (use a database of its own: it is
migrated and written to) with the imported QVal v1.0 results plus synthetic finished
submissions up to ``--rows`` leaderboard rows (each with ρ, τ and the state-local ρ), starts
gunicorn on ``--port``, and for each page sends ``--requests`` requests from ``--clients``
concurrent clients (a figure page's data is a second request, ``?format=plotly``, measured
as a page of its own).  It prints, per page, the p50/p95 of the server time (the
``Server-Timing`` header of :mod:`qval_site.middleware`) and of the latency the client saw,
and both as a ratio to the trivial view ``/healthz/`` measured in the same run.

Goal: p95 server time under 100 ms for every page.

Usage::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/qval_bench_pages python benchmarks/pages.py
    python benchmarks/pages.py --rows 2000 --requests 100          # quicker
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import requests

REPO = Path(__file__).resolve().parents[1]
PAGES = [
    "/healthz/",
    "/leaderboard/",
    "/leaderboard/?source=user&sort=-kendall_tau&page=3",
    "/api/v1/leaderboard/?source=reported",
    "/figures/per-family/",
    "/figures/per-family/?format=plotly",
    "/figures/per-environment/",
    "/figures/text-vs-image/",
    "/figures/q-vs-v/",
    "/figures/heatmap/?by=backbone",
    "/methods/gvl/",
    "/environments/frozenlake/",
    "/",
]


def fill(rows: int) -> int:
    """Import the published results and add synthetic submissions up to ``rows`` finished ones."""
    import django

    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qval_site.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from submissions.importing import import_results, published_dataset
    from leaderboard.models import Backbone, Method
    from qval import families
    from submissions.models import Result, Submission

    call_command("migrate", verbosity=0)
    import_results(resamples=0)
    have = Submission.objects.filter(state=Submission.FINISHED).count()
    if have >= rows:
        return have
    user, _ = get_user_model().objects.get_or_create(username="bench-pages")
    rng = random.Random(0)
    methods = [Method.objects.get_or_create(name=f"bench-{i}", defaults={"family": families.FAMILIES[i % 7].slug})[0]
               for i in range(60)]
    backbones = [Backbone.objects.get_or_create(name=f"bench-backbone-{i}")[0] for i in range(8)]
    datasets = [published_dataset(env) for env in ("FrozenLake", "ALFWorld", "OpenApps", "TerminalBench")]
    now = timezone.now()
    subs = [Submission(user=user, dataset=rng.choice(datasets), split="test", target=rng.choice("qv"),
                       modality=rng.choice(("text", "image")), method=(m := rng.choice(methods)), method_name=m.name,
                       backbone=(b := rng.choice(backbones)), backbone_name=b.name, filename="bench.csv",
                       state=Submission.FINISHED, finished_at=now) for _ in range(rows - have)]
    results = []
    for s in Submission.objects.bulk_create(subs, batch_size=2000):
        for metric in ("spearman", "kendall_tau", "ranking_spearman"):
            v = rng.uniform(-1, 1)
            results.append(Result(submission=s, metric=metric, value=v, p_value=0.01, num_points=100,
                                  details={"ci95": [v - 0.1, v + 0.1]}))
    Result.objects.bulk_create(results, batch_size=5000)
    return Submission.objects.filter(state=Submission.FINISHED).count()


def measure(base: str, path: str, clients: int, total: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(server ms, client ms, failures) of ``total`` GETs of ``path`` from ``clients`` threads."""
    session_local = __import__("threading").local()

    def one(_: int) -> tuple[float, float] | None:
        session = getattr(session_local, "s", None) or requests.Session()
        session_local.s = session
        start = time.perf_counter()
        try:
            r = session.get(base + path, timeout=120)
            r.raise_for_status()
        except requests.RequestException:
            session_local.s = None
            return None
        client = (time.perf_counter() - start) * 1000
        server = float(r.headers["Server-Timing"].split("dur=")[1])
        return server, client

    with ThreadPoolExecutor(clients) as pool:
        out = list(pool.map(one, range(total)))
    ok = [o for o in out if o is not None]
    return np.array([o[0] for o in ok]), np.array([o[1] for o in ok]), len(out) - len(ok)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="finished submissions in the database")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=300, help="requests per page")
    parser.add_argument("--port", type=int, default=18351)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=1,
                        help="threads per worker: 1 is gunicorn's sync worker, as deployed (scripts/up.sh, "
                             "containers/compose/app.sh); more runs the gthread worker")
    args = parser.parse_args()
    if "DATABASE_URL" not in os.environ:
        parser.error("set DATABASE_URL to a database of the benchmark's own (it is migrated and written to)")
    print(f"database: {fill(args.rows)} finished submissions", flush=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "qval_site.wsgi", "-b", f"127.0.0.1:{args.port}", "-w", str(args.workers),
         *(["-k", "gthread", "--threads", str(args.threads)] if args.threads > 1 else ["-k", "sync"]),
         "--timeout", "300", "--log-level", "warning"], cwd=REPO, env=env)
    base = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(120):
            try:
                requests.get(base + "/healthz/", timeout=2)
                break
            except requests.RequestException:
                time.sleep(0.5)
        for path in PAGES:  # warm every worker's memo and templates
            for _ in range(args.workers * 4):
                requests.get(base + path, timeout=120).raise_for_status()
        results = {path: measure(base, path, args.clients, args.requests) for path in PAGES}
    finally:
        server.terminate()
        server.wait(30)
    s50, s95 = (np.percentile(results["/healthz/"][0], q) for q in (50, 95))
    c50, c95 = (np.percentile(results["/healthz/"][1], q) for q in (50, 95))
    print(f"{args.clients} concurrent clients, {args.requests} requests per page, {args.workers} gunicorn workers x {args.threads} "
          f"thread{'s' if args.threads > 1 else ' (sync)'}")
    print(f"{'page':<52} {'server p50':>10} {'p95 ms':>8} {'x trivial':>9} {'client p50':>10} {'p95 ms':>8} {'x trivial':>9}")
    worst = 0.0
    for path, (server_ms, client_ms, failed) in results.items():
        p50, p95 = np.percentile(server_ms, 50), np.percentile(server_ms, 95)
        q50, q95 = np.percentile(client_ms, 50), np.percentile(client_ms, 95)
        worst = max(worst, p95) if path != "/healthz/" else worst
        print(f"{path:<52} {p50:>10.1f} {p95:>8.1f} {p95 / max(s95, 1e-3):>9.1f} {q50:>10.1f} {q95:>8.1f} "
              f"{q95 / max(c95, 1e-3):>9.1f}" + (f"  ({failed} failed)" if failed else ""))
    print(f"worst page p95 server time: {worst:.1f} ms (goal < 100 ms): {'met' if worst < 100 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: server time and CPU time of every public page, its API and downloads with 10^4 (or ``--rows``)
results in the database, under 50 concurrent clients.

The script fills the database named by ``DATABASE_URL`` (use a database of its own: it is
migrated and written to) with the imported QVal v1.0 results plus synthetic finished
submissions up to ``--rows`` leaderboard rows (each with ρ, τ and the state-local ρ), starts
gunicorn on ``--port``, and for each page sends ``--requests`` requests from ``--clients``
concurrent clients (a figure page's data is a second request, ``?format=plotly``, measured
as a page of its own; A vs B compares the two re-scored rows with the most points, whose
comparison the warm-up computes once).  It prints, per page, the p50/p95 of the server time
and the mean CPU time per request (the ``Server-Timing`` header of :mod:`qval_site.middleware`),
the p50/p95 of the latency the client saw, each as a ratio to the trivial view ``/healthz``
measured in the same run, and the server time of the page's first request (which computes
what is then kept per results version).  The machine's load average is printed with them.

Goal: p95 server time under 100 ms for every page.

Usage::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/qval_bench_pages python benchmarks/pages.py
    python benchmarks/pages.py --rows 2000 --requests 100          # quicker

The compare rate limits are lifted for the server it starts (one client address sends every request).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import requests

REPO = Path(__file__).resolve().parents[1]
PAGES = [
    "/healthz",
    "/",
    "/leaderboard/",
    "/leaderboard/?source=user&sort=-kendall_tau&page=3",
    "/leaderboard/?source=reported&format=csv",
    "/leaderboard/?format=csv",
    "/leaderboard/?format=json",
    "/api/v1/leaderboard/?source=reported",
    "/leaderboard/aggregate/",
    "/leaderboard/aggregate/?split=test&target=v&metric=kendall_tau",
    "/api/v1/leaderboard/aggregate/",
    "/leaderboard/critical-difference/",
    "/leaderboard/critical-difference/?target=v&metric=ranking_spearman",
    "/api/v1/leaderboard/critical-difference/",
    "/figures/per-family/",
    "/figures/per-family/?format=plotly",
    "/figures/per-environment/",
    "/figures/text-vs-image/",
    "/figures/q-vs-v/",
    "/figures/heatmap/?by=backbone",
    "/api/v1/figures/heatmap/",
    "/methods/gvl/",
    "/environments/frozenlake/",
    "/compare/",
    "/compare/?a={a}",
    "/compare/?a={a}&b={b}",
    "/api/v1/compare/?a={a}&b={b}",
    "/datasets/",
    "/datasets/{dataset}/",
    "/api/v1/datasets/",
    "/api/v1/builds/",
    "/learned/",
    "/best-of-n/",
    "/status/",
    "/api/v1/status/",
    "/how-we-score/",
    "/boards/",
    "/boards/{dataset}:q:text/",
    "/boards/{dataset}:q:text/?all=1&format=json",
    "/tables/published/",
    "/tables/hosted/",
    "/tables/published/?format=csv",
    "/results/{a}/",
    "/published/consistency/",
    "/published/findings/",
    "/figures/paper/fig2/",
    "/figures/paper/fig3/",
    "/api/docs/",
]
"""Every public page (a dataset we host is not in the benchmark's database: its page costs the same
however many results there are).  ``{a}``/``{b}``: the compared pair; ``{dataset}``: its dataset."""
STATUS = {"/compare/?a={a}": 400}
"""Pages answered with another status than 200: A alone is the form offering its B's, and says b is missing."""
UNLIMITED = '{"compare_anon": "1000000/min", "compare_user": "1000000/min", "compare_compute": "1000000/min"}'


def fill(rows: int) -> tuple[int, dict[str, str]]:
    """Import the published results and add synthetic submissions up to ``rows`` finished ones; return
    how many there are and the page parameters (:data:`PAGES`)."""
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
        return have, _pair()
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
    return Submission.objects.filter(state=Submission.FINISHED).count(), _pair()


def _pair() -> dict[str, str]:
    """``a``, ``b`` and ``dataset``: the two re-scored rows with per-point predictions and the most points
    on one dataset, split and target (the largest comparison the published results allow)."""
    from submissions.models import Submission

    rows = (Submission.objects.filter(source=Submission.SOURCE_RESCORED, state=Submission.FINISHED)
            .exclude(predictions="").filter(results__metric="spearman")
            .values_list("pk", "dataset__slug", "dataset__version", "split", "target", "results__num_points"))
    groups: dict[tuple[str, ...], list[tuple[int, int]]] = {}
    for pk, slug, version, split, target, points in rows:
        groups.setdefault((f"{slug}@{version}", split, target), []).append((points or 0, pk))
    key, members = max(((k, sorted(v, reverse=True)) for k, v in groups.items() if len(v) >= 2),
                       key=lambda kv: kv[1][1][0])
    return {"a": str(members[0][1]), "b": str(members[1][1]), "dataset": key[0], "points": str(members[1][0])}


Timing = tuple[float, float, float]
"""Server ms, server CPU ms, client ms of one request."""


FIRST_TIMEOUT = 900
"""Seconds a page's first request may take (it computes what is then kept per results version: at 10^5 results on a
loaded machine the home page's, which ranks every board, took minutes); the measured requests get 120 s."""


def get(session: requests.Session, url: str, status: int = 200, timeout: float = 120) -> Timing:
    """One GET of ``url`` and its :data:`Timing` (raises on another status than ``status``)."""
    start = time.perf_counter()
    r = session.get(url, timeout=timeout)
    if r.status_code != status:
        raise requests.HTTPError(f"{url}: {r.status_code}, not {status}", response=r)
    client = (time.perf_counter() - start) * 1000
    timing = dict(part.strip().split(";dur=") for part in r.headers["Server-Timing"].split(","))
    return float(timing["app"]), float(timing["cpu"]), client


def measure(base: str, path: str, clients: int, total: int, status: int) -> tuple[np.ndarray, int]:
    """(``total`` x 3 :data:`Timing` array of the successful GETs, failures) of ``path`` from ``clients``
    threads."""
    session_local = threading.local()

    def one(_: int) -> Timing | None:
        session = getattr(session_local, "s", None) or requests.Session()
        session_local.s = session
        try:
            return get(session, base + path, status)
        except requests.RequestException:
            session_local.s = None
            return None

    with ThreadPoolExecutor(clients) as pool:
        out = list(pool.map(one, range(total)))
    ok = [o for o in out if o is not None]
    return np.array(ok).reshape(-1, 3), len(out) - len(ok)


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
    parser.add_argument("--pages", default="", help="only the pages containing this text (and /healthz)")
    args = parser.parse_args()
    if "DATABASE_URL" not in os.environ:
        parser.error("set DATABASE_URL to a database of the benchmark's own (it is migrated and written to)")
    count, params = fill(args.rows)
    print(f"database: {count} finished submissions; A vs B: {params['a']} vs {params['b']} on {params['dataset']} "
          f"({params['points']} points)", flush=True)
    pages = {p.format(**params): STATUS.get(p, 200) for p in PAGES if p == "/healthz" or args.pages in p}
    env = dict(os.environ, PYTHONPATH=str(REPO), QVAL_THROTTLE_RATES=UNLIMITED)
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "qval_site.wsgi", "-b", f"127.0.0.1:{args.port}", "-w", str(args.workers),
         *(["-k", "gthread", "--threads", str(args.threads)] if args.threads > 1 else ["-k", "sync"]),
         "--timeout", str(FIRST_TIMEOUT), "--log-level", "warning"], cwd=REPO, env=env)
    base = f"http://127.0.0.1:{args.port}"
    load = [os.getloadavg()[0]]
    try:
        for _ in range(120):
            try:
                requests.get(base + "/healthz", timeout=2)
                break
            except requests.RequestException:
                time.sleep(0.5)
        first: dict[str, float] = {}
        session = requests.Session()
        for path, status in pages.items():  # warm every worker's memo and templates; the first request computes
            first[path] = max(get(session, base + path, status, FIRST_TIMEOUT)[0] for _ in range(args.workers * 4))
        load.append(os.getloadavg()[0])
        results = {path: measure(base, path, args.clients, args.requests, status) for path, status in pages.items()}
        load.append(os.getloadavg()[0])
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:  # a worker still computing: never hide the error that ended the run
            server.kill()
            server.wait()
    base_t = results["/healthz"][0]
    s95, cpu_mean, c95 = np.percentile(base_t[:, 0], 95), base_t[:, 1].mean(), np.percentile(base_t[:, 2], 95)
    print(f"{args.clients} concurrent clients, {args.requests} requests per page, {args.workers} gunicorn workers x "
          f"{args.threads} thread{'s' if args.threads > 1 else ' (sync)'}; {os.cpu_count()} CPUs, load average "
          f"{' / '.join(f'{x:.1f}' for x in load)} (start / measuring / end)")
    print(f"{'page':<58} {'server p50':>10} {'p95 ms':>7} {'x triv':>6} {'cpu ms':>7} {'x triv':>6} "
          f"{'client p50':>10} {'p95 ms':>7} {'x triv':>6} {'first ms':>8}")
    worst, worst_cpu = 0.0, 0.0
    for path, (t, failed) in results.items():
        p50, p95 = np.percentile(t[:, 0], 50), np.percentile(t[:, 0], 95)
        cpu = t[:, 1].mean()
        q50, q95 = np.percentile(t[:, 2], 50), np.percentile(t[:, 2], 95)
        if path != "/healthz":
            worst, worst_cpu = max(worst, p95), max(worst_cpu, cpu)
        print(f"{path:<58} {p50:>10.1f} {p95:>7.1f} {p95 / max(s95, 1e-3):>6.0f} {cpu:>7.2f} "
              f"{cpu / max(cpu_mean, 1e-3):>6.0f} {q50:>10.1f} {q95:>7.1f} {q95 / max(c95, 1e-3):>6.1f} "
              f"{first[path]:>8.1f}" + (f"  ({failed} failed)" if failed else ""))
    print(f"worst page p95 server time: {worst:.1f} ms (goal < 100 ms): {'met' if worst < 100 else 'NOT met'}; "
          f"worst mean CPU per request: {worst_cpu:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

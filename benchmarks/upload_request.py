"""Benchmark: what an upload costs the web request now that it only stores the file.

Builds FrozenLake 8x8 (about 15 s), loads it into a throw-away test database (``DATABASE_URL``
with ``test_`` prepended, created and dropped here) and, for each size, writes a CSV predictions
file of that many rows (the test split's ids, repeated as samples) and measures, best of
``--repeat``:

* ``request s``: :func:`submissions.services.create_submission`, what the web request runs
  (argument checks, quota under the account lock, storing the file, queueing the check);
* ``worker s``: :func:`submissions.services.validate_submission`, the parse and validation
  that used to run inside the request and now runs on the ``scoring`` worker (the baseline);
* ``ratio`` = request / worker.

Usage::

    python benchmarks/upload_request.py                   # 10^4, 10^5, 10^6 rows
    python benchmarks/upload_request.py --sizes 10000 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qval_site.settings")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    import django

    django.setup()
    import numpy as np
    import pandas as pd
    from django.conf import settings
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.db import connection
    from django.test.utils import setup_test_environment

    from qval import build
    from qval.envs import registry

    setup_test_environment()
    work = Path(tempfile.mkdtemp(prefix="qval-upload-bench-"))
    settings.MEDIA_ROOT = work / "media"
    settings.QVAL_DATASETS_DIR = work / "datasets"
    settings.CELERY_TASK_ALWAYS_EAGER = False
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        from django.contrib.auth import get_user_model
        from django.db import transaction

        from leaderboard.loading import load_dataset
        from submissions import services
        from submissions.models import Submission

        spec = registry.builder("frozenlake")()[1]
        ds = build.build(registry.builder("frozenlake"), work / "datasets" / f"{spec.slug}-{spec.version}")
        loaded = load_dataset(ds)[0]
        user = get_user_model().objects.create_user(username="bench", password="x" * 12)
        ids = [s.actor_candidate.id for s in ds.states if s.split == "dev"]
        print(f"{'rows':>9} {'MB':>7} {'request s':>10} {'worker s':>9} {'ratio':>7}")
        for size in args.sizes:
            reps = -(-size // len(ids))
            frame = pd.DataFrame({"id": np.tile(ids, reps)[:size], "sample": np.repeat(np.arange(reps), len(ids))[:size],
                                  "score": np.random.default_rng(0).random(size)})
            body = frame.to_csv(index=False).encode()
            best_request = best_worker = float("inf")
            for _ in range(args.repeat):
                req = services.SubmissionRequest(dataset=loaded.key, split="dev", target="q", method_name="bench")
                start = time.perf_counter()
                with transaction.atomic():  # queueing happens on commit: rolled back, nothing is sent
                    sub = services.create_submission(user, req, SimpleUploadedFile("p.csv", body))
                    request_s = time.perf_counter() - start
                    start = time.perf_counter()
                    services.validate_submission(sub.pk)
                    worker_s = time.perf_counter() - start
                    assert Submission.objects.get(pk=sub.pk).state in (Submission.QUEUED, Submission.FAILED)
                    transaction.set_rollback(True)
                best_request, best_worker = min(best_request, request_s), min(best_worker, worker_s)
            print(f"{size:>9} {len(body) / 1e6:>7.1f} {best_request:>10.3f} {best_worker:>9.3f} "
                  f"{best_request / best_worker:>7.3f}")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""End to end through a real Celery worker process, real Redis and real PostgreSQL."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from scipy import stats

from tests.conftest import REPO, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.worker]


def test_upload_is_scored_by_a_worker_process(celery_worker_process, api, loaded, frozenlake) -> None:
    ids = [s.actor_candidate.id for s in frozenlake.states if s.split == "dev"]  # exact numbers: a public split
    labels = np.array([frozenlake.q_labels[i] for i in ids])
    scores = labels + np.random.default_rng(11).normal(0, 0.1, len(ids))
    body = pd.DataFrame({"id": ids, "score": scores}).to_csv(index=False).encode()
    resp = api.post(
        "/api/v1/submissions/",
        {"file": SimpleUploadedFile("p.csv", body), "dataset": "frozenlake-8x8", "split": "dev", "target": "q",
         "method_name": "noisy-oracle", "backbone": "none", "public": True},  # a dev result published
        format="multipart",
    )
    assert resp.status_code == 201, resp.content
    sub_id = resp.json()["id"]

    def final() -> dict | None:
        data = api.get(f"/api/v1/submissions/{sub_id}/").json()
        return data if data["final"] else None

    data = wait_for(final, timeout=90)
    assert data["state"] == "finished", data
    assert data["worker"].startswith("test-scoring-")
    assert list(data["timeline"]) == ["received", "validating", "queued", "scoring", "finished"]
    res = {r["metric"]: r for r in data["results"]}
    rho, p_rho = stats.spearmanr(labels, scores)
    tau, p_tau = stats.kendalltau(labels, scores)
    assert res["spearman"]["value"] == pytest.approx(rho, abs=1e-9)
    assert res["spearman"]["p_value"] == pytest.approx(p_rho, abs=1e-9, rel=1e-9)
    assert res["kendall_tau"]["value"] == pytest.approx(tau, abs=1e-9)
    assert res["kendall_tau"]["p_value"] == pytest.approx(p_tau, abs=1e-9, rel=1e-9)
    board = api.get("/api/v1/leaderboard/", {"dataset": "frozenlake-8x8", "split": "dev"}).json()["results"]
    assert [r["method"] for r in board] == ["noisy-oracle"]


def test_a_task_sent_by_name_runs_in_the_in_process_worker() -> None:
    """Services send their tasks by name (``current_app.signature(NAME)``); with ``QVAL_INPROCESS_WORKER=1``
    (eager tasks, no worker process) every task module is registered as the site starts, so such a task
    resolves to the task itself and runs in the web process instead of waiting in a queue."""
    import os
    import subprocess
    import sys

    from qval_site.celery import TASK_MODULES

    probe = ("import sys, django; django.setup()\n"
             "from celery import current_app\n"
             "from qval_site.celery import TASK_MODULES\n"
             "sig = current_app.signature('learning.tasks.train_learned')\n"
             "print([m for m in TASK_MODULES if m in sys.modules], sig.type.name, sig._apply_async.__name__)\n")
    env = {**os.environ, "QVAL_INPROCESS_WORKER": "1", "DJANGO_SETTINGS_MODULE": "qval_site.settings"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == f"{list(TASK_MODULES)} learning.tasks.train_learned apply_async"

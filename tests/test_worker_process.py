"""End to end through a real Celery worker process, real Redis and real PostgreSQL."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from scipy import stats

from tests.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.worker]


def test_upload_is_scored_by_a_worker_process(celery_worker_process, api, loaded, frozenlake) -> None:
    ids = [s.actor_candidate.id for s in frozenlake.states if s.split == "dev"]  # exact numbers: a public split
    labels = np.array([frozenlake.q_labels[i] for i in ids])
    scores = labels + np.random.default_rng(11).normal(0, 0.1, len(ids))
    body = pd.DataFrame({"id": ids, "score": scores}).to_csv(index=False).encode()
    resp = api.post(
        "/api/v1/submissions/",
        {"file": SimpleUploadedFile("p.csv", body), "dataset": "frozenlake-8x8", "split": "dev", "target": "q",
         "method_name": "noisy-oracle", "backbone": "none"},
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

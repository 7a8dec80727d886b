"""Operations: health and readiness endpoints, structured logs, the fast CLI, the image cache."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from django.core.management import CommandError, call_command

from qval import cli
from qval_site import logs
from tests.conftest import REPO

DOWN_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@pytest.fixture
def broker_down(monkeypatch: pytest.MonkeyPatch) -> None:
    from qval_site.celery import app

    monkeypatch.setenv("CELERY_BROKER_URL", DOWN_BROKER)  # Celery reads it before its configuration
    monkeypatch.setattr(app.conf, "broker_url", DOWN_BROKER)


# -- /healthz, /readyz, wait_ready --------------------------------------------------------------
def test_healthz_and_readyz_answer_with_database_and_broker_up(client, db) -> None:
    health = client.get("/healthz")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.content
    assert ready.json() == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}


def test_readyz_is_503_and_names_the_broker_when_it_is_down(client, db, broker_down) -> None:
    assert client.get("/healthz").status_code == 200  # alive, just not ready
    ready = client.get("/readyz")
    assert ready.status_code == 503
    body = ready.json()
    assert body["status"] == "not ready" and body["checks"]["database"] == "ok"
    assert body["checks"]["broker"] != "ok" and "Error" in body["checks"]["broker"]


def test_wait_ready_returns_when_ready_and_fails_with_the_reason_after_its_timeout(db, broker_down, monkeypatch) -> None:
    with pytest.raises(CommandError, match=r"not ready after 0.5 s: broker: .*Error"):
        call_command("wait_ready", "--timeout", "0.5", "--interval", "0.1")
    monkeypatch.undo()
    out = io.StringIO()
    call_command("wait_ready", "--timeout", "10", stdout=out)
    assert "ready" in out.getvalue()


# -- structured logs ----------------------------------------------------------------------------
def test_json_lines_carry_the_submission_id_inside_its_context_only() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("qval.test-ops")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("before")
        with logs.submission_context(42):
            logger.info("inside %s", "scoring", extra={"rows": 3})
            try:
                raise ValueError("boom")
            except ValueError:
                logger.exception("failed")
        logger.warning("after")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(x["message"], x["submission_id"]) for x in lines] == [
        ("before", None), ("inside scoring", 42), ("failed", 42), ("after", None)]
    assert lines[1]["rows"] == 3 and lines[1]["level"] == "INFO" and lines[1]["logger"] == "qval.test-ops"
    assert "ValueError: boom" in lines[2]["exception"]


# -- the CLI ------------------------------------------------------------------------------------
def test_the_cli_starts_without_importing_pandas_requests_or_the_scorer() -> None:
    code = ("import sys, qval.cli; qval.cli.build_parser().parse_args(['status', '1', '--wait']); "
            "print(sorted(m for m in ('pandas', 'requests', 'numpy', 'qval.scoring', 'qval.containers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
@pytest.mark.worker
def test_status_wait_follows_a_submission_and_the_worker_logs_it_as_json(
        live_server, celery_worker_process, loaded, frozenlake, user, data_dir, tmp_path, capsys, monkeypatch) -> None:
    from rest_framework.authtoken.models import Token

    monkeypatch.setenv("QVAL_SERVER", live_server.url)
    monkeypatch.setenv("QVAL_TOKEN", Token.objects.create(user=user).key)
    monkeypatch.setenv("QVAL_CONFIG", str(tmp_path / "absent.json"))
    ids = frozenlake.point_ids("dev", "q")
    labels = np.array([frozenlake.q_labels[i] for i in ids])
    path = tmp_path / "p.csv"
    pd.DataFrame({"id": ids, "score": labels + np.random.default_rng(5).normal(0, 0.2, len(ids))}).to_csv(path, index=False)
    assert cli.main(["submit", str(path), "--dataset", "frozenlake-8x8", "--split", "dev", "--target", "q",
                     "--method", "ops", "--no-wait"]) == 0
    sub_id = int(capsys.readouterr().out.strip())
    assert cli.main(["status", str(sub_id), "--wait", "--timeout", "90"]) == 0
    out = capsys.readouterr().out
    assert "finished" in out and "spearman" in out

    lines = (data_dir / "worker.log").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]  # the rest: Celery's start banner
    about = [r for r in records if f"submission {sub_id} " in r["message"]]
    assert about and all(r["submission_id"] == sub_id for r in about), lines[-40:]
    # Celery's own lines for the task run carry it too; nothing carries another id.
    assert any(r["logger"].startswith("celery") and r["submission_id"] == sub_id for r in records), lines[-40:]
    assert {r["submission_id"] for r in records} <= {None, sub_id}

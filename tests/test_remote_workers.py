"""Remote gpu workers (no database) and the job protocol, heartbeats, the reaper of lost jobs, the
status page. Real PostgreSQL and the real views; in the slow test a real scoring worker process,
a live server and a remote worker process started with no database settings, running the starter
kit with podman.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from rest_framework.test import APIClient

from submissions import lifecycle
from submissions.models import Submission
from tests.conftest import REPO
from tests.test_container_submissions import kit_tar  # noqa: F401 - the starter kit's archive (a fixture)
from workers.models import JobToken, WorkerHeartbeat
from workers.tasks import inspect_container_upload, score_remote_run



@pytest.fixture
def remote(settings, loaded):  # type: ignore[no-untyped-def]
    settings.QVAL_GPU_WORKERS = "remote"
    settings.QVAL_BOOTSTRAP_RESAMPLES = 100
    settings.QVAL_WORKER_KEY = "worker-key-for-tests"
    return settings


def _queued_container(api, user, tmp_path: Path, django_capture_on_commit_callbacks) -> tuple[Submission, str]:  # type: ignore[no-untyped-def]
    """A container submission uploaded through the API, its archive accepted, queued for a remote
    worker: the submission and the raw token the broker message carries."""
    archive = _tiny_archive(tmp_path)
    data = {"kind": "container", "dataset": "frozenlake-8x8", "split": "dev", "target": "q", "method_name": "m",
            "backbone": "none", "file": SimpleUploadedFile("m.tar", archive.read_bytes())}
    with django_capture_on_commit_callbacks(execute=False):
        resp = api.post("/api/v1/submissions/", data, format="multipart")
    assert resp.status_code == 201, resp.content
    pk = resp.json()["submissions"][0]["id"]
    sent: list[tuple[str, list]] = []
    from qval_site.celery import app

    original = app.send_task
    app.send_task = lambda name, args, queue: sent.append((name, args, queue))  # type: ignore[method-assign]
    try:
        with django_capture_on_commit_callbacks(execute=True):
            inspect_container_upload([pk])
    finally:
        app.send_task = original  # type: ignore[method-assign]
    assert [(name, args[0], queue) for name, args, queue in sent] == [(lifecycle.TASKS["remote"], pk, "remote")]
    return Submission.objects.get(pk=pk), sent[0][1][1]


def _tiny_archive(tmp_path: Path) -> Path:
    """A minimal docker-archive image (one layer, config, manifest) -- enough for the inspection."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        info = tarfile.TarInfo("hello.txt")
        info.size = 2
        t.addfile(info, io.BytesIO(b"hi"))
    import hashlib

    layer_bytes = layer.getvalue()
    diff = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["true"]},
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff}"]}}).encode()
    cid = hashlib.sha256(config).hexdigest()
    manifest = json.dumps([{"Config": f"{cid}.json", "RepoTags": ["x:latest"], "Layers": [f"{diff}/layer.tar"]}]).encode()
    out = tmp_path / "tiny.tar"
    with tarfile.open(out, "w") as t:
        for name, data in ((f"{diff}/layer.tar", layer_bytes), (f"{cid}.json", config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out


def _job(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Job {token}", HTTP_X_QVAL_WORKER="box-1")
    return client


@pytest.mark.django_db
def test_the_job_protocol_gives_inputs_without_labels_and_takes_one_result(
        api, user, remote, frozenlake, tmp_path, django_capture_on_commit_callbacks) -> None:
    sub, token = _queued_container(api, user, tmp_path, django_capture_on_commit_callbacks)
    assert sub.state == Submission.QUEUED and sub.attempt == 1
    stored = JobToken.objects.get(submission=sub)
    assert stored.token_sha256 != token and token not in stored.token_sha256  # only the hash is kept

    assert _job("forged-" + token[7:]).post(f"/api/v1/jobs/{sub.pk}/start").status_code == 403
    assert _job(token).get(f"/api/v1/jobs/{sub.pk}/input").status_code == 409  # not started yet
    other = Submission.objects.exclude(pk=sub.pk).first()
    assert other is None or _job(token).post(f"/api/v1/jobs/{other.pk}/start").status_code == 403

    resp = _job(token).post(f"/api/v1/jobs/{sub.pk}/start")
    assert resp.status_code == 200, resp.content
    spec = resp.json()
    assert (spec["split"], spec["target"], spec["attempt"], spec["archive_sha256"]) == ("dev", "q", 1, sub.sha256)
    sub.refresh_from_db()
    assert sub.state == Submission.SCORING and sub.worker == "remote:box-1" and sub.heartbeat_at is not None

    archive = _job(token).get(f"/api/v1/jobs/{sub.pk}/archive")
    assert b"".join(archive.streaming_content) == Path(sub.file.path).read_bytes()
    tar_bytes = b"".join(_job(token).get(f"/api/v1/jobs/{sub.pk}/input").streaming_content)
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        names = tar.getnames()
        points = [json.loads(x) for x in tar.extractfile("./points.jsonl").read().splitlines()]  # type: ignore[union-attr]
    assert "./context.json" in names and len(points) == sum(len(s.candidates) for s in frozenlake.states_in("dev"))
    assert not any("label" in key for p in points for key in p)
    assert _job(token).post(f"/api/v1/jobs/{sub.pk}/heartbeat").status_code == 200

    # The predictions a method would write: the actor candidates scored 1, the others 0.
    preds = "".join(json.dumps({"id": p["id"], "score": float(p["is_actor"])}) + "\n" for p in points).encode()
    run = {"error": None, "exit_code": 0, "wall_s": 1.5, "stdout": "ok\n", "stderr": "", "token_usage": {}}
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        resp = _job(token).post(f"/api/v1/jobs/{sub.pk}/result",
                                {"run": json.dumps(run), "predictions": SimpleUploadedFile("p.jsonl", preds)},
                                format="multipart")
    assert resp.status_code == 202, resp.content
    assert len(callbacks) == 1  # score_remote_run queued on commit
    # The token is spent: a reused one is refused for everything.
    again = _job(token).post(f"/api/v1/jobs/{sub.pk}/result", {"run": json.dumps(run)}, format="multipart")
    assert again.status_code == 403 and "already used" in again.json()["detail"]
    assert _job(token).post(f"/api/v1/jobs/{sub.pk}/heartbeat").status_code == 403

    assert score_remote_run(sub.pk) == Submission.FINISHED
    data = api.get(f"/api/v1/submissions/{sub.pk}/").json()
    assert data["state"] == "finished" and data["container"]["outcome"] == "finished"
    assert {r["metric"] for r in data["results"]} >= {"spearman", "ranking_spearman"}


@pytest.mark.django_db
def test_a_failed_run_and_a_platform_error_end_with_their_reason(
        api, user, remote, tmp_path, django_capture_on_commit_callbacks) -> None:
    sub, token = _queued_container(api, user, tmp_path, django_capture_on_commit_callbacks)
    assert _job(token).post(f"/api/v1/jobs/{sub.pk}/start").status_code == 200
    run = {"error": "exited with code 3", "exit_code": 3, "wall_s": 0.2, "stdout": "", "stderr": "boom\x00"}
    with django_capture_on_commit_callbacks(execute=False):
        assert _job(token).post(f"/api/v1/jobs/{sub.pk}/result", {"run": json.dumps(run)},
                                format="multipart").status_code == 202
    assert score_remote_run(sub.pk) == "failed"
    sub.refresh_from_db()
    assert (sub.state, sub.error, sub.fault, sub.exit_code) == ("failed", "exited with code 3", "user", 3)
    assert sub.stderr == "boom\ufffd"

    sub2, token2 = _queued_container(api, user, tmp_path, django_capture_on_commit_callbacks)
    _job(token2).post(f"/api/v1/jobs/{sub2.pk}/start")
    bad = _job(token2).post(f"/api/v1/jobs/{sub2.pk}/result", {"run": json.dumps({"exit_code": "3"})}, format="multipart")
    assert bad.status_code == 400 and "exit_code" in bad.json()["detail"]
    # A worker that cannot run the job: requeued once with a new token, then failed as ours.
    from qval_site.celery import app

    sent: list = []
    original = app.send_task
    app.send_task = lambda name, args, queue: sent.append(args)  # type: ignore[method-assign]
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert _job(token2).post(f"/api/v1/jobs/{sub2.pk}/result",
                                     {"run": json.dumps({"platform_error": "no podman"})},
                                     format="multipart").status_code == 202
    finally:
        app.send_task = original  # type: ignore[method-assign]
    sub2.refresh_from_db()
    assert (sub2.state, sub2.attempt) == ("queued", 2)
    [(_, token3)] = sent
    _job(token3).post(f"/api/v1/jobs/{sub2.pk}/start")
    assert _job(token3).post(f"/api/v1/jobs/{sub2.pk}/result", {"run": json.dumps({"platform_error": "no podman"})},
                             format="multipart").status_code == 202
    sub2.refresh_from_db()
    assert sub2.state == "failed" and sub2.fault == "system" and "internal error" in sub2.error


@pytest.mark.django_db
def test_a_lost_job_is_requeued_once_with_a_new_token_then_failed(
        api, user, remote, tmp_path, django_capture_on_commit_callbacks) -> None:
    sub, token = _queued_container(api, user, tmp_path, django_capture_on_commit_callbacks)
    _job(token).post(f"/api/v1/jobs/{sub.pk}/start")
    stale = timezone.now() - timedelta(seconds=remote.QVAL_HEARTBEAT_STALE_S + 1)
    Submission.objects.filter(pk=sub.pk).update(heartbeat_at=stale)
    from qval_site.celery import app

    sent: list = []
    original = app.send_task
    app.send_task = lambda name, args, queue: sent.append(args)  # type: ignore[method-assign]
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert lifecycle.JOB.reap_lost() == [sub.pk]
    finally:
        app.send_task = original  # type: ignore[method-assign]
    sub.refresh_from_db()
    assert (sub.state, sub.attempt) == ("queued", 2)
    [(pk, token2)] = sent
    assert pk == sub.pk and token2 != token
    refused = _job(token).post(f"/api/v1/jobs/{sub.pk}/start")  # the first attempt's token is dead
    assert refused.status_code == 403 and "earlier attempt" in refused.json()["detail"]
    assert _job(token2).post(f"/api/v1/jobs/{sub.pk}/start").status_code == 200

    Submission.objects.filter(pk=sub.pk).update(heartbeat_at=stale)
    assert lifecycle.JOB.reap_lost() == [sub.pk]
    sub.refresh_from_db()
    assert sub.state == "failed" and sub.fault == "system" and "stopped responding twice" in sub.error
    assert _job(token2).post(f"/api/v1/jobs/{sub.pk}/heartbeat").status_code == 409


@pytest.mark.django_db
def test_an_expired_token_is_refused(api, user, remote, tmp_path, django_capture_on_commit_callbacks) -> None:
    sub, token = _queued_container(api, user, tmp_path, django_capture_on_commit_callbacks)
    JobToken.objects.filter(submission=sub).update(expires_at=timezone.now() - timedelta(seconds=1))
    resp = _job(token).post(f"/api/v1/jobs/{sub.pk}/start")
    assert resp.status_code == 403 and "expired" in resp.json()["detail"]


@pytest.mark.django_db
def test_the_status_page_shows_queues_jobs_workers_and_platform_failures(client, remote, user, loaded) -> None:
    worker = APIClient()
    assert worker.post("/api/v1/workers/heartbeat", {"name": "gpu-box-7"}, format="json").status_code == 403
    worker.credentials(HTTP_AUTHORIZATION="Worker worker-key-for-tests")
    assert worker.post("/api/v1/workers/heartbeat", {"name": "gpu-box-7", "queues": "remote"},
                       format="json").status_code == 200
    now = timezone.now()
    running = Submission.objects.create(user=user, dataset=loaded, split="test", target="q", method_name="secret-m",
                                        filename="f.csv", state="scoring", scoring_at=now, heartbeat_at=now,
                                        worker="remote:gpu-box-7", attempt=1, deadline=now + timedelta(days=2))
    Submission.objects.create(user=user, dataset=loaded, split="dev", target="q", method_name="m", filename="g.csv",
                              state="failed", failed_at=now, fault="system", error="timed out in the queue")
    Submission.objects.create(user=user, dataset=loaded, split="dev", target="q", method_name="m", filename="h.csv",
                              state="failed", failed_at=now, fault="user", error="invalid predictions file: row 3")
    data = client.get("/api/v1/status/").json()
    assert set(data["queues"]) == {"scoring", "containers", "gpu", "remote", "campaign", "datasets"}
    assert all(isinstance(n, int) for n in data["queues"].values())  # the test Redis answered
    assert data["waiting"]["scoring"] == 1
    assert [r["submission"] for r in data["running"]] == [running.pk]
    assert [(w["name"], w["kind"], w["alive"]) for w in data["workers"]] == [("gpu-box-7", "remote", True)]
    assert [f["reason"] for f in data["recent_failures"]] == ["timed out in the queue"]
    page = client.get("/status/").content.decode()
    assert "gpu-box-7" in page and f"#{running.pk}" in page and "timed out in the queue" in page
    # a deadline two days off is dated, so it never reads as a time before the job started
    assert timezone.localtime(running.deadline).strftime("<td>%Y-%m-%d %H:%M</td>") in page
    assert "secret-m" not in page and "row 3" not in page and "ada" not in page  # no user, method or user error
    WorkerHeartbeat.objects.update(last_seen=now - timedelta(minutes=10))
    assert client.get("/api/v1/status/").json()["workers"][0]["alive"] is False


def test_the_remote_worker_module_loads_no_django_settings_or_database() -> None:
    # kombu imports django.utils.functional when Django is installed; settings, the ORM and the site never load.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE", "DJANGO"))}
    code = ("import sys, qval.remote_worker; "
            "bad = [m for m in sys.modules if m.startswith(('django.conf', 'django.db', 'qval_site', 'workers', "
            "'submissions', 'leaderboard', 'psycopg'))]; assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
@pytest.mark.worker
@pytest.mark.container
def test_a_remote_worker_without_database_settings_runs_the_starter_kit(frozenlake, data_dir, engine, tmp_path,
                                                                        request) -> None:
    import requests

    from tests.stack import Stack
    from tests.test_container_submissions import RESAMPLES, assert_results_match, expected_rows
    from tests.test_faults import FAST, dataset_dir

    archive = request.getfixturevalue("kit_tar")
    key = "remote-key"
    stack = Stack(tmp_path / "stack", 18830, env={**FAST, "QVAL_BOOTSTRAP_RESAMPLES": str(RESAMPLES),
                                                  "QVAL_GPU_WORKERS": "remote", "QVAL_WORKER_KEY": key,
                                                  "QVAL_CONTAINER_WORK_ROOT": str(engine.work_root)})
    try:
        stack.start(dataset_dir(frozenlake, data_dir))
        token = stack.token("remote-user")
        worker = stack.start_remote_worker("gpu-far", key)
        environ = Path(f"/proc/{worker.pid}/environ").read_bytes().split(b"\0")
        assert not any(e.startswith((b"DATABASE", b"DJANGO", b"PG")) for e in environ)
        resp = stack.upload(token, archive.read_bytes(), filename="kit.tar", kind="container", backbone="none",
                            method_name="manhattan")
        assert resp.status_code == 201, resp.text
        pk = resp.json()["submissions"][0]["id"]
        forged = requests.post(f"{stack.url}/api/v1/jobs/{pk}/start", headers={"Authorization": "Job forged"})
        assert forged.status_code == 403
        data = stack.wait_final(token, pk, timeout=300)
        assert data["state"] == "finished", (data, stack.log("gpu-far")[-3000:])
        assert data["worker"] == "remote:gpu-far" and data["attempt"] == 1
        assert data["container"]["outcome"] == "finished"
        assert_results_match(data["results"], expected_rows(frozenlake, "dev", tmp_path))
        # The same archive again: its image is cached on the worker, so it is not downloaded again.
        cached_before = stack.log("gpu-far").count("cached, not fetched")
        again = stack.upload(token, archive.read_bytes(), filename="kit.tar", kind="container", backbone="none",
                             method_name="manhattan-again").json()["submissions"][0]["id"]
        assert stack.wait_final(token, again, timeout=300)["state"] == "finished"
        assert stack.log("gpu-far").count("cached, not fetched") == cached_before + 1
        workers = requests.get(f"{stack.url}/api/v1/status/").json()["workers"]
        assert [(w["name"], w["kind"], w["alive"]) for w in workers if w["kind"] == "remote"] == [("gpu-far", "remote", True)]
    finally:
        stack.close()
    assert not any(engine.work_root.iterdir())


def test_importing_the_remote_worker_leaves_the_sites_app_current() -> None:
    """The site sends its tasks by name through ``celery.current_app``; the remote worker's own app (another
    broker) must not become current in a process that imports it (the CLI, a test session): the site's
    messages would go to the remote app's broker."""
    from celery import current_app

    import qval.remote_worker  # noqa: F401 - imported for its app's effect, if any
    from qval_site.celery import app

    assert current_app._get_current_object() is app

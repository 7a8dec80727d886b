"""Operations: health and readiness endpoints, structured logs, the fast CLI, the image cache."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from django.core.management import CommandError, call_command

from qval import cli
from qval import containers as qc
from qval_site import logs
from tests.conftest import REPO

DOWN_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@pytest.fixture
def broker_down(monkeypatch: pytest.MonkeyPatch) -> None:
    from qval_site.celery import app

    # configuration first: Celery's broker_url reads the environment variable before it, so the
    # value monkeypatch saves (and restores) must be read before the variable is set
    monkeypatch.setattr(app.conf, "broker_url", DOWN_BROKER)
    monkeypatch.setenv("CELERY_BROKER_URL", DOWN_BROKER)


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
    call_command("wait_ready", "--timeout", "10", "--migrated", stdout=out)
    assert out.getvalue().strip() == "ready: database, broker, migrations ok"


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


# -- the image cache of method containers ---------------------------------------------------------
@pytest.fixture(scope="module")
def hello_tar(engine, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """A tiny method image on the base image (writes an empty predictions file), saved as an archive."""
    context = tmp_path_factory.mktemp("hello-image")
    (context / "Containerfile").write_text(
        f'FROM {base_image}\nCMD ["python3", "-c", "open(\'/output/predictions.jsonl\', \'w\').close()"]\n')
    tag = f"localhost/qval-test-hello:{os.getpid()}-{time.monotonic_ns()}"
    built = engine.call("build", "-q", "-t", tag, str(context))
    assert built.returncode == 0, built.stderr
    saved = engine.call("save", "-o", str(context / "hello.tar"), tag)
    engine.call("rmi", tag)
    assert saved.returncode == 0, saved.stderr
    return context / "hello.tar"


def _images_in(engine: qc.Engine, job_dir: Path, image_store: Path | None = None) -> list[str]:
    """Image IDs podman sees from a job directory's own store, plus ``image_store`` when given."""
    extra = ["--storage-opt", f"additionalimagestore={image_store}"] if image_store else []
    done = subprocess.run(["podman", "--root", str(job_dir / "store"), "--runroot", str(job_dir / "run"), *extra,
                           "images", "-q", "--no-trunc"], capture_output=True, text=True, check=True,
                          env={**os.environ, "CONTAINERS_CONF": str(engine.conf)})
    return [x.removeprefix("sha256:") for x in done.stdout.split()]


@pytest.mark.slow
@pytest.mark.container
def test_an_archive_is_loaded_once_into_a_read_only_store_its_jobs_share(engine, hello_tar, tmp_path) -> None:
    eng = dataclasses.replace(engine, image_cache=tmp_path / "images")
    cache = eng.images
    first = qc.Job(eng)
    image_id = first.load(hello_tar)
    store = cache.store(image_id)
    probe = Path(tempfile.mkdtemp(prefix="qvp", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    assert _images_in(eng, probe, store) == [image_id]  # the cached store holds the image
    assert _images_in(eng, first.dir) == []  # the job's own store stays empty
    loaded_at = store.stat().st_ino, (store.parent / "ready").stat().st_ino

    # A rerun from another copy of the archive: found by its SHA-256, not loaded again.
    copy = tmp_path / "again.tar"
    shutil.copyfile(hello_tar, copy)
    second = qc.Job(eng)
    assert second.load(copy) == image_id
    assert (cache.root / "archives" / qc.file_sha256(copy)).read_text() == image_id
    assert (store.stat().st_ino, (store.parent / "ready").stat().st_ino) == loaded_at
    for job in (first, second):  # both run from the shared store at once
        (job.dir / "input" / "points.jsonl").write_text("")
        result = job.run(image_id, qc.Limits(timeout_s=60))
        assert result.exit_code == 0 and result.error is None, result.stderr
    first.close()
    second.close()
    assert list(eng.work_root.iterdir()) == [] and _images_in(eng, probe, store) == [image_id]
    shutil.rmtree(probe)

    # A worker told only the archive's SHA-256 (a remote rerun) runs the cached image without the archive;
    # an unknown hash, or a malformed one, is not found.
    with qc.Job(eng) as third:
        assert third.load_cached("0" * 64) is None and third.load_cached("../" + image_id) is None
        assert third.load_cached(qc.file_sha256(hello_tar)) == image_id
        (third.dir / "input" / "points.jsonl").write_text("")
        result = third.run(image_id, qc.Limits(timeout_s=60))
        assert result.exit_code == 0 and result.error is None, result.stderr

    # A store whose load never finished (no ready mark) is loaded again, from scratch (a file left in
    # the half-loaded store is gone; inode numbers alone can be reused by the new folder).
    (store.parent / "ready").unlink()
    (store / "left-by-a-dead-load").write_text("x")
    with qc.Job(eng) as job:
        assert job.load(hello_tar) == image_id
        assert not (store / "left-by-a-dead-load").exists() and (store.parent / "ready").exists()

        # Unused for longer than image_cache_days: pruned by the sweep, but never while a job holds it.
        old = time.time() - (eng.image_cache_days + 1) * 86400
        os.utime(store.parent / "ready", (old, old))
        assert cache.prune() == []
    assert f"image {image_id}" in qc.sweep(eng)
    assert not store.parent.exists() and list((cache.root / "archives").iterdir()) == []


def test_the_site_image_copies_every_local_app_of_the_site() -> None:
    """A Django app missing from the compose image kills every service at start (as ``learning`` once did)."""
    from django.conf import settings

    copied = {line.split()[1] for line in (REPO / "containers" / "site.Containerfile").read_text().splitlines()
              if line.startswith("COPY ")}
    local = {app.split(".")[0] for app in settings.INSTALLED_APPS if (REPO / app.split(".")[0]).is_dir()}
    assert local and local - copied == set()


SITE_WITHOUT_ML = """
import importlib.abc, sys
ML = {"torch", "transformers", "open_clip", "alfworld", "textworld", "browsergym", "playwright", "openai"}
class NoML(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ML:
            raise ImportError(f"{name} is not in the site image")
sys.meta_path.insert(0, NoML())
import django
django.setup()
from django.test import Client
client = Client()
for url in sys.argv[1:]:
    print(url, client.get(url, HTTP_HOST="127.0.0.1").status_code)
"""


@pytest.mark.django_db(transaction=True)
def test_the_site_serves_its_pages_without_the_ml_packages() -> None:
    """The compose image installs requirements-site.txt only (no torch, transformers, environments):
    every page must import and answer without them."""
    from django.db import connection

    urls = ["/", "/leaderboard/", "/learned/", "/best-of-n/", "/status/", "/readyz",
            "/figures/per-family/", "/leaderboard/critical-difference/", "/datasets/", "/how-we-score/",
            "/api/v1/leaderboard/"]
    env = {**os.environ, "DATABASE_URL": "postgres://{USER}@{HOST}:{PORT}/{NAME}".format(**connection.settings_dict),
           "DJANGO_SETTINGS_MODULE": "qval_site.settings"}
    done = subprocess.run([sys.executable, "-c", SITE_WITHOUT_ML, *urls], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    codes = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines() if line.startswith("/"))
    assert set(codes) == set(urls) and all(code in ("200", "302") for code in codes.values()), \
        (codes, done.stderr[-3000:])


# -- the compose stack ----------------------------------------------------------------------------
COMPOSE_PORT = 18651


def _compose(checkout: Path, project: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    compose = Path(sys.executable).with_name("podman-compose")
    return subprocess.run([str(compose), "-p", project, *args], cwd=checkout, capture_output=True, text=True,
                          timeout=timeout, check=False,
                          env={**os.environ, "CONTAINERS_CONF": str(REPO / "containers" / "containers.conf")})


@pytest.fixture
def compose_stack(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The compose stack brought up with podman-compose from a copy of the checkout (tracked and
    untracked, not ignored files: no build/, var/ or .venv), torn down with its volumes after the test."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/install.sh installs it as root)")
    checkout = tmp_path / "checkout"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, checkout / name)
    env = (checkout / ".env.example").read_text()
    (checkout / ".env").write_text(env + f"POSTGRES_PASSWORD=pw-{os.getpid()}\nSECRET_KEY=test-{time.time_ns()}\n"
                                   f"QVAL_HTTP_PORT={COMPOSE_PORT}\nQVAL_BOOTSTRAP_RESAMPLES=50\n")
    start = time.monotonic()
    built = subprocess.run([str(checkout / "scripts" / "build-images.sh")], cwd=checkout, capture_output=True,
                           text=True, check=False, env={**os.environ, "PYTHON": sys.executable})
    assert built.returncode == 0, built.stdout + built.stderr
    build_s = time.monotonic() - start
    project = f"qvaltest{os.getpid()}"
    try:
        up = _compose(checkout, project, "up", "-d")
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        yield checkout, project, f"http://127.0.0.1:{COMPOSE_PORT}"
        print(f"compose: images built in {build_s:.0f} s ({built.stdout.strip()}); stack up in "
              f"{time.monotonic() - start - build_s:.0f} s")
    finally:
        logs_out = _compose(checkout, project, "logs", timeout=120)
        (REPO / "test-artifacts").mkdir(exist_ok=True)
        (REPO / "test-artifacts" / "compose.log").write_text(logs_out.stdout[-200_000:] + logs_out.stderr[-20_000:])
        _compose(checkout, project, "down", "-v", "-t", "10", timeout=300)


@pytest.mark.slow
@pytest.mark.compose
def test_the_compose_stack_scores_an_upload_through_its_api(compose_stack) -> None:
    import requests
    from scipy import stats

    checkout, project, url = compose_stack
    deadline = time.monotonic() + 600
    ready = None
    while time.monotonic() < deadline:
        try:
            ready = requests.get(f"{url}/readyz", timeout=5)
            if ready.status_code == 200 and requests.get(f"{url}/api/v1/datasets/", timeout=10).json():
                break
        except requests.RequestException:
            pass
        time.sleep(2)
    assert ready is not None and ready.status_code == 200, "the compose stack never became ready"
    assert requests.get(f"{url}/healthz", timeout=5).json() == {"status": "ok"}

    issued = _compose(checkout, project, "exec", "-T", "web", "python", "manage.py", "issue_token",
                      "--username", "compose", timeout=120)
    assert issued.returncode == 0, issued.stderr
    headers = {"Authorization": f"Token {issued.stdout.strip().splitlines()[-1]}"}
    dev = pd.read_parquet(io.BytesIO(requests.get(f"{url}/api/v1/datasets/frozenlake-8x8/download/",
                                                  params={"split": "dev", "format": "parquet"}, timeout=60).content))
    actors = dev[dev.is_actor]
    scores = actors.q_label.to_numpy() + np.random.default_rng(2).normal(0, 0.2, len(actors))
    body = pd.DataFrame({"id": actors.candidate_id, "score": scores}).to_csv(index=False).encode()
    resp = requests.post(f"{url}/api/v1/submissions/", headers=headers, timeout=60,
                         files={"file": ("p.csv", body)},
                         data={"dataset": "frozenlake-8x8", "split": "dev", "target": "q", "method_name": "compose"})
    assert resp.status_code == 201, resp.text
    sub_id = resp.json()["id"]
    while time.monotonic() < deadline:
        sub = requests.get(f"{url}/api/v1/submissions/{sub_id}/", headers=headers, timeout=30).json()
        if sub["final"]:
            break
        time.sleep(0.5)
    assert sub["state"] == "finished", sub
    assert sub["worker"].startswith("scoring@")
    rho = {r["metric"]: r["value"] for r in sub["results"]}["spearman"]
    assert rho == pytest.approx(stats.spearmanr(actors.q_label, scores).statistic, abs=1e-9)

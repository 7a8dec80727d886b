"""Method containers submitted to the site: upload checks, the ``gpu`` task, the reaper and the
sweep at worker start, with real podman, real PostgreSQL (and, in the slow test, a real Celery
worker process and Redis).

Expected results are computed here: the starter kit's own heuristic (examples/method-container/
method.py, imported) is applied to the split's inputs and scored with :func:`qval.scoring.score`
against the dataset's labels, independently of the site's pipeline.
"""

from __future__ import annotations

import importlib.util
import io
import tarfile
import json
import os
import subprocess
import uuid
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone

from qval import containers as qc
from qval import schema
from qval.schema import PUBLIC_SPLITS
from qval.scoring import disclose, score, truth_from_dataset
from qval.envs import registry
from submissions import lifecycle
from submissions.lifecycle import fail, finish
from submissions.models import Submission
from tests.conftest import REPO, wait_for, worker_process
from workers.tasks import inspect_container_upload, run_container_submission

pytestmark = pytest.mark.container

SESSION = uuid.uuid4().hex[:8]
RESAMPLES = 200
KEY = "{0.slug}@{0.version}".format(registry.BUILDERS["frozenlake"]()[1])
FAILING_METHOD = """import sys
print("reading /input")
sys.stderr.write("Traceback: <b>model weights</b> not found\\n" * 5000)
sys.stderr.write("the last line of stderr\\n")
sys.exit(3)
"""


# -- fixtures ------------------------------------------------------------------------------
def _saved_image(engine: qc.Engine, context: Path, tag: str, out: Path) -> Path:
    built = engine.call("build", "-q", "-t", tag, str(context))
    assert built.returncode == 0, built.stderr
    saved = engine.call("save", "-o", str(out), tag)
    engine.call("rmi", tag)
    assert saved.returncode == 0, saved.stderr
    return out


@pytest.fixture(scope="session")
def kit_tar(engine: qc.Engine, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The starter kit (examples/method-container) saved as the archive a submitter uploads."""
    out = tmp_path_factory.mktemp("kit") / "kit.tar"
    return _saved_image(engine, REPO / "examples" / "method-container", f"localhost/qval-test-kit-site:{SESSION}", out)


@pytest.fixture(scope="session")
def failing_tar(engine: qc.Engine, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A method that writes a long stderr (with HTML in it) and exits with code 3, gzip-compressed."""
    context = tmp_path_factory.mktemp("failing")
    (context / "method.py").write_text(FAILING_METHOD)
    (context / "Containerfile").write_text(f'FROM {base_image}\nCOPY method.py /method.py\nCMD ["python3", "/method.py"]\n')
    tar = _saved_image(engine, context, f"localhost/qval-test-failing:{SESSION}", context / "failing.tar")
    gz = context / "failing.tar.gz"
    subprocess.run(["gzip", "-1", "-k", str(tar)], check=True)
    return gz


@pytest.fixture
def site(settings, engine: qc.Engine, loaded):  # type: ignore[no-untyped-def]
    """The site's container settings pointed at the test engine's work root."""
    settings.QVAL_CONTAINER_WORK_ROOT = engine.work_root
    settings.QVAL_BOOTSTRAP_RESAMPLES = RESAMPLES
    settings.QVAL_CONTAINER_LIMITS = {**settings.QVAL_CONTAINER_LIMITS, "timeout_s": 120.0, "memory_mb": 512}
    yield settings
    assert list(engine.work_root.iterdir()) == [], "a job directory was left behind"
    assert qc._mounts_under(engine.work_root) == []


def submit(api, archive: Path, name: str = "kit.tar", status: int = 201, **fields: str) -> dict:  # type: ignore[no-untyped-def]
    """POST a container archive (answered ``received``), run the real inspection task on it in-process
    as the gpu worker would, and return the body with the submissions as the API then shows them."""
    data = {"kind": "container", "dataset": "frozenlake-8x8", "split": "dev", "target": "q",
            "method_name": "manhattan", "backbone": "none", "description": "Manhattan distance to the goal.", **fields}
    data["file"] = SimpleUploadedFile(name, archive.read_bytes())
    resp = api.post("/api/v1/submissions/", data, format="multipart")
    assert resp.status_code == status, resp.content
    body = resp.json()
    if status != 201:
        return body
    received = [s["id"] for s in body["submissions"] if s["state"] == Submission.RECEIVED]
    if received:
        inspect_container_upload(received)
    return {"submissions": [api.get(f"/api/v1/submissions/{s['id']}/").json() for s in body["submissions"]]}


def expected_rows(ds: schema.Dataset, split: str, tmp_path: Path) -> dict[str, object]:
    """The starter kit's heuristic on ``split``, scored here: ``{metric: MetricRow}``."""
    spec = importlib.util.spec_from_file_location("kit_method", REPO / "examples" / "method-container" / "method.py")
    method = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(method)  # type: ignore[union-attr]
    folder = qc.write_input(ds, split, "q", tmp_path / f"input-{split}")
    discount = json.loads((folder / "context.json").read_text())["discount"]
    points = [json.loads(line) for line in (folder / "points.jsonl").read_text().splitlines()]
    ids = np.array([p["id"] for p in points], dtype=object)
    scores = np.array([method.value(p["state"], p["next_state"], discount) for p in points], dtype=np.float64)
    rows = score(truth_from_dataset(ds, split, "q"), ids, scores, bootstrap_resamples=RESAMPLES)
    return {r.metric: r for r in disclose(rows, hidden=split not in PUBLIC_SPLITS)}  # as the site shows them


def assert_results_match(results: list[dict], expected: dict[str, object]) -> None:
    got = {r["metric"]: r for r in results}
    assert set(got) == set(expected)
    assert {"spearman", "kendall_tau", "ranking_spearman", "top1_accuracy"} <= set(got)
    for metric, row in expected.items():
        assert got[metric]["value"] == pytest.approx(row.value, abs=1e-12), metric
        assert got[metric]["p_value"] == pytest.approx(row.p_value, abs=1e-12), metric
        assert got[metric]["num_points"] == row.num_points, metric
        assert got[metric]["details"].get("ci95") == pytest.approx(row.details.get("ci95"), abs=1e-12), metric


# -- the starter kit, dev and test, the task called in-process --------------------------------
@pytest.mark.django_db
def test_the_starter_kit_finishes_on_dev_and_test(api, site, kit_tar, frozenlake, tmp_path) -> None:
    body = submit(api, kit_tar, split="dev,test")
    subs = body["submissions"]
    assert [(s["split"], s["kind"], s["state"]) for s in subs] == [("dev", "container", "queued"),
                                                                 ("test", "container", "queued")]
    image_id = subs[0]["container"]["image_id"]
    assert len(image_id) == 64 and subs[1]["container"]["image_id"] == image_id
    assert subs[0]["sha256"] == subs[1]["sha256"] and subs[0]["format"] == "image-archive"
    stored = {Submission.objects.get(pk=s["id"]).file.name for s in subs}
    assert len(stored) == 1  # one archive shared by both
    assert subs[0]["container"]["deadline"] is not None

    for sub in subs:
        assert run_container_submission(sub["id"]) == Submission.FINISHED
        data = api.get(f"/api/v1/submissions/{sub['id']}/").json()
        assert data["state"] == "finished", data
        assert list(data["timeline"]) == ["received", "validating", "queued", "scoring", "finished"]
        run = data["container"]
        assert (run["outcome"], run["exit_code"]) == ("finished", 0)
        num_candidates = sum(len(s.candidates) for s in frozenlake.states_in(sub["split"]))
        assert run["stdout"] == f"scored {num_candidates} points of {KEY} ({sub['split']}, target q)\n"
        assert run["limits"]["timeout_s"] == 120.0 and run["limits"]["memory_mb"] == 512
        assert data["coverage"]["provided"] == data["coverage"]["expected"] == len(frozenlake.point_ids(sub["split"], "q"))
        assert_results_match(data["results"], expected_rows(frozenlake, sub["split"], tmp_path))

    board = api.get("/api/v1/leaderboard/", {"dataset": "frozenlake-8x8"}).json()["results"]
    assert sorted((r["method"], r["split"]) for r in board) == [("manhattan", "test")]  # dev: a private self-check

    api.force_login(Submission.objects.get(pk=subs[1]["id"]).user)
    page = api.get(f"/submissions/{subs[1]['id']}/").content.decode()
    assert 'id="kind">method container<' in page and 'id="container-outcome">finished<' in page
    assert '<pre id="stdout" class="log">scored' in page and 'id="results"' in page

    # Compare works on what the containers wrote (never their archives): the kit again, A vs B.
    again = submit(api, kit_tar, method_name="manhattan-again")["submissions"][0]
    assert run_container_submission(again["id"]) == Submission.FINISHED
    compared = api.get("/api/v1/compare/", {"a": subs[0]["id"], "b": again["id"]})
    assert compared.status_code == 200, compared.content
    spearman = {m["metric"]: m for m in compared.json()["metrics"]}["spearman"]
    assert spearman["difference"] == 0.0 and spearman["num_points"] == len(frozenlake.point_ids("dev", "q"))
    assert spearman["rho_a"] == pytest.approx(expected_rows(frozenlake, "dev", tmp_path)["spearman"].value, abs=1e-12)


@pytest.mark.django_db
@pytest.mark.slow
def test_a_backbone_container_is_served_its_model_within_the_budget(api, user, site, backbone_kit_tar, tiny_model,
                                                                   frozenlake) -> None:
    site.QVAL_BACKBONES = {"tiny-llama": {"kind": "transformers", "path": str(tiny_model), "token_budget": 2000}}
    refused = submit(api, backbone_kit_tar, status=400, backbone="gpt-9", method_name="yes-no")
    assert refused["errors"] == {
        "backbone": ["backbone 'gpt-9' is not served to containers here; choose one of ['tiny-llama'] or 'none'"]}
    assert not Submission.objects.filter(method_name="yes-no").exists()

    sub = submit(api, backbone_kit_tar, backbone="tiny-llama", method_name="yes-no")["submissions"][0]
    assert run_container_submission(sub["id"]) == Submission.FINISHED
    data = api.get(f"/api/v1/submissions/{sub['id']}/").json()
    tokens = data["container"]["backbone_tokens"]
    points = sum(len(s.candidates) for s in frozenlake.states_in("dev"))
    asked = tokens["requests"] - tokens["refused"]
    assert tokens["budget"] == 2000 and 0 < tokens["total_tokens"] <= 2000
    assert tokens["refused"] == 1 and 0 < asked < points  # the method stopped at the first 429
    assert data["container"]["stdout"] == (f"asked the backbone about {asked} points; {points - asked} scored 0 after "
                                           "the token budget ran out\n")
    assert data["backbone"] == "tiny-llama" and data["results"]
    api.force_login(user)
    page = api.get(f"/submissions/{sub['id']}/").content.decode()
    assert f"{tokens['total_tokens']} of 2000 tokens" in page and "1 refused over the budget" in page

    # The method without a backbone: no socket in its sandbox, so it exits 1 saying so.
    sub = submit(api, backbone_kit_tar, backbone="none", method_name="yes-no")["submissions"][0]
    assert run_container_submission(sub["id"]) == Submission.FAILED
    data = api.get(f"/api/v1/submissions/{sub['id']}/").json()
    assert data["error"] == "exited with code 1" and "no backbone" in data["container"]["stderr"]
    assert data["container"]["backbone_tokens"] is None


@pytest.mark.slow
def test_run_container_by_slug_downloads_the_split_like_the_worker_sees_it(live_server, loaded, engine, kit_tar, frozenlake,
                                                                           tmp_path, capsys, monkeypatch) -> None:
    """`qval run-container IMAGE --dataset SLUG`: the split, its labels and its images come from the site;
    the numbers equal those of the same run on the dataset's own files."""
    from qval import cli

    monkeypatch.setenv("QVAL_SERVER", live_server.url)
    monkeypatch.setenv("QVAL_CONTAINER_WORK_ROOT", str(engine.work_root))
    remote = cli.remote_split(live_server.url, "frozenlake-8x8", "dev")
    assert remote.manifest.key == KEY and remote.states == frozenlake.states_in("dev")
    assert {k: remote.q_labels[k] for k in remote.q_labels} == {c.id: frozenlake.q_labels[c.id]
                                                               for s in remote.states for c in s.candidates}
    names = {s.image for s in remote.states} | {c.next_image for s in remote.states for c in s.candidates}
    assert names and all(remote.images[n] == frozenlake.images[n] for n in names)  # the PNGs, byte for byte

    results = []
    for dataset in ("frozenlake-8x8", str(frozenlake_dir(frozenlake))):
        code = cli.main(["run-container", str(kit_tar), "--dataset", dataset, "--split", "dev", "--bootstrap", "0",
                         "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        results.append({r["metric"]: r["value"] for r in json.loads(out)})
    assert results[0] == results[1] and results[0]["spearman"] > 0.5
    code = cli.main(["run-container", str(kit_tar), "--dataset", "no-such-set", "--split", "dev"])
    assert code == 1 and f"'no-such-set' is neither a dataset directory nor a dataset of {live_server.url}" in capsys.readouterr().err


def frozenlake_dir(ds: schema.Dataset) -> Path:
    """Where the session's FrozenLake build lives (tests/conftest.py)."""
    from django.conf import settings

    return Path(settings.QVAL_DATASETS_DIR) / f"{ds.manifest.slug}-{ds.manifest.version}"


# -- failures ----------------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_container_exiting_3_fails_with_its_stderr_on_the_page(api, user, site, failing_tar) -> None:
    sub = submit(api, failing_tar, name="failing.tar.gz")["submissions"][0]
    assert sub["state"] == "queued"
    assert run_container_submission(sub["id"]) == Submission.FAILED
    data = api.get(f"/api/v1/submissions/{sub['id']}/").json()
    assert (data["state"], data["error"], data["fault"]) == ("failed", "exited with code 3", "user")
    assert data["container"]["outcome"] == "exited with code 3" and data["container"]["exit_code"] == 3
    assert data["container"]["stdout"] == "reading /input\n"
    stderr = data["container"]["stderr"]
    assert stderr.startswith("Traceback: <b>model weights</b> not found\n")
    assert stderr.endswith("not found\nthe last line of stderr\n") and "bytes left out ...]" in stderr
    assert data["results"] == []

    api.force_login(user)
    page = api.get(f"/submissions/{sub['id']}/").content.decode()
    assert "<strong>Failed:</strong> exited with code 3" in page
    assert "the last line of stderr" in page
    assert "Traceback: &lt;b&gt;model weights&lt;/b&gt; not found" in page and "<b>model weights</b>" not in page


@pytest.mark.django_db
def test_bad_archives_and_requests_are_rejected_at_upload(api, user, loaded, settings, tmp_path) -> None:
    text = tmp_path / "notes.tar"
    text.write_bytes(b"not an image\n" * 100)
    sub = submit(api, text, name="notes.tar")["submissions"][0]
    assert (sub["state"], sub["fault"]) == ("failed", "user")
    assert sub["error"].startswith("invalid container archive: the file is not a tar archive")
    assert [p["code"] for p in sub["problems"]] == ["archive_rejected"]
    assert "podman save IMAGE -o method.tar" in sub["problems"][0]["message"]
    assert list(sub["timeline"]) == ["received", "validating", "failed"] and sub["container"]["image_id"] is None

    oci = tmp_path / "oci.tar"
    with tarfile.open(oci, "w") as tar:
        for name, data in {"index.json": b"{}", "oci-layout": b"{}"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    sub = submit(api, oci, name="oci.tar")["submissions"][0]
    assert "the archive has no manifest.json, so it is not a docker-archive image" in sub["error"]

    settings.QVAL_MAX_CONTAINER_BYTES = 1000
    subs = submit(api, text, name="notes.tar", split="dev,test")["submissions"]
    assert [(s["split"], s["state"]) for s in subs] == [("dev", "failed"), ("test", "failed")]
    assert subs[0]["problems"] == [{"code": "too_large", "message": "the archive is 0.0 MiB; the limit is 0 MiB", "rows": []}]

    before = Submission.objects.count()
    errors = submit(api, text, dataset="no-such-dataset", status=404)["errors"]
    assert "unknown dataset 'no-such-dataset'" in errors["dataset"][0]
    assert f"dataset {KEY} has no split 'val'" in submit(api, text, split="dev,val", status=400)["errors"]["split"][0]
    assert "unknown kind 'vm'" in submit(api, text, kind="vm", status=400)["errors"]["kind"][0]
    assert Submission.objects.count() == before  # a bad request creates nothing, not even for its good parts

    # The test-split quota as for files: the failed test upload above was the user's fault and counts.
    settings.QVAL_TEST_QUOTA_PER_DAY = 1
    errors = submit(api, text, split="test", status=429)["errors"]
    assert errors["split"][0].startswith("daily test-split quota reached: 1 of 1 submissions")
    assert Submission.objects.count() == before
    # Dev is unlimited; two names of one dataset give one submission.
    subs = submit(api, text, split="dev", dataset=f"frozenlake-8x8,{KEY}")["submissions"]
    assert [(s["dataset"], s["split"]) for s in subs] == [(KEY, "dev")]


@pytest.mark.django_db
def test_the_upload_page_takes_a_container(client, user, loaded, tmp_path) -> None:
    client.force_login(user)
    assert 'value="container"' in client.get("/submit/").content.decode()
    resp = client.post("/submit/", {"kind": "container", "dataset": KEY, "split": "dev", "target": "q",
                                    "method_name": "form", "modality": "text",
                                    "file": SimpleUploadedFile("m.tar", b"not an image")})
    assert resp.status_code == 302
    sub = Submission.objects.get(method_name="form")
    assert sub.state == Submission.RECEIVED  # the request only stored it
    inspect_container_upload([sub.pk])
    sub.refresh_from_db()
    assert (sub.kind, sub.state, sub.problems[0]["code"]) == ("container", "failed", "archive_rejected")
    page = client.get(resp["Location"]).content.decode()
    assert 'id="kind">method container<' in page and "invalid container archive: the file is not a tar archive" in page
    assert 'id="stdout"' not in page  # it never ran


# -- deadlines -----------------------------------------------------------------------------------
def _queued(user, loaded, split: str = "dev", minutes: float = -1) -> Submission:  # type: ignore[no-untyped-def]
    sub = Submission.objects.create(user=user, kind=Submission.KIND_CONTAINER, dataset=loaded, split=split,
                                    target="q", method_name="stuck", filename="stuck.tar",
                                    deadline=timezone.now() + timedelta(minutes=minutes))
    sub.transition(Submission.VALIDATING)
    sub.transition(Submission.QUEUED)
    return sub


@pytest.mark.django_db
def test_the_reaper_fails_submissions_past_their_deadline(user, loaded, settings) -> None:  # type: ignore[no-untyped-def]
    from jobs.tasks import reap_jobs
    from qval_site.celery import app

    in_queue = _queued(user, loaded)
    running = _queued(user, loaded)
    running.transition(Submission.SCORING)
    on_time = _queued(user, loaded, minutes=30)
    a_file = Submission.objects.create(user=user, dataset=loaded, split="dev", target="q", method_name="f",
                                       filename="f.csv", state=Submission.QUEUED)

    assert sorted(lifecycle.JOB.reap_overdue()) == sorted([in_queue.pk, running.pk])
    for sub, reason in ((in_queue, lifecycle.queue_deadline_reason("containers")), (running, lifecycle.WORKER_DEADLINE_REASON)):
        sub.refresh_from_db()
        assert (sub.state, sub.error, sub.fault) == ("failed", reason, "system")
    assert in_queue.error.startswith("timed out in the queue (deadline passed)")
    assert running.error.startswith("timed out in the worker (deadline passed)")
    for sub in (on_time, a_file):
        sub.refresh_from_db()
        assert sub.state == "queued"
    assert lifecycle.JOB.reap_overdue() == []  # already final

    # A worker that ends late leaves the reaper's verdict alone; a late task does not run.
    assert finish(running.pk, []) == "failed" and not running.results.exists()
    assert fail(running.pk, "exited with code 1", "user") == "failed"
    running.refresh_from_db()
    assert running.error == lifecycle.WORKER_DEADLINE_REASON
    assert run_container_submission(in_queue.pk) == "failed"

    # The task checks the deadline itself, too; the periodic task (every kind's reaper) does the same.
    late = _queued(user, loaded)
    assert run_container_submission(late.pk) == "failed"
    late.refresh_from_db()
    assert late.error == lifecycle.queue_deadline_reason("containers") and late.scoring_at is None
    Submission.objects.filter(pk=on_time.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    assert reap_jobs()["submission"]["overdue"] == [on_time.pk]
    schedule = app.conf.beat_schedule["reap-jobs"]
    assert schedule["task"] == reap_jobs.name and schedule["schedule"] == settings.QVAL_REAP_EVERY_S
    assert app.conf.task_routes["workers.tasks.run_container_submission"] == {"queue": "containers"}


# -- a real worker process on the containers queue -----------------------------------------------
@pytest.fixture
def gpu_worker(transactional_db, data_dir: Path, engine: qc.Engine):  # type: ignore[no-untyped-def]
    """A real ``celery worker -Q containers --concurrency 1`` process (users' containers) on the test database
    and Redis."""
    log_path = data_dir / "gpu-worker.log"
    with worker_process("containers", f"test-gpu-{os.getpid()}@%h", data_dir, log_path, 60,
                        QVAL_CONTAINER_WORK_ROOT=str(engine.work_root), QVAL_BOOTSTRAP_RESAMPLES=str(RESAMPLES),
                        QVAL_CONTAINER_TIMEOUT_S="120") as proc:
        yield proc, log_path


@pytest.mark.slow
@pytest.mark.worker
def test_a_gpu_worker_sweeps_at_start_and_runs_the_starter_kit(transactional_db, engine, kit_tar, frozenlake, loaded,
                                                              tmp_path, request) -> None:
    # transactional_db first: the upload's commit is what queues the task.
    # What a killed worker leaves: a job directory with a mounted /output.
    leftover = qc.Job(engine)
    leftover._mount_output(1)
    assert qc._mounts_under(engine.work_root)
    proc, log_path = request.getfixturevalue("gpu_worker")
    wait_for(lambda: not any(engine.work_root.iterdir()) or proc.poll() is not None, timeout=60)
    assert proc.poll() is None, log_path.read_text()
    assert qc._mounts_under(engine.work_root) == []
    wait_for(lambda: "swept 1 leftovers" in log_path.read_text(), timeout=30)
    assert leftover.id in log_path.read_text()

    api = request.getfixturevalue("api")
    for sub in submit(api, kit_tar, split="dev,test")["submissions"]:
        data = wait_for(lambda: (d := api.get(f"/api/v1/submissions/{sub['id']}/").json())["final"] and d, timeout=180)
        assert data["state"] == "finished", (data, log_path.read_text()[-5000:])
        assert data["worker"].startswith("test-gpu-")
        assert data["container"]["outcome"] == "finished" and data["container"]["limits"]["timeout_s"] == 120.0
        assert_results_match(data["results"], expected_rows(frozenlake, sub["split"], tmp_path))
    board = api.get("/api/v1/leaderboard/", {"dataset": "frozenlake-8x8"}).json()["results"]
    assert sorted((r["method"], r["split"]) for r in board) == [("manhattan", "test")]  # dev: a private self-check
    assert not any(engine.work_root.iterdir())

"""A GPU campaign (scripts/gpu-campaign.sh, qval.campaign, docs/campaign.md): every text method on every hosted
dataset with one backbone, run by a remote worker through the job protocol, arriving as verified baseline rows.

The first test drives the protocol through the real views and real PostgreSQL (the worker's side played by the
test); the slow one is the script's CPU dry run: a site of real processes (PostgreSQL, Redis, web, a scoring worker),
the script starting a real remote worker with no database settings, SmolLM2-135M served by scripts/vllm-standin in
vLLM's place, three methods on a tiny hosted dataset, and the rows' predictions checked against the same methods run
in this process on SmolLM2.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from qval import schema
from submissions import lifecycle
from submissions.models import Submission
from tests.conftest import REPO
from workers.tasks import score_remote_run

KEY = "campaign-key-for-tests"


def _worker(key: str | None = KEY) -> APIClient:
    client = APIClient()
    if key:
        client.credentials(HTTP_AUTHORIZATION=f"Worker {key}")
    return client


def _job(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Job {token}", HTTP_X_QVAL_WORKER="gpu-box")
    return client


def _tar_members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


@pytest.mark.django_db
def test_a_campaign_runs_through_the_job_protocol_and_its_rows_are_verified_baselines(
        settings, loaded, frozenlake, django_capture_on_commit_callbacks) -> None:
    settings.QVAL_WORKER_KEY = KEY
    settings.QVAL_BOOTSTRAP_RESAMPLES = 100
    body = {"backbone": "qwen-7b", "description": "Qwen 7B on an H200", "datasets": [loaded.key],
            "methods": ["direct-single", "sdpo"], "targets": ["q"]}
    assert _worker(None).post("/api/v1/workers/campaign", body, format="json").status_code == 403
    assert _worker("wrong").get("/api/v1/workers/campaign?backbone=qwen-7b").status_code == 403
    refused = _worker().post("/api/v1/workers/campaign", {**body, "methods": ["random"]}, format="json")
    assert refused.status_code == 400 and "random needs none" in json.dumps(refused.json())
    assert _worker().post("/api/v1/workers/campaign", {**body, "targets": ["x"]}, format="json").status_code == 400

    from qval_site.celery import app

    sent: list[tuple[str, list, str]] = []
    original = app.send_task
    app.send_task = lambda name, args, queue: sent.append((name, args, queue))  # type: ignore[method-assign]
    try:
        with django_capture_on_commit_callbacks(execute=True):
            resp = _worker().post("/api/v1/workers/campaign", body, format="json")
        with django_capture_on_commit_callbacks(execute=True):  # again: nothing new (resumes a campaign)
            again = _worker().post("/api/v1/workers/campaign", body, format="json")
    finally:
        app.send_task = original  # type: ignore[method-assign]
    assert resp.status_code == 201, resp.content
    assert again.status_code == 201 and again.json()["queued"] == [] and len(again.json()["runs"]) == 2
    direct, sdpo = (Submission.objects.get(pk=pk) for pk in resp.json()["queued"])
    assert [(name, args[0], queue) for name, args, queue in sent] == [
        (lifecycle.TASKS["remote_baseline"], direct.pk, "campaign"), (lifecycle.TASKS["remote_baseline"], sdpo.pk, "campaign")]
    tokens = {args[0]: args[1] for _, args, _ in sent}
    assert (direct.kind, direct.source, direct.split, direct.backbone_name) == ("baseline", "baseline", "test", "qwen-7b")
    from leaderboard.models import Backbone

    assert Backbone.objects.get(name="qwen-7b").description == "Qwen 7B on an H200"

    # The worker's side: the spec, the split (no labels, but for a method that reads them), heartbeats with progress.
    spec = _job(tokens[direct.pk]).post(f"/api/v1/jobs/{direct.pk}/start").json()
    assert {k: spec[k] for k in ("kind", "method", "backbone", "split", "target", "seed")} == {
        "kind": "baseline", "method": "direct-single", "backbone": "qwen-7b", "split": "test", "target": "q", "seed": 0}
    assert _job(tokens[direct.pk]).get(f"/api/v1/jobs/{direct.pk}/input").status_code == 409  # a container's folder
    files = _tar_members(b"".join(_job(tokens[direct.pk]).get(f"/api/v1/jobs/{direct.pk}/dataset").streaming_content))
    assert set(files) == {"manifest.json", "states.jsonl", "candidates.jsonl"}
    test_states = frozenlake.states_in("test")
    states = [json.loads(line) for line in files["states.jsonl"].splitlines()]
    assert [s["id"] for s in states] == [s.id for s in test_states] and {s["split"] for s in states} == {"test"}
    assert _job(tokens[sdpo.pk]).post(f"/api/v1/jobs/{sdpo.pk}/start").status_code == 200
    teacher = _tar_members(b"".join(_job(tokens[sdpo.pk]).get(f"/api/v1/jobs/{sdpo.pk}/dataset").streaming_content))
    labels = [json.loads(line) for line in teacher["labels.jsonl"].splitlines()]
    wanted = {c.id for s in test_states for c in s.candidates} | {s.id for s in test_states}
    assert labels and {rec["id"] for rec in labels} == wanted  # the teacher's evidence, of its split only
    beat = _job(tokens[direct.pk]).post(f"/api/v1/jobs/{direct.pk}/heartbeat", {"progress": {"done": 3, "total": 9,
                                                                                             "tokens": 120}}, format="json")
    assert beat.status_code == 200
    direct.refresh_from_db()
    assert (direct.state, direct.worker, direct.progress["done"], direct.progress["tokens"]) == ("scoring", "remote:gpu-box", 3, 120)
    bad = _job(tokens[direct.pk]).post(f"/api/v1/jobs/{direct.pk}/heartbeat", {"progress": {"done": "3"}}, format="json")
    assert bad.status_code == 400 and "progress" in bad.json()["detail"]

    # Its result: the predictions and what the worker recorded (never the method, backbone or seed the site chose).
    preds = "".join(json.dumps({"id": s.actor_candidate.id, "score": float(s.step)}) + "\n" for s in test_states)
    run = {"error": None, "wall_s": 12.5, "num_nan": 0, "token_usage": {"tokens": 900},
           "config": {"method": "other", "seed": 9, "backbone_kind": "vllm", "checkpoint": "qwen@0123",
                      "served_model_name": "qwen-7b", "prompt_hash": "abc"}}
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        posted = _job(tokens[direct.pk]).post(f"/api/v1/jobs/{direct.pk}/result", {
            "run": json.dumps(run), "predictions": SimpleUploadedFile("predictions.jsonl", preds.encode())},
            format="multipart")
    assert posted.status_code == 202, posted.content and len(callbacks) == 1
    assert score_remote_run(direct.pk, direct.attempt) == Submission.FINISHED
    direct.refresh_from_db()
    assert direct.backbone.name == "qwen-7b" and direct.num_nan == 0
    assert {k: direct.config[k] for k in ("method", "seed", "backbone_kind", "checkpoint", "runner")} == {
        "method": "direct-single", "seed": 0, "backbone_kind": "vllm", "checkpoint": "qwen@0123", "runner": "remote"}
    assert "spearman" in {r.metric for r in direct.results.all()}
    from board import boards

    assert direct.pk in boards.platform_runs()  # a verified row

    # A method that could not run on the worker: failed with the worker's reason.
    with django_capture_on_commit_callbacks(execute=False):
        _job(tokens[sdpo.pk]).post(f"/api/v1/jobs/{sdpo.pk}/result", {
            "run": json.dumps({"error": "the baseline run cannot proceed: no logprobs"})}, format="multipart")
    assert score_remote_run(sdpo.pk) == Submission.FAILED
    sdpo.refresh_from_db()
    assert (sdpo.error, sdpo.fault) == ("the baseline run cannot proceed: no logprobs", "system")
    runs = _worker().get("/api/v1/workers/campaign?backbone=qwen-7b").json()["runs"]
    assert [(r["id"], r["state"]) for r in runs] == [(direct.pk, "finished"), (sdpo.pk, "failed")]
    assert runs[0]["headline"]["value"] is not None and runs[1]["error"].endswith("no logprobs")


# -- the script's CPU dry run: SmolLM2 in vLLM's place, a real remote worker and a real site -----------------------
DRY_RUN_METHODS = ("verifier", "sdpo")
"""Two methods of two kinds: a logprob verifier (pointwise: the actor's pair) and a self-distillation teacher that
reads the split's labels (ranking: every pair). Logprob methods, no generation: seconds each on SmolLM2."""


def tiny_hosted_dataset(directory: Path) -> schema.Dataset:
    """A FrozenLake dataset of one trajectory: two dev states and two test states of two candidates each, written
    to ``directory`` as the site keeps a hosted dataset."""
    from tests.test_smollm2 import tiny_dataset

    base = tiny_dataset(steps=4, num_candidates=2)
    states = [dataclasses.replace(s, split="test" if i >= 2 else "dev") for i, s in enumerate(base.states)]
    manifest = dataclasses.replace(base.manifest, slug="fl-campaign", name="FrozenLake campaign dry run", labelling={
        "discount": 0.95, "reference_policy": "shortest-path", "num_rollouts": 1})
    ds = schema.Dataset(manifest=manifest, states=states, q_labels=base.q_labels, v_labels=base.v_labels)
    ds.write(directory)
    return ds


@pytest.mark.slow
@pytest.mark.worker
def test_the_campaign_script_dry_run_on_cpu_with_smollm2_gives_verified_rows_of_the_models_predictions(
        smollm2, tmp_path) -> None:
    from qval.methods.run import run_method
    from qval.smollm2 import model_file
    from tests.stack import Stack
    from tests.test_faults import FAST

    folder = tmp_path / "datasets" / "fl-campaign-1"
    ds = tiny_hosted_dataset(folder)
    stack = Stack(tmp_path / "stack", 18860, env={**FAST, "QVAL_WORKER_KEY": KEY, "QVAL_BOOTSTRAP_RESAMPLES": "100"})
    try:
        stack.start(folder, scoring_concurrency=1)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("QVAL_", "DATABASE_URL", "CELERY_"))}
        done = subprocess.run(
            ["scripts/gpu-campaign.sh", "--site", stack.url, "--broker", stack.env["CELERY_BROKER_URL"], "--key", KEY,
             "--model", str(model_file()), "--name", "smollm2-dry-run", "--description", "SmolLM2 in vLLM's place",
             "--vllm", f"{sys.executable} {REPO / 'scripts' / 'vllm-standin'}", "--datasets", ds.manifest.key,
             "--methods", ",".join(DRY_RUN_METHODS), "--targets", "q", "--data-dir", str(tmp_path / "campaign"),
             "--timeout", "300"],
            cwd=REPO, env={**env, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=600)
        worker_log = next((tmp_path / "campaign" / "logs").glob("campaign-worker.log")).read_text(errors="replace")
        errors = [line for line in worker_log.splitlines() if "ERROR" in line or "Error" in line]
        assert done.returncode == 0, (done.stdout, done.stderr[-3000:], errors[-20:])
        assert done.stdout.count(": finished, ") == len(DRY_RUN_METHODS), done.stdout
        assert "vllm-standin" in worker_log and "healthy" in worker_log  # the worker started the server itself
        code = ("import json; from submissions.models import Submission; from board.boards import platform_runs; "
                "runs = Submission.objects.filter(kind='baseline').order_by('pk'); verified = platform_runs(); "
                "print(json.dumps([dict(id=s.pk, method=s.method_name, state=s.state, source=s.source, "
                "backbone=s.backbone.name, kind=s.config['backbone_kind'], checkpoint=s.config['checkpoint'], "
                "worker=s.worker, verified=s.pk in verified, predictions=s.predictions.name) for s in runs]))")
        rows = json.loads(stack.manage("shell", "-c", code).strip().splitlines()[-1])
        again = subprocess.run(  # a second call resumes: nothing is queued again, every run already ended
            [sys.executable, "-m", "qval.campaign", "--site", stack.url, "--key", KEY, "--backbone", "smollm2-dry-run",
             "--datasets", ds.manifest.key, "--methods", ",".join(DRY_RUN_METHODS), "--targets", "q"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0 and "0 runs queued, 0 to follow" in again.stdout, again.stdout + again.stderr
    finally:
        stack.close()
    assert sorted(r["method"] for r in rows) == sorted(DRY_RUN_METHODS)
    for row in rows:
        assert (row["state"], row["source"], row["backbone"], row["kind"], row["verified"]) == (
            "finished", "baseline", "smollm2-dry-run", "vllm", True), row
        assert row["checkpoint"].startswith(model_file().name + "@") and row["worker"].startswith("remote:campaign-")
    # The predictions are SmolLM2's: the same methods run here on the session's SmolLM2 give the same scores.
    _, backbone = smollm2
    for row in rows:
        stored = [json.loads(line) for line in (stack.data_dir / "media" / row["predictions"]).read_text().splitlines()]
        expected = run_method(row["method"], ds, "test", "q", backbone, cache_dir=tmp_path / "cache" / row["method"])
        assert {p["id"] for p in stored} == set(expected.scores) and expected.num_nan == 0
        for p in stored:
            assert p["score"] == pytest.approx(expected.scores[p["id"]], rel=1e-3, abs=1e-4), (row["method"], p)

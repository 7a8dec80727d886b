"""Baseline runs of the built-in methods on the site, and the worker's vLLM lifecycle.

The LLM backbone is a tiny random-weight checkpoint served by ``scripts/vllm-standin`` (it takes
``vllm serve``'s command line and serves our own OpenAI-compatible server), started by the
worker's :class:`qval.vllm.VLLMManager` exactly as ``vllm serve`` would be.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from qval import build, schema
from qval.vllm import ServeSpec, VLLMError, VLLMManager
from qval.envs import registry
from tests.conftest import REPO, wait_for, worker_process

STANDIN = [sys.executable, str(REPO / "scripts" / "vllm-standin")]
STANDIN_SETTING = f"{sys.executable} {REPO / 'scripts' / 'vllm-standin'}"


def tiny_spec(tiny_model: Path, name: str = "tiny") -> ServeSpec:
    return ServeSpec(name=name, path=tiny_model, served_model_name=f"{name}-served",
                     args=("--dtype", "auto", "--max-model-len", "512"))


def chat(url: str, model: str) -> dict:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    req = urllib.request.Request(f"{url}/chat/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


@pytest.mark.slow
def test_vllm_manager_starts_checks_reuses_restarts_and_stops(tiny_model: Path, tmp_path: Path) -> None:
    manager = VLLMManager(STANDIN, log_dir=tmp_path, startup_timeout_s=120)
    spec = tiny_spec(tiny_model)
    first = manager.ensure(spec)
    assert first.healthy() and manager.starts == 1
    argv = " ".join(first.process.args)
    assert f"serve {tiny_model} --host 127.0.0.1 --port {first.port} --served-model-name tiny-served" in argv
    assert "ignoring --dtype auto --max-model-len 512" in first.log_path.read_text()  # vllm's flags accepted
    assert chat(first.url, "tiny-served")["usage"]["completion_tokens"] >= 1

    assert manager.ensure(spec) is first and manager.starts == 1  # reused across jobs

    os.killpg(first.process.pid, signal.SIGKILL)  # the server died
    first.process.wait()
    second = manager.ensure(spec)
    assert second is not first and second.healthy() and manager.starts == 2
    assert chat(second.url, "tiny-served")["choices"]

    manager.stop_all()
    assert second.process.poll() is not None and not manager.running()


def test_vllm_manager_reports_a_server_that_cannot_start(tmp_path: Path) -> None:
    manager = VLLMManager([sys.executable, "-c", "import sys; print('no GPU here'); sys.exit(3)"], log_dir=tmp_path,
                          startup_timeout_s=30)
    with pytest.raises(VLLMError, match="exited with code 3.*no GPU here"):
        manager.ensure(ServeSpec(name="broken", path=tmp_path, served_model_name="broken"))
    with pytest.raises(VLLMError, match="does not exist"):
        manager.ensure(ServeSpec(name="missing", path=tmp_path / "nope", served_model_name="missing"))


# -- launching -------------------------------------------------------------------------------
@pytest.fixture
def staff(db, django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user(username="maintainer", password="pw-maintainer-1", is_staff=True,
                                                 is_superuser=True)


def test_launch_refuses_what_cannot_run(loaded, settings) -> None:  # type: ignore[no-untyped-def]
    from submissions.baselines import BaselineRequest, launch_baseline
    from submissions.services import SubmissionRejected

    settings.QVAL_BACKBONES = {"tiny": {"kind": "vllm", "path": "/models/tiny"}}
    cases = [
        (BaselineRequest("no-such-method", "tiny", loaded.key, "dev"), "method", "unknown method"),
        (BaselineRequest("direct-single", "gpt-9", loaded.key, "dev"), "backbone", "not in QVAL_BACKBONES"),
        (BaselineRequest("direct-single", "tiny", loaded.key, "val"), "split", "has no split 'val'"),
        (BaselineRequest("ranking", "tiny", loaded.key, "dev", target="v"), "target", "not target 'v'"),
        (BaselineRequest("direct-single", "tiny", "nowhere", "dev"), "dataset", "unknown dataset"),
    ]
    for req, field, message in cases:
        with pytest.raises(SubmissionRejected, match=message) as info:
            launch_baseline(req)
        assert info.value.field == field


@pytest.mark.parametrize("gpu_workers", ["local", "remote"])
def test_a_baseline_that_needs_no_model_is_sent_to_the_scoring_queue(loaded, settings, gpu_workers,  # type: ignore[no-untyped-def]
                                                                      django_capture_on_commit_callbacks) -> None:
    """A reference method (no model: seconds of work) runs beside the uploads, so a board's reference rows never
    wait behind the training runs on ``gpu``; a method with a backbone still goes to ``gpu``, also with remote gpu
    workers (they have no database and take only container jobs, from ``remote``). The reaper's reason names the
    queue a job waited in."""
    from submissions import lifecycle
    from submissions.baselines import BaselineRequest, launch_baseline
    from tests.conftest import broker_messages, clear_queue

    settings.QVAL_BACKBONES = {"tiny": {"kind": "vllm", "path": "/models/tiny"}}
    settings.QVAL_GPU_WORKERS = gpu_workers
    for queue in ("gpu", "scoring", "remote"):
        clear_queue(queue)
    with django_capture_on_commit_callbacks(execute=True):
        cheap = launch_baseline(BaselineRequest("random", "", loaded.key, "dev"))
        llm = launch_baseline(BaselineRequest("direct-single", "tiny", loaded.key, "dev"))
    sent = {queue: [(m["headers"]["task"], m["headers"]["argsrepr"]) for m in broker_messages(queue)]
            for queue in ("gpu", "scoring", "remote")}
    assert sent == {"scoring": [("workers.tasks.run_baseline_submission", f"[{cheap.pk}, 1]")],
                    "gpu": [("workers.tasks.run_baseline_submission", f"[{llm.pk}, 1]")], "remote": []}
    cheap.refresh_from_db()
    llm.refresh_from_db()
    assert cheap.state == llm.state == "queued"
    assert lifecycle.deadline_reason(cheap) == lifecycle.queue_deadline_reason("scoring")
    assert lifecycle.deadline_reason(llm) == lifecycle.queue_deadline_reason("gpu")


def test_admin_launches_a_baseline_run(loaded, staff, client, settings) -> None:  # type: ignore[no-untyped-def]
    from submissions.models import Submission

    settings.QVAL_BACKBONES = {"tiny": {"kind": "vllm", "path": "/models/tiny"}}
    client.force_login(staff)
    listing = client.get("/admin/submissions/submission/")
    assert listing.status_code == 200 and b"Launch a baseline run" in listing.content
    form = client.get("/admin/submissions/submission/launch-baseline/")
    assert form.status_code == 200 and b"direct-single" in form.content and loaded.key.encode() in form.content
    bad = client.post("/admin/submissions/submission/launch-baseline/",
                      {"method": "direct-single", "backbone": "gpt-9", "dataset": loaded.key, "split": "dev",
                       "seed": 3, "options": "{}"})
    assert bad.status_code == 400 and b"not in QVAL_BACKBONES" in bad.content
    assert not Submission.objects.exists()
    ok = client.post("/admin/submissions/submission/launch-baseline/",
                     {"method": "direct-single", "backbone": "tiny", "dataset": loaded.key, "split": "dev",
                      "seed": 3, "options": '{"concurrency": 2}'})
    sub = Submission.objects.get()
    assert ok.status_code == 302 and ok["Location"] == f"/submissions/{sub.pk}/"
    assert (sub.kind, sub.source, sub.state, sub.target, sub.user) == ("baseline", "baseline", "queued", "q", staff)
    assert sub.config["seed"] == 3 and sub.config["options"] == {"concurrency": 2}
    assert sub.config["method_version"] and sub.deadline is not None
    page = client.get(ok["Location"])
    assert page.status_code == 200 and b'id="baseline-progress"' in page.content


def test_non_staff_cannot_launch(loaded, user, client) -> None:  # type: ignore[no-untyped-def]
    client.force_login(user)
    response = client.get("/admin/submissions/submission/launch-baseline/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


# -- a run on a real worker, killed mid-run --------------------------------------------------
@pytest.fixture
def mini_lake(transactional_db, data_dir: Path):  # type: ignore[no-untyped-def]
    """A small FrozenLake build (dev only) written under QVAL_DATASETS_DIR and loaded."""
    from leaderboard.loading import load_dataset

    env, spec = registry.BUILDERS["frozenlake"]()
    spec = dataclasses.replace(spec, slug="frozenlake-mini", version="0", num_trajectories=4,
                               max_states_per_trajectory=3, splits=("dev",), split_by="trajectory",
                               split_cycle=None, secret_test=False)
    out = data_dir / "datasets" / f"{spec.slug}-{spec.version}"
    if not (out / "manifest.json").exists():
        build.build_dataset(env, spec).write(out)
    return load_dataset(schema.Dataset.read(out))[0]


@pytest.mark.slow
@pytest.mark.worker
def test_baseline_run_on_the_queue_survives_a_worker_kill(mini_lake, tiny_model: Path, data_dir: Path, client,  # type: ignore[no-untyped-def]
                                                          django_user_model, settings) -> None:
    from submissions.models import Submission

    backbones = {"tiny": {"kind": "vllm", "path": str(tiny_model), "served_model_name": "tiny-served",
                          "args": ["--dtype", "auto"]}}
    settings.QVAL_BACKBONES = backbones
    env = dict(QVAL_BACKBONES=json.dumps(backbones), QVAL_VLLM_EXECUTABLE=STANDIN_SETTING,
               QVAL_BROKER_VISIBILITY_S="5", QVAL_HEARTBEAT_S="1", QVAL_HEARTBEAT_STALE_S="3",
               QVAL_VLLM_STANDIN_DELAY_S="1")  # the run lasts past the kill (the tiny model is fast)
    log_path = data_dir / "baseline-worker.log"
    with worker_process("gpu", f"test-baseline-a-{os.getpid()}@%h", data_dir, log_path, 30, **env) as first:
        call_command("run_baseline", "direct-single", backbone="tiny", dataset=mini_lake.key, split="dev", seed=1,
                     option=["concurrency=1", "max_tokens=4"])
        sub = Submission.objects.get()
        total = len(schema.Dataset.read(data_dir / "datasets" / "frozenlake-mini-0").point_ids("dev", "q"))
        assert total >= 6

        def some_done():  # type: ignore[no-untyped-def]
            sub.refresh_from_db()
            return sub.progress.get("done", 0) >= 2 and sub

        wait_for(some_done, timeout=240, interval=0.2)
        assert sub.state == "scoring" and sub.progress["total"] == total and sub.progress["tokens"] > 0
        staff = django_user_model.objects.create_user(username="m", password="pw-m-123456", is_staff=True)
        client.force_login(staff)
        polled = client.get(f"/submissions/{sub.pk}/status/").json()
        assert polled["baseline"]["progress"]["done"] >= 2 and polled["baseline"]["progress"]["total"] == total
        done_before_kill = polled["baseline"]["progress"]["done"]
        os.killpg(first.pid, signal.SIGKILL)  # the worker dies mid-run; its vllm server follows it
        first.wait()
    sub.refresh_from_db()
    assert sub.state == "scoring" and sub.progress["done"] < total
    # A delivery that finds a fresh heartbeat of another worker leaves the run to it (the reaper on beat,
    # not running here, would requeue it later): let the dead worker's heartbeat go stale first, as it
    # has long before any redelivery in production.
    time.sleep(float(env["QVAL_HEARTBEAT_STALE_S"]) + 1)

    with worker_process("gpu", f"test-baseline-b-{os.getpid()}@%h", data_dir, log_path, 30, flush=False, **env):
        wait_for(lambda: Submission.objects.get(pk=sub.pk).is_final, timeout=300, interval=0.5)
    sub.refresh_from_db()
    assert sub.state == "finished", (sub.error, log_path.read_text()[-3000:])
    assert sub.progress["deliveries"] == 2 and sub.progress["done"] == total
    config = sub.config
    assert config["cache_hits"] >= done_before_kill  # the second delivery resumed from the response cache
    assert config["requests"] + config["cache_hits"] >= total
    for key in ("method_version", "prompt_hash", "checkpoint", "params", "seed", "backbone"):
        assert config[key] not in (None, ""), key
    assert config["backbone"].startswith("tiny") and config["checkpoint"].startswith(tiny_model.name + "@")
    assert config["seed"] == 1 and config["backbone_kind"] == "vllm"
    assert sub.num_nan is not None and 0 <= sub.num_nan <= total
    assert sub.method.family == "direct" and sub.results.exists()

    api = client.get("/api/v1/leaderboard/", {"dataset": mini_lake.key, "split": "dev", "target": "q"}).json()
    rows = api["results"]
    text = json.dumps(rows)
    assert "direct-single" in text and "baseline" in text
    detail = client.get(f"/api/v1/submissions/{sub.pk}/").json()
    assert detail["source"] == "baseline" and detail["baseline"]["config"]["prompt_hash"] == config["prompt_hash"]
    page = client.get(f"/submissions/{sub.pk}/").content.decode()
    assert config["prompt_hash"] in page and "NaN" in page
    assert not math.isnan(float(sub.results.first().num_points))


# -- method pages and the templates map ------------------------------------------------------
def test_every_prompt_template_belongs_to_a_method_and_every_named_one_exists() -> None:
    from qval.methods import context
    from qval.methods.registry import all_methods

    files = {p.stem for p in context.PROMPTS_DIR.glob("*.txt")}
    named = {n for names in context.METHOD_TEMPLATES.values() for n in names} | set(context.SHARED_TEMPLATES)
    assert named == files
    prompted = {m.name for m in all_methods() if m.modality == "text" and m.needs != "none"}  # learned ones use no prompt
    assert set(context.METHOD_TEMPLATES) == prompted


def test_method_page_shows_the_registry_entry_and_prompts(db, client) -> None:  # type: ignore[no-untyped-def]
    from leaderboard.models import Method
    from qval.methods import context

    Method.objects.create(name="verifier", family="intrinsic")
    Method.objects.create(name="vlm-rm", family="embedding")
    Method.objects.create(name="my-method", family="other")
    page = client.get("/methods/verifier/").content.decode()
    assert 'id="builtin"' in page and 'data-template="verifier_user"' in page and 'data-template="environment"' in page
    assert context.template("verifier_system").template.splitlines()[0][:30] in page.replace("&#x27;", "'")
    image = client.get("/methods/vlm-rm/").content.decode()
    assert 'data-param="alpha"' in image and '<code>0.5</code>' in image
    assert 'data-template=' not in image
    assert client.get("/methods/my-method/").status_code == 404  # a user's method has a page once a row is public


# -- a second delivery while the first still runs; an image method in the worker's service ----
def test_a_redelivery_leaves_a_run_with_a_fresh_heartbeat_alone(loaded, settings) -> None:  # type: ignore[no-untyped-def]
    from submissions.baselines import _start
    from submissions.models import Submission

    sub = Submission.objects.create(source="baseline", kind="baseline", dataset=loaded, split="dev", target="q",
                                    method_name="vlm-rm", backbone_name="qval-tiny-vit:random", state="scoring",
                                    worker="alive@vm", heartbeat_at=timezone.now(), progress={"done": 3, "total": 9})
    assert _start(sub.pk, 0, "other@vm") is None  # the first worker beats: left alone
    stale = timezone.now() - timedelta(seconds=settings.QVAL_HEARTBEAT_STALE_S + 1)
    Submission.objects.filter(pk=sub.pk).update(heartbeat_at=stale)
    taken = _start(sub.pk, 0, "other@vm")
    assert taken is not None and taken.worker == "other@vm" and taken.progress["resumed"] is True
    assert taken.heartbeat_at > stale


@pytest.mark.slow
def test_an_image_method_baseline_runs_on_a_random_encoder(mini_lake, data_dir: Path, settings) -> None:  # type: ignore[no-untyped-def]
    from submissions.baselines import BaselineRequest, launch_baseline, run_baseline

    sub = launch_baseline(BaselineRequest("vlm-rm", "qval-tiny-vit:random", mini_lake.key, "dev", seed=2))
    assert sub.modality == "image" and sub.target == "q"
    state = run_baseline(sub.pk, None, "here@vm", vllm=None)
    sub.refresh_from_db()
    assert state == "finished", sub.error
    total = sub.progress["total"]
    assert sub.progress["done"] == total and sub.num_nan is not None and sub.num_nan < total
    assert sub.config["backbone_kind"] == "encoder" and sub.config["seed"] == 2
    assert sub.method.family == "embedding" and sub.results.exists()


@pytest.mark.slow
def test_a_container_backbone_of_kind_vllm_is_the_workers_managed_server(tiny_model: Path, settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from qval.backbone import Sampling
    from workers import tasks

    settings.QVAL_BACKBONES = {"tiny": {"kind": "vllm", "path": str(tiny_model), "served_model_name": "tiny-served"}}
    settings.QVAL_VLLM_EXECUTABLE = STANDIN_SETTING
    # this process's manager and backends as a worker process starts them (an earlier test may have made them
    # under other settings: they are kept per process)
    monkeypatch.setattr(tasks, "_VLLM", None)
    monkeypatch.setattr(tasks, "_BACKENDS", None)
    try:
        backend = tasks.served_backend("tiny")
        server = tasks.vllm_manager().running()["tiny"]
        assert (backend.host, backend.port, backend.model) == ("127.0.0.1", server.port, "tiny-served")
        reply = backend.generate([{"role": "user", "content": "hi"}], None, Sampling(max_tokens=2))
        assert reply.completion_tokens >= 1
        assert tasks.served_backend("tiny").port == server.port  # reused
    finally:
        tasks.stop_vllm_servers()


@pytest.mark.slow
def test_codegen_avg_after_codegen_asks_the_model_nothing(mini_lake, tiny_model: Path, settings,  # type: ignore[no-untyped-def]
                                                          tmp_path: Path) -> None:
    """The runs share one response cache: codegen-avg sends codegen's requests, so every answer is a cache hit."""
    from submissions.baselines import BaselineRequest, launch_baseline, run_baseline

    settings.QVAL_DATA_DIR = tmp_path  # a cache of this test's own: the session's may hold these answers already
    settings.QVAL_BACKBONES = {"tiny": {"kind": "transformers", "path": str(tiny_model)}}
    configs = {}
    for name in ("codegen", "codegen-avg"):
        sub = launch_baseline(BaselineRequest(name, "tiny", mini_lake.key, "dev", "q", seed=3,
                                              options={"samples": 2, "max_tokens": 8}))
        assert run_baseline(sub.pk, None, "here@vm", vllm=None) == "finished", name
        sub.refresh_from_db()
        configs[name] = sub.config
    assert configs["codegen"]["requests"] == 2 and configs["codegen"]["cache_hits"] == 0
    assert configs["codegen-avg"]["requests"] == 0 and configs["codegen-avg"]["cache_hits"] == 2

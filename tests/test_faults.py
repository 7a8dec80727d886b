"""Faults with a submission in flight, on a whole site of real processes (tests/stack.py): private
PostgreSQL and Redis started here (never the machine's shared ones), gunicorn, Celery workers and
beat. Each ends with every submission final, with the right reason, nothing lost or duplicated.

Heartbeats every second and a job is lost after 6 s without one (the reaper runs every 2 s), so a
killed worker's job is requeued within seconds. Beat is a process of its own (as in ``make up`` and
docker-compose): killing it stops the reapers until it is back, and killing a worker spares it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from qval import containers as qc
from qval import schema
from qval.envs import registry
from tests.conftest import BASE_IMAGE, wait_for
from tests.stack import Stack

pytestmark = [pytest.mark.slow, pytest.mark.worker]

FAST = {"QVAL_HEARTBEAT_S": "1", "QVAL_HEARTBEAT_STALE_S": "6", "QVAL_REAP_EVERY_S": "2", "QVAL_RESEND_AFTER_S": "2",
        "QVAL_BOOTSTRAP_RESAMPLES": "200", "QVAL_SCORING_S": "600"}
SLOW_SCORING = {"QVAL_BOOTSTRAP_RESAMPLES": "400000"}  # many seconds of scoring (vectorised bootstraps), to be killed in


def dataset_dir(frozenlake: schema.Dataset, data_dir: Path) -> Path:
    spec = registry.BUILDERS["frozenlake"]()[1]
    return data_dir / "datasets" / f"{spec.slug}-{spec.version}"


def predictions(ds: schema.Dataset, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    ids = [c.id for s in ds.states_in("dev") for c in s.candidates if c.is_actor]
    return "".join(json.dumps({"id": i, "score": rng.random()}) + "\n" for i in ids).encode()


@pytest.fixture(scope="module")
def stack(frozenlake, data_dir, tmp_path_factory):  # type: ignore[no-untyped-def]
    s = Stack(tmp_path_factory.mktemp("faults"), 18810, env=FAST)
    try:
        s.start(dataset_dir(frozenlake, data_dir))
        yield s
    finally:
        s.close()
        print(*(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in s.logs.glob("*.log")))


@pytest.fixture(scope="module")
def token(stack: Stack) -> str:
    return stack.token("faulty")


def _restore_scoring(stack: Stack) -> None:
    for name in [n for n in stack.procs if n.startswith("scoring")]:
        stack.kill(name, 15)
    stack.start_worker("scoring", "scoring", concurrency=2)


def test_scoring_worker_killed_mid_scoring_is_requeued_and_finished_once(stack, token, frozenlake) -> None:
    stack.kill("scoring", 15)
    stack.start_worker("scoring-slow", "scoring", concurrency=2, env=SLOW_SCORING)
    pk = stack.upload(token, predictions(frozenlake, 1)).json()["id"]
    stack.wait_state(token, pk, "scoring", timeout=120)
    time.sleep(0.2)
    stack.kill("scoring-slow")  # kill -9 of the worker and its child, mid-scoring: its message stays unacknowledged
    stack.start_worker("scoring", "scoring", concurrency=2)
    data = stack.wait_final(token, pk)
    assert data["state"] == "finished", data
    assert data["attempt"] == 2 and data["worker"].startswith("scoring@")
    assert stack.count(f"Result.objects.filter(submission={pk}).count()") == len(data["results"]) > 0
    assert [(t["state"], t["attempt"]) for t in data["history"]] == [
        ("received", 0), ("validating", 0), ("queued", 1), ("scoring", 1), ("queued", 2), ("scoring", 2),
        ("finished", 2)]

    # The killed delivery's message comes back once it is older than the broker's visibility timeout (1 s for
    # this worker, whose first sweep of unacknowledged messages runs ~10 s after it starts): it changes nothing.
    stack.start_worker("scoring-sweeper", "scoring", env={"QVAL_BROKER_VISIBILITY_S": "1"})
    try:
        ignored = f"submission {pk} is already finished: delivery of attempt 1 ignored"
        wait_for(lambda: ignored in stack.log("scoring") + stack.log("scoring-sweeper"), timeout=90, interval=0.5)
    finally:
        stack.kill("scoring-sweeper", 15)
    after = stack.submission(token, pk)
    assert after == data  # still finished, same attempt, worker, results and timeline
    assert stack.count(f"Result.objects.filter(submission={pk}).count()") == len(data["results"])


def test_beat_killed_alone_the_reapers_run_again_after_its_restart(stack, token, frozenlake) -> None:
    stack.kill("beat")  # kill -9 of beat alone: the workers live on
    try:
        stack.kill("scoring", 15)
        stack.start_worker("scoring-slow", "scoring", concurrency=2, env=SLOW_SCORING)
        pk = stack.upload(token, predictions(frozenlake, 5)).json()["id"]
        stack.wait_state(token, pk, "scoring", timeout=120)
        stack.kill("scoring-slow")  # a lost job, which only a reaper sent by beat requeues
        stack.start_worker("scoring", "scoring", concurrency=2)
        time.sleep(float(FAST["QVAL_HEARTBEAT_STALE_S"]) + 3 * float(FAST["QVAL_REAP_EVERY_S"]))
        lost = stack.submission(token, pk)
        assert (lost["state"], lost["attempt"]) == ("scoring", 1), lost  # stale, and nobody reaped it
    finally:
        stack.start_beat()
    data = stack.wait_final(token, pk)
    assert (data["state"], data["attempt"]) == ("finished", 2), data
    assert "jobs.tasks.reap_jobs" in stack.log("beat").rsplit("beat: Starting", 1)[-1]  # sent by the restarted beat


def test_redis_restarted_with_submissions_queued(stack, token, frozenlake) -> None:
    stack.kill("scoring", 15)  # the uploads' messages wait in Redis
    pks = [stack.upload(token, predictions(frozenlake, i)).json()["id"] for i in range(3)]
    stack.stop_redis()
    stack.start_redis()
    stack.start_worker("scoring", "scoring", concurrency=2)
    for pk in pks:
        data = stack.wait_final(token, pk)
        assert (data["state"], data["attempt"]) == ("finished", 1), data
    # The site works on after the restart.
    pk = stack.upload(token, predictions(frozenlake, 9)).json()["id"]
    assert stack.wait_final(token, pk)["state"] == "finished"


def test_an_upload_while_redis_is_down_is_stored_and_scored_once_redis_is_back(stack, token, frozenlake) -> None:
    stack.stop_redis()
    try:
        resp = stack.upload(token, predictions(frozenlake, 4))
        assert resp.status_code == 201, resp.text  # stored; its check waits for the broker
        pk = resp.json()["id"]
        assert stack.submission(token, pk)["state"] == "received"
        assert stack.count(f"Submission.objects.filter(pk={pk}, sent_at__isnull=True).count()") == 1
    finally:
        stack.start_redis()
    data = stack.wait_final(token, pk, timeout=120)  # the reaper on beat sends it once Redis is back
    assert (data["state"], data["attempt"]) == ("finished", 1), data
    assert "sent again" in stack.log("scoring")


def test_postgresql_restarted_mid_scoring(stack, token, frozenlake) -> None:
    stack.kill("scoring", 15)
    stack.start_worker("scoring-slow", "scoring", concurrency=2, env=SLOW_SCORING)
    try:
        pk = stack.upload(token, predictions(frozenlake, 2)).json()["id"]
        stack.wait_state(token, pk, "scoring", timeout=120)
        stack.stop_pg("fast")  # the scoring task loses its connection; its heartbeats stop
        time.sleep(1)
        stack.start_pg()
        data = stack.wait_final(token, pk, timeout=300)
        assert data["state"] == "finished", data
        assert data["attempt"] in (1, 2)  # finished by the first try if it stored after the restart, else requeued
        assert stack.count(f"Result.objects.filter(submission={pk}).count()") == len(data["results"]) > 0
    finally:
        _restore_scoring(stack)


def test_web_restarted_during_an_upload_stores_it_whole_or_not_at_all(stack, token, frozenlake) -> None:
    before = stack.count("Submission.objects.count()")
    media = stack.data_dir / "media" / "submissions"
    files_before = sorted(media.rglob("*")) if media.exists() else []
    body = predictions(frozenlake, 3) * 2000  # ~10 MB, sent slowly, cut by the restart
    boundary = "qvalboundary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"dataset\"\r\n\r\nfrozenlake-8x8\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"split\"\r\n\r\ndev\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"target\"\r\n\r\nq\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"method_name\"\r\n\r\ncut\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"p.jsonl\"\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    conn = socket.create_connection(("127.0.0.1", stack.web_port))
    conn.sendall((f"POST /api/v1/submissions/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {token}\r\n"
                  f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                  f"Content-Length: {len(head) + len(body) + len(tail)}\r\n\r\n").encode() + head)
    conn.sendall(body[: len(body) // 2])
    time.sleep(0.5)
    stack.kill("web")  # kill -9 while the upload streams in
    conn.close()
    stack.start_web()
    assert stack.count("Submission.objects.count()") == before  # not at all
    assert (sorted(media.rglob("*")) if media.exists() else []) == files_before
    pk = stack.upload(token, predictions(frozenlake, 4)).json()["id"]  # and the next one whole
    data = stack.wait_final(token, pk)
    assert data["state"] == "finished" and data["size_bytes"] == len(predictions(frozenlake, 4))


# -- a remote gpu worker killed while its container runs ----------------------------------------
SLEEPY_METHOD = """import json, time
time.sleep(int(open('/input/context.json').read() and 30))
with open('/input/points.jsonl') as f, open('/output/predictions.jsonl', 'w') as out:
    for line in f:
        p = json.loads(line)
        out.write(json.dumps({"id": p["id"], "score": float(p["is_actor"])}) + "\\n")
"""


@pytest.mark.container
def test_gpu_worker_killed_while_its_container_runs(frozenlake, data_dir, engine, base_image, tmp_path) -> None:
    context = tmp_path / "sleepy"
    context.mkdir()
    (context / "method.py").write_text(SLEEPY_METHOD)
    (context / "Containerfile").write_text(f'FROM {BASE_IMAGE}\nCOPY method.py /method.py\nCMD ["python3", "/method.py"]\n')
    tag = f"localhost/qval-test-sleepy:{os.getpid()}"
    assert engine.call("build", "-q", "-t", tag, str(context)).returncode == 0
    archive = tmp_path / "sleepy.tar"
    assert engine.call("save", "-o", str(archive), tag).returncode == 0
    engine.call("rmi", tag)
    key = "remote-worker-key"
    s = Stack(tmp_path / "stack", 18820, env={**FAST, "QVAL_GPU_WORKERS": "remote", "QVAL_WORKER_KEY": key,
                                               "QVAL_CONTAINER_TIMEOUT_S": "120",
                                               "QVAL_CONTAINER_WORK_ROOT": str(engine.work_root)})
    try:
        s.start(dataset_dir(frozenlake, data_dir))
        token = s.token("gpu-user")
        s.start_remote_worker("gpu-one", key)
        resp = s.upload(token, archive.read_bytes(), filename="sleepy.tar", kind="container", backbone="none")
        assert resp.status_code == 201, resp.text
        pk = resp.json()["submissions"][0]["id"]
        s.wait_state(token, pk, "scoring", timeout=180)
        first = s.submission(token, pk)
        assert first["worker"] == "remote:gpu-one" and first["attempt"] == 1
        wait_for(lambda: any(engine.work_root.iterdir()), timeout=120)  # the job's folder
        jobs_before = [p.name for p in engine.work_root.iterdir()]
        name = qc.container_name(jobs_before[0])
        # its container starts once its conmon, named after the job, runs (on a loaded machine loading the image can
        # take longer than any fixed wait). The worker is killed then, before or after the runtime started the
        # container; either way the next worker's sweep must end it. It sleeps 30 s, longer than the next worker takes
        # to start on a loaded machine, so that the sweep finds it still there (a container that ended removes itself).
        wait_for(lambda: subprocess.run(["pgrep", "-f", f"conmon .*{name}"]).returncode == 0, timeout=120, interval=0.1)
        container_ids = [p.name for p in (engine.work_root / jobs_before[0] / "store" / "overlay-containers").iterdir()
                         if p.is_dir()]
        s.kill("gpu-one")  # kill -9: the worker dies, its container and job folder stay behind
        s.start_remote_worker("gpu-two", key)
        data = s.wait_final(token, pk, timeout=300)
        assert data["state"] == "finished", (data, s.log("gpu-two")[-3000:])
        assert data["attempt"] == 2 and data["worker"] == "remote:gpu-two"
        log = s.log("gpu-two")
        assert "swept" in log and name in log  # the killed job's container and folder,
        assert f"{engine.work_root / jobs_before[0]}" in log  # removed at the new worker's start
        # and nothing of the killed run is left: its conmon (named after the job), its container in the runtime.
        wait_for(lambda: subprocess.run(["pgrep", "-f", name]).returncode == 1, timeout=30)
        assert len(container_ids) == 1
        assert subprocess.run([qc.RUNTIME, "state", container_ids[0]], capture_output=True).returncode != 0
        status = {w["name"]: w for w in __import__("requests").get(f"{s.url}/api/v1/status/").json()["workers"]}
        assert status["gpu-two"]["kind"] == "remote" and status["gpu-two"]["alive"]
    finally:
        s.close()
        for name in ("gpu-one", "gpu-two", "scoring", "web"):
            if (s.logs / f"{name}.log").exists():
                print(f"--- {name}\n{s.log(name)[-3000:]}")
    shutil.rmtree(tmp_path / "stack", ignore_errors=True)

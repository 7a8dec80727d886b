"""Users first (issue 35): with the platform's seeded reference runs queued and one of its runs holding the gpu
worker, a user's method container on a hosted dataset starts within a minute -- real Celery worker processes (the
``gpu`` and ``containers`` workers ``make up`` starts), PostgreSQL, Redis and podman; a scoring worker takes a
user's predictions file before the reference rows queued before it (their priority). A queued job shows its
position, and the status page what runs and waits on each queue. Both worker tests fail without the change: the
container waited past the minute behind the held run, and the reference rows ran before the file."""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from qval import containers as qc
from submissions.models import Submission
from tests.conftest import wait_for, worker_process
from tests.test_container_submissions import RESAMPLES, kit_tar  # noqa: F401 - the starter kit's archive fixture

START_WITHIN_S = 60


def test_a_queued_job_counts_the_users_jobs_first_and_the_status_estimates_from_the_rate(  # type: ignore[no-untyped-def]
        loaded, user, client) -> None:
    from jobs.queues import position, summaries
    from learning import services as learning
    from learning.models import TrainingRun
    from submissions import lifecycle

    t0 = timezone.now() - timedelta(minutes=10)

    def queued(minute: int, platform: bool) -> Submission:
        kind = {"kind": "baseline", "source": "baseline", "method_name": "random"} if platform else {
            "kind": "file", "source": "user", "user": user, "method_name": "m"}
        return Submission.objects.create(dataset=loaded, split="test", target="q", filename="f", state="queued",
                                         queued_at=t0 + timedelta(minutes=minute), **kind)

    platform_first, user_first, platform_second, user_second = (
        queued(0, True), queued(1, False), queued(2, True), queued(3, False))
    place = {sub.pk: position(lifecycle.JOB, sub) for sub in (platform_first, user_first, platform_second, user_second)}
    assert {p.queue for p in place.values()} == {"scoring"}
    # A worker takes both users' files before the reference rows queued before them.
    assert [place[s.pk].ahead for s in (user_first, user_second, platform_first, platform_second)] == [0, 1, 2, 3]
    assert position(lifecycle.JOB, Submission.objects.create(dataset=loaded, split="test", target="q", filename="f",
                                                             state="finished", user=user)) is None

    # gpu: one training run a minute in, a quarter done; two more queued behind it.
    now = timezone.now()
    common = {"method": "qlass", "dataset": loaded}
    running = TrainingRun.objects.create(status="running", started_at=now - timedelta(seconds=60), done=1, total=4,
                                         **common)
    waiting = [TrainingRun.objects.create(queued_at=t0 + timedelta(minutes=i), **common) for i in range(2)]
    assert position(learning.JOB, waiting[1]) is not None and position(learning.JOB, waiting[1]).ahead == 1
    by_name = {q.name: q for q in summaries(["scoring", "gpu", "datasets"], now)}
    gpu = by_name["gpu"]
    assert (gpu.users_waiting, gpu.platform_waiting, [r["id"] for r in gpu.running]) == (0, 2, [running.pk])
    assert gpu.running[0]["seconds_left"] == pytest.approx(180)  # 60 s for 1 of 4: 3 more at that rate
    assert gpu.seconds_left == pytest.approx(180 + 2 * 240)  # each waiting run at a whole run's 240 s
    assert (by_name["scoring"].users_waiting, by_name["scoring"].platform_waiting) == (2, 2)
    assert by_name["scoring"].seconds_left is None  # nothing runs there: no rate measured
    assert by_name["datasets"].seconds_left is None and by_name["datasets"].time_left == ""
    page = client.get("/status/").content.decode()
    assert "about 11 min left" in page and "no rate measured yet" in page

    # The platform's costliest runs wait behind its others on gpu, however early they were queued.
    def baseline(method: str, minute: int) -> Submission:
        return Submission.objects.create(dataset=loaded, split="test", target="q", filename="f", state="queued",
                                         queued_at=t0 + timedelta(minutes=minute), kind="baseline", source="baseline",
                                         method_name=method, backbone_name="smollm2-135m")

    costly, cheap = baseline("direct-16", -5), baseline("verifier", 5)
    assert (position(lifecycle.JOB, cheap).queue, position(lifecycle.JOB, costly).queue) == ("gpu", "gpu")
    assert position(lifecycle.JOB, cheap).ahead == 2  # the two training runs queued before it
    assert position(lifecycle.JOB, costly).ahead == 3  # and the verifier row queued after it


def test_the_status_estimate_weighs_each_waiting_run_by_its_methods_cost(loaded, client) -> None:  # type: ignore[no-untyped-def]
    """A fresh site's gpu queue holds runs minutes and hours long: each waiting LLM row is estimated at its own
    method's cost, scaled by the rate the running row measures, not as another copy of the running one."""
    from jobs.queues import summaries
    from leaderboard.models import State
    from submissions.queue_order import CPU_SECONDS

    now = timezone.now()
    states = State.objects.filter(dataset=loaded, split="test").count()
    assert states > 0
    common = {"dataset": loaded, "split": "test", "target": "q", "filename": "f", "kind": "baseline",
              "source": "baseline", "backbone_name": "smollm2-135m"}
    Submission.objects.create(state="scoring", method_name="verifier", scoring_at=now - timedelta(seconds=60),
                              progress={"done": 25, "total": 100}, **common)
    for minute, method in enumerate(["direct-16", "eureka", "direct-single"]):
        Submission.objects.create(state="queued", method_name=method, queued_at=now - timedelta(minutes=5 - minute),
                                  **common)
    gpu = summaries(["gpu"], now)[0]
    assert gpu.running[0]["seconds_left"] == pytest.approx(180)  # 60 s for a quarter
    per_unit = 240 / (CPU_SECONDS["verifier"][1] * states)  # the verifier's whole run over its work
    waiting = sum(once + per_state * states for once, per_state in
                  (CPU_SECONDS["direct-16"], CPU_SECONDS["eureka"], CPU_SECONDS["direct-single"]))
    assert gpu.seconds_left == pytest.approx(180 + per_unit * waiting)
    assert gpu.seconds_left > 180 + 3 * 240 * 10  # far beyond three more verifier runs
    # the page and the API read it a moment later, at a rate measured over a moment more
    [api_gpu] = [q for q in client.get("/api/v1/status/").json()["by_queue"] if q["name"] == "gpu"]
    assert api_gpu["seconds_left"] == pytest.approx(gpu.seconds_left, rel=0.05)
    assert api_gpu["time_left"].endswith(" h left") and " h left</td>" in client.get("/status/").content.decode()

    # A waiting job of unknown work and another kind (a training run) is not guessed from an LLM row's length:
    # it is counted apart until a training run has run or runs there.
    from learning.models import TrainingRun
    TrainingRun.objects.create(method="qlass", dataset=loaded, queued_at=now)
    gpu = summaries(["gpu"], now)[0]
    assert gpu.seconds_left == pytest.approx(180 + per_unit * waiting) and gpu.unmeasured == 1
    assert gpu.time_left.endswith("h left, and 1 waiting job of a kind not measured yet")
    TrainingRun.objects.create(method="qlass", dataset=loaded, status="finished",
                               started_at=now - timedelta(seconds=90), finished_at=now - timedelta(seconds=20))
    gpu = summaries(["gpu"], now)[0]
    assert gpu.seconds_left == pytest.approx(180 + per_unit * waiting + 70) and gpu.unmeasured == 0
    TrainingRun.objects.all().delete()

    # Once the verifier row has finished (300 s), its run measures the rate, and the next row counts its expected
    # run less the 30 s it has run until it has done a tenth: no blank estimate between two rows.
    Submission.objects.filter(state="scoring").update(state="finished", scoring_at=now - timedelta(seconds=400),
                                                      finished_at=now - timedelta(seconds=100))
    Submission.objects.create(state="scoring", method_name="direct-single", scoring_at=now - timedelta(seconds=30),
                              progress={"done": 0, "total": 100}, **common)
    per_unit = 300 / (CPU_SECONDS["verifier"][1] * states)
    gpu = summaries(["gpu"], now)[0]
    expected_rest = per_unit * CPU_SECONDS["direct-single"][1] * states - 30
    assert gpu.running[0]["seconds_left"] == pytest.approx(expected_rest)  # its own rate is not measured yet
    assert gpu.seconds_left == pytest.approx(expected_rest + per_unit * waiting)
    # nor is it by 1 point of 100 done, reported early: a batch's points arrive together, near its end
    Submission.objects.filter(state="scoring").update(progress={"done": 1, "total": 100})
    assert summaries(["gpu"], now)[0].running[0]["seconds_left"] == pytest.approx(expected_rest)
    Submission.objects.filter(state="scoring").update(progress={"done": 50, "total": 100})
    assert summaries(["gpu"], now)[0].running[0]["seconds_left"] == pytest.approx(30)  # half in 30 s: its own rate


def test_a_waiting_row_is_measured_by_its_method_on_the_same_environment(loaded) -> None:  # type: ignore[no-untyped-def]
    """ALFWorld's long prompts cost each method unlike FrozenLake's (its ``verifier`` 31 times per state, a batched
    row 4 times): once a method has run on an environment, its next row there takes that run's rate, and the
    other methods' rows keep the queue's; a rerun answered from the response cache measures nothing; and before
    anything has run on ALFWorld, its rows weigh what the methods cost on its prompts."""
    from jobs.queues import summaries
    from leaderboard.models import Dataset, Environment, State
    from qval.envs import registry
    from submissions.queue_order import CPU_SECONDS

    now = timezone.now()
    other = Dataset.objects.create(environment=loaded.environment, slug="frozenlake-other", version="1.0",
                                   name="Another FrozenLake", fingerprint="0" * 64)
    State.objects.bulk_create(State(dataset=other, external_id=f"s{i}", position=i, split="test", trajectory=i,
                                    step=0, task="t", observation="o") for i in range(7))
    states = State.objects.filter(dataset=loaded, split="test").count()
    common = {"split": "test", "target": "q", "filename": "f", "kind": "baseline", "source": "baseline",
              "backbone_name": "smollm2-135m"}

    def ran(method: str, seconds: float, minutes_ago: int, **config: int) -> None:
        end = now - timedelta(minutes=minutes_ago)
        Submission.objects.create(dataset=loaded, method_name=method, state="finished", finished_at=end,
                                  scoring_at=end - timedelta(seconds=seconds), config=config, **common)

    ran("direct-batched", CPU_SECONDS["direct-batched"][1] * states, 9)  # one second a unit
    ran("verifier", 20 * CPU_SECONDS["verifier"][1] * states, 3)  # twenty seconds a unit
    batched, verifier = CPU_SECONDS["direct-batched"][1], CPU_SECONDS["verifier"][1]
    queue_rate = (batched + 20 * verifier) / (batched + verifier)  # the two runs' seconds over their units
    for minute, method in enumerate(["verifier", "direct-single"]):
        Submission.objects.create(dataset=other, method_name=method, state="queued",
                                  queued_at=now - timedelta(minutes=2 - minute), **common)
    gpu = summaries(["gpu"], now)[0]
    assert gpu.platform_waiting == 2 and gpu.unmeasured == 0
    expected = 20 * CPU_SECONDS["verifier"][1] * 7 + queue_rate * CPU_SECONDS["direct-single"][1] * 7
    assert gpu.seconds_left == pytest.approx(expected)
    # a verifier rerun answered wholly from the cache in 2 s says nothing of the rate; a batched rerun that asked
    # the model 1 answer in 40 did a fortieth of its work, here at one second a unit again
    ran("verifier", 2, 1, requests=0, cache_hits=40)
    ran("direct-batched", batched * states / 40, 1, requests=1, cache_hits=39)
    queue_rate_after = (batched + 20 * verifier + batched / 40) / (batched + verifier + batched / 40)
    assert summaries(["gpu"], now)[0].seconds_left == pytest.approx(
        20 * CPU_SECONDS["verifier"][1] * 7 + queue_rate_after * CPU_SECONDS["direct-single"][1] * 7)
    Submission.objects.filter(finished_at__gt=now - timedelta(minutes=2)).delete()
    # on another environment the verifier's own run says nothing: the queue's rate
    Dataset.objects.filter(pk=other.pk).update(environment=Environment.objects.create(slug="elsewhere", name="E"))
    gpu = summaries(["gpu"], now)[0]
    assert gpu.seconds_left == pytest.approx(queue_rate * (CPU_SECONDS["verifier"][1]
                                                           + CPU_SECONDS["direct-single"][1]) * 7)
    # on ALFWorld, at the same rate, each row weighs its method's cost on ALFWorld's prompts
    Environment.objects.filter(slug="elsewhere").update(slug="alfworld")
    alfworld = registry.ENVIRONMENTS["alfworld"].method_cpu_seconds
    assert alfworld["verifier"][1] > 10 * CPU_SECONDS["verifier"][1]
    assert summaries(["gpu"], now)[0].seconds_left == pytest.approx(
        queue_rate * (alfworld["verifier"][1] + alfworld["direct-single"][1]) * 7)


@pytest.mark.worker
def test_a_scoring_worker_takes_a_users_file_before_the_reference_rows_queued_before_it(  # type: ignore[no-untyped-def]
        transactional_db, loaded, frozenlake, api, settings, data_dir: Path, tmp_path: Path) -> None:
    import redis

    from submissions.baselines import queue_reference_rows
    from tests.conftest import TEST_BROKER_URL

    redis.Redis.from_url(TEST_BROKER_URL).flushdb()
    settings.QVAL_BACKBONES = {}  # the reference methods only: seconds each, on scoring
    platform = queue_reference_rows([loaded])
    assert len(platform) >= 8
    ids = frozenlake.point_ids("dev", "q")
    preds = tmp_path / "dev.csv"
    preds.write_text("id,score\n" + "".join(f"{i},{n % 7}\n" for n, i in enumerate(ids)))
    resp = api.post("/api/v1/submissions/", {"dataset": loaded.key, "split": "dev", "target": "q", "method_name": "m",
                                             "file": SimpleUploadedFile("dev.csv", preds.read_bytes())},
                    format="multipart")
    assert resp.status_code == 201, resp.content
    pk = resp.json()["id"]
    log = data_dir / "users-first-scoring.log"
    with worker_process("scoring", f"test-scoring-first-{os.getpid()}@%h", data_dir, log, 30, flush=False,
                        QVAL_BOOTSTRAP_RESAMPLES="50"):
        mine = wait_for(lambda: (s := Submission.objects.get(pk=pk)).is_final and s, timeout=90)
        assert mine.state == Submission.FINISHED, (mine.error, log.read_text()[-3000:])
        connection.close()
        started = [s.scoring_at for s in Submission.objects.filter(pk__in=[p.pk for p in platform])]
    # Every reference row queued before the upload waited for it: none had started when the file was scored.
    assert all(at is None or at >= mine.finished_at for at in started), (mine.finished_at, sorted(filter(None, started)))


@pytest.fixture
def silent_server():  # type: ignore[no-untyped-def]
    """An address that accepts connections and never answers: a backbone behind it keeps a platform run running
    (heartbeats and all) for as long as the test needs, without a model's CPU."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.slow
@pytest.mark.worker
def test_a_users_container_starts_within_a_minute_behind_the_seeded_runs(  # type: ignore[no-untyped-def]
        transactional_db, engine: qc.Engine, kit_tar, loaded, api, staff, client, settings,  # noqa: F811
        silent_server, data_dir: Path) -> None:
    from submissions.baselines import BaselineRequest, launch_baseline

    backbones = {name: {"kind": "upstream", "url": silent_server, "model": "silent"}
                 for name in ("silent", "smollm2-135m")}
    settings.QVAL_BACKBONES = backbones
    env = {"QVAL_BACKBONES": json.dumps(backbones), "QVAL_CONTAINER_WORK_ROOT": str(engine.work_root),
           "QVAL_BOOTSTRAP_RESAMPLES": str(RESAMPLES), "QVAL_CONTAINER_TIMEOUT_S": "120", "QVAL_HEARTBEAT_S": "2"}
    name = f"{os.getpid()}@%h"
    with worker_process("gpu", f"test-platform-{name}", data_dir, data_dir / "platform-worker.log", 10, **env), \
            worker_process("containers", f"test-users-{name}", data_dir, data_dir / "users-worker.log", 30,
                           flush=False, **env):
        # The platform's own runs: one that holds the gpu worker (its backbone never answers), then the seeding.
        held = launch_baseline(BaselineRequest("direct-single", "silent", loaded.key, "test", "q"), user=staff)
        call_command("seed_reference_rows")
        platform = Submission.objects.filter(source=Submission.SOURCE_BASELINE).exclude(pk=held.pk)
        assert platform.count() >= 10
        wait_for(lambda: Submission.objects.get(pk=held.pk).state == Submission.SCORING, timeout=60)

        waiting = platform.filter(backbone_name="smollm2-135m").order_by("pk")
        first, second = waiting[0], waiting[1]
        place = api.get(f"/api/v1/submissions/{second.pk}/").json()["queue_position"]
        assert place["queue"] == "gpu" and place["running"] == 1 and place["ahead"] >= 1
        assert place["ahead"] == api.get(f"/api/v1/submissions/{first.pk}/").json()["queue_position"]["ahead"] + 1
        status = {q["name"]: q for q in api.get("/api/v1/status/").json()["by_queue"]}
        assert status["gpu"]["platform_waiting"] >= waiting.count() and status["gpu"]["users_waiting"] == 0
        assert [r["id"] for r in status["gpu"]["running"]] == [held.pk]
        assert status["scoring"]["platform_waiting"] > 0  # the reference rows (no model): no scoring worker here
        client.force_login(staff)
        page = client.get(f"/submissions/{second.pk}/").content.decode()
        assert f"{place['ahead']} job{'s' if place['ahead'] > 1 else ''} ahead of it" in page

        # The user's starter kit on the hosted dataset's dev split.
        data = {"kind": "container", "dataset": loaded.key, "split": "dev", "target": "q", "method_name": "manhattan",
                "backbone": "none", "file": SimpleUploadedFile("kit.tar", kit_tar.read_bytes())}
        uploaded = time.monotonic()
        resp = api.post("/api/v1/submissions/", data, format="multipart")
        assert resp.status_code == 201, resp.content
        [pk] = [s["id"] for s in resp.json()["submissions"]]
        sub = wait_for(lambda: (s := Submission.objects.get(pk=pk)).scoring_at is not None and s,
                       timeout=START_WITHIN_S)
        started_s = time.monotonic() - uploaded
        connection.close()
        final = wait_for(lambda: (s := Submission.objects.get(pk=pk)).is_final and s, timeout=120)
        assert final.state == Submission.FINISHED, (final.error, (data_dir / "users-worker.log").read_text()[-3000:])
        assert final.worker.startswith("test-users-") and started_s < START_WITHIN_S
        # The platform's run is still where it was: running, every other platform run still queued.
        assert Submission.objects.get(pk=held.pk).state == Submission.SCORING
        assert not platform.exclude(state=Submission.QUEUED).exists()
        print(f"the user's container started {started_s:.1f} s after its upload "
              f"({sub.scoring_at - sub.received_at} after it was received), finished at {timezone.now()}")

"""Every long job has a heartbeat and one reaper (:mod:`jobs.services`, every kind registered in
:mod:`jobs.registry`): baseline runs, training runs, Best-of-N runs and dataset builds with a stale heartbeat are
requeued once (the message lands on the real queue of the test Redis), then failed; a fresh heartbeat is left
alone. Real PostgreSQL and Redis; the reapers are called with a ``now`` in the future instead of waiting; the slow
test kills a real gpu worker mid-training."""

from __future__ import annotations

import base64
import json
import os
import signal
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import redis
from django.utils import timezone

from tests.conftest import TEST_BROKER_URL, priority_lists, wait_for, worker_process


def take_messages(queue: str) -> list[tuple[str, list]]:
    """Remove and return the (task name, arguments) of the messages waiting on ``queue`` in the test Redis."""
    broker = redis.Redis.from_url(TEST_BROKER_URL)
    raw = [item for key in priority_lists(queue) for item in broker.lrange(key, 0, -1)]
    broker.delete(*priority_lists(queue))
    out = []
    for item in raw:
        message = json.loads(item)
        args = json.loads(base64.b64decode(message["body"]))[0]
        out.append((message["headers"]["task"], args))
    return out


def sent_and_failed(kind, now: datetime | None = None) -> tuple[list[int], list[int]]:  # type: ignore[no-untyped-def]
    """One round of ``kind``'s reaper (:meth:`jobs.services.JobKind.reap`): the ids it sent again and those it failed
    past their deadline."""
    reaped = kind.reap(now)
    return reaped.resent, reaped.overdue


def later(settings) -> datetime:  # type: ignore[no-untyped-def]
    """A ``now`` at which a heartbeat stamped now is stale."""
    return timezone.now() + timedelta(seconds=settings.QVAL_HEARTBEAT_STALE_S + 1)


@pytest.fixture(autouse=True)
def _empty_gpu_queue() -> None:
    take_messages("gpu")


@pytest.fixture
def launched(loaded, settings, django_capture_on_commit_callbacks):  # type: ignore[no-untyped-def]
    """A baseline submission launched (its message sent to ``gpu``) and taken by a worker (``scoring``)."""
    from submissions.baselines import BaselineRequest, _start, launch_baseline

    settings.QVAL_BACKBONES = {"tiny": {"kind": "vllm", "path": "/models/tiny"}}
    with django_capture_on_commit_callbacks(execute=True):
        sub = launch_baseline(BaselineRequest("direct-single", "tiny", loaded.key, "dev"))
    assert take_messages("gpu") == [("workers.tasks.run_baseline_submission", [sub.pk, 1])]
    assert _start(sub.pk, 1, "first@vm") is not None
    sub.refresh_from_db()
    assert (sub.state, sub.attempt, sub.worker) == ("scoring", 1, "first@vm") and sub.heartbeat_at is not None
    return sub


def test_a_lost_baseline_run_is_requeued_to_gpu_once_then_failed(launched, settings,  # type: ignore[no-untyped-def]
                                                                  django_capture_on_commit_callbacks) -> None:
    from submissions import lifecycle
    from submissions.baselines import _start
    from submissions.models import Submission

    sub = launched
    assert lifecycle.JOB.reap_lost() == []  # fresh: left alone
    with django_capture_on_commit_callbacks(execute=True):
        assert lifecycle.JOB.reap_lost(now=later(settings)) == [sub.pk]
    sub.refresh_from_db()
    assert (sub.state, sub.attempt, sub.heartbeat_at) == ("queued", 2, None)
    assert sub.deadline > timezone.now() + timedelta(seconds=settings.QVAL_BASELINE_S - 60)
    assert take_messages("gpu") == [("workers.tasks.run_baseline_submission", [sub.pk, 2])]

    assert _start(sub.pk, 1, "late@vm") is None  # the lost attempt's message, redelivered: ignored
    again = _start(sub.pk, 2, "second@vm")
    assert again is not None and again.progress["deliveries"] == 2
    assert _start(sub.pk, 2, "third@vm") is None  # a duplicate delivery while second@vm beats: left alone
    assert lifecycle.JOB.reap_lost(now=later(settings)) == [sub.pk]
    sub.refresh_from_db()
    assert (sub.state, sub.fault) == (Submission.FAILED, "system")
    assert "stopped responding twice" in sub.error and "not counted towards your quota" in sub.error
    assert take_messages("gpu") == []


def test_a_baseline_heartbeat_beats_while_it_runs_and_stops_after(launched, settings) -> None:  # type: ignore[no-untyped-def]
    from jobs.heartbeat import beating
    from submissions import lifecycle
    from submissions.models import Submission

    settings.QVAL_HEARTBEAT_S = 0.05
    old = timezone.now() - timedelta(hours=1)
    Submission.objects.filter(pk=launched.pk).update(heartbeat_at=old)
    with beating(Submission.objects.filter(state=Submission.SCORING), launched.pk):
        wait_for(lambda: Submission.objects.get(pk=launched.pk).heartbeat_at > old + timedelta(minutes=59), timeout=5)
        assert lifecycle.JOB.reap_lost() == []
    Submission.objects.filter(pk=launched.pk).update(state=Submission.FINISHED)
    before = Submission.objects.get(pk=launched.pk).heartbeat_at
    with beating(Submission.objects.filter(state=Submission.SCORING), launched.pk):
        pass
    assert Submission.objects.get(pk=launched.pk).heartbeat_at == before  # a final job is not stamped


def test_the_eta_counts_from_this_deliverys_first_report(launched) -> None:  # type: ignore[no-untyped-def]
    from qval.methods.run import Progress
    from submissions.baselines import _ProgressWriter
    from submissions.models import Submission, baseline_seconds_left

    writer = _ProgressWriter(launched)
    writer(Progress(done=2, total=10, tokens=5))
    progress = Submission.objects.get(pk=launched.pk).progress
    assert progress["done"] == 2 and "beat" not in progress and baseline_seconds_left(progress) is None  # one report: no rate
    progress.update(done=6, at=progress["first_at"] + 4.0)
    assert baseline_seconds_left(progress) == pytest.approx(4.0)  # 4 points in 4 s, 4 left


def test_a_lost_training_run_is_requeued_once_then_failed(loaded, settings,  # type: ignore[no-untyped-def]
                                                          django_capture_on_commit_callbacks) -> None:
    from learning import services
    from learning.models import TrainingRun

    run = services.create_run("qlass", loaded)
    fresh = services.create_run("qlass", loaded)
    TrainingRun.objects.filter(pk__in=[run.pk, fresh.pk]).update(status="running", worker="lost@vm",
                                                                  heartbeat_at=timezone.now())
    assert services.JOB.reap_lost() == []
    TrainingRun.objects.filter(pk=fresh.pk).update(heartbeat_at=later(settings))  # beats on
    with django_capture_on_commit_callbacks(execute=True):
        assert services.JOB.reap_lost(now=later(settings)) == [run.pk]
    run.refresh_from_db()
    assert (run.status, run.attempt, run.heartbeat_at) == ("queued", 2, None)
    assert run.sent_at is not None and run.queued_at > run.created_at  # queued again, and sent
    assert take_messages("gpu") == [("learning.tasks.train_learned", [run.pk])]
    assert TrainingRun.objects.get(pk=fresh.pk).status == "running"

    TrainingRun.objects.filter(pk=run.pk).update(status="running", worker="second@vm", heartbeat_at=timezone.now())
    assert services.run_training(run.pk, "third@vm").status == "running"  # a redelivery while second@vm beats
    assert services.JOB.reap_lost(now=later(settings)) == [run.pk]
    run.refresh_from_db()
    assert run.status == "failed" and run.finished_at is not None
    assert run.error.startswith("the worker running it stopped responding twice")
    assert take_messages("gpu") == []
    assert services.run_training(run.pk, "late@vm").status == "failed"  # a late redelivery does not revive it


def test_a_lost_best_of_n_run_is_requeued_once_then_resumes_and_fails_the_second_time(  # type: ignore[no-untyped-def]
        db, settings, django_capture_on_commit_callbacks) -> None:
    from best_of_n import services as best_of_n
    from best_of_n.models import BestOfNRun

    run = best_of_n.create_run("frozenlake", "oracle", n=2, num_episodes=3)
    assert best_of_n.start(run.pk, "first@vm") is not None
    assert best_of_n.JOB.reap_lost() == []
    assert best_of_n.start(run.pk, "other@vm") is None  # a duplicate delivery while first@vm beats
    with django_capture_on_commit_callbacks(execute=True):
        assert best_of_n.JOB.reap_lost(now=later(settings)) == [run.pk]
    run.refresh_from_db()
    assert (run.status, run.attempt, run.heartbeat_at) == ("queued", 2, None)
    assert take_messages("gpu") == [("workers.best_of_n.play_best_of_n", [run.pk])]

    assert best_of_n.start(run.pk, "second@vm") is not None
    assert best_of_n.JOB.reap_lost(now=later(settings)) == [run.pk]
    run.refresh_from_db()
    assert run.status == "failed" and "stopped responding twice" in run.error
    assert best_of_n.start(run.pk, "late@vm") is None
    assert take_messages("gpu") == []
    BestOfNRun.objects.filter(pk=run.pk).update(status="running", attempt=1, heartbeat_at=None)
    assert best_of_n.JOB.reap_lost(now=later(settings)) == []  # never stamped: not this reaper's to judge


def test_one_reaper_is_sent_by_beat_to_the_scoring_queue_and_walks_every_kind(settings) -> None:  # type: ignore[no-untyped-def]
    from jobs import registry
    from qval_site.celery import app

    reapers = [entry for entry in settings.CELERY_BEAT_SCHEDULE.values() if "reap" in entry["task"]]
    assert reapers == [{"task": "jobs.tasks.reap_jobs", "schedule": settings.QVAL_REAP_EVERY_S}]
    app.loader.import_default_modules()
    assert "jobs.tasks.reap_jobs" in app.tasks
    assert settings.CELERY_TASK_ROUTES["jobs.tasks.reap_jobs"] == {"queue": "scoring"}
    names = [kind.name for kind in registry.kinds()]
    assert names == ["submission", "training run", "best-of-n run", "dataset build"]


def test_a_lost_dataset_build_is_requeued_to_datasets_once_then_failed(db, settings,  # type: ignore[no-untyped-def]
                                                                       django_capture_on_commit_callbacks) -> None:
    from leaderboard import building
    from leaderboard.models import DatasetBuild

    take_messages("datasets")
    with django_capture_on_commit_callbacks(execute=True):
        b = building.enqueue("frozenlake")
    assert take_messages("datasets") == [("workers.builds.build_dataset", [b.pk])]
    assert building.start(b.pk, "first@vm") is not None
    assert building.start(b.pk, "other@vm") is None  # a duplicate delivery while first@vm beats
    assert building.JOB.reap_lost() == []
    with django_capture_on_commit_callbacks(execute=True):
        assert building.JOB.reap_lost(now=later(settings)) == [b.pk]
    b.refresh_from_db()
    assert (b.status, b.attempt, b.heartbeat_at) == ("queued", 2, None)  # it resumes from its checkpoint
    assert take_messages("datasets") == [("workers.builds.build_dataset", [b.pk])]
    assert building.start(b.pk, "second@vm") is not None
    assert building.JOB.reap_lost(now=later(settings)) == [b.pk]
    b.refresh_from_db()
    assert b.status == "failed" and "stopped responding twice" in b.error and b.finished_at is not None
    assert building.start(b.pk, "late@vm") is None and DatasetBuild.objects.get(pk=b.pk).status == "failed"
    assert take_messages("datasets") == []


@pytest.mark.slow
@pytest.mark.worker
def test_a_training_run_whose_worker_is_killed_is_reaped_and_finishes_on_another(  # type: ignore[no-untyped-def]
        transactional_db, frozenlake, data_dir: Path, settings) -> None:
    from learning import services
    from learning.models import TrainingRun
    from leaderboard.loading import load_dataset

    dataset = load_dataset(frozenlake)[0]
    fast = {"QVAL_HEARTBEAT_S": "1"}
    log = data_dir / "reaped-training-worker.log"
    with worker_process("gpu", f"test-reap-a-{os.getpid()}@%h", data_dir, log, 20, **fast) as first:
        run = services.enqueue(services.create_run("amc-value", dataset, params={"steps": 1000, "samples": 1}))
        wait_for(lambda: TrainingRun.objects.filter(pk=run.pk, status="running", done__gt=0).exists(),
                 timeout=300, interval=0.2)
        beat = TrainingRun.objects.get(pk=run.pk).heartbeat_at
        wait_for(lambda: TrainingRun.objects.get(pk=run.pk).heartbeat_at > beat, timeout=30, interval=0.2)  # it beats
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert TrainingRun.objects.get(pk=run.pk).status == "running"
    with worker_process("gpu", f"test-reap-b-{os.getpid()}@%h", data_dir, log, 20, flush=True, **fast):
        assert services.JOB.reap_lost() == []  # not stale yet
        now = timezone.now() + timedelta(seconds=settings.QVAL_HEARTBEAT_STALE_S + 1)
        assert services.JOB.reap_lost(now=now) == [run.pk]
        done = wait_for(lambda: TrainingRun.objects.filter(pk=run.pk, status__in=["finished", "failed"]).first(),
                        timeout=900, interval=1.0)
    assert done.status == "finished", (done.error, log.read_text()[-3000:])
    assert done.attempt == 2 and done.worker.startswith("test-reap-b-") and done.submissions.count() == 4


# -- messages that never reached the broker ------------------------------------------------------------
def test_a_submission_whose_message_never_left_is_sent_again_by_the_reaper(loaded, user, settings,  # type: ignore[no-untyped-def]
                                                                           django_capture_on_commit_callbacks) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    from submissions import lifecycle, services
    from submissions.models import Submission

    take_messages("scoring")
    req = services.SubmissionRequest(dataset=loaded.slug, split="dev", target="q", method_name="m")
    with django_capture_on_commit_callbacks(execute=False):  # the web process died before sending it
        lost = services.create_submission(user, req, SimpleUploadedFile("p.csv", b"id,score\nx,1\n"))
    assert Submission.objects.get(pk=lost.pk).sent_at is None
    with django_capture_on_commit_callbacks(execute=True):
        sent = services.create_submission(user, req, SimpleUploadedFile("q.csv", b"id,score\nx,1\n"))
    assert Submission.objects.get(pk=sent.pk).sent_at is not None
    assert take_messages("scoring") == [("workers.tasks.validate_upload", [sent.pk])]

    assert lifecycle.JOB.resend_unsent() == []  # too young: its message may be on its way
    later_on = timezone.now() + timedelta(seconds=settings.QVAL_RESEND_AFTER_S + 1)
    assert lifecycle.JOB.resend_unsent(now=later_on) == [lost.pk]
    assert take_messages("scoring") == [("workers.tasks.validate_upload", [lost.pk])]
    assert Submission.objects.get(pk=lost.pk).sent_at is not None
    assert lifecycle.JOB.resend_unsent(now=later_on) == []  # sent once

    # A queued job whose message was lost is sent to its queue (the attempt is not counted again).
    Submission.objects.filter(pk=lost.pk).update(state=Submission.QUEUED, queued_at=timezone.now(), sent_at=None,
                                                 attempt=1)
    assert lifecycle.JOB.resend_unsent(now=later_on) == [lost.pk]
    assert take_messages("scoring") == [("workers.tasks.score_submission", [lost.pk, 1])]
    assert Submission.objects.get(pk=lost.pk).attempt == 1


# -- training and Best-of-N runs whose message never left -------------------------------------------
@pytest.fixture
def broker_down(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Celery sends to a port nothing listens on (its connection pools made afresh) until ``undo()``."""
    from qval_site.celery import app

    monkeypatch.setattr(app.conf, "broker_url", "redis://127.0.0.1:1/0")
    monkeypatch.setattr(app, "_pool", None)
    monkeypatch.setattr(app.amqp, "_producer_pool", None)
    return monkeypatch


def test_a_training_run_queued_while_the_broker_is_down_is_sent_by_its_reaper_and_trained(  # type: ignore[no-untyped-def]
        loaded, settings, broker_down, django_capture_on_commit_callbacks) -> None:
    from jobs.tasks import reap_jobs
    from learning import services, tasks
    from learning.models import TrainingRun

    with django_capture_on_commit_callbacks(execute=True):
        run = services.enqueue(services.create_run("qlass", loaded))  # the request succeeds
    run.refresh_from_db()
    assert (run.status, run.sent_at) == ("queued", None)
    broker_down.undo()

    assert sent_and_failed(services.JOB) == ([], [])  # too young: its message may be on its way
    later_on = timezone.now() + timedelta(seconds=settings.QVAL_RESEND_AFTER_S + 1)
    assert sent_and_failed(services.JOB, now=later_on) == ([run.pk], [])
    [(task, args)] = take_messages("gpu")
    assert (task, args) == ("learning.tasks.train_learned", [run.pk])
    assert TrainingRun.objects.get(pk=run.pk).sent_at is not None
    assert sent_and_failed(services.JOB, now=later_on) == ([], [])  # sent once
    reap_jobs()  # what beat sends: nothing left to send
    assert take_messages("gpu") == []
    assert tasks.train_learned.apply(args=args).get() == "finished"  # the worker's delivery


def test_a_best_of_n_run_queued_while_the_broker_is_down_is_sent_by_its_reaper_and_played(  # type: ignore[no-untyped-def]
        db, settings, broker_down, django_capture_on_commit_callbacks) -> None:
    from best_of_n import services as best_of_n
    from best_of_n.models import BestOfNRun
    from best_of_n.tasks import play_best_of_n

    with django_capture_on_commit_callbacks(execute=True):
        run = best_of_n.enqueue(best_of_n.create_run("frozenlake", "oracle", n=2, num_episodes=3))
    assert BestOfNRun.objects.get(pk=run.pk).sent_at is None
    broker_down.undo()

    later_on = timezone.now() + timedelta(seconds=settings.QVAL_RESEND_AFTER_S + 1)
    assert sent_and_failed(best_of_n.JOB, now=later_on) == ([run.pk], [])
    [(task, args)] = take_messages("gpu")
    assert (task, args) == ("workers.best_of_n.play_best_of_n", [run.pk])
    assert play_best_of_n.apply(args=args).get() == "finished"  # the worker's delivery
    run.refresh_from_db()
    assert run.status == "finished" and run.done == 3 and run.sent_at is not None


def test_a_run_not_started_within_the_queue_limit_fails_with_the_reason(  # type: ignore[no-untyped-def]
        loaded, settings, broker_down, django_capture_on_commit_callbacks) -> None:
    from best_of_n import services as best_of_n
    from learning import services

    with django_capture_on_commit_callbacks(execute=True):
        unsent = services.enqueue(services.create_run("qlass", loaded))
    broker_down.undo()
    with django_capture_on_commit_callbacks(execute=True):
        sent = services.enqueue(services.create_run("qlass", loaded))
        waiting = best_of_n.enqueue(best_of_n.create_run("frozenlake", "oracle", n=2, num_episodes=3))
    assert sorted(take_messages("gpu")) == [("learning.tasks.train_learned", [sent.pk]),
                                            ("workers.best_of_n.play_best_of_n", [waiting.pk])]

    overdue = timezone.now() + timedelta(seconds=settings.QVAL_RUN_QUEUE_S + 1)
    assert sent_and_failed(services.JOB, now=overdue) == ([], [unsent.pk, sent.pk])
    assert sent_and_failed(best_of_n.JOB, now=overdue) == ([], [waiting.pk])
    for run in (unsent, sent, waiting):
        run.refresh_from_db()
        assert run.status == "failed" and run.finished_at is not None
    limit = f"not started within {settings.QVAL_RUN_QUEUE_S:g} s of being queued: "
    assert unsent.error == limit + "its message never reached the broker (Redis was unreachable each time it was sent)"
    assert sent.error == waiting.error == limit + "no worker consuming its queue took it"
    assert take_messages("gpu") == []  # a failed run is not sent


# -- one lifecycle: a late delivery never scores a submission twice --------------------------------------
def test_late_deliveries_of_a_file_job_do_nothing_and_the_history_is_appended(  # type: ignore[no-untyped-def]
        api, loaded, frozenlake, settings, django_capture_on_commit_callbacks) -> None:
    from submissions import lifecycle
    from submissions.models import Result, Submission
    from tests.test_site import actor_points, csv_bytes, upload
    from workers.tasks import score_submission

    settings.QVAL_BOOTSTRAP_RESAMPLES = 0
    take_messages("scoring")
    ids, labels = actor_points(frozenlake, "dev")
    with django_capture_on_commit_callbacks(execute=True):
        pk = upload(api, csv_bytes(ids, labels), split="dev")["id"]
    assert ("workers.tasks.score_submission", [pk, 1]) in take_messages("scoring")  # after its check's message
    assert lifecycle.claim(pk, 1, "w1@vm", kinds={Submission.KIND_FILE}) is not None  # w1 dies after this
    with django_capture_on_commit_callbacks(execute=True):
        assert lifecycle.JOB.reap_lost(now=later(settings)) == [pk]
    assert take_messages("scoring") == [("workers.tasks.score_submission", [pk, 2])]

    assert score_submission(pk, 1) == Submission.QUEUED  # the lost attempt's message, redelivered: ignored
    assert Submission.objects.get(pk=pk).worker == "w1@vm"
    assert score_submission(pk, 2) == Submission.FINISHED
    done = Submission.objects.get(pk=pk)
    results = list(Result.objects.filter(submission=done).values_list("pk", "value"))
    steps = [("validating", 0), ("queued", 1), ("scoring", 1), ("queued", 2), ("scoring", 2), ("finished", 2)]
    assert [(e["state"], e["attempt"]) for e in done.history] == steps
    assert [state for state, _ in done.timeline()] == ["received", *(s for s, _ in steps)]

    for attempt in (1, 2, None):  # any later delivery of a finished job changes nothing
        assert score_submission(pk, attempt) == Submission.FINISHED
    again = Submission.objects.get(pk=pk)
    assert (again.history, again.attempt, again.finished_at) == (done.history, 2, done.finished_at)
    assert list(Result.objects.filter(submission=again).values_list("pk", "value")) == results
    assert lifecycle.fail(pk, "late", Submission.FAULT_SYSTEM, attempt=1) == Submission.FINISHED
    assert lifecycle.finish(pk, [], attempt=2) == Submission.FINISHED and Result.objects.filter(submission=pk).exists()

"""Sending jobs to workers, their heartbeats, the reaper of lost jobs, and the remote job protocol.

Every queued submission (a file, a container, a baseline run) is sent by :func:`dispatch`, which
counts the attempt. Every message of a submission -- its upload's check, its job -- goes out through
:func:`send` once the transaction commits, which stamps ``Submission.sent_at``; when the broker is
down the message is not sent, the request still succeeds, and :func:`resend_unsent` sends it again
once the broker is back (a reaper on beat). While a job runs, its worker stamps ``Submission.heartbeat_at`` every
``QVAL_HEARTBEAT_S`` (:func:`workers.heartbeat.beating` on a worker with the database;
``POST /api/v1/jobs/<id>/heartbeat`` from a remote one). A job ``scoring`` with no heartbeat for
``QVAL_HEARTBEAT_STALE_S`` lost its worker: :func:`reap_stale` requeues it once, and fails it as a
platform fault the second time.

**Remote gpu workers** (``QVAL_GPU_WORKERS=remote``; :mod:`qval.remote_worker`, no database
settings) get a broker message holding only the submission id and a fresh random token. The site
keeps the token's SHA-256 (:class:`workers.models.JobToken`), bound to that submission and attempt,
expiring after ``QVAL_JOB_TOKEN_TTL_S``. With it the worker starts the job (:func:`start`: the
spec), fetches the split's inputs without labels (:func:`input_tar`) and the archive, sends
heartbeats, and posts the run's predictions and logs once (:func:`accept_result` spends the token);
a scoring worker of the site scores them (``workers.tasks.score_remote_run``).

Workers register by name with :func:`register` (local ones from a thread, remote ones over HTTP
with ``QVAL_WORKER_KEY``); the status page lists them.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import tarfile
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from qval import containers as qc
from qval import safejson
from submissions import services
from submissions.models import Submission

from . import heartbeat as beats
from .models import JobToken, WorkerHeartbeat

log = logging.getLogger(__name__)

REMOTE_TASK = "qval.remote_worker.run_job"
"""The task name a remote gpu worker consumes (arguments: submission id, raw token)."""

MAX_LOG_CHARS = 2 * qc.LOG_KEEP_BYTES + 200
"""Most characters of stdout/stderr a remote worker may post (what a run keeps, and a marker)."""


class JobRefused(Exception):
    """A job request with a token that is not (or no longer) valid; ``status`` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# -- dispatching ---------------------------------------------------------------------------
def dispatch(sub: Submission) -> None:
    """Count a new attempt of the (``queued``) submission, save it, and :func:`send` it to its queue
    once the transaction commits."""
    sub.attempt += 1
    sub.heartbeat_at = None
    sub.sent_at = None
    sub.save()
    send([sub.pk])


def send(pks: Sequence[int]) -> None:
    """Once the current transaction commits, send the message of each submission's state
    (:func:`send_now`)."""
    pks = list(pks)
    transaction.on_commit(lambda: send_now(pks))


def send_now(pks: Sequence[int]) -> list[int]:
    """Send the message of each submission's current state and stamp its ``sent_at``; return the ids sent.

    ``received``: its check -- a predictions file's (``validate_upload``), a container archive's
    (``inspect_container_upload``, one message for the submissions sharing it). ``queued``: its job --
    a predictions file to ``scoring``, a baseline run to ``gpu``, a container to ``gpu`` (to a remote
    worker with a fresh token when ``QVAL_GPU_WORKERS=remote``). When the broker cannot be reached the
    rest stay unsent, logged, for :func:`resend_unsent`; no exception reaches the caller.
    """
    from qval_site.celery import app
    from workers import tasks  # the tasks module imports this one

    subs = list(Submission.objects.filter(pk__in=pks, state__in=(Submission.RECEIVED, Submission.QUEUED),
                                          sent_at__isnull=True).order_by("pk"))
    archives: dict[str, list[int]] = {}  # the received containers, by the archive they share
    for sub in subs:
        if sub.state == Submission.RECEIVED and sub.kind == Submission.KIND_CONTAINER:
            archives.setdefault(sub.file.name, []).append(sub.pk)
    sent: list[int] = []
    try:
        # A remote gpu worker has no database: the site's scoring workers inspect archives then.
        queue = "gpu" if settings.QVAL_GPU_WORKERS == "local" else "scoring"
        for group in archives.values():
            tasks.inspect_container_upload.apply_async((group,), queue=queue)
            sent += group
        for sub in subs:
            if sub.pk in sent:
                continue
            if sub.state == Submission.RECEIVED:
                tasks.validate_upload.delay(sub.pk)
            elif sub.kind == Submission.KIND_FILE:
                tasks.score_submission.delay(sub.pk)
            elif sub.kind == Submission.KIND_BASELINE:
                tasks.run_baseline_submission.delay(sub.pk)
            elif settings.QVAL_GPU_WORKERS == "local":
                tasks.run_container_submission.delay(sub.pk)
            else:
                app.send_task(REMOTE_TASK, args=[sub.pk, issue_token(sub)], queue="gpu")
            sent.append(sub.pk)
    except BrokerUnreachable as exc:
        unsent = sorted({s.pk for s in subs} - set(sent))
        log.warning("the broker is unreachable (%s): submissions %s stay unsent until it is back", exc, unsent)
    finally:
        if sent:
            Submission.objects.filter(pk__in=sent).update(sent_at=timezone.now())
    return sent


def resend_unsent(now: datetime | None = None) -> list[int]:
    """Send again the messages of submissions ``received`` or ``queued`` for over
    ``QVAL_RESEND_AFTER_S`` whose message never reached the broker; return the ids sent."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.QVAL_RESEND_AFTER_S)
    waiting = Submission.objects.filter(
        Q(state=Submission.RECEIVED, received_at__lt=cutoff) | Q(state=Submission.QUEUED, queued_at__lt=cutoff),
        sent_at__isnull=True)
    pks = list(waiting.values_list("pk", flat=True))
    return send_now(pks) if pks else []


def issue_token(sub: Submission) -> str:
    """A new random token for the submission's current attempt (only its hash is stored)."""
    raw = secrets.token_urlsafe(32)
    JobToken.objects.create(submission=sub, attempt=sub.attempt, token_sha256=_digest(raw),
                            expires_at=timezone.now() + timedelta(seconds=settings.QVAL_JOB_TOKEN_TTL_S))
    return raw


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


# -- the reaper ----------------------------------------------------------------------------------
def reap_stale(now: datetime | None = None) -> list[int]:
    """Requeue (once) or fail every job ``scoring`` whose heartbeat is older than
    ``QVAL_HEARTBEAT_STALE_S`` at ``now``; return their ids. A requeued job's earlier tokens stop working."""
    reason = beats.lost_reason() + "; a platform fault, not counted towards your quota"
    return beats.reap(Submission.objects.filter(state=Submission.SCORING),
                      lambda sub: requeue_or_fail(sub, reason), now)


def requeue_or_fail(sub: Submission, reason: str) -> None:
    """A job that failed through the platform (its worker lost, or unable to run it): send it
    again with a new attempt, or on its last attempt fail it with ``reason`` (not counted
    towards the quota). Call with the submission locked."""
    if sub.attempt >= beats.MAX_ATTEMPTS:
        sub.transition(Submission.FAILED, error=reason, fault=Submission.FAULT_SYSTEM)
        return
    allowed = {Submission.KIND_CONTAINER: settings.QVAL_CONTAINER_QUEUE_S,
               Submission.KIND_BASELINE: settings.QVAL_BASELINE_S}.get(sub.kind, settings.QVAL_SCORING_S)
    sub.deadline = timezone.now() + timedelta(seconds=allowed)
    sub.transition(Submission.QUEUED, save=False)
    dispatch(sub)


def register(name: str, kind: str, queues: str, current: int | None = None) -> WorkerHeartbeat:
    """Record a heartbeat of the worker ``name`` (created at its first), running ``current``."""
    now = timezone.now()
    worker, created = WorkerHeartbeat.objects.get_or_create(
        name=name[:200], defaults={"kind": kind, "queues": queues[:200], "started_at": now, "last_seen": now})
    worker.kind, worker.queues, worker.last_seen = kind, queues[:200], now
    worker.current = Submission.objects.filter(pk=current).first() if current else None
    worker.save()
    return worker


def local_heartbeats(name: str, queues: str, stop: threading.Event) -> None:
    """Register the local worker ``name`` every ``QVAL_HEARTBEAT_S`` until ``stop`` is set (run in
    a thread of the worker's main process; the connection is closed after each beat, so the
    processes it forks never share an open one)."""
    while True:
        try:
            register(name, WorkerHeartbeat.LOCAL, queues)
        except Exception:  # noqa: BLE001 - the database may be restarting; try again next beat
            log.warning("worker %s could not record its heartbeat", name, exc_info=True)
        finally:
            connection.close()
        if stop.wait(settings.QVAL_HEARTBEAT_S):
            return


# -- the remote job protocol -------------------------------------------------------------------
def authorize(pk: int, raw: str) -> tuple[Submission, JobToken]:
    """The submission (locked: call inside a transaction) and token of a remote job request;
    raise :class:`JobRefused` for a token that is unknown, of another submission or attempt,
    expired or spent, or a submission already final."""
    token = JobToken.objects.select_for_update().filter(token_sha256=_digest(raw or ""), submission_id=pk).first()
    if token is None:
        raise JobRefused(403, "unknown job token for this submission")
    sub = Submission.objects.select_for_update().select_related("dataset").get(pk=pk)
    if token.used_at is not None:
        raise JobRefused(403, "this job token was already used to post a result")
    if token.expires_at < timezone.now():
        raise JobRefused(403, "this job token has expired")
    if token.attempt != sub.attempt:
        raise JobRefused(403, "this job token belongs to an earlier attempt (the job was requeued)")
    if sub.state not in (Submission.QUEUED, Submission.SCORING):
        raise JobRefused(409, f"submission {pk} is {sub.state}; nothing to run")
    return sub, token


def start(pk: int, raw: str, worker: str) -> dict[str, Any]:
    """Start (or resume after a fetch was retried) a remote job; return its spec: what to run,
    on which split, under which limits, and the archive's SHA-256."""
    now = timezone.now()
    with transaction.atomic():
        sub, token = authorize(pk, raw)
        if sub.deadline is not None and sub.deadline < now:
            sub.transition(Submission.FAILED, error=services.deadline_reason(sub), fault=Submission.FAULT_SYSTEM)
            raise JobRefused(409, f"submission {pk} passed its deadline")
        limits = services.container_limits(sub.dataset)
        if sub.state == Submission.QUEUED:
            sub.deadline = now + timedelta(seconds=limits.timeout_s + settings.QVAL_CONTAINER_GRACE_S)
            sub.transition(Submission.SCORING, save=False)
        sub.worker = f"remote:{worker}"[:200]
        sub.limits = asdict(limits)
        sub.heartbeat_at = now
        sub.save()
        token.started_at, token.worker = token.started_at or now, worker[:200]
        token.save()
    return {
        "submission": sub.pk,
        "attempt": sub.attempt,
        "dataset": sub.dataset.key,
        "split": sub.split,
        "target": sub.target,
        "limits": asdict(limits),
        "backbone": services.container_backbone(sub.backbone_name),
        "image_id": sub.image_id,
        "archive_sha256": sub.sha256,
        "heartbeat_s": settings.QVAL_HEARTBEAT_S,
    }


def running(pk: int, raw: str) -> Submission:
    """The submission of a valid token of a started job (``scoring``), for a fetch or a heartbeat."""
    with transaction.atomic():
        sub, _ = authorize(pk, raw)
        if sub.state != Submission.SCORING:
            raise JobRefused(409, f"submission {pk} was not started; POST .../start first")
        return sub


def heartbeat(pk: int, raw: str) -> None:
    """A remote job's heartbeat."""
    with transaction.atomic():
        sub = running(pk, raw)
        sub.heartbeat_at = timezone.now()
        sub.save(update_fields=["heartbeat_at"])


def input_tar(sub: Submission) -> IO[bytes]:
    """A temporary file holding the split's ``/input`` folder as a tar (no label in it)."""
    from leaderboard.loading import inputs_for

    images = Path(settings.QVAL_DATASETS_DIR) / f"{sub.dataset.slug}-{sub.dataset.version}" / "images"
    out = tempfile.TemporaryFile()
    with tempfile.TemporaryDirectory() as tmp:
        folder = qc.write_input(inputs_for(sub.dataset, sub.split), sub.split, sub.target, Path(tmp) / "input",
                                images_from=images if images.is_dir() else None)
        with tarfile.open(fileobj=out, mode="w") as tar:
            tar.add(folder, arcname=".")
    out.seek(0)
    return out


def accept_result(pk: int, raw: str, run_json: str, predictions: bytes | None) -> None:
    """Record a remote run's outcome (``run_json``, a JSON object: ``error``, ``exit_code``, ``wall_s``,
    ``stdout``, ``stderr``, ``token_usage``) and its predictions, spend the token, and send it to be scored;
    a ``platform_error`` (the worker could not run it) requeues it once instead. Raises :class:`JobRefused` for a bad
    token -- checked first: nothing of the body is decoded for an unknown caller -- and ``ValueError`` for a
    malformed result (``run_json`` is read by :func:`qval.safejson.load_json`: too deep or not JSON is such
    an error, never a crash)."""
    from workers import tasks  # the tasks module imports this one

    with transaction.atomic():
        sub = running(pk, raw)
        run = _run_object(run_json)
        fields = _run_fields(run)
        token = JobToken.objects.select_for_update().get(token_sha256=_digest(raw))
        token.used_at = timezone.now()
        token.save()
        if run.get("platform_error"):
            log.error("remote worker %s could not run submission %s: %s", token.worker, pk, run["platform_error"])
            requeue_or_fail(sub, tasks.INTERNAL_ERROR.format(doing="running the container") + " (tried twice)")
            return
        for name, value in fields.items():
            setattr(sub, name, value)
        sub.heartbeat_at = timezone.now()
        if predictions is not None:
            sub.predictions.save(f"{sub.pk}-a{sub.attempt}-predictions.jsonl", ContentFile(predictions), save=False)
        sub.save()
        transaction.on_commit(lambda: tasks.score_remote_run.delay(pk))


def _run_object(run_json: str) -> dict[str, Any]:
    """The posted ``run`` document as a JSON object, or ``ValueError`` saying why it is not one."""
    try:
        run = safejson.load_json(run_json)
    except safejson.JSONError as exc:
        raise ValueError(f"run: not a JSON object ({exc})") from None
    if not isinstance(run, dict):
        raise ValueError("run: expected a JSON object")
    return run


def _run_fields(run: dict[str, Any]) -> dict[str, Any]:
    """The submission fields of a posted run, checked."""
    error = run.get("error")
    exit_code, wall_s = run.get("exit_code"), run.get("wall_s")
    if error is not None and not isinstance(error, str):
        raise ValueError("error: expected a string or null")
    if exit_code is not None and not isinstance(exit_code, int):
        raise ValueError("exit_code: expected an integer or null")
    if wall_s is not None and not isinstance(wall_s, (int, float)):
        raise ValueError("wall_s: expected a number or null")
    usage = run.get("token_usage") or {}
    if not isinstance(usage, dict) or not all(isinstance(v, int) for v in usage.values()):
        raise ValueError("token_usage: expected an object of integers")
    logs = {}
    for name in ("stdout", "stderr"):
        text = run.get(name) or ""
        if not isinstance(text, str):
            raise ValueError(f"{name}: expected a string")
        logs[name] = text[:MAX_LOG_CHARS].replace("\x00", "\ufffd")
    return {"container_outcome": (error or "finished")[:500], "exit_code": exit_code,
            "wall_s": float(wall_s) if wall_s is not None else None, "token_usage": usage, **logs}

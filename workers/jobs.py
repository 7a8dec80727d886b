"""The workers' registry and the remote job protocol (a submission's lifecycle -- sending, claiming,
heartbeats, finishing, the reapers -- is :mod:`submissions.lifecycle`).

While a job runs, its worker stamps ``Submission.heartbeat_at`` every ``QVAL_HEARTBEAT_S``
(:func:`submissions.lifecycle.beating` on a worker with the database; ``POST /api/v1/jobs/<id>/heartbeat``
from a remote one, :func:`heartbeat` here).

**Remote gpu workers** (``QVAL_GPU_WORKERS=remote``; :mod:`qval.remote_worker`, no database
settings) get a broker message holding only the submission id and a fresh random token. The site
keeps the token's SHA-256 (:class:`workers.models.JobToken`, :func:`submissions.lifecycle.issue_token`),
bound to that submission and attempt, expiring after ``QVAL_JOB_TOKEN_TTL_S``. With it the worker starts the job (:func:`start`: the
spec), fetches the split's inputs without labels (:func:`input_tar`) and the archive, sends
heartbeats, and posts the run's predictions and logs once (:func:`accept_result` spends the token);
a scoring worker of the site scores them (``workers.tasks.score_remote_run``).

Workers register by name with :func:`register` (local ones from a thread, remote ones over HTTP
with ``QVAL_WORKER_KEY``); the status page lists them.
"""

from __future__ import annotations

import logging
import tarfile
import tempfile
import threading
from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import connection, transaction
from django.utils import timezone

from leaderboard.exports import dataset_dir
from leaderboard.loading import inputs_for
from qval import containers as qc
from qval import safejson, schema
from qval.methods.registry import get_method
from submissions import baselines, lifecycle, services
from submissions.models import Submission

from .models import JobToken, WorkerHeartbeat

log = logging.getLogger(__name__)

MAX_LOG_CHARS = 2 * qc.LOG_KEEP_BYTES + 200
"""Most characters of stdout/stderr a remote worker may post (what a run keeps, and a marker)."""


class JobRefused(Exception):
    """A job request with a token that is not (or no longer) valid; ``status`` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


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
    token = JobToken.objects.select_for_update().filter(token_sha256=lifecycle.token_digest(raw or ""), submission_id=pk).first()
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


def start_container(sub: Submission) -> None:
    """What a container job records when it starts, here or on a remote worker (a ``start`` of
    :func:`submissions.lifecycle.claim`): the limits it runs under and, at its first start, a deadline of its
    timeout plus ``QVAL_CONTAINER_GRACE_S`` (a delivery after its worker died runs within the same)."""
    limits = services.container_limits(sub.dataset)
    if sub.state == Submission.QUEUED:
        sub.deadline = timezone.now() + timedelta(seconds=limits.timeout_s + settings.QVAL_CONTAINER_GRACE_S)
    sub.limits = asdict(limits)


def start(pk: int, raw: str, worker: str) -> dict[str, Any]:
    """Start (or resume after a fetch was retried) a remote job; return its spec: what to run,
    on which split, under which limits, and the archive's SHA-256 -- or for a GPU campaign's baseline run
    (``kind: baseline``) the method, its seed and options, and the backbone name."""
    now = timezone.now()
    with transaction.atomic():
        sub, token = authorize(pk, raw)
        if sub.deadline is not None and sub.deadline < now:
            sub.transition(Submission.FAILED, error=lifecycle.deadline_reason(sub), fault=Submission.FAULT_SYSTEM)
            raise JobRefused(409, f"submission {pk} passed its deadline")
        if sub.kind == Submission.KIND_BASELINE:
            return _start_baseline(sub, token, worker, now)
        start_container(sub)
        _mark_started(sub, token, worker, now)
    return {
        "submission": sub.pk,
        "attempt": sub.attempt,
        "dataset": sub.dataset.key,
        "split": sub.split,
        "target": sub.target,
        "limits": sub.limits,
        "backbone": services.container_backbone(sub.backbone_name),
        "image_id": sub.image_id,
        "archive_sha256": sub.sha256,
        "heartbeat_s": settings.QVAL_HEARTBEAT_S,
    }


def _mark_started(sub: Submission, token: JobToken, worker: str, now: datetime) -> None:
    """Record (in :func:`start`'s transaction) that remote ``worker`` runs ``sub`` under ``token`` from ``now``: a
    queued job starts scoring, its heartbeat starts, and the token keeps its first start."""
    if sub.state == Submission.QUEUED:
        sub.transition(Submission.SCORING, save=False)
    sub.worker = f"remote:{worker}"[:200]
    sub.heartbeat_at = now
    sub.save()
    token.started_at, token.worker = token.started_at or now, worker[:200]
    token.save()


def _start_baseline(sub: Submission, token: JobToken, worker: str, now: datetime) -> dict[str, Any]:
    """:func:`start` of a GPU campaign's baseline run (in its transaction): it runs until the deadline it was
    queued with (``QVAL_BASELINE_S``), as on the site's own gpu worker."""
    if not baselines.is_remote(sub):
        raise JobRefused(409, f"submission {sub.pk} is a baseline run of the site's own gpu worker")
    sub.progress = {**sub.progress, "started_at": sub.progress.get("started_at") or now.isoformat(),
                    "deliveries": int(sub.progress.get("deliveries", 0)) + 1}
    _mark_started(sub, token, worker, now)
    return {
        "kind": Submission.KIND_BASELINE,
        "submission": sub.pk,
        "attempt": sub.attempt,
        "dataset": sub.dataset.key,
        "split": sub.split,
        "target": sub.target,
        "method": sub.method_name,
        "backbone": sub.backbone_name,
        "seed": int(sub.config.get("seed", 0)),
        "options": dict(sub.config.get("options") or {}),
        "heartbeat_s": settings.QVAL_HEARTBEAT_S,
    }


def dataset_tar(sub: Submission) -> IO[bytes]:
    """A temporary file holding what a remote worker needs to run baseline run ``sub``'s method: the dataset's
    ``manifest.json`` and the run's split of ``states.jsonl`` and ``candidates.jsonl`` (read with
    :func:`qval.schema.Dataset.read_split`), and its images when the method reads them. Its labels only for a method
    that reads the split's labels (``reads_labels``: the self-distillation teachers, which the site's own gpu
    worker reads from disk as well); none otherwise."""
    if not baselines.is_remote(sub):
        raise JobRefused(409, f"submission {sub.pk} is not a remote baseline run")
    spec = get_method(sub.method_name)
    out = tempfile.TemporaryFile()
    with tempfile.TemporaryDirectory() as tmp:
        folder = schema.write_split(dataset_dir(sub.dataset), sub.split, Path(tmp) / "dataset",
                                    labels=spec.reads_labels, images=spec.modality == "image")
        with tarfile.open(fileobj=out, mode="w") as tar:
            tar.add(folder, arcname=".")
    out.seek(0)
    return out


def running(pk: int, raw: str) -> Submission:
    """The submission of a valid token of a started job (``scoring``), for a fetch or a heartbeat."""
    with transaction.atomic():
        sub, _ = authorize(pk, raw)
        if sub.state != Submission.SCORING:
            raise JobRefused(409, f"submission {pk} was not started; POST .../start first")
        return sub


def heartbeat(pk: int, raw: str, progress: Any = None) -> None:
    """A remote job's heartbeat; a baseline run's carries its ``progress`` (``done``, ``total``, ``tokens``:
    counts), kept as a local run's is (``ValueError`` for anything else)."""
    if progress is not None and (not isinstance(progress, dict) or set(progress) - {"done", "total", "tokens"}
                                 or not all(isinstance(v, int) and v >= 0 for v in progress.values())):
        raise ValueError("progress: expected an object of counts: done, total, tokens")
    with transaction.atomic():
        sub = running(pk, raw)
        sub.heartbeat_at = timezone.now()
        fields = ["heartbeat_at"]
        if progress and sub.kind == Submission.KIND_BASELINE:
            sub.progress = {**sub.progress, **progress, "updated_at": sub.heartbeat_at.isoformat()}
            fields.append("progress")
        sub.save(update_fields=fields)


def container_job(sub: Submission) -> Submission:
    """``sub`` when it is a container job; :class:`JobRefused` (409) for a baseline run, which has no archive and
    reads its split from ``/dataset``."""
    if sub.kind != Submission.KIND_CONTAINER:
        raise JobRefused(409, f"submission {sub.pk} is a baseline run, not a container: GET .../dataset")
    return sub


def input_tar(sub: Submission) -> IO[bytes]:
    """A temporary file holding the split's ``/input`` folder as a tar (no label in it)."""
    container_job(sub)
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
    with transaction.atomic():
        sub = running(pk, raw)
        run = _run_object(run_json)
        fields = _run_fields(run)
        token = JobToken.objects.select_for_update().get(token_sha256=lifecycle.token_digest(raw))
        token.used_at = timezone.now()
        token.save()
        if run.get("platform_error"):
            log.error("remote worker %s could not run submission %s: %s", token.worker, pk, run["platform_error"])
            doing = "running the baseline" if sub.kind == Submission.KIND_BASELINE else "running the container"
            lifecycle.requeue_lost(sub, lifecycle.INTERNAL_ERROR.format(doing=doing) + " (tried twice)")
            return
        if sub.kind == Submission.KIND_BASELINE:
            sub.num_nan, sub.config = _baseline_fields(run, sub.config)
        for name, value in fields.items():
            setattr(sub, name, value)
        sub.heartbeat_at = timezone.now()
        if predictions is not None:
            sub.predictions.save(f"{sub.pk}-a{sub.attempt}-predictions.jsonl", ContentFile(predictions), save=False)
        sub.save()
        attempt = sub.attempt
        transaction.on_commit(lambda: lifecycle.send_task(lifecycle.TASKS["score_remote"], [pk, attempt]))


def _baseline_fields(run: dict[str, Any], config: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A remote baseline run's NaN count and its config: the submission's, with what the worker recorded of the run
    (``config``: the method's counts and prompt hash, the backbone's kind and checkpoint) over it -- but never its
    method, backbone, seed or options, which the site chose."""
    num_nan, extra = run.get("num_nan", 0), run.get("config") or {}
    if not isinstance(num_nan, int) or num_nan < 0:
        raise ValueError("num_nan: expected a count")
    if not isinstance(extra, dict):
        raise ValueError("config: expected a JSON object")
    kept = ("method", "backbone", "seed", "options", "runner", "params", "family")
    return num_nan, {**{k: v for k, v in extra.items() if k not in kept}, **config}


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

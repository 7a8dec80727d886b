"""The lifecycle of a submission's job -- a predictions file scored, a method container run (here or on a
remote gpu worker), a baseline run -- in one place::

    queued --dispatch: attempt n, message (id, n)--> claim --> scoring (heartbeats) --> finish | fail
       ^                                                          | no heartbeat for QVAL_HEARTBEAT_STALE_S
       +-------------- requeue_lost: attempt n+1, once -----------+ (the second time: failed)

* :func:`dispatch` counts a new ``attempt`` and sends the job's message, which carries that attempt, once the
  transaction commits (:func:`send_on_commit`, :func:`send_messages`: stamps ``sent_at``). When the broker is
  down the request still succeeds and :func:`resend_unsent` (a reaper on beat) sends it once it is back.
  Messages go by task name (:data:`TASKS`): this module imports no task module.
* :func:`claim` moves the job to ``scoring`` for one delivery. It is **idempotent by attempt**: a delivery for
  a submission already final, for another attempt than its current one (a message redelivered after its
  job was requeued), or for a job another worker runs with a fresh heartbeat, does nothing and logs why.
* :func:`beating` stamps ``heartbeat_at`` while the claimed attempt runs; :func:`reap_stale` requeues a job
  whose heartbeat stopped once (:func:`requeue_lost`) and fails it the second time; :func:`reap_overdue`
  fails a submission past its ``deadline``.
* :func:`finish` stores the results and finishes the job, :func:`fail` fails it; both only for the current
  attempt of a job still running, so a late delivery never scores a submission twice.

Every transition is appended to ``Submission.history`` with its attempt, never rewritten
(:meth:`submissions.models.Submission.transition`).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from jobs import heartbeat as beats
from leaderboard.models import Backbone, Method
from qval.methods.registry import MethodError, get_method
from qval.schema import PUBLIC_SPLITS
from qval.budget import released_rows
from qval.scoring import MetricRow, disclose

from . import ladder
from .models import Result, Submission

log = logging.getLogger(__name__)

TASKS = {
    "validate": "workers.tasks.validate_upload",
    "inspect": "workers.tasks.inspect_container_upload",
    Submission.KIND_FILE: "workers.tasks.score_submission",
    Submission.KIND_BASELINE: "workers.tasks.run_baseline_submission",
    Submission.KIND_CONTAINER: "workers.tasks.run_container_submission",
    "score_remote": "workers.tasks.score_remote_run",
    "remote": "qval.remote_worker.run_job",
}
"""The task each message goes to, by name (arguments: the submission id, and the attempt for a job; a remote
gpu worker's ``qval.remote_worker.run_job`` gets the id and a job token bound to the attempt)."""

INTERNAL_ERROR = (
    "internal error while {doing}; the maintainers have been notified and this "
    "submission does not count towards your quota"
)
REMOTE_QUEUE = "remote"
"""The queue remote gpu workers consume (``QVAL_GPU_WORKERS=remote``): container jobs only. They have no database,
so the jobs that need it and a model -- baseline runs, training runs, Best-of-N runs -- stay on ``gpu``, for the
site's own gpu worker; one queue for both kinds would hand each some messages it cannot run."""
QUEUE_DEADLINE_REASON = "timed out in the queue (deadline passed): no gpu worker started it in time"
SCORING_QUEUE_DEADLINE_REASON = "timed out in the queue (deadline passed): no scoring worker started it in time"
WORKER_DEADLINE_REASON = "timed out in the worker (deadline passed): the worker running it stopped or hung"
VALIDATION_DEADLINE_REASON = "timed out while being validated (deadline passed): the check of the upload stopped or hung"

def job_queue(sub: Submission) -> str:
    """The queue of ``sub``'s job: ``gpu`` for a container and for a baseline run of a method that needs a model,
    ``scoring`` for a predictions file and for a baseline run of a method that needs none (the reference rows:
    seconds of work, like scoring a file, so they do not wait behind training runs on ``gpu``)."""
    if sub.kind == Submission.KIND_CONTAINER:
        return "gpu"
    if sub.kind == Submission.KIND_BASELINE:
        try:
            return "scoring" if get_method(sub.method_name).needs == "none" else "gpu"
        except MethodError:
            return "gpu"  # not a method any more: the gpu worker fails it with the reason
    return "scoring"


def deadline_reason(sub: Submission) -> str:
    """Why the reaper fails ``sub``, by the state it was stuck in."""
    if sub.state in (Submission.RECEIVED, Submission.VALIDATING):
        return VALIDATION_DEADLINE_REASON
    if sub.state == Submission.SCORING:
        return WORKER_DEADLINE_REASON
    return QUEUE_DEADLINE_REASON if job_queue(sub) == "gpu" else SCORING_QUEUE_DEADLINE_REASON


def lock_account(user) -> None:  # type: ignore[no-untyped-def]
    """Hold ``user``'s row lock until the transaction ends: the quota is counted and the new
    submissions inserted under it, so concurrent uploads of one account cannot both pass the
    count (check-then-insert without it let 6 of 12 concurrent uploads through a limit of 5); a
    finishing submission takes its ladder step under it (:func:`finish`)."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()


# -- sending -----------------------------------------------------------------------------------------
def send_task(name: str, args: Sequence[Any], **options: Any) -> None:
    """Send task ``name`` by name (routed by ``CELERY_TASK_ROUTES`` unless ``options`` name a ``queue``); with
    the in-process worker (``QVAL_INPROCESS_WORKER``: eager tasks) run it here instead."""
    app = current_app
    if app.conf.task_always_eager:
        app.loader.import_default_modules()  # registers the tasks, which an eager call runs by name
        app.tasks[name].apply_async(list(args), **options)
    else:
        app.send_task(name, args=list(args), **options)


def dispatch(sub: Submission) -> None:
    """Queue the submission (from ``validating``, or ``scoring`` when requeued) at a new attempt, save it, and
    send its job's message once the transaction commits (:func:`send_on_commit`)."""
    sub.attempt += 1
    sub.transition(Submission.QUEUED, save=False)
    sub.heartbeat_at = None
    sub.sent_at = None
    sub.save()
    send_on_commit([sub.pk])


def send_on_commit(pks: Sequence[int]) -> None:
    """Once the current transaction commits, send the message of each submission's state (:func:`send_messages`)."""
    pks = list(pks)
    transaction.on_commit(lambda: send_messages(pks))


def send_messages(pks: Sequence[int]) -> list[int]:
    """Send the message of each submission's current state and stamp its ``sent_at``; return the ids sent.

    ``received``: its check -- a predictions file's (``validate_upload``), a container archive's
    (``inspect_container_upload``, one message for the submissions sharing it). ``queued``: its job with its
    attempt, to :func:`job_queue`'s queue -- a predictions file to ``scoring``, a baseline run to ``gpu``
    (``scoring`` for a method that needs no model), a container to ``gpu`` (to :data:`REMOTE_QUEUE`, for a
    remote worker, with a fresh token when ``QVAL_GPU_WORKERS=remote``). When the broker cannot be reached the rest
    stay unsent, logged, for :func:`resend_unsent`; no exception reaches the caller.
    """
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
            send_task(TASKS["inspect"], [group], queue=queue)
            sent += group
        for sub in subs:
            if sub.pk in sent:
                continue
            if sub.state == Submission.RECEIVED:
                send_task(TASKS["validate"], [sub.pk])
            elif sub.kind == Submission.KIND_CONTAINER and settings.QVAL_GPU_WORKERS != "local":
                send_task(TASKS["remote"], [sub.pk, issue_token(sub)], queue=REMOTE_QUEUE)
            else:
                send_task(TASKS[sub.kind], [sub.pk, sub.attempt], queue=job_queue(sub))
            sent.append(sub.pk)
    except BrokerUnreachable as exc:
        unsent = sorted({s.pk for s in subs} - set(sent))
        log.warning("the broker is unreachable (%s): submissions %s stay unsent until it is back", exc, unsent)
    finally:
        if sent:
            Submission.objects.filter(pk__in=sent).update(sent_at=timezone.now())
    return sent


def issue_token(sub: Submission) -> str:
    """A new random job token for the submission's current attempt, for a remote gpu worker's message; only its
    SHA-256 is stored (:class:`workers.models.JobToken`, checked by :mod:`workers.jobs`)."""
    raw = secrets.token_urlsafe(32)
    sub.job_tokens.create(attempt=sub.attempt, token_sha256=token_digest(raw),
                          expires_at=timezone.now() + timedelta(seconds=settings.QVAL_JOB_TOKEN_TTL_S))
    return raw


def token_digest(raw: str) -> str:
    """The SHA-256 a raw job token is stored and looked up by."""
    return hashlib.sha256(raw.encode()).hexdigest()


def resend_unsent(now: datetime | None = None) -> list[int]:
    """Send again the messages of submissions ``received`` or ``queued`` for over
    ``QVAL_RESEND_AFTER_S`` whose message never reached the broker; return the ids sent."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.QVAL_RESEND_AFTER_S)
    waiting = Submission.objects.filter(
        Q(state=Submission.RECEIVED, received_at__lt=cutoff) | Q(state=Submission.QUEUED, queued_at__lt=cutoff),
        sent_at__isnull=True)
    pks = list(waiting.values_list("pk", flat=True))
    return send_messages(pks) if pks else []


# -- one delivery: claim, heartbeat, finish or fail ------------------------------------------------------
def claim(pk: int, attempt: int | None, worker: str, kinds: Collection[str],
          start: Callable[[Submission], None] | None = None) -> Submission | None:
    """Move submission ``pk`` (one of ``kinds``) to ``scoring`` for this delivery of ``attempt`` on ``worker``,
    under its row lock; ``start(sub)`` sets what its kind records at a start (saved with it; it sees the state
    before: ``queued``, or ``scoring`` for a delivery after its worker died). Return it, or
    ``None`` when this delivery has nothing to do, logged: the submission is final already, the delivery is
    for another attempt than the current one, another worker runs it (a fresh heartbeat), or it passed its
    deadline (failed here). ``attempt`` ``None``: a call that is no broker delivery (in-process scoring)."""
    now = timezone.now()
    with transaction.atomic():
        sub = Submission.objects.select_for_update().select_related("dataset").get(pk=pk)
        if sub.kind not in kinds:
            log.warning("submission %s is a %s, not one of %s: delivery ignored", pk, sub.kind, sorted(kinds))
            return None
        if sub.is_final:
            log.info("submission %s is already %s: delivery of attempt %s ignored", pk, sub.state, attempt)
            return None
        if attempt is not None and attempt != sub.attempt:
            log.warning("submission %s is at attempt %s: delivery of attempt %s ignored", pk, sub.attempt, attempt)
            return None
        if sub.state not in (Submission.QUEUED, Submission.SCORING):
            log.info("submission %s is %s: nothing to run", pk, sub.state)
            return None
        if sub.deadline is not None and sub.deadline < now:
            # A redelivery after the worker running it died, past its deadline: stop here.
            sub.transition(Submission.FAILED, error=deadline_reason(sub), fault=Submission.FAULT_SYSTEM)
            return None
        if sub.state == Submission.SCORING and beats.is_fresh(sub.heartbeat_at, now):
            log.info("submission %s runs on %s (heartbeat at %s): delivery ignored", pk, sub.worker, sub.heartbeat_at)
            return None
        if start is not None:
            start(sub)
        sub.transition(Submission.SCORING, save=False)
        sub.worker = worker[:200]
        sub.heartbeat_at = now
        sub.save()
    return sub


@contextmanager
def beating(sub: Submission) -> Iterator[None]:
    """Stamp the claimed submission's ``heartbeat_at`` every ``QVAL_HEARTBEAT_S`` while the block runs, as
    long as it is ``scoring`` at this attempt (:func:`jobs.heartbeat.beating`)."""
    with beats.beating(Submission.objects.filter(state=Submission.SCORING, attempt=sub.attempt), sub.pk):
        yield


def _current(pk: int, attempt: int | None, doing: str) -> Submission | None:
    """Submission ``pk`` locked, or ``None`` (logged) when it is no longer ``scoring`` at ``attempt``."""
    sub = Submission.objects.select_for_update().get(pk=pk)
    if sub.state != Submission.SCORING:
        log.warning("submission %s became %s while it ran: not %s it", pk, sub.state, doing)
        return None
    if attempt is not None and attempt != sub.attempt:
        log.warning("submission %s is at attempt %s: attempt %s is not %s it", pk, sub.attempt, attempt, doing)
        return None
    return sub


def finish(submission_id: int, rows: list[MetricRow], attempt: int | None = None, **fields: Any) -> str:
    """Store ``rows`` as a running submission's results, set ``fields`` on it, link its method and backbone
    and finish it, in one transaction; return its state.

    On a hidden split only what :func:`qval.scoring.disclose` lets a user see is stored, and a user's
    submission only what it may release (:func:`qval.budget.released_rows`) once it takes its step on its
    account's ladder (:func:`submissions.ladder.climb`, once, spending from the split's shared budget) under
    the account's row lock, taken before the submission's. A submission no longer ``scoring`` at ``attempt`` (the
    reaper failed or requeued it meanwhile) keeps its state and gets no results.
    """
    with transaction.atomic():
        sub = Submission.objects.select_related("user").get(pk=submission_id)
        laddered = ladder.on_ladder(sub)
        if laddered:
            lock_account(sub.user)
        sub = _current(submission_id, attempt, "finishing")
        if sub is None:
            return Submission.objects.get(pk=submission_id).state
        rows = disclose(rows, hidden=sub.split not in PUBLIC_SPLITS)
        if laddered:
            rows = released_rows(rows)  # a user's prediction on a hidden split: the Ladder's metrics only
        for name, value in fields.items():
            setattr(sub, name, value)
        if laddered and sub.ladder_climbed is None:
            # Before the results are written: that write waits for every other finishing job
            # (the results version's row), the account's lock only for this account's.
            rows = ladder.shown_rows(sub, rows, ladder.climb(sub, rows))
        elif laddered:
            rows = ladder.shown_rows(sub, rows)  # re-scored: what its climb paid for, no more
        Result.objects.filter(submission=sub).delete()
        Result.objects.bulk_create(
            Result(submission=sub, metric=r.metric, value=r.value, p_value=r.p_value, num_points=r.num_points,
                   num_dropped=r.num_dropped, coverage=r.coverage, insufficient=r.insufficient, details=r.details)
            for r in rows
        )
        sub.method = Method.objects.get_or_create(name=sub.method_name)[0]
        sub.backbone = Backbone.objects.get_or_create(name=sub.backbone_name)[0] if sub.backbone_name else None
        sub.transition(Submission.FINISHED)
    log.info("submission %s finished with %d metrics", submission_id, len(rows))
    return Submission.FINISHED


def fail(submission_id: int, reason: str, fault: str, attempt: int | None = None, **fields: Any) -> str:
    """Set ``fields`` on a submission and fail it with ``reason``; return its state. One already final, or
    (given ``attempt``) at another attempt, is left as it is."""
    with transaction.atomic():
        sub = Submission.objects.select_for_update().get(pk=submission_id)
        if sub.is_final:
            log.warning("submission %s is already %s; not failing it with %r", sub.pk, sub.state, reason)
            return sub.state
        if attempt is not None and attempt != sub.attempt:
            log.warning("submission %s is at attempt %s: attempt %s does not fail it with %r", sub.pk, sub.attempt,
                        attempt, reason)
            return sub.state
        for name, value in fields.items():
            setattr(sub, name, value)
        sub.transition(Submission.FAILED, error=reason, fault=fault)
    return Submission.FAILED


# -- the reapers ---------------------------------------------------------------------------------------
def requeue_lost(sub: Submission, reason: str) -> None:
    """A job that failed through the platform (its worker lost, or unable to run it): queue it again with a
    new attempt (:func:`dispatch`), or on its last attempt (``jobs.heartbeat.MAX_ATTEMPTS``) fail it with
    ``reason`` (not counted towards the quota). Call with the submission locked."""
    if sub.attempt >= beats.MAX_ATTEMPTS:
        sub.transition(Submission.FAILED, error=reason, fault=Submission.FAULT_SYSTEM)
        return
    allowed = {Submission.KIND_CONTAINER: settings.QVAL_CONTAINER_QUEUE_S,
               Submission.KIND_BASELINE: settings.QVAL_BASELINE_S}.get(sub.kind, settings.QVAL_SCORING_S)
    sub.deadline = timezone.now() + timedelta(seconds=allowed)
    dispatch(sub)


def reap_stale(now: datetime | None = None) -> list[int]:
    """Requeue (once) or fail every job ``scoring`` whose heartbeat is older than ``QVAL_HEARTBEAT_STALE_S``
    at ``now``; return their ids. A requeued job's earlier deliveries and tokens no longer count."""
    reason = beats.lost_reason() + "; a platform fault, not counted towards your quota"
    return beats.reap(Submission.objects.filter(state=Submission.SCORING), lambda sub: requeue_lost(sub, reason), now)


def reap_overdue(now: datetime | None = None) -> list[int]:
    """Fail every unfinished submission whose deadline passed; return their ids.

    Every non-final state has a deadline: ``received``/``validating`` ``QVAL_RECEIVED_S`` after
    the upload; a queued predictions file ``QVAL_SCORING_S`` after it was queued, a container
    ``QVAL_CONTAINER_QUEUE_S`` and, once running, its timeout plus ``QVAL_CONTAINER_GRACE_S``.
    The reason names the state it was stuck in (:func:`deadline_reason`); the platform is at
    fault, so it does not count towards the quota.
    """
    now = now or timezone.now()
    reaped = []
    overdue = Submission.objects.filter(deadline__lt=now).exclude(state__in=Submission.FINAL_STATES)
    for pk in overdue.values_list("pk", flat=True):
        with transaction.atomic():
            sub = Submission.objects.select_for_update().get(pk=pk)
            if sub.is_final or sub.deadline is None or sub.deadline >= now:
                continue  # finished (or re-deadlined) meanwhile
            sub.transition(Submission.FAILED, error=deadline_reason(sub), fault=Submission.FAULT_SYSTEM)
            reaped.append(pk)
    return reaped

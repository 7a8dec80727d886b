"""The lifecycle of a submission's job -- a predictions file scored, a method container run (here or on a
remote gpu worker), a baseline run -- as a kind of job (:data:`JOB`, :class:`jobs.services.JobKind`: the machinery
every job shares)::

    queued --dispatch: attempt n, message (id, n)--> claim --> scoring (heartbeats) --> finish | fail
       ^                                                          | no heartbeat for QVAL_HEARTBEAT_STALE_S
       +------------- the reaper requeues it: attempt n+1, once ---+ (the second time: failed)

* :func:`dispatch` counts a new ``attempt`` and sends the job's message, which carries that attempt, once the
  transaction commits (:func:`send_messages`: stamps ``sent_at``). When the broker is down the request still
  succeeds and the reaper sends it once it is back. Messages go by task name (:data:`TASKS`): this module imports
  no task module.
* :func:`claim` moves the job to ``scoring`` for one delivery. It is **idempotent by attempt**: a delivery for
  a submission already final, for another attempt than its current one (a message redelivered after its
  job was requeued), or for a job another worker runs with a fresh heartbeat, does nothing and logs why.
* :func:`beating` stamps ``heartbeat_at`` while the claimed attempt runs; the one reaper (``jobs.tasks.reap_jobs``)
  requeues a job whose heartbeat stopped once (:func:`requeue_lost`) and fails it the second time, and fails a
  submission past its ``deadline`` (:func:`deadline_reason`).
* :func:`finish` stores the results and finishes the job, :func:`fail` fails it; both only for the current
  attempt of a job still running, so a late delivery never scores a submission twice. A user's submission on a
  hidden split takes its step on its account's ladder first, in a transaction of its own
  (:func:`submissions.ladder.take_step`): the Ladder's statistics never run inside the finishing transaction.

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

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from jobs.services import JobKind, send_task
from leaderboard.models import Backbone, Method
from qval.methods.registry import MethodError, get_method
from qval.schema import PUBLIC_SPLITS
from qval.budget import released_rows
from qval.scoring import MetricRow, disclose

from . import ladder, queue_order
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
    "remote_baseline": "qval.remote_worker.run_baseline_job",
}
"""The task each message goes to, by name (arguments: the submission id, and the attempt for a job; a remote
gpu worker's ``qval.remote_worker.run_job`` gets the id and a job token bound to the attempt)."""

INTERNAL_ERROR = (
    "internal error while {doing}; the maintainers have been notified and this "
    "submission does not count towards your quota"
)
CONTAINER_QUEUE = "containers"
"""The queue of users' method containers (and of the checks of their archives), with a worker of its own
(``celery -A qval_site worker -Q containers --concurrency 1``): a user's container never waits behind the
platform's own runs, which go to ``gpu`` (docs/workers.md)."""
REMOTE_QUEUE = "remote"
"""The queue remote gpu workers consume (``QVAL_GPU_WORKERS=remote``), in place of :data:`CONTAINER_QUEUE`: users'
container jobs only. They have no database, so the jobs that need it and a model -- baseline runs, training runs,
Best-of-N runs -- stay on ``gpu``, for the site's own gpu worker; one queue for both kinds would hand each some
messages it cannot run."""
CAMPAIGN_QUEUE = "campaign"
"""The queue of a GPU campaign's baseline runs (:func:`submissions.baselines.queue_campaign`), for the remote worker
``scripts/gpu-campaign.sh`` starts with the campaign's backbone; never ``remote``, whose workers serve other
backbones, or none."""
QUEUE_WORKERS = {
    "scoring": "scoring worker", "gpu": "gpu worker", CONTAINER_QUEUE: "containers worker",
    REMOTE_QUEUE: "remote gpu worker", CAMPAIGN_QUEUE: "GPU campaign worker (scripts/gpu-campaign.sh)",
}
"""The worker that takes each queue's jobs, as a job that waited past its deadline names it (docs/workers.md)."""
WORKER_DEADLINE_REASON = "timed out in the worker (deadline passed): the worker running it stopped or hung"
VALIDATION_DEADLINE_REASON = "timed out while being validated (deadline passed): the check of the upload stopped or hung"


def queue_deadline_reason(queue: str) -> str:
    """Why the reaper fails a job that waited on ``queue`` past its deadline: no worker of that queue took it."""
    return f"timed out in the queue (deadline passed): no {QUEUE_WORKERS[queue]} started it in time"


def job_queue(sub: Submission) -> str:
    """The queue of ``sub``'s job: :data:`CONTAINER_QUEUE` for a container (:data:`REMOTE_QUEUE` when
    ``QVAL_GPU_WORKERS=remote``), :data:`CAMPAIGN_QUEUE` for a GPU campaign's baseline run, ``gpu`` for a baseline
    run of a method that needs a model, ``scoring`` for a predictions file and for a baseline run of a method that
    needs none (the reference rows: seconds of work, like scoring a file, so they do not wait behind training runs
    on ``gpu``; sent behind the users' files there, :func:`submissions.queue_order.priority`)."""
    if sub.kind == Submission.KIND_CONTAINER:
        return CONTAINER_QUEUE if settings.QVAL_GPU_WORKERS == "local" else REMOTE_QUEUE
    if sub.kind == Submission.KIND_BASELINE:
        if sub.config.get("runner") == "remote":  # submissions.baselines.is_remote (that module imports this one)
            return CAMPAIGN_QUEUE
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
    return queue_deadline_reason(job_queue(sub))


def lock_account(user) -> None:  # type: ignore[no-untyped-def]
    """Hold ``user``'s row lock until the transaction ends: the quota is counted and the new
    submissions inserted under it, so concurrent uploads of one account cannot both pass the
    count (check-then-insert without it let 6 of 12 concurrent uploads through a limit of 5); a
    finishing submission takes its ladder step under it (:func:`take_step`)."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()


# -- sending -----------------------------------------------------------------------------------------
def dispatch(sub: Submission) -> None:
    """Queue the submission (from ``validating``, or ``scoring`` when requeued) at a new attempt with its queue
    deadline (:func:`queue_s`), save it, and send its job's message once the transaction commits
    (:meth:`jobs.services.JobKind.queue`)."""
    JOB.queue(sub)


def send_on_commit(pks: Sequence[int]) -> None:
    """Once the current transaction commits, send the message of each submission's state (:func:`send_messages`)."""
    JOB.send_on_commit(pks)


def send_messages(pks: Sequence[int]) -> list[int]:
    """Send the message of each submission's current state and stamp its ``sent_at``; return the ids sent.

    ``received``: its check -- a predictions file's (``validate_upload``), a container archive's
    (``inspect_container_upload``, one message for the submissions sharing it). ``queued``: its job with its
    attempt, to :func:`job_queue`'s queue -- a predictions file to ``scoring``, a baseline run to ``gpu``
    (``scoring`` for a method that needs no model; a GPU campaign's to :data:`CAMPAIGN_QUEUE` with a fresh token), a
    container to :data:`CONTAINER_QUEUE` (to :data:`REMOTE_QUEUE`, for a remote worker, with a fresh token when
    ``QVAL_GPU_WORKERS=remote``); a baseline run behind every user's job there (:func:`queue_order.priority`). When the
    broker cannot be reached the rest stay unsent, logged, for the reaper; no exception reaches the caller.
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
        queue = CONTAINER_QUEUE if settings.QVAL_GPU_WORKERS == "local" else "scoring"
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
            elif job_queue(sub) == CAMPAIGN_QUEUE:
                send_task(TASKS["remote_baseline"], [sub.pk, issue_token(sub)], queue=CAMPAIGN_QUEUE)
            else:
                send_task(TASKS[sub.kind], [sub.pk, sub.attempt], queue=job_queue(sub),
                          priority=queue_order.priority(sub))
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


def waiting(cutoff: datetime) -> Q:
    """The submissions that should have sent their message before ``cutoff``: ``received`` (their check's) or
    ``queued`` (their job's) before it (what the reaper sends again when their message never left)."""
    return Q(state=Submission.RECEIVED, received_at__lt=cutoff) | Q(state=Submission.QUEUED, queued_at__lt=cutoff)


def queue_s(sub: Submission) -> float:
    """How long a queued submission may wait for a worker: ``QVAL_CONTAINER_QUEUE_S`` for a container,
    ``QVAL_BASELINE_S`` for a baseline run, ``QVAL_SCORING_S`` for a predictions file."""
    return {Submission.KIND_CONTAINER: settings.QVAL_CONTAINER_QUEUE_S,
            Submission.KIND_BASELINE: settings.QVAL_BASELINE_S}.get(sub.kind, settings.QVAL_SCORING_S)


JOB: JobKind[Submission] = JobKind(
    name="submission", model=Submission, send=send_messages, queue_s=queue_s, deadline_reason=deadline_reason,
    waiting=waiting, lost_note="; a platform fault, not counted towards your quota", related=("dataset",),
    queue_of=job_queue, priority_of=queue_order.priority, work_of=queue_order.expected_work)
"""Submissions as a job kind (registered in :mod:`jobs.registry`)."""


# -- one delivery: claim, heartbeat, finish or fail ------------------------------------------------------
def claim(pk: int, attempt: int | None, worker: str, kinds: Collection[str],
          start: Callable[[Submission], None] | None = None) -> Submission | None:
    """Move submission ``pk`` (one of ``kinds``) to ``scoring`` for this delivery of ``attempt`` on ``worker``
    (:meth:`jobs.services.JobKind.claim`); ``start(sub)`` sets what its kind records at a start (saved with it; it
    sees the state before: ``queued``, or ``scoring`` for a delivery after its worker died). Return it, or
    ``None`` when this delivery has nothing to do, logged: another kind, final already, another attempt, another
    worker runs it (a fresh heartbeat), or it passed its deadline (failed here). ``attempt`` ``None``: a call that
    is no broker delivery (in-process scoring)."""

    def of_kind(sub: Submission) -> bool:
        if sub.kind not in kinds:
            log.warning("submission %s is a %s, not one of %s: delivery ignored", pk, sub.kind, sorted(kinds))
        return sub.kind in kinds

    return JOB.claim(pk, attempt, worker, accept=of_kind, start=start)


@contextmanager
def beating(sub: Submission) -> Iterator[None]:
    """Stamp the claimed submission's ``heartbeat_at`` every ``QVAL_HEARTBEAT_S`` while the block runs, as
    long as it is ``scoring`` at this attempt (:meth:`jobs.services.JobKind.beating`)."""
    with JOB.beating(sub):
        yield


def finish(submission_id: int, rows: list[MetricRow], attempt: int | None = None, *,
           scored: ladder.Scored | None = None, **fields: Any) -> str:
    """Store ``rows`` as a running submission's results, set ``fields`` on it, link its method and backbone
    and finish it, in one transaction; return its state.

    On a hidden split only what :func:`qval.scoring.disclose` lets a user see is stored, and a user's
    submission only what it may release (:func:`qval.budget.released_rows`) once it has taken its step on its
    account's ladder (:func:`take_step`, before that transaction: ``scored`` hands it the labels and predictions
    the scoring read). A submission no longer ``scoring`` at ``attempt`` (the reaper failed or requeued it
    meanwhile) keeps its state and gets no results.
    """
    sub = Submission.objects.select_related("user", "dataset__environment").get(pk=submission_id)
    if not JOB.is_current(sub, attempt, "finishing"):
        return sub.state  # checked again under its lock below
    laddered = ladder.on_ladder(sub)
    rows = disclose(rows, hidden=sub.split not in PUBLIC_SPLITS)
    if laddered:
        rows = released_rows(rows)  # a user's prediction on a hidden split: the Ladder's metrics only
        if sub.ladder_climbed is None and not take_step(sub, rows, attempt, scored, fields):
            return Submission.objects.get(pk=submission_id).state
    with transaction.atomic():
        sub = JOB.current(submission_id, attempt, "finishing")
        if sub is None:
            return Submission.objects.get(pk=submission_id).state
        for name, value in fields.items():
            setattr(sub, name, value)
        if laddered:
            rows = ladder.shown_rows(sub, rows)  # what its climb paid for, no more (re-scored too)
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


def take_step(sub: Submission, rows: list[MetricRow], attempt: int | None, scored: ladder.Scored | None,
              fields: dict[str, Any]) -> bool:
    """Decide the step of ``sub`` (a user's submission on a hidden split, :func:`submissions.ladder.on_ladder`) on its
    account's ladder from its released ``rows``, once: the statistics first, outside any lock
    (:func:`submissions.ladder.prepare`), then the decision in a transaction of its own under the account's row
    lock, the submission's and the split budget's (:func:`submissions.ladder.climb`), stored on the submission.
    ``fields``: what :func:`finish` sets on it (the predictions a container wrote, read when ``scored`` lacks them).
    Return whether it is still ``scoring`` at ``attempt`` (else nothing is decided)."""
    for name, value in fields.items():
        setattr(sub, name, value)
    prepared = ladder.prepare(sub, rows, scored)
    with transaction.atomic():
        lock_account(sub.user)
        locked = JOB.current(sub.pk, attempt, "deciding the ladder step of")
        if locked is None:
            return False
        for name, value in fields.items():
            setattr(locked, name, value)
        if locked.ladder_climbed is None:  # not decided by another delivery meanwhile
            ladder.climb(locked, rows, prepared, scored)
            locked.save(update_fields=["ladder_climbed", "ladder_against"])
    return True


def fail(submission_id: int, reason: str, fault: str, attempt: int | None = None, **fields: Any) -> str:
    """Set ``fields`` on a submission and fail it with ``reason`` (``fault``: whose, :attr:`Submission.FAULT_USER`
    or ``FAULT_SYSTEM``); return its state. One already final, or (given ``attempt``) at another attempt, is left as
    it is (:meth:`jobs.services.JobKind.fail`)."""
    return JOB.fail(submission_id, reason, attempt=attempt, fault=fault, **fields)


def requeue_lost(sub: Submission, reason: str) -> None:
    """A job that failed through the platform (its worker lost, or unable to run it): queue it again with a
    new attempt and its queue deadline, or on its last attempt fail it with ``reason`` (not counted towards the
    quota; :meth:`jobs.services.JobKind.requeue_or_fail`). Call with the submission locked."""
    JOB.requeue_or_fail(sub, reason)

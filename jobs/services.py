"""The lifecycle every job kind shares, in one place: a :class:`JobKind` per kind (a submission, a training run, a
Best-of-N run, a dataset build), registered in :mod:`jobs.registry`::

    queued --send (sent_at)--> claim --> running (heartbeats) --> finish | fail
       ^                                    | no heartbeat for QVAL_HEARTBEAT_STALE_S
       +------ requeue: attempt n+1, once --+ (the second time: failed)

* :meth:`JobKind.claim` moves a queued job to running for one delivery, under its row lock. A delivery for a job
  that is final, for another attempt than its current one, or for a job another delivery runs with a fresh
  heartbeat, does nothing and logs why; one past the job's deadline fails it there.
* :meth:`JobKind.beating` stamps ``heartbeat_at`` while the claimed attempt runs; :meth:`JobKind.finish` and
  :meth:`JobKind.fail` end it, only for the current attempt of a job still running (a late delivery never ends a
  job twice).
* The reaper (:meth:`JobKind.reap`, every kind's from one beat task, :func:`jobs.registry.reap_all`) requeues once
  a running job whose heartbeat stopped (:meth:`JobKind.requeue_or_fail`), fails a job past its ``deadline`` with
  the reason of the state it was stuck in, and sends again the messages that never reached the broker.

A kind's messages go out once the transaction commits and stamp ``sent_at``; when the broker cannot be reached
the job stays unsent, logged, and the reaper sends it after ``QVAL_RESEND_AFTER_S``. Messages go by task name:
this module imports no task module.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from . import heartbeat
from .models import Job

log = logging.getLogger(__name__)

J = TypeVar("J", bound=Job)

MAX_ATTEMPTS = 2
"""A job whose worker is lost is requeued once: the second loss fails it."""

USER_PRIORITY = 0
"""The message priority of a user's job: the broker's default, taken first."""
PLATFORM_PRIORITY = 3
"""The message priority of the platform's own runs (reference rows, training and Best-of-N runs, dataset builds).
On Redis (kombu's priority lists: ``<queue>`` for 0, ``<queue>\\x06\\x163`` for 3, ``...9`` for 9) a worker takes
every message of priority 0 on its queues before any of 3, and those before any of 9: a user's job never waits
behind the platform's runs queued before it.  (Redis counts 0 as the first; RabbitMQ would count the other way.
kombu rounds a priority down to its steps 0, 3, 6 and 9.)"""
COSTLY_PRIORITY = 9
"""The message priority of the platform's costliest runs (:data:`submissions.queue_order.COSTLY_METHODS`): behind its
other runs, so that every board gets its cheap rows before any board gets its costly ones."""


def send_task(name: str, args: Sequence[Any], *, priority: int = USER_PRIORITY, **options: Any) -> None:
    """Send task ``name`` by name (routed by ``CELERY_TASK_ROUTES`` unless ``options`` name a ``queue``) at message
    ``priority`` (a user's job: :data:`USER_PRIORITY`; the platform's own runs behind it); with the in-process worker
    (``QVAL_INPROCESS_WORKER``: eager tasks) run it here instead. Raises
    :class:`kombu.exceptions.OperationalError` when the broker cannot be reached."""
    if priority != USER_PRIORITY:
        options["priority"] = priority
    app = current_app
    if app.conf.task_always_eager:
        app.loader.import_default_modules()  # registers the tasks, which an eager call runs by name
        app.tasks[name].apply_async(args, **options)
    else:
        app.send_task(name, args=args, **options)


@dataclass(frozen=True)
class Reaped:
    """What one round of a kind's reaper did: the ids ``lost`` (requeued or failed), ``overdue`` (failed past
    their deadline) and ``resent``."""

    lost: list[int] = field(default_factory=list)
    overdue: list[int] = field(default_factory=list)
    resent: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Work:
    """A job's expected work (:meth:`JobKind.work`): ``units``, comparable among the jobs of its queue, and ``like``,
    a name shared by the jobs whose runs measure each other's best (the same method on the same environment; ``""``:
    none). The status page takes a job's seconds per unit from its finished jobs alike where there are any, else
    from its queue's (:func:`jobs.queues.summaries`): one rate for a queue misjudges work whose cost grows unlike
    the units, as a method reading ALFWorld's long prompts against FrozenLake's short ones."""

    units: float
    like: str = ""


@dataclass(frozen=True, eq=False)
class JobKind(Generic[J]):
    """One kind of job and what is its own: its ``model``; where its messages go -- ``task`` (a message holding
    the job's id) or ``send`` (the kind's own sender: given ids, returns those sent); ``queue_s``, how long a
    queued job may wait (its deadline once queued); ``deadline_reason``, why a job past its deadline failed;
    ``on_claim``, what every claim records besides (a running job's deadline); ``waiting``, which jobs wait for
    their message, given a time before which they should have been sent (default: queued before it);
    ``lost_note``, added to the reason of a job lost twice; ``related``, what a claim selects with the job;
    ``queue_of``, the Celery queue a job's message goes to (default: the route of ``task`` in
    ``CELERY_TASK_ROUTES``); ``priority_of``, its message's priority (default: every job of the kind is the
    platform's own run, :data:`PLATFORM_PRIORITY`; a user's job is :data:`USER_PRIORITY`), by which
    :mod:`jobs.queues` counts who waits ahead of it; ``work_of``, given jobs, the :class:`Work` each is expected to
    take (``None``: not known), by which the status page weighs a waiting job against the rate finished and running
    ones measure (default: none known)."""

    name: str
    model: type[J]
    queue_s: Callable[[J], float]
    deadline_reason: Callable[[J], str]
    task: str = ""
    send: Callable[[Sequence[int]], list[int]] | None = None
    on_claim: Callable[[J], None] | None = None
    waiting: Callable[[datetime], Q] | None = None
    lost_note: str = ""
    related: tuple[str, ...] = ()
    queue_of: Callable[[J], str] | None = None
    priority_of: Callable[[J], int] | None = None
    work_of: Callable[[Sequence[J]], list[Work | None]] | None = None

    def queue_name(self, job: J) -> str:
        """The Celery queue ``job``'s message goes to (``queue_of``, else the route of ``task``)."""
        if self.queue_of is not None:
            return self.queue_of(job)
        return str(settings.CELERY_TASK_ROUTES.get(self.task, {}).get("queue", settings.CELERY_TASK_DEFAULT_QUEUE))

    def priority(self, job: J) -> int:
        """``job``'s message priority (``priority_of``; default: :data:`PLATFORM_PRIORITY`)."""
        return PLATFORM_PRIORITY if self.priority_of is None else self.priority_of(job)

    def work(self, jobs: Sequence[J]) -> list[Work | None]:
        """Each of ``jobs``' expected work (``work_of``; default: ``None`` for every one)."""
        return [None] * len(jobs) if self.work_of is None or not jobs else self.work_of(jobs)

    # -- reading -------------------------------------------------------------------------------------
    @property
    def objects(self) -> QuerySet[J]:
        """Every job of the kind."""
        return self.model._default_manager.all()

    def in_state(self, *states: str) -> QuerySet[J]:
        """The jobs of the kind in one of ``states``."""
        return self.objects.filter(**{f"{self.model.STATE_FIELD}__in": states})

    def is_current(self, job: J, attempt: int | None, doing: str) -> bool:
        """Whether ``job`` is running at ``attempt`` (``None``: any); logged when not."""
        if job.job_state != job.RUNNING:
            log.warning("%s %s became %s while it ran: not %s it", self.name, job.pk, job.job_state, doing)
            return False
        if attempt is not None and attempt != job.attempt:
            log.warning("%s %s is at attempt %s: attempt %s is not %s it", self.name, job.pk, job.attempt, attempt,
                        doing)
            return False
        return True

    def current(self, pk: int, attempt: int | None, doing: str) -> J | None:
        """Job ``pk`` locked (call inside a transaction), or ``None`` (logged) when it is no longer running at
        ``attempt``; ``doing`` names what the caller was about to do, for the log."""
        job = self.objects.select_for_update().get(pk=pk)
        return job if self.is_current(job, attempt, doing) else None

    # -- one delivery ------------------------------------------------------------------------------------
    def claim(self, pk: int, attempt: int | None, worker: str, *, accept: Callable[[J], bool] | None = None,
              start: Callable[[J], None] | None = None) -> J | None:
        """Move job ``pk`` to running for this delivery of ``attempt`` on ``worker`` (``attempt`` ``None``: a
        message that carries none, or a call that is no delivery), under its row lock; ``start(job)`` records what
        this delivery records at a start (saved with it; it sees the state before: queued, or running for a
        delivery after its worker died). Return it, or ``None`` when this delivery has nothing to do, logged:
        ``accept`` refuses it, the job is final, the delivery is for another attempt, it is not queued or
        running, another delivery runs it (a fresh heartbeat), or it passed its deadline (failed here)."""
        now = timezone.now()
        with transaction.atomic():
            job = self.objects.select_for_update().select_related(*self.related).get(pk=pk)
            state = job.job_state
            if accept is not None and not accept(job):
                return None
            if job.is_final:
                log.info("%s %s is already %s: delivery of attempt %s ignored", self.name, pk, state, attempt)
                return None
            if attempt is not None and attempt != job.attempt:
                log.warning("%s %s is at attempt %s: delivery of attempt %s ignored", self.name, pk, job.attempt,
                            attempt)
                return None
            if state not in (job.QUEUED, job.RUNNING):
                log.info("%s %s is %s: nothing to run", self.name, pk, state)
                return None
            if job.deadline is not None and job.deadline < now:
                # A delivery after the queue's time limit, or a redelivery after its worker died past its deadline.
                job.move(job.FAILED, error=self.deadline_reason(job), fault=job.FAULT_SYSTEM)
                job.save()
                return None
            if state == job.RUNNING and heartbeat.is_fresh(job.heartbeat_at, now):
                log.info("%s %s runs on %s (heartbeat at %s): delivery ignored", self.name, pk, job.worker,
                         job.heartbeat_at)
                return None
            if self.on_claim is not None:
                self.on_claim(job)
            if start is not None:
                start(job)
            job.move(job.RUNNING)
            job.worker = worker[:200]
            job.heartbeat_at = now
            job.save()
        return job

    @contextmanager
    def beating(self, job: J) -> Iterator[None]:
        """Stamp the claimed job's ``heartbeat_at`` every ``QVAL_HEARTBEAT_S`` while the block runs, as long as it
        is running at this attempt (:func:`jobs.heartbeat.beating`)."""
        with heartbeat.beating(self.in_state(job.RUNNING).filter(attempt=job.attempt), job.pk):
            yield

    def finish(self, pk: int, attempt: int | None = None, *, after_reaper: bool = False, **fields: Any) -> str:
        """Set ``fields`` on job ``pk`` and finish it; return its state. A job no longer running at ``attempt``
        (the reaper failed or requeued it meanwhile) is left as it is -- unless ``after_reaper``: its work is done
        and stays done (a dataset built and loaded)."""
        with transaction.atomic():
            job = self.objects.select_for_update().get(pk=pk)
            if not after_reaper and not self.is_current(job, attempt, "finishing"):
                return job.job_state
            for name, value in fields.items():
                setattr(job, name, value)
            job.move(job.FINISHED)
            job.save()
        return job.job_state

    def fail(self, pk: int, reason: str, *, attempt: int | None = None, fault: str = "", **fields: Any) -> str:
        """Set ``fields`` on job ``pk`` and fail it with ``reason`` (and ``fault`` where the kind keeps it); return
        its state. One already final, or (given ``attempt``) at another attempt, is left as it is."""
        with transaction.atomic():
            job = self.objects.select_for_update().get(pk=pk)
            if job.is_final:
                log.warning("%s %s is already %s; not failing it with %r", self.name, pk, job.job_state, reason)
                return job.job_state
            if attempt is not None and attempt != job.attempt:
                log.warning("%s %s is at attempt %s: attempt %s does not fail it with %r", self.name, pk, job.attempt,
                            attempt, reason)
                return job.job_state
            for name, value in fields.items():
                setattr(job, name, value)
            job.move(job.FAILED, error=reason, fault=fault or job.FAULT_SYSTEM)
            job.save()
        return job.job_state

    # -- queueing and sending -------------------------------------------------------------------------
    def submit(self, job: J) -> J:
        """A job just created queued: stamp its deadline (``queue_s`` after it was queued) and send its message
        once the transaction commits."""
        job.deadline = job.queued_at + timedelta(seconds=self.queue_s(job))
        job.save(update_fields=["deadline"])
        self.send_on_commit([job.pk])
        return job

    def queue(self, job: J) -> None:
        """Queue ``job`` (unsent, no heartbeat) at a new attempt with its queue deadline, save it, and send its
        message once the transaction commits."""
        job.attempt += 1
        job.move(job.QUEUED)
        job.heartbeat_at = job.sent_at = None
        job.deadline = timezone.now() + timedelta(seconds=self.queue_s(job))
        job.save()
        self.send_on_commit([job.pk])

    def requeue_or_fail(self, job: J, reason: str) -> None:
        """A job that failed through the platform (its worker lost, or unable to run it): queue it again at a new
        attempt (:meth:`queue`), or on its last attempt (:data:`MAX_ATTEMPTS`) fail it with ``reason``, the
        platform's fault. Call with the job locked."""
        if job.attempt >= MAX_ATTEMPTS:
            job.move(job.FAILED, error=reason, fault=job.FAULT_SYSTEM)
            job.save()
            return
        self.queue(job)

    def requeue_worker(self, worker: str) -> list[int]:
        """Queue again, at the same attempt, the jobs running on ``worker`` (it restarted: they died with it), and
        send them; return their ids."""
        ids = []
        for pk in self.in_state(self.model.RUNNING).filter(worker=worker).values_list("pk", flat=True):
            with transaction.atomic():
                job = self.objects.select_for_update().get(pk=pk)
                if job.job_state != job.RUNNING or job.worker != worker:
                    continue
                job.move(job.QUEUED)
                job.heartbeat_at = job.sent_at = None
                job.deadline = timezone.now() + timedelta(seconds=self.queue_s(job))
                job.save()
                self.send_on_commit([pk])
                ids.append(pk)
        return ids

    def send_on_commit(self, pks: Sequence[int]) -> None:
        """Once the current transaction commits, send the messages of jobs ``pks`` (:meth:`send_now`)."""
        pks = list(pks)
        transaction.on_commit(lambda: self.send_now(pks))

    def send_now(self, pks: Sequence[int]) -> list[int]:
        """Send the messages of jobs ``pks`` and stamp their ``sent_at``; return the ids sent. When the broker
        cannot be reached the rest stay unsent, logged, for the reaper; no exception reaches the caller."""
        if self.send is not None:
            return self.send(pks)
        sent: list[int] = []
        jobs = self.objects.in_bulk(pks)
        for pk in pks:
            try:
                send_task(self.task, (pk,), priority=self.priority(jobs[pk]) if pk in jobs else PLATFORM_PRIORITY)
            except BrokerUnreachable as exc:
                log.warning("the broker is unreachable (%s): %s %s stay unsent until it is back", exc, self.name,
                            sorted(set(pks) - set(sent)))
                break
            self.objects.filter(pk=pk).update(sent_at=timezone.now())
            sent.append(pk)
        return sent

    # -- the reaper --------------------------------------------------------------------------------------
    def reap_lost(self, now: datetime | None = None) -> list[int]:
        """Requeue once, or fail (:meth:`requeue_or_fail`), every running job whose heartbeat is older than
        ``QVAL_HEARTBEAT_STALE_S`` at ``now``, each locked in its own transaction; return their ids. A job that
        finished or beat again meanwhile is skipped; one never stamped is not this reaper's to judge."""
        cutoff = (now or timezone.now()) - timedelta(seconds=settings.QVAL_HEARTBEAT_STALE_S)
        stale = self.in_state(self.model.RUNNING).filter(heartbeat_at__lt=cutoff)
        reason = heartbeat.lost_reason() + self.lost_note
        reaped = []
        for pk in stale.order_by("pk").values_list("pk", flat=True):
            with transaction.atomic():
                job = stale.select_for_update().filter(pk=pk).first()
                if job is None:
                    continue
                log.warning("%s %s: no heartbeat from %s since %s", self.name, pk, job.worker, job.heartbeat_at)
                self.requeue_or_fail(job, reason)
                reaped.append(pk)
        return reaped

    def reap_overdue(self, now: datetime | None = None) -> list[int]:
        """Fail every unfinished job whose deadline passed at ``now`` with ``deadline_reason`` (the platform's
        fault); return their ids."""
        now = now or timezone.now()
        overdue = self.objects.filter(deadline__lt=now).exclude(
            **{f"{self.model.STATE_FIELD}__in": self.model.FINAL_STATES})
        reaped = []
        for pk in overdue.order_by("pk").values_list("pk", flat=True):
            with transaction.atomic():
                job = self.objects.select_for_update().get(pk=pk)
                if job.is_final or job.deadline is None or job.deadline >= now:
                    continue  # finished (or given a new deadline) meanwhile
                job.move(job.FAILED, error=self.deadline_reason(job), fault=job.FAULT_SYSTEM)
                job.save()
                reaped.append(pk)
        return reaped

    def resend_unsent(self, now: datetime | None = None) -> list[int]:
        """Send again the messages of the jobs waiting for theirs for over ``QVAL_RESEND_AFTER_S`` at ``now``
        whose message never reached the broker; return the ids sent."""
        cutoff = (now or timezone.now()) - timedelta(seconds=settings.QVAL_RESEND_AFTER_S)
        waiting = self.waiting(cutoff) if self.waiting is not None else Q(queued_at__lt=cutoff)
        if self.waiting is None:
            waiting &= Q(**{self.model.STATE_FIELD: self.model.QUEUED})
        pks = list(self.objects.filter(waiting, sent_at__isnull=True).order_by("pk").values_list("pk", flat=True))
        return self.send_now(pks) if pks else []

    def reap(self, now: datetime | None = None) -> Reaped:
        """One round of the reaper: :meth:`reap_lost`, :meth:`reap_overdue`, :meth:`resend_unsent`; logged."""
        done = Reaped(self.reap_lost(now), self.reap_overdue(now), self.resend_unsent(now))
        if done.lost:
            log.warning("%d %s jobs lost their worker (requeued once, then failed): %s", len(done.lost), self.name,
                        done.lost)
        if done.overdue:
            log.warning("%d %s jobs passed their deadline, failed: %s", len(done.overdue), self.name, done.overdue)
        if done.resent:
            log.warning("%d %s jobs sent again (their message never reached the broker): %s", len(done.resent),
                        self.name, done.resent)
        return done


# -- the kinds with four states (jobs.models.Run) -----------------------------------------------------------
def queue_reason(run: Job) -> str:
    """Why a run that waited ``QVAL_RUN_QUEUE_S`` in the queue failed (whether its message reached the broker)."""
    why = ("no worker consuming its queue took it" if run.sent_at is not None
           else "its message never reached the broker (Redis was unreachable each time it was sent)")
    return f"not started within {settings.QVAL_RUN_QUEUE_S:g} s of being queued: {why}"


def _run_queue_s(run: Job) -> float:
    return settings.QVAL_RUN_QUEUE_S


def _no_deadline(run: Job) -> None:
    run.deadline = None


def run_kind(name: str, model: type[J], task: str, related: tuple[str, ...] = ()) -> JobKind[J]:
    """The kind of a run a worker claims from ``task``'s message (its id): it may wait ``QVAL_RUN_QUEUE_S`` in
    the queue (then fails with :func:`queue_reason`) and has no deadline once it runs (a training run, a Best-of-N
    run)."""
    return JobKind(name=name, model=model, task=task, queue_s=_run_queue_s, deadline_reason=queue_reason,
                   on_claim=_no_deadline, related=related)

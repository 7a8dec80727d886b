"""The heartbeat and the reaper of every long job: scoring a file, running a container, a baseline run
(:class:`submissions.models.Submission`), a training run (:class:`learning.models.TrainingRun`) and a
Best-of-N run (:class:`best_of_n.models.BestOfNRun`).

While a job runs, :func:`beating` stamps its row's ``heartbeat_at`` every ``QVAL_HEARTBEAT_S`` from a
thread. A running job with no heartbeat for ``QVAL_HEARTBEAT_STALE_S`` lost its worker: the reaper of
its kind (:func:`reap`, sent by beat every ``QVAL_REAP_EVERY_S``) requeues it once (``attempt`` 2) and
fails it with :func:`lost_reason` the second time (``MAX_ATTEMPTS``). A delivery of a job that another
worker runs with a fresh heartbeat (:func:`is_fresh`) leaves it alone.

A run's message (a training or Best-of-N run; submissions have their own, :mod:`submissions.lifecycle`) goes
out through :func:`send_run` once the transaction commits, which stamps its ``sent_at``; when the broker cannot
be reached the run stays queued and unsent, and its reaper (:func:`reap_queued`) sends it again after
``QVAL_RESEND_AFTER_S``, or fails it once it has waited ``QVAL_RUN_QUEUE_S`` without a worker starting it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 2
"""A job whose worker is lost is requeued once: the second loss fails it."""

Row = TypeVar("Row", bound=models.Model)


def lost_reason() -> str:
    """Why a job lost twice failed."""
    return f"the worker running it stopped responding twice (no heartbeat for {settings.QVAL_HEARTBEAT_STALE_S:g} s)"


@contextmanager
def beating(running: models.QuerySet[Row], pk: int) -> Iterator[None]:
    """Stamp ``heartbeat_at`` of row ``pk`` of ``running`` (the rows of its kind in the running state)
    now and every ``QVAL_HEARTBEAT_S`` until the block ends (a thread with its own database connection);
    a row no longer running is not stamped."""
    stop = threading.Event()

    def beat() -> None:
        try:
            while not stop.wait(settings.QVAL_HEARTBEAT_S):
                try:
                    running.filter(pk=pk).update(heartbeat_at=timezone.now())
                except Exception:  # noqa: BLE001 - the database may be restarting; try again next beat
                    log.warning("%s %s: heartbeat not written", running.model.__name__, pk, exc_info=True)
                    connection.close()
        finally:
            connection.close()

    running.filter(pk=pk).update(heartbeat_at=timezone.now())
    thread = threading.Thread(target=beat, name=f"heartbeat-{running.model.__name__}-{pk}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def is_fresh(heartbeat_at: datetime | None, now: datetime | None = None) -> bool:
    """Whether a heartbeat is younger than ``QVAL_HEARTBEAT_STALE_S`` (its worker is alive)."""
    if heartbeat_at is None:
        return False
    return heartbeat_at >= (now or timezone.now()) - timedelta(seconds=settings.QVAL_HEARTBEAT_STALE_S)


def reap(running: models.QuerySet[Row], lost: Callable[[Row], None], now: datetime | None = None) -> list[int]:
    """Call ``lost`` (requeue once, or fail) on each row of ``running`` whose heartbeat is older than
    ``QVAL_HEARTBEAT_STALE_S`` at ``now``, locked in its own transaction; return their ids. A row that
    finished or beat again meanwhile is skipped."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.QVAL_HEARTBEAT_STALE_S)
    stale = running.filter(heartbeat_at__lt=cutoff)
    reaped = []
    for pk in stale.values_list("pk", flat=True):
        with transaction.atomic():
            row = stale.select_for_update().filter(pk=pk).first()
            if row is None:
                continue
            log.warning("%s %s: no heartbeat from %s since %s", running.model.__name__, pk,
                        getattr(row, "worker", "?"), getattr(row, "heartbeat_at", None))
            lost(row)
            reaped.append(pk)
    return reaped


def requeue_or_fail_run(run: models.Model, send: Callable[[models.Model], None]) -> None:
    """A run (``TrainingRun``, ``BestOfNRun``: ``status``, ``attempt``, ``heartbeat_at``, ``finished_at``,
    ``error``, ``queued_at``, ``sent_at``) whose worker was lost: queue it again (unsent) and ``send`` it, or on its last attempt fail it with
    :func:`lost_reason`. Call with the run locked."""
    model = type(run)
    if run.attempt >= MAX_ATTEMPTS:  # type: ignore[attr-defined]
        run.status, run.finished_at, run.error = model.FAILED, timezone.now(), lost_reason()  # type: ignore[attr-defined]
        run.save()
        return
    run.status, run.attempt, run.heartbeat_at = model.QUEUED, run.attempt + 1, None  # type: ignore[attr-defined]
    run.queued_at, run.sent_at = timezone.now(), None  # type: ignore[attr-defined]
    run.save()
    send(run)


# -- sending runs, and the runs whose message never left -----------------------------------------
class Task(Protocol):
    """A Celery task taking a run's id (``train_learned``, ``play_best_of_n``)."""

    def delay(self, run_id: int) -> Any: ...


def send_run(run: models.Model, task: Task) -> None:
    """Once the current transaction commits, send the queued run's message to ``task`` (:func:`send_run_now`)."""
    model, pk = type(run), run.pk
    transaction.on_commit(lambda: send_run_now(model, pk, task))


def send_run_now(model: type[models.Model], pk: int, task: Task) -> bool:
    """Send the message of run ``pk`` (of ``model``) to ``task`` and stamp its ``sent_at``; return whether
    it reached the broker. When the broker cannot be reached the run stays unsent, logged, for
    :func:`reap_queued`; no exception reaches the caller."""
    try:
        task.delay(pk)
    except BrokerUnreachable as exc:
        log.warning("the broker is unreachable (%s): %s %s stays unsent until it is back", exc, model.__name__, pk)
        return False
    model.objects.filter(pk=pk).update(sent_at=timezone.now())  # type: ignore[attr-defined]
    return True


def queue_reason(sent: bool) -> str:
    """Why a run that waited ``QVAL_RUN_QUEUE_S`` in the queue failed (``sent``: its message reached the broker)."""
    why = ("no worker consuming its queue took it" if sent
           else "its message never reached the broker (Redis was unreachable each time it was sent)")
    return f"not started within {settings.QVAL_RUN_QUEUE_S:g} s of being queued: {why}"


def reap_queued(queued: models.QuerySet[Row], task: Task, now: datetime | None = None) -> tuple[list[int], list[int]]:
    """The reaper of the rows of ``queued`` (the runs of a kind in the queued state: ``queued_at``,
    ``sent_at``, ``status``, ``finished_at``, ``error``): fail those queued for over ``QVAL_RUN_QUEUE_S``
    at ``now`` with :func:`queue_reason`, and send again (:func:`send_run_now`) those whose message has not
    reached the broker after ``QVAL_RESEND_AFTER_S``. Return the ids (sent, failed)."""
    model = queued.model
    now = now or timezone.now()
    failed = []
    overdue = queued.filter(queued_at__lt=now - timedelta(seconds=settings.QVAL_RUN_QUEUE_S))
    for pk, sent_at in overdue.order_by("pk").values_list("pk", "sent_at"):
        if overdue.filter(pk=pk).update(status=model.FAILED, finished_at=now,  # type: ignore[attr-defined]
                                        error=queue_reason(sent_at is not None)):
            failed.append(pk)
    unsent = queued.filter(sent_at__isnull=True, queued_at__lt=now - timedelta(seconds=settings.QVAL_RESEND_AFTER_S))
    sent = []
    for pk in unsent.order_by("pk").values_list("pk", flat=True):
        if not send_run_now(model, pk, task):
            break  # the broker is down: the rest wait for the next round
        sent.append(pk)
    if failed:
        log.warning("%d %s rows waited over %g s in the queue, failed: %s", len(failed), model.__name__,
                    settings.QVAL_RUN_QUEUE_S, failed)
    if sent:
        log.warning("%d %s rows sent again (their message never reached the broker): %s", len(sent),
                    model.__name__, sent)
    return sent, failed

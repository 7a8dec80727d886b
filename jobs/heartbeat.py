"""A running job's heartbeat: :func:`beating` stamps its row's ``heartbeat_at`` every ``QVAL_HEARTBEAT_S`` from a
thread; a heartbeat older than ``QVAL_HEARTBEAT_STALE_S`` (:func:`is_fresh`) means its worker was lost, and the
reaper (:meth:`jobs.services.JobKind.reap_lost`) requeues it once and fails it with :func:`lost_reason` the second
time."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TypeVar

from django.conf import settings
from django.db import connection, models
from django.utils import timezone

log = logging.getLogger(__name__)

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

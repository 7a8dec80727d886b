"""Best-of-N runs on the Celery queue ``gpu`` (:mod:`best_of_n.services` does the work and sends
``play_best_of_n`` by name: this module imports that one, never the other way). The tasks keep the names
they had under ``workers.best_of_n``, so messages already queued still find them.

* ``play_best_of_n`` claims a queued run and plays its missing episodes, each stored as it
  finishes; the run ends ``finished`` with its summary or ``failed`` with the reason.
* ``reap_stale_best_of_n_runs`` (beat, every ``QVAL_REAP_EVERY_S``) requeues once, or fails, a
  run whose heartbeat stopped (:func:`best_of_n.services.reap_stale`), and sends again a queued
  run whose message never reached the broker, or fails it after ``QVAL_RUN_QUEUE_S``
  (:func:`best_of_n.services.reap_unsent`).
* When a worker consuming ``gpu`` starts, the runs it was playing when it died (same worker
  name) are queued again and resume at their first missing episode.

Queue a run with :func:`best_of_n.services.enqueue` (``manage.py best_of_n ENV PICKER --queue``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup

from jobs import heartbeat
from leaderboard.building import reason_of
from best_of_n.models import BestOfNRun

from . import services as best_of_n

log = logging.getLogger(__name__)


@shared_task(bind=True, name="workers.best_of_n.play_best_of_n", acks_late=True)
def play_best_of_n(self, run_id: int) -> str:  # type: ignore[no-untyped-def]
    """Play one run; return its final status."""
    run = best_of_n.start(run_id, self.request.hostname or "in-process")
    if run is None:
        return BestOfNRun.objects.get(pk=run_id).status
    try:
        run = best_of_n.play(run)
    except Exception as exc:  # noqa: BLE001 - every failure is recorded with its reason
        log.exception("best-of-n run %s failed", run_id)
        best_of_n.fail(run_id, reason_of(exc))
        return BestOfNRun.FAILED
    return run.status


@shared_task(name="workers.best_of_n.reap_stale_best_of_n_runs")
def reap_stale_best_of_n_runs() -> list[int]:
    """Requeue once, or fail, the runs whose worker stopped sending heartbeats (:func:`best_of_n.services.reap_stale`);
    send again, or fail, the queued runs whose message never left (:func:`best_of_n.services.reap_unsent`)."""
    reaped = best_of_n.reap_stale()
    if reaped:
        log.warning("%d best-of-n runs lost their worker (requeued once, then failed): %s", len(reaped), reaped)
    best_of_n.reap_unsent()
    return reaped


@celeryd_after_setup.connect
def resume_best_of_n_runs(sender: str, instance: Any, **kwargs: Any) -> None:
    """At the start of a worker consuming ``gpu``: queue again the runs this worker (same name) was playing."""
    if "gpu" not in instance.app.amqp.queues.consume_from:
        return
    ids = best_of_n.requeue_worker_runs(sender)
    for run_id in ids:
        heartbeat.send_run_now(BestOfNRun, run_id, play_best_of_n)
    log.info("worker %s: %d interrupted best-of-n runs queued again: %s", sender, len(ids), ids)

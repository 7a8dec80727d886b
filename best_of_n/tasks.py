"""Best-of-N runs on the Celery queue ``gpu`` (:mod:`best_of_n.services` does the work and sends
``play_best_of_n`` by name: this module imports that one, never the other way). The task keeps the name
it had under ``workers.best_of_n``, so messages already queued still find it.

* ``play_best_of_n`` claims a queued run and plays its missing episodes, each stored as it
  finishes; the run ends ``finished`` with its summary or ``failed`` with the reason. Its reaper is every
  job's (``jobs.tasks.reap_jobs``).
* When a worker consuming ``gpu`` starts, the runs it was playing when it died (same worker
  name) are queued again and resume at their first missing episode.

Queue a run with :func:`best_of_n.services.enqueue` (``manage.py best_of_n ENV PICKER --queue``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup

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
        return best_of_n.JOB.fail(run_id, reason_of(exc), attempt=run.attempt)
    return run.status


@celeryd_after_setup.connect
def resume_best_of_n_runs(sender: str, instance: Any, **kwargs: Any) -> None:
    """At the start of a worker consuming ``gpu``: queue again the runs this worker (same name) was playing."""
    if "gpu" not in instance.app.amqp.queues.consume_from:
        return
    ids = best_of_n.JOB.requeue_worker(sender)
    log.info("worker %s: %d interrupted best-of-n runs queued again: %s", sender, len(ids), ids)

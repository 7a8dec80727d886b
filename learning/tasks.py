"""``train_learned`` (queue ``gpu``): one training run of the Learned family (:func:`learning.services.run_training`);
``reap_stale_training_runs`` (beat, every ``QVAL_REAP_EVERY_S``): requeue once, or fail, the runs whose worker was lost;
send again the queued runs whose message never reached the broker, and fail those that waited too long."""

from __future__ import annotations

import logging

from celery import shared_task

from . import services

log = logging.getLogger(__name__)


@shared_task(bind=True, name="learning.tasks.train_learned", acks_late=True)
def train_learned(self, run_id: int) -> str:  # type: ignore[no-untyped-def]
    """Run one training run; return its final status."""
    return services.run_training(run_id, self.request.hostname or "in-process").status


@shared_task(name="learning.tasks.reap_stale_training_runs")
def reap_stale_training_runs() -> list[int]:
    """Requeue once, or fail, the runs whose worker stopped sending heartbeats (:func:`learning.services.reap_stale`);
    send again, or fail, the queued runs whose message never left (:func:`learning.services.reap_unsent`)."""
    reaped = services.reap_stale()
    if reaped:
        log.warning("%d training runs lost their worker (requeued once, then failed): %s", len(reaped), reaped)
    services.reap_unsent()
    return reaped

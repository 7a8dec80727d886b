"""``train_learned`` (queue ``gpu``): one training run of the Learned family (:func:`learning.services.run_training`);
its reaper is every job's (``jobs.tasks.reap_jobs``)."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task(bind=True, name="learning.tasks.train_learned", acks_late=True)
def train_learned(self, run_id: int) -> str:  # type: ignore[no-untyped-def]
    """Run one training run; return its final status."""
    return services.run_training(run_id, self.request.hostname or "in-process").status

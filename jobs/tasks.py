"""``reap_jobs`` (sent by beat every ``QVAL_REAP_EVERY_S``, queue ``scoring``): one round of every job kind's reaper
(:func:`jobs.registry.reap_all`): requeue once, or fail, the jobs whose worker stopped sending heartbeats, fail those
past their deadline, and send again the messages that never reached the broker."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from . import registry


@shared_task(name="jobs.tasks.reap_jobs")
def reap_jobs() -> dict[str, dict[str, list[int]]]:
    """What the reapers did, by kind (:class:`jobs.services.Reaped`)."""
    return {name: asdict(reaped) for name, reaped in registry.reap_all().items()}

"""Every kind of job, registered here and nowhere else: the one reaper (:func:`reap_all`, the beat task
``jobs.tasks.reap_jobs``) walks them. A kind is a :class:`jobs.services.JobKind` defined beside its services, named
here by import path (the apps sit above this one: they are imported when the reaper runs, not when this is)."""

from __future__ import annotations

from datetime import datetime

from django.utils.module_loading import import_string

from .services import JobKind, Reaped

KINDS: tuple[str, ...] = (
    "submissions.lifecycle.JOB",  # a predictions file scored, a method container run, a baseline run
    "learning.services.JOB",  # a training run of a learned method
    "best_of_n.services.JOB",  # a Best-of-N run
    "leaderboard.building.JOB",  # a dataset build
)
"""The import path of each kind's :class:`~jobs.services.JobKind`."""


def kinds() -> list[JobKind]:  # type: ignore[type-arg]
    """The registered kinds, in :data:`KINDS` order."""
    return [import_string(path) for path in KINDS]


def reap_all(now: datetime | None = None) -> dict[str, Reaped]:
    """One round of every kind's reaper (:meth:`jobs.services.JobKind.reap`), by kind name."""
    return {kind.name: kind.reap(now) for kind in kinds()}

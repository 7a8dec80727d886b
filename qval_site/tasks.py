"""``seed_reference_rows`` (queue ``scoring``): queue the reference rows of the datasets whose ids it is given
(:func:`qval_site.reference_rows.seed_reference_rows`); a finished dataset build sends it by name.  A dataset
that is a fresh hidden split first retires the version it replaces and re-runs its verified rows
(:func:`qval_site.fresh_splits.complete`).  ``refresh_due_splits`` (beat, hourly): the maintainers' schedule
of fresh splits (:func:`qval_site.fresh_splits.refresh_due`)."""

from __future__ import annotations

from celery import shared_task

from leaderboard.models import Dataset
from workers.builds import SEED_TASK

from . import fresh_splits
from .reference_rows import seed_reference_rows


@shared_task(name=SEED_TASK)
def seed_reference_rows_of(dataset_ids: list[int]) -> int:
    """Complete the fresh splits among the datasets ``dataset_ids`` and seed them; return how many reference runs
    were queued."""
    datasets = list(Dataset.objects.filter(pk__in=dataset_ids).select_related("environment"))
    for ds in datasets:
        fresh_splits.complete(ds)
    return seed_reference_rows(datasets).count


@shared_task(name="qval_site.tasks.refresh_due_splits")
def refresh_due_splits() -> int:
    """Queue the fresh splits the maintainers' schedule asks for; return how many."""
    return len(fresh_splits.refresh_due())

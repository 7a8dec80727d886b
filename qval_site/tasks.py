"""``seed_reference_rows`` (queue ``scoring``): queue the reference rows of the datasets whose ids it is given
(:func:`qval_site.reference_rows.seed_reference_rows`); a finished dataset build sends it by name."""

from __future__ import annotations

from celery import shared_task

from leaderboard.models import Dataset
from workers.builds import SEED_TASK

from .reference_rows import seed_reference_rows


@shared_task(name=SEED_TASK)
def seed_reference_rows_of(dataset_ids: list[int]) -> int:
    """Seed the datasets ``dataset_ids``; return how many runs were queued."""
    return seed_reference_rows(Dataset.objects.filter(pk__in=dataset_ids).select_related("environment")).count

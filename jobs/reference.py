"""Queueing a dataset's reference runs once: the shape the baseline rows, the training runs and the Best-of-N runs
share (:func:`submissions.baselines.queue_reference_rows`, :func:`learning.services.queue_reference_runs`,
:func:`best_of_n.services.queue_reference_runs`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from django.db import models, transaction
from django.db.models import QuerySet

Key = TypeVar("Key", bound=Hashable)
Queued = TypeVar("Queued")


def queue_missing(dataset: models.Model, wanted: Iterable[Key], existing: QuerySet[Any, Key],
                  launch: Callable[[Key], Queued]) -> list[Queued]:
    """Launch each of ``wanted`` that ``existing`` (the keys of the runs already there that did not fail; a lazy
    query, read under the lock) lacks, with ``dataset``'s row (a :class:`leaderboard.models.Dataset`; not imported:
    the apps sit above this one) locked meanwhile, so that two callers (``make up`` and
    a build finishing) never queue the same run twice; return what was launched, in the order of ``wanted``."""
    with transaction.atomic():
        type(dataset)._default_manager.select_for_update().get(pk=dataset.pk)
        have = set(existing)
        return [launch(key) for key in wanted if key not in have]

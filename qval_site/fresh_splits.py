"""Fresh hidden splits: what happens once the new dataset version of a refresh is loaded, and the schedule.

A refresh (:class:`budgets.models.Refresh`) is asked for when a split's information budget is spent
(:func:`budgets.services.record`), on the maintainers' schedule (:func:`refresh_due`,
``QVAL_SPLIT_REFRESH_DAYS``, sent hourly by beat) or by hand (``manage.py refresh_split``); it builds the
dataset again as version ``<version>-r<n>`` (:func:`qval.build.refreshed`: train and dev identical, the test
split drawn anew from the secret).  When that build has loaded the new version, the build's seeding task
(:mod:`qval_site.tasks`) calls :func:`complete`, which

1. **retires** the old version: every hidden split's budget turns ``retired`` with ``replaced_by`` set, so
   its board is frozen (no new submission is accepted there, :func:`budgets.services.refusal`; a submission
   still finishing there is held) and marked with the date and why;
2. **re-runs its verified rows** on the new version: the built-in methods' runs and method containers
   (:mod:`submissions.reruns`) and the training runs of the learned methods with their featuriser, seed and
   parameters (their published rows are verified rows), before the reference rows are seeded (which then
   skips what is queued already).  Uploaded files cannot be re-run: they stay on the retired board.

It lives here, above every app it calls (README, *Imports are meant to run one way*).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from budgets import services as budgets
from budgets.models import Refresh, SplitBudget
from leaderboard.models import Dataset
from learning import services as learning
from learning.models import TrainingRun
from qval import budget as qbudget
from qval.schema import PUBLIC_SPLITS
from submissions import reruns

log = logging.getLogger(__name__)


def retire(old: Dataset, new: Dataset, reason: str) -> list[SplitBudget]:
    """Retire ``old``'s hidden splits, replaced by ``new`` for ``reason``: the dataset is marked (its boards
    frozen) and every hidden split budget (created where none was used yet) turns ``retired``."""
    now = timezone.now()
    Dataset.objects.filter(pk=old.pk).update(replaced_by=new, retired_at=now, retired_reason=reason[:100])
    retired = []
    hidden = sorted(set(old.states.values_list("split", flat=True).distinct()) - set(PUBLIC_SPLITS))
    for split in hidden:
        for target in ("q", "v"):
            row = budgets.locked(old, split, target)
            row.state, row.retired_at, row.replaced_by = qbudget.RETIRED, now, new
            row.save(update_fields=["state", "retired_at", "replaced_by"])
            retired.append(row)
    return retired


def rerun_training_runs(old: Dataset, new: Dataset) -> list[TrainingRun]:
    """Queue on ``new`` every distinct finished training run of ``old`` (method, featuriser, seed, parameters)
    that published rows, unless ``new`` has that run already (not failed)."""
    queued: list[TrainingRun] = []
    have = {(r.method, r.featuriser, r.seed, repr(sorted(r.params.items())))
            for r in TrainingRun.objects.filter(dataset=new).exclude(status=TrainingRun.FAILED)}
    for run in TrainingRun.objects.filter(dataset=old, status=TrainingRun.FINISHED, submissions__isnull=False).distinct():
        key = (run.method, run.featuriser, run.seed, repr(sorted(run.params.items())))
        if key in have:
            continue
        have.add(key)
        try:
            queued.append(learning.enqueue(learning.create_run(run.method, new, featuriser=run.featuriser,
                                                               seed=run.seed, params=run.params)))
        except learning.InvalidRun as exc:
            log.warning("training run %s is not re-run on %s: %s", run.pk, new.key, exc)
    return queued


def complete(new: Dataset) -> Refresh | None:
    """Finish the refresh whose build loaded ``new`` (see the module doc); ``None`` when ``new`` is no queued
    refresh's dataset.  Idempotent: a refresh done already is left as it is."""
    with transaction.atomic():
        refresh = (Refresh.objects.select_for_update().filter(state=Refresh.QUEUED, dataset__slug=new.slug,
                                                              build__dataset_key=new.key).first())
        if refresh is None:
            return None
        old = refresh.dataset
        retire(old, new, refresh.get_reason_display())
        done: dict[str, Any] = {
            "baselines": [s.pk for s in reruns.rerun_baselines(old, new)],
            "containers": [s.pk for s in reruns.rerun_containers(old, new)],
            "training_runs": [r.pk for r in rerun_training_runs(old, new)],
        }
        refresh.replacement, refresh.state, refresh.done_at, refresh.reruns = new, Refresh.DONE, timezone.now(), done
        refresh.save(update_fields=["replacement", "state", "done_at", "reruns"])
    log.warning("%s replaced %s (refresh %d, %s): re-run %s", new.key, old.key, refresh.number, refresh.reason,
                {kind: len(ids) for kind, ids in done.items()})
    return refresh


def refresh_due(now=None) -> list[Refresh]:  # type: ignore[no-untyped-def]
    """Ask for a fresh split of every newest hosted dataset whose hidden split is older than
    ``QVAL_SPLIT_REFRESH_DAYS`` (nothing when it is 0); return the refreshes queued."""
    days = settings.QVAL_SPLIT_REFRESH_DAYS
    if days <= 0:
        return []
    cutoff = (now or timezone.now()) - timedelta(days=days)
    queued = []
    for ds in Dataset.newest_hosted():
        if ds.secret_test and ds.created_at < cutoff:
            refresh = budgets.request_refresh(ds, Refresh.SCHEDULE)
            if refresh is not None:
                queued.append(refresh)
    return queued

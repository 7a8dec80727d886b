"""Spending a hidden split's information budget, under its row lock, and asking for a fresh split once spent.

* :func:`locked`: the split's :class:`~budgets.models.SplitBudget`, created on first use (its size from the
  split's points and ``QVAL_BUDGET_SCALE``: :func:`qval.budget.budget_size`) and locked until the transaction
  ends.  Every release is decided and recorded under it, in the transaction that shows its numbers: the
  ladder's (:func:`submissions.ladder.climb`, before :func:`submissions.lifecycle.finish`) and compare's
  (:func:`submissions.comparison.compare`), so two releases never spend the same number.
* :func:`record`: store a :class:`qval.budget.Ledger` back with the release that changed it; a split whose
  budget is spent asks for a fresh split once the transaction commits (:func:`request_refresh`).
* :func:`refusal`: why a new submission to a hidden split is refused (retired, or spent while its fresh split
  is built), named on the upload's ``split`` field.
* :func:`request_refresh`: queue the build of a fresh hidden split (a new dataset version,
  :func:`qval.build.refreshed`) on the ``datasets`` queue; :mod:`qval_site.fresh_splits` retires the old
  version and re-runs its verified rows once the new one is loaded.  A refresh asked because a budget was
  spent waits ``QVAL_REFRESH_MIN_INTERVAL_S`` after the dataset's previous one: re-runs of method containers
  release on the new split like any submission, and must not chain refreshes.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from leaderboard import building
from leaderboard.models import Dataset, DatasetBuild, State
from qval import budget as qbudget
from qval import build
from qval.envs import registry
from qval.schema import PUBLIC_SPLITS

from .models import Refresh, Release, SplitBudget

log = logging.getLogger(__name__)


def num_points(dataset: Dataset, split: str, target: str) -> int:
    """Points of ``dataset``'s ``split`` for ``target``: one per state for both targets (Q: the actor's
    candidate; V: the state)."""
    return State.objects.filter(dataset=dataset, split=split).count()


def current(dataset: Dataset, split: str, target: str) -> SplitBudget | None:
    """The budget of ``dataset``'s hidden ``split`` and ``target`` as it is now, unlocked (``None``: none yet):
    for a look before the decision, which reads it again under :func:`locked`."""
    return SplitBudget.objects.filter(dataset=dataset, split=split, target=target).first()


def locked(dataset: Dataset, split: str, target: str) -> SplitBudget:
    """The budget of ``dataset``'s hidden ``split`` and ``target``, created when missing, under its row lock
    (call inside a transaction)."""
    found = SplitBudget.objects.select_for_update().filter(dataset=dataset, split=split, target=target).first()
    if found is not None:
        return found
    points = num_points(dataset, split, target)
    try:
        with transaction.atomic():
            SplitBudget.objects.create(dataset=dataset, split=split, target=target, num_points=points,
                                       size=qbudget.budget_size(points, settings.QVAL_BUDGET_SCALE))
    except IntegrityError:
        pass  # created meanwhile by another release
    return SplitBudget.objects.select_for_update().get(dataset=dataset, split=split, target=target)


def record(row: SplitBudget, ledger: qbudget.Ledger, kind: str, submission_id: int, user_id: int | None,
           metrics: tuple[str, ...] | list[str] = (), other_id: int | None = None) -> Release:
    """Store ``ledger`` (spent from ``row``, under its lock) and the release of ``kind`` that spent it. When the
    budget turns spent, stamp it and ask for a fresh split once the transaction commits."""
    cost = ledger.spent - row.spent
    was = row.state
    row.spent = ledger.spent
    row.state = ledger.state
    if row.state == qbudget.SPENT and was == qbudget.OPEN:
        row.spent_at = timezone.now()
        dataset = row.dataset
        transaction.on_commit(lambda: request_refresh(dataset, Refresh.SPENT))
        log.warning("the information budget of %s/%s/%s is spent (%d numbers): a fresh split is asked for",
                    dataset.key, row.split, row.target, row.size)
    row.save(update_fields=["spent", "state", "spent_at"])
    return Release.objects.create(budget=row, kind=kind, submission_id=submission_id, other_id=other_id,
                                  user_id=user_id, metrics=list(metrics), cost=cost)


def released_metrics(submission_id: int) -> tuple[str, ...] | None:
    """The metrics the ladder climb of a submission released (``None``: no climb was recorded, as for a
    submission decided before the budget existed)."""
    found = Release.objects.filter(submission_id=submission_id, kind=Release.LADDER).order_by("pk").first()
    return None if found is None else tuple(found.metrics)


def held(submission_id: int) -> bool:
    """Whether the submission was held undecided because its split's budget was spent."""
    return Release.objects.filter(submission_id=submission_id, kind=Release.HELD).exists()


def retirement(dataset: Dataset) -> Refresh | None:
    """The fresh split that replaced ``dataset``'s hidden split (its board is frozen), or ``None``."""
    return (Refresh.objects.filter(dataset=dataset, state=Refresh.DONE, replacement__isnull=False)
            .select_related("replacement").order_by("-pk").first())


def pending(dataset: Dataset) -> Refresh | None:
    """The fresh split of ``dataset`` being built, or ``None``; one whose build failed is marked failed here (so
    it blocks no other: the maintainer queues one again with ``manage.py refresh_split``)."""
    found = Refresh.objects.filter(dataset=dataset, state=Refresh.QUEUED).select_related("build").order_by("-pk").first()
    if found is not None and found.build is not None and found.build.status == DatasetBuild.FAILED:
        Refresh.objects.filter(pk=found.pk, state=Refresh.QUEUED).update(state=Refresh.FAILED, done_at=timezone.now())
        log.error("fresh split %d of %s failed: dataset build #%s: %s", found.number, dataset.key, found.build_id,
                  found.build.error[:500])
        return None
    return found


def refusal(dataset: Dataset, split: str, target: str) -> str | None:
    """Why a new submission to ``dataset``'s ``split`` and ``target`` is refused (``None``: it is not): the
    split was retired (naming the version that replaced it), or its budget is spent and its fresh split is
    being built. A public split is never refused."""
    if split in PUBLIC_SPLITS:
        return None
    replaced = retirement(dataset)
    if replaced is not None:
        return (f"the hidden {split} split of {dataset.key} is retired (its board is frozen since "
                f"{replaced.done_at:%Y-%m-%d}: {replaced.get_reason_display()}); submit to "
                f"{replaced.replacement.key}, its fresh hidden split")
    row = SplitBudget.objects.filter(dataset=dataset, split=split, target=target).first()
    if row is not None and row.state == qbudget.SPENT:
        building_now = pending(dataset)
        when = (f"a fresh split is being built (dataset build #{building_now.build_id}); submit to it once it "
                "is listed" if building_now is not None else "a maintainer will build a fresh split")
        return (f"the information budget of the hidden {split} split of {dataset.key} (target {target.upper()}) "
                f"is spent: every account's releases together used its {row.size} numbers, so nothing more is "
                f"released about it; {when}")
    return None


def next_number(dataset: Dataset) -> int:
    """The number of ``dataset``'s next fresh split: one more than any of its base version's so far."""
    base, _ = build.split_version(dataset.version)
    numbers = [build.split_version(v)[1] for v in Dataset.objects.filter(slug=dataset.slug)
               .values_list("version", flat=True) if build.split_version(v)[0] == base]
    queued = Refresh.objects.filter(dataset__slug=dataset.slug).aggregate(n=Max("number"))["n"] or 0
    return max([*numbers, queued]) + 1


def request_refresh(dataset: Dataset, reason: str) -> Refresh | None:
    """Queue the build of a fresh hidden split replacing ``dataset``'s; return it, or ``None`` (logged) when
    none is due: the dataset is not ours, its test split is not drawn from the secret, it was replaced or a
    fresh split is being built already, no builder makes it now, or (``reason`` *spent*) its previous
    refresh is younger than ``QVAL_REFRESH_MIN_INTERVAL_S``."""
    with transaction.atomic():
        dataset = Dataset.objects.select_for_update().get(pk=dataset.pk)
        why_not = None
        name = registry.builder_name(dataset.key)
        latest = Refresh.objects.filter(dataset__slug=dataset.slug).order_by("-created_at").first()
        if not dataset.hosted or not dataset.secret_test:
            why_not = "its test split is not drawn from the secret"
        elif retirement(dataset) is not None or pending(dataset) is not None:
            why_not = "it was replaced or a fresh split is being built already"
        elif name is None:
            why_not = "no builder makes its version now"
        elif (reason == Refresh.SPENT and latest is not None
              and latest.created_at > timezone.now() - timedelta(seconds=settings.QVAL_REFRESH_MIN_INTERVAL_S)):
            why_not = (f"its previous fresh split was asked for at {latest.created_at:%Y-%m-%d %H:%M} UTC, less than "
                       f"QVAL_REFRESH_MIN_INTERVAL_S ({settings.QVAL_REFRESH_MIN_INTERVAL_S} s) ago")
        if why_not is not None:
            log.info("no fresh split of %s (%s): %s", dataset.key, reason, why_not)
            return None
        assert name is not None
        number = next_number(dataset)
        queued = building.enqueue(name, refresh=number)
        refresh = Refresh.objects.create(dataset=dataset, reason=reason, number=number, build=queued)
    log.warning("fresh hidden split %d of %s queued (%s): dataset build #%s", number, dataset.key, reason, queued.pk)
    return refresh

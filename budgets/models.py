"""A hidden split's information budget, what was released from it, and the fresh splits that replace it.

Below :mod:`submissions` in the import order (README, *Imports are meant to run one way*): a release names
its submission by id, not by foreign key, so the ladder (:mod:`submissions.ladder`) and compare
(:mod:`submissions.comparison`) can spend from here.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from leaderboard.models import SPLIT_CHOICES, TARGET_CHOICES, Dataset, DatasetBuild
from qval import budget as qbudget


class SplitBudget(models.Model):
    """The numbers a hidden split (dataset version x split x target) may still release, shared by every account
    (:mod:`qval.budget`): ``size`` from its points (:func:`qval.budget.budget_size`), ``spent`` so far.
    ``open`` → ``spent`` (nothing more is released; a fresh split is built) → ``retired`` (its dataset version
    was replaced by ``replaced_by``: the board is frozen)."""

    STATES = [(s, s) for s in qbudget.STATES]

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="budgets")
    split = models.CharField(max_length=8, choices=SPLIT_CHOICES)
    target = models.CharField(max_length=1, choices=TARGET_CHOICES)
    num_points = models.PositiveIntegerField(help_text="Points of the split for the target (its size follows).")
    size = models.PositiveIntegerField(help_text="Numbers the split may release in all (qval.budget.budget_size).")
    spent = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=8, choices=STATES, default=qbudget.OPEN)
    opened_at = models.DateTimeField(default=timezone.now)
    spent_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)
    replaced_by = models.ForeignKey(Dataset, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                                    help_text="The dataset version whose fresh hidden split replaced this one.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["dataset", "split", "target"], name="budget_unique_split")]

    def __str__(self) -> str:
        return f"{self.dataset.key}/{self.split}/{self.target}: {self.spent} of {self.size} ({self.state})"

    def ledger(self) -> qbudget.Ledger:
        """The row as :mod:`qval.budget` counts it."""
        return qbudget.Ledger(size=self.size, spent=self.spent, retired=self.state == qbudget.RETIRED)


class Release(models.Model):
    """One release of numbers computed on a hidden split's labels from a user-controlled prediction: a ladder
    climb (``ladder``) or a comparison (``compare``), with its ``cost``; or a submission ``held`` undecided
    because the budget was spent (cost 0).  Appended, never changed."""

    LADDER, COMPARE, HELD = "ladder", "compare", "held"
    KINDS = [(LADDER, "ladder climb"), (COMPARE, "comparison"), (HELD, "held: budget spent")]

    budget = models.ForeignKey(SplitBudget, on_delete=models.CASCADE, related_name="releases")
    kind = models.CharField(max_length=8, choices=KINDS)
    submission_id = models.BigIntegerField(db_index=True, help_text="The submission released (compare: A).")
    other_id = models.BigIntegerField(null=True, blank=True, help_text="Compare: submission B.")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                             related_name="+", help_text="The account whose prediction or request it was.")
    metrics = models.JSONField(default=list, help_text="The metrics whose numbers were released.")
    cost = models.PositiveSmallIntegerField(default=0)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["pk"]


class Refresh(models.Model):
    """A fresh hidden split replacing ``dataset``'s: built as a new dataset version (``build``, then
    ``replacement`` once loaded), when a budget was spent or on the maintainers' schedule.  ``queued`` →
    ``done`` (the old version retired, its verified rows re-run on the new one: ``reruns``) or ``failed``."""

    QUEUED, DONE, FAILED = "queued", "done", "failed"
    STATES = [(s, s) for s in (QUEUED, DONE, FAILED)]
    SPENT, SCHEDULE, MAINTAINER = "spent", "schedule", "maintainer"
    REASONS = [(SPENT, "its information budget was spent"), (SCHEDULE, "the maintainers' refresh schedule"),
               (MAINTAINER, "a maintainer asked for it")]

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="refreshes")
    reason = models.CharField(max_length=10, choices=REASONS)
    number = models.PositiveIntegerField(help_text="The fresh split's number (its version ends in -r<number>).")
    build = models.ForeignKey(DatasetBuild, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    replacement = models.ForeignKey(Dataset, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    state = models.CharField(max_length=8, choices=STATES, default=QUEUED)
    reruns = models.JSONField(default=dict, blank=True, help_text="What was re-run on the new version, by kind.")
    created_at = models.DateTimeField(default=timezone.now)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"refresh {self.number} of {self.dataset.key} ({self.state})"

"""Submissions and their results.

A submission moves through ``received → validating → queued → scoring → finished`` or ends
``failed`` at any step; every transition is timestamped and a failure carries a reason the
user can act on. :meth:`Submission.transition` is the only place that changes the state.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from leaderboard.models import MODALITY_CHOICES, SPLIT_CHOICES, TARGET_CHOICES, Backbone, Dataset, Method


class InvalidTransition(RuntimeError):
    """A state change the state machine does not allow."""


class Submission(models.Model):
    """One predictions file (or, later, container) scored on one dataset split and target."""

    RECEIVED, VALIDATING, QUEUED, SCORING, FINISHED, FAILED = (
        "received",
        "validating",
        "queued",
        "scoring",
        "finished",
        "failed",
    )
    STATES = [(s, s) for s in (RECEIVED, VALIDATING, QUEUED, SCORING, FINISHED, FAILED)]
    FINAL_STATES = frozenset({FINISHED, FAILED})
    ALLOWED = {
        RECEIVED: {VALIDATING, FAILED},
        VALIDATING: {QUEUED, FAILED},
        QUEUED: {SCORING, FAILED},
        SCORING: {FINISHED, FAILED, SCORING},
        FINISHED: {SCORING},  # re-scoring is allowed and idempotent
        FAILED: set(),
    }
    # Who caused a failure: only user-caused failures count towards the daily quota.
    FAULT_USER, FAULT_SYSTEM = "user", "system"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="submissions")
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="submissions")
    split = models.CharField(max_length=8, choices=SPLIT_CHOICES)
    target = models.CharField(max_length=1, choices=TARGET_CHOICES)
    method_name = models.CharField(max_length=100)
    backbone_name = models.CharField(max_length=100, blank=True)
    # Linked when the submission finishes, so a failed upload adds nothing to the registry.
    method = models.ForeignKey(Method, on_delete=models.PROTECT, null=True, blank=True, related_name="submissions")
    backbone = models.ForeignKey(Backbone, on_delete=models.PROTECT, null=True, blank=True, related_name="submissions")
    modality = models.CharField(max_length=8, choices=MODALITY_CHOICES, default="text")
    filename = models.CharField(max_length=255)
    file = models.FileField(upload_to="submissions/%Y/%m/", blank=True)
    file_format = models.CharField(max_length=20, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=12, choices=STATES, default=RECEIVED)
    error = models.TextField(blank=True, help_text="Why the submission failed, for the user.")
    problems = models.JSONField(default=list, blank=True, help_text="Every validation problem found.")
    fault = models.CharField(max_length=8, blank=True)
    coverage = models.JSONField(default=dict, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    received_at = models.DateTimeField(default=timezone.now)
    validating_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    scoring_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-received_at"]
        indexes = [models.Index(fields=["user", "split", "received_at"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.method_name} on {self.dataset.key}/{self.split} ({self.state})"

    @property
    def is_final(self) -> bool:
        """Whether the submission has reached ``finished`` or ``failed``."""
        return self.state in self.FINAL_STATES

    def transition(self, new_state: str, *, error: str = "", fault: str = "", save: bool = True) -> None:
        """Move to ``new_state``, stamping its time; raise :class:`InvalidTransition` if not allowed."""
        if new_state not in self.ALLOWED[self.state]:
            raise InvalidTransition(f"submission {self.pk}: cannot go from {self.state} to {new_state}")
        self.state = new_state
        setattr(self, f"{new_state}_at", timezone.now())
        if new_state == self.FAILED:
            self.error = error or "failed"
            self.fault = fault or self.FAULT_SYSTEM
        if save:
            self.save()

    def timeline(self) -> list[tuple[str, object]]:
        """``(state, timestamp)`` pairs of the transitions that happened, in order."""
        states = [self.RECEIVED, self.VALIDATING, self.QUEUED, self.SCORING, self.FINISHED, self.FAILED]
        return [(s, getattr(self, f"{s}_at")) for s in states if getattr(self, f"{s}_at")]


class Result(models.Model):
    """One metric of a finished submission.

    ``value``/``p_value`` are null when the metric is undefined (constant predictions) or
    when fewer than the minimum number of usable points remained (``insufficient``).
    ``details`` keeps metric-specific numbers (std, valid/skipped counts, …).
    """

    submission = models.ForeignKey(Submission, on_delete=models.CASCADE, related_name="results")
    metric = models.CharField(max_length=40)
    value = models.FloatField(null=True)
    p_value = models.FloatField(null=True)
    num_points = models.PositiveIntegerField(default=0)
    num_dropped = models.PositiveIntegerField(default=0)
    coverage = models.FloatField(default=0.0)
    insufficient = models.BooleanField(default=False)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["submission", "metric"], name="result_unique_metric")]
        ordering = ["id"]

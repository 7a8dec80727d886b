"""A training run of a learned method (qval.learned) on one dataset."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from leaderboard.models import Dataset


class TrainingRun(models.Model):
    """``queued`` → ``running`` (stage, done/total, loss curves; ``heartbeat_at`` stamped while it runs) →
    ``finished`` (stored model, leaderboard submissions for dev and test) or ``failed`` with the reason. A
    run whose heartbeat stops is requeued once (``attempt`` 2), then failed; one whose message never reached
    the broker (``sent_at`` null) is sent again by its reaper, and one not started within
    ``QVAL_RUN_QUEUE_S`` of ``queued_at`` is failed (:mod:`jobs.heartbeat`)."""

    QUEUED, RUNNING, FINISHED, FAILED = "queued", "running", "finished", "failed"
    STATUSES = [(s, s) for s in (QUEUED, RUNNING, FINISHED, FAILED)]

    method = models.CharField(max_length=50, help_text="A key of qval.learned.methods.METHODS.")
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="training_runs")
    featuriser = models.CharField(max_length=300, default="hashed",
                                  help_text="'hashed', 'hashed:DIM', 'http://HOST:PORT#MODEL' (an /v1/embeddings server) or "
                                            "'local:PATH' (a transformers checkpoint on the gpu worker).")
    seed = models.IntegerField(default=0)
    params = models.JSONField(default=dict, blank=True, help_text="Overrides of the method's default parameters.")
    status = models.CharField(max_length=10, choices=STATUSES, default=QUEUED)
    stage = models.CharField(max_length=30, blank=True)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    losses = models.JSONField(default=dict, blank=True, help_text="Loss curves: name → values.")
    data = models.JSONField(default=dict, blank=True, help_text="What the training used (train split only).")
    model_dir = models.CharField(max_length=500, blank=True)
    version = models.CharField(max_length=64, blank=True, help_text="SHA-256 of the trained model.")
    error = models.TextField(blank=True)
    worker = models.CharField(max_length=200, blank=True)
    attempt = models.PositiveSmallIntegerField(
        default=1, help_text="Which try this is (a run whose worker is lost is requeued once, from scratch).")
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life of the worker running it (status running).")
    queued_at = models.DateTimeField(
        default=timezone.now, help_text="When it was last queued (created, or requeued); see QVAL_RUN_QUEUE_S.")
    sent_at = models.DateTimeField(
        null=True, blank=True, help_text="When its message reached the broker (null: not yet; its reaper sends it again).")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    submissions = models.ManyToManyField("submissions.Submission", blank=True, related_name="training_runs")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.method} on {self.dataset} ({self.status})"

    @property
    def percent(self) -> int:
        """Progress of the current stage in percent."""
        return int(100 * self.done / self.total) if self.total else 0

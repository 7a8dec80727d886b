"""A training run of a learned method (qval.learned) on one dataset."""

from __future__ import annotations

from django.db import models

from jobs.models import Run
from jobs.progress import Progress
from leaderboard.models import Dataset
from qval.learned.defaults import DEFAULT_FEATURISER


class TrainingRun(Run):
    """``queued`` → ``running`` (stage, done/total, loss curves; ``heartbeat_at`` stamped while it runs) →
    ``finished`` (stored model, leaderboard submissions for dev and test) or ``failed`` with the reason, with
    the lifecycle of every job (:class:`jobs.models.Run`, :data:`learning.services.JOB`); a requeued run trains from scratch."""

    method = models.CharField(max_length=50, help_text="A key of qval.learned.methods.METHODS.")
    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="training_runs")
    featuriser = models.CharField(max_length=300, default=DEFAULT_FEATURISER,
                                  help_text="'hashed', 'hashed:DIM', 'http://HOST:PORT#MODEL' (an /v1/embeddings server) or "
                                            "'local:PATH' (a transformers checkpoint on the gpu worker).")
    seed = models.IntegerField(default=0)
    params = models.JSONField(default=dict, blank=True, help_text="Overrides of the method's default parameters.")
    stage = models.CharField(max_length=30, blank=True)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    losses = models.JSONField(default=dict, blank=True, help_text="Loss curves: name → values.")
    data = models.JSONField(default=dict, blank=True, help_text="What the training used (train split only).")
    model_dir = models.CharField(max_length=500, blank=True)
    version = models.CharField(max_length=64, blank=True, help_text="SHA-256 of the trained model.")
    submissions = models.ManyToManyField("submissions.Submission", blank=True, related_name="training_runs")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.method} on {self.dataset} ({self.status})"

    @property
    def job_progress(self) -> Progress:
        """The current stage's progress."""
        return Progress(done=self.done, total=self.total, stage=self.stage)

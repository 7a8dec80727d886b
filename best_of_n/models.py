"""Best-of-N runs and their episodes.

The tables keep the names they had when these models were declared in :mod:`leaderboard` (migration
``best_of_n/0001`` adopts them: no data moved).
"""

from __future__ import annotations

from django.db import models

from jobs.models import Run
from jobs.progress import Progress


class BestOfNRun(Run):
    """One Best-of-N run (:mod:`qval.best_of_n`): a picker choosing among N candidates in seeded test episodes.

    ``picker`` is a built-in picker (``oracle``, ``random``, ``base``), the reference-policy baseline
    (``reference``), a registered method's name (with ``backbone``) or a learned method's (with the
    ``training_run`` whose model scores the candidates).  ``queued`` → ``running``
    (``done`` of ``num_episodes``; every finished episode is a :class:`BestOfNEpisode`) →
    ``finished`` (``summary`` holds the success rate and mean return with their 95% CIs) or
    ``failed`` (``error``), with the lifecycle of every job (:class:`jobs.models.Run`, :data:`best_of_n.services.JOB`);
    a requeued run (or one queued again when its worker restarts) resumes at its first missing episode.
    """

    environment = models.CharField(max_length=20, help_text="A key of qval.best_of_n.ENVIRONMENTS.")
    dataset_slug = models.SlugField(help_text="The dataset whose environment, actor and test tasks are played.")
    picker = models.CharField(max_length=100)
    backbone = models.CharField(max_length=300, blank=True)
    training_run = models.ForeignKey(
        "learning.TrainingRun", on_delete=models.PROTECT, null=True, blank=True, related_name="best_of_n_runs",
        help_text="For a learned picker (best-of-q, qlass, amc-value): the finished training run whose model picks.")
    n = models.PositiveSmallIntegerField()
    seed = models.IntegerField(default=0)
    num_episodes = models.PositiveIntegerField()
    done = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "leaderboard_bestofnrun"  # declared in leaderboard until migration best_of_n/0001
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["environment", "status"], name="leaderboard_environ_ba344e_idx")]

    def __str__(self) -> str:
        return f"best-of-{self.n} #{self.pk} {self.picker} on {self.environment} ({self.status})"

    @property
    def job_progress(self) -> Progress:
        """Episodes played."""
        return Progress(done=self.done, total=self.num_episodes, unit="episodes")


class BestOfNEpisode(models.Model):
    """One finished episode of a :class:`BestOfNRun`; ``steps`` is :meth:`qval.best_of_n.Episode.to_json`'s list."""

    run = models.ForeignKey(BestOfNRun, on_delete=models.CASCADE, related_name="episodes")
    index = models.PositiveIntegerField()
    task = models.CharField(max_length=200)
    success = models.BooleanField()
    discounted_return = models.FloatField()
    steps = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "leaderboard_bestofnepisode"
        ordering = ["run", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="unique_best_of_n_episode")]

"""Best-of-N runs and their episodes.

The tables keep the names they had when these models were declared in :mod:`leaderboard` (migration
``best_of_n/0001`` adopts them: no data moved).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class BestOfNRun(models.Model):
    """One Best-of-N run (:mod:`qval.best_of_n`): a picker choosing among N candidates in seeded test episodes.

    ``picker`` is a built-in picker (``oracle``, ``random``, ``base``), the reference-policy baseline
    (``reference``), a registered method's name (with ``backbone``) or a learned method's (with the
    ``training_run`` whose model scores the candidates).  ``queued`` → ``running``
    (``done`` of ``num_episodes``; every finished episode is a :class:`BestOfNEpisode`) →
    ``finished`` (``summary`` holds the success rate and mean return with their 95% CIs) or
    ``failed`` (``error``).  While it runs it stamps ``heartbeat_at``; a run whose heartbeat stops is
    requeued once (``attempt`` 2), then failed; a requeued run (or one queued again when its worker
    restarts) resumes at its first missing episode. One whose message never reached the broker
    (``sent_at`` null) is sent again by its reaper, and one not started within ``QVAL_RUN_QUEUE_S`` of
    ``queued_at`` is failed (:mod:`jobs.heartbeat`).
    """

    QUEUED, RUNNING, FINISHED, FAILED = "queued", "running", "finished", "failed"
    STATUSES = [(s, s) for s in (QUEUED, RUNNING, FINISHED, FAILED)]
    ACTIVE = (QUEUED, RUNNING)

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
    status = models.CharField(max_length=10, choices=STATUSES, default=QUEUED)
    done = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    worker = models.CharField(max_length=200, blank=True)
    attempt = models.PositiveSmallIntegerField(
        default=1, help_text="Which try this is (a run whose worker is lost is requeued once).")
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life of the worker running it (status running).")
    queued_at = models.DateTimeField(
        default=timezone.now, help_text="When it was last queued (created, or requeued); see QVAL_RUN_QUEUE_S.")
    sent_at = models.DateTimeField(
        null=True, blank=True, help_text="When its message reached the broker (null: not yet; its reaper sends it again).")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "leaderboard_bestofnrun"  # declared in leaderboard until migration best_of_n/0001
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["environment", "status"], name="leaderboard_environ_ba344e_idx")]

    def __str__(self) -> str:
        return f"best-of-{self.n} #{self.pk} {self.picker} on {self.environment} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def percent(self) -> int:
        """Episodes played, 0–100."""
        return int(100 * self.done / self.num_episodes) if self.num_episodes else 0


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

"""The lifecycle every worker run shares (a training run, a Best-of-N run): its status, the worker running
it, its heartbeat and its sending, as an abstract model the run models extend.

``queued`` → ``running`` → ``finished`` or ``failed`` (``error`` says why).  While it runs its worker stamps
``heartbeat_at``; a run whose heartbeat stops is requeued once (``attempt`` 2), then failed; one whose message
never reached the broker (``sent_at`` null) is sent again by its reaper, and one not started within
``QVAL_RUN_QUEUE_S`` of ``queued_at`` is failed (:mod:`jobs.heartbeat`).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class Run(models.Model):
    """The status, worker, heartbeat and timestamps of a run on a worker (module docstring)."""

    QUEUED, RUNNING, FINISHED, FAILED = "queued", "running", "finished", "failed"
    STATUSES = [(s, s) for s in (QUEUED, RUNNING, FINISHED, FAILED)]
    ACTIVE = (QUEUED, RUNNING)

    status = models.CharField(max_length=10, choices=STATUSES, default=QUEUED)
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
        abstract = True

    @property
    def is_active(self) -> bool:
        """Whether the run is queued or running."""
        return self.status in self.ACTIVE

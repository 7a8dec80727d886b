"""The fields and states every job on a worker shares, as abstract models the job models extend.

:class:`Job`: the worker running it, its heartbeat, its attempt, when it was queued and when its message reached
the broker, its deadline and why it failed; every kind has ``queued`` → running → ``finished`` or ``failed``.
:class:`Run` adds the four-state ``status`` and its times, for the kinds that have no more states (a training run,
a Best-of-N run, a dataset build); a submission keeps its own six states (:class:`submissions.models.Submission`).
The machinery that moves them -- claim, heartbeat, finish, fail, requeue once, the reaper -- is
:mod:`jobs.services`; each kind is registered once, in :mod:`jobs.registry`.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from django.db import models
from django.utils import timezone

from .progress import Progress


class Job(models.Model):
    """A job's liveness and end (module docstring). A subclass names its state field (:attr:`STATE_FIELD`) and its
    running state (:attr:`RUNNING`) and moves between states with :meth:`move` only."""

    QUEUED, RUNNING, FINISHED, FAILED = "queued", "running", "finished", "failed"
    FINAL_STATES: ClassVar[frozenset[str]] = frozenset({FINISHED, FAILED})
    STATE_FIELD: ClassVar[str] = "status"
    """The name of the field holding the state."""
    FAULT_USER, FAULT_SYSTEM = "user", "system"
    """Who caused a failure, for the kinds that keep it (a submission: only the user's count towards the quota)."""

    error = models.TextField(blank=True, help_text="Why it failed.")
    worker = models.CharField(max_length=200, blank=True, help_text="The worker running it (or that ran it last).")
    attempt = models.PositiveSmallIntegerField(
        default=1, help_text="Which try this is (a job whose worker is lost is requeued once).")
    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="Last sign of life of the worker running it (while it runs).")
    queued_at = models.DateTimeField(
        default=timezone.now, help_text="When it was last queued (created, or requeued).")
    sent_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When its message reached the broker (null: not yet; the reaper sends it again).")
    deadline = models.DateTimeField(
        null=True, blank=True, help_text="Past this time an unfinished job is failed by the reaper, with the reason "
                                         "of the state it was stuck in.")

    class Meta:
        abstract = True

    @property
    def job_state(self) -> str:
        """The current state (the value of :attr:`STATE_FIELD`)."""
        return str(getattr(self, self.STATE_FIELD))

    @property
    def is_final(self) -> bool:
        """Whether it has reached ``finished`` or ``failed``."""
        return self.job_state in self.FINAL_STATES

    @property
    def is_active(self) -> bool:
        """Whether it is queued or running."""
        return self.job_state in (self.QUEUED, self.RUNNING)

    def move(self, state: str, *, error: str = "", fault: str = "") -> None:
        """Move to ``state`` (unsaved), stamping its time; ``error`` says why a failed one failed, ``fault`` whose
        fault that was where the kind keeps it."""
        raise NotImplementedError

    @property
    def job_progress(self) -> Progress | None:
        """What the progress partial (``templates/jobs/_progress.html``) shows of it; ``None``: nothing to show."""
        return None

    @property
    def running_since(self) -> datetime | None:
        """When it started running (``None``: not started); the rate of its progress counts from then."""
        return None


class Run(Job):
    """A job with the four states only: ``queued`` → ``running`` → ``finished`` or ``failed``."""

    STATUSES = [(s, s) for s in (Job.QUEUED, Job.RUNNING, Job.FINISHED, Job.FAILED)]
    ACTIVE = (Job.QUEUED, Job.RUNNING)

    status = models.CharField(max_length=10, choices=STATUSES, default=Job.QUEUED)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def running_since(self) -> datetime | None:
        """:attr:`started_at`."""
        return self.started_at

    def move(self, state: str, *, error: str = "", fault: str = "") -> None:
        """Set ``status``: ``queued`` stamps ``queued_at``, ``running`` ``started_at`` (its first start), a final
        state ``finished_at`` and ``error`` (empty once finished)."""
        now = timezone.now()
        self.status = state
        if state == self.QUEUED:
            self.queued_at = now
        elif state == self.RUNNING:
            self.started_at = self.started_at or now
        else:
            self.finished_at = now
            self.error = error[:5000] if state == self.FAILED else ""

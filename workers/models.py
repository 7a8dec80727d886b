"""What the site knows about the workers and the jobs they run.

* :class:`JobToken`: the credential of one remote container job. The broker message carries the
  submission id and the raw token; the site keeps only its SHA-256. A token is bound to one
  submission and one attempt, expires, and is spent by posting the result (single use).
* :class:`WorkerHeartbeat`: a worker registered by name, its queues and its last sign of life,
  shown on the public status page.
"""

from __future__ import annotations

from django.db import models


class JobToken(models.Model):
    """The hashed token of one attempt of a remote container job."""

    submission = models.ForeignKey("submissions.Submission", on_delete=models.CASCADE, related_name="job_tokens")
    attempt = models.PositiveSmallIntegerField()
    token_sha256 = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    used_at = models.DateTimeField(null=True, blank=True, help_text="When the result was posted (the token is spent).")
    worker = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"job token of submission {self.submission_id} attempt {self.attempt}"


class WorkerHeartbeat(models.Model):
    """A worker by name: the queues it consumes, where it runs, what it runs and when it was last seen."""

    REMOTE, LOCAL = "remote", "local"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=8, choices=[(REMOTE, REMOTE), (LOCAL, LOCAL)], default=LOCAL)
    queues = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField()
    current = models.ForeignKey("submissions.Submission", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="+", help_text="The job it reported running at its last heartbeat.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

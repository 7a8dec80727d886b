"""Reads for the public status page: queues and their depth, what runs and waits on each (users' jobs and the
platform's runs, with progress and an estimate: :func:`jobs.queues.summaries`), jobs in progress, workers and their
heartbeats, recent failures that were the platform's fault, recent dataset builds. Nothing here names a user or shows
a file, a log or a label."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from amqp.exceptions import ChannelError
from celery import current_app
from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from jobs.queues import summaries
from leaderboard.models import DatasetBuild
from submissions.models import Submission

from .models import WorkerHeartbeat

log = logging.getLogger(__name__)

QUEUES = ("scoring", "containers", "gpu", "remote", "campaign", "datasets")
RECENT_FAILURES = 20
RECENT_BUILDS = 15


def queue_depths() -> dict[str, int | None]:
    """Messages waiting in each Celery queue (``None`` when the broker does not answer)."""
    depths: dict[str, int | None] = {}
    try:
        with current_app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            channel = conn.default_channel
            for name in QUEUES:
                try:
                    depths[name] = channel.queue_declare(queue=name, passive=True).message_count
                except ChannelError:  # never declared: no worker consumed it and nothing was sent yet
                    depths[name] = 0
    except Exception:  # noqa: BLE001 - the page still shows the rest while the broker is down
        log.warning("broker did not answer for the status page", exc_info=True)
        return {name: None for name in QUEUES}
    return depths


def _running_on(worker: WorkerHeartbeat, running: list[dict[str, Any]]) -> list[int]:
    """The submissions ``worker`` runs: those the running jobs name it for (a Celery worker's, or a remote one's as
    ``remote:<name>``), else the one its last heartbeat named."""
    names = {worker.name, f"remote:{worker.name}"}
    on_it = [r["submission"] for r in running if r["worker"] in names]
    return on_it or ([worker.current_id] if worker.current_id else [])


def status() -> dict[str, Any]:
    """Everything the status page shows, as plain data."""
    now = timezone.now()
    alive_after = now - timedelta(seconds=3 * settings.QVAL_HEARTBEAT_S)
    counts = dict(
        Submission.objects.exclude(state__in=Submission.FINAL_STATES)
        .values_list("state").annotate(n=Count("pk")).values_list("state", "n"))
    running = [
        {"submission": s.pk, "kind": s.kind, "dataset": s.dataset.key, "split": s.split, "worker": s.worker,
         "attempt": s.attempt, "started": s.scoring_at, "heartbeat": s.heartbeat_at, "deadline": s.deadline}
        for s in Submission.objects.filter(state=Submission.SCORING).select_related("dataset").order_by("scoring_at")
    ]
    workers = [
        {"name": w.name, "kind": w.kind, "queues": w.queues, "started": w.started_at, "last_seen": w.last_seen,
         "alive": w.last_seen >= alive_after, "current": w.current_id, "running": _running_on(w, running)}
        for w in WorkerHeartbeat.objects.all()
    ]
    failures = [
        {"submission": s.pk, "kind": s.kind, "dataset": s.dataset.key, "split": s.split, "failed": s.failed_at,
         "reason": s.error}
        for s in Submission.objects.filter(state=Submission.FAILED, fault=Submission.FAULT_SYSTEM)
        .select_related("dataset").order_by("-failed_at")[:RECENT_FAILURES]
    ]
    depths = queue_depths()
    return {
        "time": now,
        "queues": depths,
        "by_queue": [{"name": q.name, "messages": depths.get(q.name), "users_waiting": q.users_waiting,
                      "platform_waiting": q.platform_waiting, "running": q.running, "seconds_left": q.seconds_left,
                      "time_left": q.time_left, "unmeasured": q.unmeasured} for q in summaries(QUEUES, now)],
        "waiting": {state: counts.get(state, 0) for state in
                    (Submission.RECEIVED, Submission.VALIDATING, Submission.QUEUED, Submission.SCORING)},
        "running": running,
        "workers": workers,
        "recent_failures": failures,
        "builds": [
            {"id": b.pk, "name": b.name, "status": b.status, "stage": b.stage, "progress": b.job_progress.as_dict(),
             "started": b.started_at, "finished": b.finished_at, "dataset": b.dataset_key, "error": b.error}
            for b in DatasetBuild.objects.all()[:RECENT_BUILDS]
        ],
    }

"""Celery: the broker, the queue of each task, beat's schedule, redelivery.

``CELERY_BROKER_URL``       default ``redis://127.0.0.1:6379/0``.
``QVAL_INPROCESS_WORKER``   ``1`` runs Celery tasks inside the web process (laptop fallback only).
``QVAL_BROKER_VISIBILITY_S`` Redis redelivers a task a dead worker held after this many seconds (a delivery
                            for a final job or an older attempt does nothing)
                            (default: the longest container run, twice, at least 3600).
"""

from __future__ import annotations

from .env import env
from .jobs import QVAL_CONTAINER_GRACE_S, QVAL_CONTAINER_LIMITS, QVAL_REAP_EVERY_S

# --- Celery ---------------------------------------------------------------------------------
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="redis://127.0.0.1:6379/0")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "scoring"
CELERY_TASK_ROUTES = {
    "workers.tasks.validate_upload": {"queue": "scoring"},
    "workers.tasks.score_submission": {"queue": "scoring"},
    # Archives are read where they are run (the containers worker has the disk for them); with remote gpu
    # workers (no database) the scoring workers read them: submissions.lifecycle sends it to the queue.
    "workers.tasks.inspect_container_upload": {"queue": "containers"},
    "workers.tasks.score_remote_run": {"queue": "scoring"},
    # Users' containers, apart from the platform's runs on gpu (docs/workers.md), one at a time per worker process:
    # `celery -A qval_site worker -Q containers --concurrency 1` (acks late, prefetch 1 as above, so a job a
    # dead worker held is redelivered, not lost).
    "workers.tasks.run_container_submission": {"queue": "containers"},
    "learning.tasks.train_learned": {"queue": "gpu"},
    # A method that needs no model goes to scoring instead (submissions.lifecycle.job_queue names the queue).
    "workers.tasks.run_baseline_submission": {"queue": "gpu"},
    "jobs.tasks.reap_jobs": {"queue": "scoring"},
    # Dataset builds: `celery -A qval_site worker -Q datasets --concurrency 1` (minutes to hours each).
    "workers.builds.build_dataset": {"queue": "datasets"},
    "qval_site.tasks.seed_reference_rows": {"queue": "scoring"},
    "qval_site.tasks.refresh_due_splits": {"queue": "scoring"},
    # Best-of-N runs play episodes with a method's backbone: `celery -A qval_site worker -Q gpu`.
    "workers.best_of_n.play_best_of_n": {"queue": "gpu"},
}
# `celery -A qval_site beat`, a process of its own (never -B in a worker; exactly one), sends the reaper of
# every kind of job (jobs.registry) and the refresh of due hidden splits.
CELERY_BEAT_SCHEDULE = {
    "reap-jobs": {"task": "jobs.tasks.reap_jobs", "schedule": QVAL_REAP_EVERY_S},
    "refresh-due-splits": {"task": "qval_site.tasks.refresh_due_splits", "schedule": 3600.0},
}
# Redis redelivers an unacknowledged (acks-late) task after this long: it must exceed the
# longest container run (timeout + grace), or a running job would be started a second time.
# A baseline, training or Best-of-N run longer than this is delivered again while it runs; the second
# delivery finds it running (its heartbeat younger than QVAL_HEARTBEAT_STALE_S) and leaves it alone.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": int(env.str("QVAL_BROKER_VISIBILITY_S", default="") or max(
    3600, 2 * (QVAL_CONTAINER_LIMITS["timeout_s"] + QVAL_CONTAINER_GRACE_S)))}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = env.bool("QVAL_INPROCESS_WORKER", default=False)

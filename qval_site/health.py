"""Liveness and readiness: ``/healthz`` (the process answers) and ``/readyz`` (it can work).

``/readyz`` answers 200 only when the database and the Celery broker both answer; otherwise 503
with what failed. ``manage.py wait_ready`` waits for the same checks before migrations and
workers start (docker-compose.yml runs it first in every app service; workers add
``--migrated`` to also wait until the web service has applied every migration).
"""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse

BROKER_TIMEOUT_S = 2.0


def check_database() -> str | None:
    """``None`` when the default database answers ``SELECT 1``; else why not."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready", reported as text
        connection.close()  # a broken connection must not be reused by the next request
        return f"{exc.__class__.__name__}: {str(exc).strip()[:300]}"
    return None


def check_broker() -> str | None:
    """``None`` when the Celery broker accepts a connection within :data:`BROKER_TIMEOUT_S`; else why not."""
    from qval_site.celery import app

    if app.conf.task_always_eager:
        return None  # the in-process fallback has no broker
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001
        return f"{exc.__class__.__name__}: {str(exc).strip()[:300]}"
    return None


def check_migrations() -> str | None:
    """``None`` when every migration is applied to the default database; else which are not."""
    from django.db.migrations.executor import MigrationExecutor

    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:  # noqa: BLE001
        connection.close()
        return f"{exc.__class__.__name__}: {str(exc).strip()[:300]}"
    if plan:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan[:5])
        return f"{len(plan)} migrations not applied yet ({names})"
    return None


def readiness(*, migrations: bool = False) -> dict[str, str | None]:
    """Every dependency's check: ``{"database": None | reason, "broker": None | reason}``, and
    ``"migrations"`` when asked for (workers wait for the web service to migrate)."""
    checks = {"database": check_database(), "broker": check_broker()}
    if migrations:
        checks["migrations"] = check_migrations() if checks["database"] is None else "the database does not answer"
    return checks


def healthz(request: HttpRequest) -> JsonResponse:
    """200 whenever the process serves requests; touches nothing else."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> JsonResponse:
    """200 when the database and the broker answer, else 503 naming each failure."""
    checks = readiness()
    ready = all(reason is None for reason in checks.values())
    body = {"status": "ready" if ready else "not ready",
            "checks": {name: reason or "ok" for name, reason in checks.items()}}
    return JsonResponse(body, status=200 if ready else 503)

"""Structured logs: one JSON object per line, with the submission being processed on every line.

:data:`submission_id` is a context variable; :func:`submission_context` sets it around a
submission's processing (the Celery tasks get it from :func:`bind_task`, connected to
``task_prerun``/``task_postrun`` in :mod:`qval_site.celery`). :class:`ContextFilter` copies it
onto every record, so every line logged while a submission is processed -- by our code, Celery or
a library -- carries ``"submission_id"``. :class:`JsonFormatter` writes the records as JSON
(``QVAL_LOG_FORMAT=json``, the default; ``plain`` for the old one-line text format).
"""

from __future__ import annotations

import contextvars
import json
import logging
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterator

submission_id: contextvars.ContextVar[int | None] = contextvars.ContextVar("qval_submission_id", default=None)
"""The id of the submission whose processing the current code runs for (``None`` outside one)."""

SUBMISSION_TASKS = frozenset({"workers.tasks.score_submission", "workers.tasks.run_container_submission"})
"""Celery tasks whose first argument is a submission id."""

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "submission_id"}


@contextmanager
def submission_context(pk: int | None) -> Iterator[None]:
    """Tag every log line inside the block with ``submission_id=pk``."""
    token = submission_id.set(pk)
    try:
        yield
    finally:
        submission_id.reset(token)


class ContextFilter(logging.Filter):
    """Adds ``record.submission_id`` (the context's, or ``None``) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "submission_id", None) is None:
            record.submission_id = submission_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time``, ``level``, ``logger``, ``message``, ``submission_id``,
    any ``extra=`` fields, and ``exception`` with the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "submission_id": getattr(record, "submission_id", None),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


_task_tokens: dict[str, contextvars.Token[int | None]] = {}


def bind_task(task_id: str | None = None, task: Any = None, args: Any = None, kwargs: Any = None,
              **_: Any) -> None:
    """``task_prerun`` handler: a submission task's lines carry its submission id."""
    if task is None or task.name not in SUBMISSION_TASKS or task_id is None:
        return
    pk = (kwargs or {}).get("submission_id", args[0] if args else None)
    _task_tokens[task_id] = submission_id.set(int(pk) if pk is not None else None)


def unbind_task(task_id: str | None = None, **_: Any) -> None:
    """``task_postrun`` handler: undo :func:`bind_task`."""
    token = _task_tokens.pop(task_id or "", None)
    if token is not None:
        submission_id.reset(token)

"""The project's own app (``manage.py wait_ready``)."""

from __future__ import annotations

from importlib import import_module

from django.apps import AppConfig

from .celery import TASK_MODULES, app


class QvalSiteConfig(AppConfig):
    name = "qval_site"

    def ready(self) -> None:
        """With the in-process worker (``QVAL_INPROCESS_WORKER``), register every task now, as a worker
        does when it starts: a task sent by name runs in this process only when it is registered."""
        if app.conf.task_always_eager:
            for module in TASK_MODULES:
                import_module(module)

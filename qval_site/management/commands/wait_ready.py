"""``manage.py wait_ready [--timeout 120] [--migrated]``: wait until the database and the broker
answer (and, with ``--migrated``, every migration is applied)."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from qval_site.health import readiness


class Command(BaseCommand):
    help = "Wait until the database and the Celery broker answer (exit 1 with the reasons after --timeout)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait (default 120)")
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between checks (default 1)")
        parser.add_argument("--migrated", action="store_true", help="also wait until every migration is applied")

    def handle(self, *args: Any, timeout: float, interval: float, migrated: bool, **options: Any) -> None:
        deadline = time.monotonic() + timeout
        while True:
            checks = readiness(migrations=migrated)
            failed = {name: reason for name, reason in checks.items() if reason is not None}
            if not failed:
                self.stdout.write(f"ready: {', '.join(checks)} ok")
                return
            if time.monotonic() >= deadline:
                raise CommandError(f"not ready after {timeout:g} s: "
                                   + "; ".join(f"{name}: {reason}" for name, reason in failed.items()))
            time.sleep(interval)

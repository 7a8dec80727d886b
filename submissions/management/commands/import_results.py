"""``manage.py import_results``: import the published QVal v1.0 results (idempotent)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from submissions.importing import import_results
from qval.published import PublishedDataError


class Command(BaseCommand):
    help = "Import the QVal v1.0 reported results and re-score the authors' stored predictions (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--resamples", type=int, default=None,
                            help="bootstrap resamples of the re-scored rows (default QVAL_BOOTSTRAP_RESAMPLES)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = import_results(resamples=options["resamples"])
        except PublishedDataError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"imported {report.reported} reported and {report.rescored} re-scored evaluations ({report.results} results)"
        )

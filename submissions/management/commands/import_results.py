"""``manage.py import_results``: import every paper's published results (:mod:`qval.paper`; idempotent)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from submissions.importing import import_results
from qval.paper.base import PublishedDataError


class Command(BaseCommand):
    help = "Import every paper's reported results and re-score their stored predictions (idempotent)."

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

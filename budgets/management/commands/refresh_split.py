"""``manage.py refresh_split DATASET``: build a fresh hidden split of a dataset now (a maintainer's refresh)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from budgets.models import Refresh
from budgets.services import request_refresh
from leaderboard.models import Dataset


class Command(BaseCommand):
    help = ("Queue a fresh hidden split of DATASET (slug@version, or slug for its newest version): a new version "
            "with the same train and dev splits and a test split drawn anew from the secret; once loaded, the old "
            "version is retired and its verified rows re-run on the new one.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("dataset", help="slug@version, or slug for the newest version")

    def handle(self, *args: Any, **options: Any) -> None:
        dataset = Dataset.lookup(options["dataset"])
        if dataset is None:
            raise CommandError(f"unknown dataset {options['dataset']!r}")
        refresh = request_refresh(dataset, Refresh.MAINTAINER)
        if refresh is None:
            raise CommandError(f"no fresh split of {dataset.key} is due: see the log for why (not drawn from the "
                               "secret, already replaced or being replaced, or no builder makes its version)")
        self.stdout.write(f"fresh split {refresh.number} of {dataset.key} queued: dataset build #{refresh.build_id}")

"""``manage.py seed_reference_rows [DATASET ...]``: queue the reference rows of the hosted datasets.

Runs :func:`submissions.baselines.queue_reference_rows`: a baseline run (queue ``gpu``) of every reference
method of :mod:`qval.methods.reference` on the test split of each hosted dataset's newest version (or of the
named ones, ``slug`` or ``slug@version``), targets Q and V, unless that run exists already.  ``make up`` runs
it; a dataset build that finishes on the ``datasets`` queue queues its own (:mod:`workers.builds`).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from leaderboard.models import Dataset
from submissions.baselines import queue_reference_rows
from submissions.services import SubmissionRejected, resolve_dataset


class Command(BaseCommand):
    help = "Queue the reference methods' baseline runs on the test split of every hosted dataset (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("datasets", nargs="*", metavar="dataset",
                            help="slug or slug@version (default: the newest version of every hosted dataset)")

    def handle(self, *args: object, **opts: object) -> None:
        chosen: list[Dataset] | None = None
        if opts["datasets"]:
            try:
                chosen = [resolve_dataset(str(key)) for key in opts["datasets"]]  # type: ignore[attr-defined]
            except SubmissionRejected as exc:
                raise CommandError(exc.message) from None
        queued = queue_reference_rows(chosen)
        for sub in queued:
            self.stdout.write(f"baseline {sub.pk} queued: {sub.method_name} on {sub.dataset.key}/{sub.split} "
                              f"(target {sub.target})")
        self.stdout.write(f"{len(queued)} reference run(s) queued")

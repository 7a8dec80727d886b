"""``manage.py seed_reference_rows [DATASET ...]``: queue the reference rows of the hosted datasets.

Runs :func:`qval_site.reference_rows.seed_reference_rows` on the newest version of every hosted dataset (or
on the named ones, ``slug`` or ``slug@version``): the reference methods' baseline runs, the learned methods'
training runs and the built-in pickers' Best-of-N runs, each unless it exists already.  ``make up`` runs it; a
dataset build that finishes on the ``datasets`` queue seeds its own dataset (:mod:`workers.builds`).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from leaderboard.models import Dataset
from qval_site.reference_rows import seed_reference_rows
from submissions.services import SubmissionRejected, resolve_dataset


class Command(BaseCommand):
    help = ("Queue the reference rows of every hosted dataset (idempotent): reference-method baselines on the test "
            "split, a training run per learned method, Best-of-N runs of the built-in pickers.")

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
        seeded = seed_reference_rows(chosen)
        for sub in seeded.baselines:
            self.stdout.write(f"baseline {sub.pk} queued: {sub.method_name} on {sub.dataset.key}/{sub.split} "
                              f"(target {sub.target}, {sub.modality})")
        for run in seeded.training_runs:
            self.stdout.write(f"training run {run.pk} queued: {run.method} on {run.dataset.key}")
        for bon_run in seeded.best_of_n_runs:
            self.stdout.write(f"best-of-n run {bon_run.pk} queued: {bon_run.picker} on {bon_run.environment} "
                              f"(n={bon_run.n}, {bon_run.num_episodes} episodes)")
        self.stdout.write(f"{seeded.count} reference run(s) queued")

"""``manage.py build_dataset NAME``: build a dataset with our pipeline and load it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from leaderboard.loading import DatasetConflict, load_dataset
from qval import build, schema


class Command(BaseCommand):
    help = "Build a dataset (collect, sample, label, split), write it under QVAL_DATA_DIR and load it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help=f"dataset to build: {', '.join(build.BUILDERS)}")
        parser.add_argument("--out", type=Path, help="directory to write (default QVAL_DATA_DIR/datasets/<slug>-<version>)")
        parser.add_argument("--no-load", action="store_true", help="write the files only")

    def handle(self, *args: object, **opts: object) -> None:
        name = str(opts["name"])
        if name not in build.BUILDERS:
            raise CommandError(f"unknown dataset {name!r}; choose one of {', '.join(build.BUILDERS)}")

        interactive = sys.stderr.isatty()

        def progress(done: int, total: int, stage: str) -> None:
            if not interactive and done not in (0, total):
                return  # a log file gets the start and the end of each stage only
            width = 30
            filled = int(width * done / total) if total else width
            start = "\r" if interactive else ""
            sys.stderr.write(f"{start}{stage:<12} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
            if done >= total or not interactive:
                sys.stderr.write("\n")
            sys.stderr.flush()

        staging = Path(settings.QVAL_DATASETS_DIR) / f".build-{name}"
        ds = build.build(name, staging, progress=progress)
        out = Path(opts["out"] or Path(settings.QVAL_DATASETS_DIR) / f"{ds.manifest.slug}-{ds.manifest.version}")
        if out != staging:
            ds.write(out)
            shutil.rmtree(staging)
        schema.Dataset.read(out)  # round trip: the files on disk carry the same fingerprint
        self.stdout.write(f"built {ds.manifest.key} fingerprint {ds.manifest.fingerprint} at {out}")
        if opts["no_load"]:
            return
        try:
            dataset, created = load_dataset(ds)
        except DatasetConflict as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{'loaded' if created else 'already loaded'} {dataset.key}")

"""``manage.py build_dataset NAME``: build a dataset with our pipeline and load it.

Inline (the default) it draws a progress bar on the terminal and records the run as a
:class:`~leaderboard.models.DatasetBuild` like a queued one; ``--queue`` sends it to the
``datasets`` Celery queue instead (``--if-missing``: only when the dataset is not loaded and no
build of it is queued or running).  An interrupted build resumes from its checkpoint in
``QVAL_DATASETS_DIR/.work/NAME`` whether it is rerun here or on the queue.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from leaderboard import building
from leaderboard.loading import DatasetConflict
from leaderboard.models import DatasetBuild
from qval.envs import registry


def terminal_bar(interactive: bool):  # type: ignore[no-untyped-def]
    """A ``progress`` callback drawing ``stage [####....] done/total`` on stderr."""

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

    return progress


class Command(BaseCommand):
    help = "Build a dataset (collect, sample, label, split), write it under QVAL_DATA_DIR and load it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="+", metavar="name", help=f"dataset to build: {', '.join(registry.BUILDERS)}")
        parser.add_argument("--out", type=Path, help="directory to write (default QVAL_DATA_DIR/datasets/<slug>-<version>)")
        parser.add_argument("--no-load", action="store_true", help="write the files only")
        parser.add_argument("--queue", action="store_true", help="queue the build on the datasets Celery queue")
        parser.add_argument("--if-missing", action="store_true",
                            help="skip a dataset already loaded (with --queue: or being built)")
        parser.add_argument("--workers-stopped", action="store_true",
                            help="with --queue: every Celery worker is stopped (make up), so the builds they were "
                                 "running died: fail them first, so that they are queued again (and resume)")

    def handle(self, *args: object, **opts: object) -> None:
        names = [str(n) for n in opts["names"]]  # type: ignore[attr-defined]
        for name in names:
            if name not in registry.BUILDERS:
                raise CommandError(f"unknown dataset {name!r}; choose one of {', '.join(registry.BUILDERS)}")
        if opts["queue"]:
            if opts["out"] or opts["no_load"]:
                raise CommandError("--queue builds under QVAL_DATASETS_DIR and loads: no --out or --no-load")
            if opts["workers_stopped"]:
                n = building.fail_worker_builds()
                if n:
                    self.stdout.write(f"{n} build(s) interrupted by the workers' stop marked failed")
            for name in names:
                self._enqueue(name, bool(opts["if_missing"]))
            return
        if opts["out"] and len(names) > 1:
            raise CommandError("--out takes one dataset")
        for name in names:
            if opts["if_missing"] and building.is_loaded(name):
                self.stdout.write(f"{name}: already loaded, not built")
                continue
            self._inline(name, opts["out"], bool(opts["no_load"]))  # type: ignore[arg-type]

    def _enqueue(self, name: str, if_missing: bool) -> None:
        active = building.active_build(name)
        if if_missing and building.is_loaded(name):
            self.stdout.write(f"{name}: already loaded, not queued")
            return
        if active is not None:
            self.stdout.write(f"{name}: build #{active.pk} is already {active.status}, not queued")
            return
        b = building.enqueue(name)
        self.stdout.write(f"{name}: queued build #{b.pk} on the datasets queue")

    def _inline(self, name: str, out: Path | None, no_load: bool) -> None:
        active = building.active_build(name)
        if active is not None and active.status == DatasetBuild.RUNNING:
            raise CommandError(f"build #{active.pk} of {name} is running ({active.worker}); wait for it "
                               "(they would share a checkpoint)")
        record = building.start_inline(name, f"inline@{socket.gethostname()}")
        recorder = building.Recorder(record.pk, echo=terminal_bar(sys.stderr.isatty()))
        try:
            with building.JOB.beating(record):
                built = building.run_build(name, progress=recorder, out=out, load=not no_load)
        except DatasetConflict as exc:
            building.JOB.fail(record.pk, str(exc))
            raise CommandError(str(exc)) from exc
        except BaseException as exc:  # Ctrl-C included: the record must not stay running
            building.JOB.fail(record.pk, "interrupted" if isinstance(exc, KeyboardInterrupt)
                              else building.reason_of(exc))
            raise
        m = built.dataset.manifest
        self.stdout.write(f"built {m.key} fingerprint {m.fingerprint} at {built.path}")
        building.finish(record.pk, built)
        if no_load:
            return
        self.stdout.write(f"{'loaded' if built.created else 'already loaded'} {m.key}")

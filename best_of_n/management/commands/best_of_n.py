"""``manage.py best_of_n ENVIRONMENT PICKER``: a Best-of-N run, played here or queued on ``gpu``."""

from __future__ import annotations

import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from best_of_n import services as best_of_n
from qval import best_of_n as bon


class Command(BaseCommand):
    help = ("Run (or --queue) a Best-of-N run: PICKER is oracle, random, base, reference or a registered method "
            "(a learned one plays with a finished training run's model).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("environment", help=f"one of {', '.join(bon.ENVIRONMENTS)}")
        parser.add_argument("picker")
        parser.add_argument("--n", type=int, default=best_of_n.DEFAULT_N,
                            help=f"candidates per step (default {best_of_n.DEFAULT_N})")
        parser.add_argument("--episodes", type=int, default=best_of_n.DEFAULT_EPISODES)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--backbone", default="", help="a method's backbone (URL, unix:PATH or checkpoint dir)")
        parser.add_argument("--training-run", type=int, default=None,
                            help="a learned method's finished training run (default: its newest on the dataset)")
        parser.add_argument("--queue", action="store_true", help="send it to the gpu queue instead of playing here")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            run = best_of_n.create_run(opts["environment"], opts["picker"], n=opts["n"], num_episodes=opts["episodes"],
                                       seed=opts["seed"], backbone=opts["backbone"], training_run=opts["training_run"])
        except best_of_n.InvalidRun as exc:
            raise CommandError(f"{exc.field}: {exc.message}") from exc
        if opts["queue"]:
            best_of_n.enqueue(run)
            self.stdout.write(f"queued best-of-n run #{run.pk}")
            return
        started = best_of_n.start(run.pk, f"inline@{socket.gethostname()}")
        assert started is not None
        try:
            run = best_of_n.play(started)
        except Exception as exc:  # noqa: BLE001 - recorded, then reported
            best_of_n.JOB.fail(run.pk, str(exc), attempt=started.attempt)
            raise CommandError(f"best-of-n run #{run.pk} failed: {exc}") from exc
        s = run.summary
        self.stdout.write(f"best-of-n run #{run.pk}: success {s['success']['value']:.3f} "
                          f"[{s['success']['low']:.3f}, {s['success']['high']:.3f}], mean return "
                          f"{s['mean_return']['value']:.3f} over {s['episodes']} episodes")

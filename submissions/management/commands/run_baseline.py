"""``manage.py run_baseline METHOD --backbone NAME --dataset SLUG --split dev [--seed N] [--target q|v]``.

Launches a baseline run (:func:`submissions.baselines.launch_baseline`): a ``baseline`` submission
queued on ``gpu``; prints its id and page.  ``--wait`` polls its progress until it ends and exits
non-zero when it failed.  ``--option KEY=JSON`` passes a method option (``concurrency=16``).
"""

from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse

from submissions.baselines import BaselineRequest, launch_baseline
from submissions.models import Submission
from submissions.services import SubmissionRejected


def _option(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise CommandError(f"--option {text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


class Command(BaseCommand):
    help = "Launch a built-in method's baseline run on a dataset split (queue gpu)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("method", help="a built-in method (`qval methods` lists them)")
        parser.add_argument("--backbone", required=True,
                            help="a QVAL_BACKBONES name (LLM methods) or an encoder spec (clip, ARCH:random, ...)")
        parser.add_argument("--dataset", required=True, help="slug or slug@version")
        parser.add_argument("--split", default="dev")
        parser.add_argument("--target", default="", help="q or v (default: q when the method scores it)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
        parser.add_argument("--wait", action="store_true", help="poll until the run ends")

    def handle(self, *args: object, **opts: object) -> None:
        req = BaselineRequest(method=str(opts["method"]), backbone=str(opts["backbone"]), dataset=str(opts["dataset"]),
                              split=str(opts["split"]), target=str(opts["target"]), seed=int(opts["seed"]),  # type: ignore[arg-type]
                              options=dict(_option(o) for o in opts["option"]))  # type: ignore[union-attr]
        try:
            sub = launch_baseline(req)
        except SubmissionRejected as exc:
            raise CommandError(f"{exc.field}: {exc.message}") from None
        self.stdout.write(f"baseline {sub.pk} queued: {sub.method_name} on {sub.dataset.key}/{sub.split} "
                          f"(target {sub.target}) with {sub.backbone_name}; {reverse('submission', args=[sub.pk])}")
        if not opts["wait"]:
            return
        while True:
            sub.refresh_from_db()
            p = sub.progress
            self.stderr.write(f"\r{sub.state:<9} {p.get('done', 0)}/{p.get('total', '?')} tokens {p.get('tokens', 0)}", ending="")
            if sub.is_final:
                break
            time.sleep(1)
        self.stderr.write("")
        if sub.state == Submission.FAILED:
            raise CommandError(f"baseline {sub.pk} failed: {sub.error}")
        self.stdout.write(f"baseline {sub.pk} finished: {sub.num_nan} NaN points")

"""``manage.py train_learned --method best-of-q --dataset SLUG [--queue]``: train a learned method and publish it."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from leaderboard.models import Dataset
from learning import services
from learning.models import TrainingRun
from qval.learned.defaults import DEFAULT_FEATURISER
from qval.learned.methods import METHODS


class Command(BaseCommand):
    help = "Train a learned method (best-of-q, qlass, amc-value) on a loaded dataset's train split and publish it."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--method", required=True, help=f"one of {', '.join(METHODS)}")
        parser.add_argument("--dataset", required=True, help="slug or slug@version of a loaded dataset")
        parser.add_argument("--featuriser", default=DEFAULT_FEATURISER, help="hashed, hashed:DIM, crossed, crossed:DIM, tabular, smollm2 (SmolLM2-135M-Instruct's hidden states), http://HOST:PORT#MODEL or local:PATH (a transformers checkpoint; "
                                 "amc-value with --params '{\"lora\": true}' fine-tunes it with LoRA)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--params", default="{}", help="JSON object overriding the method's defaults")
        parser.add_argument("--queue", action="store_true", help="run on a gpu worker instead of inline")

    def handle(self, *args: Any, **opts: Any) -> None:
        dataset = Dataset.lookup(opts["dataset"])
        if dataset is None:
            raise CommandError(f"--dataset: no loaded dataset {opts['dataset']!r}")
        try:
            params = json.loads(opts["params"])
        except json.JSONDecodeError as exc:
            raise CommandError(f"--params: not JSON ({exc})") from None
        if not isinstance(params, dict):
            raise CommandError("--params: expected a JSON object")
        try:
            run = services.create_run(opts["method"], dataset, featuriser=opts["featuriser"], seed=opts["seed"],
                                      params=params)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if opts["queue"]:
            services.enqueue(run)
            self.stdout.write(f"training run {run.pk} queued")
            return
        run = services.run_training(run.pk, "manage.py")
        if run.status != TrainingRun.FINISHED:
            raise CommandError(f"training run {run.pk} failed: {run.error}")
        self.stdout.write(f"training run {run.pk} finished: model {run.version[:16]} at {run.model_dir}; "
                          f"submissions {', '.join(str(s.pk) for s in run.submissions.all())}")

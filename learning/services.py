"""Training runs of the Learned family: queue, run (on a ``gpu`` worker), publish to the leaderboard.

:func:`run_training` reads the dataset's files under ``QVAL_DATASETS_DIR`` through
:func:`qval.learned.methods.train` (inputs only, never labels), stores the weights under
``QVAL_DATA_DIR/learned`` (features cached under ``QVAL_DATA_DIR/cache/features``), records
progress (at most once a second) and the loss curves, then :func:`publish` scores the dev and
test splits (targets ``q`` — every candidate — and ``v``) and enters each as a finished
submission of the method (family *Learned*) owned by the platform user ``qval-platform``.

A run's lifecycle is every job's (:data:`JOB`, :class:`jobs.services.JobKind`): claimed, it stamps ``heartbeat_at``
while it trains; the reaper requeues a run whose heartbeat stopped once (it trains again from scratch) and fails it
the second time, sends again a message that never reached the broker, and fails a run not started within
``QVAL_RUN_QUEUE_S`` of being queued.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.utils import timezone

from jobs.services import JobKind, run_kind
from jobs.reference import queue_missing
from leaderboard.models import Dataset, Method
from qval.learned import methods as lm
from qval.learned.data import read_inputs
from qval.learned.defaults import DEFAULT_FEATURISER
from qval.learned.features import FeatureCache, featuriser_from_spec
from qval.offthread import call_in_thread
from submissions import scoring
from submissions.models import Submission

from . import selectors
from .models import TrainingRun

if TYPE_CHECKING:  # torch: only the gpu worker that trains imports it (the site's image has none)
    from qval.learned.store import TrainedModel

log = logging.getLogger(__name__)

PLATFORM_USER = "qval-platform"
PUBLISHED_SPLITS = ("dev", "test")


def models_root() -> Path:
    """Where trained weights are stored."""
    return Path(settings.QVAL_DATA_DIR) / "learned"


def feature_cache_dir() -> Path:
    """Where features are cached (per dataset fingerprint and featuriser)."""
    return Path(settings.QVAL_DATA_DIR) / "cache" / "features"


class InvalidRun(ValueError):
    """A run refused before it is created: ``field`` (``method``, ``dataset``, ``seed``, ``params`` or
    ``params.NAME`` for one hyperparameter) and ``message``, what was expected."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


PARAM_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "tau": (lambda v: 0 < v < 1, "a number strictly between 0 and 1"),
    "discount": (lambda v: 0 <= v <= 1, "a number from 0 to 1"),
    "epsilon": (lambda v: 0 <= v <= 1, "a number from 0 to 1"),
    "dropout": (lambda v: 0 <= v < 1, "a number from 0 to 1 (1 excluded)"),
    "lr": (lambda v: v > 0, "a positive number"),
    "weight_decay": (lambda v: v >= 0, "a number of at least 0"),
    "lora_alpha": (lambda v: v > 0, "a positive number"),
    "lora_lr": (lambda v: v > 0, "a positive number"),
}
"""Allowed values of the float hyperparameters; integer ones (an integer default) must be at least 1, or at least
their :data:`INT_MINIMUMS` entry."""

INT_MINIMUMS: dict[str, int] = {"branch_depth": 0}
"""Integer hyperparameters whose smallest allowed value is not 1 (``branch_depth`` 0, best-of-q's and amc-value's:
branch at the train states only)."""

FEATURISER = re.compile(r"(hashed|crossed|tabular)(:[1-9][0-9]*)?|smollm2|https?://[^#\s]+#\S+|local:\S.*")
"""The featuriser specs :func:`qval.learned.features.featuriser_from_spec` accepts."""

SEED_LIMIT = 2**31
"""Seeds are from 0 to ``SEED_LIMIT - 1``."""

TRAIN_TASK = "learning.tasks.train_learned"
"""The Celery task that runs a training run (queue ``gpu``), sent by name: its module imports this one."""


def check_param(name: str, value: Any, default: Any) -> Any:
    """``value`` of hyperparameter ``name`` (of the type of its ``default``), or :class:`InvalidRun`."""
    def bad(expected: str) -> InvalidRun:
        return InvalidRun(f"params.{name}", f"expected {expected}, got {value!r}")

    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if isinstance(default, int) or (default is None and value is not None):
        least = INT_MINIMUMS.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise bad(f"an integer of at least {least}" + (" or null" if default is None else ""))
        return value
    if isinstance(default, float):
        allowed, expected = PARAM_RANGES.get(name, (math.isfinite, "a number"))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not allowed(value):
            raise bad(expected)
        return float(value)
    return value


def create_run(method: str, dataset: Dataset, *, featuriser: str = DEFAULT_FEATURISER, seed: int = 0,
               params: dict[str, Any] | None = None) -> TrainingRun:
    """A queued run; bad arguments are an :class:`InvalidRun` naming the field and what was expected.

    ``featuriser``: ``hashed``, ``hashed:DIM``, ``crossed``, ``crossed:DIM``, ``tabular``, ``tabular:MAPS``,
    ``smollm2`` (SmolLM2-135M-Instruct's hidden states), ``http://HOST:PORT#MODEL`` or ``local:PATH`` (a transformers
    checkpoint folder on the gpu worker); ``amc-value`` with ``params.lora`` needs ``local:PATH``.
    """
    if method not in lm.METHODS:
        raise InvalidRun("method", f"unknown learned method {method!r}; choose one of {', '.join(lm.METHODS)}")
    if not selectors.trainable_datasets().filter(pk=dataset.pk).exists():
        raise InvalidRun("dataset", f"{dataset.key} has no train split loaded here; choose one of "
                                    f"{', '.join(d.key for d in selectors.trainable_datasets()) or 'none'}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise InvalidRun("seed", f"expected an integer from 0 to {SEED_LIMIT - 1}, got {seed!r}")
    defaults = lm.METHODS[method]["defaults"]
    unknown = set(params or {}) - set(defaults)
    if unknown:
        raise InvalidRun("params", f"unknown parameters {sorted(unknown)} for {method}; it takes {sorted(defaults)}")
    checked = {name: check_param(name, value, defaults[name]) for name, value in (params or {}).items()}
    if not FEATURISER.fullmatch(featuriser):
        raise InvalidRun("featuriser", f"expected hashed, hashed:DIM, crossed, crossed:DIM, tabular, tabular:MAPS, "
                                       f"smollm2, http://HOST:PORT#MODEL or local:PATH, "
                                       f"got {featuriser!r}")
    if checked.get("lora") and not featuriser.startswith("local:"):
        raise InvalidRun("featuriser", f"LoRA fine-tunes a local backbone: expected local:PATH (a transformers "
                                       f"checkpoint folder), got {featuriser!r}")
    return TrainingRun.objects.create(method=method, dataset=dataset, featuriser=featuriser, seed=seed,
                                      params=checked)


JOB: JobKind[TrainingRun] = run_kind("training run", TrainingRun, TRAIN_TASK, related=("dataset",))
"""Training runs as a job kind (registered in :mod:`jobs.registry`)."""


def enqueue(run: TrainingRun) -> TrainingRun:
    """Send a queued run to the ``gpu`` queue once the transaction commits (:meth:`jobs.services.JobKind.submit`:
    a message that cannot reach the broker is sent again by the reaper)."""
    return JOB.submit(run)


def queue_reference_runs(datasets: Iterable[Dataset]) -> list[TrainingRun]:
    """Queue the Learned family's reference rows: one training run of every learned method
    (:data:`qval.learned.methods.METHODS`) with :func:`create_run`'s defaults (featuriser
    :data:`~qval.learned.defaults.DEFAULT_FEATURISER`, the method's default parameters, seed 0) on each of
    ``datasets`` that has a train split here; return the runs queued (each sent to ``gpu`` once the transaction commits).

    A method that already has such a run on the dataset that did not fail is skipped, so calling this again
    queues nothing new and a failed run is queued again.  The dataset's row is locked meanwhile
    (:func:`jobs.reference.queue_missing`), so two callers never queue the same run twice.
    A finished run publishes its dev and test scores (:func:`publish`): verified rows on the boards.
    """
    queued: list[TrainingRun] = []
    trainable = selectors.trainable_datasets()
    for ds in datasets:
        if not trainable.filter(pk=ds.pk).exists():
            continue

        def launch(method: str, ds: Dataset = ds) -> TrainingRun:
            run = enqueue(create_run(method, ds))
            log.info("reference training run %s queued: %s on %s", run.pk, method, ds.key)
            return run

        queued += queue_missing(
            ds, list(lm.METHODS),
            TrainingRun.objects.filter(dataset=ds, featuriser=DEFAULT_FEATURISER, seed=0, params={})
            .exclude(status=TrainingRun.FAILED).values_list("method", flat=True),
            launch)
    return queued


class Recorder:
    """A ``progress(done, total, stage)`` that saves to the run at most once a second and at each stage change."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self._last = 0.0
        self._stage = ""

    def __call__(self, done: int, total: int, stage: str) -> None:
        now = time.monotonic()
        if stage == self._stage and done < total and now - self._last < 1.0:
            return
        self._last, self._stage = now, stage
        TrainingRun.objects.filter(pk=self.run_id).update(done=done, total=total, stage=stage)


def run_training(run_id: int, worker: str) -> TrainingRun:
    """Train, store and publish one queued (or interrupted) run; the run ends finished or failed with a reason.

    A delivery with nothing to do (:meth:`jobs.services.JobKind.claim`: the run is final, or another delivery
    runs it with a fresh heartbeat) leaves it as it is.
    """
    run = JOB.claim(run_id, None, worker)
    if run is None:
        return TrainingRun.objects.get(pk=run_id)
    try:
        with JOB.beating(run):
            featuriser = featuriser_from_spec(run.featuriser)
            # In a thread of its own: MiniWoB's Playwright runs an event loop in the thread that drives it,
            # where Django refuses the progress's database calls.
            folder, model = call_in_thread(
                lambda relay: lm.train(run.method, run.dataset.folder, models_root(), featuriser=featuriser,
                                       cache_dir=feature_cache_dir(), seed=run.seed, params=run.params, progress=relay),
                Recorder(run.pk), name=f"train-{run.pk}")
            run.refresh_from_db()
            run.model_dir, run.version, run.losses, run.data = str(folder), model.version, model.losses, model.data
            run.save(update_fields=["model_dir", "version", "losses", "data"])
            publish(run, model, FeatureCache(featuriser, feature_cache_dir(), model.fingerprint))
    except Exception as exc:  # noqa: BLE001 - every failure ends the run with its reason
        log.exception("training run %s failed", run_id)
        JOB.fail(run_id, f"{type(exc).__name__}: {exc}"[:2000], attempt=run.attempt)
        return TrainingRun.objects.get(pk=run_id)
    JOB.finish(run_id, run.attempt)
    return TrainingRun.objects.get(pk=run_id)


def publish(run: TrainingRun, model: TrainedModel, feats: FeatureCache) -> list[Submission]:
    """Score dev and test with the trained model and enter each (target q and v) as a finished submission: the
    platform's own run, so a *baseline* row (verified, on the boards with that badge)."""
    user = get_user_model().objects.get_or_create(username=PLATFORM_USER)[0]
    Method.objects.update_or_create(name=run.method, defaults={
        "family": "learned", "description": lm.METHODS[run.method]["description"]})
    inputs = read_inputs(run.dataset.folder)
    subs = []
    for split in PUBLISHED_SPLITS:
        for target in ("q", "v"):
            scores = lm.score_split(model, inputs, split, target, feats)
            buf = io.StringIO()
            writer = csv.writer(buf)
            writer.writerow(["id", "score"])
            writer.writerows((i, repr(v)) for i, v in scores.items())
            name = f"{run.method}-{split}-{target}.csv"
            sub = Submission(user=user, kind=Submission.KIND_FILE, source=Submission.SOURCE_BASELINE,  # the platform's run
                             dataset=run.dataset, split=split, target=target,
                             method_name=run.method, backbone_name="", modality="text", filename=name,
                             file_format="csv", state=Submission.QUEUED, queued_at=timezone.now(),
                             size_bytes=len(buf.getvalue().encode()))
            sub.file.save(name, ContentFile(buf.getvalue().encode()), save=False)
            sub.save()
            run.submissions.add(sub)  # before it finishes: the board reads a training run's rows as platform-run
            scoring.score_file(sub.pk, None, "in-process")  # here, in the training worker
            subs.append(sub)
    return subs

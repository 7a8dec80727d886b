"""Baseline runs: a built-in method of :mod:`qval.methods` run by the platform on a dataset split.

Staff launch one (:func:`launch_baseline`, from the admin or ``manage.py run_baseline``): it is a
submission of kind ``baseline`` and source ``baseline``, queued at once on ``gpu``, or on ``scoring`` for a
method that needs no model (:func:`submissions.lifecycle.job_queue`). :func:`submissions.lifecycle.dispatch`
sends ``workers.tasks.run_baseline_submission``, which calls :func:`run_baseline`:

* the backbone is a name of ``QVAL_BACKBONES`` for the LLM methods (``kind: vllm``: a ``vllm
  serve`` process the worker starts and reuses, :mod:`qval.vllm`; ``kind: transformers``: the
  checkpoint served in the worker; ``kind: upstream``: a running server), or an encoder spec for
  the image methods (``clip``, ``ARCH:random``, ...; :mod:`qval.methods.encoders`);
* :func:`qval.methods.run.run_method` runs with the response cache in ``QVAL_DATA_DIR/cache/baselines``,
  one for every method (a response is keyed on the model and the whole request), so a delivery after a worker
  died resumes where the dead one was (its answered requests are cache hits, counted in ``config``), a rerun is
  free, and a method that asks what another asked (``codegen-avg`` after ``codegen``) gets its answers;
* progress (done / total, tokens, times) is written to ``Submission.progress`` at most twice a
  second; the run is claimed, stamps ``heartbeat_at`` and ends like every job (:mod:`submissions.lifecycle`),
  so the reaper requeues it once when its worker is lost, and a second delivery of a run whose heartbeat
  is fresh (another worker still runs it), of an older attempt, or of a final run, leaves it alone;
* the predictions are stored and scored like any other submission; NaN points are counted
  (``num_nan``) and dropped by the metrics, never failing the run; ``config`` records the method
  and its version, prompt hash, backbone and checkpoint hash, sampling parameters, seed and options.

The dataset is read from its files under ``QVAL_DATASETS_DIR`` (labels included, for the methods
whose teacher reads them); nothing of the labels is logged or stored on the submission.
"""

from __future__ import annotations

import logging
import math
import shlex
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from jobs.reference import queue_missing
from leaderboard.exports import dataset_dir
from leaderboard.loading import truth_for
from leaderboard.models import Dataset, Method
from qval import predictions as qpred
from qval import metric_registry, schema, smollm2
from qval.families import get as get_family
from qval.methods.registry import CHAT_NEEDS, MethodError, MethodSpec, chat_methods, get_method
from qval.methods.run import Progress, run_method, shared_cache_dir, write_predictions
from qval.scoring import MetricRow, score

from . import lifecycle
from .queue_order import cheapest_first
from .models import Submission
from .services import SubmissionRejected, resolve_dataset

log = logging.getLogger(__name__)

LLM_NEEDS = frozenset({"chat-llm", "chat-llm-logprobs", "vlm"})
"""Methods whose backbone is a served model (a ``QVAL_BACKBONES`` name)."""
PROGRESS_EVERY_S = 0.5


@dataclass(frozen=True)
class BaselineRequest:
    """What staff ask to run: method × backbone × dataset × split, for a target and seed."""

    method: str
    backbone: str
    dataset: str
    split: str
    target: str = ""
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    modality: str = ""
    """The board it enters (empty: the method's own modality); another one only for a reference method, which
    reads no rendering of a state (:func:`qval.methods.reference.modalities_for`)."""
    remote: bool = False
    """Run by a remote gpu worker (:mod:`qval.remote_worker`, a GPU campaign: :func:`queue_campaign`): ``backbone``
    is a name of that worker's ``QVAL_BACKBONES``, not of the site's."""


def _target_for(spec: MethodSpec, target: str) -> str:
    if not target:
        return "q" if spec.supports("q") else "v"
    if not spec.supports(target):
        raise SubmissionRejected("target", f"{spec.name} scores {', '.join(spec.targets)}, not target {target!r}")
    return target


def check_backbone(spec: MethodSpec, backbone: str, remote: bool = False) -> None:
    """Refuse a backbone the method cannot use: LLM methods take a ``QVAL_BACKBONES`` name (any name for a
    ``remote`` run: the remote worker's list is not the site's), a method that needs none (``needs="none"``)
    takes any or none."""
    if spec.needs == "none":
        return
    if not backbone.strip():
        raise SubmissionRejected("backbone", f"{spec.name} needs a backbone ({spec.needs})")
    if spec.needs in LLM_NEEDS and not remote and backbone not in settings.QVAL_BACKBONES:
        served = sorted(settings.QVAL_BACKBONES) or ["none configured: set QVAL_BACKBONES"]
        raise SubmissionRejected("backbone", f"{spec.name} needs a served model ({spec.needs}); backbone {backbone!r} "
                                             f"is not in QVAL_BACKBONES; choose one of {served}")


def launch_baseline(req: BaselineRequest, user=None) -> Submission:  # type: ignore[no-untyped-def]
    """Create a queued baseline submission for ``req`` and send it to a ``gpu`` worker.

    Raises :class:`~submissions.services.SubmissionRejected` (field and reason) for an unknown
    method, dataset or split, a modality the dataset does not offer or the method does not read, a target the
    method does not score, or an unusable backbone.
    """
    try:
        spec = get_method(req.method)
    except MethodError as exc:
        raise SubmissionRejected("method", str(exc)) from None
    dataset: Dataset = resolve_dataset(req.dataset)
    splits = set(dataset.states.values_list("split", flat=True).distinct())
    if req.split not in splits:
        raise SubmissionRejected("split", f"dataset {dataset.key} has no split {req.split!r}; choose one of {sorted(splits)}")
    if spec.modality == "image" and "image" not in dataset.modalities:
        raise SubmissionRejected("dataset", f"{spec.name} needs images; dataset {dataset.key} has {dataset.modalities}")
    modality = req.modality or spec.modality
    if modality != spec.modality:
        from qval.methods.reference import modalities_for

        try:
            allowed = modalities_for(spec.name, dataset.modalities or ["text"])
        except MethodError:
            raise SubmissionRejected("modality", f"{spec.name} reads {spec.modality} inputs, not {modality}") from None
        if modality not in allowed:
            raise SubmissionRejected("modality", f"dataset {dataset.key} offers {', '.join(allowed)}, not {modality}")
    target = _target_for(spec, req.target)
    check_backbone(spec, req.backbone, req.remote)
    if req.remote and spec.needs not in LLM_NEEDS:
        raise SubmissionRejected("method", f"{spec.name} needs {spec.needs}, not a served model: a remote worker runs "
                                           f"only methods of a served model ({', '.join(sorted(LLM_NEEDS))})")
    with transaction.atomic():
        sub = Submission.objects.create(
            user=user, source=Submission.SOURCE_BASELINE, kind=Submission.KIND_BASELINE, dataset=dataset,
            split=req.split, target=target, method_name=spec.name, backbone_name=req.backbone, modality=modality,
            filename=f"{spec.name}.jsonl", file_format="baseline",
            config={"method": spec.name, "method_version": spec.version, "family": spec.family,
                    "backbone": req.backbone, "seed": req.seed, "options": dict(req.options),
                    "params": dict(spec.params), **({"runner": REMOTE_RUNNER} if req.remote else {})},
        )
        sub.transition(Submission.VALIDATING, save=False)
        lifecycle.dispatch(sub)
    log.info("baseline %s launched: %s on %s/%s with %s", sub.pk, spec.name, dataset.key, req.split, req.backbone)
    return sub


def image_runs_with_weights(dataset: Dataset | None = None) -> list[tuple[str, int]]:
    """The finished baseline runs of the image methods (modality ``image`` in the registry) whose encoder had real
    weights (:func:`qval.methods.encoders.has_real_weights`: not ``ARCH:random``), on ``dataset`` when given, as
    ``(backbone, runs)`` by backbone: what the image methods' pages and the image boards say was run here."""
    from qval.methods.encoders import has_real_weights
    from qval.methods.registry import all_methods

    runs = Submission.objects.filter(kind=Submission.KIND_BASELINE, state=Submission.FINISHED,
                                     method_name__in=[m.name for m in all_methods() if m.modality == "image"])
    if dataset is not None:
        runs = runs.filter(dataset=dataset)
    counts: dict[str, int] = {}
    for backbone in runs.values_list("backbone_name", flat=True):
        if has_real_weights(backbone):
            counts[backbone] = counts.get(backbone, 0) + 1
    return sorted(counts.items())


REMOTE_RUNNER = "remote"
"""``config["runner"]`` of a baseline run that a remote gpu worker runs (:func:`is_remote`)."""


def is_remote(sub: Submission) -> bool:
    """Whether baseline run ``sub`` is for a remote gpu worker (launched with ``remote=True``)."""
    return sub.kind == Submission.KIND_BASELINE and sub.config.get("runner") == REMOTE_RUNNER


REFERENCE_SPLIT = "test"
"""The split the reference rows are run on: the one the boards rank."""
REFERENCE_TARGETS: tuple[str, ...] = ("q", "v")
REFERENCE_BACKBONE = smollm2.BACKBONE_NAME
"""The backbone of the reference rows of the methods that need a chat model: SmolLM2-135M-Instruct, which every
machine has (:mod:`qval.smollm2`)."""


def campaign_methods() -> list[str]:
    """Every built-in text method of a chat model, in the registry's order (:func:`qval.methods.registry.chat_methods`):
    what a GPU campaign runs (:func:`queue_campaign`)."""
    return chat_methods()


def chat_reference_methods(environment: str, states: int) -> list[tuple[str, str]]:
    """``(method, target)`` of every text method that needs a chat model, each on target Q (a ranking method runs
    as target Q: :meth:`qval.methods.registry.MethodSpec.supports`): the LLM reference rows of a dataset of
    ``environment`` with ``states`` test states, run with :data:`REFERENCE_BACKBONE`, cheapest first there
    (:func:`submissions.queue_order.cheapest_first`)."""
    return [(name, "q") for name in cheapest_first(campaign_methods(), environment, states)
            if get_method(name).supports("q")]


def queue_reference_rows(datasets: Iterable[Dataset]) -> list[Submission]:
    """Queue the reference rows: a baseline run of every reference method (:mod:`qval.methods.reference`) that
    applies to the dataset's environment, on its test split, for each of :data:`REFERENCE_TARGETS` and each
    modality the dataset offers (:func:`qval.methods.reference.modalities_for`: FrozenLake's image boards get
    rows too); return the runs queued.  :func:`qval_site.reference_rows.seed_reference_rows` calls it with the
    hosted datasets to seed.

    A dataset without a test split is skipped, and so is a (method, target, modality) that already has a
    baseline run on it that did not fail: calling this again queues nothing new, and a failed run is queued
    again.  The dataset's row is locked meanwhile, so two callers (``make up`` and a build finishing) never queue
    the same run twice.

    Then the LLM reference rows: every text method that needs a chat model (:func:`chat_reference_methods`) with
    backbone :data:`REFERENCE_BACKBONE` on the dataset's text board (a dataset with text observations), one run
    per (method, target) with that backbone that did not fail; left out, logged, where ``QVAL_BACKBONES`` lacks the
    backbone (its package is not installed). They run on ``gpu``, behind every user's job, the costliest
    (``eureka``, ``direct-16``) behind every other platform run too (:func:`submissions.queue_order.priority`),
    and a rerun answers every request from the response cache.
    """
    from qval.methods.reference import methods_for, modalities_for

    queued: list[Submission] = []
    chat = REFERENCE_BACKBONE in settings.QVAL_BACKBONES
    if not chat:
        log.info("no LLM reference rows: backbone %s is not in QVAL_BACKBONES (%s)", REFERENCE_BACKBONE,
                 smollm2.INSTALL_HINT)
    for ds in datasets:
        states = ds.states.filter(split=REFERENCE_SPLIT).count() if ds.hosted else 0
        if not states:
            continue
        runs = Submission.objects.filter(kind=Submission.KIND_BASELINE, dataset=ds, split=REFERENCE_SPLIT).exclude(
            state=Submission.FAILED)
        wanted = [(name, target, modality) for name in methods_for(ds.environment.slug)
                  for modality in modalities_for(name, ds.modalities or ["text"]) for target in REFERENCE_TARGETS]
        queued += queue_missing(
            ds, wanted, runs.values_list("method_name", "target", "modality"),
            lambda key, ds=ds: launch_baseline(BaselineRequest(key[0], "", ds.key, REFERENCE_SPLIT, key[1],
                                                               modality=key[2])))
        if chat and "text" in (ds.modalities or ["text"]):
            queued += queue_missing(
                ds, chat_reference_methods(ds.environment.slug, states), runs.filter(backbone_name=REFERENCE_BACKBONE, modality="text").values_list(
                    "method_name", "target"),
                lambda key, ds=ds: launch_baseline(BaselineRequest(key[0], REFERENCE_BACKBONE, ds.key,
                                                                   REFERENCE_SPLIT, key[1], modality="text")))
    return queued


def queue_campaign(backbone: str, description: str = "", datasets: Iterable[Dataset] | None = None,
                   methods: Iterable[str] | None = None, targets: Iterable[str] = REFERENCE_TARGETS
                   ) -> list[Submission]:
    """A GPU campaign's runs: register ``backbone`` (a :class:`leaderboard.models.Backbone`, ``description`` its
    text) and queue, for a remote gpu worker serving it, a baseline run of each of ``methods`` (default
    :func:`campaign_methods`) with it on the test split of each of ``datasets`` (default: the newest version of
    every hosted dataset) for each target it scores; return the runs queued.

    Idempotent like the reference rows: a (method, target) with a run of this backbone on the dataset's test
    split that did not fail is not queued again. Raises :class:`~submissions.services.SubmissionRejected` for an
    unknown method, or one that needs no served model."""
    from leaderboard.models import Backbone

    names = list(methods) if methods is not None else campaign_methods()
    for name in names:
        try:
            needs = get_method(name).needs
        except MethodError as exc:
            raise SubmissionRejected("methods", str(exc)) from None
        if needs not in CHAT_NEEDS:
            raise SubmissionRejected("methods", f"{name} needs {needs}: a campaign runs methods of a chat model")
    if not backbone.strip():
        raise SubmissionRejected("backbone", "a campaign needs the name of the backbone its worker serves")
    entry, _ = Backbone.objects.get_or_create(name=backbone)
    if description and entry.description != description:
        entry.description = description
        entry.save(update_fields=["description"])
    chosen = [ds for ds in (Dataset.newest_hosted() if datasets is None else datasets) if ds.hosted]
    queued: list[Submission] = []
    for ds in chosen:
        if not ds.states.filter(split=REFERENCE_SPLIT).exists():
            continue
        wanted = [(name, target) for name in names for target in targets if get_method(name).supports(target)]
        queued += queue_missing(
            ds, wanted,
            Submission.objects.filter(kind=Submission.KIND_BASELINE, dataset=ds, split=REFERENCE_SPLIT,
                                      backbone_name=backbone).exclude(state=Submission.FAILED)
            .values_list("method_name", "target"),
            lambda key, ds=ds: launch_baseline(BaselineRequest(key[0], backbone, ds.key, REFERENCE_SPLIT, key[1],
                                                               remote=True)))
    return queued


def campaign_runs(backbone: str) -> list[dict[str, Any]]:
    """The remote baseline runs with ``backbone`` on test splits (a campaign's), oldest first: id, method,
    dataset, target, state, error (why it failed), progress and, once finished, its headline metric
    (:data:`qval.metric_registry.HEADLINE`) as ``headline``: ``{"metric": name, "value": value}``."""
    runs = (Submission.objects.filter(kind=Submission.KIND_BASELINE, backbone_name=backbone, split=REFERENCE_SPLIT,
                                      config__runner=REMOTE_RUNNER)
            .select_related("dataset").prefetch_related("results").order_by("pk"))
    return [{"id": s.pk, "method": s.method_name, "dataset": s.dataset.key, "target": s.target, "state": s.state,
             "error": s.error, "progress": {k: s.progress[k] for k in ("done", "total", "tokens") if k in s.progress},
             "headline": {"metric": metric_registry.HEADLINE,
                          "value": next((r.value for r in s.results.all() if r.metric == metric_registry.HEADLINE), None)}}
            for s in runs]


# -- running -----------------------------------------------------------------------------
@contextmanager
def served_backbone(name: str, spec: MethodSpec, vllm: Any) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(backbone spec for run_method, options, config)`` of backbone ``name`` for method ``spec``.

    ``vllm``: the worker's :class:`qval.vllm.VLLMManager` (kind ``vllm`` entries).
    """
    if spec.needs not in LLM_NEEDS:
        yield name, {}, {"backbone": name, "backbone_kind": "none" if spec.needs == "none" else "encoder"}
        return
    from qval.methods.llm import method_backbone

    entry = settings.QVAL_BACKBONES.get(name)
    if entry is None:
        raise MethodError(f"backbone {name!r} is no longer in QVAL_BACKBONES")
    yield method_backbone(name, entry, vllm)


def _start(pk: int, attempt: int | None, worker: str) -> Submission | None:
    """Claim attempt ``attempt`` of baseline ``pk`` for ``worker`` (:func:`submissions.lifecycle.claim`), counting
    the delivery in its progress; ``None`` when there is nothing to do (final, another attempt, running on a live
    worker, or past its deadline: failed there)."""

    def start(sub: Submission) -> None:
        kept = {k: v for k, v in sub.progress.items() if k not in ("first_at", "first_at_done")}
        sub.progress = {**kept, "deliveries": int(sub.progress.get("deliveries", 0)) + 1,
                        "resumed": sub.state == Submission.SCORING,
                        "started_at": sub.progress.get("started_at") or timezone.now().isoformat()}

    return lifecycle.claim(pk, attempt, worker, kinds={Submission.KIND_BASELINE}, start=start)


class _ProgressWriter:
    """Writes a run's progress to its submission, at most every ``PROGRESS_EVERY_S`` and at its end;
    ``at`` is the time of the last report (epoch seconds, for the ETA)."""

    def __init__(self, sub: Submission) -> None:
        self.pk = sub.pk
        self._owner = threading.current_thread()
        self.state: dict[str, Any] = dict(sub.progress)
        self._last = 0.0
        self._lock = threading.Lock()

    def _save(self) -> None:
        from django.db import connection

        with self._lock:
            Submission.objects.filter(pk=self.pk).update(progress=dict(self.state))
        if threading.current_thread() is not self._owner:  # a client's request thread
            connection.close()

    def __call__(self, p: Progress) -> None:
        first = "first_at_done" not in self.state
        with self._lock:
            self.state.update(done=p.done, total=p.total, tokens=p.tokens, at=time.time(),
                              updated_at=timezone.now().isoformat())
            if first:  # the rate (for the ETA) counts from the first report of this delivery
                self.state.update(first_at_done=p.done, first_at=time.time())
        now = time.monotonic()
        if now - self._last >= PROGRESS_EVERY_S or p.done >= p.total:
            self._last = now
            self._save()


def run_baseline(pk: int, attempt: int | None, worker: str, vllm: Any) -> str:
    """Run attempt ``attempt`` of baseline submission ``pk`` on this worker and score it; return its state (see
    the module docstring)."""
    sub = _start(pk, attempt, worker)
    if sub is None:
        return Submission.objects.get(pk=pk).state
    seed, options = int(sub.config.get("seed", 0)), dict(sub.config.get("options") or {})
    directory = dataset_dir(sub.dataset)
    try:
        with lifecycle.beating(sub):
            spec = get_method(sub.method_name)
            dataset = schema.Dataset.read(directory, secret=settings.QVAL_TEST_SPLIT_SECRET)
            with served_backbone(sub.backbone_name, spec, vllm) as (backbone, backbone_options, backbone_config):
                output = run_method(spec.name, dataset, sub.split, sub.target, backbone, seed=seed,
                                    cache_dir=shared_cache_dir(settings.QVAL_DATA_DIR),
                                    options={**options, **backbone_options}, dataset_dir=directory,
                                    progress=_ProgressWriter(sub))
            with tempfile.TemporaryDirectory(prefix="qval-baseline-") as tmp:
                data = write_predictions(output, Path(tmp) / "predictions.jsonl").read_bytes()
            rows, coverage = score_predictions(sub, data, output.num_nan)
    except (MethodError, qpred.ValidationFailed) as exc:
        return lifecycle.fail(pk, f"the baseline run cannot proceed: {exc}", Submission.FAULT_SYSTEM, sub.attempt)
    except Exception as exc:
        log.exception("baseline %s failed", pk)
        return lifecycle.fail(pk, f"the baseline run failed: {type(exc).__name__}: {str(exc)[:500]}",
                              Submission.FAULT_SYSTEM, sub.attempt)
    meta = {k: v for k, v in output.meta.items() if _jsonable(v)}
    config = {**sub.config, **meta, **backbone_config, "seed": seed, "options": options}
    return finish_baseline(sub, data, rows, coverage, config, output.num_nan)


def score_predictions(sub: Submission, data: bytes, num_nan: int) -> tuple[list[MetricRow], dict[str, Any]]:
    """The metric rows of baseline run ``sub``'s predictions ``data`` (JSON Lines, as
    :func:`qval.methods.run.write_predictions` writes them) and its coverage; ``qval.predictions.ValidationFailed``
    for a file that is not a predictions file of its split."""
    with tempfile.TemporaryDirectory(prefix="qval-baseline-") as tmp:
        path = Path(tmp) / "predictions.jsonl"
        path.write_bytes(data)
        truth = truth_for(sub.dataset, sub.split, sub.target)
        preds = qpred.parse(str(path), "predictions.jsonl", reference_ids=truth.point_ids)
        rows: list[MetricRow] = score(truth, preds.ids, preds.scores, samples=preds.samples,
                                      bootstrap_resamples=settings.QVAL_BOOTSTRAP_RESAMPLES)
    ids, expected = set(preds.ids), set(truth.point_ids)
    coverage = {"expected": len(expected), "provided": len(ids & expected), "missing": len(expected - ids),
                "missing_examples": sorted(expected - ids)[:5], "nan": num_nan}
    return rows, coverage


def finish_baseline(sub: Submission, data: bytes, rows: list[MetricRow], coverage: dict[str, Any],
                    config: dict[str, Any], num_nan: int) -> str:
    """Store baseline run ``sub``'s predictions ``data`` and finish it with ``rows`` (its method listed);
    return its state."""
    spec = get_method(sub.method_name)
    stored = default_storage.save(f"predictions/{timezone.now():%Y/%m}/{sub.pk}-baseline.jsonl", ContentFile(data))
    Method.objects.get_or_create(name=spec.name, defaults={"family": get_family(spec.family).slug,
                                                           "description": spec.description})
    return lifecycle.finish(sub.pk, rows, sub.attempt, config=config, num_nan=num_nan, predictions=stored,
                            coverage=coverage, sha256=_sha256(data), size_bytes=len(data), file_format="jsonl")


def finish_remote_baseline(sub: Submission) -> str:
    """Score the run a remote gpu worker posted for baseline run ``sub`` (:func:`workers.jobs.accept_result`
    stored its outcome, predictions, NaN count and config) and finish it, or fail it with the worker's reason;
    return its state."""
    data = b""
    if sub.predictions:
        with sub.predictions.open("rb") as fh:
            data = fh.read()
        sub.predictions.delete(save=False)
    if sub.container_outcome != "finished" or not data:
        reason = sub.container_outcome if sub.container_outcome != "finished" else "the worker posted no predictions"
        return lifecycle.fail(sub.pk, reason, Submission.FAULT_SYSTEM, sub.attempt)
    try:
        rows, coverage = score_predictions(sub, data, sub.num_nan or 0)
    except qpred.ValidationFailed as exc:
        return lifecycle.fail(sub.pk, f"the baseline run cannot proceed: {exc}", Submission.FAULT_SYSTEM, sub.attempt)
    return finish_baseline(sub, data, rows, coverage, dict(sub.config), sub.num_nan or 0)


def _jsonable(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (str, int, bool, type(None), list, dict))


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def vllm_command() -> list[str]:
    """``QVAL_VLLM_EXECUTABLE`` as an argument list."""
    return shlex.split(settings.QVAL_VLLM_EXECUTABLE)

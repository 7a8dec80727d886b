"""Celery tasks.

* ``validate_upload`` (queue ``scoring``) parses and validates an uploaded predictions file and
  queues it; ``inspect_container_upload`` (queue ``gpu``) checks an uploaded image archive and
  queues its submissions -- the web request only stores the upload;
* ``score_submission`` (queue ``scoring``) scores an uploaded predictions file;
* ``run_container_submission`` (queue ``gpu``; run those workers with ``--concurrency 1``) runs a
  method container on the split's inputs -- serving the backbone it asked for on the job's socket
  with the per-job token budget (:mod:`qval.backbone`) -- and scores what it wrote;
* ``run_baseline_submission`` (queue ``gpu``) runs a built-in method for a baseline submission
  (:func:`submissions.baselines.run_baseline`), serving its LLM backbone through the worker's
  :class:`qval.vllm.VLLMManager` (started on first use, reused across jobs, stopped when the
  worker process shuts down);
* ``score_remote_run`` (queue ``scoring``) scores the run a remote gpu worker posted
  (:mod:`workers.jobs`, :mod:`qval.remote_worker`);
* ``reap_overdue_submissions`` (sent every minute by Celery beat) fails submissions whose
  deadline passed; ``reap_stale_jobs`` (every ``QVAL_REAP_EVERY_S``) requeues once, then fails,
  jobs whose worker stopped sending heartbeats.

Every job stamps its submission's heartbeat while it runs (:func:`workers.heartbeat.beating`), and
each worker process registers itself for the status page when it is ready.

Both scoring tasks store results through :func:`store_results`, so a finished submission looks
the same whichever kind it is. They are idempotent: a redelivered or repeated task replaces the
results in one transaction. Failures are recorded on the submission with a reason; failures
through the platform's fault are marked so they do not count towards the user's quota.
Labels never appear in anything this module logs or stores on the submission, and never on
any path given to a container: a container's ``/input`` is written from the database's inputs
(:func:`leaderboard.loading.inputs_for`, which has no labels) and the labels are read only
after the container has exited, into the worker's memory.

A worker consuming ``gpu`` removes what a killed predecessor left behind
(:func:`qval.containers.sweep`) when it starts, before it takes any job.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_process_shutdown, worker_ready, worker_shutdown, worker_shutting_down
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from leaderboard.loading import inputs_for, truth_for
from leaderboard.models import Backbone, Method
from qval import containers as qc
from qval import predictions as qpred
from qval.backbone import Backend, BackboneServer, UpstreamBackend, backend_from_spec
from qval.schema import PUBLIC_SPLITS
from qval.scoring import MetricRow, disclose, score
from qval.vllm import ServeSpec, VLLMManager
from submissions import baselines, ladder, services
from submissions.models import Result, Submission
from workers import jobs
from workers.heartbeat import beating

log = logging.getLogger(__name__)

INTERNAL_ERROR = (
    "internal error while {doing}; the maintainers have been notified and this "
    "submission does not count towards your quota"
)


@shared_task(name="workers.tasks.validate_upload", acks_late=True)
def validate_upload(submission_id: int) -> str:
    """Check a received predictions file (:func:`submissions.services.validate_submission`)."""
    return services.validate_submission(submission_id)


@shared_task(name="workers.tasks.inspect_container_upload", acks_late=True)
def inspect_container_upload(submission_ids: list[int]) -> list[str]:
    """Check the archive of received container submissions (:func:`submissions.services.inspect_archive`)."""
    return services.inspect_archive(submission_ids)


@shared_task(bind=True, name="workers.tasks.score_submission", acks_late=True)
def score_submission(self, submission_id: int) -> str:  # type: ignore[no-untyped-def]
    """Score one queued submission; return its final state.

    A redelivered task (the worker died while scoring) scores it again until its deadline
    (``QVAL_SCORING_S`` after it was queued); past that it fails, so a file that kills the
    worker is not redelivered for ever.
    """
    with transaction.atomic():
        sub = Submission.objects.select_for_update().select_related("dataset").get(pk=submission_id)
        if sub.state not in (Submission.QUEUED, Submission.SCORING, Submission.FINISHED):
            log.info("submission %s is %s; nothing to score", sub.pk, sub.state)
            return sub.state
        if sub.state != Submission.FINISHED and sub.deadline is not None and sub.deadline < timezone.now():
            # A redelivery after the worker scoring it died, past its deadline: stop here.
            sub.transition(Submission.FAILED, error=services.deadline_reason(sub), fault=Submission.FAULT_SYSTEM)
            return Submission.FAILED
        sub.transition(Submission.SCORING, save=False)
        sub.worker = (self.request.hostname or "in-process")[:200]
        sub.heartbeat_at = timezone.now()
        sub.save()
    try:
        with beating(Submission.objects.filter(state=Submission.SCORING), sub.pk):
            truth = truth_for(sub.dataset, sub.split, sub.target)
            preds = qpred.parse(sub.file.path, sub.filename, reference_ids=truth.point_ids)
            rows = score(
                truth,
                preds.ids,
                preds.scores,
                samples=preds.samples,
                bootstrap_resamples=settings.QVAL_BOOTSTRAP_RESAMPLES,
            )
    except qpred.ValidationFailed as exc:
        return fail(sub.pk, f"invalid predictions file: {exc}", Submission.FAULT_USER)
    except Exception:  # noqa: BLE001 - any other error is ours; the user gets a generic reason
        log.exception("scoring submission %s failed", sub.pk)
        return fail(sub.pk, INTERNAL_ERROR.format(doing="scoring"), Submission.FAULT_SYSTEM)
    return store_results(submission_id, rows)


@shared_task(bind=True, name="workers.tasks.run_container_submission", acks_late=True)
def run_container_submission(self, submission_id: int) -> str:  # type: ignore[no-untyped-def]
    """Run a queued container submission in the sandbox, score its predictions; return its final state.

    The first delivery moves it to ``scoring`` with a deadline of the run's timeout plus
    ``QVAL_CONTAINER_GRACE_S``; a redelivery (the worker died) runs it again within that same
    deadline, and past it the submission fails.
    """
    now = timezone.now()
    with transaction.atomic():
        sub = Submission.objects.select_for_update().select_related("dataset").get(pk=submission_id)
        if sub.kind != Submission.KIND_CONTAINER or sub.state not in (Submission.QUEUED, Submission.SCORING):
            log.info("submission %s (%s) is %s; nothing to run", sub.pk, sub.kind, sub.state)
            return sub.state
        if sub.deadline is not None and sub.deadline < now:
            sub.transition(Submission.FAILED, error=services.deadline_reason(sub), fault=Submission.FAULT_SYSTEM)
            return Submission.FAILED
        limits = services.container_limits(sub.dataset)
        if sub.state == Submission.QUEUED:
            sub.deadline = now + timedelta(seconds=limits.timeout_s + settings.QVAL_CONTAINER_GRACE_S)
        sub.transition(Submission.SCORING, save=False)
        sub.worker = (self.request.hostname or "in-process")[:200]
        sub.limits = asdict(limits)
        sub.heartbeat_at = timezone.now()
        sub.save()
    try:
        inputs = inputs_for(sub.dataset, sub.split)
        images = Path(settings.QVAL_DATASETS_DIR) / f"{sub.dataset.slug}-{sub.dataset.version}" / "images"
        backbone = services.container_backbone(sub.backbone_name)
        usage: dict[str, int] = {}
        with beating(Submission.objects.filter(state=Submission.SCORING), sub.pk), qc.Job(services.container_engine()) as job:
            # a rerun, or another split of the same upload: its image is cached by the SHA-256 stored at upload
            image_id = job.load_cached(sub.sha256) or job.load(
                sub.file.path, max_archive_bytes=settings.QVAL_MAX_CONTAINER_BYTES,
                max_image_bytes=settings.QVAL_MAX_IMAGE_BYTES)
            qc.write_input(inputs, sub.split, sub.target, job.input_dir, images_from=images if images.is_dir() else None)
            if backbone is None:
                result = job.run(image_id, limits)
            else:
                spec = settings.QVAL_BACKBONES[backbone]
                budget = int(spec.get("token_budget", settings.QVAL_BACKBONE_TOKEN_BUDGET))
                with BackboneServer(served_backend(backbone), budget, socket_path=job.backbone_socket) as server:
                    result = job.run(image_id, limits, backbone=backbone)
                usage = server.usage.as_dict()
    except services.SubmissionRejected as exc:  # accepted at upload; the backbone is no longer configured
        return fail(sub.pk, f"cannot run: {exc.message}", Submission.FAULT_SYSTEM)
    except qc.ArchiveRejected as exc:  # passed the upload check; a changed cap or engine refused it
        return fail(sub.pk, f"invalid container archive: {exc}", Submission.FAULT_USER)
    except Exception:  # noqa: BLE001 - engine missing, mount refused, database: ours
        log.exception("running container submission %s failed", sub.pk)
        return fail(sub.pk, INTERNAL_ERROR.format(doing="running the container"), Submission.FAULT_SYSTEM)
    return score_container_run(sub, result, usage)


@shared_task(name="workers.tasks.score_remote_run", acks_late=True)
def score_remote_run(submission_id: int) -> str:
    """Score the run a remote gpu worker posted (:func:`workers.jobs.accept_result`); return the final state."""
    sub = Submission.objects.select_related("dataset").get(pk=submission_id)
    if sub.state != Submission.SCORING:
        log.info("submission %s is %s; nothing to score", sub.pk, sub.state)
        return sub.state
    outcome = sub.container_outcome
    predictions = None
    if sub.predictions:  # as posted; stored again below once scored, like a local run's
        with sub.predictions.open("rb") as fh:
            predictions = fh.read()
        sub.predictions.delete(save=False)
    result = qc.RunResult(error=None if outcome == "finished" else outcome, exit_code=sub.exit_code,
                          wall_s=sub.wall_s or 0.0, stdout=sub.stdout, stderr=sub.stderr,
                          predictions=predictions if outcome == "finished" else None, metadata=None)
    return score_container_run(sub, result, sub.token_usage)


def score_container_run(sub: Submission, result: qc.RunResult, usage: dict[str, int]) -> str:
    """Score what a container run wrote, store its outcome and logs, finish or fail it; return the state."""
    try:
        truth = truth_for(sub.dataset, sub.split, sub.target)
        evaluation = qc.evaluate(result, truth, bootstrap_resamples=settings.QVAL_BOOTSTRAP_RESAMPLES)
    except Exception:  # noqa: BLE001 - database, labels: ours
        log.exception("scoring container submission %s failed", sub.pk)
        return fail(sub.pk, INTERNAL_ERROR.format(doing="scoring the container's predictions"), Submission.FAULT_SYSTEM)
    run = result_fields(evaluation)
    run["token_usage"] = usage
    if evaluation.outcome == "failed":
        run["problems"] = [{"code": p.code, "message": p.message, "rows": list(p.rows)} for p in evaluation.problems]
        return fail(sub.pk, evaluation.error or "failed", Submission.FAULT_USER, **run)
    if evaluation.coverage is not None:
        cov = evaluation.coverage
        run["coverage"] = {"expected": cov.expected, "provided": cov.provided, "missing": cov.missing,
                           "missing_examples": list(cov.missing_examples)}
    # Kept as scored, so the submission can be compared like an uploaded file.
    run["predictions"] = default_storage.save(
        f"predictions/{timezone.now():%Y/%m}/{sub.pk}-predictions.jsonl", ContentFile(evaluation.run.predictions or b""))
    return store_results(sub.pk, evaluation.rows, **run)


@shared_task(bind=True, name="workers.tasks.run_baseline_submission", acks_late=True)
def run_baseline_submission(self, submission_id: int) -> str:  # type: ignore[no-untyped-def]
    """Run a queued baseline submission (:func:`submissions.baselines.run_baseline`); return its final state.

    A redelivery (the worker died) resumes it from the response cache.
    """
    return baselines.run_baseline(submission_id, self.request.hostname or "in-process", vllm_manager())


_VLLM: VLLMManager | None = None


def vllm_manager() -> VLLMManager:
    """This worker process's manager of ``vllm serve`` processes (``QVAL_VLLM_EXECUTABLE``)."""
    global _VLLM
    if _VLLM is None:
        _VLLM = VLLMManager(baselines.vllm_command(), log_dir=Path(settings.QVAL_DATA_DIR) / "logs",
                            startup_timeout_s=settings.QVAL_VLLM_STARTUP_S)
    return _VLLM


@worker_process_shutdown.connect
@worker_shutdown.connect
def stop_vllm_servers(**kwargs: Any) -> None:
    """Stop the ``vllm serve`` processes this worker process started."""
    if _VLLM is not None:
        _VLLM.stop_all()


_BACKENDS: dict[str, Backend] = {}


def served_backend(name: str) -> Backend:
    """The backend of ``QVAL_BACKBONES[name]``, loaded once per worker process (a model is large).

    A ``kind: vllm`` entry is the worker's ``vllm serve`` process (started, or restarted, on demand by
    :func:`vllm_manager`), forwarded to as an upstream server.
    """
    entry = settings.QVAL_BACKBONES[name]
    if entry.get("kind") == "vllm":
        serve = ServeSpec.from_setting(name, entry)
        server = vllm_manager().ensure(serve)
        return UpstreamBackend(f"http://{server.host}:{server.port}", serve.served_model_name, name=name)
    if name not in _BACKENDS:
        _BACKENDS[name] = backend_from_spec(name, settings.QVAL_BACKBONES[name])
    return _BACKENDS[name]


def result_fields(evaluation: qc.Evaluation) -> dict[str, Any]:
    """The submission fields recording how a container run ended (PostgreSQL text holds no NUL)."""
    run = evaluation.run
    return {
        "container_outcome": (run.error or "finished")[:500],
        "exit_code": run.exit_code,
        "wall_s": run.wall_s,
        "stdout": run.stdout.replace("\x00", "\ufffd"),
        "stderr": run.stderr.replace("\x00", "\ufffd"),
    }


def store_results(submission_id: int, rows: list[MetricRow], **fields: Any) -> str:
    """Replace a scored submission's results with ``rows``, set ``fields`` on it, link its method
    and backbone and finish it, in one transaction; return its final state.

    On a hidden split only what :func:`qval.scoring.disclose` lets a user see is stored, and a
    user's submission takes its step on its account's ladder (:func:`submissions.ladder.climb`,
    decided once: re-scoring keeps it) under the account's row lock, taken before the submission's.

    A submission that is no longer being scored (the reaper failed it meanwhile) keeps its state
    and gets no results.
    """
    with transaction.atomic():
        sub = Submission.objects.select_related("user").get(pk=submission_id)
        laddered = ladder.on_ladder(sub)
        if laddered:
            services.lock_account(sub.user)
        sub = Submission.objects.select_for_update().get(pk=submission_id)
        if sub.state != Submission.SCORING:
            log.warning("submission %s became %s while it was scored; results dropped", sub.pk, sub.state)
            return sub.state
        rows = disclose(rows, hidden=sub.split not in PUBLIC_SPLITS)
        for name, value in fields.items():
            setattr(sub, name, value)
        if laddered and sub.ladder_climbed is None:
            # Before the results are written: that write waits for every other finishing job
            # (the results version's row), the account's lock only for this account's.
            ladder.climb(sub, rows)
        Result.objects.filter(submission=sub).delete()
        Result.objects.bulk_create(
            Result(
                submission=sub,
                metric=r.metric,
                value=r.value,
                p_value=r.p_value,
                num_points=r.num_points,
                num_dropped=r.num_dropped,
                coverage=r.coverage,
                insufficient=r.insufficient,
                details=r.details,
            )
            for r in rows
        )
        sub.method = Method.objects.get_or_create(name=sub.method_name)[0]
        sub.backbone = Backbone.objects.get_or_create(name=sub.backbone_name)[0] if sub.backbone_name else None
        sub.transition(Submission.FINISHED)
    log.info("submission %s finished with %d metrics", submission_id, len(rows))
    return Submission.FINISHED


def fail(submission_id: int, reason: str, fault: str, **fields: Any) -> str:
    """Set ``fields`` on a submission and fail it with ``reason``; return its final state.

    One already final (the reaper failed it meanwhile) is left as it is.
    """
    with transaction.atomic():
        sub = Submission.objects.select_for_update().get(pk=submission_id)
        if sub.is_final:
            log.warning("submission %s is already %s; not failing it with %r", sub.pk, sub.state, reason)
            return sub.state
        for name, value in fields.items():
            setattr(sub, name, value)
        sub.transition(Submission.FAILED, error=reason, fault=fault)
    return Submission.FAILED


@shared_task(name="workers.tasks.reap_overdue_submissions")
def reap_overdue_submissions() -> list[int]:
    """Fail the submissions whose deadline passed (:func:`submissions.services.reap_overdue`)."""
    reaped = services.reap_overdue()
    if reaped:
        log.warning("reaped %d overdue submissions: %s", len(reaped), reaped)
    return reaped


@shared_task(name="workers.tasks.reap_stale_jobs")
def reap_stale_jobs() -> list[int]:
    """Requeue once, or fail, the jobs whose worker stopped sending heartbeats (:func:`workers.jobs.reap_stale`);
    send again the messages that never reached the broker (:func:`workers.jobs.resend_unsent`)."""
    reaped = jobs.reap_stale()
    if reaped:
        log.warning("%d jobs lost their worker (requeued once, then failed): %s", len(reaped), reaped)
    resent = jobs.resend_unsent()
    if resent:
        log.warning("%d submissions sent again (their message never reached the broker): %s", len(resent), resent)
    return reaped


_heartbeat_stop = threading.Event()


@worker_ready.connect
def start_worker_heartbeats(sender: Any, **kwargs: Any) -> None:
    """Register this worker and send its heartbeats for the status page (:func:`workers.jobs.local_heartbeats`)."""
    queues = ",".join(sorted(sender.app.amqp.queues.consume_from or {}))
    threading.Thread(target=jobs.local_heartbeats, args=(sender.hostname, queues, _heartbeat_stop),
                     name="worker-heartbeat", daemon=True).start()


@worker_shutting_down.connect
def stop_worker_heartbeats(**kwargs: Any) -> None:
    _heartbeat_stop.set()


@celeryd_after_setup.connect
def sweep_container_jobs(sender: str, instance: Any, **kwargs: Any) -> None:
    """At the start of a worker consuming ``gpu``, before it takes a job: remove the containers,
    job directories and mounts a killed worker left (:func:`qval.containers.sweep`)."""
    if "gpu" not in instance.app.amqp.queues.consume_from:
        return
    removed = qc.sweep(services.container_engine())
    log.info("worker %s swept %d leftovers of method-container jobs: %s", sender, len(removed), removed)

"""Celery tasks.

* ``validate_upload`` (queue ``scoring``) parses and validates an uploaded predictions file and
  queues it; ``inspect_container_upload`` (queue ``containers``) checks an uploaded image archive and
  queues its submissions -- the web request only stores the upload;
* ``score_submission`` (queue ``scoring``) scores an uploaded predictions file;
* ``run_container_submission`` (queue ``containers``, a user's job: a worker of its own, never behind the
  platform's runs on ``gpu``; run those workers with ``--concurrency 1``) runs a method container on the split's inputs -- serving the backbone it asked for on the job's socket
  with the per-job token budget (:mod:`qval.backbone`) -- and scores what it wrote;
* ``run_baseline_submission`` (queue ``gpu``; ``scoring`` for a method that needs no model,
  :func:`submissions.lifecycle.job_queue`) runs a built-in method for a baseline submission
  (:func:`submissions.baselines.run_baseline`), serving its LLM backbone through the worker's
  :class:`qval.vllm.VLLMManager` (started on first use, reused across jobs, stopped when the
  worker process shuts down);
* ``score_remote_run`` (queue ``scoring``) scores the run a remote gpu worker posted (a container's, or a GPU
  campaign's baseline run: :func:`submissions.baselines.finish_remote_baseline`)
  (:mod:`workers.jobs`, :mod:`qval.remote_worker`).

Their reaper is every job's (``jobs.tasks.reap_jobs``): it fails submissions whose deadline passed and requeues
once, then fails, jobs whose worker stopped sending heartbeats.

A job's lifecycle is :mod:`submissions.lifecycle`: each job task gets the submission id and the attempt its
message was sent for, claims it (:func:`submissions.lifecycle.claim`: a delivery for a final submission or
an older attempt does nothing), stamps its heartbeat while it runs, and ends through
:func:`submissions.lifecycle.finish` or :func:`~submissions.lifecycle.fail`, so a finished submission looks
the same whichever kind it is and is never scored twice. Failures through the platform's fault are marked
so they do not count towards the user's quota. Each worker process registers itself for the status page
when it is ready.
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
from pathlib import Path
from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_process_shutdown, worker_ready, worker_shutdown, worker_shutting_down
from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.utils import timezone

from leaderboard.loading import inputs_for, truth_for
from qval import containers as qc
from qval.envs.terminalbench.adapter import sweep_leftovers
from qval.backbone import Backend, Backends
from qval.vllm import VLLMManager
from submissions import baselines, ladder, lifecycle, scoring, services
from submissions.models import Submission
from workers import jobs

log = logging.getLogger(__name__)


@shared_task(name="workers.tasks.validate_upload", acks_late=True)
def validate_upload(submission_id: int) -> str:
    """Check a received predictions file (:func:`submissions.services.validate_submission`)."""
    return services.validate_submission(submission_id)


@shared_task(name="workers.tasks.inspect_container_upload", acks_late=True)
def inspect_container_upload(submission_ids: list[int]) -> list[str]:
    """Check the archive of received container submissions (:func:`submissions.services.inspect_archive`)."""
    return services.inspect_archive(submission_ids)


@shared_task(bind=True, name="workers.tasks.score_submission", acks_late=True)
def score_submission(self, submission_id: int, attempt: int | None = None) -> str:  # type: ignore[no-untyped-def]
    """Score attempt ``attempt`` of a queued predictions file (:func:`submissions.scoring.score_file`)."""
    return scoring.score_file(submission_id, attempt, self.request.hostname or "in-process")


@shared_task(bind=True, name="workers.tasks.run_container_submission", acks_late=True)
def run_container_submission(self, submission_id: int, attempt: int | None = None) -> str:  # type: ignore[no-untyped-def]
    """Run attempt ``attempt`` of a queued container submission in the sandbox, score its predictions; return
    its state (:func:`workers.jobs.start_container` at its claim)."""
    sub = lifecycle.claim(submission_id, attempt, self.request.hostname or "in-process",
                          kinds={Submission.KIND_CONTAINER}, start=jobs.start_container)
    if sub is None:
        return Submission.objects.get(pk=submission_id).state
    try:
        inputs = inputs_for(sub.dataset, sub.split)
        images = Path(settings.QVAL_DATASETS_DIR) / f"{sub.dataset.slug}-{sub.dataset.version}" / "images"
        backbone = services.container_backbone(sub.backbone_name)
        with lifecycle.beating(sub):  # a model's load, or a vllm server's start, is part of the job
            served = None if backbone is None else qc.ServedBackbone(
                backbone, served_backend(backbone),
                int(settings.QVAL_BACKBONES[backbone].get("token_budget", settings.QVAL_BACKBONE_TOKEN_BUDGET)))
            result, usage = qc.run_method_container(
                services.container_engine(), sub.sha256, lambda _job_dir: Path(sub.file.path),
                lambda input_dir: qc.write_input(inputs, sub.split, sub.target, input_dir,
                                                 images_from=images if images.is_dir() else None),
                qc.Limits(**sub.limits), served, max_archive_bytes=settings.QVAL_MAX_CONTAINER_BYTES,
                max_image_bytes=settings.QVAL_MAX_IMAGE_BYTES)
    except services.SubmissionRejected as exc:  # accepted at upload; the backbone is no longer configured
        return lifecycle.fail(sub.pk, f"cannot run: {exc.message}", Submission.FAULT_SYSTEM, sub.attempt)
    except qc.ArchiveRejected as exc:  # passed the upload check; a changed cap or engine refused it
        return lifecycle.fail(sub.pk, f"invalid container archive: {exc}", Submission.FAULT_USER, sub.attempt)
    except Exception:  # noqa: BLE001 - engine missing, mount refused, database: ours
        log.exception("running container submission %s failed", sub.pk)
        return lifecycle.fail(sub.pk, lifecycle.INTERNAL_ERROR.format(doing="running the container"),
                              Submission.FAULT_SYSTEM, sub.attempt)
    return score_container_run(sub, result, usage)


@shared_task(name="workers.tasks.score_remote_run", acks_late=True)
def score_remote_run(submission_id: int, attempt: int | None = None) -> str:
    """Score the run a remote gpu worker posted for attempt ``attempt`` (:func:`workers.jobs.accept_result`);
    return the state. A delivery for a submission no longer running that attempt does nothing."""
    sub = Submission.objects.select_related("dataset").get(pk=submission_id)
    if sub.state != Submission.SCORING or (attempt is not None and attempt != sub.attempt):
        log.info("submission %s is %s at attempt %s: delivery of attempt %s ignored", sub.pk, sub.state,
                 sub.attempt, attempt)
        return sub.state
    if sub.kind == Submission.KIND_BASELINE:  # a GPU campaign's run
        return baselines.finish_remote_baseline(sub)
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
        return lifecycle.fail(sub.pk, lifecycle.INTERNAL_ERROR.format(doing="scoring the container's predictions"),
                              Submission.FAULT_SYSTEM, sub.attempt)
    run = result_fields(evaluation)
    run["token_usage"] = usage
    if evaluation.outcome == "failed":
        run["problems"] = [{"code": p.code, "message": p.message, "rows": list(p.rows)} for p in evaluation.problems]
        return lifecycle.fail(sub.pk, evaluation.error or "failed", Submission.FAULT_USER, sub.attempt, **run)
    if evaluation.coverage is not None:
        cov = evaluation.coverage
        run["coverage"] = {"expected": cov.expected, "provided": cov.provided, "missing": cov.missing,
                           "missing_examples": list(cov.missing_examples)}
    # Kept as scored, so the submission can be compared like an uploaded file.
    run["predictions"] = default_storage.save(
        f"predictions/{timezone.now():%Y/%m}/{sub.pk}-predictions.jsonl", ContentFile(evaluation.run.predictions or b""))
    scored = ladder.Scored(truth, evaluation.preds) if evaluation.preds is not None else None
    return lifecycle.finish(sub.pk, evaluation.rows, sub.attempt, scored=scored, **run)


@shared_task(bind=True, name="workers.tasks.run_baseline_submission", acks_late=True)
def run_baseline_submission(self, submission_id: int, attempt: int | None = None) -> str:  # type: ignore[no-untyped-def]
    """Run attempt ``attempt`` of a queued baseline submission (:func:`submissions.baselines.run_baseline`); return
    its state. A requeued run resumes from the response cache."""
    return baselines.run_baseline(submission_id, attempt, self.request.hostname or "in-process", vllm_manager())


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


_BACKENDS: Backends | None = None


def served_backend(name: str) -> Backend:
    """The backend of ``QVAL_BACKBONES[name]`` (:class:`qval.backbone.Backends`: loaded once per worker
    process, a model is large; a ``kind: vllm`` entry is the worker's ``vllm serve`` process, started, or
    restarted, on demand by :func:`vllm_manager`)."""
    global _BACKENDS
    if _BACKENDS is None:
        _BACKENDS = Backends(vllm_manager())
    return _BACKENDS.get(name, settings.QVAL_BACKBONES[name])


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
    """At the start of a worker consuming ``containers``, before it takes a job: remove the containers,
    job directories and mounts a killed worker left (:func:`qval.containers.sweep`; not a ``gpu`` worker's: the
    method containers it would sweep may be a running ``containers`` worker's); at the start of one
    consuming ``gpu`` or ``datasets`` (which play TerminalBench-lite): the terminal sandbox containers and
    episode folders older than a command can live (:func:`qval.envs.terminalbench.adapter.sweep_leftovers`)."""
    queues = instance.app.amqp.queues.consume_from
    if lifecycle.CONTAINER_QUEUE in queues:
        removed = qc.sweep(services.container_engine())
        log.info("worker %s swept %d leftovers of method-container jobs: %s", sender, len(removed), removed)
    if "gpu" in queues or "datasets" in queues:
        removed = sweep_leftovers(qc.Engine.from_env())
        log.info("worker %s swept %d leftovers of terminal sandboxes: %s", sender, len(removed), removed)

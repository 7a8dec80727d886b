"""Creating submissions: argument checks, quota, storage, validation, queueing.

The web form and the API both call :func:`create_submission` (a predictions file) or
:func:`create_container_submissions` (a method container), so both give the same errors.
Problems with the request itself (unknown dataset, split, target; quota exceeded) raise
:class:`SubmissionRejected` and create nothing. Problems with the file create a submission
that ends ``failed`` with every problem listed, and touch nothing else.

A container upload may name several datasets and splits: it becomes one submission per
(dataset, split), all sharing the one stored archive, each queued on its own and ending on
its own. :func:`reap_overdue` fails container submissions whose deadline passed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from leaderboard.loading import split_index
from leaderboard.models import MODALITY_CHOICES, Dataset
from qval import containers as qc
from qval import predictions as qpred
from qval.schema import TARGETS

from .models import Submission


class SubmissionRejected(ValueError):
    """The request cannot become a submission; ``field`` names the offending input."""

    def __init__(self, field: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.status = status


@dataclass(frozen=True)
class SubmissionRequest:
    """What a user asks to have scored."""

    dataset: str
    split: str
    target: str
    method_name: str
    backbone: str = ""
    modality: str = "text"


def resolve_dataset(key: str) -> Dataset:
    """A dataset by ``slug@version`` or by ``slug`` (its newest version)."""
    ds = Dataset.lookup(key)
    if ds is None:
        known = ", ".join(sorted({d.key for d in Dataset.objects.all()})) or "none loaded"
        raise SubmissionRejected("dataset", f"unknown dataset {key!r}; available: {known}", status=404)
    return ds


def quota_used(user, now=None) -> int:  # type: ignore[no-untyped-def]
    """Test-split submissions of ``user`` in the last 24 hours that count towards the quota.

    Submissions that failed through the platform's fault do not count.
    """
    now = now or timezone.now()
    return (
        Submission.objects.filter(user=user, split="test", received_at__gte=now - timedelta(days=1))
        .exclude(Q(state=Submission.FAILED) & Q(fault=Submission.FAULT_SYSTEM))
        .count()
    )


def check_request(user, req: SubmissionRequest, quota_needed: int = 1) -> Dataset:  # type: ignore[no-untyped-def]
    """Validate the request's fields and the quota; return the dataset.

    ``quota_needed``: how many test-split submissions the whole request creates (a container
    upload naming several test datasets needs one each).
    """
    dataset = resolve_dataset(req.dataset)
    splits = set(dataset.states.values_list("split", flat=True).distinct())
    if req.split not in splits:
        raise SubmissionRejected("split", f"dataset {dataset.key} has no split {req.split!r}; choose one of {sorted(splits)}")
    if req.target not in TARGETS:
        raise SubmissionRejected("target", f"unknown target {req.target!r}; choose one of {list(TARGETS)}")
    if req.modality not in {m for m, _ in MODALITY_CHOICES}:
        raise SubmissionRejected("modality", f"unknown modality {req.modality!r}; choose text or image")
    if not req.method_name.strip():
        raise SubmissionRejected("method_name", "method_name is required")
    if len(req.method_name) > 100:
        raise SubmissionRejected("method_name", "method_name is longer than 100 characters")
    if req.split == "test":
        limit = settings.QVAL_TEST_QUOTA_PER_DAY
        used = quota_used(user)
        if used + quota_needed > limit:
            asking = f"; this request needs {quota_needed}" if quota_needed > 1 else ""
            raise SubmissionRejected(
                "split",
                f"daily test-split quota reached: {used} of {limit} submissions in the last 24 hours{asking}; "
                "use the dev split (unlimited) or try again later",
                status=429,
            )
    return dataset


def _sha256(upload: UploadedFile) -> str:
    """The hex SHA-256 of an uploaded file, read in chunks and rewound."""
    digest = hashlib.sha256()
    for chunk in upload.chunks():
        digest.update(chunk)
    upload.seek(0)
    return digest.hexdigest()


def _validating_submission(user, req: SubmissionRequest, dataset: Dataset, upload: UploadedFile,  # type: ignore[no-untyped-def]
                           **fields: str) -> Submission:
    """A new submission of ``req`` on ``dataset`` for ``upload`` (with ``fields``), moved to ``validating``."""
    sub = Submission.objects.create(
        user=user,
        dataset=dataset,
        split=req.split,
        target=req.target,
        method_name=req.method_name.strip(),
        backbone_name=req.backbone.strip(),
        modality=req.modality,
        filename=(upload.name or "upload")[:255],
        size_bytes=upload.size or 0,
        **fields,
    )
    sub.transition(Submission.VALIDATING)
    return sub


def create_submission(user, req: SubmissionRequest, upload: UploadedFile) -> Submission:  # type: ignore[no-untyped-def]
    """Store, validate and queue an uploaded predictions file; return its submission.

    Raises :class:`SubmissionRejected` for a bad request. A bad file gives a ``failed``
    submission whose ``problems`` list every issue found.
    """
    sub = _validating_submission(user, req, check_request(user, req), upload)
    limit = settings.QVAL_MAX_UPLOAD_BYTES
    if (upload.size or 0) > limit:
        _fail_validation(
            sub,
            [qpred.Problem("too_large", f"the file is {upload.size / 2**20:.1f} MiB; the limit is {limit / 2**20:.0f} MiB")],
        )
        return sub
    sub.sha256 = _sha256(upload)
    sub.file.save(f"{sub.pk}-{sub.sha256[:12]}.upload", upload, save=False)
    sub.save()
    try:
        index = split_index(sub.dataset, req.split, req.target)
        preds, coverage = qpred.parse_and_validate(sub.file.path, sub.filename, index, max_bytes=limit)
    except qpred.ValidationFailed as exc:
        _fail_validation(sub, exc.problems)
        return sub
    sub.file_format = preds.format
    sub.coverage = {
        "expected": coverage.expected,
        "provided": coverage.provided,
        "missing": coverage.missing,
        "missing_examples": list(coverage.missing_examples),
        "rows": preds.num_rows,
    }
    sub.transition(Submission.QUEUED)
    from workers.tasks import score_submission  # the worker module imports this one

    transaction.on_commit(lambda: score_submission.delay(sub.pk))
    return sub


def _fail_validation(sub: Submission, problems: list[qpred.Problem]) -> None:
    sub.problems = [{"code": p.code, "message": p.message, "rows": list(p.rows)} for p in problems]
    summary = "; ".join(p.message for p in problems[:3])
    if len(problems) > 3:
        summary += f"; and {len(problems) - 3} more problem(s)"
    sub.transition(Submission.FAILED, error=f"invalid predictions file: {summary}", fault=Submission.FAULT_USER)


# -- method containers -------------------------------------------------------------------
CONTAINER_FORMAT = "image-archive"
QUEUE_DEADLINE_REASON = "timed out in the queue (deadline passed): no gpu worker started it in time"
WORKER_DEADLINE_REASON = "timed out in the worker (deadline passed): the worker running it stopped or hung"


def container_engine() -> qc.Engine:
    """The container engine and job directory root from the settings."""
    return qc.Engine(
        kind=settings.QVAL_CONTAINER_ENGINE,
        conf=Path(settings.QVAL_CONTAINERS_CONF),
        work_root=Path(settings.QVAL_CONTAINER_WORK_ROOT),
    )


def container_limits(dataset: Dataset) -> qc.Limits:
    """``QVAL_CONTAINER_LIMITS`` with the dataset's ``QVAL_CONTAINER_LIMITS_BY_DATASET`` overrides."""
    overrides = settings.QVAL_CONTAINER_LIMITS_BY_DATASET.get(dataset.slug, {})
    return qc.Limits(**{**settings.QVAL_CONTAINER_LIMITS, **overrides})


def container_requests(datasets: Sequence[str], splits: Sequence[str], **fields: str) -> list[SubmissionRequest]:
    """One request per (dataset, split), in the order given; each of ``datasets``/``splits`` may
    also be a comma-separated list. Repeated names count once."""

    def names(values: Sequence[str]) -> list[str]:
        out: list[str] = []
        for value in values:
            out += [n.strip() for n in value.split(",") if n.strip() and n.strip() not in out]
        return out

    ds_names, split_names = names(datasets), names(splits)
    if not ds_names:
        raise SubmissionRejected("dataset", "name at least one dataset")
    if not split_names:
        raise SubmissionRejected("split", "name at least one split")
    return [SubmissionRequest(dataset=d, split=sp, **fields) for d in ds_names for sp in split_names]


NO_BACKBONE = frozenset({"", "none"})
"""Backbone names that mean "no model" (a container gets no socket)."""


def container_backbone(name: str) -> str | None:
    """The served backbone a container submission asked for (None: none); raises for one not served."""
    name = name.strip()
    if name.lower() in NO_BACKBONE:
        return None
    served = sorted(settings.QVAL_BACKBONES)
    if name not in served:
        choices = f"choose one of {served} or 'none'" if served else "this site serves no backbone; use 'none'"
        raise SubmissionRejected("backbone", f"backbone {name!r} is not served to containers here; {choices}")
    return name


def create_container_submissions(user, reqs: Sequence[SubmissionRequest], upload: UploadedFile) -> list[Submission]:  # type: ignore[no-untyped-def]
    """Store and check an uploaded image archive and queue one submission per request.

    Every request is checked first (the test-split quota against all of them together), so a
    bad request creates nothing. The archive is stored once and shared. An archive over
    ``QVAL_MAX_CONTAINER_BYTES`` or one :func:`qval.containers.sanitize_archive` refuses fails
    every submission with the problem listed; otherwise each is queued on ``gpu`` with a
    deadline ``QVAL_CONTAINER_QUEUE_S`` away.
    """
    unique, seen = [], set()
    for req in reqs:  # "frozenlake-8x8" and "frozenlake-8x8@1.0" may name the same dataset
        pair = (resolve_dataset(req.dataset).pk, req.split)
        if pair not in seen:
            seen.add(pair)
            unique.append(req)
    reqs = unique
    test_count = sum(1 for r in reqs if r.split == "test")
    datasets = [check_request(user, r, quota_needed=max(test_count, 1)) for r in reqs]
    for req in reqs:
        container_backbone(req.backbone)
    subs = []
    for req, dataset in zip(reqs, datasets):
        subs.append(_validating_submission(user, req, dataset, upload, kind=Submission.KIND_CONTAINER,
                                           file_format=CONTAINER_FORMAT))
    limit = settings.QVAL_MAX_CONTAINER_BYTES
    if (upload.size or 0) > limit:
        problem = qpred.Problem(
            "too_large", f"the archive is {upload.size / 2**20:.1f} MiB; the limit is {limit / 2**20:.0f} MiB")
        for sub in subs:
            _fail_archive(sub, problem)
        return subs
    sha256 = _sha256(upload)
    first = subs[0]
    first.file.save(f"{first.pk}-{sha256[:12]}.image", upload, save=False)
    try:
        # Reading the whole archive is the check; the tag-free copy is only wanted by a job.
        image_id = qc.sanitize_archive(Path(first.file.path), Path(os.devnull), max_archive_bytes=limit,
                                       max_image_bytes=settings.QVAL_MAX_IMAGE_BYTES)
    except qc.ArchiveRejected as exc:
        image_id, problem = "", qpred.Problem("archive_rejected", str(exc))
    else:
        problem = None
    from workers.tasks import run_container_submission  # the worker module imports this one

    for sub in subs:
        sub.file.name = first.file.name
        sub.sha256 = sha256
        if problem is not None:
            _fail_archive(sub, problem)
            continue
        sub.image_id = image_id
        sub.deadline = timezone.now() + timedelta(seconds=settings.QVAL_CONTAINER_QUEUE_S)
        sub.transition(Submission.QUEUED)
        transaction.on_commit(lambda pk=sub.pk: run_container_submission.delay(pk))
    return subs


def _fail_archive(sub: Submission, problem: qpred.Problem) -> None:
    sub.problems = [{"code": problem.code, "message": problem.message, "rows": []}]
    sub.transition(Submission.FAILED, error=f"invalid container archive: {problem.message}", fault=Submission.FAULT_USER)


def reap_overdue(now: datetime | None = None) -> list[int]:
    """Fail every unfinished submission whose deadline passed; return their ids.

    A queued one timed out in the queue, one being run in the worker (a worker that died or
    hung); either way the platform is at fault, so it does not count towards the quota.
    """
    now = now or timezone.now()
    reaped = []
    overdue = Submission.objects.filter(deadline__lt=now).exclude(state__in=Submission.FINAL_STATES)
    for pk in overdue.values_list("pk", flat=True):
        with transaction.atomic():
            sub = Submission.objects.select_for_update().get(pk=pk)
            if sub.is_final or sub.deadline is None or sub.deadline >= now:
                continue  # finished (or re-deadlined) meanwhile
            reason = WORKER_DEADLINE_REASON if sub.state == Submission.SCORING else QUEUE_DEADLINE_REASON
            sub.transition(Submission.FAILED, error=reason, fault=Submission.FAULT_SYSTEM)
            reaped.append(pk)
    return reaped

"""Creating submissions: argument checks, quota, storage, validation, queueing.

The web form and the API both call :func:`create_submission`, so both give the same
errors. Problems with the request itself (unknown dataset, split, target; quota exceeded)
raise :class:`SubmissionRejected` and create nothing. Problems with the file create a
submission that ends ``failed`` with every problem listed, and touch nothing else.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from leaderboard.loading import split_index
from leaderboard.models import MODALITY_CHOICES, Dataset
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


def check_request(user, req: SubmissionRequest) -> Dataset:  # type: ignore[no-untyped-def]
    """Validate the request's fields and the quota; return the dataset."""
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
        if used >= limit:
            raise SubmissionRejected(
                "split",
                f"daily test-split quota reached: {used} of {limit} submissions in the last 24 hours; "
                "use the dev split (unlimited) or try again later",
                status=429,
            )
    return dataset


def create_submission(user, req: SubmissionRequest, upload: UploadedFile) -> Submission:  # type: ignore[no-untyped-def]
    """Store, validate and queue an uploaded predictions file; return its submission.

    Raises :class:`SubmissionRejected` for a bad request. A bad file gives a ``failed``
    submission whose ``problems`` list every issue found.
    """
    dataset = check_request(user, req)
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
    )
    sub.transition(Submission.VALIDATING)
    limit = settings.QVAL_MAX_UPLOAD_BYTES
    if (upload.size or 0) > limit:
        _fail_validation(
            sub,
            [qpred.Problem("too_large", f"the file is {upload.size / 2**20:.1f} MiB; the limit is {limit / 2**20:.0f} MiB")],
        )
        return sub
    digest = hashlib.sha256()
    for chunk in upload.chunks():
        digest.update(chunk)
    upload.seek(0)
    sub.sha256 = digest.hexdigest()
    sub.file.save(f"{sub.pk}-{sub.sha256[:12]}.upload", upload, save=False)
    sub.save()
    try:
        index = split_index(dataset, req.split, req.target)
        preds = qpred.parse(sub.file.path, sub.filename, max_bytes=limit, reference_ids=index.expected_ids)
        coverage = qpred.validate(preds, index)
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

"""Celery tasks. ``score_submission`` runs on the ``scoring`` queue.

The task is idempotent: it reads the stored file and the labels, computes every metric and
replaces the submission's results in one transaction, so a redelivered or repeated task
stores the same results. Failures are recorded on the submission with a reason; failures
through the platform's fault are marked so they do not count towards the user's quota.
Labels never appear in anything this module logs or stores on the submission.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import transaction

from leaderboard.loading import truth_for
from leaderboard.models import Backbone, Method
from qval import predictions as qpred
from qval.scoring import score
from submissions.models import Result, Submission

log = logging.getLogger(__name__)


@shared_task(bind=True, name="workers.tasks.score_submission", acks_late=True)
def score_submission(self, submission_id: int) -> str:  # type: ignore[no-untyped-def]
    """Score one queued submission; return its final state."""
    with transaction.atomic():
        sub = Submission.objects.select_for_update().select_related("dataset").get(pk=submission_id)
        if sub.state not in (Submission.QUEUED, Submission.SCORING, Submission.FINISHED):
            log.info("submission %s is %s; nothing to score", sub.pk, sub.state)
            return sub.state
        sub.transition(Submission.SCORING, save=False)
        sub.worker = (self.request.hostname or "in-process")[:200]
        sub.save()
    try:
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
        _fail(sub.pk, f"invalid predictions file: {exc}", Submission.FAULT_USER)
        return Submission.FAILED
    except Exception:  # noqa: BLE001 - any other error is ours; the user gets a generic reason
        log.exception("scoring submission %s failed", sub.pk)
        _fail(
            sub.pk,
            "internal error while scoring; the maintainers have been notified and this "
            "submission does not count towards your quota",
            Submission.FAULT_SYSTEM,
        )
        return Submission.FAILED
    with transaction.atomic():
        sub = Submission.objects.select_for_update().get(pk=submission_id)
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


def _fail(submission_id: int, reason: str, fault: str) -> None:
    with transaction.atomic():
        sub = Submission.objects.select_for_update().get(pk=submission_id)
        sub.transition(Submission.FAILED, error=reason, fault=fault)

"""Scoring an uploaded predictions file: the job of a ``file`` submission (``workers.tasks.score_submission``),
claimed, run and ended through :mod:`submissions.lifecycle`."""

from __future__ import annotations

import logging

from django.conf import settings

from leaderboard.loading import truth_for
from qval import predictions as qpred
from qval.scoring import score

from . import lifecycle
from .models import Submission

log = logging.getLogger(__name__)


def score_file(pk: int, attempt: int | None, worker: str) -> str:
    """Score attempt ``attempt`` of the queued predictions file ``pk`` on ``worker``; return its state.

    A delivery after the worker scoring it died scores it again until its deadline (``QVAL_SCORING_S`` after it
    was queued); past that it fails, so a file that kills the worker is not redelivered for ever. A delivery for
    a submission already final, or for an older attempt, does nothing (:func:`submissions.lifecycle.claim`).
    """
    sub = lifecycle.claim(pk, attempt, worker, kinds={Submission.KIND_FILE})
    if sub is None:
        return Submission.objects.get(pk=pk).state
    try:
        with lifecycle.beating(sub):
            truth = truth_for(sub.dataset, sub.split, sub.target)
            preds = qpred.parse(sub.file.path, sub.filename, reference_ids=truth.point_ids)
            rows = score(truth, preds.ids, preds.scores, samples=preds.samples,
                         bootstrap_resamples=settings.QVAL_BOOTSTRAP_RESAMPLES)
    except qpred.ValidationFailed as exc:
        return lifecycle.fail(pk, f"invalid predictions file: {exc}", Submission.FAULT_USER, sub.attempt)
    except Exception:  # noqa: BLE001 - any other error is ours; the user gets a generic reason
        log.exception("scoring submission %s failed", pk)
        return lifecycle.fail(pk, lifecycle.INTERNAL_ERROR.format(doing="scoring"), Submission.FAULT_SYSTEM,
                              sub.attempt)
    return lifecycle.finish(pk, rows, sub.attempt)

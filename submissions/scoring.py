"""Scoring an uploaded predictions file: the job of a ``file`` submission (``workers.tasks.score_submission``),
claimed, run and ended through :mod:`submissions.lifecycle`.

One pass per upload: the check of the upload parses the file once and keeps what the parse gives
(:func:`keep_parse`, :mod:`qval.parsed_predictions`); scoring reads that instead of the file
(:func:`submissions.comparison.scored_predictions`), loads the split's labels once, and hands both to the Ladder
(:class:`submissions.ladder.Scored`), which reads neither again."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.files.base import ContentFile

from leaderboard.loading import truth_for
from qval import parsed_predictions as kept
from qval import predictions as qpred
from qval.scoring import score

from . import ladder, lifecycle
from .comparison import scored_predictions
from .models import Submission

log = logging.getLogger(__name__)


def keep_parse(sub: Submission, preds: qpred.Predictions) -> None:
    """Keep what the check of ``sub``'s file parsed (``preds``) beside it, for its scoring (unsaved field)."""
    sub.parsed.save(f"{sub.pk}-{sub.sha256[:12]}.arrow", ContentFile(kept.dumps(preds)), save=False)


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
            preds = scored_predictions(sub, truth)  # what its check parsed
            rows = score(truth, preds.ids, preds.scores, samples=preds.samples, codes=preds.codes(truth.index),
                         bootstrap_resamples=settings.QVAL_BOOTSTRAP_RESAMPLES)
    except qpred.ValidationFailed as exc:
        return lifecycle.fail(pk, f"invalid predictions file: {exc}", Submission.FAULT_USER, sub.attempt)
    except Exception:  # noqa: BLE001 - any other error is ours; the user gets a generic reason
        log.exception("scoring submission %s failed", pk)
        return lifecycle.fail(pk, lifecycle.INTERNAL_ERROR.format(doing="scoring"), Submission.FAULT_SYSTEM,
                              sub.attempt)
    return lifecycle.finish(pk, rows, sub.attempt, scored=ladder.Scored(truth, preds))

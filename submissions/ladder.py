"""The Ladder of the hidden test board (Blum & Hardt 2015): which score the board shows of an account.

A user's submission on a hidden split is on a ladder, one per **scope**: account, dataset
version, target and split.  When it finishes, :func:`climb` compares it with the scope's
current best under the site's release rule (:func:`qval.ladder.release`): the first submission
of a scope climbs, released as scored; a later one climbs only when it beats the best by more
than the margin (a fixed step, and a level spent over the account's attempts), and then the
board shows its score instead of the best's.  Every climb is a release: it spends from the
split's **information budget, shared by every account** (:mod:`budgets`, :mod:`qval.budget`),
and once that is spent every submission is held undecided, its score shown to nobody, until a
fresh split replaces the spent one.  One that does not climb stays off the board and its own
score is shown to nobody (:attr:`submissions.models.Submission.score_withheld`): its page says
which best the board keeps, or that the budget is spent.

Each decision is stored on the submission (``ladder_climbed``, and ``ladder_against``: the best
it was compared with) and never changes, re-scoring included.  The scope's current best is the
submission that climbed and that no later climb replaced (:func:`current_best`).  The statistics
(:func:`prepare`: a paired bootstrap against the best) are computed first, outside every lock and
transaction, from the labels and predictions the scoring read (:class:`Scored`); then :func:`climb`
decides in a short transaction of its own, before the one that finishes the submission
(:func:`submissions.lifecycle.finish`), under the account's row lock
(:func:`submissions.lifecycle.lock_account`) and then the split budget's
(:func:`budgets.services.locked`), so two submissions finishing at once are compared and
charged one after the other: they cannot both climb on the same best or spend the same number.
A best or a level changed since :func:`prepare` (another submission of the account decided
meanwhile) is compared again under the locks.

Baseline runs and training runs' published scores (the platform's), imported rows, public splits, uploaded files on an open-book
dataset (ranked nowhere) and submissions finished before the Ladder are on no ladder.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from django.db.models import QuerySet

from budgets import services as budgets
from budgets.models import Release
from leaderboard.loading import truth_for
from qval import budget as qbudget
from qval import ladder as qladder
from qval import metric_registry
from qval import predictions as qpred
from qval.schema import PUBLIC_SPLITS
from qval.scoring import MetricRow, Truth, point_scores, state_ranking_values

from .comparison import scored_predictions
from .models import Submission

log = logging.getLogger(__name__)


class _Scored(Protocol):
    metric: str
    value: float | None


def on_ladder(sub: Submission) -> bool:
    """Whether ``sub`` is on a ladder: a user's submission to a hidden split that the board may rank
    (an uploaded file on an open-book dataset is ranked nowhere: :meth:`Submission.rankable`), of an
    environment that is not open book (whose labels follow from the public inputs: there is nothing for
    a budget to protect, so a method container there shows every metric, as platform rows do)."""
    return (sub.source == Submission.SOURCE_USER and sub.user_id is not None and sub.split not in PUBLIC_SPLITS
            and not sub.dataset.environment.open_book and sub.ranked() and not sub.training_runs.exists())


def scope(sub: Submission) -> QuerySet[Submission]:
    """The submissions sharing ``sub``'s ladder: its account's rankable ones, on its dataset version,
    split and target."""
    return Submission.objects.filter(Submission.rankable(), user_id=sub.user_id, source=Submission.SOURCE_USER,
                                     dataset_id=sub.dataset_id, split=sub.split,
                                     target=sub.target).exclude(training_runs__isnull=False)


def current_best(sub: Submission) -> Submission | None:
    """The submission whose score the board shows for ``sub``'s scope (``None`` before its first):
    the one that climbed last, i.e. that no climb since replaced."""
    climbed = scope(sub).filter(ladder_climbed=True).exclude(state=Submission.FAILED).exclude(pk=sub.pk)
    replaced = climbed.exclude(ladder_against=None).values("ladder_against")
    return climbed.exclude(pk__in=replaced).order_by("-pk").first()


def board_values(rows: Iterable[_Scored]) -> dict[str, float | None]:
    """The values of :data:`qval.ladder.LADDER_METRICS` among ``rows`` (stored or disclosed results)."""
    return {r.metric: r.value for r in rows if r.metric in qladder.LADDER_METRICS}


@dataclass(frozen=True)
class Scored:
    """What a submission was just scored on: its split's labels (``truth``) and its parsed predictions
    (``preds``), handed to the Ladder so that it reads neither again."""

    truth: Truth
    preds: qpred.Predictions


def _entry(sub: Submission, truth: Truth, board: dict[str, float | None],
           preds: qpred.Predictions | None = None) -> qladder.Entry:
    """``sub`` as the Ladder sees it: the predictions it was scored on (``preds`` when the caller has them),
    per point and per state."""
    preds = preds if preds is not None else scored_predictions(sub, truth)
    codes = preds.codes(truth.index)
    return qladder.Entry(
        points=point_scores(truth, preds.ids, preds.scores, samples=preds.samples, codes=codes),
        states=state_ranking_values(truth, preds.ids, preds.scores, samples=preds.samples, codes=codes,
                                    rules=sub.rules),
        board=board,
    )


def attempt(sub: Submission) -> int:
    """Which submission of its scope ``sub`` is, counting from 1 (every earlier one, whatever became of it):
    its level under the Ladder's alpha spending (:func:`qval.ladder.z_for`)."""
    return scope(sub).filter(pk__lt=sub.pk).count() + 1


@dataclass(frozen=True)
class Prepared:
    """A Ladder step computed before its locks (:func:`prepare`): the best it was compared with (``best_id``;
    ``None``: the first of its scope), the submission's ``level`` (:func:`attempt`) and the ``decision`` of
    :func:`qval.ladder.decide`, not charged to the budget yet."""

    best_id: int | None
    level: int
    decision: qladder.Decision


def _decide(sub: Submission, rows: Iterable[_Scored], best: Submission | None, level: int,
            scored: Scored | None) -> qladder.Decision:
    """:func:`qval.ladder.decide` of ``sub`` (its released ``rows``) against ``best`` at ``level``, from ``scored``
    when given, else from the labels and predictions read here. When the best's stored predictions cannot be read
    any more, there is nothing to pair with: ``sub`` is decided as the first of its scope would be (logged)."""
    truth = scored.truth if scored is not None else truth_for(sub.dataset, sub.split, sub.target)
    new = _entry(sub, truth, board_values(rows), scored.preds if scored is not None else None)
    best_entry = None
    if best is not None:
        try:
            best_entry = _entry(best, truth, board_values(best.results.all()))
        except (OSError, ValueError, qpred.ValidationFailed):
            log.exception("ladder: the predictions of best %s cannot be read; %s is released as a first", best.pk,
                          sub.pk)
    return qladder.decide(truth.point_labels, new, best_entry, attempt=level, rules=sub.rules,
                          design=truth.design)


def prepare(sub: Submission, rows: Iterable[_Scored], scored: Scored | None = None) -> Prepared | None:
    """The statistics of ``sub``'s step (its released result ``rows``; ``scored``: what its scoring read) against
    its scope's best as it is now, computed without any lock; ``None`` when its split's budget is not open (the
    step will be held: nothing is read)."""
    row = budgets.current(sub.dataset, sub.split, sub.target)
    if row is not None and row.ledger().state != qbudget.OPEN:
        return None
    best, level = current_best(sub), attempt(sub)
    rows = list(rows)
    return Prepared(best.pk if best is not None else None, level, _decide(sub, rows, best, level, scored))


def climb(sub: Submission, rows: Iterable[_Scored], prepared: Prepared | None = None,
          scored: Scored | None = None) -> qladder.Decision:
    """Decide ``sub``'s step on its ladder from its released result ``rows`` (:func:`qval.budget.released_rows`)
    under the split's shared budget, set ``ladder_climbed``/``ladder_against`` (unsaved) and record the release
    (or the hold) on the budget. ``prepared``: its statistics (:func:`prepare`), used when the best and the level
    are still those it was computed for (else computed again here, from ``scored`` when given).

    Call it only for a submission :func:`on_ladder` whose step is not decided yet, in a transaction, under its
    account's row lock (the budget's is taken here).
    """
    rows = list(rows)
    row = budgets.locked(sub.dataset, sub.split, sub.target)
    ledger = row.ledger()
    best = current_best(sub)
    sub.ladder_against = best
    if ledger.state != qbudget.OPEN:
        decision = qladder.held(ledger, first=best is None)  # held: nothing is read or decided
        sub.ladder_climbed = False
        budgets.record(row, ledger, Release.HELD, sub.pk, sub.user_id)
        log.info("ladder of user %s on %s/%s/%s: submission %s held (%s)", sub.user_id, sub.dataset_id, sub.split,
                 sub.target, sub.pk, decision.reason)
        return decision
    level = attempt(sub)
    best_id = best.pk if best is not None else None
    if prepared is not None and (prepared.best_id, prepared.level) == (best_id, level):
        decided = prepared.decision
    else:
        log.info("ladder: submission %s compared again under the locks (best %s, level %s; prepared: %s)", sub.pk,
                 best_id, level, prepared and (prepared.best_id, prepared.level))
        decided = _decide(sub, rows, best, level, scored)
    decision = qladder.charge(decided, board_values(rows), ledger)
    sub.ladder_climbed = decision.climbs
    if decision.climbs:
        budgets.record(row, ledger, Release.LADDER, sub.pk, sub.user_id, decision.released)
    log.info("ladder of user %s on %s/%s/%s: submission %s %s (best %s): %s", sub.user_id, sub.dataset_id,
             sub.split, sub.target, sub.pk, "climbs" if decision.climbs else "holds", best_id, decision.reason)
    return decision


def shown_rows(sub: Submission, rows: list[MetricRow], decision: qladder.Decision | None = None) -> list[MetricRow]:
    """``rows`` as stored for ``sub`` after its ``decision`` (``None``: decided before, a re-scoring: its
    recorded release): a Ladder metric its climb did not pay for is withheld (:data:`qval.budget.NO_ROOM`)."""
    if decision is not None:
        climbed, released = decision.climbs, decision.released
    else:
        climbed, recorded = bool(sub.ladder_climbed), budgets.released_metrics(sub.pk)
        if recorded is None:
            return rows  # decided before the budget: its values were released then
        released = recorded
    if not climbed:
        return rows
    return [r if r.metric not in qbudget.RELEASED_METRICS or r.value is None or r.metric in released
            else MetricRow(metric=r.metric, value=None, p_value=None, num_points=r.num_points,
                           num_dropped=r.num_dropped, coverage=r.coverage, details={"withheld": qbudget.NO_ROOM})
            for r in rows]


def outcome(sub: Submission) -> dict[str, Any] | None:
    """What ``sub``'s page and API say of its step on the ladder (``None`` off the ladder or unfinished).

    ``climbed``; ``held``: not decided because the split's information budget was spent; ``best``: the id of
    the best it was compared with and that best's board values (``best_spearman``, ``best_ranking_spearman``);
    ``message``: the sentence the page shows.
    """
    if sub.ladder_climbed is None or sub.state != Submission.FINISHED:
        return None
    best = sub.ladder_against
    values = board_values(best.results.all()) if best is not None else {}
    rho = values.get(metric_registry.HEADLINE)
    local = values.get(metric_registry.LOCAL_HEADLINE)
    held = not sub.ladder_climbed and budgets.held(sub.pk)
    named = ""
    if best is not None:
        shown = f"ρ={'—' if rho is None else f'{rho:.3f}'}"
        if local is not None:
            shown += f", state-local ρ={local:.3f}"
        named = f"your best (#{best.pk}, {shown})"
    if held:
        fresh = budgets.retirement(sub.dataset) or budgets.pending(sub.dataset)
        replaced = (f"; {fresh.replacement.key} replaces it with a fresh hidden split" if fresh is not None
                    and fresh.replacement_id else "; a fresh hidden split is being built to replace it"
                    if fresh is not None else "; a fresh hidden split will replace it")
        message = (f"Held: the information budget of the hidden {sub.split} split of {sub.dataset.key} (target "
                   f"{sub.target.upper()}), shared by every account, is spent, so nothing more is released about "
                   f"it{replaced}. This submission was scored but its score is shown to nobody"
                   + (f" and the board keeps {named}." if best is not None else "."))
    elif best is None:
        message = (f"The first {sub.split}-split submission of your account on {sub.dataset.key} · target "
                   f"{sub.target.upper()}: the board shows this score.")
    elif sub.ladder_climbed:
        message = f"Better than {named} by more than the Ladder margin: the board shows this score."
    else:
        message = (f"Not better than {named} by the Ladder margin; the board keeps that score. This submission's "
                   f"own score on the hidden {sub.split} split is not shown (the Ladder, see How we score).")
    return {"climbed": sub.ladder_climbed, "held": held, "best": best.pk if best is not None else None,
            "best_spearman": rho, "best_ranking_spearman": local, "message": message}

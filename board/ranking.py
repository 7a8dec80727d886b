"""The rank ranges of a board's rows (:mod:`qval.ranks`): paired tests among the rows that share their points,
intervals for the others, an approximate interval for a number reported without one.

Rows **share their points** when their per-point predictions are known (an uploaded file, a container's or a
baseline's predictions, a re-scored row's published predictions) and they score the same points of the same
split and target under the same rules; on a hidden split only rows that score every point (as *Compare*).
Their values are recomputed on those points and must be the board's (a row shown by another rule -- the
paper's codegen mean of per-sample values -- is ranked by its interval).  Each group of such rows is resampled
once, every row on the same draws of the split's trajectories (:mod:`qval.sampling`), and the pairs are
tested with Holm's correction (:func:`qval.ranks.paired_outcomes`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.conf import settings

from qval import metrics, ranks, sampling, scoring
from qval.metric_registry import MetricSpec

from .evaluations import Evaluation, Score

log = logging.getLogger(__name__)

SEED = 0
"""Seed of the resamples behind a board's paired tests: the same rows always get the same ranks."""

PAIRED_ROWS = 100
"""The paired tests look at a board's first (best) rows only: each row tested reads its predictions file, so a
board of thousands of rows would read thousands of files per results version.  Rows further down are ranked by
their intervals, as rows that share no points."""


def rank_row(metric: MetricSpec, score: Score) -> ranks.Row:
    """The row's interval: its bootstrap interval, else :func:`qval.metrics.approximate_ci` from its point
    count, else the correlation's whole range [-1, 1] (both marked approximate)."""
    assert score.value is not None
    if score.ci_low is not None and score.ci_high is not None:
        return ranks.Row(score.value, score.ci_low, score.ci_high)
    approx = metrics.approximate_ci(metric.name, score.value, score.num_points, std=score.std)
    low, high = approx if approx is not None else (-1.0, 1.0)
    return ranks.Row(score.value, min(low, score.value), max(high, score.value), approximate=True)


@dataclass(frozen=True)
class _Shared:
    """Rows (their indices on the board) that share their points: each row's per-point (or per-state)
    values and the design of those points."""

    rows: list[int]
    labels: np.ndarray | None
    values: list[np.ndarray]
    design: sampling.Design


class Context:
    """What the boards of one results version share for their ranks, read once when first needed: the
    submissions of the rows their paired tests look at (``tested()``: each board's first :data:`PAIRED_ROWS`
    rows, so one query of at most that many rows a board, however many rows the boards hold) and the labels of
    each split (:func:`leaderboard.loading.truth_for`)."""

    def __init__(self, tested: Callable[[], Iterable[Evaluation]]) -> None:
        self._tested = tested
        self._subs: dict[int, Any] | None = None
        self._truths: dict[tuple[int, str, str], scoring.Truth] = {}

    def submission(self, pk: int) -> Any:
        """The submission ``pk`` (with its dataset and environment) if it may share its points, else ``None``."""
        if self._subs is None:
            from submissions.models import Submission

            ids = {e.submission_id for e in self._tested() if e.source != Submission.SOURCE_REPORTED}
            self._subs = Submission.objects.select_related("dataset__environment").in_bulk(sorted(ids))
        return self._subs.get(pk)

    def truth(self, sub: Any) -> scoring.Truth:
        """The labels ``sub`` was scored against."""
        from leaderboard.loading import truth_for

        key = (sub.dataset_id, sub.split, sub.target)
        if key not in self._truths:
            self._truths[key] = truth_for(sub.dataset, sub.split, sub.target)
        return self._truths[key]


def _groups(board_rows: Sequence[Evaluation], metric: MetricSpec, context: Context) -> list[_Shared]:
    """The groups of :func:`board_ranks`' rows that share their points (see the module doc)."""
    from submissions.comparison import on_hidden_labels, scored_predictions
    from submissions.models import Submission

    grouped: dict[tuple[object, ...], tuple[scoring.Truth, list[int], list[np.ndarray]]] = {}
    for i, e in enumerate(board_rows):
        sub = context.submission(e.submission_id)
        if sub is None or sub.source == Submission.SOURCE_REPORTED:
            continue
        key = (sub.dataset_id, sub.split, sub.target)
        try:
            truth = context.truth(sub)
            preds = scored_predictions(sub, truth)
            codes = preds.codes(truth.index)
            if metric.kind == "ranking":
                values = scoring.state_ranking_values(truth, preds.ids, preds.scores, samples=preds.samples,
                                                      codes=codes, rules=sub.rules)
            else:
                values = scoring.point_scores(truth, preds.ids, preds.scores, samples=preds.samples, codes=codes)
        except (OSError, ValueError) as exc:  # a file gone or unreadable: ranked by its interval
            log.warning("board ranks: submission %s is ranked by its interval: %s", sub.pk, exc)
            continue
        known = ~np.isnan(values)
        if metric.kind != "ranking":
            known &= ~np.isnan(truth.point_labels)
        if on_hidden_labels(sub) and not known.all():
            continue  # on a hidden split only rows that score every point are compared (as Compare)
        group = grouped.setdefault((key, sub.rules, known.tobytes()), (truth, [], []))
        group[1].append(i)
        group[2].append(values[known])
    out = []
    for (_, _, mask_bytes), (truth, rows, values) in grouped.items():
        if len(rows) < 2:
            continue
        known = np.frombuffer(mask_bytes, dtype=bool)
        design = truth.design_of(known) if truth.design is not None else sampling.Design.independent(int(known.sum()))
        labels = None if metric.kind == "ranking" else np.asarray(truth.point_labels)[known]
        out.append(_Shared(rows, labels, values, design))
    return out


def _estimate(metric: MetricSpec, shared: _Shared, k: int) -> float | None:
    """Row ``k`` of ``shared``'s value on the shared points."""
    if shared.labels is None:
        return float(shared.values[k].mean()) if shared.values[k].size else None
    return metrics.correlate(shared.labels, shared.values[k], metric.name, min_points=2).value


def _paired(board_rows: Sequence[Evaluation], metric: MetricSpec, context: Context) -> dict[tuple[int, int], int]:
    """The paired outcomes of every group of rows that share their points, keyed by board indices."""
    out: dict[tuple[int, int], int] = {}
    for shared in _groups(board_rows, metric, context):
        keep: list[int] = []
        for k, i in enumerate(shared.rows):
            shown = board_rows[i].value(metric.name)
            mine = _estimate(metric, shared, k)
            tolerance = 6e-4  # a hidden split's values are shown to 3 decimals
            if shown is not None and mine is not None and abs(mine - shown) <= tolerance:
                keep.append(k)
        if len(keep) < 2:
            continue
        values = [_estimate(metric, shared, k) for k in keep]
        n = len(shared.design)
        resamples = metrics.capped_resamples(settings.QVAL_BOOTSTRAP_RESAMPLES, n * len(keep),
                                             metric.bootstrap_max_work)
        if shared.labels is None:
            table = np.stack([shared.values[k] for k in keep])  # rows x states

            def statistic(draws: metrics.Resamples, table: np.ndarray = table) -> np.ndarray:
                return (table @ draws.counts().astype(np.float64) / draws.totals).T
        else:
            stats = [metric.resample(shared.labels, shared.values[k]) for k in keep]

            def statistic(draws: metrics.Resamples, stats: list = stats) -> np.ndarray:  # type: ignore[type-arg]
                return np.stack([s(draws) for s in stats], axis=1)
        resampled = metrics.bootstrap(statistic, n, resamples, SEED, shared.design)
        outcomes = ranks.paired_outcomes(values, resampled, shared.design,  # type: ignore[arg-type]
                                         higher_is_better=metric.higher_is_better)
        for (a, b), outcome in outcomes.items():
            i, j = shared.rows[keep[a]], shared.rows[keep[b]]
            out[(i, j) if i < j else (j, i)] = outcome if i < j else -outcome
    return out


def board_ranks(board_rows: Sequence[Evaluation], metric: MetricSpec, context: Context) -> list[ranks.Rank]:
    """The :class:`qval.ranks.Rank` of each of ``board_rows`` (a board's rows, each with a value of
    ``metric``), in their order; ``context``: the :class:`Context` of the boards' results version."""
    rows = [rank_row(metric, e.scores[metric.name]) for e in board_rows]
    paired = _paired(board_rows[:PAIRED_ROWS], metric, context) if len(board_rows) > 1 else {}
    return ranks.rank(rows, higher_is_better=metric.higher_is_better, paired=paired)


__all__ = ["PAIRED_ROWS", "SEED", "Context", "board_ranks", "rank_row"]

"""Score a set of predictions against a dataset split's labels.

This is the one place that turns (labels, predictions) into the rows a leaderboard shows;
the Celery worker, the ``qval evaluate`` CLI and the tests all call :func:`score`.

Rules (documented on the site's "how we score" page):

* **Points.** Target ``q``: one point per state, the actor's candidate; target ``v``: one
  point per state. Predictions are matched to points by id, not by position.
* **Coverage.** Ids of the split that the file does not mention are allowed; they lower
  ``coverage`` (provided / expected) and are not counted as dropped.
* **NaN.** A provided score that is NaN (null, empty, ``nan``) is dropped and counted in
  ``num_dropped``.
* **Minimum.** With fewer than :data:`qval.metrics.MIN_USABLE_POINTS` usable pairs a
  correlation is reported as insufficient (no value).
* **Ranking.** When the predictions score candidates other than the actor's (target ``q``),
  the per-state ranking Spearman and the selection metrics are computed over the states
  whose candidates were scored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from qval import metrics, schema


@dataclass(frozen=True)
class Truth:
    """The labels a submission is scored against.

    ``point_ids``/``point_labels``: the pointwise evaluation points in dataset order.
    ``group_ids``/``group_labels``: for target ``q``, every state's candidate ids and Q labels
    (empty for target ``v``).
    """

    point_ids: Sequence[str]
    point_labels: np.ndarray
    group_ids: Sequence[Sequence[str]] = ()
    group_labels: Sequence[np.ndarray] = ()

    def all_ids(self) -> set[str]:
        """Every id a prediction may name."""
        ids = set(self.point_ids)
        for group in self.group_ids:
            ids.update(group)
        return ids


@dataclass(frozen=True)
class MetricRow:
    """One reported metric."""

    metric: str
    value: float | None
    p_value: float | None
    num_points: int
    num_dropped: int
    coverage: float
    insufficient: bool = False
    details: dict[str, Any] = field(default_factory=dict)


def lookup(ids: np.ndarray, scores: np.ndarray, wanted: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Scores of ``wanted`` ids (NaN where absent) and a mask of which ids were provided."""
    index = pd.Index(ids)
    pos = index.get_indexer(pd.Index(list(wanted)))
    provided = pos >= 0
    out = np.full(len(pos), np.nan)
    out[provided] = scores[pos[provided]]
    return out, provided


def score(
    truth: Truth,
    ids: np.ndarray,
    scores: np.ndarray,
    *,
    bootstrap_resamples: int = 1000,
    seed: int = 0,
) -> list[MetricRow]:
    """Compute every metric of one submission (ids/scores from :mod:`qval.predictions`)."""
    scores = np.asarray(scores, dtype=np.float64)
    point_scores, provided = lookup(ids, scores, truth.point_ids)
    expected = len(truth.point_ids)
    coverage = float(provided.sum()) / expected if expected else 0.0
    dropped = int((provided & np.isnan(point_scores)).sum())
    labels = np.asarray(truth.point_labels, dtype=np.float64)[provided]
    used_scores = point_scores[provided]

    rows: list[MetricRow] = []
    for name, corr in metrics.point_metrics(labels, used_scores).items():
        details: dict[str, Any] = {"significance": corr.significance()}
        if corr.value is not None and bootstrap_resamples:
            ci = metrics.bootstrap_point_ci(labels, used_scores, name, resamples=bootstrap_resamples, seed=seed)
            details["ci95"] = [ci.low, ci.high]
        rows.append(
            MetricRow(
                metric=name,
                value=corr.value,
                p_value=corr.p_value,
                num_points=corr.num_points,
                num_dropped=dropped,
                coverage=coverage,
                insufficient=corr.insufficient,
                details=details,
            )
        )
    rows.extend(_ranking_rows(truth, ids, scores, bootstrap_resamples=bootstrap_resamples, seed=seed))
    return rows


def _ranking_rows(
    truth: Truth, ids: np.ndarray, scores: np.ndarray, *, bootstrap_resamples: int, seed: int
) -> list[MetricRow]:
    if not truth.group_ids:
        return []
    flat_ids = [cid for group in truth.group_ids for cid in group]
    flat_scores, provided = lookup(ids, scores, flat_ids)
    point_set = set(truth.point_ids)
    if not any(p and cid not in point_set for cid, p in zip(flat_ids, provided)):
        return []  # a pointwise file: no candidate other than the actor's was scored
    groups = []
    scored_states = 0
    start = 0
    for group, group_labels in zip(truth.group_ids, truth.group_labels):
        end = start + len(group)
        group_scores = flat_scores[start:end]
        start = end
        if provided[start - len(group) : end].any():
            scored_states += 1
            groups.append((np.asarray(group_labels, dtype=np.float64), group_scores))
    coverage = scored_states / len(truth.group_ids)
    dropped = int((provided & np.isnan(flat_scores)).sum())
    summary = metrics.ranking_spearman(groups)
    details: dict[str, Any] = {
        "std": summary.std,
        "num_valid": summary.num_valid,
        "num_skipped": summary.num_skipped,
    }
    if summary.mean is not None and bootstrap_resamples:
        ci = metrics.bootstrap_ranking_ci(summary.per_state, resamples=bootstrap_resamples, seed=seed)
        details["ci95"] = [ci.low, ci.high]
    rows = [
        MetricRow(
            metric="ranking_spearman",
            value=summary.mean,
            p_value=None,
            num_points=summary.num_valid,
            num_dropped=dropped,
            coverage=coverage,
            insufficient=summary.mean is None,
            details=details,
        )
    ]
    selection = metrics.selection_metrics(groups)
    for name in ("top1_accuracy", "regret_at_1", "pairwise_accuracy"):
        value = getattr(selection, name)
        rows.append(
            MetricRow(
                metric=name,
                value=value,
                p_value=None,
                num_points=selection.num_pairs if name == "pairwise_accuracy" else selection.num_states,
                num_dropped=dropped,
                coverage=coverage,
                insufficient=value is None,
            )
        )
    return rows


def truth_from_dataset(ds: "schema.Dataset", split: str, target: str) -> Truth:
    """The labels of a split of an on-disk dataset (public splits for researchers)."""
    states = ds.states_in(split)
    if not states:
        raise schema.SchemaError(f"dataset {ds.manifest.key} has no split {split!r}")
    point_ids = ds.point_ids(split, target)
    labels = ds.labels_for(target)
    point_labels = np.array([labels[i] for i in point_ids], dtype=np.float64)
    if target == "v":
        return Truth(point_ids=point_ids, point_labels=point_labels)
    group_ids = [[c.id for c in s.candidates] for s in states]
    group_labels = [np.array([ds.q_labels[c] for c in g], dtype=np.float64) for g in group_ids]
    return Truth(point_ids=point_ids, point_labels=point_labels, group_ids=group_ids, group_labels=group_labels)


def truth_from_frame(frame: pd.DataFrame, target: str) -> Truth:
    """The labels of a downloaded public split (one row per candidate, with ``q_label``/``v_label``)."""
    if target == "v":
        states = frame.drop_duplicates("state_id")
        return Truth(point_ids=list(states["state_id"]), point_labels=states["v_label"].to_numpy(np.float64))
    actors = frame[frame["is_actor"].astype(bool)]
    group_ids: list[list[str]] = []
    group_labels: list[np.ndarray] = []
    for _, rows in frame.groupby("state_id", sort=False):
        group_ids.append(list(rows["candidate_id"]))
        group_labels.append(rows["q_label"].to_numpy(np.float64))
    return Truth(
        point_ids=list(actors["candidate_id"]),
        point_labels=actors["q_label"].to_numpy(np.float64),
        group_ids=group_ids,
        group_labels=group_labels,
    )

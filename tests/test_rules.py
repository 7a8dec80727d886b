"""The ``qval-v1.0`` rules differ from ours exactly where *How we score* says (small hand-made cases)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qval import metrics, predictions, scoring

REF = metrics.REFERENCE_RULES


def test_a_constant_scorer_state_is_zero_for_us_and_poisons_the_reference_summary() -> None:
    labels, scores = [0.1, 0.5, 0.9], [0.3, 0.3, 0.3]
    assert metrics.state_ranking_spearman(labels, scores) == 0.0
    assert math.isnan(metrics.state_ranking_spearman(labels, scores, REF))  # type: ignore[arg-type]
    groups = [(labels, scores), ([0.0, 1.0], [0.0, 1.0])]
    ours = metrics.ranking_spearman(groups)
    assert ours.mean == pytest.approx(0.5) and ours.num_valid == 2
    ref = metrics.ranking_spearman(groups, REF)
    assert ref.mean is None and ref.std is None and ref.num_valid == 2 and ref.num_skipped == 0
    # One valid state whose correlation is undefined: the reference still writes a std of 0.0.
    alone = metrics.ranking_spearman([(labels, scores), ([0.0, 0.0], [0.0, 1.0])], REF)
    assert alone.mean is None and alone.std == 0.0 and alone.num_valid == 1 and alone.num_skipped == 1


def test_a_state_with_a_missing_score_is_kept_by_us_and_skipped_whole_by_the_reference() -> None:
    labels, scores = [0.1, 0.5, 0.9], [0.2, math.nan, 0.8]
    assert metrics.state_ranking_spearman(labels, scores) == pytest.approx(1.0)
    assert metrics.state_ranking_spearman(labels, scores, REF) is None
    # Through the scorer: the second state leaves one candidate unscored.
    truth = scoring.Truth(
        point_ids=["a0", "b0"], point_labels=np.array([0.1, 0.2]),
        group_ids=[["a0", "a1", "a2"], ["b0", "b1", "b2"]],
        group_labels=[np.array([0.1, 0.5, 0.9]), np.array([0.2, 0.4, 0.6])],
    )
    ids = np.array(["a0", "a1", "a2", "b0", "b2"], dtype=object)
    scores_ = np.array([0.1, 0.5, 0.9, 0.6, 0.2])  # b: the two scored candidates are in the wrong order
    ours = {r.metric: r for r in scoring.score(truth, ids, scores_, bootstrap_resamples=0)}["ranking_spearman"]
    ref = {r.metric: r for r in scoring.score(truth, ids, scores_, bootstrap_resamples=0, rules=REF)}["ranking_spearman"]
    assert ours.value == pytest.approx(0.0) and ours.details["num_valid"] == 2
    assert ref.value == pytest.approx(1.0) and ref.details["num_valid"] == 1 and ref.details["num_skipped"] == 1
    assert ref.details["std"] == 0.0  # one valid state: the reference's std is 0.0


def test_std_of_exactly_one_value() -> None:
    assert metrics.ranking_summary([0.4, None]).std is None
    assert metrics.ranking_summary([0.4, None], REF).std == 0.0
    assert metrics.aggregate([0.3, None]).std is None
    assert metrics.aggregate([0.3, None], REF).std == 0.0
    assert metrics.aggregate([0.3, 0.5], REF).std == metrics.aggregate([0.3, 0.5]).std  # two or more: the same
    assert metrics.aggregate([None], REF).std is None


def test_infinite_scores_are_rejected_by_us_and_kept_by_the_reference() -> None:
    labels = np.arange(60, dtype=float)
    scores = labels.copy()
    scores[-1] = math.inf
    with pytest.raises(ValueError, match="infinite"):
        metrics.correlate(labels, scores, "spearman")
    ref = metrics.point_metrics(labels, scores, rules=REF)
    assert ref["spearman"].value == pytest.approx(1.0) and ref["kendall_tau"].value == pytest.approx(1.0)
    assert ref["pearson"].value is None  # inf makes Pearson undefined, as in scipy
    data = b"id,score\na,1\nb,inf\n"
    with pytest.raises(predictions.ValidationFailed, match="infinite"):
        predictions.parse(data, "p.csv")
    assert np.isinf(predictions.parse(data, "p.csv", allow_infinite=True).scores).sum() == 1


def test_unknown_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown rules 'paper'"):
        metrics.point_metrics([1.0, 2.0], [1.0, 2.0], rules="paper")

"""Our scoring engine reproduces every number stored in the QVal v1.0 reference summaries.

The four summary files live outside the repository, in ``../shared/reference/qval-v1.0``
(see its README for provenance and the rules checked here).  They are read in place, never
copied into the project; without them the tests that need them are skipped.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qval.paper.qval_v1.reference import Rescore, parse_reference_values, rescore_summary

REFERENCE_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "qval-v1.0"

# path under evaluations/ -> (sha256, correlation entries, aggregate blocks, ranking blocks)
SUMMARIES: dict[str, tuple[str, int, int, int]] = {
    "frozen_lake/8x8_scripted_q35-122-or_text/summary_20260507_035300.json": (
        "1f4c5291feef240cd5086e8adb6fa783c19d1b98c39a3dadb6e9a9ac41526756", 141, 6, 3,
    ),
    "alfworld/all-types-40ms_scripted_g4-31-or_text/summary_20260507_034556.json": (
        "a26607788e2692f87b861eddccbe0355a077132ace5ac55403393698d118047d", 141, 6, 4,
    ),
    "terminal_bench/tblite-easy-40ms_ds32_q35-27-or_text/summary_20260507_040750.json": (
        "6c15a11f61c6f373c5817ca615bf710026c303b54f31235c7e79ae95f13bf74f", 192, 8, 8,
    ),
    "open_apps/eps025-ms45-recovery-som-filtered-zeros-ranking_scripted_g4-31-or_text/summary_20260507_035818.json": (
        "6b15f8edeab5b117439e54c4f4020708201ba734beca744c8788b8e703e850d8", 141, 6, 4,
    ),
}

# Totals stated in the reference README ("Recomputation rules that were checked").
README_TOTALS = {"correlations": 615, "aggregates": 26, "rankings": 19}


@pytest.fixture(scope="module")
def reference_dir() -> Path:
    """The reference directory, or a skip when this checkout has no ``../shared`` beside it."""
    if not (REFERENCE_DIR / "evaluations").is_dir():
        pytest.skip(f"QVal v1.0 reference summaries not found at {REFERENCE_DIR} (expected ../shared beside the repo)")
    return REFERENCE_DIR


def _load(reference_dir: Path, relative: str) -> dict[str, Any]:
    path = reference_dir / "evaluations" / relative
    raw = path.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == SUMMARIES[relative][0], f"{path} differs from the README's sha256"
    return json.loads(raw)


def _first_single_predictor(summary: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(gt, entry) of the first point-granularity single predictor with a non-null spearman."""
    for gt, estimation in summary["estimations"].items():
        for entry in estimation["methods"].values():
            if "predicted_values" in entry and entry["correlations"]["spearman"]["correlation"] is not None:
                return gt, entry
    raise AssertionError("no single predictor found")


@pytest.mark.parametrize("relative", list(SUMMARIES))
def test_every_stored_number_is_reproduced(reference_dir: Path, relative: str) -> None:
    result = rescore_summary(_load(reference_dir, relative))
    _, correlations, aggregates, rankings = SUMMARIES[relative]
    assert result.mismatches == [], f"{len(result.mismatches)} mismatches, e.g. {result.mismatches[:3]}"
    assert (result.num_correlations, result.num_aggregates, result.num_rankings) == (
        correlations,
        aggregates,
        rankings,
    )


def test_totals_match_the_readme(reference_dir: Path) -> None:
    results: list[Rescore] = [rescore_summary(_load(reference_dir, relative)) for relative in SUMMARIES]
    assert all(result.ok for result in results)
    assert sum(r.num_correlations for r in results) == README_TOTALS["correlations"]
    assert sum(r.num_aggregates for r in results) == README_TOTALS["aggregates"]
    assert sum(r.num_rankings for r in results) == README_TOTALS["rankings"]


def test_the_files_exercise_the_edge_rules(reference_dir: Path) -> None:
    """The checks above cover NaN dropping, constant predictions and prefix alignment."""
    frozen_lake = _load(reference_dir, next(iter(SUMMARIES)))
    verifier = frozen_lake["estimations"]["qv_mc_max"]["methods"]["verifier_qv"]
    direct = frozen_lake["estimations"]["qv_mc_max"]["methods"]["direct_qv"]
    assert len(frozen_lake["estimations"]["qv_mc_max"]["ground_truth_values"]) == 239
    assert (len(verifier["predicted_values"]), len(direct["predicted_values"])) == (239, 100)
    alfworld = _load(reference_dir, list(SUMMARIES)[1])
    gvl_sv = alfworld["estimations"]["sv_mc_max"]["methods"]["gvl_sv"]
    assert gvl_sv["predicted_values"].count(None) == 1
    assert gvl_sv["correlations"]["spearman"]["num_points"] == 99
    codegen_sv = alfworld["estimations"]["sv_mc_max"]["methods"]["codegen_sv"]
    assert codegen_sv["aggregate_correlations"]["spearman"]["num_nan"] == 11
    constant = [s for s in codegen_sv["per_sample"] if len(set(s["predicted_values"])) == 1]
    assert len(constant) == 11
    assert all(s["correlations"]["pearson"] == {"correlation": None, "p_value": None, "num_points": 100} for s in constant)


def test_a_changed_correlation_is_reported(reference_dir: Path) -> None:
    summary = copy.deepcopy(_load(reference_dir, list(SUMMARIES)[2]))
    gt, entry = _first_single_predictor(summary)
    entry["correlations"]["spearman"]["correlation"] += 1e-7
    entry["correlations"]["kendall_tau"]["p_value"] *= 1 + 1e-6
    entry["correlations"]["pearson"]["num_points"] += 1
    paths = {tuple(m.path.rsplit(".", 2)[1:]) for m in rescore_summary(summary).mismatches}
    assert paths == {("spearman", "correlation"), ("kendall_tau", "p_value"), ("pearson", "num_points")}


def test_a_changed_aggregate_and_ranking_are_reported(reference_dir: Path) -> None:
    summary = copy.deepcopy(_load(reference_dir, list(SUMMARIES)[1]))
    codegen = summary["estimations"]["qv_mc_max"]["methods"]["llm_codegen_qv_optimal"]
    codegen["aggregate_correlations"]["spearman"]["std"] *= 1.001
    ranking = summary["estimations"]["ranking_gt_qv_mc_max"]["methods"]["ranking_qv"]
    ranking["correlations"]["ranking_spearman"]["num_skipped"] += 1
    paths = [m.path for m in rescore_summary(summary).mismatches]
    assert paths == [
        "estimations.qv_mc_max.methods.llm_codegen_qv_optimal.aggregate_correlations.spearman.std",
        "estimations.ranking_gt_qv_mc_max.methods.ranking_qv.correlations.ranking_spearman.num_skipped",
    ]


def test_a_stored_value_where_ours_is_null_is_reported(reference_dir: Path) -> None:
    summary = copy.deepcopy(_load(reference_dir, list(SUMMARIES)[1]))
    codegen = summary["estimations"]["sv_mc_max"]["methods"]["codegen_sv"]
    codegen["per_sample"][0]["correlations"]["spearman"]["correlation"] = 0.0
    [mismatch] = rescore_summary(summary).mismatches
    assert mismatch.path.endswith("codegen_sv.per_sample[0].correlations.spearman.correlation")
    assert (mismatch.stored, mismatch.recomputed) == (0.0, None)


def test_more_predictions_than_ground_truth_is_an_error(reference_dir: Path) -> None:
    summary = copy.deepcopy(_load(reference_dir, list(SUMMARIES)[2]))
    _, entry = _first_single_predictor(summary)
    entry["predicted_values"] = entry["predicted_values"] * 2
    with pytest.raises(ValueError, match="predictions but only"):
        rescore_summary(summary)


# -- the reference upload format ---------------------------------------------------------


def test_parse_reference_values() -> None:
    name, values = parse_reference_values({"method_name": "direct_qv", "values": [0.5, None, 1, -2.25, math.nan]})
    assert name == "direct_qv"
    assert values.dtype == np.float64
    np.testing.assert_array_equal(values, [0.5, np.nan, 1.0, -2.25, np.nan])


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([0.1, 0.2], "expected a JSON object"),
        ({"values": [0.1]}, "missing key.*method_name"),
        ({"method_name": "m"}, "missing key.*values"),
        ({"method_name": "  ", "values": [0.1]}, "non-empty string"),
        ({"method_name": 3, "values": [0.1]}, "non-empty string"),
        ({"method_name": "m", "values": {"a": 1}}, "must be a list"),
        ({"method_name": "m", "values": []}, "is empty"),
        ({"method_name": "m", "values": [0.1, "0.2"]}, r"values\[1\] is not a number or null: '0.2'"),
        ({"method_name": "m", "values": [0.1, 0.2, True]}, r"values\[2\] is not a number"),
        ({"method_name": "m", "values": [[0.1]]}, r"values\[0\] is not a number"),
        ({"method_name": "m", "values": [0.1, math.inf]}, r"values\[1\] is not finite"),
        ({"method_name": "m", "values": [10**400]}, r"values\[0\] is not finite"),
    ],
)
def test_parse_reference_values_rejects(obj: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_reference_values(obj)

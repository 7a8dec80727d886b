"""A bounded burst of uploads through a whole site of real processes (tests/stack.py), checking only
correctness: every upload accepted, every submission final and finished, none lost, none
duplicated. The timings are benchmarks/load.py's to print, never asserted here."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import REPO
from tests.stack import Stack
from tests.test_faults import FAST, dataset_dir

pytestmark = [pytest.mark.slow, pytest.mark.worker]


def test_a_burst_of_uploads_all_end_finished_once(frozenlake, data_dir, tmp_path) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from load import run

    stack = Stack(tmp_path / "stack", 18840, env=FAST)
    try:
        stack.start(dataset_dir(frozenlake, data_dir))
        out = run(stack, frozenlake, uploads=40, users=8, seconds=10)
    finally:
        stack.close()
    assert out["errors"] == [] and out["accepted"] == out["distinct_ids"] == 40
    assert out["finished"] == 40 and out["failed"] == {}
    assert out["submissions_stored"] == 40 and out["duplicate_results"] == 0
    assert len(out["results_per_submission"]) == 1  # every submission has the same full set of metrics

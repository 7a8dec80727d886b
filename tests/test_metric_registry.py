"""Adding a metric is one registry entry and its function: a toy metric (``tests/toy_metric.py``,
the mean score gap), registered by a fixture and removed after, is in a submission's scoring
output, the board columns (HTML and the CSV/JSON exports), the API and the CLI.

The scoring task is the real Celery task function, called in-process; the CLI runs as its own
process, which loads the toy through ``$QVAL_METRIC_MODULES`` (the documented plugin path).
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import re
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from qval import metric_registry, metrics, schema, scoring
from qval.envs import registry
from submissions.models import Submission
from workers.tasks import score_submission, validate_upload

KEY = "{0.slug}@{0.version}".format(registry.BUILDERS["frozenlake"]()[1])
ROOT = Path(__file__).resolve().parent.parent
TOY = "mean_gap"


@pytest.fixture
def toy() -> Iterator[metric_registry.MetricSpec]:
    """The toy metric, registered for one test."""
    module = importlib.import_module("tests.toy_metric")
    module.ensure_registered()
    try:
        yield metric_registry.get(TOY)
    finally:
        metric_registry.unregister(TOY)


def _dev_points(ds: schema.Dataset) -> tuple[list[str], np.ndarray, np.ndarray]:
    ids = ds.point_ids("dev", "q")
    labels = np.array([ds.q_labels[i] for i in ids])
    return ids, labels, labels + np.random.default_rng(5).normal(0.3, 0.2, len(ids))


def test_unknown_and_duplicate_entries_are_refused(toy) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="already registered"):
        metric_registry.register(toy)
    with pytest.raises(ValueError, match="built in"):
        metric_registry.unregister("spearman")
    with pytest.raises(ValueError, match="unknown kind"):
        metric_registry.MetricSpec("x", "x", "x", True, 3, "pointwise", "", "", function="a:b")
    assert TOY in metric_registry.POINT and TOY in metrics.POINT_METRICS and TOY in metric_registry.BOARD


def test_a_headline_role_is_held_once_by_a_built_in_metric(toy) -> None:  # type: ignore[no-untyped-def]
    """The headline roles are the registry's data: each held by one built-in metric, which the board's default
    order, the Ladder, the budget and the published results' metric types read; a plugin cannot take one."""
    from dataclasses import replace

    from board.exports import canonical_sort
    from qval import budget, ladder
    from qval.paper.qval_v1 import published

    holders = {m.headline: m.name for m in metric_registry.BUILTIN if m.headline}
    assert list(holders) == list(metric_registry.HEADLINE_ROLES)
    assert (metric_registry.HEADLINE, metric_registry.LOCAL_HEADLINE) == (holders["global"], holders["state-local"])
    assert ladder.LADDER_METRICS == budget.RELEASED_METRICS == metric_registry.HEADLINES == tuple(holders.values())
    assert published.METRIC_TYPES == holders
    assert canonical_sort("no-such-column") == f"-{holders['global']}"
    with pytest.raises(ValueError, match="headline role 'global' is 'spearman''s"):
        metric_registry.register(replace(toy, name="toy_headline", headline="global"))
    with pytest.raises(ValueError, match="unknown headline role 'main'"):
        replace(toy, name="toy_headline", headline="main")
    assert "toy_headline" not in [m.name for m in metric_registry.METRICS]


def test_the_toy_is_gone_after_its_fixture() -> None:
    assert TOY not in metric_registry.POINT and TOY not in metric_registry.BOARD


def test_the_toy_is_scored(toy, frozenlake) -> None:  # type: ignore[no-untyped-def]
    ids, labels, scores = _dev_points(frozenlake)
    truth = scoring.truth_from_dataset(frozenlake, "dev", "q")
    rows = {r.metric: r for r in scoring.score(truth, np.array(ids, dtype=object), scores, bootstrap_resamples=200)}
    gap = float(np.mean(scores - labels))
    assert rows[TOY].value == pytest.approx(gap, abs=1e-12)
    low, high = rows[TOY].details["ci95"]
    assert low < gap < high
    assert rows["spearman"].value is not None  # the built-in metrics are still there, not the toy's formula
    assert rows["spearman"].value != pytest.approx(gap)


@pytest.mark.django_db
def test_the_toy_reaches_the_board_the_exports_and_the_api(toy, api, client, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
    ids, labels, scores = _dev_points(frozenlake)
    content = pd.DataFrame({"id": ids, "score": scores}).to_csv(index=False).encode()
    data = {"dataset": KEY, "split": "dev", "target": "q", "method_name": "gap-toy", "public": True,  # dev: private unless
            "file": SimpleUploadedFile("p.csv", content)}  # its submitter publishes it
    resp = api.post("/api/v1/submissions/", data, format="multipart")
    assert resp.status_code == 201, resp.content
    sid = resp.json()["id"]
    if resp.json()["state"] == Submission.RECEIVED:
        validate_upload(sid)
    assert score_submission(sid) == Submission.FINISHED
    gap = float(np.mean(scores - labels))

    stored = Submission.objects.get(pk=sid).results.get(metric=TOY)
    assert stored.value == pytest.approx(gap, abs=1e-12)

    results = {r["metric"]: r for r in api.get(f"/api/v1/submissions/{sid}/").json()["results"]}
    assert results[TOY]["value"] == pytest.approx(gap, abs=1e-12)

    board = client.get("/api/v1/leaderboard/", {"dataset": KEY, "split": "dev"}).json()["results"]
    row = next(r for r in board if r["submission_id"] == sid)
    assert row[TOY] == pytest.approx(gap, abs=1e-12) and len(row[f"{TOY}_ci"]) == 2

    html = client.get("/leaderboard/", {"dataset": KEY, "split": "dev"}).content.decode()
    assert re.search(rf'<th[^>]* title="{re.escape(toy.label)}">', html)
    assert f'data-metric="{TOY}">{gap:.3f}</td>' in html

    exported = client.get("/leaderboard/", {"dataset": KEY, "split": "dev", "format": "csv"}).getvalue().decode()
    line = next(r for r in csv.DictReader(io.StringIO(exported)) if r["submission_id"] == str(sid))
    assert float(line[TOY]) == pytest.approx(gap, abs=1e-12)
    assert float(line[f"{TOY}_ci_low"]) < gap < float(line[f"{TOY}_ci_high"])
    as_json = json.loads(client.get("/leaderboard/", {"dataset": KEY, "split": "dev", "format": "json"}).getvalue())
    assert next(r for r in as_json["rows"] if r["submission_id"] == sid)[TOY] == pytest.approx(gap, abs=1e-12)

    ranked = client.get("/leaderboard/", {"dataset": KEY, "split": "dev", "sort": TOY}).content.decode()
    assert ranked.count("data-submission=") >= 1  # sortable by the toy's column


def test_the_cli_scores_the_toy_from_the_plugin_variable(frozenlake, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ids, labels, scores = _dev_points(frozenlake)
    folder = frozenlake.write(tmp_path / "frozenlake")
    preds = tmp_path / "p.csv"
    pd.DataFrame({"id": ids, "score": scores}).to_csv(preds, index=False)
    env = {**os.environ, "QVAL_METRIC_MODULES": "tests.toy_metric", "QVAL_CONFIG": str(tmp_path / "absent.json")}
    argv = [sys.executable, "-m", "qval.cli", "evaluate", str(preds), "--dataset", str(folder), "--split", "dev",
            "--bootstrap", "100"]
    done = subprocess.run([*argv, "--json"], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    rows = {r["metric"]: r for r in json.loads(done.stdout)}
    assert rows[TOY]["value"] == pytest.approx(float(np.mean(scores - labels)), abs=1e-12)
    table = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False).stdout
    assert any(line.startswith(TOY) for line in table.splitlines())
    without = subprocess.run([*argv, "--json"], cwd=ROOT, env={k: v for k, v in env.items() if k != "QVAL_METRIC_MODULES"},
                             capture_output=True, text=True, check=False)
    assert TOY not in {r["metric"] for r in json.loads(without.stdout)}

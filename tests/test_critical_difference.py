"""The critical-difference diagram (``board/aggregates.py``): which methods it compares (only those with a
value on every chosen evaluation), which it leaves out and why, its filters, and its default: the QVal
v1.0 paper's numbers, methods x (environment, backbone)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from django.core.cache import cache
from django.core.cache.utils import make_template_fragment_key
from django.utils import timezone

from board import aggregates, evaluations
from board.aggregates import Entry
from leaderboard.models import Backbone, Method
from submissions.models import Result, Submission


def entry(method: str, evaluation: str, value: float) -> Entry:
    return Entry(method, "Direct", "Env", evaluation, None, value, 0)


def test_a_method_missing_one_evaluation_is_left_out_and_named() -> None:
    values = {"a": (0.9, 0.8, 0.7), "b": (0.5, 0.6, 0.4), "c": (0.1, 0.2, 0.3)}
    entries = [entry(m, f"E{i}", v) for m, vs in values.items() for i, v in enumerate(vs)]
    entries += [entry("d", "E0", 0.95), entry("d", "E2", 0.99)]  # misses E1
    table = aggregates.critical_difference(entries)
    assert table.methods == ("a", "b", "c") and table.evaluations == ("E0", "E1", "E2")
    assert table.matrix == ((0.9, 0.5, 0.1), (0.8, 0.6, 0.2), (0.7, 0.4, 0.3))
    assert [(m.method, m.missing, m.reason) for m in table.left_out] == [("d", ("E1",), "missing on E1 (1 of 3 evaluations)")]
    assert table.result is not None and table.result.ranked_methods == ("a", "b", "c")
    # A chosen method without any value is left out saying so; the evaluations are those of the chosen methods.
    chosen = aggregates.critical_difference(entries, methods=("a", "b", "c", "nope"))
    assert chosen.methods == ("a", "b", "c") and [m.reason for m in chosen.left_out] == [
        "no value on any of the 3 chosen evaluations"]
    # Too few left to compare: no test, and why.
    few = aggregates.critical_difference(entries, methods=("a", "b"))
    assert few.result is None and few.methods == ("a", "b") and few.reason == (
        "the Friedman test needs at least 3 methods with a value on every chosen evaluation; 2 found (a, b)")
    many = [entry("d", f"E{i}", 0.1 * i) for i in range(6)]
    named = aggregates.critical_difference(entries + many).left_out
    assert [m.method for m in named] == ["a", "b", "c"]
    assert named[0].reason == "missing on E3, E4, E5 (3 of 6 evaluations)"
    extra = aggregates.critical_difference([*many, *(entry("d", f"F{i}", 0.0) for i in range(2)), *entries]).left_out
    assert extra[0].reason == "missing on E3, E4, E5 and 2 more (5 of 8 evaluations)"


def _import() -> Any:
    from submissions.importing import import_results

    return import_results(resamples=0)


def _own(user: Any, dataset: Any, method: str, backbone: str, value: float) -> Submission:
    """A user's finished test/Q row on ``dataset`` (self-reported) with global ρ ``value``."""
    sub = Submission.objects.create(
        user=user, dataset=dataset, split="test", target="q", method=Method.objects.get_or_create(name=method)[0],
        method_name=method, backbone=Backbone.objects.get_or_create(name=backbone)[0], backbone_name=backbone,
        filename="x.csv", state=Submission.FINISHED, finished_at=timezone.now())
    Result.objects.create(submission=sub, metric="spearman", value=value, num_points=100)
    return sub


def _text(response: Any) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.mark.django_db
def test_the_default_draws_the_published_results(client, user) -> None:  # type: ignore[no-untyped-def]
    from submissions.importing import published_dataset

    _import()
    # A user's row on the paper's own dataset is self-reported: not in the default diagram.
    _own(user, published_dataset("ALFWorld"), "my-probe", "Qwen3.5 9B", 1.0)
    body = client.get("/api/v1/leaderboard/critical-difference/").json()
    assert (body["split"], body["target"], body["metric"], body["modality"], body["source"]) == (
        "test", "q", "spearman", "text", ["reported"])
    assert len(body["evaluations"]) == 24 and "ALFWorld / Qwen3.5 9B" in body["evaluations"]  # 4 envs x 6 backbones
    assert len(body["methods"]) >= 2 and body["reason"] is None and "my-probe" not in body["methods"]
    assert body["methods"] == ["codegen", "direct-16", "direct-sequential", "direct-single", "eureka", "gvl", "verifier"]
    assert all(len(row) == len(body["methods"]) and None not in row for row in body["matrix"])
    left = {m["method"]: m for m in body["left_out"]}
    assert set(left) == {"codegen-avg", "direct-batched"}
    assert left["codegen-avg"]["reason"].startswith("missing on ") and left["codegen-avg"]["reason"].endswith(
        "(1 of 24 evaluations)")
    assert len(left["direct-batched"]["missing"]) == 2
    cd = body["critical_difference"]
    # The units are the 4 environments (each method's mean over its 6 backbones), not the 24 evaluations:
    # the audit found CD 4.50, Friedman p = 0.075 and no pair of methods that differs.
    assert body["blocks"]["unit"] == "environment" and body["blocks"]["names"] == [
        "ALFWorld", "FrozenLake", "OpenApps", "TerminalBench"]
    alf = [row for ev, row in zip(body["evaluations"], body["matrix"]) if ev.startswith("ALFWorld / ")]
    assert body["blocks"]["matrix"][0] == pytest.approx(list(np.mean(alf, axis=0)), abs=1e-12)
    assert cd["num_blocks"] == 4 and len(cd["ranking"]) == 7
    assert cd["cd"] == pytest.approx(4.50, abs=0.005) and cd["friedman_p_value"] == pytest.approx(0.075, abs=0.0005)
    assert cd["differences_found"] is False and cd["cliques"] == [[m["method"] for m in cd["ranking"]]]
    # Every evaluation as a block, on request: the arithmetic the audit checked (CD 1.8386, chi^2 37.036).
    every = client.get("/api/v1/leaderboard/critical-difference/", {"blocks": "evaluation"}).json()["critical_difference"]
    assert (every["num_blocks"], round(every["cd"], 4), round(every["friedman_statistic"], 3)) == (24, 1.8386, 37.036)
    page = _text(client.get("/leaderboard/critical-difference/"))
    assert 'id="cd-diagram"' in page and "7 methods × 24 evaluations; 2 left out" in page
    assert "Units of the test: <strong>4 environments (each the mean of its evaluations over backbones: 6, 6, 6, 6)" in page
    assert 'id="cd-none"' in page
    assert 'data-left-out="codegen-avg"' in page and left["codegen-avg"]["reason"] in page
    for m in body["methods"]:
        assert f'data-method="{m}"' in page
    # Their own source on request: the user's row is then the only method (too few to compare).
    own = client.get("/api/v1/leaderboard/critical-difference/", {"source": "self-reported"}).json()
    assert own["methods"] == ["my-probe"] and own["critical_difference"] is None


@pytest.mark.django_db
def test_filters_choose_the_evaluations_and_methods(client, user) -> None:  # type: ignore[no-untyped-def]
    _import()
    url = "/api/v1/leaderboard/critical-difference/"
    alf = client.get(url, {"environment": "alfworld"}).json()
    assert alf["evaluations"] == sorted(f"ALFWorld / {b}" for b in (
        "Gemma4 26B-A4B", "Gemma4 31B", "Qwen3.5 122B-A10B", "Qwen3.5 27B", "Qwen3.5 35B-A3B", "Qwen3.5 9B"))
    # One environment is one independent unit: no test, unless its backbones are taken as the blocks.
    assert alf["environment"] == ["alfworld"] and alf["critical_difference"] is None
    assert alf["reason"].startswith("the Friedman test needs at least 2 independent environments; 1 chosen")
    within = client.get(url, {"environment": "alfworld", "blocks": "evaluation"}).json()
    assert within["critical_difference"]["num_blocks"] == 6
    assert client.get(url, {"blocks": "backbone"}).json()["errors"]["blocks"]
    # Methods chosen: only they; one of them without the ALFWorld 9B number is left out naming it.
    picked = client.get(url, [("environment", "alfworld"), ("backbone", "Qwen3.5 9B"), ("backbone", "Gemma4 31B"),
                              ("method", "gvl"), ("method", "eureka"), ("method", "verifier"), ("method", "codegen")])
    picked = picked.json()
    assert picked["methods"] == ["codegen", "eureka", "gvl", "verifier"] and len(picked["evaluations"]) == 2
    # Reported and re-scored rows are evaluations of their own (the paper's 24 and the 4 re-scored ones).
    both = client.get(url, [("source", "reported"), ("source", "rescored")]).json()
    assert len(both["evaluations"]) == 28 and sum("(re-scored)" in e for e in both["evaluations"]) == 4
    assert both["left_out"][0]["reason"].endswith("(1 of 28 evaluations)")
    rescored = client.get(url, {"source": "rescored"}).json()
    assert rescored["evaluations"] and all(e.split(" / ")[0].endswith("(re-scored)") for e in rescored["evaluations"])
    ranking = client.get(url, {"metric": "ranking_spearman"}).json()
    assert set(ranking["methods"]) | {m["method"] for m in ranking["left_out"]} == {"ranking", "sdpo", "sdpo-gt", "Δbelief"}
    assert [m["method"] for m in ranking["left_out"]] == ["sdpo-gt"]
    for params, field in (({"source": "nope"}, "source"), ({"modality": "audio"}, "modality")):
        assert client.get(url, params).json()["errors"][field]
        assert client.get("/leaderboard/critical-difference/", params).status_code == 400


@pytest.mark.django_db
def test_the_diagram_is_kept_per_results_version(client, user) -> None:  # type: ignore[no-untyped-def]
    from submissions.importing import published_dataset

    _import()
    choice = aggregates.CDChoice()
    first = _text(client.get("/leaderboard/critical-difference/"))
    kept = aggregates.critical_difference_of(choice)
    assert cache.get(make_template_fragment_key("critical-difference", [evaluations.version(), choice])) is not None
    assert aggregates.critical_difference_of(choice) is kept and _text(client.get("/leaderboard/critical-difference/")) == first
    # A changed reported number (a new version) shows at once.
    sub = Submission.objects.get(import_key="reported:ALFWorld:Qwen3.5 9B:gvl:q:text")
    Result.objects.filter(submission=sub, metric="spearman").update(value=0.987654)
    assert '<td class="num">0.988</td>' in _text(client.get("/leaderboard/critical-difference/"))  # test split: 3 decimals
    assert aggregates.critical_difference_of(choice) is not kept
    assert published_dataset("ALFWorld").key == sub.dataset.key

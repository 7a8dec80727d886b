"""The published QVal v1.0 results: converted data files, re-scoring under the reference
rules, the idempotent import, the figures over them, and queries per page."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from qval import metrics, published

REFERENCE_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "qval-v1.0"


@pytest.fixture(scope="module")
def reference_dir() -> Path:
    if not (REFERENCE_DIR / "evaluations").is_dir():
        pytest.skip(f"QVal v1.0 reference files not found at {REFERENCE_DIR}")
    return REFERENCE_DIR


def _summaries(reference_dir: Path) -> dict[str, dict[str, Any]]:
    """Parsed original summaries by their provenance file path."""
    out = {}
    for path in sorted((reference_dir / "evaluations").glob("*/*/*.json")):
        relative = path.relative_to(reference_dir / "evaluations").as_posix()
        out[f"{published.SUMMARY_PREFIX}/{relative}"] = json.loads(path.read_text())
    return out


def test_data_files_are_the_conversion_of_the_originals(reference_dir: Path) -> None:
    raw = json.loads((reference_dir / "published-results.json").read_text())
    assert json.loads(published.REPORTED_FILE.read_text()) == published.convert_reported(raw)
    provenance, rows = published.reported()
    assert len(rows) == raw["meta"]["counts"]["records"] == 578
    assert provenance == {"repository": "serhez/qval-site", "commit": published.SITE_COMMIT, "file": "shared/data.json"}
    assert len({r.method for r in rows}) == 21 and len({r.environment for r in rows}) == 4
    files = published.rescored_files()
    assert len(files) == 4
    for path in files:
        data = json.loads(path.read_text())
        relative = data["provenance"]["file"].removeprefix(published.SUMMARY_PREFIX + "/")
        original = json.loads((reference_dir / "evaluations" / relative).read_text())
        assert data == published.convert_summary(original, relative)


def _close(a: float | None, b: float | None, tol: float = 1e-9) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= tol)


def test_rescoring_with_the_reference_rules_reproduces_every_stored_number(reference_dir: Path) -> None:
    summaries = _summaries(reference_dir)
    checked = 0
    for path in published.rescored_files():
        for ev in published.rescored(path):
            rows = {r.metric: r for r in published.score_evaluation(ev, bootstrap_resamples=0)}
            summary = summaries[ev.provenance["file"]]
            for entry_path in ev.provenance["entries"]:
                _, gt, _, entry = entry_path.split(".", 3)
                stored = summary["estimations"][gt]["methods"][entry]
                if "per_point_correlations" in stored:
                    want = stored["correlations"]["ranking_spearman"]
                    got = rows["ranking_spearman"]
                    assert _close(got.value, want["mean"]) and _close(got.details["std"], want["std"]), entry_path
                    assert (got.details["num_valid"], got.details["num_skipped"]) == (want["num_valid"], want["num_skipped"])
                    checked += 1
                elif "per_sample" in stored:
                    for metric, agg in stored["aggregate_correlations"].items():
                        samples = rows[metric].details["samples"]
                        for value, sample in zip(samples["values"], stored["per_sample"]):
                            assert _close(value, sample["correlations"][metric]["correlation"]), entry_path
                            checked += 1
                        ours = samples["aggregate"]
                        for key in ("mean", "std", "min", "max", "median"):
                            assert _close(ours[key], agg[key]), (entry_path, metric, key)
                        assert (ours["num_samples"], ours["num_nan"]) == (agg["num_samples"], agg["num_nan"])
                        checked += 1
                else:
                    for metric, want in stored["correlations"].items():
                        got = rows[metric]
                        assert _close(got.value, want["correlation"]), (entry_path, metric)
                        p_ok = _close(got.p_value, want["p_value"]) or (
                            got.p_value is not None and abs(got.p_value - want["p_value"]) <= 1e-9 * abs(want["p_value"]))
                        assert p_ok and got.num_points == want["num_points"], (entry_path, metric)
                        checked += 1
    assert checked > 500


def _import() -> Any:
    from leaderboard.importing import import_results

    return import_results(resamples=0)


@pytest.mark.django_db
def test_import_is_idempotent_and_keeps_provenance(client) -> None:  # type: ignore[no-untyped-def]
    from submissions.models import Result, Submission

    report = _import()
    assert (report.reported, report.rescored) == (578, 75)
    imported = Submission.objects.filter(source__in=Submission.IMPORTED_SOURCES)
    ids = sorted(imported.values_list("id", flat=True))
    results = Result.objects.count()
    assert Submission.objects.filter(source="reported").count() == 578
    assert Result.objects.filter(submission__source="reported").count() == 578
    reported = Submission.objects.filter(source="reported", method_name="gvl").first()
    assert reported.user is None and reported.rules == metrics.REFERENCE_RULES
    assert reported.provenance["repository"] == "serhez/qval-site" and reported.provenance["file"] == "shared/data.json"
    rescored = Submission.objects.filter(source="rescored").first()
    assert rescored.provenance["repository"] == "bethgelab/qval" and rescored.provenance["commit"] == published.REFERENCE_COMMIT
    assert not rescored.dataset.hosted and rescored.dataset.name.endswith("(reported)")

    again = _import()
    assert again.results == 0  # unchanged data: nothing rewritten
    assert sorted(imported.values_list("id", flat=True)) == ids and Result.objects.count() == results

    page = client.get("/leaderboard/?source=reported").content.decode()
    assert "578 rows" in page and "reported by the authors" in page
    assert client.get("/leaderboard/?source=rescored&q=gvl").content.decode().count('data-source="rescored"') == 7
    export = client.get("/leaderboard/?source=rescored&format=json").json()["rows"]
    assert len(export) == 75 and all(r["rules"] == "qval-v1.0" for r in export)
    assert "OpenApps" in client.get("/environments/openapps/").content.decode()
    pair = list(Submission.objects.filter(source="rescored", target="q", dataset=rescored.dataset)[:2])
    refused = client.get(f"/api/v1/compare/?a={pair[0].pk}&b={pair[1].pk}")
    assert refused.status_code == 400 and "imported result" in refused.content.decode()


def _page_figure(html: str) -> dict[str, Any]:
    found = re.search(r'<script id="figure-data" type="application/json">(.*?)</script>', html, re.S)
    assert found, "no figure data on the page"
    return json.loads(found.group(1))


def _points(fig: dict[str, Any]) -> int:
    total = 0
    for trace in fig["data"]:
        if trace["meta"]["kind"] != "points":
            continue
        if trace["type"] == "heatmap":
            total += sum(v is not None for line in trace["z"] for v in line)
        else:
            total += len(trace["x"])
    return total


@pytest.mark.django_db
def test_figures_draw_what_the_database_holds(client) -> None:  # type: ignore[no-untyped-def]
    from submissions.models import Result

    _import()
    base = Result.objects.filter(submission__state="finished", submission__split="test", value__isnull=False)
    cases = {
        "per-family?source=reported": base.filter(submission__source="reported",
                                                  metric__in=["spearman", "ranking_spearman"]).count(),
        "per-family?environment=alfworld&target=q": base.filter(
            submission__dataset__environment__slug="alfworld", submission__target="q",
            metric__in=["spearman", "ranking_spearman"]).count() - 0,
        "heatmap?source=rescored&metric=kendall_tau": base.filter(submission__source="rescored", metric="kendall_tau")
        .values("submission__method__name", "submission__dataset__environment").distinct().count(),
    }
    for query, expected in cases.items():
        name, _, params = query.partition("?")
        fig = _page_figure(client.get(f"/figures/{name}/?{params}").content.decode())
        api = client.get(f"/api/v1/figures/{name}/?{params}").json()
        download = client.get(f"/figures/{name}/?{params}&format=json").json()
        assert _points(fig) == len(api["rows"]) == expected, query
        assert download == api
    for name in ("per-environment", "text-vs-image", "q-vs-v"):
        fig = _page_figure(client.get(f"/figures/{name}/").content.decode())
        assert _points(fig) == len(client.get(f"/api/v1/figures/{name}/").json()["rows"]) > 0, name
    assert client.get("/figures/per-family/?metric=nope").status_code == 400


PAGES = ["/", "/leaderboard/", "/leaderboard/?source=reported&q=gvl&page=2", "/api/v1/leaderboard/?source=rescored",
         "/figures/per-family/", "/figures/per-environment/", "/figures/text-vs-image/", "/figures/q-vs-v/",
         "/figures/heatmap/?by=backbone", "/methods/gvl/", "/environments/frozenlake/", "/api/v1/figures/heatmap/"]


@pytest.mark.django_db
def test_queries_per_page_do_not_grow_with_the_rows(client, django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from leaderboard import evaluations
    from submissions.models import Result, Submission

    _import()

    def counts() -> list[int]:
        out = []
        for url in PAGES:
            evaluations._memo["version"] = None  # a cold memo: the most queries a page makes
            with CaptureQueriesContext(connection) as ctx:
                assert client.get(url).status_code == 200, url
            out.append(len(ctx.captured_queries))
        return out

    before = counts()
    template = Submission.objects.filter(source="reported").first()
    subs = [Submission(**{f.attname: getattr(template, f.attname) for f in Submission._meta.concrete_fields
                          if f.attname not in ("id", "import_key")}) for _ in range(300)]
    for s in Submission.objects.bulk_create(subs):
        Result.objects.create(submission=s, metric="spearman", value=0.1)
    after = counts()
    assert after == before, dict(zip(PAGES, zip(before, after)))
    assert max(after) <= 12, dict(zip(PAGES, after))

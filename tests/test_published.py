"""The published QVal v1.0 results: converted data files, re-scoring under the reference
rules, the idempotent import, the figures over them, and queries per page."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qval import metrics, scoring
from qval.paper.qval_v1 import published
from qval import predictions as qpred

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
                        # the paper's codegen rule: the row's value is the mean of the per-sample values
                        assert _close(rows[metric].value, agg["mean"]) and rows[metric].p_value is None, entry_path
                        assert samples["aggregation"] == scoring.MEAN_OF_SAMPLES and "ci95" not in rows[metric].details
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


def test_predictions_files_and_truth_give_the_scored_numbers() -> None:
    """Each re-scored evaluation's predictions file, parsed as an upload is and scored against
    its environment's truth, gives exactly the rows :func:`score_evaluation` gives; only the
    ranking-only evaluations have no file."""
    without = 0
    for path in published.rescored_files():
        for ev in published.rescored(path):
            data = published.predictions_jsonl(ev)
            if data is None:
                assert ev.values is None and ev.samples is None and ev.per_state is not None
                without += 1
                continue
            truth = published.truth(published.ENVIRONMENTS[ev.environment], ev.target)
            assert list(truth.point_ids) == [f"p{i}" for i in range(len(ev.labels))]
            assert np.array_equal(truth.point_labels, np.array([np.nan if v is None else v for v in ev.labels]),
                                  equal_nan=True)
            preds = qpred.parse(data, "predictions.jsonl", reference_ids=truth.point_ids)
            assert (preds.samples is None) == (ev.samples is None)
            got = scoring.score(truth, preds.ids, preds.scores, samples=preds.samples, bootstrap_resamples=0,
                                rules=metrics.REFERENCE_RULES)
            if preds.samples is not None:  # a sampled predictor: the paper's codegen rule
                got = scoring.mean_of_samples(got)
            want = [r for r in published.score_evaluation(ev, bootstrap_resamples=0) if r.metric != "ranking_spearman"]
            assert [(r.metric, r.value, r.num_points, r.coverage) for r in got] == \
                   [(r.metric, r.value, r.num_points, r.coverage) for r in want], ev.key
    assert without == 15


def test_truth_of_what_is_not_published_is_refused() -> None:
    with pytest.raises(published.PublishedDataError, match="cannot read"):
        published.truth("miniwob", "q")
    with pytest.raises(published.PublishedDataError, match="no labels for target 'v'"):
        published.truth("terminalbench", "v")


def _import() -> Any:
    from submissions.importing import import_results

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
    assert Result.objects.filter(submission__source="reported").count() == 578 + 457  # ρ, τ where printed (not errata)
    reported = Submission.objects.filter(source="reported", method_name="gvl").first()
    assert reported.user is None and reported.rules == metrics.REFERENCE_RULES
    assert reported.provenance["repository"] == "serhez/qval-site" and reported.provenance["file"] == "shared/data.json"
    rescored = Submission.objects.filter(source="rescored").first()
    assert rescored.provenance["repository"] == "bethgelab/qval" and rescored.provenance["commit"] == published.REFERENCE_COMMIT
    assert not rescored.dataset.hosted and rescored.dataset.name.endswith("(reported)")
    rescored_rows = Submission.objects.filter(source="rescored").order_by("pk")
    files = list(rescored_rows.values_list("predictions", "sha256"))
    assert sum(bool(name) for name, _ in files) == 60 and all(bool(name) == bool(sha) for name, sha in files)

    again = _import()
    assert again.results == 0  # unchanged data: nothing rewritten
    assert sorted(imported.values_list("id", flat=True)) == ids and Result.objects.count() == results
    assert list(rescored_rows.values_list("predictions", "sha256")) == files

    page = client.get("/leaderboard/?source=reported").content.decode()
    assert "578 rows" in page and "reported by the authors" in page
    assert client.get("/leaderboard/?source=rescored&q=gvl").content.decode().count('data-source="rescored"') == 7
    export = json.loads(client.get("/leaderboard/?source=rescored&format=json").getvalue())["rows"]
    assert len(export) == 75 and all(r["rules"] == "qval-v1.0" for r in export)
    assert "OpenApps" in client.get("/environments/openapps/").content.decode()

    # Rows imported before the import kept predictions files (layout 1) get them on the next import.
    for sub in rescored_rows:
        sub.provenance["data_sha256"] = sub.provenance["data_sha256"].rsplit(":", 1)[0]
        sub.save(update_fields=["provenance"])
    rescored_rows.update(predictions="", sha256="")
    assert _import().results == Result.objects.filter(submission__source="rescored").count()
    assert sum(bool(name) for name in rescored_rows.values_list("predictions", flat=True)) == 60


@pytest.mark.django_db
def test_rescored_rows_are_compared_on_their_published_predictions(client, settings, api, user, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
    """Two re-scored rows of one environment and target are compared as two of ours are: on
    the full points each metric's A and B are the stored values and A − B their difference;
    reported and ranking-only rows, and rows of ours, are refused saying why; the
    critical-difference table counts the re-scored rows."""
    from submissions.models import Submission

    from .test_site import actor_points, csv_bytes, finish, upload

    settings.QVAL_BOOTSTRAP_RESAMPLES = 200
    _import()
    rows = Submission.objects.filter(source="rescored", target="q")

    def row(env: str, method: str) -> Submission:
        return rows.get(dataset__slug=f"qval-v1.0-{env}", method_name=method)

    def stored(sub: Submission) -> dict[str, Any]:
        return {r.metric: r for r in sub.results.all()}

    def compare(a: Submission, b: Submission) -> dict[str, Any]:
        resp = client.get(f"/api/v1/compare/?a={a.pk}&b={b.pk}")
        assert resp.status_code == 200, resp.content
        return resp.json()

    direct, gvl, sampled = row("alfworld", "direct-single"), row("alfworld", "gvl"), row("alfworld", "codegen")

    def compared_value(r: Any) -> float:  # a sampled row is compared on its mean prediction (codegen-avg's rule)
        return r.details["mean_prediction"]["value"] if "mean_prediction" in r.details else r.value

    for a, b in ((direct, gvl), (sampled, direct)):  # both score all 100 points (codegen: 3 samples, their mean)
        got = compare(a, b)
        assert (got["dataset"], got["target"], got["rules"]) == ("qval-v1.0-alfworld@1.0", "q", "qval-v1.0")
        assert len(got["notes"]) == (a == sampled) and (a != sampled or "codegen rule" in got["notes"][0])
        sa, sb = stored(a), stored(b)
        assert {m["metric"] for m in got["metrics"]} <= set(sa)
        for m in got["metrics"]:
            ra, rb = sa[m["metric"]], sb[m["metric"]]
            assert m["num_points"] == ra.num_points == rb.num_points == 100, m
            assert m["rho_a"] == pytest.approx(compared_value(ra), abs=1e-12)
            assert m["rho_b"] == pytest.approx(compared_value(rb), abs=1e-12)
            assert m["difference"] == pytest.approx(compared_value(ra) - compared_value(rb), abs=1e-12)
            assert m["resamples"] == 200 and m["p_value"] is not None and m["ci95"][0] < m["ci95"][1]
    swapped = compare(gvl, direct)
    assert [m["difference"] for m in swapped["metrics"]] == pytest.approx(
        [-m["difference"] for m in compare(direct, gvl)["metrics"]])

    # FrozenLake's verifier scores 239 points, direct-single the first 100: compared on those 100.
    verifier, short = row("frozenlake", "verifier"), row("frozenlake", "direct-single")
    for m in compare(verifier, short)["metrics"]:
        assert m["num_points"] == stored(short)[m["metric"]].num_points <= 100
        assert m["rho_b"] == pytest.approx(stored(short)[m["metric"]].value, abs=1e-12)
        assert m["rho_a"] != pytest.approx(stored(verifier)[m["metric"]].value, abs=1e-6)

    page = client.get(f"/compare/?a={direct.pk}&b={gvl.pk}").content.decode()
    assert 'id="comparison"' in page and 'data-metric="spearman"' in page and "qval-v1.0" in page
    choices = client.get(f"/compare/?a={direct.pk}").content.decode()
    ranking_only = row("alfworld", "ranking")
    assert f'value="{gvl.pk}"' in choices and f'value="{ranking_only.pk}"' not in choices

    reported = Submission.objects.filter(source="reported", dataset=direct.dataset, target="q").first()
    ids, labels = actor_points(frozenlake, "test")
    ours = upload(api, csv_bytes(ids, labels))["id"]
    finish(ours)
    client.force_login(user)  # a user's own row is compared by its owner only
    for other, says in ((reported, "reported by the authors: only its numbers are published"),
                        (ranking_only, "per-state ranking correlations only"),
                        (Submission.objects.get(pk=ours), "differ in dataset (qval-v1.0-alfworld@1.0 vs")):
        resp = client.get(f"/api/v1/compare/?a={direct.pk}&b={other.pk}")
        assert resp.status_code == 400 and says in resp.content.decode(), resp.content

    # Friedman/Nemenyi use each row's stored value: re-scored rows count as evaluations of their own.
    table = client.get("/api/v1/leaderboard/critical-difference/?split=test&target=q&metric=spearman"
                       "&source=rescored&source=reported").json()
    evaluation = f"ALFWorld (re-scored) / {direct.backbone_name}"
    assert sum("(re-scored)" in e for e in table["evaluations"]) == 4  # one backbone per environment
    cell = table["matrix"][table["evaluations"].index(evaluation)][table["methods"].index("direct-single")]
    assert cell == stored(direct)["spearman"].value


def _page_figure(client: Any, url: str) -> dict[str, Any]:
    """The Plotly figure the page at ``url`` draws: what its script fetches from the figure's ``data-src``."""
    found = re.search(r'<div id="figure"[^>]* data-src="([^"]+)"', client.get(url).content.decode())
    assert found, "no figure on the page"
    src = html.unescape(found.group(1))
    resp = client.get(url.split("?")[0] + src if src.startswith("?") else src)
    assert resp.status_code == 200 and resp["Content-Type"] == "application/json"
    return json.loads(resp.content)


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
    one = base.filter(submission__target="q", submission__modality="text")  # a figure never pools targets or modalities
    cases = {
        "per-family?source=reported": one.filter(submission__source="reported",
                                                 metric__in=["spearman", "ranking_spearman"]).count(),
        "per-family?environment=alfworld&target=q&source=any": one.filter(
            submission__dataset__environment__slug="alfworld",
            metric__in=["spearman", "ranking_spearman"]).count() - 0,
        "heatmap?source=rescored&metric=kendall_tau": one.filter(submission__source="rescored", metric="kendall_tau")
        .values("submission__method__name", "submission__dataset__environment").distinct().count(),
    }
    for query, expected in cases.items():
        name, _, params = query.partition("?")
        fig = _page_figure(client, f"/figures/{name}/?{params}")
        api = client.get(f"/api/v1/figures/{name}/?{params}").json()
        download = client.get(f"/figures/{name}/?{params}&format=json").json()
        assert _points(fig) == len(api["rows"]) == expected, query
        assert download == api
    for name in ("per-environment", "text-vs-image", "q-vs-v"):
        fig = _page_figure(client, f"/figures/{name}/")
        assert _points(fig) == len(client.get(f"/api/v1/figures/{name}/").json()["rows"]) > 0, name
    assert client.get("/figures/per-family/?metric=nope").status_code == 400


PAGES = ["/", "/leaderboard/", "/leaderboard/?source=reported&q=gvl&page=2", "/api/v1/leaderboard/?source=rescored",
         "/figures/per-family/", "/figures/per-environment/", "/figures/text-vs-image/", "/figures/q-vs-v/",
         "/figures/heatmap/?by=backbone", "/methods/gvl/", "/environments/frozenlake/", "/api/v1/figures/heatmap/",
         "/figures/per-family/?format=plotly", "/methods/gvl/?figure=q-vs-v&format=plotly", "/leaderboard/aggregate/",
         "/leaderboard/critical-difference/?metric=kendall_tau", "/api/v1/leaderboard/aggregate/?target=v",
         "/api/v1/leaderboard/critical-difference/"]


@pytest.mark.django_db
def test_queries_per_page_do_not_grow_with_the_rows(client, django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from board import evaluations
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


WARM_PAGES = ["/", "/leaderboard/", "/boards/", "/boards/qval-v1.0-terminalbench@1.0:q:text/", "/environments/frozenlake/",
              "/methods/gvl/", "/results/{result}/", "/datasets/qval-v1.0-terminalbench@1.0/", "/published/consistency/",
              "/published/findings/", "/how-we-score/", "/compare/"]
GROWING = re.compile(r"\bCOUNT\(|\bGROUP BY\b|\bDISTINCT\b|\(SELECT\b")
"""What a query whose cost grows with the submissions or results looks like: a count, a grouping, a distinct or a
subquery over them."""


@pytest.mark.django_db
def test_warm_pages_make_no_query_that_grows_with_the_rows(client) -> None:  # type: ignore[no-untyped-def]
    """Once a results version's values are kept, a page reads the version, rows by key and bounded lists: no count,
    grouping, distinct or subquery, whose cost follows the number of rows (the result page's on-board check and
    reference rows, the published dataset page's counts by source were such)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from board.results import public_results

    _import()
    result = public_results().filter(source="rescored").order_by("pk").first()
    assert result is not None
    growing = {}
    for page in WARM_PAGES:
        url = page.format(result=result.pk)
        assert client.get(url).status_code == 200, url  # the first request keeps what the version allows
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(url).status_code == 200, url
        found = [q["sql"] for q in ctx.captured_queries if GROWING.search(q["sql"])]
        if found:
            growing[url] = found
    assert not growing, growing


@pytest.mark.django_db
def test_the_results_version_follows_every_write_to_the_board(client) -> None:  # type: ignore[no-untyped-def]
    """The triggers bump the results version on every write the board shows (a result, a finished
    submission, a method) and not on a running job's heartbeat; the board then shows the write."""
    from django.utils import timezone

    from board import evaluations
    from leaderboard.models import Method
    from submissions.models import Result, Submission

    _import()
    row = Submission.objects.filter(source="reported", method__name="gvl").first()
    running = Submission.objects.create(**{f.attname: getattr(row, f.attname) for f in Submission._meta.concrete_fields
                                           if f.attname not in ("id", "import_key", "state", "finished_at")})
    assert running.state == Submission.RECEIVED
    seen = [evaluations.version()]

    def bumped() -> bool:
        seen.append(evaluations.version())
        return seen[-1] != seen[-2]

    Submission.objects.filter(pk=running.pk).update(heartbeat_at=timezone.now())
    assert not bumped()
    Submission.objects.filter(pk=running.pk).update(state=Submission.FINISHED, finished_at=timezone.now())
    assert bumped()
    Result.objects.create(submission=running, metric="spearman", value=0.123456)
    assert bumped()
    assert "0.123" in client.get("/leaderboard/?q=gvl&sort=spearman").content.decode()
    Result.objects.filter(submission=running).update(value=-0.987654)
    assert bumped()
    assert "-0.988" in client.get("/leaderboard/?q=gvl&sort=spearman").content.decode()
    Method.objects.filter(name="gvl").update(family="direct")
    assert bumped()
    Submission.objects.filter(pk=running.pk).delete()
    assert bumped()
    assert "-0.988" not in client.get("/leaderboard/?q=gvl&sort=spearman").content.decode()


@pytest.mark.django_db
def test_derived_values_follow_the_latest_version_and_drop_the_oldest(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """What pages derive from the evaluations is kept per results version: a value computed from rows read
    before a write does not displace what was computed after it, and a full memo drops its oldest value
    only."""
    from board import evaluations
    from submissions.models import Result

    _import()
    calls: list[str] = []

    def make(name: str) -> Any:
        return lambda rows: calls.append(name) or len(rows)

    def slow_page(rows: list[Any]) -> int:  # a result lands and another request reads it meanwhile
        Result.objects.filter(pk=Result.objects.order_by("pk").first().pk).update(value=0.5)
        evaluations.derived("after", make("after"))
        return len(rows)

    evaluations.derived("before", slow_page)
    evaluations.derived("after", make("after"))
    assert calls == ["after"]  # computed once, at the newer version

    monkeypatch.setattr(evaluations, "DERIVED_MAX", 3)
    for name in ("a", "b", "c", "a", "b"):
        evaluations.derived(name, make(name))
    assert calls[1:] == ["a", "b", "c"]  # "c" dropped "after", the oldest of three; "a" and "b" stayed
    evaluations.derived("after", make("after"))
    assert calls[1:] == ["a", "b", "c", "after"]


@pytest.mark.django_db
def test_the_board_filters_one_method_exactly(client) -> None:  # type: ignore[no-untyped-def]
    """``?method=`` keeps that method's rows only (not every method whose name contains it), on the board, its
    API and the method page (whose link to all of its results uses it)."""
    from board import views
    from submissions.models import Submission

    _import()
    expected = Submission.objects.filter(state="finished", method__name="codegen").count()
    assert Submission.objects.filter(state="finished", method__name__contains="codegen").count() > expected > 0
    api = client.get("/api/v1/leaderboard/?method=codegen&page_size=1000").json()
    assert api["count"] == expected and {r["method"] for r in api["results"]} == {"codegen"}
    page = client.get("/leaderboard/?method=codegen").content.decode()
    assert f"{expected} rows" in page and 'name="method" value="codegen"' in page
    method_page = client.get("/methods/codegen/").content.decode()
    assert method_page.count("<tr data-submission=") == min(expected, views.RESULTS_SHOWN)


@pytest.mark.django_db
def test_each_view_of_the_board_renders_its_own_rows(client) -> None:  # type: ignore[no-untyped-def]
    """The rendered rows are cached per results version and view: pages, sorts, filters and searches
    each get theirs (compared with the API, which renders nothing)."""
    _import()

    def shown(query: str) -> list[int]:
        html = client.get(f"/leaderboard/?{query}").content.decode()
        return [int(i) for i in re.findall(r'<tr data-submission="(\d+)"', html)]

    def api(query: str) -> list[int]:
        return [r["submission_id"] for r in client.get(f"/api/v1/leaderboard/?{query}&page_size=50").json()["results"]]

    views = ["source=reported", "source=reported&page=2", "source=reported&sort=spearman",
             "source=reported&sort=spearman&page=2", "source=rescored", "source=reported&environment=alfworld", "method=gvl"]
    for query in views + views:  # the second round is served from the cache
        assert shown(query) == api(query), query
    assert len({tuple(shown(q)) for q in views}) == len(views)


@pytest.mark.django_db
def test_every_published_dataset_page_answers_with_the_papers_summary(client) -> None:  # type: ignore[no-untyped-def]
    """The not-hosted QVal v1.0 datasets have pages (they answered 500: no states): the paper's
    Table 2 column, the counts of imported rows, and that nothing of the inputs is hosted."""
    from submissions.models import Submission

    from leaderboard.models import Dataset

    _import()
    _, paper = published.paper_environments()
    for ds in Dataset.objects.filter(hosted=False):
        env = next(e for e in paper.values() if published.ENVIRONMENTS[e.name] == ds.environment.slug)
        resp = client.get(f"/datasets/{ds.key}/")
        assert resp.status_code == 200, ds.key
        page = resp.content.decode()
        assert "not hosted here" in page and env.reference_policy in page and f">{env.eval_points}<" in page
        reported = Submission.objects.filter(dataset=ds, source="reported").count()
        assert reported > 0 and f'<td class="num">{reported}</td>' in page
        assert ds.modalities == list(env.modalities)
    assert paper["TerminalBench"].modalities == ("text",) and not paper["TerminalBench"].v_labels
    assert paper["FrozenLake"].website_points == 239 and paper["FrozenLake"].eval_points == 100


@pytest.mark.django_db
def test_a_rolled_back_write_never_gives_its_version_to_a_later_one() -> None:
    """Once the version row exists (a flushed test database keeps one), a write rolled back and a
    later write must not read the same version: a page memo of the first would be served for the second."""
    from django.db import transaction

    from board import evaluations
    from leaderboard.models import Method

    Method.objects.create(name="first-write", family="other")  # the row exists from here on
    try:
        with transaction.atomic():
            Method.objects.create(name="rolled-back", family="other")
            rolled_back = evaluations.version()
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    Method.objects.create(name="kept", family="other")
    assert evaluations.version() != rolled_back


@pytest.mark.django_db
def test_reported_rows_show_the_authors_points_and_date_and_what_they_do_not_report(client) -> None:  # type: ignore[no-untyped-def]
    """A reported row's points are the authors' count for its environment (ρ: the website data's
    ``num_points``; state-local ρ: the paper's ranking points), its date is the paper's (kept in the
    converted data file with where it comes from), and a metric they do not publish reads *not reported*
    with a legend of its own, never *n/a*."""
    paper = published.paper()
    assert (paper.arxiv, paper.date.isoformat()) == ("2606.32034v1", "2026-06-30") and paper.date_source
    raw = json.loads(published.REPORTED_FILE.read_text())
    _, envs = published.paper_environments()
    _import()
    rows = json.loads(client.get("/leaderboard/?source=reported&format=json").getvalue())["rows"]
    assert len(rows) == 578
    for row in rows:
        env = row["environment"]
        want = raw["environments"][env]["num_points"] if row["spearman"] is not None else envs[env].ranking_points
        assert row["num_points"] == want > 0 and row["date"].startswith("2026-06-30"), row
    assert {r["num_points"] for r in rows if r["spearman"] is not None} == {106, 239, 94, 118}
    page = re.sub(r"\s+", " ", client.get("/leaderboard/", {"source": "reported", "q": "gvl"}).content.decode())
    # τ where the paper prints one (qval.paper_tau), *not reported* where it prints none.
    assert sum(r["kendall_tau"] is not None for r in rows) == 457  # the 10 errata's τ are another number's
    tau_cells = re.findall(r'data-metric="kendall_tau">(.*?)</td>', page)
    assert tau_cells and any("not reported" not in c for c in tau_cells)
    page = re.sub(r"\s+", " ", client.get("/leaderboard/", {"source": "reported", "q": "ranking"}).content.decode())
    tau_cells = re.findall(r'data-metric="kendall_tau">(.*?)</td>', page)
    assert tau_cells and all("not reported" in c for c in tau_cells)
    assert 'id="not-reported-note"' in page and "2026-06-30" in page
    # Our own rows keep n/a for an undefined τ; re-scored rows keep their import date and scored points.
    rescored = json.loads(client.get("/leaderboard/?source=rescored&format=json").getvalue())["rows"]
    assert rescored and not any(r["date"].startswith("2026-06-30") for r in rescored)
    # The method page's results table and a board of the paper's numbers say the same.
    method = client.get("/methods/gvl/").content.decode()
    assert "not reported" in method and 'id="not-reported-note"' in method
    board = client.get("/boards/qval-v1.0-alfworld@1.0:q:text/", {"format": "json"}).json()["rows"]
    paper_rows = [r for r in board if r["source"] == "reported"]
    assert paper_rows and all(r["num_points"] == 106 and r["date"].startswith("2026-06-30") for r in paper_rows)

"""Which rows a figure or an aggregate shows (``?source=``, :data:`board.boards.VIEWS`): by default the
numbers the QVal v1.0 authors report, never pooled with ours; re-scored, verified (the platform's own runs),
self-reported (uploaded files) and *any* on request, each page saying which it shows; and the home page's
figure is the paper's Figure 2 over the reported rows."""

from __future__ import annotations

import html
import re

import pytest

from qval import families, metric_registry
from submissions.models import Submission
from tests.test_boards import run

pytestmark = pytest.mark.django_db

FIGURE_NAMES = ("per-family", "per-environment", "text-vs-image", "q-vs-v", "heatmap")


@pytest.fixture
def rows(user):  # type: ignore[no-untyped-def]
    """The authors' imported rows, plus on their FrozenLake dataset (test, Q, text) a user's uploaded file and a
    baseline the platform ran, both at ρ = 1 as family Other: ``(upload, baseline)``."""
    from submissions.importing import import_results, published_dataset

    import_results(resamples=0)
    dataset = published_dataset("FrozenLake")
    upload = run(dataset, user, "probe-file", 1.0, None, kind=Submission.KIND_FILE)
    baseline = run(dataset, user, "goal-distance", 0.999, (0.99, 1.0))
    return upload, baseline


def _json(client, url: str, **params: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    resp = client.get(url, {**params, "format": "json"})
    assert resp.status_code == 200, (url, params, resp.content[:300])
    return resp.json()


def test_a_figure_shows_the_reported_rows_unless_another_source_is_picked(client, rows) -> None:  # type: ignore[no-untyped-def]
    upload, baseline = rows
    default = _json(client, "/figures/per-family/")
    assert default["source"] == "reported" and default["rows"]
    assert {r["source"] for r in default["rows"]} == {"reported"}
    assert {r["submission_id"] for r in default["rows"]}.isdisjoint({upload.pk, baseline.pk})
    assert {r["method"] for r in default["rows"]}.isdisjoint({"probe-file", "goal-distance"})
    assert client.get("/api/v1/figures/per-family/").json() == default  # the API: the same rows

    picked = {source: {r["submission_id"] for r in _json(client, "/figures/per-family/", source=source)["rows"]}
              for source in ("self-reported", "verified", "rescored", "any")}
    assert picked["self-reported"] == {upload.pk}
    assert picked["verified"] == {baseline.pk}
    assert picked["rescored"] and {r["source"] for r in _json(client, "/figures/per-family/", source="rescored")["rows"]} == {"rescored"}
    assert picked["any"] >= {upload.pk, baseline.pk} | picked["rescored"] | {r["submission_id"] for r in default["rows"]}

    for name in FIGURE_NAMES:  # every figure: the default holds neither row, the pooled view both methods
        shown = {r["method"] for r in _json(client, f"/figures/{name}/")["rows"]}
        assert not shown & {"probe-file", "goal-distance"}, name
    heat = {r["method"] for r in _json(client, "/figures/heatmap/", source="any")["rows"]}
    assert {"probe-file", "goal-distance"} <= heat

    page = client.get("/figures/per-family/").content.decode()
    caption = re.search(r'id="figure-slice">(.*?)</p>', page, re.S)
    assert caption and "reported by the authors" in caption.group(1)
    chosen = client.get("/figures/per-family/", {"source": "verified"}).content.decode()
    assert "rows the platform ran" in re.search(r'id="figure-slice">(.*?)</p>', chosen, re.S).group(1)  # type: ignore[union-attr]
    assert re.search(r'<option value="verified"\s+selected>', chosen)
    for old in ("baseline", "user", "nope"):  # the submissions' own source names are not a figure's
        resp = client.get("/figures/per-family/", {"source": old, "format": "json"})
        assert resp.status_code == 400 and "self-reported" in resp.json()["errors"]["source"][0]


def test_the_paper_figures_and_aggregates_keep_the_same_sources(client, rows) -> None:  # type: ignore[no-untyped-def]
    upload, baseline = rows
    fig2 = {r["method"] for r in _json(client, "/figures/paper/fig2/")["rows"]}
    assert fig2 and not fig2 & {"probe-file", "goal-distance"}
    assert {r["method"] for r in _json(client, "/figures/paper/fig2/", source="verified")["rows"]} == {"goal-distance"}

    aggregate = client.get("/api/v1/leaderboard/aggregate/").json()
    assert aggregate["source"] == "reported" and aggregate["methods"]
    assert not {m["method"] for m in aggregate["methods"]} & {"probe-file", "goal-distance"}
    for source, method in (("self-reported", "probe-file"), ("verified", "goal-distance")):
        got = client.get("/api/v1/leaderboard/aggregate/", {"source": source}).json()
        assert {m["method"] for m in got["methods"]} == {method}, source
    pooled = {m["method"] for m in client.get("/api/v1/leaderboard/aggregate/", {"source": "any"}).json()["methods"]}
    assert {"probe-file", "goal-distance"} <= pooled and len(pooled) > 2
    page = client.get("/leaderboard/aggregate/").content.decode()
    assert 'data-method="gvl"' in page and 'data-method="probe-file"' not in page
    assert "reported by the authors" in re.search(r'id="figure-slice">(.*?)</p>', page, re.S).group(1)  # type: ignore[union-attr]
    own = client.get("/leaderboard/aggregate/", {"source": "self-reported"}).content.decode()
    assert 'data-method="probe-file"' in own and 'data-method="gvl"' not in own
    assert client.get("/api/v1/leaderboard/aggregate/", {"source": "user"}).status_code == 400


def test_a_method_page_opens_on_a_source_it_has(client, rows) -> None:  # type: ignore[no-untyped-def]
    upload, _ = rows
    mine = _json(client, "/methods/probe-file/", figure="per-family")
    assert mine["source"] == "self-reported" and {r["submission_id"] for r in mine["rows"]} == {upload.pk}
    assert _json(client, "/methods/gvl/", figure="per-family")["source"] == "reported"
    assert _json(client, "/methods/probe-file/", figure="per-family", source="reported")["rows"] == []
    assert "uploaded predictions files" in client.get("/methods/probe-file/").content.decode()


def test_the_home_page_figure_is_figure_2(client, rows) -> None:  # type: ignore[no-untyped-def]
    from board import paper_figures

    page = client.get("/").content.decode()
    src = re.search(r'<div id="figure"[^>]* data-src="([^"]+)"', page)
    assert src and html.unescape(src.group(1)) == "/figures/paper/fig2/?format=plotly"
    assert 'href="/figures/paper/fig2/"' in page and 'href="/figures/paper/fig3/"' in page
    assert "reported by the authors" in re.search(r'id="figure-slice">(.*?)</p>', page, re.S).group(1)  # type: ignore[union-attr]
    fig, _ = paper_figures.home_figure()
    assert fig.rows == _json(client, "/figures/paper/fig2/")["rows"]
    assert fig.plotly_bytes == client.get("/figures/paper/fig2/", {"format": "plotly"}).content
    methods = {r["method"] for r in fig.rows}
    assert {"direct-16", "codegen", "vip", "ranking"} <= methods and not methods & {"probe-file", "goal-distance"}


def _selects(page: str) -> dict[str, tuple[list[str], str | None]]:
    """The filter form's selects: name -> (option labels, the selected option's value)."""
    form = page[page.index('id="figure-filters"'):page.index("</form>")]
    found = {}
    for name, body in re.findall(r'<select name="([^"]+)"[^>]*>(.*?)</select>', form, re.S):
        options = re.findall(r'<option value="([^"]*)"( selected)?>([^<]*)</option>', body)
        found[name] = ([html.unescape(label) for _, _, label in options],
                       next((value for value, chosen, _ in options if chosen), None))
    return found


def test_each_figure_page_offers_its_own_filters(client, rows) -> None:  # type: ignore[no-untyped-def]
    """The figure, environment, method and paper figure pages share one form: each offers the filters
    its view reads, with the chosen values selected and a no-filter option only where one exists."""
    heat = _selects(client.get("/figures/heatmap/", {"by": "backbone", "split": "all"}).content.decode())
    assert heat["by"] == (["× environment", "× backbone"], "backbone")
    assert heat["split"][1] == "all" and "any split" not in heat["split"][0]  # every split is a choice, not "any"
    assert heat["environment"][0][0] == "any environment" and heat["metric"][0][0] != "any metric"
    assert "by" not in _selects(client.get("/figures/per-family/").content.decode())

    env = _selects(client.get("/environments/frozenlake/").content.decode())
    assert "environment" not in env and "family" in env  # the page's own environment is fixed
    method = _selects(client.get("/methods/probe-file/").content.decode())
    assert "source" in method and method["source"][1] == "self-reported"  # opened on a source it has

    fig2 = _selects(client.get("/figures/paper/fig2/").content.decode())
    assert fig2["target"][0][0] == "the paper's target per family" and "family" not in fig2
    assert metric_registry.get("ranking_spearman").label not in fig2["metric"][0]  # the paper picks it per family
    fig4 = _selects(client.get("/figures/paper/fig4-left/", {"family": "ranking"}).content.decode())
    assert fig4["family"] == (["the paper's families", *(n for _, n in families.CHOICES)], "ranking")
    bad = client.get("/figures/heatmap/", {"by": "colour"})
    assert bad.status_code == 400 and _selects(bad.content.decode())["by"][1] is None  # refused, nothing chosen


def test_generic_figures_never_pool_targets_or_modalities_and_keep_intervals_in_range(client, rows) -> None:  # type: ignore[no-untyped-def]
    """The per-family and per-environment pages pooled Q with V and text with image by default, and 11 of 57
    per-environment intervals left [-1, 1] (error bars to ±2.3 on a ρ axis)."""
    for name in ("per-family", "per-environment", "heatmap"):
        got = _json(client, f"/figures/{name}/")
        assert (got["filters"].get("target"), got["filters"].get("modality")) == ("q", "text"), name
    family = _json(client, "/figures/per-family/")["rows"]
    assert {(r["target"], r["modality"]) for r in family} == {("q", "text")}
    assert {(r["target"], r["modality"]) for r in _json(client, "/figures/per-family/", target="v",
                                                         modality="image")["rows"]} == {("v", "image")}
    for params in ({}, {"target": "v"}, {"modality": "image"}):
        env = _json(client, "/figures/per-environment/", **params)["rows"]
        assert env and all(-1.0 <= r["ci_low"] <= r["mean"] <= r["ci_high"] <= 1.0 for r in env if r["ci_low"] is not None)
    page = client.get("/figures/per-family/").content.decode()
    assert "any target" not in page and "any modality" not in page

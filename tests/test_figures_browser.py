"""The figure pages in a real Chromium (Debian's), driven by Playwright, over the imported
QVal v1.0 results: what Plotly draws equals what the database holds for the filters, a
changed filter is reproduced by its permalink, and the downloaded data equals the API's; the published
findings and consistency pages show what :mod:`qval.findings` and :mod:`qval.consistency` compute, on a
desktop and a phone.  A screenshot of every page is saved under ``test-artifacts/figures/``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_browser import CHROMIUM

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "figures"

COUNT_POINTS = """() => {
  const el = document.getElementById('figure');
  let traces = 0, points = 0;
  for (const t of el.data) {
    traces += 1;
    if (!t.meta || t.meta.kind !== 'points') continue;
    points += t.type === 'heatmap' ? t.z.flat().filter(v => v !== null).length : t.x.length;
  }
  return {traces, points};
}"""


FIGURE_SOURCES = [(name, source) for name in ("per-family", "per-environment", "heatmap")
                  for source in ("", "reported", "rescored", "any")]
"""Each figure under its default source (none named: the authors' reported rows), each imported source, and
*any* (both pooled, on request only)."""


@pytest.fixture
def imported(transactional_db) -> dict[tuple[str, str], tuple[int, int]]:  # type: ignore[no-untyped-def]
    """Import the published results; the (traces, points) each figure should then draw, read
    from the database before the browser starts (its event loop forbids database calls)."""
    from submissions.importing import import_results

    import_results(resamples=0)
    return {key: _expected(*key) for key in FIGURE_SOURCES}


@pytest.fixture
def published(imported) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """What the findings and consistency pages should show over the imported rows, computed before the
    browser starts: each claim's verdict and numbers, and each consistency cell's numbers and reason."""
    from board.consistency import rescored_values
    from board.findings import current_findings
    from qval import consistency
    from qval.paper.qval_v1 import published as qpublished

    cells = consistency.table(qpublished.reported()[1], rescored_values())
    return {
        "findings": {f.claim.id: (f.verdict, f.verdict_label, dict(f.shown_numbers)) for f in current_findings()},
        "cells": {f"{c.environment}:{c.backbone}:{c.method}:{c.target}": (
            c.reported, c.rescored, c.difference, c.why,
            "not read" if c.paper is None else "not printed" if c.paper.value is None
            else f"{c.paper.value:.3f} (Table {c.paper.table})") for c in cells},
    }


@pytest.fixture
def page():  # type: ignore[no-untyped-def]
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed; `make test` installs it (scripts/install.sh)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        pg = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
        pg.set_default_timeout(30_000)
        yield pg
        browser.close()


def _expected(name: str, source: str) -> tuple[int, int]:
    """(traces, points) a figure should draw for ``source`` on the test split, from the database: under the page's
    default target and modality (:data:`board.figures.UNPOOLED`), Q and text, never pooled."""
    from board.figures import UNPOOLED
    from submissions.models import Result

    base = Result.objects.filter(submission__state="finished", submission__split="test", value__isnull=False,
                                 **{f"submission__{k}": v for k, v in UNPOOLED[name].items()})
    if (source or "reported") != "any":
        base = base.filter(submission__source=source or "reported")
    if name == "per-family":
        per_panel = [base.filter(metric=m) for m in ("spearman", "ranking_spearman")]
        fams = [qs.values("submission__method__family").distinct().count() for qs in per_panel]
        return 2 * sum(fams), sum(qs.count() for qs in per_panel)
    rho = base.filter(metric="spearman")
    if name == "heatmap":
        return 1, rho.values("submission__method__name", "submission__dataset__environment").distinct().count()
    if name == "per-environment":
        return (rho.values("submission__dataset__environment").distinct().count(),
                rho.values("submission__method__name", "submission__dataset__environment").distinct().count())
    raise AssertionError(name)


TRACES = "() => JSON.stringify(document.getElementById('figure').data.map(t => [t.name, t.x, t.y]))"


def _drawn(page) -> None:  # type: ignore[no-untyped-def]
    """Wait until the page has fetched its figure's traces and Plotly has drawn them (the
    figure arrives after the page's load event, so a navigation alone does not wait for it)."""
    page.wait_for_selector("#figure:not([aria-busy]) .main-svg")


TITLE_INSIDE = """() => {
  const figure = document.querySelector('#figure').getBoundingClientRect();
  const title = document.querySelector('#figure .gtitle').getBoundingClientRect();
  return title.width > 0 && title.left >= figure.left - 1 && title.right <= figure.right + 1;
}"""


def _figure(page) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    _drawn(page)
    return page.evaluate(COUNT_POINTS)


def test_figure_pages(live_server, imported, page) -> None:  # type: ignore[no-untyped-def]
    base = live_server.url
    for name, source in FIGURE_SOURCES:
        page.goto(f"{base}/figures/{name}/" + (f"?source={source}" if source else ""))
        drawn = _figure(page)
        assert (drawn["traces"], drawn["points"]) == imported[(name, source)], (name, source, drawn)
        page.screenshot(path=str(ARTIFACTS / f"{name}{'-' + source if source else ''}.png"), full_page=True)

    for name in ("text-vs-image", "q-vs-v"):
        page.goto(f"{base}/figures/{name}/")
        api = json.loads(page.context.request.get(f"{base}/api/v1/figures/{name}/").text())
        assert _figure(page)["points"] == len(api["rows"]) > 0, name
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    # Change a filter: the page reloads with it, and its permalink reproduces the figure.
    page.goto(f"{base}/figures/per-family/")
    with page.expect_navigation():
        page.select_option("select[name=source]", "rescored")
    assert "source=rescored" in page.url
    with page.expect_navigation():
        page.select_option("select[name=environment]", "alfworld")
    _drawn(page)
    changed = page.evaluate(TRACES)
    permalink = page.get_attribute("#permalink", "href")
    assert "environment=alfworld" in permalink and "source=rescored" in permalink
    other = page.context.browser.new_page()
    other.goto(page.url.split("?")[0] + permalink)
    _drawn(other)
    assert other.evaluate(TRACES) == changed
    other.close()

    # Download the data behind the figure and compare it with the API.
    with page.expect_download() as dl:
        page.click("#download-json")
    downloaded = json.loads(Path(dl.value.path()).read_text())
    api = json.loads(page.context.request.get(f"{base}/api/v1/figures/per-family/?source=rescored&environment=alfworld").text())
    assert downloaded == api and len(api["rows"]) == page.evaluate(COUNT_POINTS)["points"]
    with page.expect_download() as dl:
        page.click("#download-csv")
    assert len(Path(dl.value.path()).read_text().strip().splitlines()) == len(api["rows"]) + 1
    page.screenshot(path=str(ARTIFACTS / "per-family-filtered.png"), full_page=True)

    for url, shot in (("/", "home"), ("/methods/gvl/", "method"), ("/environments/terminalbench/", "environment")):
        page.goto(base + url)
        _figure(page)
        page.screenshot(path=str(ARTIFACTS / f"{shot}.png"), full_page=True)
    page.goto(base + "/leaderboard/?source=reported")
    assert page.locator("#leaderboard .badge-reported").count() == 50  # one page of the 578 rows
    page.screenshot(path=str(ARTIFACTS / "leaderboard.png"), full_page=True)

    # On a phone the pages keep the screen's width: wide tables scroll inside themselves, and a figure's title is
    # broken into lines inside the figure (Plotly draws one line, which the paper figures' titles overrun).
    page.set_viewport_size({"width": 390, "height": 844})
    paper = [f"/figures/paper/{name}/" for name in ("fig2", "fig3", "fig4-left", "fig4-right", "fig5")]
    for url in ("/leaderboard/?source=reported", "/methods/gvl/", "/", *paper):
        page.goto(base + url)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390, url
        if url in paper:
            _figure(page)
            assert page.evaluate(TITLE_INSIDE), url
    page.screenshot(path=str(ARTIFACTS / "paper-figure-phone.png"), full_page=True)
    page.goto(base + "/leaderboard/?source=reported")
    page.screenshot(path=str(ARTIFACTS / "leaderboard-phone.png"), full_page=True)


CLAIMS = """() => [...document.querySelectorAll('section.finding')].map(s => ({
  id: s.dataset.claim, verdict: s.dataset.verdict, badge: s.querySelector('h2 .badge').innerText.trim(),
  visible: s.querySelector('h2').getBoundingClientRect().width > 0,
  numbers: Object.fromEntries([...s.querySelectorAll('table.finding-numbers tr')].map(
    tr => [...tr.cells].map(td => td.innerText.trim())))}))"""

CELLS = """() => [...document.querySelectorAll('#consistency-table tbody tr[data-cell]')].map(
  tr => [tr.dataset.cell, ...[...tr.cells].slice(5).map(td => td.innerText.trim())])"""


def _number(text: str) -> float | None:
    """A number as the consistency table prints it (three decimals, ``—`` for none)."""
    return None if text == "—" else float(text)


def test_findings_and_consistency_pages(live_server, published, page) -> None:  # type: ignore[no-untyped-def]
    """Every claim with its verdict and numbers, and every consistency cell with its reported, re-scored and
    difference and the reason, as computed from the imported rows; the pages keep a desktop's and a phone's width."""
    base = live_server.url
    for width, height in ((1280, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"{base}/published/findings/")
        shown = page.evaluate(CLAIMS)
        assert {c["id"]: (c["verdict"], c["badge"], c["numbers"]) for c in shown} == published["findings"]
        assert all(c["visible"] for c in shown) and len(shown) == len(published["findings"]) > 0
        contradicted = [c for c in shown if c["verdict"] == "contradicted"]
        assert contradicted, "the data contradicts at least one claim (the website's 'best in every environment')"
        assert page.evaluate("() => document.documentElement.scrollWidth") <= width, ("findings", width)
        page.screenshot(path=str(ARTIFACTS / f"findings-{width}.png"), full_page=True)

        page.goto(f"{base}/published/consistency/")
        rows = page.evaluate(CELLS)
        assert len(rows) == len(published["cells"]) > 0
        for key, reported, paper, rescored, difference, why in rows:
            want = published["cells"][key]
            for got, value in zip((reported, rescored, difference), want[:3]):
                assert _number(got) == (None if value is None else pytest.approx(value, abs=5.01e-4)), (key, got, value)
            assert (why, paper) == want[3:], key
        differing = [r for r in rows if r[4] != "—" and abs(float(r[4])) > 0.01]
        assert differing and page.locator("#consistency-table").is_visible()
        assert f"{len(rows)} cells; {len(differing)} differ by more than 0.01" in page.inner_text("#consistency-summary")
        assert page.evaluate("() => document.documentElement.scrollWidth") <= width, ("consistency", width)
        page.screenshot(path=str(ARTIFACTS / f"consistency-{width}.png"), full_page=True)

"""Issue 36 in a real Chromium (Debian's), driven by Playwright: a researcher's journey from sign-up to a ranked test
result compared with a reference row, and a walk over every page at 1280 and 390 px, in light and dark mode.

The walk checks on each page: nothing wider than the screen (a wide table scrolls inside itself), numeric headers
right-aligned over their numbers, and, in dark mode, no chart with a white panel; at 1280 px the navigation on one
line, signed in; at 390 px no figure's subplots overlapping. Each page is loaded once per width: dark mode is the
same page with the system setting switched (``emulate_media``). Screenshots go to ``test-artifacts/walk/``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import wait_for
from tests.test_boards_browser import off_the_loop
from tests.test_browser import page  # noqa: F401  (the Chromium page fixture)
from tests.test_site import actor_points, csv_bytes

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.worker]

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "walk"
DESKTOP, PHONE = 1280, 390
ONE_LINE = 52
"""Pixels below which the site's bar holds one line (one is about 40 px, two about 65)."""

NUMERIC_HEADERS_LEFT = """() => {
  // Each table column whose body cells are numbers (td.num) must have a right-aligned header.
  const bad = [];
  for (const table of document.querySelectorAll('main table')) {
    const head = table.tHead && table.tHead.rows.length ? table.tHead.rows[table.tHead.rows.length - 1] : null;
    if (!head) continue;
    const columns = new Map();
    for (const row of table.tBodies.length ? [...table.tBodies].flatMap(b => [...b.rows]) : []) {
      let at = 0;
      for (const cell of row.cells) { if (cell.classList.contains('num') && cell.colSpan === 1) columns.set(at, true); at += cell.colSpan; }
    }
    let at = 0;
    for (const th of head.cells) {
      if (columns.has(at) && th.colSpan === 1 && th.innerText.trim() && getComputedStyle(th).textAlign !== 'right')
        bad.push((table.id || table.className || 'table') + ': ' + th.innerText.trim());
      at += th.colSpan;
    }
  }
  return bad;
}"""

WHITE_PANELS = """() => {
  // Dark mode: no chart paints its paper or a plot area white.
  const white = c => /^rgba?\\(255, 255, 255(, 1)?\\)$/.test(c) || c === '#ffffff' || c === 'rgb(255,255,255)';
  const bad = [];
  for (const chart of document.querySelectorAll('.js-plotly-plot')) {
    const svg = chart.querySelector('.main-svg');
    if (svg && white(getComputedStyle(svg).backgroundColor)) bad.push((chart.id || 'chart') + ' paper');
    for (const bg of chart.querySelectorAll('.bglayer .bg'))
      if (white(getComputedStyle(bg).fill)) bad.push((chart.id || 'chart') + ' plot area');
  }
  return bad;
}"""

OVERLAPPING_SUBPLOTS = """() => {
  // Each cartesian subplot of the page's figure, as the box of its plot area, tick labels and axis titles: no two
  // may overlap (on a phone the paper's two panels stack rather than squeeze side by side).
  const el = document.getElementById('figure');
  if (!el || !el.querySelector('.main-svg')) return [];
  const boxes = [];
  for (const drag of el.querySelectorAll('.draglayer > g')) {
    const name = [...drag.classList].find(c => /^x\\d*y\\d*$/.test(c));
    if (!name) continue;
    const [, x, y] = name.match(/^x(\\d*)y(\\d*)$/);
    const parts = [drag.querySelector('.nsewdrag'), ...el.querySelectorAll(
      `.x${x}tick text, .y${y}tick text, .g-x${x}title text, .g-y${y}title text`)].filter(Boolean);
    const rects = parts.map(p => p.getBoundingClientRect()).filter(r => r.width > 0 && r.height > 0);
    if (!rects.length) continue;
    boxes.push({name, left: Math.min(...rects.map(r => r.left)), right: Math.max(...rects.map(r => r.right)),
                top: Math.min(...rects.map(r => r.top)), bottom: Math.max(...rects.map(r => r.bottom))});
  }
  const bad = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) bad.push(a.name + '/' + b.name);
  }
  return bad;
}"""


def shot(pg, name: str, full: bool = False) -> None:  # type: ignore[no-untyped-def]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full)


def reference_rows(ds) -> list[int]:  # type: ignore[no-untyped-def]
    """Two of the platform's reference rows on the dataset's test board (Q, text), run by the scoring worker (a
    reference method needs no model)."""
    from submissions.baselines import BaselineRequest, launch_baseline
    from submissions.models import Submission

    ids = [launch_baseline(BaselineRequest(method, "", ds.key, "test", target="q")).pk
           for method in ("goal-distance", "random")]
    final = (Submission.FINISHED, Submission.FAILED)
    wait_for(lambda: Submission.objects.filter(pk__in=ids, state__in=final).count() == len(ids), timeout=180)
    assert list(Submission.objects.filter(pk__in=ids).values_list("state", flat=True)) == [Submission.FINISHED] * 2
    return ids


@pytest.fixture
def site(live_server, celery_worker_process, loaded) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """The published results imported (the figures), FrozenLake with two reference rows; what the browser needs
    from the database, read before it starts."""
    from submissions.importing import import_results

    import_results(resamples=0)
    return {"url": live_server.url, "dataset": loaded, "references": reference_rows(loaded)}


def closed_book(ds) -> None:  # type: ignore[no-untyped-def]
    """FrozenLake stands for a closed-book dataset from here on (its labels follow from its maps, so the site
    ranks no uploaded file on it): the journey's file is then ranked on the self-reported tab."""
    from leaderboard.models import Environment

    Environment.objects.filter(pk=ds.environment_id).update(open_book=False)


def test_journey_sign_up_to_a_ranked_result_compared_with_a_reference_row(site, frozenlake, tmp_path, mailoutbox,  # type: ignore[no-untyped-def]
                                                                         page) -> None:  # noqa: F811
    base, ds = str(site["url"]), site["dataset"]
    page.goto(base + "/")
    assert page.locator("#what-is-qval").bounding_box()["y"] < 400  # what QVal is, above the fold, then the boards
    page.click("nav >> text=Sign up")
    page.fill("#id_email", "journey@example.org")
    page.fill("#id_username", "journey-researcher")
    page.fill("#id_password1", "q-aligned-2026")
    page.fill("#id_password2", "q-aligned-2026")
    page.click("main button[type=submit]")
    page.wait_for_selector("nav >> text=My submissions")
    link = next(w for w in mailoutbox[0].body.split() if "/accounts/confirm-email/" in w)
    page.goto(base + link[link.index("/accounts/"):])
    page.goto(base + "/")
    assert "Create an account" not in page.inner_text("main")
    # Download the test split's inputs.
    page.click("nav >> text=Datasets")
    page.click(f"main a[href='/datasets/{ds.key}/']")
    with page.expect_download() as dl:
        page.click("#splits tr:has-text('test') >> text=csv")
    assert "q_label" not in Path(dl.value.path()).read_text().splitlines()[0]  # a hidden split: inputs only
    # The submit form, before any upload: an open-book test split says it will not be ranked; the card is asked for.
    ids, labels = actor_points(frozenlake, "test")
    preds = tmp_path / "test.csv"
    preds.write_bytes(csv_bytes(ids, labels + np.random.default_rng(5).normal(0, 0.4, len(ids))))
    page.goto(base + "/submit/")
    assert not page.locator("#open-book-note").is_visible()  # the dev split: nothing to say
    page.select_option("#id_split", "test")
    assert page.locator("#open-book-note").is_visible() and "not ranked" in page.inner_text("#open-book-note")
    assert page.locator("input[name=visibility][value=public]").is_checked()
    page.fill("#id_method_name", "journey-lookahead")
    page.set_input_files("#id_file", str(preds))
    page.click("#upload-form button[type=submit]")  # no description: the browser asks for it, the file stays chosen
    assert page.url == base + "/submit/" and page.locator("#description-required").is_visible()
    assert page.eval_on_selector("#id_file", "e => e.files.length") == 1
    shot(page, "journey-01-card-before-file", full=True)
    off_the_loop(lambda: closed_book(ds))
    page.reload()
    page.select_option("#id_split", "test")
    assert not page.locator("#open-book-note").is_visible()
    page.fill("#id_method_name", "journey-lookahead")
    page.fill("#id_description", "Scores each move by its distance to the goal, with noise.")
    page.set_input_files("#id_file", str(preds))
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector("#results", timeout=90_000)
    # Where it stands, at the top: its rank range, its board, the rows around it, the permalink.
    shot(page, "journey-02-result", full=True)
    standing = page.inner_text("#standing")
    assert "Rank " in standing and "FrozenLake" in standing and "self-reported" in standing
    assert page.locator("#neighbours tr.this-row").count() == 1
    assert page.locator("#standing").bounding_box()["y"] < page.locator("#results").bounding_box()["y"]
    permalink = page.get_attribute("#permalink a", "href")
    sub_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    assert permalink.endswith(f"/results/{sub_id}/")
    # My submissions: its rho, interval and rank.
    page.goto(base + "/submissions/")
    row = page.locator(f"#submissions tr[data-id='{sub_id}']").inner_text()
    assert "[" in row and page.locator(f"#submissions tr[data-id='{sub_id}'] td.rank a").count() == 1
    # The permalink, then one click to compare it with a reference row.
    page.goto(permalink)
    assert page.locator("#standing-rank").is_visible()
    page.click("#compare-references a.compare-ref >> nth=0")
    page.wait_for_selector("#comparison")
    assert page.locator("#comparison tr[data-metric=spearman]").count() == 1
    assert f"#{sub_id}" in page.inner_text("main h2")
    shot(page, "journey-03-compare", full=True)


def pages_to_walk(base: str, page) -> list[str]:  # type: ignore[no-untyped-def]  # noqa: F811
    """Every kind of page: the boards and tables, every figure page, the datasets, the docs, a result and the
    account's pages."""
    board = page.locator("#boards-overview tr[data-board] a").first.get_attribute("href")
    return ["/", "/boards/", board, "/tables/published/", "/leaderboard/", "/compare/",
            "/figures/per-family/", "/figures/per-environment/", "/figures/heatmap/", "/figures/q-vs-v/",
            "/figures/paper/fig2/", "/figures/paper/fig3/", "/figures/paper/fig4-left/", "/figures/paper/fig5/",
            "/leaderboard/aggregate/", "/leaderboard/critical-difference/", "/best-of-n/", "/published/findings/",
            "/published/consistency/", "/datasets/", "/methods/direct-16/", "/environments/frozenlake/", "/learned/",
            "/how-we-score/", "/status/", "/api/docs/", "/submit/", "/submissions/", "/accounts/token/"]


def test_walk_every_page_at_1280_and_390_px_light_and_dark(site, django_user_model, page) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    base, ds = str(site["url"]), site["dataset"]
    off_the_loop(lambda: django_user_model.objects.create_user(
        "a-researcher-with-a-long-name", "walker@example.org", "q-aligned-2026"))
    page.goto(base + "/accounts/login/")
    page.fill("#id_username", "a-researcher-with-a-long-name")
    page.fill("#id_password", "q-aligned-2026")
    page.click("main button[type=submit]")
    page.wait_for_selector("nav >> text=My submissions")
    page.goto(base + "/")
    paths = pages_to_walk(base, page) + [f"/results/{site['references'][0]}/", f"/datasets/{ds.key}/"]
    problems: list[str] = []
    for width in (DESKTOP, PHONE):
        page.set_viewport_size({"width": width, "height": 900})
        for n, path in enumerate(paths):
            page.emulate_media(color_scheme="light")
            page.goto(base + path)
            page.wait_for_load_state("networkidle")
            if page.locator("#figure[data-src]").count():
                page.wait_for_selector("#figure:not([aria-busy])")
            if page.evaluate("document.documentElement.scrollWidth") > width:
                problems.append(f"{width} {path}: {page.evaluate('document.documentElement.scrollWidth')} px wide")
            problems += [f"{width} {path}: header left of its numbers: {h}" for h in page.evaluate(NUMERIC_HEADERS_LEFT)]
            if width == DESKTOP and page.locator("nav[aria-label=Site]").bounding_box()["height"] >= ONE_LINE:
                problems.append(f"{width} {path}: the navigation wraps")
            if width == PHONE:
                problems += [f"{width} {path}: subplots overlap: {o}" for o in page.evaluate(OVERLAPPING_SUBPLOTS)]
            page.emulate_media(color_scheme="dark")
            problems += [f"{width} {path} dark: white {w}" for w in page.evaluate(WHITE_PANELS)]
            shot(page, f"{width}-{n:02d}-dark" if width == PHONE else f"{width}-{n:02d}")
    page.emulate_media(color_scheme="light")
    assert problems == [], "\n".join(problems)

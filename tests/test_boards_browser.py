"""A fresh site walked in a real Chromium (Debian's), driven by Playwright: what issue 22 asks of its boards.

The site starts as ``make up`` leaves it: FrozenLake loaded, the QVal v1.0 results imported, the reference rows
of the hosted dataset queued and run (here in-process, as ``tests/test_reference_rows.py`` runs them). A newcomer
signs up, confirms the address and uploads a dev file; their method container's results (a public one twice, a
private one) are then in the database as a worker leaves them. The walk checks the default board, the dev file
kept off every public board and figure, the anonymous permalink, the private result (which its owner then makes
public on its page), best-per-method, the critical-difference diagram and the reported rows, no page wider than
1280 px (a wide table scrolls inside itself), then every page again at 390 px. Screenshots go to
``test-artifacts/boards/``.
"""

from __future__ import annotations

import datetime
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np
import pytest

from tests.test_browser import page  # noqa: F401  (the Chromium page fixture)
from tests.conftest import wait_for
from tests.test_site import actor_points, csv_bytes
from tests.test_site_chrome import ONE_LINE

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.worker]

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "boards"
DESKTOP, PHONE = 1280, 390
PUBLISHED_BOARD = "qval-v1.0-frozenlake@1.0:q:text"
DEV_METHOD = "walk-dev-check"
FIGURES = ("per-family", "per-environment", "text-vs-image", "q-vs-v", "heatmap")

T = TypeVar("T")


def shot(pg, name: str) -> None:  # type: ignore[no-untyped-def]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def off_the_loop(work: Callable[[], T]) -> T:
    """``work()`` in a thread of its own (its connection closed after): Playwright's event loop runs in this
    one, and Django refuses database calls there."""
    from django.db import connection

    def run() -> T:
        try:
            return work()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def method_container_results(username: str, ds) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    """Three finished method-container runs of ``username`` on ``ds``'s test split, as a worker leaves them: the
    same method and backbone twice (public, with a method card), and a private one."""
    from django.contrib.auth import get_user_model

    from tests.test_result_pages import container_row

    owner = get_user_model().objects.get(username=username)
    card = "Looks two steps ahead on the map."
    first = container_row(ds, owner, "walk-lookahead", 0.62, description=card)
    second = container_row(ds, owner, "walk-lookahead", 0.71, description=card)
    private = container_row(ds, owner, "walk-secret", 0.93, public=False, description="Not for the board yet.")
    return first.pk, second.pk, private.pk


WALK_TRAINING = {"steps": 150}
"""The seeded training runs' one override in the walk: a tenth of the default steps (the same experience, features
and code path). The walk's own CPU time (its process, one run each): 48 s at the defaults, 22 s with this."""


@pytest.fixture
def fresh_site(live_server, celery_worker_process, loaded) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """What ``make up`` leaves: the published results imported, the reference rows of the hosted dataset run (the
    training runs with :data:`WALK_TRAINING`'s steps); what the walk needs from the database, read before the
    browser starts."""
    from learning.services import run_training
    from qval.paper.qval_v1 import published
    from qval_site.reference_rows import seed_reference_rows
    from submissions.importing import import_results
    from submissions.lifecycle import job_queue
    from submissions.models import Submission

    import_results(resamples=2)
    seeded = seed_reference_rows()  # what make up runs: baselines, training runs, Best-of-N runs
    assert seeded.baselines and len(seeded.training_runs) == 3 and len(seeded.best_of_n_runs) == 3
    # the reference methods that need no model: the scoring worker runs them (the SmolLM2 rows stay queued on gpu)
    ids = [sub.pk for sub in seeded.baselines if job_queue(sub) == "scoring"]
    assert ids and len(ids) < len(seeded.baselines)
    wait_for(lambda: Submission.objects.filter(pk__in=ids, state__in=(Submission.FINISHED, Submission.FAILED)).count()
             == len(ids), timeout=300, interval=0.5)
    assert [(s.method_name, s.error) for s in Submission.objects.filter(pk__in=ids, state=Submission.FAILED)] == []
    for run in seeded.training_runs:  # the gpu worker's job, here in-process; Best-of-N's runs stay queued
        run.params = WALK_TRAINING  # the walk reads the runs' rows and pages, not how well they ranked
        run.save(update_fields=["params"])
        assert run_training(run.pk, "walk@vm").status == "finished", run.method
    return {"url": live_server.url, "dataset": loaded,
            "reported_points": published.reported_points("FrozenLake", "spearman")[0]}


def json_at(pg, url: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    response = pg.request.get(url)
    assert response.ok, (url, response.status)
    return json.loads(response.text())


def test_a_fresh_site_walked_at_1280_and_390_px(fresh_site, frozenlake, tmp_path, mailoutbox, page) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    # ``page`` comes last: Playwright's event loop must start after the database fixtures ran.
    base, ds = str(fresh_site["url"]), fresh_site["dataset"]
    anonymous = page.context.browser.new_context(viewport={"width": DESKTOP, "height": 900})
    anon = anonymous.new_page()
    visited: list[str] = []

    def visit(pg, path: str, name: str):  # type: ignore[no-untyped-def]
        pg.goto(base + path)
        if pg is page:
            visited.append(path)
        shot(pg, name)
        assert pg.evaluate("document.documentElement.scrollWidth") <= DESKTOP, path  # wide tables scroll inside
        return pg

    # The default board: the first board the home page and /boards/ lead to, a ranked test board.
    visit(page, "/", "01-home")
    default = page.locator("#boards-overview tr[data-board] a").first.get_attribute("href")
    visit(page, "/boards/", "02-boards")
    assert page.locator("tr[data-board] a").first.get_attribute("href") == default
    hosted = page.locator("#hosted + table tr[data-board]").evaluate_all("rs => rs.map(r => r.dataset.board)")
    assert default == f"/boards/{hosted[0]}/" and hosted[0] == f"{ds.key}:q:text"
    visit(page, default, "03-default-board")
    assert page.locator("#board thead th").first.inner_text() == "Rank"
    assert "test split" in page.inner_text(".lead")
    ranks = page.locator("#board tbody tr[data-rank] td.rank").all_inner_texts()
    assert ranks and ranks[0].startswith("1")
    # Reference rows on each hosted board, the image ones included: the platform's runs, baseline and verified.
    assert any(k.endswith(":image") for k in hosted)
    for key in hosted:
        rows = json_at(anon, f"{base}/boards/{key}/?format=json")["rows"]
        assert rows and all(r["baseline"] and r["source"] == "verified" for r in rows), key
    baseline_rows = page.locator("#board tr[data-source=verified]:has(.badge-baseline)")
    assert baseline_rows.count() == page.locator("#board tbody tr[data-rank]").count() >= 3
    assert "goal-distance" in page.inner_text("#board")

    # Sign up through the form and confirm the address.
    page.click("text=Sign up")
    page.fill("#id_email", "walker@example.org")
    page.fill("#id_username", "walker")
    page.fill("#id_password1", "q-aligned-2026")
    page.fill("#id_password2", "q-aligned-2026")
    page.click("main button[type=submit]")
    page.wait_for_selector("nav >> text=My submissions")
    link = next(w for w in mailoutbox[0].body.split() if "/accounts/confirm-email/" in w)
    page.goto(base + link[link.index("/accounts/"):])

    # A dev file through the submit form, public: the worker scores it for its owner only.
    ids, labels = actor_points(frozenlake, "dev")
    preds = tmp_path / "dev.csv"
    preds.write_bytes(csv_bytes(ids, labels + np.random.default_rng(7).normal(0, 0.1, len(ids))))
    visit(page, "/submit/", "04-submit")
    page.select_option("#id_dataset", ds.key)
    page.select_option("#id_split", "dev")
    page.fill("#id_method_name", DEV_METHOD)
    assert page.locator("input[name=visibility][value=private]").is_checked()  # a dev result is its owner's ...
    page.check("input[name=visibility][value=public]")  # ... unless published: still on no board, nor any figure
    page.set_input_files("#id_file", str(preds))
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector("#results", timeout=90_000)
    shot(page, "05-dev-result")
    visit(page, "/submissions/", "06-my-submissions")
    assert page.locator(f"#submissions tr:has-text('{DEV_METHOD}') .state-finished").count() == 1
    # ... and on no public board, nor the figures as they open.
    anon.goto(base + "/boards/")
    boards = anon.locator("tr[data-board]").evaluate_all("rs => rs.map(r => r.dataset.board)")
    assert PUBLISHED_BOARD in boards and hosted[0] in boards
    for key in boards:
        for query in ("", "all=1"):
            assert DEV_METHOD not in anon.goto(f"{base}/boards/{key}/?{query}").text(), key
            assert DEV_METHOD not in json.dumps(json_at(anon, f"{base}/boards/{key}/?format=json&{query}")), key
    for name in FIGURES:
        assert DEV_METHOD not in json.dumps(json_at(anon, f"{base}/figures/{name}/?format=json")), name
        assert DEV_METHOD not in anon.goto(f"{base}/figures/{name}/").text(), name
    assert DEV_METHOD not in anon.goto(base + "/").text()

    # The newcomer's method container: a public result twice (one method and backbone), a private one.
    first, second, private = off_the_loop(lambda: method_container_results("walker", ds))
    board = f"/boards/{ds.key}:q:text/"
    visit(page, board, "07-board-best-per-method")
    assert page.locator("#board tr:has-text('walk-lookahead')").count() == 1  # best per method by default
    assert page.locator(f"#board tr[data-submission='{second}']").count() == 1
    assert "walk-secret" not in page.inner_text("#board")
    page.click("#all-submissions")
    page.wait_for_selector("#best-only")
    visited.append(board + "?all=1")
    shot(page, "08-board-all")
    assert page.evaluate("document.documentElement.scrollWidth") <= DESKTOP
    assert page.locator("#board tr:has-text('walk-lookahead')").count() == 2
    assert "walk-secret" not in page.inner_text("#board")
    # The public one's permalink, read by an anonymous visitor: the card, the submitter, the values.
    permalink = page.locator(f"#board tr[data-submission='{second}'] a.permalink").get_attribute("href")
    assert permalink == f"/results/{second}/"
    visit(anon, permalink, "09-permalink-anonymous")
    assert "Looks two steps ahead on the map." in anon.inner_text("#method-card")
    assert "walker" in anon.inner_text("#result-meta") and "0.710" in anon.inner_text("#result-metrics")
    visited.append(permalink)
    # The private one: nobody else's, its owner's page only.
    assert anon.goto(f"{base}/results/{private}/").status == 404
    assert anon.goto(f"{base}/submissions/{private}/").url.startswith(base + "/accounts/login/")
    visit(page, f"/submissions/{private}/", "10-private-own-page")
    assert "walk-secret" in page.inner_text("main")
    assert page.goto(f"{base}/results/{private}/").status == 404
    # Its owner makes it public on its page, editing the card: on the board now, and readable by anyone.
    page.goto(f"{base}/submissions/{private}/")
    page.fill("#id_description", "Looks three steps ahead.")
    page.check("#card-form input[name=visibility][value=public]")
    page.click("#card-form button[type=submit]")
    page.wait_for_selector("#visibility >> text=its public page")
    shot(page, "10b-made-public")
    assert anon.goto(f"{base}/results/{private}/").status == 200
    assert "Looks three steps ahead." in anon.inner_text("#method-card")
    assert "walk-secret" in anon.goto(base + board).text()

    # The critical-difference diagram draws for the QVal v1.0 results as the page opens.
    visit(page, "/leaderboard/critical-difference/", "11-critical-difference")
    page.wait_for_selector("#cd-diagram .main-svg")
    assert page.locator("#cd-diagram .annotation").count() > 3 and page.locator("#ranks tr[data-method]").count() > 2

    # Reported rows: the authors' point count and the paper's date, the paper's τ where it prints one.
    points, today = str(fresh_site["reported_points"]), datetime.date.today().isoformat()
    visit(page, f"/boards/{PUBLISHED_BOARD}/?all=1", "12-published-board")
    reported = page.locator("#board tbody tr[data-source=reported]")
    assert reported.count() > 0
    for cells in reported.evaluate_all("rs => rs.map(r => [...r.cells].map(c => c.innerText.trim()))"):
        assert cells[5] == points and cells[7] != today, cells
    visit(page, f"/leaderboard/?dataset={PUBLISHED_BOARD.split(':')[0]}&source=reported&target=q&modality=text",
          "13-leaderboard-reported")
    header = page.locator("#leaderboard thead th").all_inner_texts()
    point_col, date_col = header.index("Points"), header.index("Date")
    rows = page.locator("#leaderboard tbody tr[data-submission]")
    assert rows.count() > 0
    for cells in rows.evaluate_all("rs => rs.map(r => [...r.cells].map(c => c.innerText.trim()))"):
        assert cells[point_col] == points and cells[date_col] != today, cells
    taus = page.locator("#leaderboard td[data-metric=kendall_tau]").all_inner_texts()
    assert taus and set(taus) - {"not reported"}  # the paper's τ, where its table prints one
    assert page.locator("#not-reported-note").is_visible()

    # The Learned and Best-of-N pages show the runs the same seeding step queued (no empty page on a fresh site).
    visit(page, "/learned/", "14-learned")
    learned = page.locator("#training-runs tbody tr").all_inner_texts()
    assert len(learned) == 3 and all("finished" in row for row in learned), learned
    visit(page, "/best-of-n/", "15-best-of-n")
    pickers = page.locator("#runs tbody tr").all_inner_texts()
    assert len(pickers) == 3 and all(any(p in row for p in ("base", "oracle", "random")) for row in pickers), pickers

    # The same pages on a phone: nothing wider than the screen, the navigation one line.
    visited += [f"/figures/{FIGURES[0]}/", "/submit/"]
    page.set_viewport_size({"width": PHONE, "height": 800})
    for n, path in enumerate(dict.fromkeys(visited)):
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        shot(page, f"phone-{n:02d}")
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE, path
        assert page.locator("nav[aria-label=Site]").bounding_box()["height"] < ONE_LINE, path
    anonymous.close()

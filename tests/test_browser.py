"""The newcomer's path in a real Chromium (Debian's), driven by Playwright.

Sign up, open the dataset page, upload a predictions file, wait for the worker's result,
find it on the leaderboard. A screenshot of every page is saved under ``test-artifacts/``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.worker]

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "browser"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def page():  # type: ignore[no-untyped-def]
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed; `make test` installs it (scripts/install.sh)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"],
        )
        pg = browser.new_page(viewport={"width": 1280, "height": 900})
        pg.set_default_timeout(30_000)
        yield pg
        browser.close()


def shot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_newcomer_path(live_server, celery_worker_process, loaded, frozenlake, tmp_path, mailoutbox, page) -> None:  # type: ignore[no-untyped-def]
    # ``page`` comes last: Playwright's event loop must start after the database fixtures ran.
    base = live_server.url
    page.goto(base + "/")
    shot(page, "01-home")
    page.click("text=Sign up")
    page.fill("#id_email", "newcomer@example.org")
    page.fill("#id_username", "newcomer")
    page.fill("#id_password1", "q-aligned-2026")
    page.fill("#id_password2", "q-aligned-2026")
    shot(page, "02-signup")
    page.click("main button[type=submit]")
    page.wait_for_selector("nav >> text=My submissions")
    # The test split needs a verified address: follow the emailed confirmation link.
    link = next(w for w in mailoutbox[0].body.split() if "/accounts/confirm-email/" in w)
    page.goto(base + link[link.index("/accounts/"):])

    page.click("nav >> text=Datasets")
    page.click("text=FrozenLake")
    page.wait_for_selector("#splits")
    assert page.locator("#splits >> text=hidden").count() == 1
    shot(page, "03-dataset")
    with page.expect_download() as dl:
        page.click("#splits tr:has-text('dev') >> text=csv")
    dev = pd.read_csv(dl.value.path())
    assert {"candidate_id", "q_label"} <= set(dev.columns)

    ids = [s.actor_candidate.id for s in frozenlake.states if s.split == "test"]
    preds = tmp_path / "preds.csv"
    pd.DataFrame({"id": ids, "score": [frozenlake.q_labels[i] for i in ids]}).to_csv(preds, index=False)
    page.click("text=Submit predictions for this dataset")
    page.select_option("#id_split", "test")
    page.fill("#id_method_name", "browser-oracle")
    page.fill("#id_description", "The labels themselves, to see the page of a perfect score.")
    page.set_input_files("#id_file", str(preds))
    shot(page, "04-upload")
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector("#state")
    shot(page, "05-submitted")
    page.wait_for_selector("#results", timeout=90_000)
    spearman = page.inner_text("tr[data-metric=spearman]")
    assert "Spearman ρ (global)" in spearman and "1.000" in spearman and "1.0000" not in spearman  # disclosed: 3 decimals
    shot(page, "06-result")

    # FrozenLake is open book: an uploaded test file is scored for its uploader and ranked nowhere
    assert page.locator("#not-ranked").count() == 1
    page.goto(f"{base}/leaderboard/?dataset={frozenlake.manifest.key}")
    assert page.locator("#leaderboard tr:has-text('browser-oracle')").count() == 0
    shot(page, "07-leaderboard")
    page.click("nav >> text=My submissions")
    assert page.locator("#submissions .state-finished").count() == 1
    shot(page, "08-my-submissions")

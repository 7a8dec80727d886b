"""The site's frame (``templates/base.html``, ``static/qval.css``): styled 404 and 500 pages with the
navigation, the current page marked in the nav, a one-line nav with a menu on a phone, and a dark mode
that follows the system setting."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.test_browser import page  # noqa: F401  (the Chromium page fixture)

ONE_LINE = 52
"""Pixels below which the header holds one line of the nav (one is about 40 px, two about 65)."""
NAV = re.compile(r'<nav aria-label="Site">.*?</nav>', re.S)


def nav_of(body: str) -> str:
    found = NAV.search(body)
    assert found is not None, "no site navigation on the page"
    return found.group(0)


@pytest.mark.django_db
def test_a_missing_page_is_a_styled_404_with_the_navigation(client) -> None:  # type: ignore[no-untyped-def]
    for path in ("/no/such/page/", "/tables/nosuch/", "/boards/nosuch@1.0:q:text/"):  # a URL, then views' Http404
        response = client.get(path)
        assert response.status_code == 404
        body = response.content.decode()
        assert 'id="error-404"' in body and "Page not found" in body
        nav = nav_of(body)
        assert 'href="/boards/"' in nav and 'href="/datasets/"' in nav and 'href="/accounts/login/"' in nav
        assert "aria-current" not in nav and 'aria-label="Section"' not in body  # no page of the nav is the current one
        assert 'rel="stylesheet"' in body and "/static/qval.css" in body
    assert "/no/such/page/" in client.get("/no/such/page/").content.decode()


def test_a_failing_view_is_a_styled_500_that_needs_no_database() -> None:
    # No database access is allowed in this test: the datasets page fails on its first query, and the 500
    # page must render without one (Django renders it with an empty context: no request, no user).
    client = Client(raise_request_exception=False)
    response = client.get("/datasets/")
    assert response.status_code == 500
    body = response.content.decode()
    assert 'id="error-500"' in body and "Something went wrong" in body
    nav = nav_of(body)
    assert 'href="/boards/"' in nav and 'href="/datasets/"' in nav and "aria-current" not in nav


SECTION = re.compile(r'<nav aria-label="Section"[^>]*>.*?</nav>', re.S)


@pytest.mark.django_db
@pytest.mark.parametrize("path, door, page", [
    ("/boards/", "Boards", "/boards/"), ("/tables/published/", "Boards", "/tables/"),
    ("/tables/hosted/", "Boards", "/tables/"), ("/leaderboard/", "Boards", "/leaderboard/"),
    ("/compare/", "Boards", "/compare/"), ("/leaderboard/aggregate/", "Figures", "/leaderboard/aggregate/"),
    ("/best-of-n/", "Figures", "/best-of-n/"), ("/datasets/", "Datasets", "/datasets/"),
    ("/how-we-score/", "Docs", "/how-we-score/"), ("/status/", "Docs", "/status/"), ("/accounts/login/", None, None),
])
def test_the_current_section_and_page_are_marked(client, path: str, door: str | None, page: str | None) -> None:  # type: ignore[no-untyped-def]
    """The bar marks the page's section (its door), the section's own line the page."""
    body = client.get(path).content.decode()
    nav = nav_of(body)
    assert re.findall(r'<a [^>]*aria-current="true">([^<]+)</a>', nav) == ([door] if door else [])
    section = SECTION.search(body)
    if page is None:
        assert section is None and re.findall(r'<a href="([^"]+)" aria-current="page"', nav) == ["/accounts/login/"]
    else:
        assert section is not None
        assert re.findall(r'<a href="([^"]+)"[^>]*aria-current="page"', section.group(0)) == [page]


def doors(nav: str) -> list[str]:
    """The entries of the bar: every link and menu of its ``nav-links`` outside the account menu's items (the brand
    is the home link, not a door)."""
    links = nav[nav.index('<div class="nav-links">'):]
    links = re.sub(r'<div class="account-items">.*?</div>', "", links, flags=re.S)
    return re.findall(r"<a [^>]*>([^<]+)</a>|<summary[^>]*>([^<]+)</summary>", links)


@pytest.mark.django_db
def test_seven_doors_at_most_signed_in_or_out_with_the_token_page_and_the_docs(client, user) -> None:  # type: ignore[no-untyped-def]
    body = client.get("/").content.decode()
    out = nav_of(body)
    assert len(doors(out)) <= 7 and ">Docs<" in out and "Create an account" in body
    client.force_login(user)
    body = client.get("/").content.decode()
    signed_in = nav_of(body)
    assert len(doors(signed_in)) <= 7, doors(signed_in)
    assert 'href="/accounts/token/"' in signed_in and ">API token<" in signed_in and ">Docs<" in signed_in
    assert "Create an account" not in body  # the home page's start line is for a newcomer only


@pytest.mark.django_db
def test_the_favicon_answers() -> None:
    response = Client().get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("favicon.svg")
    assert 'rel="icon"' in Client().get("/boards/").content.decode()


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_phone_nav_is_one_line_with_a_menu_and_dark_mode_follows_the_system(live_server, staff, page) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(live_server.url + "/boards/")
    bar = page.locator("nav[aria-label=Site]").bounding_box()
    assert bar is not None
    assert bar["height"] < ONE_LINE  # one line: the brand and the menu toggle
    assert not page.locator("nav >> text=Figures").is_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.click("text=Menu")
    assert page.locator("nav >> text=Figures").is_visible()
    page.click("nav[aria-label=Site] >> text=Datasets")
    assert page.url.endswith("/datasets/")
    assert page.locator('nav a[aria-current="true"]').inner_text() == "Datasets"
    assert not page.locator("nav >> text=Figures").is_visible()  # a new page opens with the menu folded
    # At a desktop width every door shows in the bar; no toggle.
    page.set_viewport_size({"width": 1280, "height": 800})
    assert page.locator("nav >> text=Figures").is_visible() and not page.locator("text=Menu").is_visible()
    assert page.locator("nav[aria-label=Site]").bounding_box()["height"] < ONE_LINE  # one line there too (signed out)
    page.goto(live_server.url + "/accounts/login/")
    page.fill("#id_username", staff.username)
    page.fill("#id_password", "correct-horse-battery")
    page.click("main button[type=submit]")
    page.wait_for_selector("text=My submissions")
    assert page.locator("nav[aria-label=Site]").bounding_box()["height"] < ONE_LINE  # and signed in
    page.click(".account-menu summary")  # the account's menu: the API token page, logging out
    page.click(".account-menu >> text=API token")
    assert page.url.endswith("/accounts/token/")
    page.goto(live_server.url + "/boards/")
    # Dark mode follows the system setting.
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert light == "rgb(250, 251, 252)" and dark == "rgb(15, 20, 28)"

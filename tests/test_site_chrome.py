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
        assert 'href="/boards/"' in nav and 'href="/tables/"' in nav and 'href="/accounts/login/"' in nav
        assert "aria-current" not in nav  # no page of the nav is the current one
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
    assert 'href="/boards/"' in nav and 'href="/status/"' in nav and "aria-current" not in nav


@pytest.mark.django_db
@pytest.mark.parametrize("path, link", [
    ("/boards/", "/boards/"), ("/tables/published/", "/tables/"), ("/tables/hosted/", "/tables/"),
    ("/leaderboard/", "/leaderboard/"), ("/how-we-score/", "/how-we-score/"), ("/accounts/login/", "/accounts/login/"),
])
def test_the_current_page_is_marked_in_the_nav(client, path: str, link: str) -> None:  # type: ignore[no-untyped-def]
    nav = nav_of(client.get(path).content.decode())
    assert re.findall(r'<a href="([^"]+)" aria-current="page"', nav) == [link]


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_phone_nav_is_one_line_with_a_menu_and_dark_mode_follows_the_system(live_server, staff, page) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(live_server.url + "/boards/")
    header = page.locator("header").bounding_box()
    assert header is not None
    assert header["height"] < ONE_LINE  # one line: the brand and the menu toggle
    assert not page.locator("nav >> text=Leaderboard").is_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.click("text=Menu")
    assert page.locator("nav >> text=Leaderboard").is_visible()
    page.click("nav >> text=Tables")
    assert page.url.endswith("/tables/published/")
    assert page.locator('nav a[aria-current="page"]').inner_text() == "Tables"
    assert not page.locator("nav >> text=Leaderboard").is_visible()  # a new page opens with the menu folded
    # At a desktop width every link shows in the bar; no toggle.
    page.set_viewport_size({"width": 1280, "height": 800})
    assert page.locator("nav >> text=Leaderboard").is_visible() and not page.locator("text=Menu").is_visible()
    assert page.locator("header").bounding_box()["height"] < ONE_LINE  # one line there too (signed out)
    page.goto(live_server.url + "/accounts/login/")
    page.fill("#id_username", staff.username)
    page.fill("#id_password", "correct-horse-battery")
    page.click("main button[type=submit]")
    page.wait_for_selector("text=My submissions")
    assert page.locator("header").bounding_box()["height"] < ONE_LINE  # and signed in
    page.goto(live_server.url + "/boards/")
    # Dark mode follows the system setting.
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert light == "rgb(250, 251, 252)" and dark == "rgb(15, 20, 28)"

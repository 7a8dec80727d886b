"""The README and the manual (``docs/``): the README stays an introduction, every link between pages of the
manual lands on a page and heading that exist, and the site serves every page at ``/docs/``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.utils.text import slugify

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
README_LINES = 250
"""What a newcomer reads in five minutes (issue 34)."""


def headings(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as the site (and a code host) makes them."""
    fenced, found = False, set()
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#{1,4} (.*)$", line)):
            found.add(slugify(re.sub(r"[`*]", "", m.group(1))))
    return found


def local_links(path: Path) -> list[str]:
    """The links of ``path`` to another Markdown file of the repository (with their anchors)."""
    return [m["target"] for m in LINK.finditer(path.read_text())
            if not re.match(r"[a-z]+:", m["target"]) and ".md" in m["target"]]


def test_the_readme_is_short_and_names_both_commands() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= README_LINES
    assert "make up" in text and "make test" in text


@pytest.mark.parametrize("page", sorted([REPO / "README.md", *DOCS.glob("*.md")]), ids=lambda p: p.name)
def test_every_link_between_pages_lands_on_a_page_and_heading(page: Path) -> None:
    broken = []
    for target in local_links(page):
        file, _, anchor = target.partition("#")
        linked = (page.parent / file).resolve()
        if not linked.is_file():
            broken.append(f"{target}: no such page")
        elif anchor and anchor not in headings(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not broken, broken


def test_every_page_of_the_manual_is_on_its_contents_page() -> None:
    listed = {t.partition("#")[0] for t in local_links(DOCS / "index.md")}
    assert {p.name for p in DOCS.glob("*.md")} - {"index.md"} <= listed


@pytest.mark.django_db
def test_the_site_serves_the_manual(client) -> None:  # type: ignore[no-untyped-def]
    contents = client.get("/docs/")
    assert contents.status_code == 200
    for page in sorted(DOCS.glob("*.md")):
        if page.stem == "index":
            continue
        html = client.get(f"/docs/{page.stem}/").content.decode()
        title = next(line[2:] for line in page.read_text().splitlines() if line.startswith("# "))
        assert f"/docs/{page.stem}/" in contents.content.decode()
        assert re.sub(r"[`*]", "", title).split(" (")[0] in re.sub(r"<[^>]+>", "", html)
        assert 'href="scoring.md' not in html  # links between pages point at the site's pages
    assert client.get("/docs/no-such-page/").status_code == 404
    assert client.get("/docs/..%2Fsettings/").status_code == 404
    scoring = client.get("/docs/threat-model/").content.decode()
    assert '<script' not in scoring.split('<article class="manual-page">')[1].split("</article>")[0]

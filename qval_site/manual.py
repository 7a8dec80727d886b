"""The manual at ``/docs/``: the Markdown pages of the repository's ``docs/`` folder, rendered by the site
that runs them, so the documentation read on a site is the one of the version it runs.

A page is ``docs/<slug>.md``; its title is its first ``# `` heading. ``docs/index.md`` is the contents
page (``/docs/``). A link from one page to another is written as on a code host, ``[scoring](scoring.md)``
or ``scoring.md#anchor``, and served as a link to ``/docs/scoring/``; headings get ``id`` anchors from their text.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import slugify
from markdown_it import MarkdownIt

SLUG = re.compile(r"[a-z0-9][a-z0-9-]*")
"""The name of a page: lower-case letters, digits and hyphens (its file is ``docs/<slug>.md``)."""
_LINK = re.compile(r'href="(?P<slug>[a-z0-9][a-z0-9-]*)\.md(?P<anchor>#[^"]*)?"')
_HEADING = re.compile(r"<h(?P<level>[1-4])>(?P<text>.*?)</h(?P=level)>")
_RENDERER = MarkdownIt("commonmark", {"html": False}).enable("table")


@dataclass(frozen=True)
class Page:
    """One page of the manual: its ``slug``, ``title`` and the HTML of its text."""

    slug: str
    title: str
    html: SafeString


def docs_dir() -> Path:
    """The folder of the manual's Markdown files (``docs/`` beside the code)."""
    return Path(settings.BASE_DIR) / "docs"


def _title(text: str, slug: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return slug.replace("-", " ").capitalize()


def _anchored(html: str) -> str:
    """``html`` with an ``id`` on each heading (its text, slugified), so ``page.md#heading`` links land."""
    def heading(match: re.Match[str]) -> str:
        plain = re.sub(r"<[^>]+>", "", match["text"])
        return f'<h{match["level"]} id="{slugify(plain)}">{match["text"]}</h{match["level"]}>'
    return _HEADING.sub(heading, html)


def _url(slug: str) -> str:
    return reverse("docs") if slug == "index" else reverse("docs-page", args=[slug])


@functools.lru_cache(maxsize=64)
def _render(path: Path, mtime_ns: int) -> tuple[str, SafeString]:
    text = path.read_text(encoding="utf-8")
    html = _RENDERER.render(text)  # html=False: raw HTML in a page is printed as text
    html = _LINK.sub(lambda m: f'href="{_url(m["slug"])}{m["anchor"] or ""}"', html)
    return _title(text, path.stem), mark_safe(_anchored(html))


def page(slug: str) -> Page:
    """The page ``slug`` (:class:`Http404` when there is none)."""
    path = docs_dir() / f"{slug}.md"
    if not SLUG.fullmatch(slug) or not path.is_file():
        raise Http404(f"the manual has no page {slug!r}")
    title, html = _render(path, path.stat().st_mtime_ns)
    return Page(slug, title, html)


def pages() -> list[Page]:
    """Every page of the manual but the contents page, in the order of their file names."""
    return [page(p.stem) for p in sorted(docs_dir().glob("*.md")) if p.stem != "index" and SLUG.fullmatch(p.stem)]


def manual(request: HttpRequest, slug: str = "index") -> HttpResponse:
    """A page of the manual (``/docs/`` is its contents page), with the list of every page beside it."""
    return render(request, "qval_site/manual.html", {"page": page(slug), "pages": pages()})

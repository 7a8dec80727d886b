"""The site's navigation (``base.html``): a few doors, each opening a section whose pages are listed in a second
line under the bar, and the marker of the current page.

:data:`SECTIONS` is the one place that says which page belongs to which door: the bar shows one entry per public section
(:func:`doors`; with the account's entries at most seven), the section's own line (:func:`section_pages`) its pages.
"""

from __future__ import annotations

from dataclasses import dataclass

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@dataclass(frozen=True)
class Door:
    """One page of a section: its ``label``, the URL name it opens (with ``args``) and the URL names of the pages
    it stands for (its own included), so that a board's page marks *Boards*."""

    label: str
    url_name: str
    args: tuple[str, ...] = ()
    also: tuple[str, ...] = ()
    title: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        """Every URL name this door marks as current."""
        return (self.url_name, *self.also)


@dataclass(frozen=True)
class Section:
    """A door of the bar and the pages behind it (the first page is where the door opens)."""

    label: str
    pages: tuple[Door, ...]
    account: bool = False
    """A section of a signed-in reader's own pages: its doors are the account part of the bar (``base.html``)."""

    @property
    def names(self) -> tuple[str, ...]:
        """Every URL name of the section."""
        return tuple(n for p in self.pages for n in p.names)


SECTIONS: tuple[Section, ...] = (
    Section("Boards", (
        Door("Boards", "boards", also=("board", "result")),
        Door("Tables", "tables", also=("table",), title="Every method on every environment"),
        Door("Full table", "leaderboard", title="Every public row, with filters and exports"),
        Door("Compare", "compare", title="A vs B: a paired bootstrap of two results"),
    )),
    Section("Figures", (
        Door("Figures", "figure", ("per-family",)),
        Door("Paper figures", "paper-figure", ("fig2",)),
        Door("Aggregates", "aggregate"),
        Door("CD diagram", "critical-difference", title="Critical-difference diagram"),
        Door("Best-of-N", "best-of-n", also=("best-of-n-run", "best-of-n-episode")),
        Door("Findings", "published-findings", title="The paper's claims, checked against its data"),
        Door("Consistency", "published-consistency", title="Reported and re-scored, cell by cell"),
    )),
    Section("Datasets", (
        Door("Datasets", "datasets", also=("dataset",)),
        Door("Learned methods", "learned", also=("learned-run",)),
    )),
    Section("Docs", (
        Door("Manual", "docs", also=("docs-page",)),
        Door("How we score", "how-we-score"),
        Door("API docs", "api-docs"),
        Door("Status", "status"),
    )),
    Section("My submissions", (
        Door("My submissions", "my-submissions", also=("submission",)),
        Door("Submit", "upload"),
        Door("API token", "api-token"),
    ), account=True),
)
"""The sections of the site, in the order of the bar."""
EXTRA_MEMBERS = {"method": "Datasets", "environment": "Datasets"}
"""Pages without a door of their own, by the section they belong to (a method's or an environment's page)."""


@dataclass(frozen=True)
class Link:
    """A rendered door: its label, URL, title and whether it is the current page (or section)."""

    label: str
    url: str
    title: str
    current: bool


def _url(door: Door) -> str | None:
    """The URL of ``door``; ``None`` where this build has no such route (the manual before ``/docs/`` exists)."""
    try:
        return reverse(door.url_name, args=door.args)
    except NoReverseMatch:
        return None


def _current_name(context: template.Context) -> str | None:
    """The URL name of the page, ``None`` on an error page (its template has ``exception``; the 500 page has no
    request) so that no door is marked there."""
    match = getattr(context.get("request"), "resolver_match", None)
    if match is None or "exception" in context:
        return None
    return match.url_name


def _section_of(name: str | None) -> Section | None:
    for section in SECTIONS:
        if name in section.names or EXTRA_MEMBERS.get(name or "") == section.label:
            return section
    return None


def _door_of(section: Section) -> tuple[str, str] | None:
    """(URL, title) where the section's door opens: its first page this build has."""
    for page in section.pages:
        url = _url(page)
        if url is not None:
            return url, page.title
    return None


@register.simple_tag(takes_context=True)
def doors(context: template.Context) -> list[Link]:
    """The bar's entries of the public sections (the account's are ``base.html``'s own), the current one marked."""
    here = _section_of(_current_name(context))
    links = []
    for section in SECTIONS:
        if section.account:
            continue
        opened = _door_of(section)
        if opened is not None:
            links.append(Link(section.label, opened[0], opened[1], section is here))
    return links


@register.simple_tag(takes_context=True)
def section_pages(context: template.Context) -> list[Link]:
    """The pages of the current page's section, the current one marked; none outside a section or where the
    section has a single page."""
    name = _current_name(context)
    section = _section_of(name)
    if section is None:
        return []
    links = [Link(p.label, url, p.title, name in p.names) for p in section.pages if (url := _url(p)) is not None]
    return links if len(links) > 1 else []


@register.simple_tag(takes_context=True)
def current(context: template.Context, *url_names: str) -> SafeString:
    """`` aria-current="page"`` when the request's URL is one of ``url_names``, else nothing (nothing on an error
    page either: see :func:`_current_name`)."""
    name = _current_name(context)
    return mark_safe(' aria-current="page"' if name is not None and name in url_names else "")

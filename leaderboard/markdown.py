"""Markdown written by the platform (dataset cards) rendered as HTML for our pages.

CommonMark through ``markdown-it-py`` with ``html=False``: raw HTML in the text is printed as
text, never passed through, and link targets with a script scheme (``javascript:``,
``vbscript:``, ``data:`` other than images) are not made links -- so a card cannot put markup or
script on a page whatever it holds.
"""

from __future__ import annotations

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

_RENDERER = MarkdownIt("commonmark", {"html": False}).enable("table")


def render(text: str) -> SafeString:
    """``text`` (Markdown) as HTML that is safe to insert in a page."""
    return mark_safe(_RENDERER.render(text))  # raw HTML was escaped (html=False)

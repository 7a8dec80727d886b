"""The site navigation's marker of the current page (``base.html``)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@register.simple_tag(takes_context=True)
def current(context: template.Context, *url_names: str) -> SafeString:
    """`` aria-current="page"`` when the request's URL is one of ``url_names``, else nothing.  Nothing on an
    error page either: the 404 page (Django's view gives its template the ``exception``), even where a view
    of a marked URL raised it, and the 500 page (rendered without a request)."""
    match = getattr(context.get("request"), "resolver_match", None)
    if match is None or "exception" in context or match.url_name not in url_names:
        return mark_safe("")
    return mark_safe(' aria-current="page"')

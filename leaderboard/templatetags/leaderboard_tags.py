"""Template helpers for the leaderboard pages."""

from __future__ import annotations

from typing import Any

from django import template

from qval.metrics import significance_marks

register = template.Library()


@register.filter
def get_item(mapping: dict[str, Any], key: str) -> Any:
    """``mapping[key]`` in a template."""
    return mapping.get(key)


@register.filter
def stars(p_value: float | None) -> str:
    """The paper's significance marks for a p-value."""
    return significance_marks(p_value)


@register.simple_tag(takes_context=True)
def sort_query(context: template.Context, key: str) -> str:
    """The current query string with ``sort`` toggled for column ``key``."""
    params = context["request"].GET.copy()
    current = params.get("sort", "-spearman")
    params["sort"] = key if current == f"-{key}" else f"-{key}"
    return params.urlencode()

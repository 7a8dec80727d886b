"""The boards overview that other pages (the home page) include."""

from __future__ import annotations

from typing import Any

from django import template

from qval import metric_registry

from .. import boards

register = template.Library()


@register.inclusion_tag("board/_boards_overview.html")
def boards_overview() -> dict[str, Any]:
    """The canonical boards (:func:`board.boards.canonical_boards`): hosted datasets, then the
    QVal v1.0 published results."""
    return {**boards.canonical_boards(), "metric": metric_registry.get(metric_registry.HEADLINE)}

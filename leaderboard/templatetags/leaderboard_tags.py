"""Template helpers for the leaderboard pages."""

from __future__ import annotations

from typing import Any

from django import template

from qval import metric_registry, sampling
from qval.metrics import significance_marks

register = template.Library()


@register.simple_tag
def board_metrics() -> list[metric_registry.MetricSpec]:
    """The registry's board metrics, in order: the leaderboard tables' metric columns."""
    return [spec for spec in metric_registry.METRICS if spec.board]


@register.filter
def metric_label(name: str) -> str:
    """The registry's label of metric ``name`` (``kendall_tau`` reads *Kendall τ-b*); a name no longer
    registered (a stored row of a removed plugin's metric) as it is."""
    try:
        return metric_registry.get(name).label
    except KeyError:
        return name


@register.filter
def resampled(details: dict[str, Any] | None) -> str:
    """What an interval's resamples drew, in words (:func:`qval.sampling.describe` of a result's
    ``ci95_resampled`` or a comparison's ``resampled``)."""
    return sampling.describe(details)


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
    current = params.get("sort", f"-{metric_registry.HEADLINE}")
    params["sort"] = key if current == f"-{key}" else f"-{key}"
    return params.urlencode()


BADGES = {
    "reported": "reported by the authors",
    "rescored": "re-scored from published predictions",
    "baseline": "baseline",
    "user": "user",
}


@register.inclusion_tag("leaderboard/_badge.html")
def badge(source: str) -> dict[str, str]:
    """The source badge of a result row (reported, re-scored, baseline, user)."""
    return {"source": source, "label": BADGES.get(source, source)}


@register.simple_tag(takes_context=True)
def query_with(context: template.Context, **changes: Any) -> str:
    """The current query string with some parameters replaced (``None`` removes one)."""
    params = context["request"].GET.copy()
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    return params.urlencode()

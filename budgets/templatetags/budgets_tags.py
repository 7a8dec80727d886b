"""``{% retired_notice dataset slice %}``: the banner of a board whose hidden split was replaced by a fresh one."""

from __future__ import annotations

from typing import Any

from django import template

from leaderboard.models import Dataset

register = template.Library()


@register.inclusion_tag("budgets/_retired.html")
def retired_notice(dataset: Dataset, board_slice: Any = None) -> dict[str, object]:
    """What the banner of a retired ``dataset`` says (nothing, and no query, for one that is not retired), and
    the key of the same board on its replacement (``board_slice``: the board's target and modality)."""
    if not isinstance(dataset, Dataset) or dataset.replaced_by_id is None:
        return {"dataset": None}
    replacement = dataset.replaced_by
    key = f"{replacement.key}:{board_slice.target}:{board_slice.modality}" if board_slice is not None else None
    return {"dataset": dataset, "replacement": replacement, "replacement_board": key}

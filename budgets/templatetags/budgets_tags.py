"""``{% retired_notice dataset slice %}``: the banner of a board whose hidden split was replaced by a fresh one."""

from __future__ import annotations

from typing import Any

from django import template

from budgets.services import retirement
from leaderboard.models import Dataset

register = template.Library()


@register.inclusion_tag("budgets/_retired.html")
def retired_notice(dataset: Dataset, board_slice: Any = None) -> dict[str, object]:
    """The refresh that retired ``dataset``'s hidden split (nothing is shown when none did), and the key of the
    same board on its replacement (``board_slice``: the board's target and modality)."""
    refresh = retirement(dataset) if isinstance(dataset, Dataset) else None
    key = None
    if refresh is not None and board_slice is not None:
        key = f"{refresh.replacement.key}:{board_slice.target}:{board_slice.modality}"
    return {"refresh": refresh, "replacement_board": key}

"""What other apps' pages show of the boards: the overview (the home page) and where a submission stands (the
submissions' pages, whose app sits below this one and so asks here rather than importing it)."""

from __future__ import annotations

from typing import Any

from django import template

from qval import metric_registry
from qval.schema import PUBLIC_SPLITS
from submissions.models import Submission

from .. import boards
from ..standing import AROUND, Standing, standing

register = template.Library()


@register.inclusion_tag("board/_boards_overview.html")
def boards_overview() -> dict[str, Any]:
    """The canonical boards (:func:`board.boards.canonical_boards`): hosted datasets, then the
    QVal v1.0 published results."""
    return {**boards.canonical_boards(), "metric": metric_registry.get(metric_registry.HEADLINE)}


@register.simple_tag
def standing_of(sub: Submission, around: int = AROUND) -> Standing | None:
    """Where the submission ``sub`` stands on its board (:func:`board.standing.standing`, with ``around`` rows
    either side), ``None`` unless it is finished on a hidden split and ranked: ``{% standing_of sub as standing %}``."""
    if sub.state != Submission.FINISHED or sub.split in PUBLIC_SPLITS:
        return None
    return standing(sub.pk, boards.Slice(sub.dataset.key, sub.target, sub.modality), around)

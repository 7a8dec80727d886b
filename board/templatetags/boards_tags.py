"""What other apps' pages show of the boards: the overview (the home page), where a submission stands (the
submissions' pages, whose app sits below this one and so asks here rather than importing it), and the image
methods' weights note (the image methods' pages and the hosted image boards)."""

from __future__ import annotations

from typing import Any

from django import template
from django.db.models import Count

from leaderboard.models import Dataset
from qval import metric_registry
from qval.methods.encoders import NAMED_ENCODERS
from qval.methods.registry import all_methods
from qval.schema import PUBLIC_SPLITS
from submissions.baselines import image_runs_with_weights
from submissions.models import Submission

from .. import boards, evaluations
from ..standing import AROUND, Standing, standing

register = template.Library()


@register.inclusion_tag("board/_boards_overview.html")
def boards_overview() -> dict[str, Any]:
    """The canonical boards (:func:`board.boards.canonical_boards`): hosted datasets, then the
    QVal v1.0 published results."""
    return {**boards.canonical_boards(), "metric": metric_registry.get(metric_registry.HEADLINE)}


@register.inclusion_tag("board/_encoder_weights.html")
def encoder_weights_note(dataset: Dataset | None = None) -> dict[str, Any]:
    """What the image methods need and whether they were run here: their names, the named encoders and their
    settings (:data:`qval.methods.encoders.NAMED_ENCODERS`), and the platform's finished runs of them with real
    weights (:func:`submissions.baselines.image_runs_with_weights`), on ``dataset`` when given (a board)."""
    return {"methods": [m.name for m in all_methods() if m.modality == "image"],
            "settings": [f"QVAL_ENCODER_{name.upper()}" for name in NAMED_ENCODERS],
            "runs": image_runs_with_weights(dataset), "dataset": dataset}


@register.simple_tag
def standing_of(sub: Submission, around: int = AROUND) -> Standing | None:
    """Where the submission ``sub`` stands on its board (:func:`board.standing.standing`, with ``around`` rows
    either side), ``None`` unless it is finished on a hidden split and ranked: ``{% standing_of sub as standing %}``."""
    if sub.state != Submission.FINISHED or sub.split in PUBLIC_SPLITS:
        return None
    return standing(sub.pk, boards.Slice(sub.dataset.key, sub.target, sub.modality), around)


@register.simple_tag
def rows_by_source(dataset: Dataset) -> dict[str, int]:
    """``dataset``'s finished rows by source (reported, rescored, ...), counted once per results version
    (:func:`board.evaluations.derived`): the page of an authors' dataset (``leaderboard``, an app below this one)
    shows them without a count per request: ``{% rows_by_source ds as sources %}``."""
    return evaluations.derived(("rows-by-source", dataset.pk), lambda _: dict(
        dataset.submissions.filter(state=Submission.FINISHED).order_by().values("source")
        .annotate(n=Count("pk")).values_list("source", "n")))

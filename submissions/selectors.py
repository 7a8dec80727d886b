"""Reads of submissions shared by the pages and the API: who may open one, and why a finished one is on no board."""

from __future__ import annotations

from django.db.models import Q

from qval import metric_registry
from qval.metrics import MIN_USABLE_POINTS
from qval.schema import PUBLIC_SPLITS

from .models import Submission


def visible_to(user) -> Q:  # type: ignore[no-untyped-def]
    """The submissions a signed-in ``user`` may open: their own, and every baseline run (the platform's)."""
    return Q(user=user) | Q(source=Submission.SOURCE_BASELINE)


def why_unranked(sub: Submission) -> str:
    """Why the finished submission ``sub`` (a :class:`Submission`) is on no board, in one
    sentence for its owner; empty when nothing keeps it off (it is on its board, or will be once the results version
    moves)."""
    env = sub.dataset.environment
    if sub.state != Submission.FINISHED:
        return ""
    if sub.split in PUBLIC_SPLITS:
        return (f"A {sub.split} result is a self-check on public labels: it is on no board. Submit on the test split "
                f"to be ranked.")
    if not sub.ranked():
        return (f"{env.name} is open book (its labels follow from its observations), so its test board ranks only "
                f"rows the platform ran itself: built-in baselines, method containers, training runs. An uploaded "
                f"file is scored for its uploader and ranked nowhere.")
    if sub.score_withheld:
        return "It did not significantly beat your best on this split (the Ladder), so your best stays on the board."
    if not sub.public:
        return "It is private: only you see it. Make it public below to put it on its board."
    if sub.ladder_climbed and Submission.objects.filter(ladder_against=sub, ladder_climbed=True).exists():
        return "A later submission of yours climbed past it on the Ladder and replaced it on the board."
    headline = sub.results.filter(metric=metric_registry.HEADLINE).values_list("value", flat=True).first()
    if headline is None:
        label = metric_registry.get(metric_registry.HEADLINE).short
        return (f"It has no {label}: fewer than {MIN_USABLE_POINTS} usable points, or constant scores, so it cannot "
                f"be ranked.")
    return ""

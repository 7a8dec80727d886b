"""The consistency page of the published QVal v1.0 results (``/published/consistency/``): cell by cell,
the authors' reported number next to the one we re-score from their stored predictions, with why they
differ (:func:`qval.consistency.table`), and the errata of the paper's tables (:mod:`qval.errata`)."""

from __future__ import annotations

from collections import Counter

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from leaderboard.published import errata_context
from qval import consistency, metric_registry
from qval.paper.qval_v1 import published
from submissions.models import Result, Submission

from . import evaluations
from .results import public_results

def rescored_values() -> list[consistency.RescoredValue]:
    """The re-scored numbers on the site (finished *re-scored* rows, the metrics the authors report), in
    the order of their environment, backbone, target and method; ``ref`` is the row's submission id."""
    results = (Result.objects.filter(submission__source=Submission.SOURCE_RESCORED, submission__state=Submission.FINISHED,
                                      metric__in=metric_registry.HEADLINES)
               .select_related("submission__dataset__environment")
               .order_by("submission__dataset__environment__slug", "submission__backbone_name", "submission__target",
                         "submission__method_name", "metric"))
    return [consistency.RescoredValue(
        environment=r.submission.dataset.environment.name, backbone=r.submission.backbone_name,
        method=r.submission.method_name, target=r.submission.target, modality=r.submission.modality,
        metric=r.metric, value=r.value, file=str(r.submission.provenance.get("file", "")), ref=r.submission_id,
    ) for r in results]


def _page_context(_: object) -> dict[str, object]:
    """What the consistency page shows, read afresh (kept per results version by :func:`consistency_page`)."""
    cells = consistency.table(published.reported()[1], rescored_values())
    linked = set(public_results().filter(pk__in=[c.ref for c in cells if c.ref]).values_list("pk", flat=True))
    counts = Counter(c.reason for c in cells)
    sources_provenance, sources = consistency.label_sources()
    return {
        "cells": cells, "linked": linked, "tolerance": consistency.TOLERANCE,
        "reasons": [(code, name, counts[code]) for code, name in consistency.REASONS.items() if counts[code]],
        "decided": [(code, consistency.REASONS[code], rule) for code, rule in consistency.DECIDED.items()],
        "differing": sum(1 for c in cells if c.difference is not None and abs(c.difference) > consistency.TOLERANCE),
        "sources": list(sources.values()), "sources_provenance": sources_provenance,
        **errata_context(),
    }


def consistency_page(request: HttpRequest) -> HttpResponse:
    """Reported against re-scored, cell by cell, with the reasons, the label sources and the errata: computed once
    per results version, its table rendered once too (a fragment of the shared cache)."""
    version = evaluations.version()  # before the values: a cached fragment is never older than its key
    return render(request, "board/consistency.html",
                  {"results_version": version, **evaluations.derived(("consistency-page",), _page_context)})

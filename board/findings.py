"""The findings page of the published QVal v1.0 results (``/published/findings/``): each headline claim of
the paper and its website next to the view that supports it, with the verdict :mod:`qval.findings`
computes by tests from the authors' reported rows as the site draws them (the paper figures' default views),
and each test with its units and n."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

from qval import findings as qfindings
from qval import metric_registry

from . import boards, evaluations, paper_figures
from .evaluations import Evaluation

def _reported_rows(rows: Sequence[Evaluation]) -> list[dict[str, Any]]:
    """One row per reported number: method, family, environment, backbone, target, modality, metric, value."""
    return [{"method": e.method, "family": e.family, "environment": e.environment, "backbone": e.backbone,
             "target": e.target, "modality": e.modality, "metric": metric, "value": e.value(metric)}
            for e in boards.of_source(rows, boards.REPORTED) for metric in metric_registry.HEADLINES
            if e.value(metric) is not None]


def view_rows(name: str) -> list[dict[str, Any]]:
    """The rows of the view ``name`` (:data:`qval.findings.VIEWS`): the paper figure's rows under its
    parameters (the authors' reported rows), or the reported rows themselves."""
    view = qfindings.VIEWS[name]
    if view.figure is None:
        return evaluations.derived(("findings-reported",), _reported_rows)
    spec = paper_figures.PAPER_FIGURES[view.figure]
    return paper_figures.build(spec, paper_figures.read(spec, view.params)).rows


def view_url(name: str) -> str:
    """Where a reader sees the view ``name``: the paper figure page with its parameters, or the board of
    reported rows."""
    view = qfindings.VIEWS[name]
    if view.figure is None:
        return f"{reverse('leaderboard')}?{urlencode({'source': boards.REPORTED})}"
    url = reverse("paper-figure", args=[view.figure])
    return f"{url}?{urlencode(dict(view.params))}" if view.params else url


def current_findings() -> list[qfindings.Finding]:
    """Every claim with its verdict over the current results (:func:`qval.findings.findings`)."""
    return qfindings.findings({name: view_rows(name) for name in qfindings.VIEWS})


def _page_context(_: object) -> dict[str, Any]:
    """What the findings page shows, computed afresh (the tests take about 100 ms: kept per results version by
    :func:`findings_page`)."""
    provenance, _claims = qfindings.claims()
    found = current_findings()
    counts = Counter(f.verdict for f in found)
    return {
        "findings": [(f, view_url(f.claim.view), qfindings.VIEWS[f.claim.view].caption) for f in found],
        "counts": [(code, label, counts[code]) for code, label in qfindings.VERDICTS.items() if counts[code]],
        "rules": [(code, rule) for code, rule in qfindings.VERDICT_RULE.items() if code != "no-data"],
        "alpha": qfindings.ALPHA, "margin": qfindings.SMALL_GAIN, "provenance": provenance,
    }


def findings_page(request: HttpRequest) -> HttpResponse:
    """Each claim, where it is made, its verdict with the numbers, and a link to the view behind it: computed once
    per results version, the claims' sections rendered once too (a fragment of the shared cache)."""
    version, context = evaluations.versioned(("findings-page",), _page_context)
    return render(request, "board/findings.html", {"results_version": version, **context})

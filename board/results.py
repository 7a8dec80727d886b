"""Public result pages: one permalink per result on a public board (``/results/<id>/``).

A result has a page when it is on the boards (:func:`board.evaluations.on_board`: finished, public, rankable,
its account's ladder best) and on a hidden split: a dev result is its submitter's own self-check and stays on
*My submissions*. Anyone, signed in or not, may read it. The page shows only what the board discloses --
the stored (disclosed) aggregates of the registry's metrics, never predictions or per-state numbers -- with
the method card, the submitter's name, the date, the source and, for imported rows, their provenance.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from qval import consistency, metric_registry
from qval.schema import PUBLIC_SPLITS
from submissions import comparison
from submissions.comparison import Reference
from submissions.models import Result, Submission
from submissions.selectors import why_unranked

from . import evaluations
from .boards import AUTHORS, SOURCES, Slice, platform_runs, source_of
from .evaluations import Evaluation, on_board
from .standing import standing


@dataclass(frozen=True)
class SourcedRow:
    """A submission as :func:`board.boards.source_of` reads it."""

    submission_id: int
    source: str


@dataclass(frozen=True)
class ResultLine:
    """One metric of a result page: its registry label and the disclosed numbers."""

    label: str
    short: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    num_points: int
    precision: int
    marks: str = ""
    """The significance marks the paper prints beside a reported number (it gives no p-value), or an erratum's
    marks computed from the authors' number (then :attr:`marks_how` says how)."""
    marks_how: str = ""


def public_results() -> QuerySet[Submission]:
    """The submissions that have a public result page."""
    return on_board().exclude(split__in=sorted(PUBLIC_SPLITS))


def result_lines(stored: Iterable[Result], both_signs: bool) -> list[ResultLine]:
    """The registry's metrics among a submission's ``stored`` results, in the registry's order, less those that say
    nothing unless its labels have both signs (``both_signs``, :func:`qval.metric_registry.shown`)."""
    by_metric = {r.metric: r for r in stored}
    lines = []
    for spec in metric_registry.METRICS:
        r = by_metric.get(spec.name)
        if r is None or not metric_registry.shown(spec.name, both_signs):
            continue
        ci = r.details.get("ci95") if isinstance(r.details, dict) else None
        low, high = ci if isinstance(ci, list) and len(ci) == 2 else (None, None)
        printed = r.details.get("paper") if isinstance(r.details, dict) else None
        marks = printed.get("stars", "") if isinstance(printed, dict) else ""
        computed = r.details.get("computed_marks") if isinstance(r.details, dict) else None
        how = ""
        if not marks and isinstance(computed, dict):
            marks, how = str(computed.get("stars", "")), str(computed.get("how", ""))
        lines.append(ResultLine(spec.label, spec.short, r.value, low, high, r.num_points, spec.precision, marks=marks,
                                marks_how=how))
    return lines


class _Pages:
    """What result pages read of one results version, each once: the ids that have a page, and per slice the
    reference rows and whether the labels have both signs."""

    def __init__(self, rows: list[Evaluation]) -> None:
        self.public = frozenset(e.submission_id for e in rows if e.split not in PUBLIC_SPLITS)
        self._references: dict[tuple[int, str, str, str, str], list[Reference]] = {}
        self._both_signs: dict[tuple[int, str], bool] = {}

    def references(self, sub: Submission) -> list[Reference]:
        """:func:`submissions.comparison.slice_references` of ``sub``, once per slice."""
        key = (sub.dataset_id, sub.split, sub.target, sub.rules, sub.modality)
        made = self._references.get(key)
        if made is None:
            made = self._references[key] = comparison.slice_references(sub)
        return made

    def both_signs(self, sub: Submission) -> bool:
        """:meth:`leaderboard.models.Dataset.labels_have_both_signs` of ``sub``'s dataset and target."""
        key = (sub.dataset_id, sub.target)
        made = self._both_signs.get(key)
        if made is None:
            made = self._both_signs[key] = sub.dataset.labels_have_both_signs(sub.target)
        return made


def _pages() -> _Pages:
    return evaluations.derived(("result-pages",), _Pages)


def result_page(request: HttpRequest, pk: int) -> HttpResponse:
    """The permalink of one public test result (404 for any other submission, whoever asks): where it stands on its
    board at the top (rank range and the rows around it), then its card and every disclosed metric.  Whether it has
    a page is read from the evaluations of the current results version (the rows of :func:`public_results`)."""
    pages = _pages()
    if pk not in pages.public:
        raise Http404(f"no public result {pk}: a result has a page once it is on a board")
    sub = get_object_or_404(Submission.objects.select_related("dataset__environment", "method", "backbone", "user"),
                            pk=pk)
    own = request.user.is_authenticated and sub.user_id == request.user.pk
    source = source_of(SourcedRow(sub.pk, sub.source), platform_runs())  # the boards' badge
    both_signs = pages.both_signs(sub)
    stored = list(Result.objects.filter(submission=sub))
    lines = result_lines(stored, both_signs)
    slice_ = Slice(sub.dataset.key, sub.target, sub.modality)
    comparable = own or sub.source != Submission.SOURCE_USER  # submissions.comparison's public rows
    place = standing(sub.pk, slice_)
    context = {
        "sub": sub, "lines": lines, "own": own,
        "one_sign_note": "" if both_signs or len(lines) == len(stored) else metric_registry.ONE_SIGN_NOTE,
        "submitter": AUTHORS if sub.source in Submission.IMPORTED_SOURCES else sub.submitted_by,
        "source": SOURCES[source], "source_key": source, "baseline": sub.source == Submission.SOURCE_BASELINE,
        "permalink": request.build_absolute_uri(reverse("result", args=[sub.pk])),
        "standing": place, "why_unranked": "" if place else why_unranked(sub),
        "comparable": comparable, "references": comparison.reference_rows(sub, pages.references(sub)) if comparable else [],
        "label_source": (consistency.label_sources()[1].get(str(sub.provenance.get("file", "")))
                         if sub.source == Submission.SOURCE_RESCORED else None),
    }
    return render(request, "board/result.html", context)

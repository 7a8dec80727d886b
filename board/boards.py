"""Boards: one ranked table per benchmark slice, and their pages.

A **board** is one slice -- a dataset version, the test split, a target and a modality -- ranked by one
metric (:data:`qval.metric_registry.HEADLINE`, Spearman ρ, unless ``?metric=`` names another of
:data:`qval.metric_registry.COMPARABLE`).  Its rows are the evaluations of :mod:`board.evaluations`
on that slice, so the same rules hold: a dev (or any public-split) result is on no board, a hidden split's
ladder shows each account's current best only, and an uploaded file on an open-book dataset is ranked
nowhere.

By default a board keeps one row per **entry**: submitter, method and backbone (the authors' imported rows
are one submitter, reported and re-scored alike).  Of an entry's submissions it keeps the one with a
confidence interval if any has one, then the best value, then the newest; ``?all=1`` ranks every
submission.  Ranks are :mod:`qval.ranks` ranges (:mod:`board.ranking`): paired tests among rows that share their
points, interval non-overlap for the others, approximate intervals for numbers reported without one.

Every row carries a **source**: *verified* (the platform made its predictions: a built-in method, a
method container, a training run -- :meth:`submissions.models.Submission.platform_run`), *self-reported*
(an uploaded predictions file), and the imported *reported* and *re-scored* rows of QVal v1.0.

**Verified first**: a board has two tabs (:data:`TABS`, ``?source=``).  The main one, what ``/boards/``, the
home page and a board's permalink show, ranks the rows the platform ran (and on a published board the
authors' rows); uploaded files are ranked apart, among themselves, on the *self-reported* tab, so a file
whose scores its submitter computed -- or reconstructed from released numbers -- never leads a board or a
headline.

Everything a page shows is computed once per results version (:func:`board.evaluations.derived`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from django.core.paginator import Paginator
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from qval import metric_registry, ranks, sampling
from qval.metrics import MIN_USABLE_POINTS
from qval.metric_registry import MetricSpec

from . import evaluations, ranking
from .evaluations import Evaluation, Score
from leaderboard.models import Dataset

SPLIT = "test"
"""The split every board ranks: the hidden one (dev results are their submitter's own self-check)."""
TARGETS = ("q", "v")
MODALITIES = ("text", "image")
METRICS: tuple[str, ...] = metric_registry.COMPARABLE
"""Metrics a board may rank by (correlations in [-1, 1] with a bootstrap interval)."""

VERIFIED, SELF_REPORTED, REPORTED, RESCORED = "verified", "self-reported", "reported", "rescored"
SOURCES: dict[str, tuple[str, str]] = {
    VERIFIED: ("verified", "run by the platform: a built-in method, a method container or a training run"),
    SELF_REPORTED: ("self-reported", "an uploaded predictions file: the submitter computed the scores"),
    REPORTED: ("reported", "a number the QVal v1.0 authors report (no interval: ranked by an approximate one)"),
    RESCORED: ("re-scored", "the QVal v1.0 authors' published predictions, scored here"),
}
"""Source badges of board rows: key -> (label, what it means)."""
AUTHORS = "QVal v1.0 authors"
"""The submitter shown for (and the account grouping) the imported rows."""


@dataclass(frozen=True)
class Slice:
    """One benchmark slice: ``dataset`` (``slug@version``), the test split, ``target`` and ``modality``."""

    dataset: str
    target: str
    modality: str

    @property
    def key(self) -> str:
        """``dataset:target:modality``, the board's URL segment (``frozenlake-8x8@1.2:q:text``)."""
        return f"{self.dataset}:{self.target}:{self.modality}"

    @classmethod
    def parse(cls, key: str) -> "Slice":
        """The slice of a :attr:`key`; :class:`~django.http.Http404` naming the expected form otherwise."""
        parts = key.split(":")
        if len(parts) != 3 or "@" not in parts[0] or parts[1] not in TARGETS or parts[2] not in MODALITIES:
            raise Http404(f"no board {key!r}: a board is DATASET@VERSION:TARGET:MODALITY, "
                          f"target one of {', '.join(TARGETS)}, modality one of {', '.join(MODALITIES)}")
        return cls(*parts)

    def holds(self, e: Evaluation) -> bool:
        """Whether ``e`` is an evaluation of this slice."""
        return (e.split == SPLIT and e.dataset == self.dataset and e.target == self.target
                and e.modality == self.modality)


@dataclass(frozen=True)
class Row:
    """One ranked row of a board."""

    rank: ranks.Rank
    evaluation: Evaluation
    score: Score
    source: str
    submitter: str
    board_metric: MetricSpec

    @property
    def value(self) -> float:
        """The ranking metric's value."""
        assert self.score.value is not None
        return self.score.value

    @property
    def interval(self) -> ranks.Row:
        """The interval the row is ranked by: its bootstrap interval, else an approximate one
        (:func:`board.ranking.rank_row`)."""
        return ranking.rank_row(self.board_metric, self.score)

    @property
    def baseline(self) -> bool:
        """Whether the row is one of the platform's baseline runs."""
        return self.evaluation.source == "baseline"

    def as_dict(self) -> dict[str, Any]:
        """The row as the board's JSON gives it."""
        e, s = self.evaluation, self.score
        return {
            "rank": self.rank.label, "rank_best": self.rank.best, "rank_worst": self.rank.worst,
            "rank_approximate": self.rank.approximate, "submission_id": e.submission_id, "method": e.method,
            "backbone": e.backbone, "value": s.value, "ci_low": s.ci_low, "ci_high": s.ci_high,
            "ci_resampled": sampling.describe(s.resampled) if s.ci_low is not None else None,
            "rank_interval": [self.interval.ci_low, self.interval.ci_high],
            "p_value": s.p_value, "num_points": s.num_points, "source": self.source, "baseline": self.baseline,
            "submitted_by": self.submitter, "date": e.date.isoformat() if e.date else None,
        }


@dataclass(frozen=True)
class NotRanked:
    """A platform run or a user's file on a board's slice and tab without a value of its metric (fewer usable points
    than a value needs, constant predictions, or not disclosed): shown under the board, so that a method that ran is
    never missing without a word.  ``usable_points``: the points its predictions scored."""

    submission_id: int
    method: str
    backbone: str
    source: str
    usable_points: int

    @property
    def reason(self) -> str:
        """Why it has no value, in a few words."""
        if self.usable_points < MIN_USABLE_POINTS:
            return f"fewer than the {MIN_USABLE_POINTS} usable points a value needs"
        return "constant predictions, or a value not disclosed"

    def as_dict(self) -> dict[str, Any]:
        """As the board's JSON gives it."""
        return {"submission_id": self.submission_id, "method": self.method, "backbone": self.backbone,
                "source": self.source, "usable_points": self.usable_points, "reason": self.reason}


@dataclass(frozen=True)
class Board:
    """A slice ranked by ``metric``: ``rows`` in order of the value (best first); ``unranked`` counts the
    slice's evaluations without a value of the metric (too few points, constant, not disclosed), and
    ``not_ranked`` names them, the newest per submitter, method and backbone that has no ranked row."""

    slice: Slice
    metric: MetricSpec
    all_submissions: bool
    rows: tuple[Row, ...]
    submissions: int
    unranked: int
    tab: str = VERIFIED
    not_ranked: tuple[NotRanked, ...] = ()
    """Which rows it ranks: a key of :data:`TABS`, or :data:`ANY` (every source, for the tables that pick their own)."""


TABS: dict[str, tuple[str, str]] = {
    VERIFIED: ("verified", "the main board: rows the platform ran (built-in methods, method containers, training "
                           "runs) and, on a published board, the QVal v1.0 authors' rows"),
    SELF_REPORTED: ("self-reported", "uploaded predictions files, ranked apart among themselves: their submitters "
                                     "computed the scores, so they never lead the main board or a headline"),
}
"""The tabs of a board (``?source=``): key -> (label, what it ranks); :data:`VERIFIED` is the default."""

ANY = "any"
VIEWS: dict[str, tuple[str, str]] = {
    REPORTED: ("reported", "the numbers reported by the authors of QVal v1.0 in their website's data, which the "
                           "paper's figures plot (15 of them no table of the paper prints as they are: 10 errata, 5 "
                           "values no table holds; marked on the paper figures)"),
    RESCORED: ("re-scored", "the QVal v1.0 authors' published predictions, re-scored by us"),
    VERIFIED: ("verified", "rows the platform ran: built-in baselines, method containers, training runs"),
    SELF_REPORTED: ("self-reported", "uploaded predictions files, scored here"),
    ANY: ("any", "every source pooled: the authors' numbers and ours together"),
}
"""The sources a figure or an aggregate shows one at a time (``?source=``): key -> (label, what it holds);
:data:`ANY` pools them all, only when a reader picks it."""
DEFAULT_VIEW = REPORTED
"""What figures and aggregates show unless the reader picks another source: the paper's numbers."""


class Sourced(Protocol):
    """A row with a source: an :class:`~board.evaluations.Evaluation` or a board export row."""

    @property
    def submission_id(self) -> int:
        """The submission's id."""

    @property
    def source(self) -> str:
        """:attr:`submissions.models.Submission.source` (``user``, ``baseline``, ``rescored``, ``reported``)."""


def view_caption(source: str) -> str:
    """How a figure or aggregate page names the source ``source`` (a key of :data:`VIEWS`) it shows."""
    label, holds = VIEWS[source]
    return f"{label} ({holds})"


def source_of(e: Sourced, platform_runs: frozenset[int]) -> str:
    """The source badge of ``e`` (a key of :data:`SOURCES`)."""
    if e.source == "reported":
        return REPORTED
    if e.source == "rescored":
        return RESCORED
    return VERIFIED if e.submission_id in platform_runs else SELF_REPORTED


S = TypeVar("S", bound=Sourced)


def of_source(rows: Iterable[S], source: str) -> list[S]:
    """The rows of ``rows`` whose :func:`source_of` is ``source`` (a key of :data:`VIEWS`; every row for
    :data:`ANY`), judged against the current results version's platform runs."""
    if source == ANY:
        return list(rows)
    runs = platform_runs()
    return [e for e in rows if source_of(e, runs) == source]


def submitter(e: Evaluation) -> str:
    """Who a row is from: the account's name, or :data:`AUTHORS` for an imported row."""
    return AUTHORS if e.source in ("reported", "rescored") else e.submitted_by


def entry(e: Evaluation) -> tuple[str, str, str]:
    """The entry a submission counts for on a board: (submitter, method, backbone)."""
    return submitter(e), e.method, e.backbone


def _preference(e: Evaluation, metric: MetricSpec) -> tuple[bool, float, int]:
    score = e.scores[metric.name]
    assert score.value is not None
    return score.ci_low is not None, score.value if metric.higher_is_better else -score.value, e.submission_id


def _best_per_entry(rows: Iterable[Evaluation], metric: MetricSpec) -> list[Evaluation]:
    chosen: dict[tuple[str, str, str], Evaluation] = {}
    for e in rows:
        key = entry(e)
        if key not in chosen or _preference(e, metric) > _preference(chosen[key], metric):
            chosen[key] = e
    return list(chosen.values())


class _Index:
    """The boards of one results version: the test-split evaluations by slice, the ids of the platform's
    runs (one query), and each board once it was asked for."""

    def __init__(self, rows: list[Evaluation]) -> None:
        from submissions.models import Submission

        self.slices: dict[Slice, list[Evaluation]] = {}
        for e in rows:
            if e.split == SPLIT:
                self.slices.setdefault(Slice(e.dataset, e.target, e.modality), []).append(e)
        finished = Submission.objects.filter(Submission.platform_run(), state=Submission.FINISHED)
        self.platform_runs = frozenset(finished.values_list("pk", flat=True))
        self.ranking = ranking.Context(self._tested)
        self._boards: dict[tuple[Slice, str, bool], Board] = {}
        self._resampled: dict[tuple[Slice, str, bool, str], list[str]] = {}

    def resampled(self, board: Board) -> list[str]:
        """:func:`resampled_units` of one of its boards, read from its rows once."""
        key = (board.slice, board.metric.name, board.all_submissions, board.tab)
        made = self._resampled.get(key)
        if made is None:
            made = self._resampled[key] = resampled_units(board.rows)
        return made

    def board(self, slice_: Slice, metric: MetricSpec, all_submissions: bool, tab: str) -> Board:
        """The board of ``slice_`` (made on first use; two threads may both make it and keep either)."""
        key = (slice_, metric.name, all_submissions, tab)
        made = self._boards.get(key)
        if made is None:
            made = self._boards[key] = self._make(slice_, metric, all_submissions, tab)
        return made

    def _ordered(self, slice_: Slice, metric: MetricSpec, all_submissions: bool,
                 tab: str) -> tuple[list[Evaluation], int, int]:
        """The rows of a board in its order, with how many evaluations of the slice its tab holds and how many of
        them have a value of ``metric``."""
        evs = self._in_tab(slice_, tab)
        valued = [e for e in evs if e.value(metric.name) is not None]
        kept = valued if all_submissions else _best_per_entry(valued, metric)
        sign = 1 if metric.higher_is_better else -1
        kept.sort(key=lambda e: (-sign * e.scores[metric.name].value, -e.submission_id))  # type: ignore[operator]
        return kept, len(evs), len(valued)

    def _in_tab(self, slice_: Slice, tab: str) -> list[Evaluation]:
        """The evaluations of ``slice_`` that tab ``tab`` holds."""
        return [e for e in self.slices.get(slice_, [])
                if tab == ANY or (source_of(e, self.platform_runs) == SELF_REPORTED) == (tab == SELF_REPORTED)]

    def _not_ranked(self, slice_: Slice, metric: MetricSpec, tab: str,
                    ranked: Iterable[Evaluation]) -> tuple[NotRanked, ...]:
        """:attr:`Board.not_ranked`: the newest unvalued evaluation per entry that ``ranked`` lacks, by method and
        backbone; the platform's runs and users' files only (a published row without a value is one its authors did
        not report, or a ranking method's, which has none of the global metrics)."""
        shown = {entry(e) for e in ranked}
        newest: dict[tuple[str, str, str], Evaluation] = {}
        for e in self._in_tab(slice_, tab):
            if (e.value(metric.name) is None and entry(e) not in shown
                    and source_of(e, self.platform_runs) in (VERIFIED, SELF_REPORTED)):
                if entry(e) not in newest or e.submission_id > newest[entry(e)].submission_id:
                    newest[entry(e)] = e
        return tuple(NotRanked(e.submission_id, e.method, e.backbone, source_of(e, self.platform_runs),
                               e.scores[metric.name].num_points if metric.name in e.scores else 0)
                     for e in sorted(newest.values(), key=lambda e: (e.method, e.backbone, e.submission_id)))

    def _tested(self) -> list[Evaluation]:
        """The rows any board of this version may run paired tests on: the first :data:`board.ranking.PAIRED_ROWS`
        of each, so that their submissions are read in one query (not every row's: 10^5 of them cost a minute)."""
        return [e for slice_ in self.slices for tab in (*TABS, ANY) for name in METRICS for all_submissions in (False, True)
                for e in self._ordered(slice_, metric_registry.get(name), all_submissions, tab)[0][:ranking.PAIRED_ROWS]]

    def _make(self, slice_: Slice, metric: MetricSpec, all_submissions: bool, tab: str) -> Board:
        kept, submissions, valued = self._ordered(slice_, metric, all_submissions, tab)
        scores = [e.scores[metric.name] for e in kept]
        ranked = ranking.board_ranks(kept, metric, self.ranking)
        rows = tuple(Row(r, e, s, source_of(e, self.platform_runs), submitter(e), metric)
                     for r, e, s in zip(ranked, kept, scores))
        return Board(slice_, metric, all_submissions, rows, submissions=submissions, unranked=submissions - valued,
                     tab=tab, not_ranked=self._not_ranked(slice_, metric, tab, kept))


def _index() -> _Index:
    return evaluations.derived(("boards", "index"), _Index)


def platform_runs() -> frozenset[int]:
    """The ids of the finished submissions the platform ran (what :func:`source_of` calls *verified*) in
    the current results version."""
    return _index().platform_runs


def board(slice_: Slice, metric: str = metric_registry.HEADLINE, *, all_submissions: bool = False, tab: str = VERIFIED) -> Board:
    """The board of ``slice_`` ranked by ``metric`` (best per entry unless ``all_submissions``) on ``tab`` (a key
    of :data:`TABS`, or :data:`ANY`), kept per results version.  ``ValueError`` naming the choices for a metric
    not in :data:`METRICS` or an unknown tab."""
    return _index().board(slice_, _checked(metric, tab), all_submissions, tab)


def _checked(metric: str, tab: str) -> MetricSpec:
    """The spec of ``metric``; ``ValueError`` naming the choices for a metric not in :data:`METRICS` or a ``tab``
    neither in :data:`TABS` nor :data:`ANY`."""
    if metric not in METRICS:
        raise ValueError(f"unknown ranking metric {metric!r}; choose one of {', '.join(METRICS)}")
    if tab not in TABS and tab != ANY:
        raise ValueError(f"unknown board source {tab!r}; choose one of {', '.join(TABS)}")
    return metric_registry.get(metric)


@dataclass(frozen=True)
class Listing:
    """A board on the boards list, with its dataset, its number of entries and its leader(s)."""

    slice: Slice
    dataset: Dataset
    entries: int
    leaders: tuple[Row, ...]
    self_reported: int = 0
    """Entries on its self-reported tab (uploaded files: listed apart, never a leader)."""

    @property
    def title(self) -> str:
        """``FrozenLake 8×8 · Q · text``."""
        return f"{self.dataset.name} · {self.slice.target.upper()} · {self.slice.modality}"


def _listing(index: _Index, ds: Dataset, slice_: Slice) -> Listing:
    metric = metric_registry.get(metric_registry.HEADLINE)
    b = index.board(slice_, metric, False, VERIFIED)
    return Listing(slice_, ds, len(b.rows), tuple(r for r in b.rows if r.rank.best == 1),
                   len(index.board(slice_, metric, False, SELF_REPORTED).rows))


def _order(slice_: Slice) -> tuple[int, int]:
    return TARGETS.index(slice_.target), MODALITIES.index(slice_.modality)


def canonical_boards() -> dict[str, list[Listing]]:
    """The boards the site opens on: ``hosted``, per dataset we host (its newest version) a board per target
    and modality it has; ``published``, per environment of the QVal v1.0 results a board per target and
    modality they report; ``older``, the boards of older hosted versions that hold rows."""
    datasets = list(Dataset.objects.select_related("environment").order_by("slug", "-created_at"))
    index = _index()
    held = index.slices
    hosted: list[Listing] = []
    older: list[Listing] = []
    newest: set[str] = set()
    for ds in (d for d in datasets if d.hosted):
        modalities = [m for m in MODALITIES if m in (ds.modalities or ["text"])]
        options = [Slice(ds.key, t, m) for t in TARGETS for m in modalities]
        if ds.slug not in newest:
            newest.add(ds.slug)
            hosted += [_listing(index, ds, s) for s in options]
        else:
            older += [_listing(index, ds, s) for s in options if s in held]
    published: list[Listing] = []
    for ds in sorted((d for d in datasets if not d.hosted), key=lambda d: d.environment.name):
        published += [_listing(index, ds, s) for s in sorted((s for s in held if s.dataset == ds.key), key=_order)]
    return {"hosted": hosted, "published": published, "older": older}


def _dataset(slice_: Slice) -> Dataset:
    slug, _, version = slice_.dataset.partition("@")
    ds = Dataset.objects.select_related("environment").filter(slug=slug, version=version).first()
    if ds is None:
        raise Http404(f"no dataset {slice_.dataset!r}")
    if ds.hosted and slice_.modality not in (ds.modalities or ["text"]):
        raise Http404(f"{ds.key} has no {slice_.modality} modality")
    return ds


def board_list(request: HttpRequest) -> HttpResponse:
    """Every canonical board (:func:`canonical_boards`) with its leaders."""
    return render(request, "board/boards.html",
                  {**canonical_boards(), "sources": SOURCES, "metric": metric_registry.get(metric_registry.HEADLINE)})


def resampled_units(rows: Iterable[Row]) -> list[str]:
    """What the intervals of a board's rows resampled (:func:`qval.sampling.describe`), each once, in order."""
    seen: list[str] = []
    for row in rows:
        if row.score.ci_low is not None:
            text = sampling.describe(row.score.resampled)
            if text not in seen:
                seen.append(text)
    return seen


PAGE_ROWS = 50
"""Rows a board's page shows at a time (``?page=``), so that no page's cost grows with its board; its JSON has
every row."""


def board_detail(request: HttpRequest, key: str) -> HttpResponse:
    """One board: ``?source=`` (a key of :data:`TABS`: the main, verified board unless ``self-reported``),
    ``?metric=`` (one of :data:`METRICS`), ``?all=1`` for every submission, :data:`PAGE_ROWS` rows a page
    (``?page=``), ``?format=json`` for every row."""
    slice_ = Slice.parse(key)
    ds = _dataset(slice_)
    metric = request.GET.get("metric") or metric_registry.HEADLINE
    all_submissions = request.GET.get("all") == "1"
    tab = request.GET.get("source") or VERIFIED
    try:
        spec = _checked(metric, tab)
        if tab not in TABS:  # ANY is the tables' own
            raise ValueError(f"unknown board source {tab!r}; choose one of {', '.join(TABS)}")
    except ValueError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    version, index = evaluations.versioned(("boards", "index"), _Index)  # the rows' fragment is of this version
    b = index.board(slice_, spec, all_submissions, tab)
    if request.GET.get("format") == "json":  # every row: its body made once per results version
        body = evaluations.derived(("board-json", slice_, metric, all_submissions, tab), lambda _: json.dumps(
            {"board": slice_.key, "dataset": slice_.dataset, "split": SPLIT, "target": slice_.target,
             "modality": slice_.modality, "metric": metric, "source": tab, "all_submissions": all_submissions,
             "rows": [r.as_dict() for r in b.rows], "unranked": b.unranked,
             "not_ranked": [n.as_dict() for n in b.not_ranked]}, cls=DjangoJSONEncoder).encode())
        return HttpResponse(body, content_type="application/json")
    other = SELF_REPORTED if tab == VERIFIED else VERIFIED
    page = Paginator(b.rows, PAGE_ROWS).get_page(request.GET.get("page"))
    resampled = index.resampled(b)  # read from every row: once per version
    return render(request, "board/board_slice.html", {
        "board": b, "rows": page.object_list, "page": page, "resampled": resampled, "results_version": version,
        "dataset": ds, "metric": b.metric,
        "metrics": [metric_registry.get(m) for m in METRICS],
        "sources": SOURCES, "authors": AUTHORS, "tabs": TABS, "tab": TABS[tab],
        "other_tab_rows": len(index.board(slice_, spec, all_submissions, other).rows),
        "open_book": [ds.environment] if ds.hosted and ds.environment.open_book else [],
    })

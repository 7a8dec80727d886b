"""Leaderboard aggregates: means over backbones, family distributions, critical difference.

Shared by the pages (:mod:`board.views`) and the API (:mod:`qval_site.api`).  Every
aggregate starts from the same rows: the leaderboard's finished submissions
(:func:`board.exports.leaderboard_rows`) reduced by :func:`best_rows` to the best one
per method, dataset, backbone, split and target, so a method that submitted many times
counts once per evaluation.  The statistics are :mod:`qval.compare`'s.

What the pages and the API show of one :class:`Selection` (:func:`summary`, :func:`critical_difference_of`)
is kept per results version (:func:`board.evaluations.derived`), as the board is: computed once per
process after a result changes, then read from memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from qval import compare, metric_registry

from . import evaluations
from .exports import BoardRow, leaderboard_rows

METRICS = {name: metric_registry.get(name).label for name in metric_registry.COMPARABLE}
"""Metrics the aggregates can use (higher is better), with their labels (:mod:`qval.metric_registry`)."""
SPLITS = ("dev", "test")
TARGETS = ("q", "v")
ALPHA = 0.05
"""Significance level of the Nemenyi critical difference."""


class InvalidSelection(ValueError):
    """A query parameter of an aggregate page or API call that is not allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Selection:
    """Which leaderboard rows an aggregate uses: split, target, and the metric to summarise."""

    split: str = "test"
    target: str = "q"
    metric: str = "spearman"

    @property
    def metric_label(self) -> str:
        """Human-readable name of :attr:`metric`."""
        return METRICS[self.metric]


def read_selection(params: Mapping[str, str]) -> Selection:
    """The :class:`Selection` of query parameters ``split``, ``target`` and ``metric``.

    Missing or empty parameters take the defaults (test, q, spearman); any other value
    raises :class:`InvalidSelection` naming the allowed ones.
    """
    default = Selection()
    chosen = {key: params.get(key) or getattr(default, key) for key in ("split", "target", "metric")}
    for key, allowed in (("split", SPLITS), ("target", TARGETS), ("metric", tuple(METRICS))):
        if chosen[key] not in allowed:
            raise InvalidSelection(key, f"unknown {key} {chosen[key]!r}; choose one of {', '.join(allowed)}")
    return Selection(**chosen)


@dataclass(frozen=True)
class Entry:
    """One evaluation of one method: its best finished submission's value of the metric."""

    method: str
    family: str
    environment: str
    dataset: str
    backbone: str | None
    value: float
    submission_id: int


def best_rows(selection: Selection) -> list[Entry]:
    """The best finished submission per (method, evaluation, backbone) on the selection's split
    and target, by the selection's metric; submissions without a value of it are left out.
    The evaluation is :func:`evaluation_label` (dataset, modality, imported source).

    Ties go to the newest submission.  Ordered by method, dataset and backbone.
    """
    rows: list[BoardRow] = leaderboard_rows(
        {"split": selection.split, "target": selection.target}, sort=f"-{selection.metric}"
    )
    best: dict[tuple[str, str, str], Entry] = {}
    for row in rows:  # sorted by the metric, best first; rows without a value come last
        value = getattr(row, selection.metric)
        key = (row.method, evaluation_label(row), row.backbone)
        if value is None or key in best:
            continue
        best[key] = Entry(row.method, row.family, row.environment, key[1], row.backbone or None, value,
                          row.submission_id)
    return [best[k] for k in sorted(best)]


def evaluation_label(row: BoardRow) -> str:
    """The dataset an aggregate counts a row under: its key, marked ``[image]`` for image
    inputs and with the source of an imported row, so reported, re-scored and our own
    results, or text and image inputs, are never merged into one evaluation."""
    label = row.dataset
    if row.modality != "text":
        label += f" [{row.modality}]"
    if row.source in ("reported", "rescored"):
        label += f" ({row.source})"
    return label


def _backbone_label(backbone: str | None) -> str:
    return backbone or "no backbone"


# -- (a) mean over backbones -------------------------------------------------------------


@dataclass(frozen=True)
class MethodMean:
    """Per method and environment: the mean of the metric over its evaluations (one per
    dataset x backbone) with a Student-t 95% interval (:func:`qval.compare.mean_ci`)."""

    method: str
    family: str
    environment: str
    evaluations: tuple[str, ...]
    values: tuple[float, ...]
    interval: compare.MeanInterval

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API."""
        iv = self.interval
        return {
            "method": self.method,
            "family": self.family,
            "environment": self.environment,
            "n": iv.n,
            "mean": iv.mean,
            "std": iv.std,
            "ci95": [iv.low, iv.high] if iv.low is not None else None,
            "evaluations": [{"evaluation": e, "value": v} for e, v in zip(self.evaluations, self.values)],
        }


def method_means(entries: list[Entry]) -> list[MethodMean]:
    """:class:`MethodMean` of every (method, environment) of ``entries``, best mean first."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    for e in entries:
        groups.setdefault((e.method, e.environment), []).append(e)
    out = [
        MethodMean(
            method=method,
            family=group[0].family,
            environment=environment,
            evaluations=tuple(f"{e.dataset} / {_backbone_label(e.backbone)}" for e in group),
            values=tuple(e.value for e in group),
            interval=compare.mean_ci([e.value for e in group]),
        )
        for (method, environment), group in groups.items()
    ]
    out.sort(key=lambda m: (m.environment, -(m.interval.mean or 0.0), m.method))
    return out


# -- (b) distribution per family -------------------------------------------------------


@dataclass(frozen=True)
class FamilyDistribution:
    """Per method family: the distribution of the metric over all its methods' evaluations."""

    family: str
    points: tuple[str, ...]
    """``method · dataset / backbone`` of each value."""
    values: tuple[float, ...]
    summary: compare.Distribution

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API."""
        return {
            "family": self.family,
            **asdict(self.summary),
            "values": [{"evaluation": p, "value": v} for p, v in zip(self.points, self.values)],
        }


def family_distributions(entries: list[Entry]) -> list[FamilyDistribution]:
    """:class:`FamilyDistribution` of every family of ``entries``, by family name."""
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        groups.setdefault(e.family, []).append(e)
    return [
        FamilyDistribution(
            family=family,
            points=tuple(f"{e.method} · {e.dataset} / {_backbone_label(e.backbone)}" for e in group),
            values=tuple(e.value for e in group),
            summary=compare.distribution([e.value for e in group]),
        )
        for family, group in sorted(groups.items())
    ]


@dataclass(frozen=True)
class Summary:
    """The aggregates of one selection: :func:`method_means` and :func:`family_distributions` of its
    :func:`best_rows`."""

    means: tuple[MethodMean, ...]
    families: tuple[FamilyDistribution, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API (without the selection)."""
        return {"methods": [m.as_dict() for m in self.means], "families": [f.as_dict() for f in self.families]}


def summary(selection: Selection) -> Summary:
    """The :class:`Summary` of ``selection``, kept until the results version changes: treat it as read-only."""

    def make(_: object) -> Summary:
        entries = best_rows(selection)
        return Summary(tuple(method_means(entries)), tuple(family_distributions(entries)))

    return evaluations.derived(("aggregate", selection), make)


# -- critical difference ---------------------------------------------------------------


@dataclass(frozen=True)
class CriticalDifferenceTable:
    """The evaluations x methods matrix of the metric and, when defined, its Friedman test
    and Nemenyi critical difference (:func:`qval.compare.friedman_nemenyi`).

    ``matrix[i][j]``: method ``j``'s value on evaluation ``i`` (``None`` when it has none;
    such rows are left out of the test).  ``result`` is ``None`` and ``reason`` says why
    when there are fewer than 3 methods or fewer than 2 evaluations every method has.
    """

    evaluations: tuple[str, ...]
    methods: tuple[str, ...]
    matrix: tuple[tuple[float | None, ...], ...]
    result: compare.CriticalDifference | None
    reason: str | None

    def rows(self) -> list[tuple[str, tuple[float | None, ...]]]:
        """``(evaluation, values per method)`` of every row of the matrix."""
        return list(zip(self.evaluations, self.matrix))

    def ranking(self) -> list[dict[str, Any]]:
        """Methods from best to worst average rank: name, average rank, clique numbers."""
        if self.result is None:
            return []
        r = self.result
        return [
            {
                "method": r.methods[i],
                "average_rank": r.average_ranks[i],
                "cliques": [n for n, (start, end) in enumerate(r.cliques, 1) if start <= pos <= end],
            }
            for pos, i in enumerate(r.order)
        ]

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API."""
        r = self.result
        return {
            "methods": list(self.methods),
            "evaluations": list(self.evaluations),
            "matrix": [list(row) for row in self.matrix],
            "reason": self.reason,
            "critical_difference": None
            if r is None
            else {
                "alpha": r.alpha,
                "cd": r.cd,
                "q_alpha": r.q_alpha,
                "friedman_statistic": r.statistic,
                "friedman_p_value": r.p_value,
                "num_evaluations": r.num_evaluations,
                "num_dropped": r.num_dropped,
                "average_ranks": dict(zip(r.methods, r.average_ranks)),
                "ranking": self.ranking(),
                "cliques": r.groups(),
            },
        }


def critical_difference(entries: list[Entry], alpha: float = ALPHA) -> CriticalDifferenceTable:
    """Build the evaluations (dataset x backbone) x methods matrix of ``entries`` and run
    the Friedman test and Nemenyi critical difference at ``alpha`` when there is enough."""
    methods = tuple(sorted({e.method for e in entries}))
    evaluations = sorted({(e.dataset, e.backbone or "") for e in entries})
    column = {m: j for j, m in enumerate(methods)}
    row = {ev: i for i, ev in enumerate(evaluations)}
    matrix: list[list[float | None]] = [[None] * len(methods) for _ in evaluations]
    for e in entries:
        matrix[row[(e.dataset, e.backbone or "")]][column[e.method]] = e.value
    names = tuple(f"{d} / {_backbone_label(b or None)}" for d, b in evaluations)
    frozen = tuple(tuple(r) for r in matrix)
    complete = sum(all(v is not None for v in r) for r in matrix)
    reason = None
    if len(methods) < 3:
        reason = (
            f"the Friedman test needs at least 3 methods with a value on this split and target; "
            f"{len(methods)} found ({', '.join(methods) or 'none'})"
        )
    elif complete < 2:
        reason = (
            f"the Friedman test needs at least 2 evaluations (dataset × backbone) on which all "
            f"{len(methods)} methods have a value; {complete} of the {len(evaluations)} evaluations have"
        )
    if reason is not None:
        return CriticalDifferenceTable(names, methods, frozen, None, reason)
    values = np.array([[np.nan if v is None else v for v in r] for r in matrix], dtype=np.float64)
    return CriticalDifferenceTable(names, methods, frozen, compare.friedman_nemenyi(values, methods, alpha=alpha), None)


def critical_difference_of(selection: Selection) -> CriticalDifferenceTable:
    """:func:`critical_difference` of ``selection``'s :func:`best_rows`, kept until the results version
    changes."""
    return evaluations.derived(("critical-difference", selection), lambda _: critical_difference(best_rows(selection)))

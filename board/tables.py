"""Method × environment tables: one row per method, one column per environment, and an average.

A **table** is drawn for one family of boards (:data:`FAMILIES`): ``published``, the QVal v1.0 results
(a column per environment the authors report), or ``hosted``, the datasets we host (a column per dataset,
its newest version).  It is read off the boards of :mod:`board.boards` -- one per column, for the chosen
target, modality and ranking metric -- so their rules hold here too: only the test split, never a dev
result; on a hidden split's ladder each account's current best; on an open-book dataset no uploaded file.

A row is one **entry** of those boards without its backbone: a submitter and a method (the authors'
imported rows are one submitter).  Its cell in a column is the entry's best row on that column's board
(the board's order: an interval first, then the value), on the chosen backbone, or on any backbone when
none is chosen (the cell names the backbone it comes from).  Rows are *verified* and the authors' rows by
default; ``self-reported`` ones are shown on request.

The **average** of a row is the mean of its cells when it has a cell in every column, and no value
(``—``) otherwise: a mean over the columns a method happens to cover would rank it against a different
set of environments than its neighbours.  :data:`AVERAGE_RULE` says so on the page and in the JSON.

Rows sort server-side (``?sort=KEY``, ``-KEY`` descending) on the method, the submitter, any column or
the average; a row without a value in the sort column goes last either way.  The CSV and JSON downloads
(``?format=csv|json``) hold the page's table: the same rows in the same order, the values at the metric's
precision in the CSV (:meth:`Table.text_rows`, which the page prints too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from statistics import fmean
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from qval import metric_registry
from qval.metric_registry import MetricSpec

from . import boards
from .exports import csv_text
from leaderboard.models import Dataset

PUBLISHED, HOSTED = "published", "hosted"
FAMILIES: dict[str, str] = {
    PUBLISHED: "QVal v1.0 published results",
    HOSTED: "Datasets we host",
}
"""The tables there are: key -> title."""
DEFAULT_SOURCES = (boards.VERIFIED, boards.REPORTED, boards.RESCORED)
"""The sources a table shows unless self-reported rows are asked for (``?self_reported=1``)."""
AVERAGE_RULE = ("The average is the mean over every column; a row missing any column has no average (—) and "
                "sorts after the rows that have one.")
"""How the average column treats missing cells (shown on the page and given in the JSON)."""
FORMATS = ("csv", "json")
METHOD, SUBMITTER, AVERAGE = "method", "submitter", "avg"
"""Sort keys besides the columns' own (:attr:`Column.key`)."""


@dataclass(frozen=True)
class Column:
    """One environment: ``key`` (the dataset's slug, the sort key), ``label`` and the ``dataset``
    (``slug@version``) whose board fills it."""

    key: str
    label: str
    dataset: str


@dataclass(frozen=True)
class Cell:
    """An entry's best row on one column's board."""

    value: float
    text: str
    ci_low: float | None
    ci_high: float | None
    backbone: str
    source: str
    submission_id: int
    board: str

    def as_dict(self) -> dict[str, Any]:
        """The cell as the JSON download gives it."""
        return {"value": self.value, "ci_low": self.ci_low, "ci_high": self.ci_high, "backbone": self.backbone,
                "source": self.source, "submission_id": self.submission_id, "board": self.board}


@dataclass(frozen=True)
class Row:
    """One method of one submitter: a cell per column (``None`` where it has no ranked row) and the
    average (:data:`AVERAGE_RULE`)."""

    method: str
    submitter: str
    cells: tuple[Cell | None, ...]
    average: float | None
    average_text: str


@dataclass(frozen=True)
class Table:
    """A family's table for one target, modality, backbone (``""``: any) and metric, sorted by ``sort``."""

    family: str
    target: str
    modality: str
    backbone: str
    metric: MetricSpec
    self_reported: bool
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    sort: str
    backbones: tuple[str, ...]

    @property
    def title(self) -> str:
        """The family's title."""
        return FAMILIES[self.family]

    def header(self) -> list[str]:
        """The table's column headings, as the page and the CSV give them."""
        return ["Method", "Submitter", *(c.label for c in self.columns), "Average"]

    def text_rows(self) -> list[list[str]]:
        """Each row as the page prints it: the values at the metric's precision, ``""`` for a missing cell."""
        return [[r.method, r.submitter, *(c.text if c else "" for c in r.cells), r.average_text] for r in self.rows]

    def csv(self) -> bytes:
        """The CSV download: :meth:`header` and :meth:`text_rows` (user text made spreadsheet-safe)."""
        header = self.header()
        lines = [dict(zip(header, [*row[:2], *(Decimal(t) if t else None for t in row[2:])]))
                 for row in self.text_rows()]
        return csv_text(header, lines).encode()

    def as_dict(self) -> dict[str, Any]:
        """The JSON download: the choices made, the columns, and the rows in the page's order."""
        return {
            "family": self.family, "title": self.title, "split": boards.SPLIT, "target": self.target,
            "modality": self.modality, "backbone": self.backbone or None, "metric": self.metric.name,
            "metric_label": self.metric.label, "self_reported": self.self_reported, "sort": self.sort,
            "average_rule": AVERAGE_RULE,
            "columns": [{"key": c.key, "label": c.label, "dataset": c.dataset} for c in self.columns],
            "rows": [{"method": r.method, "submitter": r.submitter, "average": r.average,
                      "cells": {c.key: cell.as_dict() if cell else None for c, cell in zip(self.columns, r.cells)}}
                     for r in self.rows],
        }


def columns(family: str) -> tuple[Column, ...]:
    """The columns of ``family``: the published datasets by environment name, or the newest version of
    each hosted dataset by its name."""
    if family == PUBLISHED:
        published = Dataset.objects.select_related("environment").filter(hosted=False)
        return tuple(Column(d.slug, d.environment.name, d.key)
                     for d in sorted(published, key=lambda d: (d.environment.name, d.slug)))
    return tuple(Column(d.slug, d.name, d.key) for d in sorted(Dataset.newest_hosted(), key=lambda d: (d.name, d.slug)))


def default_sort(metric: MetricSpec) -> str:
    """Best average first."""
    return f"-{AVERAGE}" if metric.higher_is_better else AVERAGE


def sort_keys(cols: tuple[Column, ...]) -> tuple[str, ...]:
    """Every key a table with ``cols`` sorts on (each also with a leading ``-``, descending)."""
    return (METHOD, SUBMITTER, *(c.key for c in cols), AVERAGE)


def _sorted(rows: list[Row], cols: tuple[Column, ...], sort: str) -> list[Row]:
    descending, key = sort.startswith("-"), sort.lstrip("-")
    rows = sorted(rows, key=lambda r: (r.method.lower(), r.submitter.lower()))  # the tie order
    if key in (METHOD, SUBMITTER):
        return sorted(rows, key=lambda r: getattr(r, key).lower(), reverse=descending)
    keys = [c.key for c in cols]
    if key != AVERAGE and key not in keys:
        return rows  # a column this view has no cell in
    index = keys.index(key) if key != AVERAGE else None

    def value(r: Row) -> float | None:
        if index is None:
            return r.average
        cell = r.cells[index]
        return cell.value if cell else None

    present = [r for r in rows if value(r) is not None]
    present.sort(key=lambda r: value(r), reverse=descending)  # type: ignore[arg-type, return-value]
    return present + [r for r in rows if value(r) is None]


def table(family: str, *, target: str = "q", modality: str = "text", backbone: str = "",
          metric: str = metric_registry.HEADLINE, self_reported: bool = False, sort: str | None = None) -> Table:
    """The table of ``family`` (a key of :data:`FAMILIES`): a column for each of :func:`columns` that has a row of
    the chosen sources on any backbone (a dataset nobody has results on yet is left out, not averaged as missing).
    ``ValueError`` naming the choices for a family, target, modality, metric or sort key that is not one."""
    if family not in FAMILIES:
        raise ValueError(f"unknown table {family!r}; choose one of {', '.join(FAMILIES)}")
    if target not in boards.TARGETS or modality not in boards.MODALITIES:
        raise ValueError(f"target is one of {', '.join(boards.TARGETS)}, modality one of {', '.join(boards.MODALITIES)}")
    if metric not in boards.METRICS:
        raise ValueError(f"unknown ranking metric {metric!r}; choose one of {', '.join(boards.METRICS)}")
    spec = metric_registry.get(metric)
    cols = columns(family)
    sort = sort or default_sort(spec)
    if sort.lstrip("-") not in sort_keys(cols):
        raise ValueError(f"unknown sort {sort!r}; choose one of {', '.join(sort_keys(cols))} (- for descending)")
    sources = DEFAULT_SOURCES + ((boards.SELF_REPORTED,) if self_reported else ())
    cells: dict[tuple[str, str], dict[str, Cell]] = {}
    seen_backbones: set[str] = set()
    populated: set[str] = set()  # the columns with a row of the chosen sources on any backbone
    for col in cols:
        b = boards.board(boards.Slice(col.dataset, target, modality), metric, tab=boards.ANY)  # sources picked below
        for r in b.rows:  # best first
            if r.source not in sources:
                continue
            seen_backbones.add(r.evaluation.backbone)
            populated.add(col.key)
            if backbone and r.evaluation.backbone != backbone:
                continue
            held = cells.setdefault((r.evaluation.method, r.submitter), {})
            if col.key not in held:
                held[col.key] = Cell(r.value, spec.format(r.value), r.score.ci_low, r.score.ci_high,
                                     r.evaluation.backbone, r.source, r.evaluation.submission_id, b.slice.key)
    cols = tuple(c for c in cols if c.key in populated)
    rows = []
    for (method, who), held in cells.items():
        row_cells = tuple(held.get(c.key) for c in cols)
        complete = all(row_cells) and bool(cols)
        average = fmean(c.value for c in row_cells if c) if complete else None
        rows.append(Row(method, who, row_cells, average, "" if average is None else spec.format(average)))
    return Table(family, target, modality, backbone, spec, self_reported, cols, tuple(_sorted(rows, cols, sort)),
                 sort, tuple(sorted(seen_backbones)))


def table_index(request: HttpRequest) -> HttpResponse:
    """The tables start at the published results."""
    return redirect("table", family=PUBLISHED)


def table_page(request: HttpRequest, family: str) -> HttpResponse:
    """One table: ``?target=``, ``?modality=``, ``?backbone=`` (empty: any), ``?metric=`` (one of
    :data:`board.boards.METRICS`), ``?self_reported=1``, ``?sort=KEY`` or ``-KEY``, ``?format=csv|json``."""
    if family not in FAMILIES:
        raise Http404(f"no table {family!r}; the tables are {', '.join(FAMILIES)}")
    get = request.GET
    try:
        t = table(family, target=get.get("target") or "q", modality=get.get("modality") or "text",
                  backbone=get.get("backbone", ""), metric=get.get("metric") or metric_registry.HEADLINE,
                  self_reported=get.get("self_reported") == "1", sort=get.get("sort") or None)
    except ValueError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain; charset=utf-8")
    fmt = get.get("format")
    if fmt in FORMATS:
        body = t.csv() if fmt == "csv" else json.dumps(t.as_dict(), cls=DjangoJSONEncoder, ensure_ascii=False).encode()
        response = HttpResponse(body, content_type="text/csv; charset=utf-8" if fmt == "csv" else "application/json")
        response["Content-Disposition"] = f'attachment; filename="qval-table-{family}-{t.target}-{t.modality}.{fmt}"'
        return response
    headings = [(METHOD, "Method"), (SUBMITTER, "Submitter"), *((c.key, c.label) for c in t.columns),
                (AVERAGE, "Average")]
    return render(request, "board/table.html", {
        "table": t, "families": FAMILIES, "average_rule": AVERAGE_RULE, "sources": boards.SOURCES,
        "headings": [_heading(key, label, t.sort) for key, label in headings],
        "metrics": [metric_registry.get(m) for m in boards.METRICS], "targets": boards.TARGETS,
        "modalities": boards.MODALITIES,
    })


def _heading(key: str, label: str, sort: str) -> dict[str, str]:
    """A sortable heading: its label, the sort its link asks for, and its arrow and ``aria-sort``."""
    if sort.lstrip("-") != key:
        return {"key": key, "label": label, "sort": key if key in (METHOD, SUBMITTER) else f"-{key}",
                "arrow": "↕", "aria": "none"}
    descending = sort.startswith("-")
    return {"key": key, "label": label, "sort": key if descending else f"-{key}",
            "arrow": "▼" if descending else "▲", "aria": "descending" if descending else "ascending"}

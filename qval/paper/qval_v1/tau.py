"""The Kendall τ the QVal paper prints in its appendix tables (Tables 5 and 7–18), matched to the
authors' reported rows (``reported.json``), which carry ρ alone.

The list is project data (``data/qval-v1.0/tau.json``, with its provenance): :func:`convert_tau`
made it once from the paper's text (``qval-paper.txt``, a PDF extraction) and the reported records,
and the tests check the file still equals it.  The text is read as :mod:`qval.errata` and
:mod:`qval.paper.qval_v1.relabelled` read it: each printed method takes a ρ line (label, ``ρ``, cells) and usually a
τ line under it (``τ``, cells); the columns are the backbones in the authors' order whatever the
garbled header says (a table with a repeated tail of cells is read for its first columns only); the
printed labels slip in several tables, which :data:`TABLES` records line by line.  The slips follow one
pattern, found by matching every printed ρ with the authors' data: the line labelled ``codegen-avg``
holds codegen's τ (mean ± std over its sampled functions, then [min, max]) and the labels after it
move down by one.  With that reading every printed ρ cell equals the authors' number to three decimals
except the ``verifier`` cells the errata list (:mod:`qval.errata`).

Only global τ (of a ``spearman`` row) are read.  The paper prints no τ of a ranking-style method (its
caption: ranking, sdpo, sdpo-gt and Δ belief "show mean ± std over per-trajectory Spearman"): the line
marked τ under one holds the next method's ρ (in Tables 5, 7, 10 and 13 the "τ" under sdpo is sdpo-gt's
ρ ± std and the one under Δ belief is ranking's, all 44 cells equal to the authors' numbers and stds to
three decimals).  Table 6 (another labelling backbone, no reported row) is :mod:`qval.paper.qval_v1.relabelled`'s.

Nothing here knows about Django.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qval.errata import BACKBONES, ROUNDING, errata
from qval.paper.qval_v1 import relabelled
from qval.paper.qval_v1.published import DATA_DIR, METRIC_TYPES, PAPER, PublishedDataError, ReportedResult, reported

TAU_FILE: Path = DATA_DIR / "tau.json"

VALUES = "values"
"""A printed method whose ρ line holds its ρ and whose τ line (if any) its τ."""
CODEGEN_TAU = "codegen-tau"
"""The line labelled ``codegen-avg`` after ``codegen``: codegen's τ as mean ± std, then [min, max]."""
SKIP = "skip"
"""A printed line with no τ of a reported row (codegen's ρ mean ± std over [min, max])."""


@dataclass(frozen=True)
class TauTable:
    """How to read one appendix table: its slice, its columns (each the backbones one printed column may
    be, as the authors' data names them; a merged column serves an LLM backbone and the non-LLM ``Self``)
    and its printed ρ lines in order, as ``(printed label, method, kind)`` with ``kind`` one of
    :data:`VALUES`, :data:`CODEGEN_TAU`, :data:`SKIP`."""

    number: int
    environment: str
    target: str
    modality: str
    columns: tuple[tuple[str, ...], ...]
    lines: tuple[tuple[str, str, str], ...]


_LLM = tuple((b,) for b in BACKBONES)
_LLM_SELF = (*_LLM, ("Self",))
_MERGED_SELF = (*_LLM[:5], (BACKBONES[5], "Self"))
_NON_LLM = (("Self",), ("CLIP",), ("SigLIP",))


def _v(*methods: str) -> tuple[tuple[str, str, str], ...]:
    return tuple((m.replace("Δbelief", "Δ belief"), m, VALUES) for m in methods)


_DIRECT = _v("gvl", "direct-single", "direct-batched", "direct-sequential", "direct-16")
_CODEGEN = (("codegen", "codegen", SKIP), ("codegen-avg", "codegen", CODEGEN_TAU))
_EMBED = _v("vip", "liv-cos", "liv-l2")

TABLES: tuple[TauTable, ...] = (
    TauTable(5, "TerminalBench", "q", "text", _LLM, (
        *_DIRECT, *_v("eureka"), *_CODEGEN, ("sdpo", "codegen-avg", VALUES), ("sdpo-gt", "sdpo", VALUES),
        *_v("verifier", "Δbelief"))),
    TauTable(7, "OpenApps", "q", "text", _LLM, (
        *_DIRECT, *_v("eureka"), *_CODEGEN, *_v("sdpo", "verifier", "Δbelief"))),
    TauTable(8, "OpenApps", "q", "image", _LLM_SELF, (*_DIRECT, *_v("ranking"), *_EMBED)),
    TauTable(9, "OpenApps", "v", "text", _LLM, (
        *_DIRECT, *_v("eureka"), *_CODEGEN, ("codegen-avg", "codegen-avg", VALUES))),
    TauTable(10, "ALFWorld", "q", "text", _LLM, (
        *_DIRECT, *_v("eureka"), *_CODEGEN, ("sdpo", "codegen-avg", VALUES), ("sdpo-gt", "sdpo", VALUES),
        *_v("verifier", "Δbelief"))),
    TauTable(11, "ALFWorld", "q", "image", _LLM_SELF, (*_DIRECT, *_v("ranking"), *_EMBED, *_v("liv-txt"))),
    TauTable(12, "ALFWorld", "v", "text", _LLM, (
        *_DIRECT, *_v("eureka"), *_CODEGEN, ("", "codegen-avg", VALUES))),
    TauTable(13, "FrozenLake", "q", "text", _LLM, (
        *_DIRECT, *_v("eureka"), *_CODEGEN, ("sdpo", "codegen-avg", VALUES), ("sdpo-gt", "sdpo", VALUES),
        *_v("verifier", "Δbelief", "ranking"))),
    TauTable(14, "FrozenLake", "q", "image", _MERGED_SELF, (
        *_DIRECT, *_v("ranking", "vip", "liv-cos"), ("liv-12", "liv-l2", VALUES), *_v("liv-txt"))),
    TauTable(15, "FrozenLake", "v", "text", _LLM, (
        *_DIRECT, *_v("eureka"), *_CODEGEN, ("codegen-avg", "codegen-avg", VALUES))),
    TauTable(16, "OpenApps", "v", "image", _NON_LLM, (*_v("vlm-rm", "vlm-rm-cos", "vlm-sor-softmax"), *_EMBED)),
    TauTable(17, "ALFWorld", "v", "image", _NON_LLM, (
        *_v("vlm-rm", "vlm-rm-cos", "vlm-sor-softmax"), *_EMBED, *_v("liv-txt"))),
    TauTable(18, "FrozenLake", "v", "image", _NON_LLM, (
        *_v("vlm-rm", "vlm-rm-cos", "vlm-sor", "vlm-sor-softmax"), *_EMBED, *_v("liv-txt"))),
)
"""The appendix tables with a τ of a reported row, and how each is read (a ranking-style method's "τ" line
is not read: it holds the next method's ρ, see the module doc)."""

_NUMBER = re.compile(r"^\$?(-?\d+\.\d+)(?:\^?(\*+))?(?: (?:\\pm|±) (\d+\.\d+))?\$?$")
_RANGE = re.compile(r"^\$?\[(-?\d+\.\d+), (-?\d+\.\d+)\]\$?$")


@dataclass(frozen=True)
class TauCell:
    """One printed τ of a reported row: where it is printed (``table``, ``line`` of the paper's text,
    1-based), the row it belongs to, the metric of that row (``spearman``: the paper prints τ of global rows
    only), the value, its ``std`` (codegen), ``low``/``high`` (codegen's [min, max] over its samples), the
    significance ``stars``
    printed next to it, ``rho`` the ρ printed on the same method's ρ line (the line above ``line``; ``None``
    for codegen, whose ρ line is not read here) and ``rho_stars`` the significance stars printed next to that
    ρ (``None`` with ``rho``).  The paper prints no p-value, only these marks: ``*`` p < .10, ``**`` p < .01,
    ``***`` p < .001 (Appendix E)."""

    table: int
    line: int
    environment: str
    target: str
    modality: str
    method: str
    backbone: str
    metric: str
    value: float
    std: float | None
    low: float | None
    high: float | None
    stars: str
    rho: float | None
    rho_stars: str | None = None


def _section(paper_text: str, number: int) -> tuple[int, list[str]]:
    """The first line number (1-based) and the lines of Table ``number`` up to the next caption."""
    start = paper_text.find(f"\nTable {number}:")
    if start < 0:
        raise PublishedDataError(f"the paper text has no Table {number}")
    end = paper_text.find("\nTable ", start + 1)
    return paper_text.count("\n", 0, start) + 2, paper_text[start + 1:end if end >= 0 else None].splitlines()


def _cells(line: str, n: int) -> list[str]:
    return [c.strip() for c in line.split("\t")[2:] if c.strip()][:n]


def _number(cell: str) -> tuple[float, str, float | None] | None:
    found = _NUMBER.match(cell)
    if found is None:
        return None
    value, stars, std = found.groups()
    return float(value), stars or "", float(std) if std is not None else None


def _row(by_key: dict[tuple[str, ...], list[ReportedResult]], table: TauTable, method: str,
         column: tuple[str, ...], where: str) -> ReportedResult:
    """The one reported row of ``method`` in ``table``'s slice whose backbone is one of ``column``."""
    found = [r for b in column for r in by_key.get((table.environment, table.target, table.modality, method, b), [])]
    if len(found) != 1:
        raise PublishedDataError(f"{where}: {len(found)} reported rows for {method} on {column}")
    return found[0]


def paper_tau(paper_text: str, records: Sequence[ReportedResult]) -> list[TauCell]:
    """Every printed τ of :data:`TABLES` in the paper's text, each matched to exactly one reported record;
    :class:`~qval.paper.qval_v1.published.PublishedDataError` when a table's printed lines are not those :data:`TABLES`
    expects or a cell matches no record or several."""
    by_key: dict[tuple[str, ...], list[ReportedResult]] = {}
    for r in records:
        by_key.setdefault((r.environment, r.target, r.modality, r.method, r.backbone), []).append(r)
    cells: list[TauCell] = []
    for table in TABLES:
        first, lines = _section(paper_text, table.number)
        rho_lines = [i for i, line in enumerate(lines) if line.split("\t")[1:2] == ["ρ"]]
        labels = [lines[i].split("\t")[0] for i in rho_lines]
        if labels != [label for label, _, _ in table.lines]:
            raise PublishedDataError(f"Table {table.number}: printed method lines {labels}, expected "
                                     f"{[label for label, _, _ in table.lines]}")
        for i, (label, method, kind) in zip(rho_lines, table.lines):
            below = lines[i + 1] if i + 1 < len(lines) else ""
            if kind == SKIP or below.split("\t")[1:2] != ["τ"]:
                continue
            where = f"Table {table.number}, line {first + i} ({label!r})"
            n = len(table.columns)
            tau_line, extra = (i, _cells(below, n)) if kind == CODEGEN_TAU else (i + 1, _cells(lines[i], n))
            for k, (column, cell) in enumerate(zip(table.columns, _cells(lines[tau_line], n))):
                read = _number(cell)
                if read is None:
                    continue
                value, stars, std = read
                r = _row(by_key, table, method, column, where)
                if r.metric != METRIC_TYPES["global"]:  # a ranking-style method: its "τ" line is another ρ
                    break
                low = high = rho = rho_stars = None
                if kind == CODEGEN_TAU:
                    bounds = _RANGE.match(extra[k])
                    if bounds is None:
                        raise PublishedDataError(f"{where}: no [min, max] under codegen's τ, found {extra[k]!r}")
                    low, high = float(bounds.group(1)), float(bounds.group(2))
                else:
                    printed = _number(extra[k]) if k < len(extra) else None
                    rho, rho_stars = (printed[0], printed[1]) if printed is not None else (None, None)
                cells.append(TauCell(table.number, first + tau_line, r.environment, r.target, r.modality, r.method,
                                     r.backbone, r.metric, value, std, low, high, stars, rho, rho_stars))
    return cells


def convert_tau(paper_text: str, records: Sequence[ReportedResult]) -> dict[str, Any]:
    """The project's τ data (``tau.json``) of the paper's text and the reported records."""
    cells = paper_tau(paper_text, records)
    return {
        "provenance": {
            "paper": f"{PAPER['title']} (arXiv {PAPER['arxiv']})",
            "where": "Appendix E, Tables " + ", ".join(str(t.number) for t in TABLES) + " (the τ lines)",
            # the module names are those of when the file was made (now qval.paper.qval_v1.tau and .relabelled)
            "reading": "columns in the authors' backbone order (the headers are garbled; a repeated tail of cells "
                       "is ignored); printed labels read as qval.paper_tau.TABLES says: the line labelled "
                       "'codegen-avg' holds codegen's τ and the labels after it slip by one; a cell is matched to "
                       "the reported row of its environment, target, modality, method and backbone; 'line' is the "
                       "1-based line of qval-paper.txt that prints the τ (the line above prints the ρ); 'stars' and "
                       "'rho_stars' are the significance marks printed next to the τ and the ρ (* p < .10, "
                       "** p < .01, *** p < .001; the paper prints no p-value)",
            "not_read": "the 'τ' lines under ranking-style methods (sdpo, Δ belief: the paper prints no τ of them; "
                        "each such line holds the next method's ρ ± std); Table 6 (qval.relabelled)",
        },
        "columns": list(TauCell.__dataclass_fields__),
        "cells": [list(vars(c).values()) for c in cells],
    }


def tau_cells(path: Path = TAU_FILE) -> tuple[dict[str, Any], list[TauCell]]:
    """The provenance and the cells of the τ file (``data/qval-v1.0/tau.json``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data["provenance"], [TauCell(**dict(zip(data["columns"], c))) for c in data["cells"]]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise PublishedDataError(f"{path}: cannot read ({exc!r})") from exc


def rho_disagreements(cells: Sequence[TauCell], records: Sequence[ReportedResult]) -> list[TauCell]:
    """The cells whose printed ρ differs from their reported record's by more than
    :data:`~qval.errata.ROUNDING` (a check of the reading: only the errata's cells should)."""
    by_key = {(r.environment, r.target, r.modality, r.method, r.backbone): r.value for r in records}
    return [c for c in cells if c.rho is not None
            and abs(by_key[(c.environment, c.target, c.modality, c.method, c.backbone)] - c.rho) > ROUNDING + 1e-9]


@dataclass(frozen=True)
class PublishedCount:
    """One kind of published number the site imports, and how many."""

    what: str
    count: int


def published_numbers() -> list[PublishedCount]:
    """How many published numbers of QVal v1.0 the project holds, by kind, counted from its data files:
    the authors' reported ρ (``reported.json``) and their std where given, the paper's τ (``tau.json``)
    with codegen's std and [min, max], Table 6's ρ and τ with codegen's std and [min, max]
    (``table6.json``), and the errata cells (``errata.json``)."""
    _, records = reported()
    _, taus = tau_cells()
    _, table6 = relabelled.table6()
    spread = [getattr(r, f"{m}_{s}") for r in table6 for m in ("spearman", "kendall_tau") for s in ("std", "min", "max")]
    return [
        PublishedCount("reported ρ (the authors' data)", len(records)),
        PublishedCount("std of a reported ρ", sum(r.std is not None for r in records)),
        PublishedCount("Kendall τ of the paper's Tables 5 and 7–18", len(taus)),
        PublishedCount("std and [min, max] of a τ", sum((c.std is not None) + 2 * (c.low is not None) for c in taus)),
        PublishedCount("Table 6 ρ and τ (second labelling backbone)", 2 * len(table6)),
        PublishedCount("Table 6 std and [min, max]", sum(v is not None for v in spread)),
        PublishedCount("paper cells that differ from the authors' data (errata)", len(errata()[1])),
    ]

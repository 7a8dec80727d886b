"""Errata of the QVal paper: cells where its appendix tables print another number than the authors'
own website data (``reported.json``), and which of the two this site shows (the authors' data).

The list is project data (``data/qval-v1.0/errata.json``, with its provenance).  :func:`find_errata`
derives it from the paper's text (``qval-paper.txt``, a PDF extraction) and the reported records; the
tests check the file still equals it.  The extraction needs reading, as Table 6 does
(:mod:`qval.paper.qval_v1.relabelled`): each method takes a ρ line and a τ line, the six backbone columns are the
authors' order (:data:`BACKBONES`, the header's names are garbled), and some printed labels slip
(:data:`TABLES`; the slips were found by matching each printed line with the authors' data, and every
line but the ``verifier`` ones then matches all its cells to three decimals).

Nothing here knows about Django.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qval.paper.qval_v1.published import DATA_DIR, METRIC_TYPES, PublishedDataError, ReportedResult

ERRATA_FILE: Path = DATA_DIR / "errata.json"

BACKBONES: tuple[str, ...] = ("Gemma4 26B-A4B", "Gemma4 31B", "Qwen3.5 9B", "Qwen3.5 27B", "Qwen3.5 35B-A3B",
                              "Qwen3.5 122B-A10B")
"""The six backbone columns of Tables 7 and 13, as the authors' data names them."""

ROUNDING: float = 0.0005
"""A printed three-decimal number and the authors' four-decimal one agree when this close."""


@dataclass(frozen=True)
class PaperTable:
    """How to read one appendix table of the paper's text: its slice and, per printed method label, the
    method its ρ line holds (``None``: the line holds no ρ of a method, e.g. codegen's τ under the next label)."""

    number: int
    environment: str
    target: str
    modality: str
    lines: dict[str, str | None]


_STATE_LOCAL = ("ranking", "Δbelief", "sdpo", "sdpo-gt")

TABLES: tuple[PaperTable, ...] = (
    PaperTable(7, "OpenApps", "q", "text", {
        "gvl": "gvl", "direct-single": "direct-single", "direct-batched": "direct-batched",
        "direct-sequential": "direct-sequential", "direct-16": "direct-16", "eureka": "eureka",
        "codegen": "codegen", "codegen-avg": None, "sdpo": "sdpo", "verifier": "verifier", "Δ belief": "Δbelief",
    }),
    PaperTable(13, "FrozenLake", "q", "text", {
        "gvl": "gvl", "direct-single": "direct-single", "direct-batched": "direct-batched",
        "direct-sequential": "direct-sequential", "direct-16": "direct-16", "eureka": "eureka",
        "codegen": "codegen", "codegen-avg": None, "sdpo": "codegen-avg", "sdpo-gt": "sdpo",
        "verifier": "verifier", "Δ belief": "Δbelief", "ranking": "ranking",
    }),
)
"""The tables whose ``verifier`` rows the audit of issue 23 found to differ, with their label slips
(the printed ``codegen-avg`` line holds codegen's τ; in Table 13 ``sdpo`` holds codegen-avg and
``sdpo-gt`` holds sdpo)."""

_NUMBER = re.compile(r"^(-?\d+\.\d+)")


@dataclass(frozen=True)
class Erratum:
    """One cell where the paper's table and the authors' data differ; the site shows ``authors``."""

    table: int
    environment: str
    target: str
    modality: str
    method: str
    backbone: str
    metric: str
    paper: float
    authors: float


def paper_cells(paper_text: str, table: PaperTable) -> dict[tuple[str, str], float]:
    """The ρ cells ``(method, backbone) → printed value`` of ``table`` in the paper's text (a ``±``
    cell gives its mean; a dash, no cell); :class:`~qval.paper.qval_v1.published.PublishedDataError` when the table
    or one of its printed lines is missing."""
    start = paper_text.find(f"\nTable {table.number}:")
    end = paper_text.find(f"\nTable {table.number + 1}:", start)
    if start < 0 or end < 0:
        raise PublishedDataError(f"the paper text has no Table {table.number} followed by Table {table.number + 1}")
    cells: dict[tuple[str, str], float] = {}
    seen: set[str] = set()
    for line in paper_text[start:end].splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[1] != "ρ" or parts[0] not in table.lines:
            continue
        seen.add(parts[0])
        method = table.lines[parts[0]]
        if method is None:
            continue
        printed = [c.strip() for c in parts[2:] if c.strip()][:len(BACKBONES)]
        for backbone, cell in zip(BACKBONES, printed):
            found = _NUMBER.match(cell)
            if found is not None:
                cells[(method, backbone)] = float(found.group(1))
    missing = set(table.lines) - seen
    if missing:
        raise PublishedDataError(f"Table {table.number}: no ρ line for {sorted(missing)}")
    return cells


def find_errata(paper_text: str, reported: Sequence[ReportedResult]) -> tuple[int, list[Erratum]]:
    """How many cells of :data:`TABLES` were compared with the authors' data, and the ones that differ
    by more than :data:`ROUNDING` (a cell the authors' data lacks is counted as differing, with NaN)."""
    by_key = {(r.environment, r.target, r.modality, r.method, r.backbone): r for r in reported}
    compared = 0
    found: list[Erratum] = []
    for table in TABLES:
        for (method, backbone), printed in paper_cells(paper_text, table).items():
            compared += 1
            r = by_key.get((table.environment, table.target, table.modality, method, backbone))
            authors = r.value if r is not None else math.nan
            if not abs(authors - printed) <= ROUNDING + 1e-9:
                metric = METRIC_TYPES["state-local" if method in _STATE_LOCAL else "global"]
                found.append(Erratum(table.number, table.environment, table.target, table.modality, method, backbone,
                                     metric, printed, authors))
    return compared, found


def convert_errata(paper_text: str, reported: Sequence[ReportedResult]) -> dict[str, Any]:
    """The project's errata data (``errata.json``) of the paper's text and the reported records."""
    compared, found = find_errata(paper_text, reported)
    return {
        "provenance": {
            "paper": "QVal: Cheaply Evaluating Dense Supervision Signals for Long-Horizon LLM Agents (arXiv 2606.32034v1)",
            "where": "Appendix E, " + " and ".join(f"Table {t.number} ({t.environment}, Q, text)" for t in TABLES),
            "authors_data": "serhez/qval-site shared/data.json (reported.json here)",
            "how_found": f"every ρ cell of these tables ({compared} cells) compared with the authors' data to "
                         f"{ROUNDING} (three printed decimals), reading the columns in the authors' backbone order "
                         "and the printed labels as qval.errata.TABLES says; an audit of all the paper's tables "
                         "(issue 23) found no other differing cell",
            "shown": "the authors' data: it is what their website plots, and where we can re-score a cell from "
                     "their stored predictions (OpenApps verifier, Gemma4 31B) our number agrees with it",
        },
        "cells_compared": compared,
        "errata": [vars(e) for e in found],
    }


def errata(path: Path = ERRATA_FILE) -> tuple[dict[str, Any], list[Erratum]]:
    """The provenance and the cells of the errata file (``data/qval-v1.0/errata.json``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data["provenance"], [Erratum(**e) for e in data["errata"]]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise PublishedDataError(f"{path}: cannot read ({exc!r})") from exc


POINT_COUNTS: tuple[tuple[str, str], ...] = (
    ("eval_points", "the paper's Table 2"), ("website_points", "the authors' website data"))
"""Where an erratum's point count may come from, and how a page names each: the authors report one count per
environment, not one per number, and their two disagree (FrozenLake: 100 evaluation points in Table 2, 239 in
the website data; its verifier was scored on 239)."""


@dataclass(frozen=True)
class ComputedMarks:
    """The significance marks of an erratum's authors' number, computed from the number and its point count
    (the paper's own marks stand beside another number): ``stars`` hold at every candidate count
    (:data:`POINT_COUNTS`, smallest first, with the p-value at each), and ``how`` says so in words."""

    stars: str
    counts: tuple[int, ...]
    p_values: tuple[float, ...]
    how: str


def computed_marks(e: Erratum) -> ComputedMarks:
    """The marks of ``e``'s authors' number: scipy's Spearman p-value (Student's t, the authors' own
    computation) at each candidate point count; the p-value falls as the count grows, so the marks at the
    smallest count hold at every one, and those are shown.  Marks computed this way from Table 2's count
    equal the paper's printed ones for 96% of its global ρ cells (``tests/test_paper_consistency.py``)."""
    from qval import metrics
    from qval.paper.qval_v1 import published

    env = published.paper_environments()[1][e.environment]
    sources: dict[int, list[str]] = {}
    for field, where in POINT_COUNTS:
        n = getattr(env, field)
        if isinstance(n, int):
            sources.setdefault(n, []).append(where)
    counts = tuple(sorted(sources))
    p_values = tuple(metrics.spearman_p_value(e.authors, n) for n in counts)
    stars = metrics.significance_marks(p_values[0]) if p_values else ""
    at = "; ".join(f"p = {p:.3g} at {n} points ({' and '.join(sources[n])})"
                   + (f": {metrics.significance_marks(p) or 'no mark'}" if metrics.significance_marks(p) != stars else "")
                   for n, p in zip(counts, p_values))
    how = (f"computed from the authors' ρ {e.authors:.4f} and its point count (Spearman's p-value as scipy gives it): "
           f"{at}; shown: {stars or 'no mark'}, which holds at every count (the paper's marks stand beside its own "
           f"{e.paper:.3f})")
    return ComputedMarks(stars, counts, p_values, how)


def not_in_tables(reported: Sequence[ReportedResult] | None = None) -> dict[tuple[str, str, str, str, str], str]:
    """The authors' reported values that the paper's tables do not print as the figures plot them, keyed
    ``(environment, target, modality, method, backbone)``, each with why: an erratum (the table prints another
    number, :func:`errata`), or a method of :data:`TABLES` whose printed line holds no value of it (Table 7's
    ``codegen-avg`` line holds codegen's τ, and no other line holds codegen-avg's ρ), so no table prints it.
    ``reported``: the authors' records (default :func:`qval.paper.qval_v1.published.reported`)."""
    from qval.paper.qval_v1 import published

    records = published.reported()[1] if reported is None else reported
    out: dict[tuple[str, str, str, str, str], str] = {}
    for e in errata()[1]:
        out[(e.environment, e.target, e.modality, e.method, e.backbone)] = (
            f"erratum: Table {e.table} prints {e.paper:.3f}; the authors' data, plotted here, is {e.authors:.4f}")
    for table in TABLES:
        held = {m for m in table.lines.values() if m is not None}
        unprinted = {label for label, m in table.lines.items() if m is None and label not in held}
        for r in records:
            if (r.environment, r.target, r.modality) == (table.environment, table.target, table.modality) \
                    and r.method in unprinted:
                out[(r.environment, r.target, r.modality, r.method, r.backbone)] = (
                    f"not in the paper's tables: Table {table.number}'s {r.method} line prints another method's "
                    "number; this value is the authors' website data only")
    return out

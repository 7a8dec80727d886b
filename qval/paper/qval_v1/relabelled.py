"""Paper Table 6: TerminalBench relabelled with a second labelling backbone (Claude Opus 4.7
instead of GPT-5.5, both Max-Value Monte Carlo), the numbers behind the paper's Figure 5.

The authors published these numbers only in the paper, so ``data/qval-v1.0/table6.json`` is
their conversion from the paper's text (:func:`convert_table6`; the tests check the file still
equals it).  The text is a PDF extraction and needs reading, which the file's ``provenance``
records:

* the header names the backbones ``Gemma4_31B, Gemma4_26B-A4B, Gemma3_9B, Qwen3.5_27B,
  Qwen3.5_35B-A3B, Qwen3.5_72B-A10B``; two of those models are in no other table, so the columns
  are read as the paper's six backbones in the order of its other tables and of the authors' data
  (:data:`BACKBONES`, the order whose Table 5 cells equal the authors' data);
* as in Table 5 (whose cells the authors' data lets us check), each method takes two printed lines
  and the labels slip by one after ``codegen``: the line labelled ``codegen-avg`` holds codegen's
  Kendall τ (mean ± std over 16 samples, then [min, max]), the first line labelled ``verifier``
  holds ``codegen-avg`` and the second ``verifier``.  That gives the 9 methods × 6 backbones of ρ
  and τ the table holds.

Nothing here knows about Django.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qval.paper.qval_v1.published import DATA_DIR, PublishedDataError

TABLE6_FILE: Path = DATA_DIR / "table6.json"

BACKBONES: tuple[str, ...] = ("Gemma4 26B-A4B", "Gemma4 31B", "Qwen3.5 9B", "Qwen3.5 27B", "Qwen3.5 35B-A3B",
                              "Qwen3.5 122B-A10B")
"""The six columns of Table 6, as the authors' data names the backbones (see the module doc)."""

PRINTED_ROWS: tuple[tuple[str, str, str], ...] = (
    ("gvl", "gvl", "values"), ("direct-single", "direct-single", "values"),
    ("direct-batched", "direct-batched", "values"), ("direct-sequential", "direct-sequential", "values"),
    ("direct-16", "direct-16", "values"), ("eureka", "eureka", "values"),
    ("codegen", "codegen", "spearman-samples"), ("codegen-avg", "codegen", "kendall_tau-samples"),
    ("verifier", "codegen-avg", "values"), ("verifier", "verifier", "values"),
)
"""Table 6's printed method rows in order: ``(printed label, method, what its two lines hold)``;
``values`` is a ρ line then a τ line, ``<metric>-samples`` a mean ± std line then a [min, max] line."""

LABELLING = {"first": "GPT-5.5 (Codex 5.5), Max-Value Monte Carlo: paper Table 5, the authors' published data",
             "second": "Claude Opus 4.7, Max-Value Monte Carlo: paper Table 6"}
"""The two labelling backbones Figure 5 compares."""

_CELL = re.compile(r"^(-?\d+\.\d+)(\**)$")
_MEAN_STD = re.compile(r"^(-?\d+\.\d+) (?:\\pm|±) (\d+\.\d+)$")
_RANGE = re.compile(r"^\[(-?\d+\.\d+), (-?\d+\.\d+)\]$")


@dataclass(frozen=True)
class RelabelledResult:
    """One method × backbone of Table 6 (target Q, text, TerminalBench, Opus 4.7 labels).

    ``spearman``/``kendall_tau`` are the printed numbers (for ``codegen`` the mean over its 16
    sampled functions, with ``*_std``, ``*_min`` and ``*_max``); ``*_stars`` the significance
    marker printed next to them (``*`` p < .10, ``**`` p < .01, ``***`` p < .001; none for codegen).
    """

    method: str
    backbone: str
    spearman: float
    kendall_tau: float
    spearman_stars: str = ""
    kendall_tau_stars: str = ""
    spearman_std: float | None = None
    spearman_min: float | None = None
    spearman_max: float | None = None
    kendall_tau_std: float | None = None
    kendall_tau_min: float | None = None
    kendall_tau_max: float | None = None


def _cells(line: str, where: str) -> list[str]:
    cells = [c.strip() for c in line.split("\t")[2:] if c.strip()]
    if len(cells) != len(BACKBONES):
        raise PublishedDataError(f"{where}: expected {len(BACKBONES)} cells, found {len(cells)}: {line!r}")
    return cells


def _match(pattern: re.Pattern[str], cell: str, where: str) -> tuple[str, ...]:
    found = pattern.match(cell)
    if found is None:
        raise PublishedDataError(f"{where}: cannot read cell {cell!r}")
    return found.groups()


def convert_table6(paper_text: str) -> dict[str, Any]:
    """The project's Table 6 data of the paper's text (``qval-paper.txt``); a table that does not
    have the expected rows and cells raises :class:`~qval.paper.qval_v1.published.PublishedDataError`."""
    start = paper_text.find("\nTable 6:")
    end = paper_text.find("\nTable 7:", start)
    if start < 0 or end < 0:
        raise PublishedDataError("the paper text has no Table 6 followed by Table 7")
    lines = [line for line in paper_text[start:end].splitlines() if line.startswith(tuple(r[0] for r in PRINTED_ROWS))
             or line.startswith("\tτ")]
    if len(lines) != 2 * len(PRINTED_ROWS):
        raise PublishedDataError(f"Table 6: expected {2 * len(PRINTED_ROWS)} method lines, found {len(lines)}")
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for i, (label, method, kind) in enumerate(PRINTED_ROWS):
        first, second = lines[2 * i], lines[2 * i + 1]
        where = f"Table 6 row {i + 1} ({label})"
        if not first.startswith(f"{label}\tρ"):
            raise PublishedDataError(f"{where}: expected a ρ line labelled {label!r}, found {first!r}")
        for backbone, top, bottom in zip(BACKBONES, _cells(first, where), _cells(second, where)):
            cell = cells.setdefault((method, backbone), {"method": method, "backbone": backbone})
            if kind == "values":
                rho, rho_stars = _match(_CELL, top, where)
                tau, tau_stars = _match(_CELL, bottom, where)
                cell.update(spearman=float(rho), spearman_stars=rho_stars, kendall_tau=float(tau),
                            kendall_tau_stars=tau_stars)
            else:
                metric = kind.removesuffix("-samples")
                mean, std = _match(_MEAN_STD, top, where)
                low, high = _match(_RANGE, bottom, where)
                cell.update({metric: float(mean), f"{metric}_std": float(std), f"{metric}_min": float(low),
                             f"{metric}_max": float(high)})
    return {
        "provenance": {
            "paper": "QVal: Cheaply Evaluating Dense Supervision Signals for Long-Horizon LLM Agents",
            "where": "Appendix E, Table 6 (TerminalBench, Q-value, text; Opus 4.7 Max-Value Monte Carlo labels), "
                     "the numbers of Figure 5",
            "code": "bethgelab/qval",
            "reading": "columns read as " + ", ".join(BACKBONES) + " (the header's names are garbled); printed "
                       "labels slip by one after codegen: 'codegen-avg' holds codegen's Kendall tau, the first "
                       "'verifier' holds codegen-avg (as in Table 5, checked against the authors' data)",
        },
        "environment": "TerminalBench", "target": "q", "modality": "text",
        "labelling_backbone": "Claude Opus 4.7",
        "records": list(cells.values()),
    }


def table6(path: Path = TABLE6_FILE) -> tuple[dict[str, Any], list[RelabelledResult]]:
    """The provenance and the 54 method × backbone results of Table 6 (``data/qval-v1.0/table6.json``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise PublishedDataError(f"{path}: cannot read ({exc})") from exc
    rows = []
    for i, record in enumerate(data["records"]):
        try:
            rows.append(RelabelledResult(**record))
        except TypeError as exc:
            raise PublishedDataError(f"{path.name}: record {i}: {exc}") from None
    return data["provenance"], rows

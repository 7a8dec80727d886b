"""Re-scored against reported: cell by cell (environment, backbone, method, target), the number the
authors report (their website data, ``reported.json``), the number the paper's appendix table prints for
the cell where one does, the number we re-score from their stored predictions, the difference, and why
they differ where they do.

"Reported" is the authors' data, not the paper's table: the two agree to three decimals except in the
errata (:mod:`qval.errata`, e.g. OpenApps verifier on Gemma4 31B: the data 0.2646, Table 7 0.346), and
some reported numbers no table prints (:func:`qval.errata.not_in_tables`).  Each cell says which
(:func:`printed`).  The reasons are computed, not written per cell (:func:`table`):

* **labels** -- the summary file was labelled by another policy than the paper's table for that slice
  (``data/qval-v1.0/label-sources.json``, :func:`label_sources`; all TerminalBench rows);
* **predictions** -- the labels are those the authors scored (other methods of the same summary file,
  target and metric agree with the authors' data to three decimals), so this method's stored predictions
  are not the ones its reported number was computed from;
* **small** -- within :data:`TOLERANCE` of the authors' number but not to three decimals;
* **equal** -- equal to the authors' number to three decimals (a ``codegen`` row says it follows the
  paper's codegen rule, the mean of the per-sample correlations); the why says whether the paper's table
  prints the same, another number (an erratum) or none;
* **unexplained** -- none of the above (the tests check that no cell is).

Nothing here knows about Django.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qval import errata, metric_registry
from qval.paper.qval_v1 import tau as paper_tau
from qval.paper.qval_v1.published import DATA_DIR, PublishedDataError, ReportedResult

LABEL_SOURCES_FILE: Path = DATA_DIR / "label-sources.json"

TOLERANCE: float = 0.01
"""A re-scored and a reported number further apart than this must have a reason other than *small*."""
ROUNDING: float = 0.0005
"""The paper prints three decimals: closer than this the two numbers are the same."""

REASONS: dict[str, str] = {
    "equal": "the same as the authors' data to three decimals",
    "small": "within 0.01 of the authors' data, not to three decimals",
    "labels": "labelled by another policy than the paper's table",
    "predictions": "other predictions than the paper's, on the paper's labels",
    "unreported": "no reported number for this cell",
    "unexplained": "no known reason",
}
"""Each reason code and its short name."""

DECIDED: dict[str, str] = {
    "unreported": "the authors' data has no number for the cell",
    "equal": f"the re-score and the authors' number differ by at most {ROUNDING} (the paper prints three decimals)",
    "labels": "the summary file's labelling policy is not the one the paper's table names (label-sources.json)",
    "small": f"they differ by more than {ROUNDING} and at most {TOLERANCE}",
    "predictions": f"they differ by more than {TOLERANCE}, and at least one other method of the same summary file, "
                   "target and metric is equal to the authors' number (so the labels are theirs)",
    "unexplained": "none of the above",
}
"""How each reason is decided, in the order :func:`table` tries them (the first that applies decides): a
comparison of two numbers computed on the same points, not a statistical test."""


@dataclass(frozen=True)
class LabelSource:
    """Who labelled one reference summary file, and the labelling of the paper's table for its slice."""

    file: str
    tag: str
    labelling: str
    paper_labelling: str
    same_as_paper: bool
    evidence: str = ""


def label_sources(path: Path = LABEL_SOURCES_FILE) -> tuple[dict[str, Any], dict[str, LabelSource]]:
    """The provenance and, by summary file (a re-scored row's ``provenance['file']``), its :class:`LabelSource`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data["provenance"], {f: LabelSource(file=f, **entry) for f, entry in data["summaries"].items()}
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise PublishedDataError(f"{path}: cannot read ({exc!r})") from exc


@dataclass(frozen=True)
class Printed:
    """What the paper's appendix tables print for one reported number: the ``table`` and its ``value`` (three
    decimals), or ``value`` ``None`` with ``why`` when no table prints it."""

    table: int | None
    value: float | None
    why: str = ""


Key = tuple[str, str, str, str, str, str]
"""(environment, target, modality, method, backbone, metric) of a reported number."""


def printed() -> dict[Key, Printed]:
    """What the paper's tables print for the reported numbers whose printed line this project reads: the ρ
    line above each printed τ (:func:`qval.paper.qval_v1.tau.tau_cells`), the errata's printed numbers
    (:func:`qval.errata.errata`) and, as printing none, the numbers no table prints
    (:func:`qval.errata.not_in_tables`).  A number absent here has a line this project does not read
    (codegen's mean ± std, some state-local lines)."""
    out: dict[Key, Printed] = {}
    for c in paper_tau.tau_cells()[1]:
        if c.rho is not None:
            out[(c.environment, c.target, c.modality, c.method, c.backbone, c.metric)] = Printed(c.table, c.rho)
    for e in errata.errata()[1]:
        out[(e.environment, e.target, e.modality, e.method, e.backbone, e.metric)] = Printed(e.table, e.paper)
    for (env, target, modality, method, backbone), why in errata.not_in_tables().items():
        if not why.startswith("erratum"):
            for metric in metric_registry.HEADLINES:
                out.pop((env, target, modality, method, backbone, metric), None)
            out[(env, target, modality, method, backbone, metric_registry.HEADLINE)] = Printed(None, None, why)
    return out


@dataclass(frozen=True)
class RescoredValue:
    """One re-scored number: its slice, metric, value, the summary file it comes from and, on the
    site, the row that holds it (``ref``, a submission id)."""

    environment: str
    backbone: str
    method: str
    target: str
    modality: str
    metric: str
    value: float | None
    file: str
    ref: int | None = None


@dataclass(frozen=True)
class Cell:
    """One row of the consistency table."""

    environment: str
    backbone: str
    method: str
    target: str
    metric: str
    reported: float | None
    rescored: float | None
    file: str
    label_source: LabelSource | None
    reason: str
    why: str
    ref: int | None = None
    paper: Printed | None = None
    """What the paper's table prints for the cell (``None``: its line is not read here)."""

    @property
    def difference(self) -> float | None:
        """Re-scored minus reported (``None`` when either is missing)."""
        if self.reported is None or self.rescored is None:
            return None
        return self.rescored - self.reported


def _close(a: float | None, b: float | None, within: float) -> bool:
    return a is not None and b is not None and abs(a - b) <= within + 1e-12


def _paper_note(rep: float | None, paper: Printed | None) -> str:
    """How the paper's table stands to the authors' number ``rep``, as a clause."""
    if paper is None or rep is None:
        return "the paper's table line for this cell is not read here"
    if paper.value is None:
        return paper.why
    if _close(paper.value, rep, ROUNDING):
        return f"the paper's Table {paper.table} prints the same ({paper.value:.3f})"
    return (f"the paper's Table {paper.table} prints {paper.value:.3f} instead: an erratum of the paper's table, "
            "not of the authors' data")


def _why(reason: str, r: RescoredValue, rep: float | None, source: LabelSource | None, witnesses: Sequence[str],
         paper: Printed | None) -> str:
    if reason == "labels" and source is not None:
        return (f"the summary's labels come from {source.labelling}; the paper's table uses {source.paper_labelling}"
                + (f" ({source.evidence})" if source.evidence else ""))
    if reason == "predictions":
        return (f"on the same labels {len(witnesses)} other method(s) of this summary agree with the authors' data to "
                f"three decimals ({', '.join(witnesses)}), so the labels are those the authors scored; the predictions "
                f"stored for {r.method} are not the ones its reported number was computed from")
    if reason == "unreported":
        return "the authors publish no number for this method, backbone, target and modality"
    if reason == "equal" and r.method == "codegen":
        return ("the same as the authors' data to three decimals, re-scored by the paper's codegen rule: the mean of "
                f"the 16 per-sample correlations; {_paper_note(rep, paper)}")
    if reason in ("equal", "small"):
        return f"{REASONS[reason]}; {_paper_note(rep, paper)}"
    return REASONS[reason]


def table(reported: Iterable[ReportedResult], rescored: Iterable[RescoredValue],
          sources: dict[str, LabelSource] | None = None, paper: dict[Key, Printed] | None = None) -> list[Cell]:
    """The consistency table: one :class:`Cell` per re-scored value, joined with the reported number of
    the same environment, backbone, method, target, modality and metric and with what the paper's table
    prints for it, in the order of ``rescored``; ``sources`` defaults to :func:`label_sources`, ``paper``
    to :func:`printed`."""
    if sources is None:
        sources = label_sources()[1]
    if paper is None:
        paper = printed()
    by_key = {(r.environment, r.backbone, r.method, r.target, r.modality, r.metric): r.value for r in reported}
    values = list(rescored)
    pairs = [(r, by_key.get((r.environment, r.backbone, r.method, r.target, r.modality, r.metric))) for r in values]
    agreeing: dict[tuple[str, str, str], list[str]] = {}
    for r, rep in pairs:
        if _close(r.value, rep, ROUNDING):
            agreeing.setdefault((r.file, r.target, r.metric), []).append(r.method)
    cells = []
    for r, rep in pairs:
        source = sources.get(r.file)
        witnesses = [m for m in agreeing.get((r.file, r.target, r.metric), []) if m != r.method]
        if rep is None:
            reason = "unreported"
        elif _close(r.value, rep, ROUNDING):
            reason = "equal"
        elif source is not None and not source.same_as_paper:
            reason = "labels"
        elif _close(r.value, rep, TOLERANCE):
            reason = "small"
        elif r.value is not None and witnesses:
            reason = "predictions"
        else:
            reason = "unexplained"
        print_ = paper.get((r.environment, r.target, r.modality, r.method, r.backbone, r.metric))
        cells.append(Cell(r.environment, r.backbone, r.method, r.target, r.metric, rep, r.value, r.file, source,
                          reason, _why(reason, r, rep, source, witnesses, print_), r.ref, print_))
    return cells

"""What the QVal v1.0 paper publishes, as the pages show it: how many of its numbers the site holds and the
errata of its tables (the scoring page, the consistency page and an authors' dataset's page)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from qval import errata
from qval.paper.qval_v1 import tau as paper_tau


@functools.cache
def published_numbers_context() -> dict[str, object]:
    """How many published numbers of QVal v1.0 the site holds, by kind and in all, for a template: read from the
    paper's data files, which ship with the code, once per process (reading them costs a page milliseconds)."""
    counts = paper_tau.published_numbers()
    return {"published_numbers": counts, "published_total": sum(c.count for c in counts)}


@dataclass(frozen=True)
class ErratumRow:
    """One erratum as a page shows it: the cell, the marks the paper prints beside its number, and the marks
    computed from the authors' number (:func:`qval.errata.computed_marks`)."""

    erratum: errata.Erratum
    printed_marks: str
    computed: errata.ComputedMarks


@functools.cache
def errata_context(environment: str | None = None) -> dict[str, object]:
    """The errata of the paper's tables (those of one environment, the paper's name, when given) for a template,
    each with its printed and its computed significance marks; read from the data files once per process."""
    provenance, cells = errata.errata()
    printed = {(c.environment, c.target, c.modality, c.method, c.backbone, c.metric): c.rho_stars or ""
               for c in paper_tau.tau_cells()[1]}
    return {"errata": [ErratumRow(e, printed.get((e.environment, e.target, e.modality, e.method, e.backbone, e.metric), ""),
                                  errata.computed_marks(e))
                       for e in cells if environment is None or e.environment == environment],
            "errata_provenance": provenance}

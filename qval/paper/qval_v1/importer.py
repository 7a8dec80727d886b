"""QVal v1.0's results as the importer reads them (:class:`~qval.paper.base.PublishedResults`).

Reported numbers become *reported* rows (with the point counts the authors give per environment,
:func:`.published.reported_points`, and the paper's date in their provenance; the Kendall τ the paper prints for
a global row, :mod:`.tau`, is its ``kendall_tau`` result; it prints none for a state-local one); the stored predictions become *re-scored* rows (scored under the reference rules,
their per-point predictions kept as a predictions file, so that two of them can be compared as ours are).  Both
sit on datasets of their own (``qval-v1.0-<env>@1.0``, *QVal-v1.0 (reported)*: no inputs, and labels only in the
project's data files), never mixed with rows scored on our datasets.  Nothing here knows about Django.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from qval import errata, metrics, scoring
from qval.paper.base import Batch, ImportedRow, PublishedEnvironment, PublishedResults
from qval.paper.qval_v1 import published
from qval.paper.qval_v1 import tau as paper_tau

REPORTED_LAYOUT = 5
"""What a reported row holds, part of the digest an import compares (2: points from the authors'
metadata, the paper's date in the provenance; 3: the paper's printed Kendall τ, :mod:`.tau`;
4: an erratum's significance marks computed from the authors' number, :func:`qval.errata.computed_marks`;
5: no state-local τ, which the paper does not print)."""
RESCORED_LAYOUT = 4
"""What a re-scored row holds, part of the digest an import compares: rows imported under an
older layout are rewritten (2: the row keeps its predictions file; 3: a sampled predictor's value is the
mean of its per-sample values, the paper's ``codegen`` rule; 4: intervals by :func:`qval.metrics.t_interval`
on Fisher's z, saying what they resampled, ``ci95_resampled``)."""
ENVIRONMENT_INFO = {
    "FrozenLake": "Gymnasium FrozenLake 8×8.",
    "ALFWorld": "Household tasks (ALFWorld), observed as text or as rendered images.",
    "OpenApps": "Web apps (OpenApps); its data is not hosted here.",
    "TerminalBench": "Terminal tasks (TerminalBench lite); its data is not hosted here.",
}
"""What the site says of each of the paper's environments when it has no environment row of that slug yet."""


def tau_rows(r: published.ReportedResult, row: dict[str, Any], cell: paper_tau.TauCell | None) -> list[dict[str, Any]]:
    """The result rows of reported record ``r`` (its ρ ``row``) with the paper's printed τ ``cell`` (of a global
    row: the paper prints no τ of a state-local one): the τ is a ``kendall_tau`` row of its own (no p-value: the
    paper prints stars, kept in the details).  The stars printed next to the ρ go into the ρ row's
    ``details.paper`` with their table and line, unless the printed ρ is not the authors' number (the errata's
    cells): then the stars and the τ printed under them are another number's (Table 7's verifier on Gemma4 31B
    prints ρ 0.346*** and τ 0.264***; the authors' data has ρ 0.2646 and their stored τ 0.211), so the row keeps
    neither."""
    if cell is None:
        return [row]
    if cell.rho is not None and abs(cell.rho - r.value) > errata.ROUNDING + 1e-9:
        return [row]
    if cell.rho is not None and cell.rho_stars is not None:
        row["details"]["paper"] = {"table": cell.table, "line": cell.line - 1, "stars": cell.rho_stars}
    details = {"std": cell.std, "record": r.index, "num_points_from": row["details"]["num_points_from"],
               "paper": {"table": cell.table, "line": cell.line, "stars": cell.stars, "min": cell.low, "max": cell.high}}
    return [row, dict(row, metric="kendall_tau", value=cell.value, details=details)]


@functools.cache
def _environments() -> dict[str, PublishedEnvironment]:
    """The paper's environments (read once: the data files do not change while the site runs)."""
    summaries = published.paper_environments()[1]
    return {name: PublishedEnvironment(name=name, slug=slug, description=ENVIRONMENT_INFO.get(name, ""),
                                       modalities=summaries[name].modalities)
            for name, slug in published.ENVIRONMENTS.items()}


class QValV1(PublishedResults):
    """The results of the QVal v1.0 paper and website (:mod:`.published`)."""

    key = "qval-v1.0"
    title = "QVal-v1.0"
    dataset_version = "1.0"
    rules = metrics.REFERENCE_RULES
    dataset_description = "The authors' dataset of QVal v1.0; results imported from their publication."

    def environments(self) -> dict[str, PublishedEnvironment]:
        return dict(_environments())

    def dataset_provenance(self) -> dict[str, Any]:
        return {"repository": published.REFERENCE_REPOSITORY, "commit": published.REFERENCE_COMMIT}

    def truth(self, environment: str, target: str) -> scoring.Truth:
        return published.truth(environment, target)

    def batches(self, resamples: int) -> Iterator[Batch]:
        yield self._reported()
        for path in published.rescored_files():
            yield self._rescored(path, resamples)

    def _reported(self) -> Batch:
        provenance, records = published.reported()
        paper = published.paper()
        digest = f"{published.digest(published.REPORTED_FILE)}:{published.digest(paper_tau.TAU_FILE)}:{REPORTED_LAYOUT}"
        provenance = dict(provenance, data_sha256=digest, paper=paper.arxiv, paper_date=paper.date.isoformat(),
                          tau_file=paper_tau.TAU_FILE.name)
        groups: dict[tuple[str, str, str, str, str], list[published.ReportedResult]] = {}
        for r in records:
            groups.setdefault((r.environment, r.backbone, r.method, r.target, r.modality), []).append(r)
        keys = {group: "reported:" + ":".join(group) for group in groups}

        def rows() -> Iterator[ImportedRow]:
            taus = {(c.environment, c.target, c.modality, c.method, c.backbone, c.metric): c
                    for c in paper_tau.tau_cells()[1]}
            points_of = functools.cache(published.reported_points)  # one read of the files per count
            computed = {(e.environment, e.target, e.modality, e.method, e.backbone, e.metric): errata.computed_marks(e)
                        for e in errata.errata()[1]}
            for (env, backbone, method, target, modality), group in groups.items():
                results = []
                for r in group:
                    points, points_from = points_of(env, r.metric)
                    row = {"metric": r.metric, "value": r.value, "p_value": None, "num_points": points,
                           "num_dropped": 0, "coverage": 1.0, "insufficient": False,
                           "details": {"std": r.std, "record": r.index, "num_points_from": points_from}}
                    marks = computed.get((env, target, modality, method, backbone, r.metric))
                    if marks is not None:  # an erratum: the paper's marks stand beside another number
                        row["details"]["computed_marks"] = {"stars": marks.stars, "how": marks.how,
                                                            "counts": list(marks.counts)}
                    results.extend(tau_rows(r, row, taus.get((env, target, modality, method, backbone, r.metric))))
                yield ImportedRow(key=keys[(env, backbone, method, target, modality)], environment=env, method=method,
                                  backbone=backbone, target=target, modality=modality, source="reported",
                                  provenance=dict(provenance, records=[r.index for r in group]),
                                  results=tuple(results))

        return Batch(source="reported", keys=tuple(keys.values()), digest=digest, rows=rows)

    def _rescored(self, path: Any, resamples: int) -> Batch:
        evaluations = published.rescored(path)
        digest = f"{published.digest(path)}:{resamples}:{RESCORED_LAYOUT}"

        def rows() -> Iterator[ImportedRow]:
            for ev in evaluations:
                results = tuple(dict(vars(r)) for r in published.score_evaluation(ev, bootstrap_resamples=resamples))
                yield ImportedRow(key=ev.key, environment=ev.environment, method=ev.method, backbone=ev.backbone,
                                  target=ev.target, modality=ev.modality, source="rescored",
                                  provenance=dict(ev.provenance, data_sha256=digest), results=results,
                                  predictions=published.predictions_jsonl(ev))

        return Batch(source="rescored", keys=tuple(ev.key for ev in evaluations), digest=digest, rows=rows)


RESULTS = QValV1()

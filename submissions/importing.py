"""Import the published QVal v1.0 results (:mod:`qval.published`) into the database.

Reported numbers become *reported* submissions (with the point counts the authors give per
environment, :func:`qval.published.reported_points`, and the paper's date in their provenance; the
Kendall τ the paper prints for a global row, :mod:`qval.paper_tau`, is its ``kendall_tau`` result; it prints
none for a state-local one), the stored predictions *re-scored*
submissions (scored here under the reference rules, their per-point predictions kept as a
predictions file on the row, so that two of them can be compared as ours are); both sit on
datasets of their own (``qval-v1.0-<env>@1.0``, *QVal-v1.0 (reported)*, ``hosted=False``: no
inputs, and labels only in the project's data files), never mixed with rows scored on our
datasets.  Each row carries its provenance and a stable ``import_key``: importing again
updates the rows in place, so the import is idempotent.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction
from django.utils import timezone

from leaderboard.models import Backbone, Dataset, Environment, Method
from qval import errata, families, metrics, paper_tau, published

from .models import Result, Submission

DATASET_VERSION = "1.0"
REPORTED_LAYOUT = 5
"""What a reported row holds, part of the digest an import compares (2: points from the authors'
metadata, the paper's date in the provenance; 3: the paper's printed Kendall τ, :mod:`qval.paper_tau`;
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


@dataclass
class ImportReport:
    """What :func:`import_results` did."""

    reported: int = 0
    rescored: int = 0
    results: int = 0
    """Results written (0 when nothing changed since the last import)."""


def published_dataset(environment: str) -> Dataset:
    """The not-hosted dataset that holds the imported results of a paper environment."""
    env, _ = Environment.objects.get_or_create(
        slug=published.ENVIRONMENTS[environment],
        defaults={"name": environment, "description": ENVIRONMENT_INFO.get(environment, "")},
    )
    dataset, _ = Dataset.objects.update_or_create(
        slug=f"qval-v1.0-{env.slug}", version=DATASET_VERSION,
        defaults={
            "environment": env, "name": f"QVal-v1.0 {environment} (reported)", "hosted": False,
            "description": "The authors' dataset of QVal v1.0; results imported from their publication.",
            "fingerprint": "", "modalities": list(published.paper_environments()[1][environment].modalities),
            "manifest": {"provenance": {"repository": published.REFERENCE_REPOSITORY,
                                        "commit": published.REFERENCE_COMMIT}},
        },
    )
    return dataset


def _method(name: str) -> Method:
    family = families.of_method(name).slug
    method, created = Method.objects.get_or_create(name=name, defaults={"family": family})
    if not created and method.family == families.OTHER.slug and family != families.OTHER.slug:
        method.family = family
        method.save(update_fields=["family"])
    return method


def _upsert(key: str, *, dataset: Dataset, method: str, backbone: str, target: str, modality: str,
            source: str, rules: str, provenance: dict[str, Any], rows: list[dict[str, Any]]) -> Submission:
    """Create or update the imported submission ``key`` and its results; return it."""
    now = timezone.now()
    fields = {
        "dataset": dataset, "split": "test", "target": target, "modality": modality, "method_name": method,
        "backbone_name": backbone, "method": _method(method), "backbone": Backbone.objects.get_or_create(name=backbone)[0],
        "source": source, "rules": rules, "provenance": provenance, "state": Submission.FINISHED,
        "filename": Path(provenance["file"]).name, "user": None,
    }
    sub, created = Submission.objects.update_or_create(import_key=key, defaults=fields)
    if created:
        Submission.objects.filter(pk=sub.pk).update(received_at=now, finished_at=now)
    keep = [r["metric"] for r in rows]
    sub.results.exclude(metric__in=keep).delete()
    for row in rows:
        Result.objects.update_or_create(submission=sub, metric=row.pop("metric"), defaults=row)
    return sub


def _store_predictions(sub: Submission, ev: published.RescoredEvaluation) -> None:
    """Keep ``ev``'s per-point predictions on its row as a JSON Lines predictions file
    (none for an evaluation with only per-state ranking values), replacing an older one."""
    data = published.predictions_jsonl(ev)
    if sub.predictions:
        sub.predictions.delete(save=False)
    if data is not None:
        sub.predictions.save(f"{sub.pk}-rescored.jsonl", ContentFile(data), save=False)
    sub.sha256 = hashlib.sha256(data).hexdigest() if data is not None else ""
    sub.size_bytes = len(data or b"")
    sub.file_format = "jsonl" if data is not None else ""
    sub.save(update_fields=["predictions", "sha256", "size_bytes", "file_format"])


def _unchanged(keys: list[str], digest: str) -> bool:
    """Whether every row of ``keys`` was already imported from data with this ``digest``."""
    return Submission.objects.filter(import_key__in=keys, provenance__data_sha256=digest).count() == len(keys)


def _tau_rows(r: published.ReportedResult, row: dict[str, Any], cell: paper_tau.TauCell | None) -> list[dict[str, Any]]:
    """The result rows of reported record ``r`` (its ρ ``row``) with the paper's printed τ ``cell`` (of a global
    row: the paper prints no τ of a state-local one): the τ is a ``kendall_tau`` row of its own (no p-value: the
    paper prints stars, kept in the details).  The stars printed next to the ρ go into the ρ row's ``details.paper`` with their table and line, unless the
    printed ρ is not the authors' number (the errata's cells): then the stars and the τ printed under them are
    another number's (Table 7's verifier on Gemma4 31B prints ρ 0.346*** and τ 0.264***; the authors' data has
    ρ 0.2646 and their stored τ 0.211), so the row keeps neither."""
    if cell is None:
        return [row]
    if cell.rho is not None and abs(cell.rho - r.value) > errata.ROUNDING + 1e-9:
        return [row]
    if cell.rho is not None and cell.rho_stars is not None:
        row["details"]["paper"] = {"table": cell.table, "line": cell.line - 1, "stars": cell.rho_stars}
    details = {"std": cell.std, "record": r.index, "num_points_from": row["details"]["num_points_from"],
               "paper": {"table": cell.table, "line": cell.line, "stars": cell.stars, "min": cell.low, "max": cell.high}}
    return [row, dict(row, metric="kendall_tau", value=cell.value, details=details)]


def _reported(report: ImportReport) -> None:
    provenance, records = published.reported()
    taus = {(c.environment, c.target, c.modality, c.method, c.backbone, c.metric): c for c in paper_tau.tau_cells()[1]}
    paper = published.paper()
    digest = f"{published.digest(published.REPORTED_FILE)}:{published.digest(paper_tau.TAU_FILE)}:{REPORTED_LAYOUT}"
    provenance = dict(provenance, data_sha256=digest, paper=paper.arxiv, paper_date=paper.date.isoformat(),
                      tau_file=paper_tau.TAU_FILE.name)
    groups: dict[tuple[str, str, str, str, str], list[published.ReportedResult]] = {}
    for r in records:
        groups.setdefault((r.environment, r.backbone, r.method, r.target, r.modality), []).append(r)
    datasets = {env: published_dataset(env) for env in published.ENVIRONMENTS}
    computed = {(e.environment, e.target, e.modality, e.method, e.backbone, e.metric): errata.computed_marks(e)
                for e in errata.errata()[1]}
    keys = {group: "reported:" + ":".join(group) for group in groups}
    if _unchanged(list(keys.values()), provenance["data_sha256"]):
        report.reported = len(keys)
        return
    for (env, backbone, method, target, modality), group in groups.items():
        rows = []
        for r in group:
            points, points_from = published.reported_points(env, r.metric)
            row = {"metric": r.metric, "value": r.value, "p_value": None, "num_points": points,
                   "num_dropped": 0, "coverage": 1.0, "insufficient": False,
                   "details": {"std": r.std, "record": r.index, "num_points_from": points_from}}
            marks = computed.get((env, target, modality, method, backbone, r.metric))
            if marks is not None:  # an erratum: the paper's marks stand beside another number
                row["details"]["computed_marks"] = {"stars": marks.stars, "how": marks.how, "counts": list(marks.counts)}
            rows.extend(_tau_rows(r, row, taus.get((env, target, modality, method, backbone, r.metric))))
        _upsert(keys[(env, backbone, method, target, modality)], dataset=datasets[env], method=method,
                backbone=backbone, target=target, modality=modality, source="reported", rules=metrics.REFERENCE_RULES,
                provenance=dict(provenance, records=[r.index for r in group]), rows=rows)
        report.reported += 1
        report.results += len(rows)


def _rescored(report: ImportReport, resamples: int) -> None:
    for path in published.rescored_files():
        evaluations = published.rescored(path)
        digest = f"{published.digest(path)}:{resamples}:{RESCORED_LAYOUT}"
        report.rescored += len(evaluations)
        if _unchanged([ev.key for ev in evaluations], digest):
            continue
        for ev in evaluations:
            rows = [dict(vars(r)) for r in published.score_evaluation(ev, bootstrap_resamples=resamples)]
            sub = _upsert(ev.key, dataset=published_dataset(ev.environment), method=ev.method,
                          backbone=ev.backbone, target=ev.target, modality=ev.modality, source="rescored",
                          rules=metrics.REFERENCE_RULES, provenance=dict(ev.provenance, data_sha256=digest), rows=rows)
            _store_predictions(sub, ev)
            report.results += len(rows)


def import_results(*, resamples: int | None = None) -> ImportReport:
    """Import (or update) every reported and re-scored QVal v1.0 result, in one transaction."""
    report = ImportReport()
    with transaction.atomic():
        _reported(report)
        _rescored(report, settings.QVAL_BOOTSTRAP_RESAMPLES if resamples is None else resamples)
    return report

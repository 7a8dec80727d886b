"""Import published results (:mod:`qval.paper`: every paper behind one interface) into the database.

Each paper's environments get a dataset of their own (``<paper key>-<environment slug>@<version>``, named
*<paper> <environment> (reported)*, ``hosted=False``: no inputs, and labels only in the project's data files), never
mixed with rows scored on our datasets; each of its rows (:class:`qval.paper.base.ImportedRow`: *reported* numbers
or *re-scored* stored predictions, with a predictions file kept on the row) becomes a finished submission with its
provenance and a stable ``import_key``: importing again updates the rows in place, and a batch whose data did not
change since the last import is left as it is, so the import is idempotent.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import transaction
from django.utils import timezone

from leaderboard.models import Backbone, Dataset, Environment, Method
from qval import families, paper
from qval.paper.base import ImportedRow, PublishedResults

from .models import Result, Submission


@dataclass
class ImportReport:
    """What :func:`import_results` did."""

    reported: int = 0
    rescored: int = 0
    results: int = 0
    """Results written (0 when nothing changed since the last import)."""


def published_dataset(environment: str, results: PublishedResults | None = None) -> Dataset:
    """The not-hosted dataset that holds the imported results of the paper environment ``environment`` (the
    paper's name) of ``results`` (default: the one paper that has an environment of that name)."""
    results = results or paper.publishing(environment)
    info = results.environments()[environment]
    env, _ = Environment.objects.get_or_create(slug=info.slug,
                                               defaults={"name": environment, "description": info.description})
    dataset, _ = Dataset.objects.update_or_create(
        slug=results.dataset_slug(env.slug), version=results.dataset_version,
        defaults={
            "environment": env, "name": f"{results.title} {environment} (reported)", "hosted": False,
            "description": results.dataset_description, "fingerprint": "", "modalities": list(info.modalities),
            "manifest": {"provenance": results.dataset_provenance()},
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


def _backbone(name: str) -> Backbone:
    return Backbone.objects.get_or_create(name=name)[0]


class _Registry:
    """The methods and backbones an import links its rows to, each looked up (or created) once per import."""

    def __init__(self) -> None:
        self.method = functools.cache(_method)
        self.backbone = functools.cache(_backbone)


def _fields(row: ImportedRow, dataset: Dataset, rules: str, registry: _Registry) -> dict[str, object]:
    """The submission fields of ``row``."""
    provenance = dict(row.provenance)
    return {
        "dataset": dataset, "split": "test", "target": row.target, "modality": row.modality,
        "method_name": row.method, "backbone_name": row.backbone, "method": registry.method(row.method),
        "backbone": registry.backbone(row.backbone), "source": row.source, "rules": rules,
        "provenance": provenance, "state": Submission.FINISHED, "filename": Path(provenance["file"]).name,
        "user": None,
    }


def _update(row: ImportedRow, dataset: Dataset, rules: str, registry: _Registry) -> Submission:
    """Update the imported submission of ``row`` in place, and its results; return it."""
    sub, _ = Submission.objects.update_or_create(import_key=row.key, defaults=_fields(row, dataset, rules, registry))
    results = [dict(r) for r in row.results]
    sub.results.exclude(metric__in=[r["metric"] for r in results]).delete()
    for result in results:
        Result.objects.update_or_create(submission=sub, metric=result.pop("metric"), defaults=result)
    return sub


def _create(rows: list[ImportedRow], datasets: dict[str, Dataset], rules: str,
            registry: _Registry) -> list[Submission]:
    """Create the submissions of ``rows`` (none imported before) and their results, a few statements for all."""
    now = timezone.now()
    subs = Submission.objects.bulk_create([
        Submission(import_key=row.key, received_at=now, finished_at=now,
                   **_fields(row, datasets[row.environment], rules, registry)) for row in rows])
    Result.objects.bulk_create([Result(submission=sub, **r) for sub, row in zip(subs, rows) for r in row.results])
    return subs


def _store_predictions(sub: Submission, data: bytes | None) -> None:
    """Keep ``data`` (a JSON Lines predictions file, or ``None`` for a row with only per-state ranking values) on
    the row as its predictions file, replacing an older one."""
    if sub.predictions:
        sub.predictions.delete(save=False)
    if data is not None:
        sub.predictions.save(f"{sub.pk}-rescored.jsonl", ContentFile(data), save=False)
    sub.sha256 = hashlib.sha256(data).hexdigest() if data is not None else ""
    sub.size_bytes = len(data or b"")
    sub.file_format = "jsonl" if data is not None else ""
    sub.save(update_fields=["predictions", "sha256", "size_bytes", "file_format"])


def _unchanged(keys: tuple[str, ...], digest: str) -> bool:
    """Whether every row of ``keys`` was already imported from data with this ``digest``."""
    return Submission.objects.filter(import_key__in=keys, provenance__data_sha256=digest).count() == len(keys)


def _import(results: PublishedResults, report: ImportReport, resamples: int) -> None:
    """Import every batch of ``results`` whose data changed since the last import: rows imported before are
    updated in place, the others created together."""
    datasets = {name: published_dataset(name, results) for name in results.environments()}
    registry = _Registry()
    for batch in results.batches(resamples):
        setattr(report, batch.source, getattr(report, batch.source) + len(batch.keys))
        if _unchanged(batch.keys, batch.digest):
            continue
        rows = list(batch.rows())
        known = set(Submission.objects.filter(import_key__in=[r.key for r in rows])
                    .values_list("import_key", flat=True))
        fresh = [row for row in rows if row.key not in known]
        pairs = [(_update(row, datasets[row.environment], results.rules, registry), row)
                 for row in rows if row.key in known]
        pairs += zip(_create(fresh, datasets, results.rules, registry), fresh)
        for sub, row in pairs:
            if row.source == "rescored":
                _store_predictions(sub, row.predictions)
            report.results += len(row.results)


def import_results(*, resamples: int | None = None) -> ImportReport:
    """Import (or update) every result of every paper (:func:`qval.paper.papers`), in one transaction;
    ``resamples``: bootstrap resamples of the re-scored rows (default ``QVAL_BOOTSTRAP_RESAMPLES``)."""
    report = ImportReport()
    with transaction.atomic():
        for results in paper.papers().values():
            _import(results, report, settings.QVAL_BOOTSTRAP_RESAMPLES if resamples is None else resamples)
    return report

"""Board rows and their downloads (CSV, JSON), shared by the pages and the API: the columns come from the
metric registry; every CSV cell carrying user text goes through :func:`csv_cell`."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import threading
import time
import unicodedata
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.http import FileResponse, HttpResponse

from qval import metric_registry
from qval.metrics import significance_marks

from . import evaluations


NOT_REPORTED = "not reported"
"""What a reported row shows for a metric its authors did not report (the paper gives ρ alone)."""


@dataclass(frozen=True)
class BoardCell:
    """One metric column of a board row: the registry entry, the value, and the p-value and 95%
    interval where the column shows them (:attr:`qval.metric_registry.MetricSpec.board_p`,
    :attr:`~qval.metric_registry.MetricSpec.board_ci`)."""

    spec: metric_registry.MetricSpec
    value: float | None
    p_value: float | None = None
    ci: tuple[float, float] | None = None
    not_reported: bool = False
    """The row is a number the authors report and this metric is not among theirs (not a failed score)."""
    printed_marks: str = ""
    """The significance marks the paper prints beside a reported number (it gives no p-value)."""
    computed_marks: str = ""
    """An erratum's marks, computed from the authors' number and its point count (the paper's stand beside
    another number, :func:`qval.errata.computed_marks`)."""

    @property
    def marks(self) -> str:
        """The significance marks shown after the value: of the p-value where the column shows one, else those
        the paper prints, else an erratum's computed ones (same thresholds, :func:`qval.metrics.significance_marks`)."""
        if self.p_value is not None:
            return significance_marks(self.p_value)
        return self.printed_marks or self.computed_marks

    @property
    def marks_computed(self) -> bool:
        """Whether :attr:`marks` are an erratum's computed ones (a page says so)."""
        return self.p_value is None and not self.printed_marks and bool(self.computed_marks)

    @property
    def text(self) -> str:
        """The value with the metric's precision; without one, ``not reported`` (:attr:`not_reported`) or ``—``."""
        if self.value is None and self.not_reported:
            return NOT_REPORTED
        return self.spec.format(self.value)


@dataclass(frozen=True)
class BoardRow:
    """One leaderboard line: a finished submission with its source badge and the value of every
    board metric of :mod:`qval.metric_registry` (``scores``, by name).

    Each board metric ``m`` also reads as attributes, the fields of the API and the exports
    (:meth:`metric_fields`): ``row.m`` its value, ``row.m_p`` its p-value and ``row.m_ci`` its 95%
    interval where the board shows them, ``row.m_marks`` the significance marks of a point metric (of its
    p-value, or as the paper prints them beside a reported number), ``row.m_std`` the std over states of a
    ranking metric.
    """

    submission_id: int
    method: str
    family: str
    environment: str
    dataset: str
    split: str
    target: str
    modality: str
    backbone: str
    num_points: int
    submitted_by: str
    date: Any
    source: str = "user"
    rules: str = "qval"
    scores: Mapping[str, evaluations.Score] = field(default_factory=dict)

    def cells(self) -> list[BoardCell]:
        """The board metric columns, in registry order."""
        out = []
        for spec in metric_registry.METRICS:
            if not spec.board:
                continue
            score = self.scores.get(spec.name)
            ci = (score.ci_low, score.ci_high) if score and score.ci_low is not None and score.ci_high is not None else None
            value = score.value if score else None
            out.append(BoardCell(spec, value, score.p_value if score and spec.board_p else None,
                                 ci if spec.board_ci else None, not_reported=value is None and self.source == "reported",
                                 printed_marks=score.printed_marks if score else "",
                                 computed_marks=score.computed_marks if score else ""))
        return out

    def metric_fields(self) -> dict[str, Any]:
        """Every board metric's fields by name (see the class doc), in registry order."""
        fields: dict[str, Any] = {}
        for cell in self.cells():
            name = cell.spec.name
            fields[name] = cell.value
            if cell.spec.board_p:
                fields[f"{name}_p"] = cell.p_value
            if cell.spec.kind == "point":
                fields[f"{name}_marks"] = cell.marks
            if cell.spec.board_ci:
                fields[f"{name}_ci"] = cell.ci
            if cell.spec.kind == "ranking":
                score = self.scores.get(name)
                fields[f"{name}_std"] = score.std if score else None
        return fields

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "scores":  # not set yet (unpickling, copying): no metric lookup
            raise AttributeError(name)
        fields = self.metric_fields()
        if name not in fields:
            raise AttributeError(f"{type(self).__name__!r} has no attribute or board metric field {name!r}")
        return fields[name]

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API: the row's fields and every board metric's."""
        d = {k: v for k, v in vars(self).items() if k != "scores"}
        d["date"] = self.date.isoformat() if self.date else None
        for key, value in self.metric_fields().items():
            d[key] = list(value) if isinstance(value, tuple) else value
        return d


ROW_SORT_KEYS = frozenset({"num_points", "date", "method", "family"})
"""What a board sorts by besides its metric columns (:func:`sort_keys`)."""
FILTER_KEYS = evaluations.FILTER_KEYS


def sort_keys() -> frozenset[str]:
    """What a board sorts by: :data:`ROW_SORT_KEYS` and every board metric of the registry."""
    return ROW_SORT_KEYS | frozenset(metric_registry.BOARD)


def board_row(e: evaluations.Evaluation) -> BoardRow:
    """The leaderboard line of one evaluation: its board metrics' scores, and the points of the
    first of them it has (the global metrics' points, else the states of the ranking one)."""
    scores = {name: e.scores[name] for name in metric_registry.BOARD if name in e.scores}
    return BoardRow(
        submission_id=e.submission_id, method=e.method, family=e.family_name, environment=e.environment,
        dataset=e.dataset, split=e.split, target=e.target, modality=e.modality, backbone=e.backbone,
        num_points=next((score.num_points for score in scores.values()), 0),
        submitted_by=e.submitted_by, date=e.date, source=e.source, rules=e.rules, scores=scores,
    )


DEFAULT_SORT = f"-{metric_registry.HEADLINE}"
"""The board's order unless asked otherwise: the headline metric, best first."""


def leaderboard_rows(filters: dict[str, str], sort: str = DEFAULT_SORT, search: str = "") -> list[BoardRow]:
    """Finished submissions with their ρ, τ and ranking Spearman, filtered, searched and sorted.

    ``search`` keeps the rows whose method, backbone, dataset or submitter contains it
    (case-insensitive).  Rows without a value of the sort key come last.  The list is kept until
    the results version changes (:func:`leaderboard.evaluations.derived`): treat it as read-only.
    """
    key = ("board", tuple(sorted(filters.items())), sort, search)
    return evaluations.derived(key, lambda rows: _sorted_rows(evaluations.select(filters, rows), sort, search))


def canonical_sort(sort: str) -> str:
    """``sort`` as the board applies it: a key of :func:`sort_keys`, after one ``-`` when descending; any
    other value is the default, :data:`DEFAULT_SORT`."""
    key = sort.lstrip("-")
    if key not in sort_keys():
        return DEFAULT_SORT
    return f"-{key}" if sort.startswith("-") else key


def _sorted_rows(selected: list[evaluations.Evaluation], sort: str, search: str) -> list[BoardRow]:
    if search:
        needle = search.casefold()
        selected = [e for e in selected if any(needle in str(v).casefold()
                                               for v in (e.method, e.backbone, e.dataset, e.submitted_by, e.environment))]
    rows = [board_row(e) for e in selected]
    sort = canonical_sort(sort)
    key = sort.lstrip("-")
    descending = sort.startswith("-")
    present = [r for r in rows if getattr(r, key) is not None]
    missing = [r for r in rows if getattr(r, key) is None]
    present.sort(key=lambda r: getattr(r, key), reverse=descending)
    return present + missing


ROW_COLUMNS = ("submission_id", "method", "family", "environment", "dataset", "split", "target", "modality", "backbone")
"""The export's columns before the metrics; after them come :data:`TAIL_COLUMNS`."""
TAIL_COLUMNS = ("num_points", "source", "rules", "submitted_by", "date")


def board_columns() -> list[str]:
    """The CSV export's header: :data:`ROW_COLUMNS`, each board metric's fields from the registry
    (its value, ``_p``, ``_marks``, ``_ci_low``/``_ci_high``, ``_std`` where :meth:`BoardRow.metric_fields` has
    them), then :data:`TAIL_COLUMNS`."""
    metrics: list[str] = []
    for spec in metric_registry.METRICS:
        if spec.board:
            metrics.append(spec.name)
            metrics += [f"{spec.name}_p"] if spec.board_p else []
            metrics += [f"{spec.name}_marks"] if spec.kind == "point" else []
            metrics += [f"{spec.name}_ci_low", f"{spec.name}_ci_high"] if spec.board_ci else []
            metrics += [f"{spec.name}_std"] if spec.kind == "ranking" else []
    return [*ROW_COLUMNS, *metrics, *TAIL_COLUMNS]


FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
"""What a spreadsheet reads a text cell starting with as a formula (``=HYPERLINK(...)``, ``+1+cmd|...``)."""


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet opens as data: empty for ``None``; text that starts with one
    of :data:`FORMULA_PREFIXES` -- read in Unicode NFKC and after leading spaces, as spreadsheets take a
    full-width ``＝``, a small ``﹦`` or `` =`` for ``=`` -- gets a leading ``'`` (so it shows as text);
    numbers, negative ones included, stay numbers."""
    if value is None:
        return ""
    if isinstance(value, str):
        folded = unicodedata.normalize("NFKC", value)
        if folded.startswith(FORMULA_PREFIXES) or folded.lstrip().startswith(FORMULA_PREFIXES):
            return "'" + value
    return value


def csv_text(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """``rows`` as CSV under the header ``columns`` (other keys ignored), every cell through
    :func:`csv_cell`: the one writer of the CSV downloads that carry user text (board, figures)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_cell(row.get(c)) for c in columns])
    return out.getvalue()


BOARD_EXPORT_KEEP_S = 600
"""Seconds an export's file is kept after it was written (it is named by the results version, so never stale)."""


def exports_dir() -> Path:
    """Where the board's exports are kept, one file per view and format (a folder of ``QVAL_DOWNLOAD_CACHE``)."""
    return Path(settings.QVAL_DOWNLOAD_CACHE) / "board"


def board_export(rows: list[BoardRow], fmt: str, view: Hashable | None) -> HttpResponse:
    """A download of leaderboard rows: ``csv`` (:func:`board_columns`) or ``json`` (``{"rows": [...]}``).

    ``view`` names what ``rows`` are: the results version read before them, the filters and the
    :func:`canonical_sort` that chose them.  The body is written once under it, to a file every web process
    serves (sent by the server from the file: a request costs the same however many rows it holds); ``None``
    keeps nothing (a searched board: any text is a search, so its exports are not kept)."""
    content_type = "application/json" if fmt == "json" else "text/csv; charset=utf-8"
    name = f"qval-leaderboard.{fmt}"
    if view is None:
        response = HttpResponse(_export_body(rows, fmt), content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response
    path = exports_dir() / f"board-{hashlib.sha256(repr((view, fmt)).encode()).hexdigest()}.{fmt}"
    if not path.is_file():
        _keep(path, _export_body(rows, fmt))
    return FileResponse(path.open("rb"), as_attachment=True, filename=name, content_type=content_type)


def _keep(path: Path, body: bytes) -> None:
    """Write ``body`` to ``path`` whole (a reader sees the old file or the new one, never a part), and remove the
    exports written more than :data:`BOARD_EXPORT_KEEP_S` seconds ago."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_bytes(body)
    os.replace(tmp, path)
    old = time.time() - BOARD_EXPORT_KEEP_S
    for other in path.parent.glob("board-*"):
        try:
            if other.stat().st_mtime < old:
                other.unlink()
        except FileNotFoundError:  # another process removed it first
            pass


def _export_body(rows: list[BoardRow], fmt: str) -> bytes:
    if fmt == "json":
        data = {"rows": [r.as_dict() for r in rows]}
        return json.dumps(data, cls=DjangoJSONEncoder, ensure_ascii=False).encode()
    lines = []
    for r in rows:
        d = r.as_dict()
        for cell in r.cells():
            if cell.spec.board_ci:
                d[f"{cell.spec.name}_ci_low"], d[f"{cell.spec.name}_ci_high"] = cell.ci or (None, None)
        lines.append(d)
    return csv_text(board_columns(), lines).encode()

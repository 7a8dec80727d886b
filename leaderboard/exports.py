"""Dataset downloads and leaderboard rows, shared by the pages and the API."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import uuid
import zipfile
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from django.conf import settings
from django.core.cache import cache
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse

from qval import metric_registry, schema
from qval.schema import PUBLIC_SPLITS

from . import evaluations
from .models import Candidate, Dataset, Label

DOWNLOAD_FORMATS = {
    "jsonl": "application/x-ndjson",
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
}

SPLIT_FORMATS = {**DOWNLOAD_FORMATS, "images": "application/zip"}
"""Per-split downloads: the table in three formats, and a zip of the split's images."""

DATASET_FORMATS = {"card": "text/markdown; charset=utf-8", "zip": "application/zip"}
"""Whole-dataset downloads: the dataset card (README.md) and the Hugging Face style archive."""

DOWNLOAD_COLUMNS = [
    ("candidate_id", "Candidate id: the `id` of a target-q prediction row."),
    ("state_id", "State id: the `id` of a target-v prediction row."),
    ("split", "train, dev or test."),
    ("task", "Task / map / scene the trajectory solves; splits never share a task."),
    ("task_type", "Kind of task where the environment has several (ALFWorld's task type), else empty."),
    ("trajectory", "Trajectory number."),
    ("step", "Turn of the trajectory the state was sampled at."),
    ("observation", "Text observation of the state."),
    ("history", "JSON list of the actions taken before this state."),
    ("image", "Image file of the state (image datasets), else empty."),
    ("candidate_index", "Position of the candidate within its state."),
    ("action", "Candidate action text."),
    ("next_state", "Text observation after taking the candidate action."),
    ("next_image", "Image file after taking the candidate action (image datasets), else empty."),
    ("end_image", "Goal image: the final state of the reference rollout after the candidate (public splits of "
                  "datasets with goal images), else empty."),
    ("state_end_image", "Goal image of the state: the final state of the reference rollout from it (public "
                        "splits of datasets with goal images), else empty."),
    ("is_actor", "True for the action the collecting actor took (the pointwise evaluation point)."),
    ("q_label", "Reference Q of the candidate (public splits only)."),
    ("v_label", "Reference V of the state (public splits only)."),
]


def split_frame(dataset: Dataset, split: str) -> pd.DataFrame:
    """One row per candidate of ``split``; labels are added only for public splits."""
    rows = (
        Candidate.objects.filter(state__dataset=dataset, state__split=split)
        .order_by("state__position", "index")
        .values_list(
            "external_id",
            "state__external_id",
            "state__split",
            "state__task",
            "state__task_type",
            "state__trajectory",
            "state__step",
            "state__observation",
            "state__history",
            "state__image",
            "index",
            "action",
            "next_state",
            "next_image",
            "end_image",
            "state__end_image",
            "is_actor",
        )
    )
    names = [c for c, _ in DOWNLOAD_COLUMNS if not c.endswith("_label")]
    frame = pd.DataFrame.from_records(list(rows), columns=names)
    frame["history"] = frame["history"].map(json.dumps)
    frame["image"] = frame["image"].fillna("")
    frame["task_type"] = frame["task_type"].fillna("")
    frame["next_image"] = frame["next_image"].fillna("")
    for column in ("end_image", "state_end_image"):  # goal images leave the platform on public splits only
        frame[column] = frame[column].fillna("") if schema.goal_images_public(split) else ""
    if split in PUBLIC_SPLITS:
        labels = Label.objects.filter(labelset__dataset=dataset, split=split)
        q = dict(labels.filter(target="q").values_list("item_id", "value"))
        v = dict(labels.filter(target="v").values_list("item_id", "value"))
        frame["q_label"] = frame["candidate_id"].map(q)
        frame["v_label"] = frame["state_id"].map(v)
    return frame


def render_download(frame: pd.DataFrame, fmt: str) -> bytes:
    """Serialise a split frame as JSON Lines, CSV or Parquet."""
    if fmt == "csv":
        return frame.to_csv(index=False).encode("utf-8")
    if fmt == "jsonl":
        return frame.to_json(orient="records", lines=True, force_ascii=False).encode("utf-8")
    if fmt == "parquet":
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buf)
        return buf.getvalue()
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(DOWNLOAD_FORMATS)}")


# -- image, card and whole-dataset downloads (qval.export), cached on disk by fingerprint ------------
def dataset_dir(dataset: Dataset) -> Path:
    """The loaded dataset's files (``images/`` among them) under ``QVAL_DATASETS_DIR``."""
    return Path(settings.QVAL_DATASETS_DIR) / f"{dataset.slug}-{dataset.version}"


def images_dir(dataset: Dataset) -> Path | None:
    """The dataset's image folder, or ``None`` when it has none."""
    folder = dataset_dir(dataset) / "images"
    return folder if folder.is_dir() else None


def has_images(dataset: Dataset, split: str | None = None) -> bool:
    """Whether the dataset's states (of ``split``) or their candidates name an image."""
    from .models import State

    states = State.objects.filter(dataset=dataset, **({"split": split} if split else {}))
    return (states.exclude(image__isnull=True).exclude(image="").exists()
            or Candidate.objects.filter(state__in=states).exclude(next_image__isnull=True)
            .exclude(next_image="").exists())


def public_dataset(dataset: Dataset) -> schema.Dataset:
    """Every split's inputs from the database with the labels of public splits only: a hidden
    split's labels are NaN, so nothing built from this can carry them.  Images read from disk."""
    from .loading import inputs_for

    splits = [s for s in schema.SPLITS if dataset.states.filter(split=s).exists()]
    parts = [inputs_for(dataset, s) for s in splits]
    states = [st for part in parts for st in part.states]
    manifest = parts[0].manifest if parts else None
    public = Label.objects.filter(labelset__dataset=dataset, split__in=sorted(PUBLIC_SPLITS))
    q = dict(public.filter(target="q").values_list("item_id", "value"))
    v = dict(public.filter(target="v").values_list("item_id", "value"))
    nan = float("nan")
    q_labels = {c.id: (q[c.id] if st.split in PUBLIC_SPLITS else nan) for st in states for c in st.candidates}
    v_labels = {st.id: (v[st.id] if st.split in PUBLIC_SPLITS else nan) for st in states}
    if manifest is None:
        raise ValueError(f"dataset {dataset.key} has no states")
    folder = images_dir(dataset)
    manifest.fingerprint = dataset.fingerprint
    return schema.Dataset(manifest=manifest, states=states, q_labels=q_labels, v_labels=v_labels,
                          images=schema.ImageFolder(folder) if folder else {})


def cache_dir(dataset: Dataset) -> Path:
    """Where the built archives of this dataset content live (``QVAL_DOWNLOAD_CACHE/<fingerprint>``)."""
    return Path(settings.QVAL_DOWNLOAD_CACHE) / dataset.fingerprint


def _cached(path: Path, make: Callable[[Path], None]) -> Path:
    """``path``, made by ``make(tmp)`` then renamed into place when it is not there yet."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        make(tmp)
        try:
            os.replace(tmp, path)
        except OSError:
            if not path.exists():  # a directory another process renamed first is fine
                raise
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()
    return path


def export_dir(dataset: Dataset) -> Path:
    """The dataset exported by :func:`qval.export.export_dataset` (public labels only), cached."""
    from qval import export as qexport

    def make(tmp: Path) -> None:
        qexport.export_dataset(public_dataset(dataset), tmp, public_splits=PUBLIC_SPLITS,
                               images_from=images_dir(dataset))

    return _cached(cache_dir(dataset) / "export", make)


def dataset_card(dataset: Dataset) -> str:
    """The dataset card (README.md: YAML front matter and Markdown) of :func:`qval.export.dataset_card`."""
    from qval import export as qexport

    def make(tmp: Path) -> None:
        tmp.write_text(qexport.dataset_card(public_dataset(dataset), PUBLIC_SPLITS), encoding="utf-8")

    return _cached(cache_dir(dataset) / "README.md", make).read_text(encoding="utf-8")


def card_body(card: str) -> str:
    """The Markdown of a card without its YAML front matter."""
    if card.startswith("---"):
        end = card.find("\n---", 3)
        if end != -1:
            return card[end + 4:].lstrip("\n")
    return card


def whole_zip(dataset: Dataset) -> Path:
    """The whole exported dataset as one zip (``<slug>-<version>/…``), cached."""
    root = export_dir(dataset)

    def make(tmp: Path) -> None:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                rel = path.relative_to(root).as_posix()
                kind = zipfile.ZIP_STORED if path.suffix in {".zip", ".parquet", ".png"} else zipfile.ZIP_DEFLATED
                zf.write(path, f"{dataset.slug}-{dataset.version}/{rel}", compress_type=kind)

    return _cached(cache_dir(dataset) / f"{dataset.slug}-{dataset.version}.zip", make)


def split_images_zip(dataset: Dataset, split: str) -> Path | None:
    """The zip of one split's images (``images/<split>.zip`` of the export), or ``None`` without images."""
    if not has_images(dataset, split):
        return None
    path = export_dir(dataset) / "images" / f"{split}.zip"
    return path if path.exists() else None


@dataclass(frozen=True)
class BoardCell:
    """One metric column of a board row: the registry entry, the value, and the p-value and 95%
    interval where the column shows them (:attr:`qval.metric_registry.MetricSpec.board_p`,
    :attr:`~qval.metric_registry.MetricSpec.board_ci`)."""

    spec: metric_registry.MetricSpec
    value: float | None
    p_value: float | None = None
    ci: tuple[float, float] | None = None

    @property
    def text(self) -> str:
        """The value with the metric's precision, ``None`` as ``—``."""
        return self.spec.format(self.value)


@dataclass(frozen=True)
class BoardRow:
    """One leaderboard line: a finished submission with its source badge and the value of every
    board metric of :mod:`qval.metric_registry` (``scores``, by name).

    Each board metric ``m`` also reads as attributes, the fields of the API and the exports
    (:meth:`metric_fields`): ``row.m`` its value, ``row.m_p`` its p-value and ``row.m_ci`` its 95%
    interval where the board shows them, ``row.m_std`` the std over states of a ranking metric.
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
            out.append(BoardCell(spec, score.value if score else None,
                                 score.p_value if score and spec.board_p else None, ci if spec.board_ci else None))
        return out

    def metric_fields(self) -> dict[str, Any]:
        """Every board metric's fields by name (see the class doc), in registry order."""
        fields: dict[str, Any] = {}
        for cell in self.cells():
            name = cell.spec.name
            fields[name] = cell.value
            if cell.spec.board_p:
                fields[f"{name}_p"] = cell.p_value
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


def leaderboard_rows(filters: dict[str, str], sort: str = "-spearman", search: str = "") -> list[BoardRow]:
    """Finished submissions with their ρ, τ and ranking Spearman, filtered, searched and sorted.

    ``search`` keeps the rows whose method, backbone, dataset or submitter contains it
    (case-insensitive).  Rows without a value of the sort key come last.  The list is kept until
    the results version changes (:func:`leaderboard.evaluations.derived`): treat it as read-only.
    """
    key = ("board", tuple(sorted(filters.items())), sort, search)
    return evaluations.derived(key, lambda rows: _sorted_rows(evaluations.select(filters, rows), sort, search))


def canonical_sort(sort: str) -> str:
    """``sort`` as the board applies it: a key of :func:`sort_keys`, after one ``-`` when descending; any
    other value is the default, ``-spearman``."""
    key = sort.lstrip("-")
    if key not in sort_keys():
        return "-spearman"
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
    (its value, ``_p``, ``_ci_low``/``_ci_high``, ``_std`` where :meth:`BoardRow.metric_fields` has
    them), then :data:`TAIL_COLUMNS`."""
    metrics: list[str] = []
    for spec in metric_registry.METRICS:
        if spec.board:
            metrics.append(spec.name)
            metrics += [f"{spec.name}_p"] if spec.board_p else []
            metrics += [f"{spec.name}_ci_low", f"{spec.name}_ci_high"] if spec.board_ci else []
            metrics += [f"{spec.name}_std"] if spec.kind == "ranking" else []
    return [*ROW_COLUMNS, *metrics, *TAIL_COLUMNS]


FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
"""What a spreadsheet reads a text cell starting with as a formula (``=HYPERLINK(...)``, ``+1+cmd|...``)."""


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet opens as data: empty for ``None``; text that starts with one
    of :data:`FORMULA_PREFIXES` gets a leading ``'`` (so it shows as text); numbers, negative ones
    included, stay numbers."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
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


BOARD_EXPORT_CACHE_S = 600
"""Seconds an export's body stays in the shared cache (it is keyed by the results version, so never stale)."""


def board_export(rows: list[BoardRow], fmt: str, view: Hashable | None) -> HttpResponse:
    """A download of leaderboard rows: ``csv`` (:func:`board_columns`) or ``json`` (``{"rows": [...]}``).

    ``view`` names what ``rows`` are: the results version read before them, the filters and the
    :func:`canonical_sort` that chose them.  The body is kept under it in the shared cache (Django's, every
    web process's); ``None`` keeps nothing (a searched board: any text is a search, so its exports are
    not kept)."""
    key = None if view is None else "board-export:" + hashlib.sha256(repr((view, fmt)).encode()).hexdigest()
    body = None if key is None else cache.get(key)
    if body is None:
        body = _export_body(rows, fmt)
        if key is not None:
            cache.set(key, body, BOARD_EXPORT_CACHE_S)
    content_type = "application/json" if fmt == "json" else "text/csv; charset=utf-8"
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="qval-leaderboard.{fmt}"'
    return response


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

"""Dataset downloads (inputs, images, public labels, the card), shared by the pages and the API."""

from __future__ import annotations

import io
import json
import os
import shutil
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from django.conf import settings
from django.http import FileResponse, HttpResponse

from qval import schema
from qval.schema import PUBLIC_SPLITS

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
    ("task_type", "Kind of task where the environment has several (ALFWorld's task type, TerminalBench-lite's task kind), else empty."),
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


def _bad_request(message: str) -> HttpResponse:
    return HttpResponse(message + "\n", status=400, content_type="text/plain")


def download_response(ds: Dataset, split: str, fmt: str) -> HttpResponse:
    """The HTTP response of a dataset download, with a clear 400 for bad arguments.

    Per split (``split``): ``jsonl``, ``csv``, ``parquet`` and ``images`` (a zip); for the whole
    dataset (``split`` ignored): ``card`` (README.md) and ``zip`` (the Hugging Face layout of
    :func:`qval.export.export_dataset`).  Labels only ever for public splits.
    """
    name = f"{ds.slug}-{ds.version}"
    if fmt in DATASET_FORMATS:
        if fmt == "card":
            resp = HttpResponse(dataset_card(ds), content_type=DATASET_FORMATS[fmt])
            resp["Content-Disposition"] = f'attachment; filename="{name}-README.md"'
            return resp
        return FileResponse(whole_zip(ds).open("rb"), as_attachment=True, filename=f"{name}.zip",
                            content_type=DATASET_FORMATS[fmt])
    if fmt not in SPLIT_FORMATS:
        return _bad_request(f"unknown format {fmt!r}; choose one of {', '.join([*SPLIT_FORMATS, *DATASET_FORMATS])}")
    if not ds.states.filter(split=split).exists():
        splits = sorted(set(ds.states.values_list("split", flat=True)))
        return _bad_request(f"dataset {ds.key} has no split {split!r}; choose one of {splits}")
    if fmt == "images":
        path = split_images_zip(ds, split)
        if path is None:
            return _bad_request(f"split {split!r} of dataset {ds.key} has no images")
        return FileResponse(path.open("rb"), as_attachment=True, filename=f"{name}-{split}-images.zip",
                            content_type=SPLIT_FORMATS[fmt])
    body = render_download(split_frame(ds, split), fmt)
    resp = HttpResponse(body, content_type=DOWNLOAD_FORMATS[fmt])
    resp["Content-Disposition"] = f'attachment; filename="{name}-{split}.{fmt}"'
    return resp

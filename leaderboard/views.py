"""The catalogue's pages: the datasets, one dataset (or the page of an authors' dataset not hosted here), its
images and its downloads. A method's and an environment's pages show the results and their figures, so they are
:mod:`board.views`' (which sits above this app)."""

from __future__ import annotations

import functools
import json
import re

from django.db.models import Count
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from qval import consistency as qconsistency
from qval.paper.qval_v1 import published
from qval.schema import PUBLIC_SPLITS

from . import exports as downloads
from . import charts, markdown
from .exports import DOWNLOAD_COLUMNS, DOWNLOAD_FORMATS, download_response
from .models import Candidate, Dataset, Label, State
from .published import errata_context, published_numbers_context
from .task_table import task_table


def dataset_list(request: HttpRequest) -> HttpResponse:
    """All dataset versions (their builds are on the status page, :mod:`workers.selectors`)."""
    return render(request, "leaderboard/datasets.html", {"datasets": Dataset.objects.select_related("environment")})


def _dataset_by_key(key: str) -> Dataset:
    ds = Dataset.lookup(key)
    if ds is None:
        raise Http404(f"no dataset {key}")
    return ds


def _split_counts(ds: Dataset) -> list[dict[str, object]]:
    """Per split: states, candidates and the evaluation points of each target."""
    states: dict[str, int] = {}
    cands: dict[str, int] = {}
    ranked: dict[str, int] = {}
    for split, k in ds.states.order_by().annotate(k=Count("candidates")).values_list("split", "k"):
        states[split] = states.get(split, 0) + 1
        cands[split] = cands.get(split, 0) + k
        ranked[split] = ranked.get(split, 0) + (k >= 2)
    return [
        {"split": split, "states": states[split], "candidates": cands.get(split, 0), "q_points": states[split],
         "ranking_states": ranked.get(split, 0), "v_points": states[split], "public": split in PUBLIC_SPLITS,
         "images": downloads.has_images(ds, split)}
        for split in ("train", "dev", "test") if states.get(split)
    ]


def _public_label_values(ds: Dataset) -> dict[str, dict[str, list[float]]]:
    """Labels of the public splits only, by target and split (for the histograms)."""
    out: dict[str, dict[str, list[float]]] = {"q": {}, "v": {}}
    rows = Label.objects.filter(labelset__dataset=ds, split__in=sorted(PUBLIC_SPLITS)).order_by("split")
    for split, target, value in rows.values_list("split", "target", "value"):
        assert split in PUBLIC_SPLITS
        out[target].setdefault(split, []).append(value)
    return out


def provenance_rows(config: object, prefix: str = "") -> list[tuple[str, str]]:
    """A dataset's build configuration (``manifest["config"]``) as ``(setting, value)`` rows: nested
    settings flattened to dotted names (``collection.seed``), lists of plain values joined by commas,
    anything else printed as JSON."""
    if isinstance(config, dict) and config:
        rows: list[tuple[str, str]] = []
        for key, value in config.items():
            rows += provenance_rows(value, f"{prefix}.{key}" if prefix else str(key))
        return rows
    if not prefix:
        return []
    if isinstance(config, str):
        return [(prefix, config)]
    if isinstance(config, list) and all(isinstance(v, (str, int, float, bool)) for v in config):
        return [(prefix, ", ".join(json.dumps(v) if not isinstance(v, str) else v for v in config))]
    return [(prefix, json.dumps(config))]


def dataset_detail(request: HttpRequest, key: str) -> HttpResponse:
    """Description, provenance, schema, counts, label histograms (public splits), the per-task table
    (:func:`leaderboard.task_table.task_table`: counts per task and group, an example per public task),
    dataset card and download links of one dataset."""
    ds = _dataset_by_key(key)
    if not ds.hosted:
        return _published_dataset_detail(request, ds)
    counts = _split_counts(ds)
    try:
        card = markdown.render(downloads.card_body(downloads.dataset_card(ds)))
    except ImportError:  # qval.export not available
        card = ""
    return render(
        request,
        "leaderboard/dataset.html",
        {
            "ds": ds,
            "open_book": [ds.environment] if ds.environment.open_book else [],
            "counts": counts,
            "tasks": task_table(ds),
            "histograms": charts.label_histograms(_public_label_values(ds)),
            "has_images": any(c["images"] for c in counts),
            "card": card,
            "provenance": provenance_rows(ds.manifest.get("config", {})),
            "labelset": getattr(ds, "labelset", None),
            "columns": DOWNLOAD_COLUMNS,
            "formats": list(DOWNLOAD_FORMATS),
        },
    )


def _published_dataset_detail(request: HttpRequest, ds: Dataset) -> HttpResponse:
    """The page of an authors' dataset whose results we import but whose inputs we do not host:
    the paper's summary of the environment, what is and is not here, and the imported rows (counted by source
    once per results version, by the template tag ``rows_by_source`` of the boards)."""
    summary = (ds.submissions.filter(source="rescored").order_by("pk")
               .values_list("provenance__file", flat=True).first())
    return render(request, "leaderboard/published_dataset.html", {
        "ds": ds, **_paper_context(ds.environment.slug),
        "label_source": qconsistency.label_sources()[1].get(summary or ""),
    })


@functools.cache
def _paper_context(environment: str) -> dict[str, object]:
    """What an authors' dataset's page shows of the paper for ``environment`` (a slug): read from the paper's data
    files, which ship with the code, once per process (parsing them cost the page several milliseconds)."""
    provenance, environments = published.paper_environments()
    paper = next((e for e in environments.values() if published.ENVIRONMENTS[e.name] == environment), None)
    return {
        "paper": paper, "provenance": provenance,
        "reference": {"repository": published.REFERENCE_REPOSITORY, "commit": published.REFERENCE_COMMIT},
        "website": {"repository": published.SITE_REPOSITORY, "commit": published.SITE_COMMIT},
        "publication": published.paper(), **errata_context(paper.name if paper else None),
        **published_numbers_context(),
    }


IMAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}\.(png|jpg|jpeg|webp)")
IMAGE_TYPES = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "webp": "image/webp"}


def dataset_image(request: HttpRequest, key: str, name: str) -> FileResponse:
    """An image file the dataset names: state image or candidate next image (test inputs included),
    or a goal image of a public split (never one of a hidden split: :func:`qval.schema.goal_images_public`)."""
    ds = _dataset_by_key(key)
    match = IMAGE_NAME.fullmatch(name)
    if match is None or ".." in name:
        raise Http404("no such image")
    public = sorted(PUBLIC_SPLITS)
    named = (State.objects.filter(dataset=ds, image=name).exists()
             or Candidate.objects.filter(state__dataset=ds, next_image=name).exists()
             or State.objects.filter(dataset=ds, split__in=public, end_image=name).exists()
             or Candidate.objects.filter(state__dataset=ds, state__split__in=public, end_image=name).exists())
    folder = downloads.images_dir(ds)
    if not named or folder is None or not (folder / name).is_file():
        raise Http404("no such image")
    resp = FileResponse((folder / name).open("rb"), content_type=IMAGE_TYPES[match.group(1).lower()])
    resp["Cache-Control"] = "public, max-age=86400"  # a dataset version never changes
    return resp


def dataset_download(request: HttpRequest, key: str) -> HttpResponse:
    """Download a split as jsonl, csv or parquet (labels only for public splits)."""
    ds = _dataset_by_key(key)
    split = request.GET.get("split", "dev")
    fmt = request.GET.get("format", "jsonl")
    return download_response(ds, split, fmt)

"""Public pages: home, leaderboard, datasets and their downloads."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from qval import metrics
from qval.schema import PUBLIC_SPLITS

from . import aggregates, charts
from .exports import DOWNLOAD_COLUMNS, DOWNLOAD_FORMATS, FILTER_KEYS, leaderboard_rows, render_download, split_frame
from .models import Dataset, Environment, Method


def home(request: HttpRequest) -> HttpResponse:
    """What QVal measures, and where to start."""
    return render(request, "home.html", {"datasets": Dataset.objects.select_related("environment")})


def how_we_score(request: HttpRequest) -> HttpResponse:
    """The scoring rules, and where they differ from the QVal v1.0 reference implementation."""
    return render(
        request,
        "leaderboard/scoring.html",
        {"min_points": metrics.MIN_USABLE_POINTS, "resamples": settings.QVAL_BOOTSTRAP_RESAMPLES},
    )


def board(request: HttpRequest) -> HttpResponse:
    """The leaderboard table, sortable and filterable through query parameters."""
    filters = {k: request.GET.get(k, "") for k in FILTER_KEYS}
    sort = request.GET.get("sort", "-spearman")
    options = {
        "environment": list(Environment.objects.values_list("slug", "name")),
        "dataset": [(d.key, d.key) for d in Dataset.objects.all()],
        "split": [("dev", "dev"), ("test", "test")],
        "target": [("q", "Q"), ("v", "V")],
        "modality": [("text", "text"), ("image", "image")],
        "family": Method.FAMILIES,
    }
    return render(
        request,
        "leaderboard/board.html",
        {"rows": leaderboard_rows(filters, sort), "filters": filters, "sort": sort, "options": options},
    )


def _selection_context(request: HttpRequest) -> tuple[aggregates.Selection | None, dict[str, object]]:
    """The aggregate pages' selection (or the error) and the choices of their form."""
    context: dict[str, object] = {
        "choices": {"split": aggregates.SPLITS, "target": aggregates.TARGETS, "metric": list(aggregates.METRICS)},
        "values": {k: request.GET.get(k, "") for k in ("split", "target", "metric")},
    }
    try:
        selection = aggregates.read_selection(request.GET)
    except aggregates.InvalidSelection as exc:
        context["error"] = exc.message
        return None, context
    context.update(selection=selection, values=vars(selection))
    return selection, context


def aggregate(request: HttpRequest) -> HttpResponse:
    """Per method and environment the mean over backbones with a 95% CI; per family the
    distribution over evaluations (``?split=&target=&metric=``)."""
    selection, context = _selection_context(request)
    if selection is None:
        return render(request, "leaderboard/aggregate.html", context, status=400)
    entries = aggregates.best_rows(selection)
    families = aggregates.family_distributions(entries)
    context.update(
        means=aggregates.method_means(entries),
        families=families,
        family_plot=charts.family_plot(families, selection.metric_label) if families else "",
    )
    return render(request, "leaderboard/aggregate.html", context)


def critical_difference(request: HttpRequest) -> HttpResponse:
    """Friedman test, average ranks and the Nemenyi critical-difference diagram of the
    methods over the evaluations (``?split=&target=&metric=``)."""
    selection, context = _selection_context(request)
    if selection is None:
        return render(request, "leaderboard/critical_difference.html", context, status=400)
    table = aggregates.critical_difference(aggregates.best_rows(selection))
    context.update(
        table=table,
        diagram=charts.critical_difference_diagram(table.result) if table.result else "",
    )
    return render(request, "leaderboard/critical_difference.html", context)


def dataset_list(request: HttpRequest) -> HttpResponse:
    """All dataset versions."""
    return render(request, "leaderboard/datasets.html", {"datasets": Dataset.objects.select_related("environment")})


def _dataset_by_key(key: str) -> Dataset:
    ds = Dataset.lookup(key)
    if ds is None:
        raise Http404(f"no dataset {key}")
    return ds


def dataset_detail(request: HttpRequest, key: str) -> HttpResponse:
    """Description, provenance, schema, counts and download links of one dataset."""
    ds = _dataset_by_key(key)
    counts = []
    for split in ("train", "dev", "test"):
        states = ds.states.filter(split=split)
        n = states.count()
        if n:
            counts.append({"split": split, "states": n, "public": split in PUBLIC_SPLITS,
                           "candidates": sum(len(s.candidates.all()) for s in states.prefetch_related("candidates"))})
    example = ds.states.filter(split="dev").prefetch_related("candidates").first()
    labelset = getattr(ds, "labelset", None)
    return render(
        request,
        "leaderboard/dataset.html",
        {
            "ds": ds,
            "counts": counts,
            "example": example,
            "labelset": labelset,
            "columns": DOWNLOAD_COLUMNS,
            "formats": list(DOWNLOAD_FORMATS),
        },
    )


def dataset_download(request: HttpRequest, key: str) -> HttpResponse:
    """Download a split as jsonl, csv or parquet (labels only for public splits)."""
    ds = _dataset_by_key(key)
    split = request.GET.get("split", "dev")
    fmt = request.GET.get("format", "jsonl")
    return download_response(ds, split, fmt)


def download_response(ds: Dataset, split: str, fmt: str) -> HttpResponse:
    """The HTTP response of a dataset download, with a clear 400 for bad arguments."""
    if fmt not in DOWNLOAD_FORMATS:
        return HttpResponse(f"unknown format {fmt!r}; choose one of {', '.join(DOWNLOAD_FORMATS)}\n",
                            status=400, content_type="text/plain")
    if not ds.states.filter(split=split).exists():
        splits = sorted(set(ds.states.values_list("split", flat=True)))
        return HttpResponse(f"dataset {ds.key} has no split {split!r}; choose one of {splits}\n",
                            status=400, content_type="text/plain")
    body = render_download(split_frame(ds, split), fmt)
    resp = HttpResponse(body, content_type=DOWNLOAD_FORMATS[fmt])
    resp["Content-Disposition"] = f'attachment; filename="{ds.slug}-{ds.version}-{split}.{fmt}"'
    return resp

"""The paper's figures as live Plotly figures over the evaluations (:mod:`board.evaluations`).

Each figure is a :class:`Figure`: the table of numbers behind it (``rows``, what the
*download the data* links and the figure API return) and the Plotly ``traces``/``layout``
built from exactly those rows.  Traces carry ``meta.kind``: ``points`` (one marker per
row), ``means`` (summaries of the points) or ``guide`` (the diagonal), so a reader can
count what is drawn.  Figures are plain dicts (no ``plotly.graph_objects`` validation), so
building one is cheap.  Colours are the reference's family colours (:mod:`qval.families`).
Plotly draws a subset of HTML in tick labels, legend names and hover text, so every name a user
chose (method, backbone) goes into a trace through :func:`leaderboard.charts.plain`; the ``rows``
keep the names as they are.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from leaderboard.charts import plain
from qval import compare, families, metric_registry
from qval.schema import PUBLIC_SPLITS
from qval.scoring import printed_digits

from . import boards
from .aggregates import InvalidSelection
from .evaluations import FILTER_KEYS, Evaluation, best, derived, select
from .exports import csv_text

SPLITS = ("dev", "test")
TARGETS = ("q", "v")
MODALITIES = ("text", "image")
HEATMAP_BY = ("environment", "backbone")


@dataclass(frozen=True)
class Filters:
    """The state of a figure page's filters (every one is a query parameter)."""

    environment: str = ""
    dataset: str = ""
    split: str = "test"
    target: str = ""
    modality: str = ""
    family: str = ""
    backbone: str = ""
    source: str = boards.DEFAULT_VIEW
    method: str = ""
    metric: str = metric_registry.HEADLINE
    by: str = "environment"

    def evaluation_filters(self) -> dict[str, str]:
        """The filters :func:`board.evaluations.select` applies (all but the source, which
        :func:`board.boards.of_source` does: see :meth:`select`)."""
        return {key: getattr(self, key) for key in FILTER_KEYS if key != "source"}

    def select(self, rows: Sequence[Evaluation]) -> list[Evaluation]:
        """The evaluations of ``rows`` these filters keep: :meth:`evaluation_filters`, then one source
        (:data:`board.boards.VIEWS`; all of them only for ``any``)."""
        return boards.of_source(select(self.evaluation_filters(), rows), self.source)

    @property
    def source_caption(self) -> str:
        """Which rows a figure of these filters shows, in words (a figure page says it above the figure)."""
        return boards.view_caption(self.source)

    def query(self) -> dict[str, str]:
        """The non-default filters, for a permalink."""
        default = Filters()
        return {k: v for k, v in vars(self).items() if v != getattr(default, k)}


def read_filters(params: Mapping[str, str], **fixed: str) -> Filters:
    """The :class:`Filters` of query parameters (``fixed`` ones override them, e.g. the
    method of a method page); a value outside its choices raises :class:`~board.aggregates.InvalidSelection`."""
    default = Filters()
    values = {key: (params.get(key) or getattr(default, key)) for key in vars(default)}
    values.update({k: v for k, v in fixed.items() if v})
    allowed: dict[str, Sequence[str]] = {
        "split": ("", *SPLITS), "target": ("", *TARGETS), "modality": ("", *MODALITIES),
        "source": tuple(boards.VIEWS), "metric": metric_registry.COMPARABLE, "by": HEATMAP_BY,
        "family": ("", *(slug for slug, _ in families.CHOICES)),
    }
    if values["split"] == "all":
        values["split"] = ""
    for key, choices in allowed.items():
        if values[key] not in choices:
            shown = ", ".join(c or "(any)" for c in choices)
            raise InvalidSelection(key, f"unknown {key} {values[key]!r}; choose one of {shown}")
    return Filters(**values)


@dataclass
class Figure:
    """One figure: the rows behind it, and its Plotly traces and layout."""

    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    traces: list[dict[str, Any]] = field(default_factory=list)
    layout: dict[str, Any] = field(default_factory=dict)

    def plotly(self) -> dict[str, Any]:
        """``{"data": traces, "layout": layout}`` for ``Plotly.newPlot``."""
        return {"data": self.traces, "layout": self.layout}

    @cached_property
    def plotly_bytes(self) -> bytes:
        """:meth:`plotly` as UTF-8 JSON, serialised once per figure: what a figure page fetches
        (``?format=plotly``), so the page itself stays small however many points the figure has."""
        return json.dumps(self.plotly(), ensure_ascii=False, separators=(",", ":")).encode()


def _order(rows: Sequence[Evaluation]) -> list[str]:
    """Methods ordered by family (the reference's order) then name."""
    rank = {f.slug: i for i, f in enumerate(families.ALL)}
    family_of = {e.method: e.family for e in rows}
    return sorted(family_of, key=lambda m: (rank.get(family_of[m], 99), m))


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    layout = {"title": {"text": title}, "template": "plotly_white", "height": 480,
              "margin": {"l": 60, "r": 20, "t": 50, "b": 120}, "hovermode": "closest"}
    layout.update(extra)
    return layout


def _label(metric: str) -> str:
    return metric_registry.get(metric).label


def _hover(e: Evaluation, value: float) -> str:
    digits = printed_digits(e.split not in PUBLIC_SPLITS)  # a hidden split's values were disclosed rounded
    return (f"{plain(e.method)} ({e.family_name})<br>{plain(e.environment)} · {plain(e.backbone or 'no backbone')}<br>"
            f"target {e.target.upper()} · {e.modality} · {e.source}<br>value {value:.{digits}f} · #{e.submission_id}")


def per_family(rows: Sequence[Evaluation], f: Filters) -> Figure:
    """Paper Fig. 2: every evaluation as a point, methods grouped and coloured by family, a
    bar at each method's mean; the global metric and the state-local ranking ρ side by side."""
    global_metric = f.metric if f.metric != metric_registry.LOCAL_HEADLINE else metric_registry.HEADLINE
    panels = [(global_metric, "x", "y"), (metric_registry.LOCAL_HEADLINE, "x2", "y2")]
    fig = Figure("per-family", "Per family", ["submission_id", "method", "family", "environment", "backbone",
                                               "target", "modality", "source", "metric", "value"])
    shown: set[str] = set()
    for metric, xaxis, yaxis in panels:
        chosen = best(rows, metric)
        order = _order(chosen)
        for family in families.ALL:
            mine = [e for e in chosen if e.family == family.slug]
            if not mine:
                continue
            position = {m: i for i, m in enumerate(order)}
            points = [(e, e.value(metric)) for e in sorted(mine, key=lambda e: position[e.method])]
            for e, v in points:
                fig.rows.append({"submission_id": e.submission_id, "method": e.method, "family": family.name,
                                 "environment": e.environment, "backbone": e.backbone, "target": e.target,
                                 "modality": e.modality, "source": e.source, "metric": metric, "value": v})
            sums: dict[str, list[float]] = {}
            for e, v in points:
                sums.setdefault(e.method, []).append(v)
            methods = list(sums)
            means = [sum(sums[m]) / len(sums[m]) for m in methods]
            common = {"xaxis": xaxis, "yaxis": yaxis, "legendgroup": family.slug, "marker": {"color": family.colour}}
            fig.traces.append({"type": "bar", "x": [plain(m) for m in methods], "y": means, "name": f"{family.name} mean",
                               "opacity": 0.35, "showlegend": False, "meta": {"kind": "means", "metric": metric},
                               "hovertemplate": "%{x}: mean %{y:.4f}<extra></extra>", **common})
            fig.traces.append({"type": "scatter", "mode": "markers", "x": [plain(e.method) for e, _ in points],
                               "y": [v for _, v in points], "name": family.name,
                               "showlegend": family.slug not in shown, "text": [_hover(e, v) for e, v in points],
                               "hovertemplate": "%{text}<extra></extra>", "meta": {"kind": "points", "metric": metric},
                               **common})
            shown.add(family.slug)
    fig.layout = _layout(
        "Per family", barmode="overlay", grid={"rows": 1, "columns": 2, "pattern": "independent"},
        xaxis={"domain": [0, 0.48], "title": {"text": _label(global_metric)}, "tickangle": -45},
        xaxis2={"domain": [0.52, 1], "title": {"text": _label(metric_registry.LOCAL_HEADLINE)}, "tickangle": -45},
        yaxis={"range": [-1, 1], "title": {"text": _label(global_metric)}},
        yaxis2={"range": [-1, 1], "anchor": "x2", "title": {"text": _label(metric_registry.LOCAL_HEADLINE)}},
    )
    return fig


def fisher_mean_ci(values: Sequence[float | None], level: float = 0.95) -> compare.MeanInterval:
    """The mean of correlations with a 95% interval that stays in [-1, 1]: :func:`qval.compare.mean_ci`'s
    Student-t half-width taken on Fisher's z at the mean (the delta method, ``se_z = se / (1 - mean^2)``)
    and mapped back with tanh."""
    iv = compare.mean_ci(values, level)
    if iv.mean is None or iv.low is None or iv.high is None:
        return iv
    edge = 1.0 - 1e-12
    r = min(edge, max(-edge, iv.mean))
    half = (iv.high - iv.mean) / (1.0 - r * r)
    return compare.MeanInterval(iv.n, iv.mean, iv.std, math.tanh(math.atanh(r) - half), math.tanh(math.atanh(r) + half),
                                iv.level, iv.num_missing)


def per_environment(rows: Sequence[Evaluation], f: Filters) -> Figure:
    """Paper Fig. 3: per method, the mean over backbones in each environment with a 95% interval on Fisher's
    z (:func:`fisher_mean_ci`, so it stays in [-1, 1]; one grouped bar per environment)."""
    chosen = best(rows, f.metric)
    order = _order(chosen)
    family_of = {e.method: e.family for e in chosen}
    fig = Figure("per-environment", "Per environment",
                 ["method", "family", "environment", "metric", "n", "mean", "ci_low", "ci_high"])
    grouped: dict[tuple[str, str], list[float | None]] = {}
    for e in chosen:
        grouped.setdefault((e.environment, e.method), []).append(e.value(f.metric))
    for env in sorted({e.environment for e in chosen}):
        xs, ys, lows, highs, texts = [], [], [], [], []
        for method in order:
            values = grouped.get((env, method))
            if not values:
                continue
            iv = fisher_mean_ci(values)
            family = families.get(family_of[method]).name
            fig.rows.append({"method": method, "family": family, "environment": env, "metric": f.metric,
                             "n": iv.n, "mean": iv.mean, "ci_low": iv.low, "ci_high": iv.high})
            xs.append(plain(method))
            ys.append(iv.mean)
            lows.append(0.0 if iv.low is None else iv.mean - iv.low)
            highs.append(0.0 if iv.high is None else iv.high - iv.mean)
            texts.append(f"{plain(method)} ({family}) in {plain(env)}<br>mean {iv.mean:.4f} over {iv.n}"
                         + (f"<br>95% CI [{iv.low:.4f}, {iv.high:.4f}]" if iv.low is not None else ""))
        fig.traces.append({"type": "bar", "x": xs, "y": ys, "name": plain(env), "text": texts, "textposition": "none",
                           "hovertemplate": "%{text}<extra></extra>", "meta": {"kind": "points"},
                           "error_y": {"type": "data", "symmetric": False, "array": highs, "arrayminus": lows}})
    fig.layout = _layout("Per environment (mean over backbones, 95% CI on Fisher's z)", barmode="group",
                         yaxis={"title": {"text": _label(f.metric)}, "range": [-1, 1]}, xaxis={"tickangle": -45})
    return fig


def _diagonal() -> dict[str, Any]:
    return {"type": "scatter", "mode": "lines", "x": [-1, 1], "y": [-1, 1], "name": "y = x",
            "line": {"dash": "dot", "color": "#555"}, "hoverinfo": "skip", "meta": {"kind": "guide"}}


def text_vs_image(rows: Sequence[Evaluation], f: Filters) -> Figure:
    """Paper Fig. 4 (left): each method x environment x backbone x target scored on both
    modalities as a point (text on x, image on y), with the diagonal."""
    chosen = best(rows, f.metric)
    pairs: dict[tuple[str, str, str, str, str], dict[str, Evaluation]] = {}
    for e in chosen:
        pairs.setdefault((e.method, e.environment, e.backbone, e.target, e.source), {})[e.modality] = e
    fig = Figure("text-vs-image", "Text vs image",
                 ["method", "family", "environment", "backbone", "target", "source", "text", "image"])
    by_family: dict[str, list[tuple[tuple[str, ...], float, float]]] = {}
    for key, both in sorted(pairs.items()):
        if "text" in both and "image" in both:
            text, image = both["text"].value(f.metric), both["image"].value(f.metric)
            assert text is not None and image is not None
            by_family.setdefault(both["text"].family, []).append((key, text, image))
            fig.rows.append({"method": key[0], "family": both["text"].family_name, "environment": key[1],
                             "backbone": key[2], "target": key[3], "source": key[4], "text": text, "image": image})
    for family in families.ALL:
        points = by_family.get(family.slug)
        if points:
            fig.traces.append({
                "type": "scatter", "mode": "markers", "name": family.name, "marker": {"color": family.colour, "size": 9},
                "x": [p[1] for p in points], "y": [p[2] for p in points],
                "text": [f"{plain(k[0])} · {plain(k[1])} · {plain(k[2] or 'no backbone')} · {k[3].upper()}" for k, _, _ in points],
                "hovertemplate": "%{text}<br>text %{x:.4f} · image %{y:.4f}<extra></extra>", "meta": {"kind": "points"},
            })
    fig.traces.append(_diagonal())
    label = _label(f.metric)
    fig.layout = _layout("Text vs image", xaxis={"title": {"text": f"{label}, text"}, "range": [-1, 1], "constrain": "domain"},
                         yaxis={"title": {"text": f"{label}, image"}, "range": [-1, 1], "scaleanchor": "x", "constrain": "domain"})
    return fig


def _mean_se(values: list[float]) -> tuple[float, float | None]:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))


def q_vs_v(rows: Sequence[Evaluation], f: Filters) -> Figure:
    """Paper Fig. 4 (right): per method, the mean ± standard error under target Q (x) and
    target V (y), for methods evaluated under both, with the diagonal."""
    chosen = best(rows, f.metric)
    fig = Figure("q-vs-v", "Q vs V", ["method", "family", "q_n", "q_mean", "q_se", "v_n", "v_mean", "v_se"])
    by_family: dict[str, list[dict[str, Any]]] = {}
    by_target: dict[tuple[str, str], list[float]] = {}
    family_of = {e.method: e.family for e in chosen}
    for e in chosen:
        value = e.value(f.metric)
        if value is not None:
            by_target.setdefault((e.method, e.target), []).append(value)
    for method in _order(chosen):
        q, v_ = by_target.get((method, "q")), by_target.get((method, "v"))
        if not q or not v_:
            continue
        (qm, qse), (vm, vse) = _mean_se(q), _mean_se(v_)
        family = families.get(family_of[method])
        row = {"method": method, "family": family.name, "q_n": len(q), "q_mean": qm, "q_se": qse,
               "v_n": len(v_), "v_mean": vm, "v_se": vse}
        fig.rows.append(row)
        by_family.setdefault(family.slug, []).append(row)
    for family in families.ALL:
        points = by_family.get(family.slug)
        if points:
            fig.traces.append({
                "type": "scatter", "mode": "markers", "name": family.name, "marker": {"color": family.colour, "size": 10},
                "x": [p["q_mean"] for p in points], "y": [p["v_mean"] for p in points],
                "error_x": {"type": "data", "array": [p["q_se"] or 0.0 for p in points]},
                "error_y": {"type": "data", "array": [p["v_se"] or 0.0 for p in points]},
                "text": [f"{plain(p['method'])}: Q {p['q_n']} evaluations, V {p['v_n']}" for p in points],
                "hovertemplate": "%{text}<br>Q %{x:.4f} · V %{y:.4f}<extra></extra>", "meta": {"kind": "points"},
            })
    fig.traces.append(_diagonal())
    label = _label(f.metric)
    fig.layout = _layout("Q vs V (mean ± SE)", xaxis={"title": {"text": f"{label}, target Q"}, "range": [-1, 1], "constrain": "domain"},
                         yaxis={"title": {"text": f"{label}, target V"}, "range": [-1, 1], "scaleanchor": "x", "constrain": "domain"})
    return fig


def heatmap(rows: Sequence[Evaluation], f: Filters) -> Figure:
    """Method x environment (or x backbone, ``by``) of the mean of the chosen metric."""
    chosen = best(rows, f.metric)
    order = _order(chosen)
    column = (lambda e: e.environment) if f.by == "environment" else (lambda e: e.backbone or "no backbone")
    columns = sorted({column(e) for e in chosen})
    fig = Figure("heatmap", "Heatmap", ["method", "family", f.by, "n", "mean"])
    z: list[list[float | None]] = []
    cells: dict[tuple[str, str], list[float]] = {}
    family_of = {e.method: e.family for e in chosen}
    for e in chosen:
        value = e.value(f.metric)
        if value is not None:
            cells.setdefault((e.method, column(e)), []).append(value)
    for method in order:
        line: list[float | None] = []
        for col in columns:
            values = cells.get((method, col))
            if values:
                mean = sum(values) / len(values)
                fig.rows.append({"method": method, "family": families.get(family_of[method]).name,
                                 f.by: col, "n": len(values), "mean": mean})
                line.append(mean)
            else:
                line.append(None)
        z.append(line)
    fig.traces.append({"type": "heatmap", "x": [plain(c) for c in columns], "y": [plain(m) for m in order], "z": z, "zmin": -1, "zmax": 1,
                       "colorscale": "RdBu", "reversescale": True, "meta": {"kind": "points"},
                       "hovertemplate": "%{y} · %{x}<br>mean %{z:.4f}<extra></extra>",
                       "texttemplate": "%{z:.2f}", "textfont": {"size": 10},  # the values in their cells
                       "colorbar": {"title": {"text": _label(f.metric)}}})
    fig.layout = _layout(f"Heatmap: method × {f.by}", height=max(400, 22 * len(order) + 160),
                         margin={"l": 160, "r": 20, "t": 50, "b": 120})
    return fig


Builder = Callable[[Sequence[Evaluation], Filters], Figure]

FIGURES: dict[str, tuple[str, Builder]] = {
    "per-family": ("Per family", per_family),
    "per-environment": ("Per environment", per_environment),
    "text-vs-image": ("Text vs image", text_vs_image),
    "q-vs-v": ("Q vs V", q_vs_v),
    "heatmap": ("Heatmap", heatmap),
}
"""Every figure page: name (its URL) -> (title, builder)."""

UNPOOLED: dict[str, dict[str, str]] = {
    "per-family": {"target": "q", "modality": "text"}, "per-environment": {"target": "q", "modality": "text"},
    "heatmap": {"target": "q", "modality": "text"}, "text-vs-image": {"target": "q"}, "q-vs-v": {"modality": "text"},
}
"""The target and modality a figure page shows unless the reader picks another: one of each, so a figure never
pools Q with V or text with image (a figure that compares the two has only the other fixed)."""


def build(name: str, f: Filters) -> Figure:
    """Figure ``name`` over the evaluations selected by ``f`` (``KeyError`` for an unknown name).

    Kept per process for the current evaluations (:func:`~board.evaluations.derived`), so a
    page asked for again costs only the check that nothing changed.
    """
    _, builder = FIGURES[name]
    return derived(("figure", name, f), lambda rows: builder(f.select(rows), f))


OPENING_ORDER = (boards.REPORTED, boards.VERIFIED, boards.RESCORED, boards.SELF_REPORTED)
"""The sources a page restricted to one method or environment tries, in order, to open on."""


def opening_source(fixed: Mapping[str, str]) -> str:
    """The source a figure restricted to ``fixed`` (a method or environment page) opens on: the first of
    :data:`OPENING_ORDER` with an evaluation there, so a user's method page does not open on an empty
    figure; :data:`board.boards.DEFAULT_VIEW` where none has one.  Kept per results version."""

    def make(rows: list[Evaluation]) -> str:
        held = select(fixed, rows)
        return next((s for s in OPENING_ORDER if boards.of_source(held, s)), boards.DEFAULT_VIEW)

    return derived(("figure-opening-source", tuple(sorted(fixed.items()))), make)


def payload(fig: Figure, f: Filters) -> dict[str, Any]:
    """The data behind a figure, as the JSON download and the figure API return it."""
    return {"figure": fig.name, "title": fig.title, "source": f.source, "filters": f.query(), "columns": fig.columns,
            "rows": fig.rows}


# -- what every figure page shares ------------------------------------------------------------

FORMATS = ("csv", "json", "plotly")
"""``?format=`` of a figure page: the data behind it as CSV or JSON downloads, or the Plotly figure the
page draws (fetched by its script)."""


def options() -> dict[str, list[tuple[str, str]]]:
    """The choices of the figure filters (values present in the evaluations), kept per results version."""
    return derived("figure-options", _options_of)


def _options_of(rows: list[Evaluation]) -> dict[str, list[tuple[str, str]]]:
    return {
        "environment": sorted({(e.environment_slug, e.environment) for e in rows}),
        "backbone": [(b, b) for b in sorted({e.backbone for e in rows if e.backbone})],
        "split": [("all", "all splits"), ("dev", "dev"), ("test", "test")],
        "target": [("q", "Q"), ("v", "V")],
        "modality": [(m, m) for m in MODALITIES],
        "family": list(families.CHOICES),
        "source": [(s, label) for s, (label, _) in boards.VIEWS.items()],
        "metric": [(m, metric_registry.get(m).label) for m in metric_registry.COMPARABLE],
    }


@dataclass(frozen=True)
class FilterField:
    """One select of a figure page's filter form (``templates/board/_figure_filters.html``)."""

    name: str
    choices: list[tuple[str, str]]
    selected: str
    empty: str = ""
    """The label of the option that sets no filter; empty where the field always has a value."""


def filter_fields(options: Mapping[str, list[tuple[str, str]]], values: Mapping[str, str],
                  empty: Callable[[str], str]) -> list[FilterField]:
    """The selects of ``options`` with the chosen ``values`` (``split``'s empty value is ``all``) and the
    label ``empty(name)`` of each one's no-filter option."""
    def chosen(name: str) -> str:
        value = values.get(name) or ""
        return "all" if name == "split" and not value else value

    return [FilterField(name, choices, chosen(name), empty(name)) for name, choices in options.items()]


def any_value(name: str) -> str:
    """The no-filter option of the figure pages' selects: ``any …`` except where a value is required (the
    target and modality too: :data:`UNPOOLED`)."""
    return "" if name in ("metric", "split", "source", "by", "target", "modality") else f"any {name}"


def figure_page(request: HttpRequest, name: str, template: str, context: dict[str, Any], *,
                read: Callable[[], Filters], build: Callable[[Filters], Figure],
                fields: Callable[[Mapping[str, str]], list[FilterField]],
                shown: Callable[[Filters], dict[str, Any]] = lambda f: {}) -> HttpResponse:
    """A figure page, or its data (``?format=``): the filters ``read()`` from the request, the figure
    ``build(filters)``, the form's ``fields(values)`` and the context ``shown(filters)`` adds. Filters
    outside their choices give the page with the reason (400), or the reason as JSON for a data format."""
    try:
        f = read()
    except InvalidSelection as exc:
        if request.GET.get("format") in FORMATS:
            return JsonResponse({"errors": {exc.field: [exc.message]}}, status=400)
        return render(request, template, {**context, "fields": fields(request.GET), "error": exc.message},
                      status=400)
    fig = build(f)
    if request.GET.get("format") in FORMATS:
        return response(request, name, fig, f)
    return render(request, template, {**context, **shown(f), "fields": fields(vars(f)), "filters": f, "fig": fig})


def response(request: HttpRequest, name: str, fig: Figure, f: Filters) -> HttpResponse:
    """The figure's data as a CSV or JSON download, or its Plotly traces and layout (``?format=``)."""
    fmt = request.GET.get("format")
    if fmt == "plotly":
        return HttpResponse(fig.plotly_bytes, content_type="application/json")
    if fmt == "csv":
        answer = HttpResponse(csv_text(fig.columns, fig.rows), content_type="text/csv; charset=utf-8")
    else:
        answer = JsonResponse(payload(fig, f), json_dumps_params={"ensure_ascii": False})
    answer["Content-Disposition"] = f'attachment; filename="qval-{name}.{fmt}"'
    return answer

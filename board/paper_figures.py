"""The paper's Figures 2–5 as named default views (``/figures/paper/<name>/``).

Each view opens on the slice the paper plots and says which it is; the filters change it.

* **One source at a time** (:data:`board.boards.VIEWS`).  The default is the authors' reported numbers;
  a reader picks another source (re-scored, verified: the platform's own runs, self-reported: users'
  uploads) to see the same figure over those rows.  Rows of two sources are pooled only when the reader
  picks *any*.
* **The paper's slice per family** (:data:`PAPER_SLICE`): target Q, text for the LLM methods, image
  for the pre-trained ones, target V for the embedding methods (the only target the paper has for
  them).  Choosing a target or a modality applies it to every family instead.
* **The paper's metric per method**: the state-local ranking Spearman for the methods that output
  only a permutation per state (:data:`STATE_LOCAL`), the global one (Spearman by default) for the
  others; the two are drawn in separate blocks, never on one axis.
* **One value per backbone**: where a source holds several evaluations of one method, environment
  and backbone (e.g. several datasets of one environment), their mean is that backbone's value.
* **Intervals of Fig. 3**: as the paper draws them, the mean over backbones ± 1.96 standard errors
  (sample std / √backbones; not clipped). No interval with a single backbone.
* **Points no table prints** (:func:`qval.errata.not_in_tables`: the 10 verifier errata of Tables 7 and 13,
  the 5 OpenApps codegen-avg values): marked × on Figs 2, 4 (left) and 5, hatched bars on Fig. 3, a dotted
  marker on Fig. 4 (right), each hover saying why; the data rows carry it as ``not_in_tables``.
* **Fig. 4 (right)**: per method and target, the mean over backbones in each environment, then the
  mean over the environments where the slice has both Q and V rows, ± its standard error
  (sample std of the environment means / √k), as the paper's caption says.
* **Fig. 5**: TerminalBench, Q, text: each method × backbone under the first labelling backbone (the
  selected source's rows; for the reported ones GPT-5.5) against Table 6 (Claude Opus 4.7,
  :mod:`qval.paper.qval_v1.relabelled`), and the paper's bars: per method the mean over backbones under each labelling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse

from leaderboard.charts import plain
from qval import errata, families, metric_registry
from qval.paper.qval_v1 import published, relabelled
from qval.schema import PUBLIC_SPLITS
from qval.scoring import printed_digits

from . import boards, evaluations, figures
from .evaluations import Evaluation, best

PAPER_SLICE: dict[str, tuple[str, str]] = {
    "direct": ("q", "text"), "code": ("q", "text"), "self-distillation": ("q", "text"), "intrinsic": ("q", "text"),
    "ranking": ("q", "text"), "pre-trained": ("q", "image"), "embedding": ("v", "image"),
    "learned": ("q", "text"), "other": ("q", "text"),
}
"""The paper's (target, modality) per family (Fig. 2, 3 and 4 right)."""

STATE_LOCAL: tuple[str, ...] = ("ranking", "Δbelief", "sdpo", "sdpo-gt")
"""Methods that output only a permutation per state: the paper scores them by the state-local Spearman."""

ENVIRONMENT_ORDER: tuple[str, ...] = tuple(published.ENVIRONMENTS.values())
"""The paper's environments (their slugs) from simpler closed-action to open-ended, its order (Fig. 3); others
follow alphabetically."""

def metric_of(method: str, f: figures.Filters) -> str:
    """The metric a method is plotted by: state-local for :data:`STATE_LOCAL`, else the chosen global one."""
    if method in STATE_LOCAL:
        return metric_registry.LOCAL_HEADLINE
    return f.metric if f.metric != metric_registry.LOCAL_HEADLINE else metric_registry.HEADLINE


def in_slice(e: Evaluation, f: figures.Filters) -> bool:
    """Whether ``e`` is in the figure's slice: the chosen target and modality, else its family's paper slice."""
    target, modality = PAPER_SLICE.get(e.family, ("q", "text"))
    return e.target == (f.target or target) and e.modality == (f.modality or modality)


def _method_order(methods: set[str]) -> list[str]:
    """Methods in the paper's order: by family, then as the family lists them, then by name."""
    rank = {fam.slug: i for i, fam in enumerate(families.ALL)}

    def key(m: str) -> tuple[int, int, str]:
        fam = families.of_method(m)
        return rank[fam.slug], fam.methods.index(m) if m in fam.methods else 99, m

    return sorted(methods, key=key)


def _env_rank(slug: str) -> tuple[int, str]:
    return (ENVIRONMENT_ORDER.index(slug) if slug in ENVIRONMENT_ORDER else len(ENVIRONMENT_ORDER), slug)


def per_backbone(rows: Sequence[Evaluation], f: figures.Filters) -> dict[tuple[str, str, str, str], float]:
    """``(method, environment slug, target, backbone) -> value``: each evaluation's value by its method's
    metric (:func:`metric_of`; the best submission per evaluation), averaged over evaluations of one backbone."""
    values: dict[tuple[str, str, str, str], list[float]] = {}
    for metric in {metric_of(e.method, f) for e in rows}:
        for e in best([e for e in rows if metric_of(e.method, f) == metric], metric):
            value = e.value(metric)
            assert value is not None
            values.setdefault((e.method, e.environment_slug, e.target, e.backbone), []).append(value)
    return {key: sum(v) / len(v) for key, v in values.items()}


PAPER_Z = 1.96
"""The paper's Fig. 3 error bars: the mean over backbones ± 1.96 standard errors."""


def paper_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """``(mean, low, high)``: the mean ± :data:`PAPER_Z` standard errors (sample std, ``ddof=1``, over
    √n), as the paper's Fig. 3 draws it (vlm-rm on FrozenLake: [−0.579, 0.039]); no interval for one value.
    Not clipped: with 2–6 backbones it may leave [−1, 1], as the paper's does."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None, None
    half = PAPER_Z * math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))
    return mean, mean - half, mean + half


def off_table(f: figures.Filters) -> dict[tuple[str, str, str, str, str], str]:
    """The reported values no table of the paper prints as plotted (:func:`qval.errata.not_in_tables`), keyed
    ``(environment, target, modality, method, backbone)`` with why, when the figure shows the authors'
    reported rows (alone or pooled); empty for another source."""
    if f.source not in (boards.REPORTED, boards.ANY):
        return {}
    return errata.not_in_tables()


def _off_key(e: Evaluation) -> tuple[str, str, str, str, str]:
    return e.environment, e.target, e.modality, e.method, e.backbone


OFF_TABLE_SYMBOL = "x"
"""The marker of a point that no table of the paper prints as plotted (hover says why)."""


def _families(rows: Sequence[Evaluation]) -> dict[str, families.Family]:
    """Each method's family, as its evaluations give it."""
    return {e.method: families.get(e.family) for e in rows}


def _layout(title: str, **extra: Any) -> dict[str, Any]:
    layout = {"title": {"text": title}, "template": "plotly_white", "height": 520,
              "margin": {"l": 60, "r": 20, "t": 60, "b": 130}, "hovermode": "closest"}
    layout.update(extra)
    return layout


def _label(metric: str) -> str:
    return metric_registry.get(metric).label


def fig2(rows: Sequence[Evaluation], f: figures.Filters) -> figures.Figure:
    """Paper Fig. 2: every environment × backbone as a point, a bar at each method's mean; global
    metric on the left, state-local on the right."""
    fig = figures.Figure("fig2", "Figure 2: per family",
                         ["method", "family", "environment", "backbone", "target", "modality", "metric", "value"])
    sliced = [e for e in rows if in_slice(e, f)]
    values = per_backbone(sliced, f)
    info = {(e.method, e.environment_slug, e.target, e.backbone): e for e in sliced}
    family = _families(sliced)
    global_metric = metric_of("", f)
    blocks = [(global_metric, "x", "y"), (metric_registry.LOCAL_HEADLINE, "x2", "y2")]
    shown: set[str] = set()
    off = off_table(f)
    for metric, xaxis, yaxis in blocks:
        methods = _method_order({k[0] for k in values if metric_of(k[0], f) == metric})
        for fam in families.ALL:
            mine = [m for m in methods if family[m].slug == fam.slug]
            if not mine:
                continue
            xs, ys, texts, means, symbols = [], [], [], [], []
            for m in mine:
                points = sorted((k, v) for k, v in values.items() if k[0] == m)
                for key, v in points:
                    e = info[key]
                    note = off.get(_off_key(e))
                    xs.append(plain(m))
                    ys.append(v)
                    symbols.append(OFF_TABLE_SYMBOL if note else "circle")
                    texts.append(f"{plain(m)} · {plain(e.environment)} · {plain(e.backbone or 'no backbone')}"
                                 f"<br>{e.target.upper()} · {e.modality} · {_label(metric)} "
                                 f"{v:.{printed_digits(e.split not in PUBLIC_SPLITS)}f}"
                                 + (f"<br>{plain(note)}" if note else ""))
                    fig.rows.append({"method": m, "family": fam.name, "environment": e.environment,
                                     "backbone": e.backbone, "target": e.target, "modality": e.modality,
                                     "metric": metric, "value": v, "not_in_tables": note or ""})
                means.append(sum(v for _, v in points) / len(points))
            common = {"xaxis": xaxis, "yaxis": yaxis, "legendgroup": fam.slug, "marker": {"color": fam.colour}}
            fig.traces.append({"type": "bar", "x": [plain(m) for m in mine], "y": means, "name": f"{fam.name} mean",
                               "opacity": 0.35, "showlegend": False, "meta": {"kind": "means", "metric": metric},
                               "hovertemplate": "%{x}: mean %{y:.3f}<extra></extra>", **common})
            fig.traces.append({"type": "scatter", "mode": "markers", "x": xs, "y": ys, "name": fam.name,
                               "showlegend": fam.slug not in shown, "text": texts,
                               "hovertemplate": "%{text}<extra></extra>",
                               "meta": {"kind": "points", "metric": metric},
                               **common, "marker": {"color": fam.colour, "symbol": symbols}})
            shown.add(fam.slug)
    fig.layout = _layout(
        "Figure 2: correlation by method (points: environment × backbone, × not in the paper's tables; bars: means)",
        barmode="overlay",
        xaxis={"domain": [0, 0.72], "title": {"text": f"global: {_label(global_metric)}"}, "tickangle": -45},
        xaxis2={"domain": [0.76, 1], "title": {"text": f"state-local: {_label(metric_registry.LOCAL_HEADLINE)}"}, "tickangle": -45},
        yaxis={"range": [-1, 1], "title": {"text": _label(global_metric)}},
        yaxis2={"range": [-1, 1], "anchor": "x2", "title": {"text": _label(metric_registry.LOCAL_HEADLINE)}},
    )
    return fig


def fig3(rows: Sequence[Evaluation], f: figures.Filters) -> figures.Figure:
    """Paper Fig. 3: per method and environment (difficulty order) the mean over backbones ± 1.96 standard
    errors (:func:`paper_interval`, as the paper draws it); global block on top, state-local below.  A bar
    whose mean holds a value no table of the paper prints is hatched and its hover says which."""
    fig = figures.Figure("fig3", "Figure 3: per environment",
                         ["method", "family", "environment", "metric", "backbones", "mean", "ci_low", "ci_high",
                          "not_in_tables"])
    sliced = [e for e in rows if in_slice(e, f)]
    values = per_backbone(sliced, f)
    off = off_table(f)
    notes: dict[tuple[str, str], list[str]] = {}
    for e in sliced:
        note = off.get(_off_key(e))
        if note:
            notes.setdefault((e.method, e.environment_slug), []).append(f"{e.backbone}: {note}")
    names = {e.environment_slug: e.environment for e in sliced}
    envs = sorted(names, key=_env_rank)
    family = _families(sliced)
    global_metric = metric_of("", f)
    for metric, xaxis, yaxis in [(global_metric, "x", "y"), (metric_registry.LOCAL_HEADLINE, "x2", "y2")]:
        for m in _method_order({k[0] for k in values if metric_of(k[0], f) == metric}):
            fam = family[m]
            xs, ys, lows, highs, texts, hatch = [], [], [], [], [], []
            for env in envs:
                per = [v for k, v in values.items() if k[0] == m and k[1] == env]
                if not per:
                    continue
                mean, low, high = paper_interval(per)
                held = notes.get((m, env), [])
                fig.rows.append({"method": m, "family": fam.name, "environment": names[env], "metric": metric,
                                 "backbones": len(per), "mean": mean, "ci_low": low, "ci_high": high,
                                 "not_in_tables": "; ".join(held)})
                xs.append(plain(names[env]))
                ys.append(mean)
                lows.append(0.0 if low is None else mean - low)
                highs.append(0.0 if high is None else high - mean)
                hatch.append("/" if held else "")
                texts.append(f"{plain(m)} in {plain(names[env])}: mean {mean:.3f} over {len(per)} backbone(s)"
                             + (f"<br>± 1.96 SE: [{low:.3f}, {high:.3f}]" if low is not None else "")
                             + "".join(f"<br>{plain(n)}" for n in held))
            fig.traces.append({"type": "bar", "x": xs, "y": ys, "name": plain(m), "xaxis": xaxis, "yaxis": yaxis,
                               "marker": {"color": fam.colour, "line": {"color": "#333", "width": 0.5},
                                          "pattern": {"shape": hatch}},
                               "legendgroup": fam.slug, "text": texts, "textposition": "none",
                               "hovertemplate": "%{text}<extra></extra>", "meta": {"kind": "points", "metric": metric},
                               "error_y": {"type": "data", "symmetric": False, "array": highs, "arrayminus": lows}})
    fig.layout = _layout(
        "Figure 3: mean over backbones per environment (± 1.96 SE, as the paper; hatched: holds a value no table "
        "prints)", barmode="group",
        height=760, grid={"rows": 2, "columns": 1, "pattern": "independent"},
        xaxis={"categoryorder": "array", "categoryarray": [names[e] for e in envs], "anchor": "y"},
        yaxis={"domain": [0.55, 1], "range": [-1, 1], "title": {"text": f"global: {_label(global_metric)}"}},
        xaxis2={"categoryorder": "array", "categoryarray": [names[e] for e in envs], "anchor": "y2"},
        yaxis2={"domain": [0, 0.42], "range": [-1, 1], "title": {"text": f"state-local: {_label(metric_registry.LOCAL_HEADLINE)}"}},
    )
    return fig


def _diagonal() -> dict[str, Any]:
    return {"type": "scatter", "mode": "lines", "x": [-1, 1], "y": [-1, 1], "name": "y = x",
            "line": {"dash": "dot", "color": "#555"}, "hoverinfo": "skip", "meta": {"kind": "guide"}}


FIG4_LEFT_FAMILIES = ("direct", "ranking")
FIG4_RIGHT_FAMILIES = ("direct", "code", "pre-trained")


def fig4_left(rows: Sequence[Evaluation], f: figures.Filters) -> figures.Figure:
    """Paper Fig. 4 (left): Direct and Ranking methods, each environment × backbone scored on both
    modalities as a point (text on x, image on y), target Q unless another is chosen."""
    fig = figures.Figure("fig4-left", "Figure 4 (left): text vs image",
                         ["method", "family", "environment", "backbone", "target", "metric", "text", "image"])
    target = f.target or "q"
    chosen = [e for e in rows if e.target == target and (f.family or e.family in FIG4_LEFT_FAMILIES)]
    by_modality = {m: per_backbone([e for e in chosen if e.modality == m], f) for m in figures.MODALITIES}
    names = {e.environment_slug: e.environment for e in chosen}
    family = _families(chosen)
    off = off_table(f)

    def note(key: tuple[str, str, str, str]) -> str:
        """Why the point's text or image value is not in the paper's tables ('' when both are)."""
        return "; ".join(off[k] for m in figures.MODALITIES
                         if (k := (names[key[1]], target, m, key[0], key[3])) in off)

    points: dict[str, list[tuple[tuple[str, str, str, str], float, float]]] = {}
    for key in sorted(by_modality["text"].keys() & by_modality["image"].keys()):
        text, image = by_modality["text"][key], by_modality["image"][key]
        fam = family[key[0]]
        points.setdefault(fam.slug, []).append((key, text, image))
        fig.rows.append({"method": key[0], "family": fam.name, "environment": names[key[1]], "backbone": key[3],
                         "target": target, "metric": metric_of(key[0], f), "text": text, "image": image,
                         "not_in_tables": note(key)})
    for fam in families.ALL:
        mine = points.get(fam.slug)
        if mine:
            fig.traces.append({
                "type": "scatter", "mode": "markers", "name": fam.name,
                "marker": {"color": fam.colour, "size": 9,
                           "symbol": [OFF_TABLE_SYMBOL if note(k) else "circle" for k, _, _ in mine]},
                "x": [p[1] for p in mine], "y": [p[2] for p in mine],
                "text": [f"{plain(k[0])} · {plain(names[k[1]])} · {plain(k[3] or 'no backbone')}"
                         + (f"<br>{plain(note(k))}" if note(k) else "") for k, _, _ in mine],
                "hovertemplate": "%{text}<br>text %{x:.3f} · image %{y:.3f}<extra></extra>", "meta": {"kind": "points"},
            })
    fig.traces.append(_diagonal())
    fig.layout = _layout("Figure 4 (left): text vs image (state-local Spearman for ranking)",
                         xaxis={"title": {"text": "correlation, text"}, "range": [-1, 1], "constrain": "domain"},
                         yaxis={"title": {"text": "correlation, image"}, "range": [-1, 1], "scaleanchor": "x", "constrain": "domain"})
    return fig


def _mean_se(values: Sequence[float]) -> tuple[float, float | None]:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def fig4_right(rows: Sequence[Evaluation], f: figures.Filters) -> figures.Figure:
    """Paper Fig. 4 (right): Direct, Code and Pre-trained methods under target Q (filled) and V (open):
    the mean over the environments that have both targets of the per-environment means over backbones,
    ± the standard error across those environment means."""
    fig = figures.Figure("fig4-right", "Figure 4 (right): Q vs V",
                         ["method", "family", "target", "environments", "mean", "se", "not_in_tables"])
    chosen = [e for e in rows if (f.family or e.family in FIG4_RIGHT_FAMILIES)
              and e.modality == (f.modality or PAPER_SLICE.get(e.family, ("q", "text"))[1])]
    values = per_backbone(chosen, f)
    with_both = sorted({e.environment_slug for e in chosen if e.target == "q"}
                       & {e.environment_slug for e in chosen if e.target == "v"}, key=_env_rank)
    names = {e.environment_slug: e.environment for e in chosen}
    family = _families(chosen)
    off = off_table(f)
    held: dict[tuple[str, str], list[str]] = {}
    for e in chosen:
        if e.environment_slug in with_both and (note := off.get(_off_key(e))):
            held.setdefault((e.method, e.target), []).append(f"{e.environment} · {e.backbone}: {note}")
    series: dict[str, list[dict[str, Any]]] = {"q": [], "v": []}
    for m in _method_order({k[0] for k in values}):
        summary = {}
        for target in ("q", "v"):
            env_means = []
            for env in with_both:
                per = [v for k, v in values.items() if k[0] == m and k[1] == env and k[2] == target]
                if per:
                    env_means.append(sum(per) / len(per))
            if env_means:
                summary[target] = (len(env_means), *_mean_se(env_means))
        if len(summary) < 2:
            continue
        fam = family[m]
        for target, (k, mean, se) in summary.items():
            row = {"method": m, "family": fam.name, "target": target, "environments": k, "mean": mean, "se": se,
                   "not_in_tables": "; ".join(held.get((m, target), []))}
            fig.rows.append(row)
            series[target].append({**row, "colour": fam.colour})
    for target, symbol in (("q", "circle"), ("v", "circle-open")):
        pts = series[target]
        fig.traces.append({
            "type": "scatter", "mode": "markers", "name": f"target {target.upper()}",
            "x": [plain(p["method"]) for p in pts], "y": [p["mean"] for p in pts],
            "marker": {"color": [p["colour"] for p in pts], "size": 11, "line": {"width": 2},
                       "symbol": [f"{symbol}-dot" if p["not_in_tables"] else symbol for p in pts]},
            "error_y": {"type": "data", "array": [p["se"] or 0.0 for p in pts]},
            "text": [f"{plain(p['method'])} ({p['family']}): {target.upper()} over {p['environments']} environments"
                     + (f"<br>holds values not in the paper's tables: {plain(p['not_in_tables'])}"
                        if p["not_in_tables"] else "") for p in pts],
            "hovertemplate": "%{text}<br>mean %{y:.3f} ± %{error_y.array:.3f}<extra></extra>",
            "meta": {"kind": "points", "target": target},
        })
    label = _label(metric_of("", f))
    envs = ", ".join(names[e] for e in with_both) or "none"
    fig.layout = _layout(f"Figure 4 (right): Q (filled) vs V (open), mean ± SE over {envs}",
                         yaxis={"title": {"text": label}, "range": [-1, 1]}, xaxis={"tickangle": -45})
    return fig


def fig5(rows: Sequence[Evaluation], f: figures.Filters) -> figures.Figure:
    """Paper Fig. 5: TerminalBench Q text, each method × backbone under the first labelling backbone (x,
    the selected source's rows) against Table 6's Claude Opus 4.7 labels (y)."""
    fig = figures.Figure("fig5", "Figure 5: labelling backbones",
                         ["method", "family", "backbone", "metric", "first_labels", "opus_labels", "opus_marks",
                          "not_in_tables"])
    metric = metric_of("", f)
    if metric not in (metric_registry.HEADLINE, "kendall_tau"):  # the correlations Table 6 prints
        metric = metric_registry.HEADLINE
    _, table = relabelled.table6()
    opus = {(r.method, r.backbone): getattr(r, metric) for r in table if not f.backbone or r.backbone == f.backbone}
    marks = {(r.method, r.backbone): getattr(r, f"{metric}_stars") for r in table}  # as Table 6 prints them
    chosen = [e for e in rows if e.target == "q" and e.modality == "text" and e.method not in STATE_LOCAL]
    first = per_backbone(chosen, figures.Filters(**{**vars(f), "metric": metric}))
    family = _families(chosen)
    off = off_table(f)
    envs = {e.environment_slug: e.environment for e in chosen}
    points: dict[str, list[tuple[str, str, float, float, str]]] = {}
    for (method, env, _target, backbone), x in sorted(first.items()):
        y = opus.get((method, backbone))
        if y is None:
            continue
        fam = family[method]
        note = off.get((envs[env], "q", "text", method, backbone), "")
        points.setdefault(fam.slug, []).append((method, backbone, x, y, note))
        fig.rows.append({"method": method, "family": fam.name, "backbone": backbone, "metric": metric,
                         "first_labels": x, "opus_labels": y, "opus_marks": marks[(method, backbone)],
                         "not_in_tables": note})
    for fam in families.ALL:
        mine = points.get(fam.slug)
        if mine:
            fig.traces.append({
                "type": "scatter", "mode": "markers", "name": fam.name,
                "marker": {"color": fam.colour, "size": 9,
                           "symbol": [OFF_TABLE_SYMBOL if p[4] else "circle" for p in mine]},
                "x": [p[2] for p in mine], "y": [p[3] for p in mine],
                "text": [f"{plain(p[0])} · {plain(p[1])}" + (f"<br>{plain(p[4])}" if p[4] else "") for p in mine],
                "customdata": [marks[(p[0], p[1])] for p in mine],
                "hovertemplate": "%{text}<br>first %{x:.3f} · Opus 4.7 %{y:.3f}%{customdata}<extra></extra>",
                "meta": {"kind": "points"},
            })
    fig.traces.append(_diagonal())
    # The paper's bars: per method, the mean over backbones under each labelling (right panel).
    by_method: dict[str, list[tuple[float, float]]] = {}
    for row in fig.rows:
        by_method.setdefault(row["method"], []).append((row["first_labels"], row["opus_labels"]))
    order = _method_order(set(by_method))
    for side, (name, colour) in enumerate((("first labels (GPT-5.5)", "#4c72b0"), ("Claude Opus 4.7 labels", "#dd8452"))):
        means = [sum(p[side] for p in by_method[m]) / len(by_method[m]) for m in order]
        fig.traces.append({
            "type": "bar", "x": [plain(m) for m in order], "y": means, "name": f"mean, {name}", "xaxis": "x2",
            "yaxis": "y2", "marker": {"color": colour}, "meta": {"kind": "means", "labels": name},
            "text": [f"{plain(m)}: mean over {len(by_method[m])} backbones, {name}" for m in order],
            "textposition": "none", "hovertemplate": "%{text}: %{y:.3f}<extra></extra>",
        })
    fig.layout = _layout("Figure 5: TerminalBench labels from two backbones (left: each method × backbone; "
                         "right: per-method means)", barmode="group",
                         xaxis={"domain": [0, 0.45], "title": {"text": f"{_label(metric)}, first labels (GPT-5.5 "
                                                                       "for the reported rows)"}, "range": [-1, 1]},
                         yaxis={"title": {"text": f"{_label(metric)}, Claude Opus 4.7 labels (Table 6)"},
                                "range": [-1, 1], "scaleanchor": "x", "constrain": "domain"},
                         xaxis2={"domain": [0.55, 1], "tickangle": -45},
                         yaxis2={"anchor": "x2", "range": [-1, 1], "title": {"text": f"mean {_label(metric)}"}})
    return fig



@dataclass(frozen=True)
class PaperFigure:
    """One paper figure's view: its URL name, title, builder, fixed filters and the filters it offers."""

    name: str
    title: str
    builder: Callable[[Sequence[Evaluation], figures.Filters], figures.Figure]
    fixed: Mapping[str, str]
    offers: tuple[str, ...]
    shows: str
    """What the paper plots (the default view), in words."""
    rests_on: str = ""
    """What each bar, interval and mark of the figure rests on (test, units, n), in words."""


PAPER_FIGURES: dict[str, PaperFigure] = {p.name: p for p in (
    PaperFigure("fig2", "Figure 2: correlation by method and family", fig2, {},
                ("environment", "backbone", "source", "target", "modality", "metric"),
                "every environment × backbone of each method as a point, its mean as a bar; global Spearman "
                "on the left, state-local Spearman for ranking, Δbelief, sdpo and sdpo-gt on the right",
                rests_on=(
                    "each point is one reported number (a method × environment × backbone evaluation); a bar is the plain "
                    "mean of a method's points, with no interval and no test (the findings page tests the families: "
                    "Welch's t over these points, a permutation test of η² over the method means); × marks a value no "
                    "table of the paper prints as plotted (an erratum, or a value of the authors' website data alone; the "
                    "hover and the data's not_in_tables column say which)")),
    PaperFigure("fig3", "Figure 3: correlation by environment", fig3, {},
                ("backbone", "source", "target", "modality", "metric"),
                "per method and environment (FrozenLake → ALFWorld → OpenApps → TerminalBench) the mean over "
                "backbones ± 1.96 standard errors (sample std over √backbones), as the paper draws them; global "
                "block on top, state-local below",
                rests_on=(
                    "a bar is the mean over backbones ± 1.96 standard errors (sample std / √n, n the backbones in the "
                    "data's backbones column, at most 6), as the paper draws it: a normal interval that takes the "
                    "backbones as independent draws (with 6, Student's t would widen it to ± 2.57 SE); no test; hatched "
                    "bars hold a value no table prints")),
    PaperFigure("fig4-left", "Figure 4 (left): text vs image", fig4_left, {},
                ("environment", "backbone", "source", "target", "family"),
                "Direct and Ranking methods, target Q: each environment × backbone evaluated on both modalities, "
                "text on x and image on y (state-local Spearman for ranking)",
                rests_on=(
                    "each point is one pair: the same method, environment and backbone scored on text and on images; no "
                    "test here (the findings page tests text against image environment by environment: an exact sign test "
                    "over the pairs of each, n per environment); × marks a value no table of the paper prints as plotted "
                    "(an erratum, or a value of the authors' website data alone; the hover and the data's not_in_tables "
                    "column say which)")),
    PaperFigure("fig4-right", "Figure 4 (right): Q vs V", fig4_right, {},
                ("backbone", "source", "modality", "family", "metric"),
                "Direct, Code and Pre-trained methods (text; image for pre-trained): per target the mean over "
                "the environments with V labels of the means over backbones, ± 1 SE across those environments",
                rests_on=(
                    "a point is the mean over the environments with both targets of the per-environment means over "
                    "backbones; its bar is ± 1 standard error across those environments (n in the data's environments "
                    "column: at most 3 by default, so the error bar is itself very uncertain); no test here (the findings "
                    "page tests the order with Spearman's test over the methods and each family's shift with a sign test over "
                    "its evaluations); a dotted marker holds a value no table prints")),
    PaperFigure("fig5", "Figure 5: TerminalBench labelled by two backbones", fig5, {"environment": published.ENVIRONMENTS["TerminalBench"]},
                ("backbone", "source", "metric"),
                "TerminalBench, target Q, text: each method × backbone under GPT-5.5 labels (x) and under Claude "
                "Opus 4.7 labels (y, the paper's Table 6), and per method the mean over backbones under each, as "
                "the paper's bars",
                rests_on=(
                    "each point is one method × backbone on TerminalBench; the marks in its hover are Table 6's as "
                    "printed (Spearman's test of each correlation over TerminalBench's evaluation points, 100 in Table 2: "
                    "* p < .10, ** p < .01, *** p < .001); a bar is the plain mean over backbones; no test here (the "
                    "findings page tests signs with Fisher's exact test, order with Spearman's test and closeness with a "
                    "sign test, over the method × backbone values); × marks a value no table of the paper prints as "
                    "plotted (an erratum, or a value of the authors' website data alone; the hover and the data's "
                    "not_in_tables column say which)")),
)}
"""The paper's figures by URL name."""

def read(spec: PaperFigure, params: Mapping[str, str]) -> figures.Filters:
    """The filters of a paper view: :class:`board.figures.Filters`' defaults (the authors' reported rows),
    then the query parameters it offers, then its fixed ones."""
    chosen = {k: v for k, v in params.items() if k in spec.offers and v}
    return figures.read_filters(chosen, **spec.fixed)


def describe(spec: PaperFigure, f: figures.Filters) -> str:
    """The slice a view shows, in words (the page says it above the figure)."""
    parts = [f"source {f.source_caption}", f"split {f.split or 'any'}"]
    if spec.name in ("fig2", "fig3"):
        parts.append(f"target {f.target.upper()} for every family" if f.target
                     else "target Q (V for the embedding methods, the only target the paper gives them)")
        parts.append(f"{f.modality} for every family" if f.modality
                     else "text for the LLM methods, image for the pre-trained and embedding methods")
    elif spec.name == "fig4-left":
        parts.append(f"target {(f.target or 'q').upper()}")
        parts.append(f"family {families.get(f.family).name}" if f.family else "Direct and Ranking families")
    elif spec.name == "fig4-right":
        parts.append(f"{f.modality} for every family" if f.modality else "text; image for the pre-trained methods")
        parts.append(f"family {families.get(f.family).name}" if f.family else "Direct, Code and Pre-trained families")
    else:
        parts.append("target Q, text")
    parts.append(f"environment {f.environment}" if f.environment else "every environment")
    parts.append(f"backbone {f.backbone}" if f.backbone else "every backbone")
    if spec.name != "fig4-left":
        parts.append(f"global metric {_label(metric_of('', f))}")
    return "; ".join(parts)


def build(spec: PaperFigure, f: figures.Filters) -> figures.Figure:
    """The figure of ``spec`` over the evaluations ``f`` selects (target, modality and family are applied by
    the builder, per family), kept per results version (:func:`board.evaluations.derived`)."""
    selection = {k: v for k, v in f.evaluation_filters().items() if k not in ("target", "modality", "family")}
    if f.family and spec.name in ("fig4-left", "fig4-right"):
        selection["family"] = f.family
    return evaluations.derived(
        ("paper-figure", spec.name, f),
        lambda rows: spec.builder(boards.of_source(evaluations.select(selection, rows), f.source), f))


def home_figure() -> tuple[figures.Figure, str]:
    """Figure 2's default view (the authors' reported rows, the paper's slice per family), the home page's
    figure, and the slice it shows in words (:func:`describe`)."""
    spec = PAPER_FIGURES["fig2"]
    f = read(spec, {})
    return build(spec, f), describe(spec, f)


def paper_figure(request: HttpRequest, name: str) -> HttpResponse:
    """A paper figure's default view (:data:`PAPER_FIGURES`) with the filters it offers, its slice in words,
    permalink and the data behind it (``?format=csv|json|plotly``)."""
    spec = PAPER_FIGURES.get(name)
    if spec is None:
        raise Http404(f"no paper figure {name!r}")
    options = {k: v for k, v in figures.options().items() if k in spec.offers}
    if "metric" in options:
        options["metric"] = [(m, label) for m, label in options["metric"] if m != metric_registry.LOCAL_HEADLINE]
    return figures.figure_page(
        request, name, "board/paper_figure.html",
        {"paper_figures": PAPER_FIGURES, "spec": spec, "name": name, "title": spec.title},
        read=lambda: read(spec, request.GET), build=lambda f: build(spec, f),
        fields=lambda values: figures.filter_fields(options, values, _paper_default),
        shown=lambda f: {"slice": describe(spec, f)})


def _paper_default(name: str) -> str:
    """The no-filter option of a paper figure's select: the paper's own choice where it made one."""
    if name in ("target", "modality"):
        return f"the paper's {name} per family"
    if name == "family":
        return "the paper's families"
    return figures.any_value(name)

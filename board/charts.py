"""Plotly charts of the aggregate pages, as HTML fragments.

The fragments do not include plotly.js: pages load it once from
``{% static 'vendor/plotly.min.js' %}`` (:mod:`leaderboard.staticfiles`), so nothing comes
from a CDN.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from leaderboard.charts import fragment, plain
from qval.compare import CriticalDifference

from .aggregates import FamilyDistribution


def family_plot(families: list[FamilyDistribution], metric_label: str) -> str:
    """A box plot per family with every evaluation drawn as a point beside it."""
    fig = go.Figure(
        [
            go.Box(
                y=list(f.values),
                name=plain(f.family),
                boxpoints="all",
                jitter=0.4,
                pointpos=-1.6,
                hovertext=[plain(p) for p in f.points],
                hoverinfo="y+text",
                boxmean=True,
            )
            for f in families
        ]
    )
    fig.update_layout(
        yaxis_title=metric_label,
        showlegend=False,
        height=420,
        margin={"l": 60, "r": 20, "t": 20, "b": 40},
        template="plotly_white",
    )
    return fragment(fig, "family-plot")


def critical_difference_diagram(cd: CriticalDifference) -> str:
    """Demšar's critical-difference diagram: methods at their average rank (1 = best, on
    the left), the CD as a scale bar above the axis, and a thick bar joining each clique
    of methods whose average ranks differ by less than the CD."""
    k = len(cd.methods)
    ranks = [cd.average_ranks[i] for i in cd.order]
    names = [plain(cd.methods[i]) for i in cd.order]
    half = math.ceil(k / 2)
    step, top = 0.35, 0.25 + 0.12 * len(cd.cliques)
    shapes: list[dict[str, object]] = []
    annotations: list[dict[str, object]] = []
    for pos, (name, rank) in enumerate(zip(names, ranks)):
        left = pos < half
        y = -(top + step * (pos if left else k - 1 - pos))
        edge = 1.0 if left else float(k)
        shapes.append({"type": "line", "x0": rank, "x1": rank, "y0": 0, "y1": y, "line": {"width": 1}})
        shapes.append({"type": "line", "x0": rank, "x1": edge, "y0": y, "y1": y, "line": {"width": 1}})
        annotations.append(
            {"x": edge, "y": y, "text": f"{name} ({rank:.2f})", "showarrow": False,
             "xanchor": "right" if left else "left", "xshift": -6 if left else 6}
        )
    for n, (start, end) in enumerate(cd.cliques):
        y = -(0.15 + 0.12 * n)
        shapes.append({"type": "line", "x0": ranks[start] - 0.03, "x1": ranks[end] + 0.03, "y0": y, "y1": y,
                       "line": {"width": 5, "color": "#b91c1c"}})
    shapes.append({"type": "line", "x0": 1, "x1": 1 + cd.cd, "y0": 0.35, "y1": 0.35, "line": {"width": 2}})
    annotations.append({"x": 1 + cd.cd / 2, "y": 0.35, "text": f"CD = {cd.cd:.3f}", "showarrow": False, "yshift": 12})
    fig = go.Figure(
        go.Scatter(
            x=ranks, y=[0] * k, mode="markers", marker={"size": 8, "color": "#1d2330"},
            hovertext=[f"{n}: average rank {r:.3f}" for n, r in zip(names, ranks)], hoverinfo="text",
        )
    )
    lowest = -(top + step * (half - 1)) - 0.2
    fig.update_layout(
        shapes=shapes,
        annotations=annotations,
        showlegend=False,
        height=int(160 + 60 * half),
        margin={"l": 200, "r": 200, "t": 40, "b": 10},
        template="plotly_white",
        xaxis={"range": [1 - 0.05, k + 0.05], "side": "top", "dtick": 1, "title": "average rank (1 = best)",
               "showgrid": False, "zeroline": False},
        yaxis={"range": [lowest, 0.6], "visible": False},
    )
    return fragment(fig, "cd-diagram")

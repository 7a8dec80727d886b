"""The site's Plotly helpers (names escaped, a chart as an HTML fragment) and the dataset page's label histograms.

The fragments do not include plotly.js: pages load it once from
``{% static 'vendor/plotly.min.js' %}`` (:mod:`leaderboard.staticfiles`), so nothing comes
from a CDN.
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

_CONFIG = {"displaylogo": False, "responsive": True}


def plain(text: str) -> str:
    """``text`` escaped for Plotly: its pseudo-HTML tags and entities become literal characters.

    Only ``&``, ``<`` and ``>`` are escaped: Plotly decodes ``&amp;``, ``&lt;`` and ``&gt;`` but not
    ``&quot;``, and a quote starts no markup without a ``<``."""
    return html.escape(str(text), quote=False)


def fragment(fig: go.Figure, div_id: str) -> str:
    """``fig`` as an HTML fragment with the id ``div_id`` (plotly.js not included), in a box that scrolls sideways
    on a phone rather than squeezing the chart below a readable width (``static/qval.css``, ``.chart``)."""
    html = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_CONFIG)
    return f'<div class="chart">{html}</div>'


def label_histograms(values: dict[str, dict[str, list[float]]], bins: int = 30) -> dict[str, str]:
    """One histogram per target (``q``, ``v``) of the labels, a bar trace per split.

    ``values[target][split]`` must hold public splits' labels only.  The counts are binned here
    (shared bins per target), so the page carries bin centres and counts (3 decimals), never a label itself.
    """
    titles = {"q": "Q(s, a) of every candidate", "v": "V(s) of every state"}
    out = {}
    for target, by_split in values.items():
        present = {split: np.asarray(v, dtype=float) for split, v in by_split.items() if len(v)}
        if not present:
            continue
        everything = np.concatenate(list(present.values()))
        everything = everything[np.isfinite(everything)]
        if not everything.size:
            continue
        lo, hi = float(everything.min()), float(everything.max())
        if hi - lo < 1e-12:
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, bins + 1)
        centres = [round(float(x), 3) for x in (edges[:-1] + edges[1:]) / 2]
        traces = []
        for split, v in present.items():
            counts, _ = np.histogram(v[np.isfinite(v)], bins=edges)
            traces.append(go.Bar(x=centres, y=counts.tolist(), name=split, opacity=0.7,
                                 width=round(float(edges[1] - edges[0]), 3)))
        fig = go.Figure(traces)
        fig.update_layout(
            barmode="overlay",
            xaxis_title=titles.get(target, target),
            yaxis_title="count",
            height=300,
            margin={"l": 60, "r": 20, "t": 20, "b": 40},
            template="plotly_white",
        )
        out[target] = fragment(fig, f"hist-{target}")
    return out

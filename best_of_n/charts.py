"""The Best-of-N alignment chart, as an HTML fragment (:mod:`leaderboard.charts`: no plotly.js inside)."""

from __future__ import annotations

import plotly.graph_objects as go

from leaderboard.charts import fragment, plain

from .services import Alignment, PickerResult


def alignment_plot(alignment: Alignment, div_id: str, metric_label: str = "Spearman ρ (global)") -> str:
    """Test-split ρ (x, the alignment's metric, named by ``metric_label``) against the Best-of-N success gain over the base policy (y, with its 95% CI):
    one marker per picker, one trace per legend group (family, oracle, random)."""
    groups: dict[str, list] = {}
    for p in alignment.points:
        groups.setdefault(p.group, []).append(p)
    fig = go.Figure([
        go.Scatter(
            x=[p.rho for p in points], y=[p.gain.value for p in points], mode="markers+text", name=plain(group),
            text=[plain(p.method) for p in points], textposition="top center", marker={"color": points[0].color, "size": 10},
            error_y={"type": "data", "symmetric": False, "array": [p.gain.high - p.gain.value for p in points],
                     "arrayminus": [p.gain.value - p.gain.low for p in points]},
            customdata=[p.run_id for p in points],
        )
        for group, points in groups.items()
    ])
    fig.update_layout(xaxis_title=f"test-split {metric_label} (Q-alignment)", yaxis_title="success-rate gain over the base policy",
                      height=420, margin={"l": 60, "r": 20, "t": 20, "b": 50}, template="plotly_white")
    return fragment(fig, div_id)


def results_plot(rows: list[PickerResult], div_id: str) -> str:
    """Each picker's success rate with its 95% CI (one marker per picker, the base policy's rate a dashed line)."""
    fig = go.Figure(go.Scatter(
        x=[r.success.value for r in rows], y=[plain(r.picker) for r in rows], mode="markers",
        marker={"color": [r.color for r in rows], "size": 11}, customdata=[r.run_id for r in rows],
        error_x={"type": "data", "symmetric": False, "array": [r.success.high - r.success.value for r in rows],
                 "arrayminus": [r.success.value - r.success.low for r in rows]},
        hovertemplate="%{y}: success %{x:.3f}<extra></extra>", showlegend=False))
    base = next((r for r in rows if r.picker == "base"), None)
    if base is not None:
        fig.add_vline(x=base.success.value, line_dash="dash", line_color="#6b7280")
    fig.update_layout(xaxis={"title": "success rate (95% CI)", "range": [-0.02, 1.02]},
                      yaxis={"autorange": "reversed"}, height=90 + 36 * len(rows),
                      margin={"l": 100, "r": 20, "t": 10, "b": 50}, template="plotly_white")
    return fragment(fig, div_id)

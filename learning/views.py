"""Pages of the Learned family: the runs, and one run with its progress, loss curves and data used."""

from __future__ import annotations

import plotly.graph_objects as go
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from qval.learned import methods as lm

from . import selectors
from .models import TrainingRun


def loss_plot(run: TrainingRun) -> str:
    """The run's loss curves (Plotly fragment; plotly.js is loaded by the page)."""
    fig = go.Figure([go.Scatter(y=values, name=f"{name} loss", mode="lines") for name, values in run.losses.items()])
    fig.update_layout(xaxis_title="training progress (chunk means)", yaxis_title="loss", yaxis_type="log",
                      height=360, margin={"t": 20})
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id="loss-curves",
                       config={"displaylogo": False, "responsive": True})


def run_list(request: HttpRequest) -> HttpResponse:
    """The learned methods (what each trains on) and every training run."""
    described = [{"name": name, **info} for name, info in lm.METHODS.items()]
    return render(request, "learning/runs.html", {"methods": described, "runs": selectors.runs()})


def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One run: status and progress (reloading while active), loss curves, data used, leaderboard entries."""
    try:
        run = selectors.run(pk)
    except TrainingRun.DoesNotExist:
        raise Http404("no such training run") from None
    return render(request, "learning/run.html", {
        "run": run, "info": lm.METHODS.get(run.method, {}), "plot": loss_plot(run) if run.losses else "",
        "active": run.status in (TrainingRun.QUEUED, TrainingRun.RUNNING)})

"""Pages of the Learned family: the runs, and one run with its progress, loss curves and data used."""

from __future__ import annotations

import plotly.graph_objects as go
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render

from jobs.queues import position
from qval.learned import methods as lm

from . import selectors, services
from .forms import TrainForm
from .models import TrainingRun


def loss_plot(run: TrainingRun) -> str:
    """The run's loss curves (Plotly fragment; plotly.js is loaded by the page)."""
    fig = go.Figure([go.Scatter(y=values, name=f"{name} loss", mode="lines") for name, values in run.losses.items()])
    fig.update_layout(xaxis_title="training progress (chunk means)", yaxis_title="loss", yaxis_type="log",
                      height=360, margin={"t": 20})
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id="loss-curves",
                       config={"displaylogo": False, "responsive": True})


def run_list(request: HttpRequest) -> HttpResponse:
    """The learned methods (what each trains on) and every training run; for staff the form that
    queues a training run (a POST by anyone else is 403)."""
    if request.method == "POST" and not request.user.is_staff:
        return HttpResponseForbidden("only staff can train a learned method")
    form = TrainForm(request.POST or None) if request.user.is_staff else None
    if form is not None and request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            run = services.create_run(d["method"], d["dataset"], featuriser=d["featuriser"], seed=d["seed"],
                                      params=form.params())
        except services.InvalidRun as exc:
            form.add_error(form.field_of(exc.field), exc.message)
        else:
            services.enqueue(run)
            return redirect("learned-run", pk=run.pk)
    described = [{"name": name, **info} for name, info in lm.METHODS.items()]
    return render(request, "learning/runs.html", {"methods": described, "runs": selectors.runs(), "form": form},
                  status=400 if form is not None and form.errors else 200)


def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One run: status and progress (reloading while active), loss curves, data used, leaderboard entries."""
    try:
        run = selectors.run(pk)
    except TrainingRun.DoesNotExist:
        raise Http404("no such training run") from None
    return render(request, "learning/run.html", {
        "run": run, "info": lm.METHODS.get(run.method, {}), "plot": loss_plot(run) if run.losses else "",
        "active": run.status in (TrainingRun.QUEUED, TrainingRun.RUNNING), "position": position(services.JOB, run)})

"""Pages of the Best-of-N track: the Q-alignment vs downstream gain page, a run, one episode."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render

from jobs.queues import position
from qval import best_of_n as bon
from qval import metric_registry

from best_of_n.models import BestOfNRun

from . import charts
from . import services as best_of_n
from .forms import PlayForm


def alignment(request: HttpRequest) -> HttpResponse:
    """Per environment and N: each picker's test-split ρ against its Best-of-N gain, with the rank
    correlation across pickers; the runs below.  ``?format=json``: the numbers.  For staff the form
    that queues a run on ``gpu`` (a POST by anyone else is 403)."""
    if request.method == "POST" and not request.user.is_staff:
        return HttpResponseForbidden("only staff can play a Best-of-N run")
    form = PlayForm(request.POST or None) if request.user.is_staff else None
    if form is not None and request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            run = best_of_n.create_run(d["environment"], d["picker"], n=d["n"], num_episodes=d["episodes"],
                                       seed=d["seed"], backbone=d["backbone"].strip(), training_run=d["training_run"])
        except best_of_n.InvalidRun as exc:
            form.add_error(exc.field, exc.message)
        else:
            best_of_n.enqueue(run)
            return redirect("best-of-n-run", pk=run.pk)
    metric = request.GET.get("metric", metric_registry.HEADLINE)
    if metric not in best_of_n.ALIGNMENT_METRICS:
        return JsonResponse({"error": f"unknown metric {metric!r}; choose one of "
                                      f"{', '.join(best_of_n.ALIGNMENT_METRICS)}"}, status=400)
    alignments = best_of_n.alignment(metric)
    if request.GET.get("format") == "json":
        return JsonResponse({"metric": metric, "alignments": best_of_n.alignment_json(alignments)})
    label = metric_registry.get(metric).label
    panels = [{"alignment": a, "plot": charts.alignment_plot(a, f"alignment-{a.environment}-{a.n}", label)}
              for a in alignments]
    results = [{"environment": env, "n": n, "rows": rows, "plot": charts.results_plot(rows, f"results-{env}-{n}")}
               for (env, n), rows in best_of_n.results().items()]
    runs = BestOfNRun.objects.all()[:200]
    metrics = [(m, metric_registry.get(m).label) for m in best_of_n.ALIGNMENT_METRICS]
    return render(request, "best_of_n/alignment.html", {"panels": panels, "results": results, "runs": runs, "form": form,
                                                          "baselines": bon.BASELINES, "metric": metric,
                                                          "metric_label": label, "metrics": metrics},
                  status=400 if form is not None and form.errors else 200)


def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A run: progress while it plays, its summary and gain over the base policy; for staff the reason of a
    failure and every episode (the tasks are secret, :mod:`qval.best_of_n`: others see aggregates only)."""
    run = get_object_or_404(BestOfNRun, pk=pk)
    staff = request.user.is_staff
    if request.GET.get("format") == "json":
        place = position(best_of_n.JOB, run)
        return JsonResponse({"id": run.pk, "status": run.status, "done": run.done, "total": run.num_episodes,
                             "summary": run.summary, "queue_position": place.as_dict() if place else None,
                             **({"error": run.error} if staff else {})})
    gain = best_of_n.gain_over_base(run) if run.picker != "base" else None
    episodes = run.episodes.only("index", "task", "success", "discounted_return").order_by("index") if staff else None
    return render(request, "best_of_n/run.html", {
        "run": run, "gain": gain, "base": best_of_n.baseline_run(run), "episodes": episodes,
        "position": position(best_of_n.JOB, run)})


def episode_detail(request: HttpRequest, pk: int, index: int) -> HttpResponse:
    """One episode: every step's observation, candidates, their scores and the action chosen.  Staff only: the
    episode's task is secret, and the oracle's scores are its reference Q-values."""
    if not request.user.is_staff:
        return HttpResponseForbidden("Best-of-N episodes are played on secret tasks: only staff see them")
    run = get_object_or_404(BestOfNRun, pk=pk)
    stored = run.episodes.filter(index=index).first()
    if stored is None:
        raise Http404(f"run {pk} has no episode {index} (yet)")
    episode = best_of_n.episodes_of_one(stored)
    return render(request, "best_of_n/episode.html", {"run": run, "episode": episode})

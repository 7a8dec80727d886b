"""Pages of the Best-of-N track: the Q-alignment vs downstream gain page, a run, one episode."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render

from qval import best_of_n as bon

from . import best_of_n, charts
from .models import BestOfNRun


def alignment(request: HttpRequest) -> HttpResponse:
    """Per environment and N: each picker's test-split ρ against its Best-of-N gain, with the rank
    correlation across pickers; the runs below.  ``?format=json``: the numbers."""
    alignments = best_of_n.alignment()
    if request.GET.get("format") == "json":
        return JsonResponse({"alignments": best_of_n.alignment_json(alignments)})
    panels = [{"alignment": a, "plot": charts.alignment_plot(a, f"alignment-{a.environment}-{a.n}")} for a in alignments]
    runs = BestOfNRun.objects.all()[:200]
    return render(request, "leaderboard/best_of_n.html", {"panels": panels, "runs": runs,
                                                          "baselines": bon.BASELINES})


def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A run: progress while it plays, its summary and gain over the base policy, every episode."""
    run = get_object_or_404(BestOfNRun, pk=pk)
    if request.GET.get("format") == "json":
        return JsonResponse({"id": run.pk, "status": run.status, "done": run.done, "total": run.num_episodes,
                             "summary": run.summary, "error": run.error})
    gain = best_of_n.gain_over_base(run) if run.picker != "base" else None
    return render(request, "leaderboard/best_of_n_run.html", {
        "run": run, "gain": gain, "base": best_of_n.baseline_run(run),
        "episodes": run.episodes.only("index", "task", "success", "discounted_return").order_by("index")})


def episode_detail(request: HttpRequest, pk: int, index: int) -> HttpResponse:
    """One episode: every step's candidates, their scores and the action chosen."""
    run = get_object_or_404(BestOfNRun, pk=pk)
    stored = run.episodes.filter(index=index).first()
    if stored is None:
        raise Http404(f"run {pk} has no episode {index} (yet)")
    episode = best_of_n.episodes_of_one(stored)
    return render(request, "leaderboard/best_of_n_episode.html", {"run": run, "episode": episode})

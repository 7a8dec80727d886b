"""Public pages over the results: home, scoring rules, the leaderboard, aggregates and the critical difference,
figures, and a method's and an environment's pages (the catalogue's pages are :mod:`leaderboard.views`)."""

from __future__ import annotations

from collections import Counter
from urllib.parse import urlencode

from django.conf import settings
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from qval import budget, families, ladder, metrics
from qval.paper.qval_v1 import settings as paper_settings
from qval.schema import PUBLIC_SPLITS
from qval.scoring import printed_digits

from leaderboard.models import Dataset, Environment, Method
from leaderboard.published import published_numbers_context
from submissions.models import Submission

from . import aggregates, boards, charts, evaluations, exports, figures, paper_figures
from .exports import FILTER_KEYS, leaderboard_rows


def home(request: HttpRequest) -> HttpResponse:
    """What QVal measures, the paper's Figure 2 over the authors' reported rows (its data fetched from the
    paper figure's page, ``?format=plotly``), and where to start."""
    fig, shows = paper_figures.home_figure()
    return render(request, "home.html",
                  {"datasets": Dataset.objects.select_related("environment"), "fig": fig, "slice": shows})


def how_we_score(request: HttpRequest) -> HttpResponse:
    """The scoring rules, and where they differ from the QVal v1.0 reference implementation."""
    return render(
        request,
        "board/scoring.html",
        {"min_points": metrics.MIN_USABLE_POINTS, "resamples": settings.QVAL_BOOTSTRAP_RESAMPLES,
         "ladder_resamples": ladder.RESAMPLES, "ladder_alpha": ladder.ALPHA,
         "points_per_number": budget.POINTS_PER_NUMBER, "subsample_points": metrics.BOOTSTRAP_SUBSAMPLE_POINTS,
         **published_numbers_context()},
    )


BOARD_PAGE_SIZE = 50
BOARD_EXPORT_FORMATS = ("csv", "json")


def board(request: HttpRequest) -> HttpResponse:
    """The leaderboard table: filters, search (``q``), sort, pages of :data:`BOARD_PAGE_SIZE`
    and the export of the whole filtered view (``?format=csv|json``)."""
    filters = {k: request.GET.get(k, "") for k in FILTER_KEYS}
    sort = request.GET.get("sort", exports.DEFAULT_SORT)
    search = request.GET.get("q", "").strip()
    version = evaluations.version()  # before the rows: a cached fragment is never older than its key
    rows = leaderboard_rows(filters, sort, search)
    fmt = request.GET.get("format")
    if fmt in BOARD_EXPORT_FORMATS:
        view = None if search else (version, tuple(sorted(filters.items())), exports.canonical_sort(sort))
        return exports.board_export(rows, fmt, view)
    paginator = Paginator(rows, BOARD_PAGE_SIZE)
    page = paginator.get_page(request.GET.get("page"))
    options = {
        "environment": list(Environment.objects.values_list("slug", "name")),
        "dataset": [(d.key, d.key) for d in Dataset.objects.only("slug", "version")],
        "split": [("dev", "dev"), ("test", "test")],
        "target": [("q", "Q"), ("v", "V")],
        "modality": [("text", "text"), ("image", "image")],
        "family": Method.FAMILIES,
        "source": [(s, s) for s, _ in Submission.SOURCES],
    }
    return render(
        request,
        "board/board.html",
        {"rows": page.object_list, "page": page, "total": len(rows), "filters": filters, "sort": sort,
         "options": options, "search": search, "results_version": version,
         "open_book": list(Environment.objects.filter(open_book=True))},
    )


def _selection_context(request: HttpRequest) -> tuple[aggregates.Selection | None, dict[str, object]]:
    """The aggregate pages' selection (or the error) and the choices of their form."""
    context: dict[str, object] = {
        "choices": {"split": aggregates.SPLITS, "target": aggregates.TARGETS, "metric": list(aggregates.METRICS),
                    "source": list(boards.VIEWS)},
        "values": {k: request.GET.get(k, "") for k in aggregates.SELECTION_KEYS},
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
    distribution over evaluations (``?split=&target=&metric=&source=``; by default the authors' reported
    numbers), kept per results version."""
    selection, context = _selection_context(request)
    if selection is None:
        return render(request, "board/aggregate.html", context, status=400)
    version = evaluations.version()  # before the values: a cached fragment is never older than its key
    summary = aggregates.summary(selection)
    context.update(
        results_version=version,
        digits=printed_digits(selection.split not in PUBLIC_SPLITS),
        means=summary.means,
        families=summary.families,
        family_plot=evaluations.derived(("family-plot", selection), lambda _: _family_plot(selection)),
    )
    return render(request, "board/aggregate.html", context)


def _family_plot(selection: aggregates.Selection) -> str:
    """The family box plot of ``selection`` (read afresh: a plot kept for a version is of that version's values)."""
    families = aggregates.summary(selection).families
    return charts.family_plot(list(families), selection.metric_label) if families else ""


def _diagram(choice: aggregates.CDChoice) -> str:
    """The critical-difference diagram of ``choice`` (read afresh, as :func:`_family_plot`)."""
    result = aggregates.critical_difference_of(choice).result
    return charts.critical_difference_diagram(result) if result else ""


def critical_difference(request: HttpRequest) -> HttpResponse:
    """Friedman test, average ranks and the Nemenyi critical-difference diagram of the methods that cover
    every chosen evaluation (``?split=&target=&metric=&modality=`` and repeatable ``source``, ``method``,
    ``environment``, ``backbone``; by default the QVal v1.0 paper's numbers), the methods left out and
    why; kept per results version."""
    context: dict[str, object] = {
        "choices": {"split": aggregates.SPLITS, "target": aggregates.TARGETS, "metric": list(aggregates.METRICS),
                    "modality": aggregates.MODALITIES},
        "values": {k: request.GET.get(k, "") for k in ("split", "target", "metric", "modality")},
        "sources": boards.SOURCES,
    }
    try:
        choice = aggregates.read_cd_choice(request.GET)
    except aggregates.InvalidSelection as exc:
        context["error"] = exc.message
        return render(request, "board/critical_difference.html", context, status=400)
    version = evaluations.version()  # before the values: a cached fragment is never older than its key
    context.update(
        results_version=version, choice=choice, selection=choice.selection,
        digits=printed_digits(choice.selection.split not in PUBLIC_SPLITS),
        values={**vars(choice.selection), "modality": choice.modality},
        options=aggregates.cd_options(choice),
        table=aggregates.critical_difference_of(choice),
        diagram=evaluations.derived(("critical-difference-diagram", choice), lambda _: _diagram(choice)),
    )
    return render(request, "board/critical_difference.html", context)


# -- figures, method and environment pages --------------------------------------------------


def figure(request: HttpRequest, name: str) -> HttpResponse:
    """A figure page (:data:`board.figures.FIGURES`) with its filters, permalink and
    data downloads (``?format=csv|json``)."""
    if name not in figures.FIGURES:
        raise Http404(f"no figure {name!r}")
    return _figure_page(request, name, {}, "board/figure.html", {})


def _figure_page(request: HttpRequest, name: str, fixed: dict[str, str], template: str,
                 extra: dict[str, object]) -> HttpResponse:
    options = {k: v for k, v in figures.options().items() if k not in fixed}
    if name == "heatmap":
        options["by"] = [(by, f"× {by}") for by in figures.HEATMAP_BY]
    opening = figures.opening_source(fixed) if fixed else boards.DEFAULT_VIEW
    return figures.figure_page(
        request, name, template, {"figures": figures.FIGURES, "name": name, **extra},
        read=lambda: figures.read_filters({"source": opening, **figures.UNPOOLED.get(name, {}),
                                           **{k: v for k, v in request.GET.items() if v}}, **fixed),
        build=lambda f: figures.build(name, f),
        fields=lambda values: figures.filter_fields(options, values, figures.any_value),
        shown=lambda f: {"title": figures.FIGURES[name][0]})


RESULTS_SHOWN = 50
"""Results listed on a method or environment page (best ρ first); the rest are on the leaderboard."""


def builtin_method(name: str) -> dict[str, object] | None:
    """The registry's entry of a built-in method (spec, parameters, prompt templates, prompt version and
    hash), or ``None`` for a user's method."""
    from qval.methods import context
    from qval.methods.registry import MethodError, get_method

    try:
        spec = get_method(name)
    except MethodError:
        return None
    return {"spec": spec, "params": sorted(spec.params.items()), "templates": context.method_templates(name),
            "prompt_version": context.PROMPT_VERSION, "prompt_hash": context.prompt_hash(),
            "backbones": served_backbones() if spec.needs in ("chat-llm", "chat-llm-logprobs") else []}


def served_backbones() -> list[dict[str, object]]:
    """The ``QVAL_BACKBONES`` a baseline of an LLM method may run on: name, kind and, for a model whose card this
    site knows (``smollm2-135m``: :data:`qval.smollm2.CARD`), that card (else ``None``)."""
    from qval import smollm2

    cards = {smollm2.BACKBONE_NAME: smollm2.CARD}
    return [{"name": name, "kind": entry.get("kind", "transformers"), "card": cards.get(name)}
            for name, entry in sorted(settings.QVAL_BACKBONES.items())]


def method_paper_settings(name: str, builtin: dict[str, object] | None) -> list[tuple[paper_settings.PaperSetting, object]]:
    """The paper's settings of method ``name`` (:func:`qval.paper.qval_v1.settings.method_settings`), each with the
    built-in method's value of the same setting (``None`` where it has no such parameter or is no built-in)."""
    params = builtin["spec"].params if builtin else {}  # type: ignore[attr-defined]
    return [(s, params.get(s.site_param) if s.site_param else None) for s in paper_settings.method_settings(name)]


def method_detail(request: HttpRequest, name: str) -> HttpResponse:
    """A method: its family and reference, every result, and the figures restricted to it.

    Only a method with a public result (a row of :func:`board.evaluations.on_board`) or a built-in one has a page;
    any other name answers 404 alike, so the page tells nobody whether a private row bears the name."""
    version = evaluations.version()  # before the rows: the results table's cached fragment is never older than its key
    rows = exports.leaderboard_rows({"method": name})
    builtin = builtin_method(name)
    method = Method.objects.filter(name=name).first() if rows or builtin else None
    if method is None:
        raise Http404(f"no method {name!r}")
    fig_name = request.GET.get("figure", "per-environment")
    if fig_name not in figures.FIGURES:
        fig_name = "per-environment"
    extra = {"results_version": version, "method": method, "family": families.get(method.family), "results": rows[:RESULTS_SHOWN],
             "builtin": builtin, "paper_settings": method_paper_settings(name, builtin),
             "paper_source": paper_settings.method_source(name),
             "num_results": len(rows), "all_results": "?" + urlencode({"method": name}), "fixed": "method", "fixed_value": name}
    return _figure_page(request, fig_name, {"method": name}, "board/method.html", extra)


def environment_modalities(datasets: list[Dataset], counts: Counter[str]) -> list[tuple[str, int, bool]]:
    """An environment's modalities, each as ``(modality, results in it, whether a dataset of it has it)``: those of
    its datasets and those of the results it holds (``counts``, by modality: the authors' image results on datasets
    not hosted here too)."""
    declared = {m for ds in datasets for m in (ds.modalities or [])}
    return [(m, counts[m], m in declared) for m in figures.MODALITIES if m in declared or counts[m]]


def environment_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """An environment: its datasets, every result on it, and the figures restricted to it."""
    env = Environment.objects.filter(slug=slug).first()
    if env is None:
        raise Http404(f"no environment {slug!r}")
    fig_name = request.GET.get("figure", "heatmap")
    if fig_name not in figures.FIGURES:
        fig_name = "heatmap"
    version = evaluations.version()
    rows = exports.leaderboard_rows({"environment": slug})
    datasets = list(env.datasets.all())
    extra = {"results_version": version, "environment": env, "datasets": datasets, "results": rows[:RESULTS_SHOWN],
             "modalities": environment_modalities(datasets, evaluations.derived(  # counted once per version
                 ("environment-modalities", slug), lambda _: Counter(r.modality for r in rows))),
             "open_book": [env] if env.open_book else [],
             "num_results": len(rows), "all_results": f"?environment={slug}", "fixed": "environment",
             "fixed_value": slug}
    return _figure_page(request, fig_name, {"environment": slug}, "board/environment.html", extra)

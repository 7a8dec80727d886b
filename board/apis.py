"""The boards' API calls (Django REST framework; the site's other calls: :mod:`leaderboard.apis`,
:mod:`submissions.apis`, :mod:`workers.apis`; an :class:`board.aggregates.InvalidSelection` is answered by
:mod:`qval_site.api_errors`).

``GET  /api/v1/leaderboard/``                      ?dataset=<key>&split=&target=&sort=&page=&page_size=
``GET  /api/v1/leaderboard/aggregate/``            ?split=&target=&metric=&source= means over backbones, families
``GET  /api/v1/leaderboard/critical-difference/``  ?split=&target=&metric=&modality=&source=&method=&environment=&backbone=
                                                   Friedman + Nemenyi
``GET  /api/v1/figures/<name>/``                   the numbers behind a figure page
``GET  /api/v1/published/table6/``                 the paper's Table 6 (TerminalBench relabelled by a second
                                                   labelling backbone) with its provenance

:data:`BOARD_PAGE` is the shape of a leaderboard page, what ``/api/v1/schema/`` and the API docs page say it is
(``tests/test_site_pages.py`` checks it against a real answer); the row's metric fields come from the metric
registry, as the row's own (:class:`board.exports.BoardRow`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from qval import metric_registry
from qval.paper.qval_v1 import relabelled

from . import aggregates, boards, evaluations, figures
from .exports import DEFAULT_SORT, FILTER_KEYS, ROW_COLUMNS, TAIL_COLUMNS, leaderboard_rows


def _number(help_text: str) -> serializers.FloatField:
    return serializers.FloatField(allow_null=True, help_text=help_text)


def _board_row_fields() -> dict[str, serializers.Field]:
    """The fields of a leaderboard row, its metric fields from the registry (as :meth:`BoardRow.metric_fields`)."""
    fields: dict[str, serializers.Field] = {name: serializers.CharField() for name in ROW_COLUMNS}
    fields["submission_id"] = serializers.IntegerField()
    for spec in metric_registry.METRICS:
        if not spec.board:
            continue
        fields[spec.name] = _number(spec.label)
        if spec.board_p:
            fields[f"{spec.name}_p"] = _number(f"p-value of {spec.short}")
        if spec.kind == "point":
            fields[f"{spec.name}_marks"] = serializers.CharField(help_text="significance marks (* ** ***)")
        if spec.board_ci:
            fields[f"{spec.name}_ci"] = serializers.ListField(child=serializers.FloatField(), allow_null=True,
                                                              help_text=f"95% interval of {spec.short}")
        if spec.kind == "ranking":
            fields[f"{spec.name}_std"] = _number("std over states")
    for name in TAIL_COLUMNS:
        fields[name] = serializers.CharField(allow_null=name == "date")
    fields["num_points"] = serializers.IntegerField()
    return fields


BOARD_PAGE = inline_serializer("BoardPage", {
    "count": serializers.IntegerField(help_text="rows in all"),
    "next": serializers.URLField(allow_null=True), "previous": serializers.URLField(allow_null=True),
    "results": inline_serializer("BoardRow", _board_row_fields(), many=True)})
"""A page of the leaderboard (``GET /api/v1/leaderboard/``)."""


class LeaderboardPagination(PageNumberPagination):
    """``?page=`` (from 1) and ``?page_size=`` (default 100, at most 1000) of the leaderboard API."""

    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000
    invalid_page_message = "invalid page {page_number!r}: {message}"


class Leaderboard(APIView):
    """Finished submissions with ρ, τ and ranking Spearman, a page at a time (the board's
    ``?format=csv|json`` export has every row)."""

    permission_classes = [AllowAny]

    @extend_schema(
        parameters=[OpenApiParameter(k, str) for k in FILTER_KEYS]
        + [OpenApiParameter("sort", str), OpenApiParameter("page", int),
           OpenApiParameter("page_size", int, description="default 100, at most 1000")],
        responses=BOARD_PAGE,
    )
    def get(self, request: Request) -> Response:
        filters = {k: request.query_params.get(k, "") for k in FILTER_KEYS}
        rows = leaderboard_rows(filters, request.query_params.get("sort", DEFAULT_SORT))
        pages = LeaderboardPagination()
        page = pages.paginate_queryset(rows, request, view=self)
        return pages.get_paginated_response([r.as_dict() for r in page or []])


_SELECTION_PARAMETERS = [
    OpenApiParameter("split", str, enum=list(aggregates.SPLITS), description="default test"),
    OpenApiParameter("target", str, enum=list(aggregates.TARGETS), description="default q"),
    OpenApiParameter("metric", str, enum=list(aggregates.METRICS), description="default spearman"),
]


_SOURCE_PARAMETER = OpenApiParameter(
    "source", str, enum=list(boards.VIEWS),
    description="default reported (the QVal v1.0 authors' numbers); any pools every source")


def _per_version(request: Request, key: tuple[object, ...], make: Callable[[], dict[str, Any]]) -> HttpResponse:
    """The answer ``make()`` (built from values kept per results version), itself kept until the version
    changes: as JSON its bytes, rendered once; the browsable API (a browser) renders it each time."""
    if not isinstance(request.accepted_renderer, JSONRenderer):
        return Response(make())
    body = evaluations.derived(key, lambda _: JSONRenderer().render(make()))
    return HttpResponse(body, content_type="application/json")


class LeaderboardAggregate(APIView):
    """Per method and environment the mean over backbones with a Student-t 95% CI; per
    family the distribution over evaluations (best finished submission per method,
    dataset, backbone)."""

    permission_classes = [AllowAny]

    @extend_schema(parameters=[*_SELECTION_PARAMETERS, _SOURCE_PARAMETER], responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        selection = aggregates.read_selection(request.query_params)
        return _per_version(request, ("api-aggregate", selection),
                            lambda: {**vars(selection), **aggregates.summary(selection).as_dict()})


_CD_PARAMETERS = [
    *_SELECTION_PARAMETERS,
    OpenApiParameter("modality", str, enum=list(aggregates.MODALITIES), description="default text"),
    OpenApiParameter("source", str, enum=list(aggregates.CD_SOURCES), many=True,
                     description="repeatable; default reported (the QVal v1.0 paper's numbers)"),
    OpenApiParameter("method", str, many=True, description="repeatable; default every method"),
    OpenApiParameter("environment", str, many=True, description="environment slug, repeatable; default all"),
    OpenApiParameter("backbone", str, many=True, description="repeatable; default all"),
]


class LeaderboardCriticalDifference(APIView):
    """Friedman test, average ranks and Nemenyi critical difference (alpha 0.05) of the
    methods that have a value on every chosen evaluation (environment or dataset x backbone;
    by default the QVal v1.0 paper's numbers); ``left_out`` names the other methods and the
    evaluations they miss, ``reason`` says why there is no test when too few are left."""

    permission_classes = [AllowAny]

    @extend_schema(parameters=_CD_PARAMETERS, responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        choice = aggregates.read_cd_choice(request.query_params)
        return _per_version(request, ("api-critical-difference", choice),
                            lambda: {**choice.as_dict(), **aggregates.critical_difference_of(choice).as_dict()})


class PublishedTable6(APIView):
    """The paper's Table 6 (:mod:`qval.paper.qval_v1.relabelled`): TerminalBench's 9 methods × 6 backbones relabelled by Claude
    Opus 4.7, ρ and τ as printed (codegen: mean, std, min, max over its 16 samples) with their significance marks,
    and the provenance of the conversion from the paper's text.  These rows are not on the boards: their labels
    are not the ones every other TerminalBench row was scored against."""

    permission_classes = [AllowAny]

    @extend_schema(responses=inline_serializer("Table6", {
        "provenance": serializers.DictField(), "labels": serializers.CharField(),
        "rows": serializers.ListField(child=serializers.DictField())}))
    def get(self, request: Request) -> Response:
        provenance, rows = relabelled.table6()
        return Response({"provenance": provenance,
                         "labels": "Claude Opus 4.7 (Max-Value Monte Carlo), TerminalBench, target q, text",
                         "rows": [dataclasses.asdict(row) for row in rows]})


class FigureData(APIView):
    """The numbers behind a figure page (``per-family``, ``per-environment``, ``text-vs-image``,
    ``q-vs-v``, ``heatmap``) for the same filters as the page."""

    permission_classes = [AllowAny]

    @extend_schema(
        parameters=[_SOURCE_PARAMETER if k == "source" else OpenApiParameter(k, str) for k in vars(figures.Filters())],
        responses=inline_serializer("FigureRows", {"rows": serializers.ListField(child=serializers.DictField())}),
    )
    def get(self, request: Request, name: str) -> Response:
        if name not in figures.FIGURES:
            raise Http404(f"no figure {name!r}")
        f = figures.read_filters({**figures.UNPOOLED[name], **{k: v for k, v in request.query_params.items() if v}})
        return Response(figures.payload(figures.build(name, f), f))

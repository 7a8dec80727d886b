"""REST API v1 (Django REST framework; token or session authentication).

``GET  /api/v1/datasets/``                         dataset versions and their splits
``GET  /api/v1/datasets/<key>/download/``          ?split=dev|test&format=jsonl|csv|parquet|images, or
                                                   ?format=card|zip for the whole dataset
``GET  /api/v1/builds/``                           recent dataset builds with their progress
``POST /api/v1/submissions/``                      multipart upload of a predictions file, or with
                                                   ``kind=container`` of a method container archive
``GET  /api/v1/submissions/<id>/``                 state, error, problems and results
``PATCH /api/v1/submissions/<id>/``                the owner changes its method card or visibility (``public``)
``GET  /api/v1/leaderboard/``                      ?dataset=<key>&split=&target=&sort=&page=&page_size=
``GET  /api/v1/leaderboard/aggregate/``            ?split=&target=&metric=&source= means over backbones, families
``GET  /api/v1/leaderboard/critical-difference/``  ?split=&target=&metric=&modality=&source=&method=&environment=&backbone=
                                                   Friedman + Nemenyi
``GET  /api/v1/compare/``                          ?a=<id>&b=<id> paired bootstrap of A vs B
``GET  /api/v1/published/table6/``                 the paper's Table 6 (TerminalBench relabelled by a second
                                                   labelling backbone) with its provenance
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import throttling
from board import aggregates, boards, evaluations, figures
from board.exports import FILTER_KEYS, leaderboard_rows
from leaderboard.exports import DATASET_FORMATS, SPLIT_FORMATS
from leaderboard.models import MODALITY_CHOICES, Dataset, DatasetBuild
from leaderboard.task_table import split_counts
from board.views import download_response
from qval.paper.qval_v1 import relabelled
from qval.schema import PUBLIC_SPLITS, TARGETS
from submissions import comparison
from submissions.models import Submission
from submissions.selectors import visible_to
from submissions.serializers import submission_payload
from submissions.uploads import too_large
from . import api_responses as answers
from submissions.services import (
    MethodCard,
    SubmissionRequest,
    change_card,
    container_requests,
    create_container_submissions,
    create_submission,
)


def _dataset(key: str) -> Dataset:
    ds = Dataset.lookup(key)
    if ds is None:
        raise Http404(f"no dataset {key}")
    return ds


class DatasetList(APIView):
    """Every dataset version with its splits and counts (states, tasks and states per task type:
    :func:`leaderboard.task_table.split_counts`)."""

    permission_classes = [AllowAny]

    @extend_schema(responses=answers.DatasetAnswer(many=True))
    def get(self, request: Request) -> Response:
        out = []
        for ds in Dataset.objects.select_related("environment"):
            splits = {split: {**counts, "labels_public": split in PUBLIC_SPLITS}
                      for split, counts in split_counts(ds).items()}
            out.append(
                {
                    "key": ds.key,
                    "slug": ds.slug,
                    "version": ds.version,
                    "name": ds.name,
                    "environment": ds.environment.slug,
                    "fingerprint": ds.fingerprint,
                    "modalities": ds.modalities,
                    "splits": splits,
                    # Provenance and labelling settings (qval.schema.Manifest): what a local run needs.
                    "manifest": {k: v for k, v in ds.manifest.items() if k != "build_info"},
                    "download": request.build_absolute_uri(f"/api/v1/datasets/{ds.key}/download/"),
                }
            )
        return Response(out)


class DatasetDownload(APIView):
    """A split's states and candidates (jsonl, csv, parquet; labels only on public splits) or its
    images (a zip); with ``format=card`` the dataset card, with ``format=zip`` the whole dataset."""

    permission_classes = [AllowAny]
    throttle_scope = "download"

    @extend_schema(
        parameters=[
            OpenApiParameter("split", str, enum=["train", "dev", "test"]),
            OpenApiParameter("format", str, enum=[*SPLIT_FORMATS, *DATASET_FORMATS]),
        ],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY},
    )
    def get(self, request: Request, key: str) -> HttpResponse:
        return download_response(_dataset(key), request.query_params.get("split", "dev"),
                                 request.query_params.get("format", "jsonl"))


class BuildList(APIView):
    """The recent dataset builds (queued, running, finished, failed) with their progress."""

    permission_classes = [AllowAny]

    @extend_schema(parameters=[OpenApiParameter("name", str, description="builder name")],
                   responses=answers.BuildAnswer(many=True))
    def get(self, request: Request) -> Response:
        builds = DatasetBuild.objects.all()
        if request.query_params.get("name"):
            builds = builds.filter(name=request.query_params["name"])
        return Response([b.as_dict() for b in builds[:50]])


class SubmissionUpload(serializers.Serializer):
    """Fields of a predictions upload."""

    file = serializers.FileField(allow_empty_file=True)
    dataset = serializers.CharField(help_text="slug or slug@version")
    split = serializers.ChoiceField(choices=["train", "dev", "test"])
    target = serializers.ChoiceField(choices=list(TARGETS))
    method_name = serializers.CharField(max_length=100)
    backbone = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    modality = serializers.ChoiceField(choices=[m for m, _ in MODALITY_CHOICES], required=False, default="text")
    public = serializers.BooleanField(required=False, allow_null=True, default=None,
                                      help_text="false: the row is its owner's only (no board, figure or permalink); "
                                                "by default true on the test split, false on dev (a self-check)")
    description = serializers.CharField(required=False, allow_blank=True, default="", help_text="method card")
    paper_url = serializers.CharField(required=False, allow_blank=True, default="", help_text="method card, http(s)")
    code_url = serializers.CharField(required=False, allow_blank=True, default="", help_text="method card, http(s)")
    open_weights = serializers.BooleanField(required=False, allow_null=True, default=None, help_text="method card")


class ContainerUpload(serializers.Serializer):
    """Fields of a method-container upload (``kind=container``)."""

    kind = serializers.ChoiceField(choices=["container"])
    file = serializers.FileField(help_text="docker save / podman save archive, tar or tar.gz")
    dataset = serializers.ListField(
        child=serializers.CharField(), help_text="slug or slug@version; repeat the field or separate with commas")
    split = serializers.ListField(
        child=serializers.CharField(), help_text="dev and/or test; repeat the field or separate with commas")
    target = serializers.ChoiceField(choices=list(TARGETS), help_text="q (pointwise and per-state ranking) or v")
    method_name = serializers.CharField(max_length=100)
    backbone = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    modality = serializers.ChoiceField(choices=[m for m, _ in MODALITY_CHOICES], required=False, default="text")
    public = serializers.BooleanField(required=False, allow_null=True, default=None,
                                      help_text="false: the row is its owner's only (no board, figure or permalink); "
                                                "by default true on the test split, false on dev (a self-check)")
    description = serializers.CharField(required=False, allow_blank=True, default="", help_text="method card")
    paper_url = serializers.CharField(required=False, allow_blank=True, default="", help_text="method card, http(s)")
    code_url = serializers.CharField(required=False, allow_blank=True, default="", help_text="method card, http(s)")
    open_weights = serializers.BooleanField(required=False, allow_null=True, default=None, help_text="method card")


def card_of(data: dict[str, Any]) -> MethodCard:
    """The method card of an upload's validated fields."""
    return MethodCard(public=data.get("public"), description=data.get("description", ""),
                      paper_url=data.get("paper_url", ""), code_url=data.get("code_url", ""),
                      open_weights=data.get("open_weights"))


class SubmissionCreate(APIView):
    """Upload a predictions file (validated now, scored by a worker) or, with ``kind=container``,
    a method container archive: one submission per named dataset and split, answered as
    ``{"submissions": [...]}``."""

    permission_classes = [IsAuthenticated]
    parser_classes = [MultiPartParser, FormParser]
    throttle_scope = "upload"

    @extend_schema(request={"multipart/form-data": SubmissionUpload},
                   responses={201: PolymorphicProxySerializer(
                       "Created", [answers.SubmissionAnswer, answers.ContainerSubmissionsAnswer], None)})
    def post(self, request: Request) -> Response:
        kind = request.data.get("kind", Submission.KIND_FILE)
        dropped = too_large(request)
        if dropped:
            return Response({"errors": {"file": [dropped]}}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
        if kind == Submission.KIND_CONTAINER:
            return self._container(request)
        if kind != Submission.KIND_FILE:
            return Response({"errors": {"kind": [f"unknown kind {kind!r}; choose file or container"]}},
                            status=status.HTTP_400_BAD_REQUEST)
        ser = SubmissionUpload(data=request.data)
        if not ser.is_valid():
            return Response({"errors": ser.errors}, status=status.HTTP_400_BAD_REQUEST)
        data = ser.validated_data
        req = SubmissionRequest(
            dataset=data["dataset"],
            split=data["split"],
            target=data["target"],
            method_name=data["method_name"],
            backbone=data.get("backbone", ""),
            modality=data.get("modality", "text"),
            card=card_of(data),
        )
        sub = create_submission(request.user, req, data["file"])
        return Response(submission_payload(sub), status=status.HTTP_201_CREATED)

    def _container(self, request: Request) -> Response:
        ser = ContainerUpload(data=request.data)
        if not ser.is_valid():
            return Response({"errors": ser.errors}, status=status.HTTP_400_BAD_REQUEST)
        data = ser.validated_data
        reqs = container_requests(data["dataset"], data["split"], target=data["target"],
                                  method_name=data["method_name"], backbone=data.get("backbone", ""),
                                  modality=data.get("modality", "text"), card=card_of(data))
        subs = create_container_submissions(request.user, reqs, data["file"])
        return Response({"submissions": [submission_payload(s) for s in subs]}, status=status.HTTP_201_CREATED)


class CardChange(serializers.Serializer):
    """The method-card fields a PATCH changes (those it leaves out stay)."""

    public = serializers.BooleanField(required=False, help_text="false: the row is its owner's only")
    description = serializers.CharField(required=False, allow_blank=True, help_text="method card")
    paper_url = serializers.CharField(required=False, allow_blank=True, help_text="method card, http(s)")
    code_url = serializers.CharField(required=False, allow_blank=True, help_text="method card, http(s)")
    open_weights = serializers.BooleanField(required=False, allow_null=True, help_text="method card")


class SubmissionDetail(APIView):
    """One of the caller's submissions, or a baseline run (with its config and progress); PATCH: its owner
    changes its method card or makes it public or private (:func:`submissions.services.change_card`)."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses=answers.SubmissionAnswer)
    def get(self, request: Request, pk: int) -> Response:
        sub = Submission.objects.filter(visible_to(request.user), pk=pk).first()
        if sub is None:
            return Response({"errors": {"id": [f"no submission {pk} of yours and no baseline run {pk}"]}},
                            status=status.HTTP_404_NOT_FOUND)
        return Response(submission_payload(sub))

    @extend_schema(request=CardChange, responses=answers.SubmissionAnswer)
    def patch(self, request: Request, pk: int) -> Response:
        ser = CardChange(data=request.data, partial=True)
        fixed = sorted(set(request.data) - set(ser.fields))
        if fixed:  # what was scored (dataset, method, backbone, ...) stays as it was
            return Response({"errors": {name: [f"{name} cannot be changed; a card changes "
                                                f"{', '.join(ser.fields)}"] for name in fixed}},
                            status=status.HTTP_400_BAD_REQUEST)
        if not ser.is_valid():
            return Response({"errors": ser.errors}, status=status.HTTP_400_BAD_REQUEST)
        sub = change_card(request.user, pk, **ser.validated_data)
        return Response(submission_payload(sub))


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
        responses=answers.BOARD_PAGE,
    )
    def get(self, request: Request) -> Response:
        filters = {k: request.query_params.get(k, "") for k in FILTER_KEYS}
        rows = leaderboard_rows(filters, request.query_params.get("sort", "-spearman"))
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


class Compare(APIView):
    """A vs B: paired bootstrap of the difference in each pointwise metric between two
    finished submissions on the same dataset, split and target (on a hidden split only
    submissions that score every point, rounded: :func:`submissions.comparison.resolve_pair`).
    Public rows for anyone, a signed-in user's own submissions too (403 otherwise); a
    comparison not yet cached answers 429 past the client address's compute rate."""

    permission_classes = [AllowAny]
    throttle_scope = "compare"

    @extend_schema(
        parameters=[OpenApiParameter("a", int, required=True), OpenApiParameter("b", int, required=True)],
        responses=answers.CompareAnswer,
    )
    def get(self, request: Request) -> Response:
        a, b = comparison.resolve_pair(request.query_params, request.user)
        return Response(comparison.comparison_for(a, b, throttling.client_address(request)))


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

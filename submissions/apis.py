"""The submissions' API calls (Django REST framework; the site's other calls: :mod:`leaderboard.apis`,
:mod:`board.apis`, :mod:`workers.apis`; their refusals, :class:`submissions.services.SubmissionRejected` and
:mod:`submissions.comparison`'s, are answered by :mod:`qval_site.api_errors`).

``POST /api/v1/submissions/``                      multipart upload of a predictions file, or with
                                                   ``kind=container`` of a method container archive
``GET  /api/v1/submissions/<id>/``                 state, error, problems and results
``PATCH /api/v1/submissions/<id>/``                the owner changes its method card or visibility (``public``)
``GET  /api/v1/compare/``                          ?a=<id>&b=<id> paired bootstrap of A vs B

What they read and the shapes of their answers: :mod:`submissions.serializers`.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework import status
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import throttling

from . import comparison
from .models import Submission
from .selectors import visible_to
from .serializers import (
    CardChange,
    CompareAnswer,
    ContainerSubmissionsAnswer,
    ContainerUpload,
    SubmissionAnswer,
    SubmissionUpload,
    submission_payload,
)
from .services import (
    MethodCard,
    SubmissionRequest,
    change_card,
    container_requests,
    create_container_submissions,
    create_submission,
)
from .uploads import too_large


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
                       "Created", [SubmissionAnswer, ContainerSubmissionsAnswer], None)})
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


class SubmissionDetail(APIView):
    """One of the caller's submissions, or a baseline run (with its config and progress); PATCH: its owner
    changes its method card or makes it public or private (:func:`submissions.services.change_card`)."""

    permission_classes = [IsAuthenticated]

    @extend_schema(responses=SubmissionAnswer)
    def get(self, request: Request, pk: int) -> Response:
        sub = Submission.objects.filter(visible_to(request.user), pk=pk).first()
        if sub is None:
            return Response({"errors": {"id": [f"no submission {pk} of yours and no baseline run {pk}"]}},
                            status=status.HTTP_404_NOT_FOUND)
        return Response(submission_payload(sub))

    @extend_schema(request=CardChange, responses=SubmissionAnswer)
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
        responses=CompareAnswer,
    )
    def get(self, request: Request) -> Response:
        a, b = comparison.resolve_pair(request.query_params, request.user)
        return Response(comparison.comparison_for(a, b, throttling.client_address(request)))

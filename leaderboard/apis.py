"""The datasets' API calls (Django REST framework; the site's other calls: :mod:`submissions.apis`,
:mod:`board.apis`, :mod:`workers.apis`; their refusals: :mod:`qval_site.api_errors`).

``GET  /api/v1/datasets/``                         dataset versions and their splits
``GET  /api/v1/datasets/<key>/download/``          ?split=dev|test&format=jsonl|csv|parquet|images, or
                                                   ?format=card|zip for the whole dataset
``GET  /api/v1/builds/``                           recent dataset builds with their progress

The answers' shapes (:class:`DatasetAnswer`, :class:`BuildAnswer`) are what ``/api/v1/schema/`` and the API docs
page say the calls return (``tests/test_site_pages.py`` checks them against real answers).
"""

from __future__ import annotations

from django.http import Http404, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from qval.schema import PUBLIC_SPLITS

from .exports import DATASET_FORMATS, SPLIT_FORMATS, download_response
from .models import Dataset, DatasetBuild
from .task_table import split_counts


class DatasetAnswer(serializers.Serializer):
    """One dataset version (``GET /api/v1/datasets/``)."""

    key = serializers.CharField(help_text="slug@version: how every other call names it")
    slug = serializers.CharField()
    version = serializers.CharField()
    name = serializers.CharField()
    environment = serializers.CharField(help_text="environment slug")
    fingerprint = serializers.CharField(help_text="hash of the dataset's files")
    modalities = serializers.ListField(child=serializers.CharField(), help_text="text and/or image")
    splits = serializers.DictField(help_text="per split: states, candidates, tasks and labels_public")
    manifest = serializers.DictField(help_text="provenance and labelling settings (what a local run needs)")
    download = serializers.URLField(help_text="the download call of this dataset")


class BuildAnswer(serializers.Serializer):
    """One dataset build (``GET /api/v1/builds/``)."""

    id = serializers.IntegerField()
    name = serializers.CharField(help_text="builder name")
    status = serializers.ChoiceField(choices=["queued", "running", "finished", "failed"])
    stage = serializers.CharField()
    done = serializers.IntegerField()
    total = serializers.IntegerField()
    percent = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    updated_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    dataset = serializers.CharField(help_text="the key of the dataset it built, once finished")
    fingerprint = serializers.CharField()
    error = serializers.CharField()
    worker = serializers.CharField()
    stage_started_at = serializers.DateTimeField(allow_null=True)
    seconds_left = serializers.IntegerField(allow_null=True, help_text="estimate of the current stage")
    time_left = serializers.CharField(help_text="the same in words")


def _dataset(key: str) -> Dataset:
    ds = Dataset.lookup(key)
    if ds is None:
        raise Http404(f"no dataset {key}")
    return ds


class DatasetList(APIView):
    """Every dataset version with its splits and counts (states, tasks and states per task type:
    :func:`leaderboard.task_table.split_counts`)."""

    permission_classes = [AllowAny]

    @extend_schema(responses=DatasetAnswer(many=True))
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
                   responses=BuildAnswer(many=True))
    def get(self, request: Request) -> Response:
        builds = DatasetBuild.objects.all()
        if request.query_params.get("name"):
            builds = builds.filter(name=request.query_params["name"])
        return Response([b.as_dict() for b in builds[:50]])

"""HTTP endpoints of workers (:mod:`workers.jobs`; a :class:`workers.jobs.JobRefused` is answered by
:mod:`qval_site.api_errors`) and the public status of the queues.

Remote job protocol (``Authorization: Job <token>``, ``X-QVal-Worker: <name>``):

``POST /api/v1/jobs/<id>/start``       start the job; answers its spec (split, target, limits, archive hash; a
                                       campaign's baseline run: ``kind: baseline``, method, backbone, seed, options)
``GET  /api/v1/jobs/<id>/input``       the ``/input`` folder as a tar (no labels)
``GET  /api/v1/jobs/<id>/archive``     the uploaded image archive
``GET  /api/v1/jobs/<id>/dataset``     a baseline run's split of the dataset as a tar (no labels unless its method
                                       reads them)
``POST /api/v1/jobs/<id>/heartbeat``   the job is alive; JSON ``progress`` (done, total, tokens) optional
``POST /api/v1/jobs/<id>/result``      multipart: ``run`` (JSON: error, exit_code, wall_s, stdout, stderr,
                                       token_usage, or platform_error; a baseline run: num_nan, config) and
                                       ``predictions``; spends the token

``POST /api/v1/workers/heartbeat``     ``Authorization: Worker <QVAL_WORKER_KEY>``; JSON ``name``, ``queues``, ``current``
``POST /api/v1/workers/campaign``      ``Authorization: Worker <QVAL_WORKER_KEY>``; JSON ``backbone``, optional
                                       ``description``, ``datasets``, ``methods``, ``targets``: queue a GPU campaign
``GET  /api/v1/workers/campaign``      the same key; ``?backbone=NAME``: the campaign's runs and their states
``GET  /api/v1/status/``               queues, depths, running jobs, workers, recent platform failures
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from submissions import baselines
from submissions.services import resolve_dataset

from . import jobs, selectors
from .models import WorkerHeartbeat


def _credential(request: Request, keyword: str) -> str:
    scheme, _, value = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return value.strip() if scheme == keyword else ""


class JobView(APIView):
    """A remote job request: the token is checked by :mod:`workers.jobs`, not by a user login."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]

    def token(self, request: Request) -> str:
        return _credential(request, "Job")

    def worker(self, request: Request) -> str:
        return request.META.get("HTTP_X_QVAL_WORKER", "").strip() or "unnamed"


class JobStart(JobView):
    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, pk: int) -> Response:
        return Response(jobs.start(pk, self.token(request), self.worker(request)))


class JobInput(JobView):
    @extend_schema(responses={(200, "application/x-tar"): OpenApiTypes.BINARY})
    def get(self, request: Request, pk: int) -> Response | FileResponse:
        sub = jobs.running(pk, self.token(request))
        return FileResponse(jobs.input_tar(sub), as_attachment=True, filename=f"input-{pk}.tar",
                            content_type="application/x-tar")


class JobArchive(JobView):
    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY})
    def get(self, request: Request, pk: int) -> Response | FileResponse:
        sub = jobs.container_job(jobs.running(pk, self.token(request)))
        return FileResponse(sub.file.open("rb"), as_attachment=True, filename=f"{sub.sha256}.image",
                            content_type="application/octet-stream")


class JobDataset(JobView):
    @extend_schema(responses={(200, "application/x-tar"): OpenApiTypes.BINARY})
    def get(self, request: Request, pk: int) -> Response | FileResponse:
        sub = jobs.running(pk, self.token(request))
        return FileResponse(jobs.dataset_tar(sub), as_attachment=True, filename=f"dataset-{pk}.tar",
                            content_type="application/x-tar")


class JobHeartbeat(JobView):
    parser_classes = [JSONParser]

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, pk: int) -> Response:
        progress = request.data.get("progress") if isinstance(request.data, dict) else None
        try:
            jobs.heartbeat(pk, self.token(request), progress)
        except ValueError as exc:
            return Response({"detail": str(exc)}, status=400)
        return Response({"ok": True})


class JobResult(JobView):
    parser_classes = [MultiPartParser]

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, pk: int) -> Response:
        upload = request.FILES.get("predictions")
        try:
            jobs.accept_result(pk, self.token(request), str(request.data.get("run") or ""),
                               upload.read() if upload is not None else None)
        except ValueError as exc:
            return Response({"detail": str(exc)}, status=400)
        return Response({"ok": True}, status=202)


class WorkerHeartbeatView(APIView):
    """A remote worker registers and reports, with ``QVAL_WORKER_KEY``."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    parser_classes = [JSONParser]

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        key = settings.QVAL_WORKER_KEY
        if not key or not hmac.compare_digest(_credential(request, "Worker").encode(), key.encode()):
            return Response({"detail": "unknown worker key"}, status=403)
        name = request.data.get("name")
        current = request.data.get("current")
        if not isinstance(name, str) or not name.strip():
            return Response({"detail": "name: expected the worker's name"}, status=400)
        if current is not None and not isinstance(current, int):
            return Response({"detail": "current: expected a submission id or null"}, status=400)
        jobs.register(name.strip(), WorkerHeartbeat.REMOTE, str(request.data.get("queues") or ""), current)
        return Response({"ok": True})


class CampaignView(APIView):
    """A GPU campaign (:func:`submissions.baselines.queue_campaign`), queued and followed with ``QVAL_WORKER_KEY``
    by ``scripts/gpu-campaign.sh`` (:mod:`qval.campaign`)."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    parser_classes = [JSONParser]

    def refused(self, request: Request) -> Response | None:
        key = settings.QVAL_WORKER_KEY
        if not key or not hmac.compare_digest(_credential(request, "Worker").encode(), key.encode()):
            return Response({"detail": "unknown worker key"}, status=403)
        return None

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        if (refusal := self.refused(request)) is not None:
            return refusal
        data = request.data if isinstance(request.data, dict) else {}
        backbone, description = data.get("backbone"), data.get("description", "")
        lists = {name: data.get(name) for name in ("datasets", "methods", "targets")}
        if not isinstance(backbone, str) or not backbone.strip():
            return Response({"detail": "backbone: expected the name of the backbone the worker serves"}, status=400)
        if not isinstance(description, str):
            return Response({"detail": "description: expected a string"}, status=400)
        for name, value in lists.items():
            if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
                return Response({"detail": f"{name}: expected a list of strings"}, status=400)
        if lists["targets"] is not None and not set(lists["targets"]) <= {"q", "v"}:
            return Response({"detail": "targets: expected q and/or v"}, status=400)
        datasets = None if lists["datasets"] is None else [resolve_dataset(key) for key in lists["datasets"]]
        queued = baselines.queue_campaign(backbone.strip(), description, datasets, lists["methods"],
                                          lists["targets"] or baselines.REFERENCE_TARGETS)
        return Response({"backbone": backbone.strip(), "queued": [s.pk for s in queued],
                         "runs": baselines.campaign_runs(backbone.strip())}, status=201)

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        if (refusal := self.refused(request)) is not None:
            return refusal
        backbone = str(request.query_params.get("backbone") or "").strip()
        if not backbone:
            return Response({"detail": "backbone: expected ?backbone=NAME"}, status=400)
        return Response({"backbone": backbone, "runs": baselines.campaign_runs(backbone)})


class Status(APIView):
    """The public status of queues, running jobs, workers and recent platform failures."""

    permission_classes = [AllowAny]

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        return Response(selectors.status())


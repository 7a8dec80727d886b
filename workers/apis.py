"""HTTP endpoints of workers (:mod:`workers.jobs`; a :class:`workers.jobs.JobRefused` is answered by
:mod:`qval_site.api_errors`) and the public status of the queues.

Remote job protocol (``Authorization: Job <token>``, ``X-QVal-Worker: <name>``):

``POST /api/v1/jobs/<id>/start``       start the job; answers its spec (split, target, limits, archive hash)
``GET  /api/v1/jobs/<id>/input``       the ``/input`` folder as a tar (no labels)
``GET  /api/v1/jobs/<id>/archive``     the uploaded image archive
``POST /api/v1/jobs/<id>/heartbeat``   the job is alive
``POST /api/v1/jobs/<id>/result``      multipart: ``run`` (JSON: error, exit_code, wall_s, stdout, stderr,
                                       token_usage, or platform_error) and ``predictions``; spends the token

``POST /api/v1/workers/heartbeat``     ``Authorization: Worker <QVAL_WORKER_KEY>``; JSON ``name``, ``queues``, ``current``
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
        sub = jobs.running(pk, self.token(request))
        return FileResponse(sub.file.open("rb"), as_attachment=True, filename=f"{sub.sha256}.image",
                            content_type="application/octet-stream")


class JobHeartbeat(JobView):
    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, pk: int) -> Response:
        jobs.heartbeat(pk, self.token(request))
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


class Status(APIView):
    """The public status of queues, running jobs, workers and recent platform failures."""

    permission_classes = [AllowAny]

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        return Response(selectors.status())


"""The API's one exception handler (``REST_FRAMEWORK["EXCEPTION_HANDLER"]``): the project's own refusals, raised
by the services a view calls, become the answers below; anything else goes to DRF's default handler (its
``APIException`` subclasses, ``Http404`` and ``PermissionDenied``), and an exception neither knows stays a 500.

- :class:`submissions.services.SubmissionRejected`: ``{"errors": {field: [message]}}``, its status (400, 404, 409,
  429);
- :class:`board.aggregates.InvalidSelection`: ``{"errors": {field: [message]}}``, 400;
- :class:`submissions.comparison.ComparisonError`: ``{"errors": errors}``, its status (400, 403, 409);
- :class:`submissions.comparison.ComparisonBusy`: ``{"detail": message}``, 429 with ``Retry-After``;
- :class:`workers.jobs.JobRefused`: ``{"detail": message}``, its status.

Unlike DRF's own exceptions these do not mark a transaction for rollback: a refusal is an answer, as it was when
each view caught them itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from board.aggregates import InvalidSelection
from submissions.comparison import ComparisonBusy, ComparisonError
from submissions.services import SubmissionRejected
from workers.jobs import JobRefused


def _rejected(exc: SubmissionRejected) -> Response:
    return Response({"errors": {exc.field: [exc.message]}}, status=exc.status)


def _invalid_selection(exc: InvalidSelection) -> Response:
    return Response({"errors": {exc.field: [exc.message]}}, status=status.HTTP_400_BAD_REQUEST)


def _not_comparable(exc: ComparisonError) -> Response:
    return Response({"errors": exc.errors}, status=exc.status)


def _busy(exc: ComparisonBusy) -> Response:
    return Response({"detail": exc.message}, status=status.HTTP_429_TOO_MANY_REQUESTS,
                    headers={"Retry-After": str(int(exc.retry_after) + 1)})


def _job_refused(exc: JobRefused) -> Response:
    return Response({"detail": exc.message}, status=exc.status)


ANSWERS: dict[type[Exception], Callable[[Any], Response]] = {
    SubmissionRejected: _rejected,
    InvalidSelection: _invalid_selection,
    ComparisonError: _not_comparable,
    ComparisonBusy: _busy,
    JobRefused: _job_refused,
}
"""Each domain exception and the answer it gets (its own class or the nearest base class listed)."""


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """The answer to ``exc`` raised by an API view: :data:`ANSWERS`, else DRF's default (``None``: a 500)."""
    for cls in type(exc).__mro__:
        answer = ANSWERS.get(cls)
        if answer is not None:
            return answer(exc)
    return drf_exception_handler(exc, context)

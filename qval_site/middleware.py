"""Middleware run around every view: request checks, and the server time of each response."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest


def _nul_in(request: HttpRequest) -> str | None:
    """What part of the request carries a NUL byte (PostgreSQL text cannot hold one), if any."""
    if "\x00" in request.path:
        return "the path"
    for key, values in request.GET.lists():
        if "\x00" in key or any("\x00" in v for v in values):
            return f"query parameter {key.replace(chr(0), '')!r}"
    return None


class RejectInvalidParametersMiddleware:
    """Answer 400 with the reason to a request whose path or query parameters hold a NUL byte,
    instead of letting it reach the database as a 500."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        where = _nul_in(request)
        if where is not None:
            return HttpResponseBadRequest(f"invalid request: {where} contains a NUL byte (\\x00)",
                                          content_type="text/plain; charset=utf-8")
        return self.get_response(request)


class ServerTiming:
    """Adds ``Server-Timing: app;dur=<ms>, cpu;dur=<ms>``: the wall time of the view and the CPU time of
    the thread that ran it (what ``benchmarks/pages.py`` reads)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        start, cpu = time.perf_counter(), time.thread_time()
        response = self.get_response(request)
        response["Server-Timing"] = (f"app;dur={(time.perf_counter() - start) * 1000:.2f}, "
                                     f"cpu;dur={(time.thread_time() - cpu) * 1000:.2f}")
        return response

"""The public status page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from . import selectors


def status(request: HttpRequest) -> HttpResponse:
    """Queues and their depth, jobs running, workers and their heartbeats, recent platform failures."""
    return render(request, "workers/status.html", {"status": selectors.status()})

"""Reads of submissions shared by the pages and the API."""

from __future__ import annotations

from django.db.models import Q

from .models import Submission


def visible_to(user) -> Q:  # type: ignore[no-untyped-def]
    """The submissions a signed-in ``user`` may open: their own, and every baseline run (the platform's)."""
    return Q(user=user) | Q(source=Submission.SOURCE_BASELINE)

"""Rate limits on the expensive endpoints (``QVAL_THROTTLE_RATES``).

A view names its ``throttle_scope`` (``compare``, ``upload``, ``download``); the
rate is ``QVAL_THROTTLE_RATES["<scope>_anon"]`` per client address for anonymous callers and
``["<scope>_user"]`` per account for signed-in ones. Plain Django views use
:func:`allow` with the same rates. Counts live in the default cache (Redis, shared by every
process); the client is counted by :func:`qval_site.clients.limit_key`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from rest_framework.throttling import SimpleRateThrottle

from qval_site.clients import limit_key


class SiteThrottle(SimpleRateThrottle):
    """DRF throttle of the view's ``throttle_scope``, split into anonymous (per IP) and per-user rates."""

    def __init__(self) -> None:  # the rate depends on the request; see allow_request
        self.scope = ""

    def get_rate(self) -> str | None:
        return settings.QVAL_THROTTLE_RATES.get(self.scope)

    def allow_request(self, request: Any, view: Any) -> bool:
        base = getattr(view, "throttle_scope", None)
        if not base:
            return True
        signed_in = bool(getattr(request.user, "is_authenticated", False))
        self.scope = f"{base}_{'user' if signed_in else 'anon'}"
        self.rate = self.get_rate()
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_ident(self, request: Any) -> str:
        """The client address (IPv6: its /64), ``X-Forwarded-For`` read only behind ``QVAL_TRUSTED_PROXIES``
        (:mod:`qval_site.clients`; DRF's own rule believes the header)."""
        return limit_key(request)

    def get_cache_key(self, request: Any, view: Any) -> str:
        user = getattr(request, "user", None)
        ident = user.pk if user is not None and user.is_authenticated else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


class _Scope:
    def __init__(self, scope: str) -> None:
        self.throttle_scope = scope


def allow(request: HttpRequest, scope: str) -> tuple[bool, float | None]:
    """Whether a plain Django view may serve ``request`` under ``scope``, and if not, the seconds to wait."""
    throttle = SiteThrottle()
    if throttle.allow_request(request, _Scope(scope)):
        return True, None
    return False, throttle.wait()

"""Rate limits on the expensive endpoints (``QVAL_THROTTLE_RATES``).

A view names its ``throttle_scope`` (``compare``, ``upload``, ``download``); the
rate is ``QVAL_THROTTLE_RATES["<scope>_anon"]`` per client address for anonymous callers and
``["<scope>_user"]`` per account for signed-in ones. Plain Django views use
:func:`allow` with the same rates. Work that costs the server whoever asks (a comparison
computed afresh) is limited per client address, signed in or not: :func:`take` counts it
at ``QVAL_THROTTLE_RATES[scope]`` and :func:`exclusive` bounds how many run at a time.
Counts and markers live in the default cache (Redis, shared by every process); the client is
counted by :func:`accounts.clients.limit_key`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.cache import cache

from django.conf import settings
from django.http import HttpRequest
from rest_framework.throttling import SimpleRateThrottle

from accounts.clients import limit_key


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
        (:mod:`accounts.clients`; DRF's own rule believes the header)."""
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


class _AddressThrottle(SimpleRateThrottle):
    """``QVAL_THROTTLE_RATES[scope]`` per client address ``ident``, whoever is signed in."""

    def __init__(self, scope: str, ident: str) -> None:
        self.scope, self.ident = scope, ident
        super().__init__()

    def get_rate(self) -> str | None:
        return settings.QVAL_THROTTLE_RATES.get(self.scope)

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.ident}


def client_address(request: HttpRequest) -> str:
    """The address a request is counted under (as :class:`SiteThrottle` counts anonymous callers)."""
    return SiteThrottle().get_ident(request)


def take(address: str, scope: str) -> float | None:
    """Count one event of ``scope`` for client ``address``: ``None`` when it is allowed, else
    the seconds until it would be (a scope without a rate is never limited)."""
    throttle = _AddressThrottle(scope, address)
    if throttle.rate is None or throttle.allow_request(None, None):
        return None
    return throttle.wait() or 1.0


@contextmanager
def exclusive(key: str, timeout: float, slots: int = 1) -> Iterator[bool]:
    """Hold a marker in the shared cache while the block runs: ``key`` itself, or with
    ``slots`` > 1 any free one of ``key:0`` ... ``key:<slots - 1>`` (at most ``slots`` holders
    at a time).  Yields whether one is held here (it is removed at the end; ``timeout``
    bounds how long a marker left by a dead process blocks others)."""
    keys = [key] if slots == 1 else [f"{key}:{i}" for i in range(slots)]
    held = next((k for k in keys if cache.add(k, 1, timeout=timeout)), None)
    try:
        yield held is not None
    finally:
        if held is not None:
            cache.delete(held)

"""The client address of a request, the key of every per-address limit (throttles, sign-ups).

``REMOTE_ADDR`` is the peer that opened the connection. ``X-Forwarded-For`` is read only when that
peer is one of ``QVAL_TRUSTED_PROXIES`` (addresses or networks, none by default): then the hops are
walked from the right, past every trusted proxy, and the first untrusted one is the client. Hops
further left were written by the client itself, so rotating them changes nothing.

An IPv6 subscriber usually gets a whole /64, so limits count an IPv6 client by its /64
(:func:`limit_key`, as allauth's sign-up limit does).
"""

from __future__ import annotations

import functools
import ipaddress

from django.conf import settings
from django.http import HttpRequest

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=8)
def _networks(proxies: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)


def _trusted(address: str, networks: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in networks)


def client_address(request: HttpRequest) -> str:
    """The address of the client behind ``request``: ``REMOTE_ADDR``, or behind trusted proxies the
    right-most ``X-Forwarded-For`` hop that is not a trusted proxy (the left-most hop when all are)."""
    remote = str(request.META.get("REMOTE_ADDR") or "")
    networks = _networks(tuple(settings.QVAL_TRUSTED_PROXIES))
    if not _trusted(remote, networks):
        return remote
    hops = [h.strip() for h in str(request.META.get("HTTP_X_FORWARDED_FOR") or "").split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, networks):
            return hop
    return hops[0] if hops else remote


def limit_key(request: HttpRequest) -> str:
    """What a per-address limit counts ``request`` under: its client address, or for IPv6 the /64 around it."""
    address = client_address(request)
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    return str(ipaddress.ip_network(f"{ip}/64", strict=False)) if ip.version == 6 else address

"""The shared cache (qval_site/cache.py) against a Redis that is not there and one that is."""

from __future__ import annotations

import socket

from qval_site.cache import FallbackRedisCache
from tests.conftest import TEST_CACHE_URL


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_an_unreachable_redis_falls_back_to_memory_and_counts_there() -> None:
    cache = FallbackRedisCache(f"redis://127.0.0.1:{_closed_port()}/0", {"OPTIONS": {"socket_connect_timeout": 1}})
    assert cache.add("marker", 1, timeout=30) is True
    assert cache.add("marker", 1, timeout=30) is False  # held: an exclusive() slot stays exclusive per process
    cache.set("history", [1.0, 2.0])
    assert cache.get("history") == [1.0, 2.0]
    cache.delete("marker")
    assert cache.get("marker") is None


def test_a_reachable_redis_is_used_and_memory_is_not() -> None:
    url = TEST_CACHE_URL  # the session's Redis (scripts/ensure-services.sh starts it)
    cache = FallbackRedisCache(url, {})
    cache.set("qval:test:shared", 7)
    try:
        assert FallbackRedisCache(url, {}).get("qval:test:shared") == 7  # another process's view of it
        assert cache._memory.get("qval:test:shared") is None
    finally:
        cache.delete("qval:test:shared")

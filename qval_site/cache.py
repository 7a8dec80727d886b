"""The shared cache, degraded rather than down: Redis while it answers, this process's memory while not.

The default cache holds rate-limit counters, sign-up counters and computed comparisons
(:mod:`accounts.throttling`, :mod:`submissions.comparison`). When Redis does not answer, an
upload must still be stored (its check waits for the broker) and a page must still render, so
every call falls back to a per-process :class:`~django.core.cache.backends.locmem.LocMemCache`:
limits are then counted per process (still bounded, by the number of processes) until Redis is
back, and each fall-back is logged once per outage.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)
_METHODS = ("add", "get", "set", "touch", "delete", "get_many", "has_key", "incr", "set_many", "delete_many", "clear")


class FallbackRedisCache(RedisCache):
    """Django's Redis cache whose calls go to a per-process memory cache while Redis is unreachable."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._memory = LocMemCache(f"fallback:{server}", {"TIMEOUT": params.get("TIMEOUT", 300)})
        self._down = False


def _fallback(name: str) -> Any:
    redis_method = getattr(RedisCache, name)

    def method(self: FallbackRedisCache, *args: Any, **kwargs: Any) -> Any:
        try:
            result = redis_method(self, *args, **kwargs)
        except _DOWN as exc:
            if not self._down:
                log.warning("the shared cache (Redis) is unreachable (%s): counting in this process's memory", exc)
                self._down = True
            return getattr(self._memory, name)(*args, **kwargs)
        if self._down:
            log.warning("the shared cache (Redis) answers again")
            self._down = False
        return result

    method.__name__ = name
    method.__doc__ = redis_method.__doc__
    return method


for _name in _METHODS:
    setattr(FallbackRedisCache, _name, _fallback(_name))

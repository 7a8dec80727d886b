"""Where state is kept: the database and the cache every process shares.

``DATABASE_URL``            default ``postgres://postgres@127.0.0.1:5432/qval``; ``sqlite:///path``
                            for the embedded laptop fallback.
``QVAL_CACHE_URL``          the cache every process shares: throttle and sign-up counters, comparisons
                            (default ``redis://127.0.0.1:6379/1``; ``locmem://`` for a per-process
                            cache, the embedded laptop fallback only).
"""

from __future__ import annotations

import dj_database_url

from .env import env

DATABASES = {
    "default": dj_database_url.parse(
        env.str("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/qval"),
        conn_max_age=60,
        # A connection kept from before a PostgreSQL restart is checked and replaced, not used.
        conn_health_checks=True,
    )
}

# The cache: rate-limit counters (throttles, sign-ups) and computed comparisons. Redis by default,
# one cache shared by every web process, so that a limit is one limit and not one per process;
# ``QVAL_CACHE_URL=locmem://`` keeps it in each process's memory (the embedded SQLite fallback of
# scripts/up.sh, where there is no Redis). While Redis does not answer, each process counts in its own
# memory (qval_site/cache.py) rather than failing the request.
QVAL_CACHE_URL = env.str("QVAL_CACHE_URL", default="") or "redis://127.0.0.1:6379/1"
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "qval"}
        if QVAL_CACHE_URL.startswith("locmem:")
        else {"BACKEND": "qval_site.cache.FallbackRedisCache", "LOCATION": QVAL_CACHE_URL,
              "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 2}}
    )
}

"""The platform's rules and limits: uploads, quotas, the bootstrap, the information budget and fresh splits,
storage, scoring work, comparisons, the deadlines of a predictions file and the rates of the expensive endpoints.

``QVAL_MAX_UPLOAD_MB``      largest accepted predictions file (default 100).
``QVAL_TEST_QUOTA_PER_DAY`` test-split submissions per user per day (default 5).
``QVAL_BOOTSTRAP_RESAMPLES`` bootstrap resamples behind every confidence interval (default 1000).
``QVAL_BUDGET_SCALE``       scales every hidden split's information budget, floor(scale * points / 25) numbers
                            (``qval.budget``; default 1).
``QVAL_REFRESH_MIN_INTERVAL_S`` a spent budget asks for a fresh split at most this often per dataset (default 86400).
``QVAL_SPLIT_REFRESH_DAYS`` a hidden split this many days old is replaced by a fresh one (default 0: never).
``QVAL_USER_STORAGE_MB``    uploaded bytes one account may keep stored (default 10240).
``QVAL_COMPARE_CONCURRENCY`` comparisons (A vs B) not yet cached the whole site computes at once (default 2).
``QVAL_SCORING_WORK_PER_HOUR`` prediction rows (ids x samples) of one account's files accepted for scoring
                            per hour (default 10000000).
``QVAL_THROTTLE_RATES``     JSON object overriding rates of the expensive endpoints, e.g.
                            ``{"compare_anon": "10/min"}`` (accounts/throttling.py).
``QVAL_RECEIVED_S``         a submission still ``received``/``validating`` after this long is failed (default 3600).
``QVAL_SCORING_S``          a predictions file ``queued``/``scoring`` for longer than this is failed (default 3600).
"""

from __future__ import annotations

import json

from django.core.exceptions import ImproperlyConfigured

from .env import env

QVAL_MAX_UPLOAD_BYTES = int(env.float("QVAL_MAX_UPLOAD_MB", default=100.0) * 1024 * 1024)
QVAL_TEST_QUOTA_PER_DAY = env.int("QVAL_TEST_QUOTA_PER_DAY", default=5)
QVAL_BOOTSTRAP_RESAMPLES = env.int("QVAL_BOOTSTRAP_RESAMPLES", default=1000)
QVAL_BUDGET_SCALE = env.float("QVAL_BUDGET_SCALE", default=1.0)
QVAL_REFRESH_MIN_INTERVAL_S = env.int("QVAL_REFRESH_MIN_INTERVAL_S", default=86400)
QVAL_SPLIT_REFRESH_DAYS = env.float("QVAL_SPLIT_REFRESH_DAYS", default=0.0)
QVAL_USER_STORAGE_BYTES = int(env.float("QVAL_USER_STORAGE_MB", default=10240.0) * 1024 * 1024)
QVAL_SCORING_WORK_PER_HOUR = env.int("QVAL_SCORING_WORK_PER_HOUR", default=10000000)
QVAL_COMPARE_CONCURRENCY = env.int("QVAL_COMPARE_CONCURRENCY", default=2)
# Deadlines of the non-final states of a predictions file (the reaper fails it past them; the
# platform's fault, so it does not count towards the quota). Containers: QVAL_CONTAINER_*_S below.
QVAL_RECEIVED_S = env.float("QVAL_RECEIVED_S", default=3600.0)
QVAL_SCORING_S = env.float("QVAL_SCORING_S", default=3600.0)
# Rates of the expensive endpoints (accounts/throttling.py): "<scope>_anon" per client address,
# "<scope>_user" per account. A scope without a rate is not limited. "compare_compute": comparisons
# not yet cached that one client address may have computed, signed in or not (one at a time).
QVAL_THROTTLE_RATES = {
    "compare_anon": "10/min",
    "compare_user": "60/min",
    "compare_compute": "6/min",
    "upload_user": "30/min",
    "download_anon": "30/min",
    "download_user": "120/min",
}
try:
    QVAL_THROTTLE_RATES.update(json.loads(env.str("QVAL_THROTTLE_RATES", default="") or "{}"))
except (json.JSONDecodeError, TypeError, ValueError) as exc:
    raise ImproperlyConfigured(f"QVAL_THROTTLE_RATES is not a JSON object of rates: {exc}") from exc

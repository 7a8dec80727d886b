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
``QVAL_MAX_UPLOAD_MB``      largest accepted predictions file (default 100).
``QVAL_TEST_QUOTA_PER_DAY`` test-split submissions per user per day (default 5).
``QVAL_BOOTSTRAP_RESAMPLES`` bootstrap resamples behind every confidence interval (default 1000).
``QVAL_CACHE_URL``          ``redis://host:port/db`` for a shared cache (default: local memory).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url

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
    "leaderboard",
    "submissions",
    "workers",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
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

# Cache of computed comparisons (A vs B paired bootstraps; finished submissions never change).
# Local memory by default: it needs no service, so it also works in the SQLite/in-process
# fallback, and a cold cache only costs a recomputation. ``QVAL_CACHE_URL=redis://…`` shares
# one Redis cache between the web processes instead.
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": os.environ["QVAL_CACHE_URL"]}
        if os.environ.get("QVAL_CACHE_URL")
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "qval"}
    )
}
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticatedOrReadOnly"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # ``?format=`` selects a download's file format, not a DRF renderer.
    "URL_FORMAT_OVERRIDE": None,
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
CELERY_TASK_ROUTES = {"workers.tasks.score_submission": {"queue": "scoring"}}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ALWAYS_EAGER = _flag("QVAL_INPROCESS_WORKER")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

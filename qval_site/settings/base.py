"""What every process of the site runs with: the apps, middleware, templates, static files, uploads, the API's
framework and the logs.

``DEBUG``                   ``1``/``true`` to enable debug mode (default off).
``QVAL_DATA_DIR``           where datasets and uploads live (default ``./var``).
``QVAL_LOG_FORMAT``         ``json`` (default: one JSON object per line, with ``submission_id``) or ``plain``.
``LOG_LEVEL``               root log level (default ``INFO``).
"""

from __future__ import annotations

from pathlib import Path

from .env import env

BASE_DIR = Path(__file__).resolve().parent.parent.parent

DEBUG = env.bool("DEBUG", default=False)
QVAL_DATA_DIR = Path(env.str("QVAL_DATA_DIR", default=str(BASE_DIR / "var"))).resolve()

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
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

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
# Logs: JSON lines (qval_site/logs.py) with the submission id on every line of its processing;
# QVAL_LOG_FORMAT=plain for one-line text. Celery keeps this configuration (no root hijack).
LOG_FORMAT = env.str("QVAL_LOG_FORMAT", default="json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "qval_site.logs.ContextFilter"}},
    "formatters": {
        "json": {"()": "qval_site.logs.JsonFormatter"},
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [submission %(submission_id)s] %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["context"]}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

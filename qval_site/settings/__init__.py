"""Settings for the QVal Leaderboard, read from environment variables with safe defaults (django-environ, through
:mod:`qval_site.settings.env`), one module per concern; ``DJANGO_SETTINGS_MODULE=qval_site.settings`` loads them
all. Each module's docstring lists the variables it reads:

- :mod:`.base`: apps, middleware, templates, static files, uploads, the API's framework, logs (``DEBUG``,
  ``QVAL_DATA_DIR``, ``QVAL_LOG_FORMAT``, ``LOG_LEVEL``);
- :mod:`.security`: the secret key and the test-split secret, hosts, accounts, trusted proxies, mail;
- :mod:`.database`: the database and the shared cache (``DATABASE_URL``, ``QVAL_CACHE_URL``);
- :mod:`.qval`: the platform's rules and limits (uploads, quotas, bootstrap, budgets, comparisons, rates);
- :mod:`.jobs`: method containers, backbones, baseline runs, gpu workers, heartbeats, reapers, dataset builds;
- :mod:`.celery`: the broker, the task routes, beat's schedule, redelivery (``CELERY_BROKER_URL``,
  ``QVAL_INPROCESS_WORKER``, ``QVAL_BROKER_VISIBILITY_S``).
"""

from .base import *  # noqa: F403
from .security import *  # noqa: F403
from .database import *  # noqa: F403
from .qval import *  # noqa: F403
from .jobs import *  # noqa: F403
from .celery import *  # noqa: F403

"""The Celery application. Queues are named by the work they do: ``scoring``, ``gpu``, ``datasets``."""
import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

from qval_site import logs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qval_site.settings")

TASK_MODULES = (
    "jobs.tasks",  # the one reaper of every kind of job (queue scoring)
    "workers.tasks",
    "workers.builds",  # dataset builds (queue datasets)
    "best_of_n.tasks",  # Best-of-N runs (queue gpu)
    "learning.tasks",  # training runs of the Learned family (queue gpu)
    "qval_site.tasks",  # seeding a built dataset's reference rows (queue scoring)
)
"""Every module that defines tasks: a worker imports them as it starts. A service sends a task of its own
app by name (``current_app.signature(NAME)``), so the task module may import the service."""

app = Celery("qval", include=TASK_MODULES)
app.config_from_object("django.conf:settings", namespace="CELERY")

# Every log line of a submission task carries the submission id (qval_site/logs.py).
task_prerun.connect(logs.bind_task, weak=False)
task_postrun.connect(logs.unbind_task, weak=False)

"""The Celery application. Queues are named by the work they do: ``scoring``, ``gpu``, ``datasets``."""
import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

from qval_site import logs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qval_site.settings")

app = Celery("qval")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])
app.autodiscover_tasks(["workers"], related_name="builds")  # dataset builds (queue datasets)
app.autodiscover_tasks(["workers"], related_name="best_of_n")  # Best-of-N runs (queue gpu)

# Every log line of a submission task carries the submission id (qval_site/logs.py).
task_prerun.connect(logs.bind_task, weak=False)
task_postrun.connect(logs.unbind_task, weak=False)
app.autodiscover_tasks(["learning"])  # training runs of the Learned family (queue gpu)

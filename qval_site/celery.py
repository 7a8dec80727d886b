"""The Celery application. Queues are named by the work they do: ``scoring``, ``gpu``, ``datasets``."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qval_site.settings")

app = Celery("qval")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["workers"])
app.autodiscover_tasks(["workers"], related_name="builds")  # dataset builds (queue datasets)
app.autodiscover_tasks(["learning"])  # training runs of the Learned family (queue gpu)

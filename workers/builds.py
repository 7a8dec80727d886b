"""Dataset builds on the Celery queue ``datasets``.

* ``build_dataset`` (queue ``datasets``; run those workers with ``--concurrency 1``) runs a
  builder of :data:`qval.build.BUILDERS` through :func:`leaderboard.building.run_build`: the
  :class:`~leaderboard.models.DatasetBuild` goes ``queued`` → ``running`` (stage, done/total
  saved at most once a second and at every stage's start and end) → ``finished`` with the loaded
  dataset's key and fingerprint, or ``failed`` with the reason.  The builder checkpoints into a
  stable work folder, so a build queued again after an interruption resumes.  A build that loaded
  its dataset then sends :data:`SEED_TASK` (queue ``scoring``, by name: the seeding sits in ``qval_site``,
  above this app) for it: a dataset that ``make up`` left building gets its reference rows (baselines,
  learned methods' training runs, Best-of-N runs) once it is ready.
* A build is a job like every other (:data:`leaderboard.building.JOB`): it beats while it runs, and the one
  reaper (``jobs.tasks.reap_jobs``) queues it again once when its worker is lost (it resumes from its checkpoint),
  and fails one without progress for ``QVAL_BUILD_STALL_S`` (hung) or never started.
* When a worker consuming ``datasets`` starts, the builds it was running when it died are failed
  at once (``worker restarted``).

Queue a build with :func:`leaderboard.building.enqueue` (``manage.py build_dataset NAME --queue``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import current_app, shared_task
from celery.signals import celeryd_after_setup

from leaderboard import building
from leaderboard.models import DatasetBuild

log = logging.getLogger(__name__)

SEED_TASK = "qval_site.tasks.seed_reference_rows"
"""The task (:mod:`qval_site.tasks`) that queues the reference rows of the datasets whose ids it is given
(:func:`qval_site.reference_rows.seed_reference_rows`), sent by name."""


@shared_task(bind=True, name="workers.builds.build_dataset", acks_late=True)
def build_dataset(self, build_id: int) -> str:  # type: ignore[no-untyped-def]
    """Run one queued build; return its final status."""
    b = building.start(build_id, self.request.hostname or "in-process")
    if b is None:
        status = DatasetBuild.objects.get(pk=build_id).status
        log.info("dataset build %s is %s; nothing to do", build_id, status)
        return status
    log.info("dataset build %s: %s started", b.pk, b.name)
    try:
        with building.JOB.beating(b):
            built = building.run_build(b.name, progress=building.Recorder(b.pk), refresh=b.refresh)
    except Exception as exc:  # noqa: BLE001 - every failure is recorded with its reason
        log.exception("dataset build %s (%s) failed", b.pk, b.name)
        return building.JOB.fail(b.pk, building.reason_of(exc), attempt=b.attempt)
    building.finish(b.pk, built)
    log.info("dataset build %s: %s %s at %s", b.pk, "loaded" if built.created else "already had",
             built.dataset.manifest.key, built.path)
    if built.loaded is not None:
        try:
            current_app.signature(SEED_TASK).delay([built.loaded.pk])
        except Exception:  # noqa: BLE001 - the build is done; `manage.py seed_reference_rows` queues them later
            log.exception("dataset build %s: sending the seeding of %s's reference rows failed", b.pk, built.loaded.key)
        else:
            log.info("dataset build %s: reference rows of %s sent to be queued", b.pk, built.loaded.key)
    return DatasetBuild.FINISHED


@celeryd_after_setup.connect
def fail_builds_of_a_dead_worker(sender: str, instance: Any, **kwargs: Any) -> None:
    """At the start of a worker consuming ``datasets``: the builds this worker (same name) was
    running died with it."""
    if "datasets" not in instance.app.amqp.queues.consume_from:
        return
    n = building.fail_worker_builds(sender)
    log.info("worker %s: %d interrupted dataset builds marked failed", sender, n)

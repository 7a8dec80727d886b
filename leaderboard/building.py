"""Running a dataset builder for the site: write the dataset under ``QVAL_DATASETS_DIR`` and load it.

Shared by ``manage.py build_dataset`` (inline) and the ``datasets`` queue's task
(:func:`workers.builds.build_dataset`, which :func:`enqueue` sends by name: its module imports this one);
both record the run in a :class:`DatasetBuild`, a job like every other (:data:`JOB`: claimed, beating while it
builds, requeued once when its worker is lost, failed past its deadline by the one reaper).

* The build writes into a staging folder ``QVAL_DATASETS_DIR/.build-<name>`` and keeps its
  checkpoint in ``QVAL_DATASETS_DIR/.work/<name>`` (:func:`work_dir`), so an interrupted build
  rerun by the command or the queue skips the states it already labelled; the checkpoint is
  removed once the dataset is written and loaded.
* The dataset ends up in ``QVAL_DATASETS_DIR/<slug>-<version>`` (with its ``images/`` folder)
  and is loaded by :func:`leaderboard.loading.load_dataset`.  A build whose ``slug@version``
  is already loaded with another fingerprint fails before any loaded file is touched.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

from django.conf import settings
from django.utils import timezone

from jobs.services import JobKind
from qval import build, schema
from qval.envs import registry
from qval.offthread import call_in_thread

from .loading import DatasetConflict, load_dataset
from .models import Dataset, DatasetBuild, dataset_folder

Progress = Callable[[int, int, str], None]

BUILD_TASK = "workers.builds.build_dataset"
"""The Celery task that runs a queued build (queue ``datasets``)."""


def datasets_dir() -> Path:
    return Path(settings.QVAL_DATASETS_DIR)


def work_dir(name: str) -> Path:
    """The checkpoint folder of builder ``name`` (stable across reruns, so a rerun resumes)."""
    return datasets_dir() / ".work" / name


@dataclass
class Built:
    """What :func:`run_build` made."""

    dataset: schema.Dataset
    path: Path
    loaded: Dataset | None
    created: bool


def _call_builder(name: str, out: Path, progress: Progress, checkpoint: Path, refresh: int) -> schema.Dataset:
    """``build.build`` in a thread of its own (:func:`qval.offthread.call_in_thread`: an environment may run
    an event loop in its thread, where Django refuses database calls), each progress report saved here."""
    return call_in_thread(
        lambda relay: build.build(registry.BUILDERS[name], out, progress=relay, work_dir=checkpoint, secret=settings.QVAL_TEST_SPLIT_SECRET,
                                  refresh=refresh),
        progress, name=f"build-{name}")


def run_build(name: str, progress: Progress | None = None, out: Path | None = None, load: bool = True,
              refresh: int = 0) -> Built:
    """Build dataset ``name`` (``refresh``: its fresh hidden split number ``refresh``, :func:`qval.build.refreshed`),
    write it to ``out`` (default :func:`leaderboard.models.dataset_folder`), optionally load it."""
    if name not in registry.BUILDERS:
        raise KeyError(f"unknown dataset {name!r}; choose one of {', '.join(registry.BUILDERS)}")
    report: Progress = progress or (lambda done, total, stage: None)
    staging = datasets_dir() / f".build-{name}{build.REFRESH_MARK}{refresh}" if refresh else datasets_dir() / f".build-{name}"
    if staging.exists():
        shutil.rmtree(staging)
    checkpoint = work_dir(name)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    ds = _call_builder(name, staging, report, checkpoint, refresh)
    m = ds.manifest
    fingerprint = m.fingerprint or ds.compute_fingerprint()
    report(0, 1, "write")
    existing = Dataset.objects.filter(slug=m.slug, version=m.version).first()
    if existing is not None and existing.fingerprint != fingerprint:
        raise DatasetConflict(
            f"{m.key} already exists with fingerprint {existing.fingerprint[:12]}…, "
            f"the new build has {fingerprint[:12]}…; a changed build needs a new version"
        )
    target = Path(out or dataset_folder(m.slug, m.version))
    if target.resolve() != staging.resolve():
        same = False
        if (target / "manifest.json").exists():
            try:
                same = schema.Dataset.read(target, settings.QVAL_TEST_SPLIT_SECRET).manifest.fingerprint == fingerprint
            except schema.SchemaError:
                same = False
        if same:
            shutil.rmtree(staging)  # identical files are there already (and may be being served)
        else:
            if target.exists():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(staging), str(target))
    # Round trip: the files on disk carry the same fingerprint; images now read from target/images.
    ds = schema.Dataset.read(target, settings.QVAL_TEST_SPLIT_SECRET)
    report(1, 1, "write")
    loaded, created = None, False
    if load:
        report(0, 1, "load")
        loaded, created = load_dataset(ds)
        report(1, 1, "load")
    if checkpoint.exists():
        shutil.rmtree(checkpoint)
    return Built(dataset=ds, path=target, loaded=loaded, created=created)


class Recorder:
    """A ``progress`` callback saving ``stage``/``done``/``total`` on a :class:`DatasetBuild`, and moving its
    deadline (:func:`stall_deadline`): at most once every ``interval`` seconds, and always at a stage's start and
    end; a new stage also sets ``stage_started_at`` and ``stage_start_done`` (for :meth:`DatasetBuild.seconds_left`)."""

    def __init__(self, build_id: int, interval: float = 1.0, echo: Progress | None = None) -> None:
        self.build_id = build_id
        self.interval = interval
        self.echo = echo
        self._last = 0.0
        self._stage = ""

    def __call__(self, done: int, total: int, stage: str) -> None:
        if self.echo is not None:
            self.echo(done, total, stage)
        now = time.monotonic()
        if stage == self._stage and 0 < done < total and now - self._last < self.interval:
            return
        now_at = timezone.now()
        fields: dict[str, Any] = {"stage": stage[:50], "done": max(done, 0), "total": max(total, 0),
                                  "updated_at": now_at, "deadline": stall_deadline(now_at)}
        if stage != self._stage:  # a new stage: its rate (DatasetBuild.seconds_left) counts from here
            fields.update(stage_started_at=fields["updated_at"], stage_start_done=fields["done"])
        self._stage, self._last = stage, now
        DatasetBuild.objects.filter(pk=self.build_id, status=DatasetBuild.RUNNING).update(**fields)


def stall_deadline(at: datetime) -> datetime:
    """The deadline of a build whose last progress report was at ``at``: ``QVAL_BUILD_STALL_S`` later."""
    return at + timedelta(seconds=settings.QVAL_BUILD_STALL_S)


def deadline_reason(b: DatasetBuild) -> str:
    """Why the reaper fails a build past its deadline, by the state it was stuck in."""
    if b.status == DatasetBuild.RUNNING:
        return (f"no progress for {settings.QVAL_BUILD_STALL_S:g} s: the worker hung (last: {b.stage} "
                f"{b.done}/{b.total}); queue it again to resume")
    return f"not started within {settings.QVAL_BUILD_QUEUE_S:g} s: is a worker consuming the datasets queue?"


def _claimed(b: DatasetBuild) -> None:
    b.updated_at = timezone.now()
    b.deadline = stall_deadline(b.updated_at)


JOB: JobKind[DatasetBuild] = JobKind(
    name="dataset build", model=DatasetBuild, task=BUILD_TASK,
    queue_s=lambda b: settings.QVAL_BUILD_QUEUE_S, deadline_reason=deadline_reason, on_claim=_claimed)
"""Dataset builds as a job kind (registered in :mod:`jobs.registry`)."""


def enqueue(name: str, refresh: int = 0) -> DatasetBuild:
    """Record a queued build of ``name`` (fresh hidden split ``refresh``) and send it to :data:`BUILD_TASK` once
    committed."""
    return JOB.submit(DatasetBuild.objects.create(name=name, refresh=refresh))


def start(build_id: int, worker: str) -> DatasetBuild | None:
    """Claim a queued (or redelivered running) build for ``worker`` (:meth:`jobs.services.JobKind.claim`); ``None``
    when it is final or another delivery runs it with a fresh heartbeat."""
    return JOB.claim(build_id, None, worker)


def start_inline(name: str, worker: str) -> DatasetBuild:
    """Record a build of ``name`` that ``manage.py build_dataset`` runs here, on ``worker``, claimed at once."""
    b = DatasetBuild.objects.create(name=name, sent_at=timezone.now())
    claimed = JOB.claim(b.pk, None, worker)
    assert claimed is not None
    return claimed


def finish(build_id: int, built: Built) -> None:
    """Record a finished build.  Also over a reaper's ``failed``: the dataset was built and loaded."""
    JOB.finish(build_id, after_reaper=True, updated_at=timezone.now(), dataset_key=built.dataset.manifest.key,
               fingerprint=built.dataset.manifest.fingerprint)


def reason_of(exc: BaseException) -> str:
    """A one-line failure reason (exception type and message)."""
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def active_build(name: str) -> DatasetBuild | None:
    """The queued or running build of ``name`` that is still alive (within its deadline)."""
    now = timezone.now()
    for b in DatasetBuild.objects.filter(name=name, status__in=DatasetBuild.ACTIVE):
        if b.deadline is None or b.deadline >= now:
            return b
    return None


INTERRUPTED = "the worker stopped during the build; queue it again to resume"


def fail_worker_builds(worker: str | None = None) -> int:
    """Fail the builds marked running on Celery worker ``worker`` (default: on any worker, not the
    inline command's) because that worker stopped; return how many."""
    qs = DatasetBuild.objects.filter(status=DatasetBuild.RUNNING).exclude(worker__startswith="inline@")
    if worker is not None:
        qs = qs.filter(worker=worker)
    return qs.update(status=DatasetBuild.FAILED, finished_at=timezone.now(), error=INTERRUPTED)


def is_loaded(name: str) -> bool:
    """Whether the version builder ``name`` makes now is loaded (an older version of the dataset
    does not count, so ``make up`` builds a new version such as one with a secret test split)."""
    env, spec = registry.BUILDERS[name]()
    env.close()
    return Dataset.objects.filter(slug=spec.slug, version=spec.version).exists()

"""Dataset builds for the site: the DatasetBuild record, the ``datasets`` queue task (in process
and through a real Celery worker process), failures, the reaper (every job's: a lost build's requeue is in
tests/test_reapers.py), resume after an interruption, and ``manage.py build_dataset`` inline and with ``--queue``."""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from leaderboard import building
from leaderboard.models import Dataset, DatasetBuild
from qval import build, schema
from qval.envs import registry
from qval.envs.frozenlake.adapter import FrozenLake
from tests.conftest import wait_for, worker_process
from jobs.tasks import reap_jobs
from workers.builds import build_dataset


@pytest.fixture
def datasets_dir(settings, tmp_path: Path) -> Path:
    settings.QVAL_DATASETS_DIR = tmp_path / "datasets"
    settings.QVAL_DOWNLOAD_CACHE = tmp_path / "cache"
    return settings.QVAL_DATASETS_DIR


def tiny_frozenlake():  # type: ignore[no-untyped-def]
    """The FrozenLake builder on 5 maps and 10 trajectories (one per train/dev/test share), images included."""
    env, spec = registry.BUILDERS["frozenlake"]()
    env = FrozenLake(map_seeds=tuple(range(42, 47)), size=8, horizon=30)
    return env, dataclasses.replace(spec, slug="frozenlake-tiny", name="FrozenLake tiny", num_trajectories=10)


@pytest.fixture(scope="module")
def tiny_reference(tmp_path_factory: pytest.TempPathFactory, test_split_secret: str) -> schema.Dataset:
    """The tiny FrozenLake dataset built once, uninterrupted, with the session's test-split secret
    (what every build on the site must reproduce)."""
    env, spec = tiny_frozenlake()
    ds = build.build_dataset(env, spec, secret=test_split_secret)
    ds.write(tmp_path_factory.mktemp("tiny"))
    return ds


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch, tiny_reference: schema.Dataset) -> schema.Dataset:
    """Builder ``tiny`` registered (in this process only)."""
    monkeypatch.setitem(registry.BUILDERS, "tiny", tiny_frozenlake)
    return tiny_reference


class Interrupt(Exception):
    """Stands for a killed build."""


def interrupt_after(n: int):  # type: ignore[no-untyped-def]
    """A progress callback that stops the build once ``n`` states are labelled."""

    def progress(done: int, total: int, stage: str) -> None:
        if stage == "label" and done >= n:
            raise Interrupt(f"stopped at {done}/{total}")

    return progress


def count_labelled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the ids of the states the builder labels from now on."""
    seen: list[str] = []
    real = build.make_state

    def counting(env, trajectory, turn, spec, *args, **kwargs):  # type: ignore[no-untyped-def]
        state, labels = real(env, trajectory, turn, spec, *args, **kwargs)
        seen.append(state.id)
        return state, labels

    monkeypatch.setattr(build, "make_state", counting)
    return seen


def test_the_command_builds_records_and_lists_the_dataset(db, datasets_dir, tiny, client, capsys) -> None:
    frozenlake = tiny
    call_command("build_dataset", "tiny")
    out = capsys.readouterr()
    key = frozenlake.manifest.key
    assert f"loaded {key}" in out.out and "label" in out.err  # the terminal bar
    b = DatasetBuild.objects.get()
    assert (b.status, b.dataset_key, b.fingerprint) == ("finished", key, frozenlake.manifest.fingerprint)
    assert b.started_at <= b.finished_at and b.worker.startswith("inline@") and b.stage == "load"
    ds = Dataset.lookup(key)
    assert ds is not None and ds.fingerprint == frozenlake.manifest.fingerprint
    folder = datasets_dir / f"{ds.slug}-{ds.version}"
    assert schema.Dataset.read(folder).manifest.fingerprint == ds.fingerprint
    if frozenlake.image_names():
        assert sorted(p.name for p in (folder / "images").iterdir()) == frozenlake.image_names()
    assert not any((datasets_dir / ".work").iterdir())  # the checkpoint is gone
    page = client.get("/datasets/").content.decode()
    assert key in page and "data-status" not in page and "location.reload" not in page  # builds: on /status/
    assert 'data-status="finished"' in client.get("/status/").content.decode()
    # A second run loads nothing new and keeps the files.
    call_command("build_dataset", "tiny")
    assert f"already loaded {key}" in capsys.readouterr().out
    assert DatasetBuild.objects.filter(status="finished").count() == 2


def test_queue_if_missing_and_no_duplicates(db, datasets_dir, tiny, client, capsys,
                                            django_capture_on_commit_callbacks) -> None:
    from leaderboard.loading import load_dataset
    from leaderboard.models import Dataset

    current = registry.BUILDERS["frozenlake"]()[1]  # the version `frozenlake` builds now counts as loaded ...
    if not Dataset.objects.filter(slug=current.slug, version=current.version).exists():  # conftest keeps it
        load_dataset(dataclasses.replace(tiny, manifest=dataclasses.replace(tiny.manifest, slug=current.slug,
                                                                            version=current.version)))
    # ... an older version of a dataset does not.
    load_dataset(dataclasses.replace(tiny, manifest=dataclasses.replace(tiny.manifest, slug="alfworld-pick-place",
                                                                        version="1.0")))
    with django_capture_on_commit_callbacks(execute=False) as sent:
        call_command("build_dataset", "frozenlake", "alfworld", "--queue", "--if-missing")
        call_command("build_dataset", "alfworld", "--queue", "--if-missing")
        call_command("build_dataset", "alfworld", "--queue")
    out = capsys.readouterr().out
    assert "frozenlake: already loaded" in out
    queued = DatasetBuild.objects.get(name="alfworld")
    assert f"alfworld: queued build #{queued.pk}" in out
    assert out.count(f"build #{queued.pk} is already queued") == 2
    assert len(sent) == 1 and queued.status == "queued"
    page = client.get("/datasets/").content.decode()  # no build queue there, and no reload while building
    assert "data-status" not in page and "location.reload" not in page and 'href="/status/#builds"' in page
    status = client.get("/status/").content.decode()
    assert 'data-status="queued"' in status and "location.reload" not in status
    assert "<title>Status · QVal Leaderboard</title>" in status and status.count('id="dataset-builds"') == 1
    assert client.get("/api/v1/builds/", {"name": "alfworld"}).json()[0]["status"] == "queued"
    with pytest.raises(Exception, match="unknown dataset 'nope'"):
        call_command("build_dataset", "nope", "--queue")
    # make up: the workers were just stopped, so a build still marked running on one is dead.
    DatasetBuild.objects.filter(pk=queued.pk).update(status="running", worker="datasets@host",
                                                     updated_at=timezone.now())
    inline = DatasetBuild.objects.create(name="miniwob", status="running", worker="inline@host",
                                         updated_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=False) as sent:
        call_command("build_dataset", "alfworld", "miniwob", "--queue", "--if-missing", "--workers-stopped")
    out = capsys.readouterr().out
    assert DatasetBuild.objects.get(pk=queued.pk).error == building.INTERRUPTED
    assert "alfworld: queued build" in out and f"build #{inline.pk} is already running" in out and len(sent) == 1


def test_a_build_whose_environment_runs_an_event_loop_records_progress(db, datasets_dir, monkeypatch) -> None:
    """MiniWoB drives Chromium through Playwright's sync API, which keeps an event loop running in
    its thread, where Django refuses database calls: the build runs in a thread of its own and its
    progress is saved from the task's thread."""
    from playwright.sync_api import sync_playwright

    threads = set()

    class WithPlaywright(FrozenLake):
        playwright = None

        def _reset(self, task):  # type: ignore[no-untyped-def]
            if self.playwright is None:
                self.playwright = sync_playwright().start()
            threads.add(threading.get_ident())
            super()._reset(task)

        def close(self) -> None:
            if self.playwright is not None:
                self.playwright.stop()

    def with_playwright():  # type: ignore[no-untyped-def]
        env, spec = tiny_frozenlake()
        env.__class__ = WithPlaywright
        return env, dataclasses.replace(spec, slug="frozenlake-loop", num_trajectories=3)

    monkeypatch.setitem(registry.BUILDERS, "loop", with_playwright)
    record = DatasetBuild.objects.create(name="loop")
    assert build_dataset.apply(args=[record.pk]).get() == "finished"
    record.refresh_from_db()
    assert (record.status, record.stage, record.error) == ("finished", "load", "")
    assert record.dataset_key.startswith("frozenlake-loop@") and Dataset.objects.filter(slug="frozenlake-loop").exists()
    assert threads and threading.get_ident() not in threads  # the environment ran in the build's thread


def test_a_failing_build_ends_failed_with_its_reason(db, datasets_dir, monkeypatch, client) -> None:
    unknown = DatasetBuild.objects.create(name="nope")
    assert build_dataset.apply(args=[unknown.pk]).get() == "failed"
    unknown.refresh_from_db()
    assert unknown.status == "failed" and unknown.error.startswith("unknown dataset 'nope'; choose one of")

    class Exploding(FrozenLake):
        def step(self, action):  # type: ignore[no-untyped-def]
            raise RuntimeError("the environment exploded")

    def exploding():  # type: ignore[no-untyped-def]
        env, spec = registry.BUILDERS["frozenlake"]()
        env.__class__ = Exploding
        return env, spec

    monkeypatch.setitem(registry.BUILDERS, "boom", exploding)
    boom = DatasetBuild.objects.create(name="boom")
    assert build_dataset.apply(args=[boom.pk]).get() == "failed"
    boom.refresh_from_db()
    assert boom.status == "failed" and boom.error == "RuntimeError: the environment exploded"
    assert boom.stage == "collect" and boom.finished_at is not None
    page = client.get("/status/").content.decode()
    assert "the environment exploded" in page and 'data-status="failed"' in page
    # A final build is not run again (a redelivered message).
    assert build_dataset.apply(args=[boom.pk]).get() == "failed"


def test_the_reaper_fails_stalled_and_never_started_builds(db, settings) -> None:
    from qval_site.celery import app

    now = timezone.now()
    # Each progress report moves a running build's deadline (the Recorder): the last one an hour ago, or 5 s.
    stalled = DatasetBuild.objects.create(name="alfworld", status="running", stage="label", done=3, total=60,
                                          started_at=now - timedelta(hours=2), updated_at=now - timedelta(hours=1),
                                          deadline=building.stall_deadline(now - timedelta(hours=1)))
    alive = DatasetBuild.objects.create(name="miniwob", status="running", stage="label",
                                        started_at=now - timedelta(hours=2), updated_at=now - timedelta(seconds=5),
                                        deadline=building.stall_deadline(now - timedelta(seconds=5)))
    waiting = building.enqueue("frozenlake")
    old = building.enqueue("frozenlake")
    DatasetBuild.objects.filter(pk=old.pk).update(queued_at=now - timedelta(days=2),
                                                  deadline=now - timedelta(days=2, seconds=-settings.QVAL_BUILD_QUEUE_S))
    assert sorted(reap_jobs()["dataset build"]["overdue"]) == sorted([stalled.pk, old.pk])
    for b in (stalled, alive, waiting, old):
        b.refresh_from_db()
    assert stalled.status == "failed" and stalled.error.startswith("no progress for 1800 s")
    assert "label 3/60" in stalled.error
    assert old.status == "failed" and "not started within" in old.error
    assert (alive.status, waiting.status) == ("running", "queued")
    assert building.active_build("miniwob") == alive and building.active_build("alfworld") is None
    assert reap_jobs()["dataset build"]["overdue"] == []
    schedule = app.conf.beat_schedule["reap-jobs"]
    assert schedule["task"] == reap_jobs.name and schedule["schedule"] == settings.QVAL_REAP_EVERY_S
    assert app.conf.task_routes["workers.builds.build_dataset"] == {"queue": "datasets"}


def test_an_interrupted_build_resumes_through_the_task_and_the_command(db, datasets_dir, tiny,
                                                                        monkeypatch) -> None:
    frozenlake = tiny
    with pytest.raises(Interrupt):
        building.run_build("tiny", progress=interrupt_after(7))
    assert any(building.work_dir("tiny").rglob("checkpoint.jsonl"))
    labelled = count_labelled(monkeypatch)
    b = DatasetBuild.objects.create(name="tiny")
    assert build_dataset.apply(args=[b.pk]).get() == "finished"
    b.refresh_from_db()
    total = len(frozenlake.states)
    assert len(labelled) == total - 7 and b.fingerprint == frozenlake.manifest.fingerprint
    assert Dataset.lookup(frozenlake.manifest.key).fingerprint == frozenlake.manifest.fingerprint
    assert not any(building.work_dir("tiny").rglob("checkpoint.jsonl"))

    # The command: interrupted (the record says so), rerun, resumed.
    labelled.clear()
    from leaderboard.management.commands import build_dataset as command

    real = command.terminal_bar
    monkeypatch.setattr(command, "terminal_bar", lambda interactive: interrupt_after(5))
    with pytest.raises(Interrupt):
        call_command("build_dataset", "tiny")
    stopped = DatasetBuild.objects.latest("pk")
    assert stopped.status == "failed" and stopped.error.startswith("Interrupt: stopped at 5/")
    monkeypatch.setattr(command, "terminal_bar", real)
    labelled.clear()
    call_command("build_dataset", "tiny")
    assert len(labelled) == total - 5
    assert DatasetBuild.objects.latest("pk").status == "finished"


# -- a real worker process on the datasets queue --------------------------------------------------
@pytest.fixture
def datasets_worker(transactional_db, data_dir: Path, settings):  # type: ignore[no-untyped-def]
    """A real ``celery worker -Q datasets --concurrency 1`` process on the test database and Redis."""
    root = data_dir / f"builds-{os.getpid()}-{time.monotonic_ns()}"
    settings.QVAL_DATASETS_DIR = root / "datasets"
    settings.QVAL_DOWNLOAD_CACHE = root / "cache" / "downloads"
    name = f"test-datasets-{os.getpid()}@{socket.gethostname()}"
    log_path = root / "datasets-worker.log"
    with worker_process("datasets", name, root, log_path, 30) as proc:
        yield proc, name, log_path


@pytest.mark.slow
@pytest.mark.worker
def test_a_datasets_worker_builds_frozenlake_from_the_queue(transactional_db, frozenlake, client, capsys,
                                                            request) -> None:
    # What a worker killed during a build leaves: a running record under its name.
    name = f"test-datasets-{os.getpid()}@{socket.gethostname()}"
    dead = DatasetBuild.objects.create(name="alfworld", status="running", worker=name, stage="label",
                                       started_at=timezone.now(), updated_at=timezone.now())
    proc, _, log_path = request.getfixturevalue("datasets_worker")
    wait_for(lambda: DatasetBuild.objects.get(pk=dead.pk).status == "failed" or proc.poll() is not None, timeout=60)
    assert proc.poll() is None, log_path.read_text()
    assert DatasetBuild.objects.get(pk=dead.pk).error == building.INTERRUPTED

    call_command("build_dataset", "frozenlake", "--queue")
    assert "queued build" in capsys.readouterr().out
    b = DatasetBuild.objects.get(name="frozenlake")
    seen: list[tuple[str, str, int, int]] = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        b.refresh_from_db()
        row = (b.status, b.stage, b.done, b.total)
        if not seen or seen[-1] != row:
            seen.append(row)
        if not b.is_active:
            break
        time.sleep(0.02)
    assert b.status == "finished", (b.error, log_path.read_text()[-5000:])
    statuses = [s for s, *_ in seen]
    assert statuses[0] in ("queued", "running") and "running" in statuses and statuses[-1] == "finished"
    assert statuses.index("running") < len(statuses) - 1
    assert any(stage == "label" and 0 < done <= total for _, stage, done, total in seen)
    assert b.worker == name and b.dataset_key == frozenlake.manifest.key
    assert b.fingerprint == frozenlake.manifest.fingerprint
    assert frozenlake.manifest.key in client.get("/datasets/").content.decode()
    assert client.get(f"/datasets/{frozenlake.manifest.key}/").status_code == 200


def test_builds_in_the_admin(admin_client, db) -> None:
    b = DatasetBuild.objects.create(name="miniwob", status="running", stage="label", done=12, total=48,
                                    started_at=timezone.now(), updated_at=timezone.now())
    page = admin_client.get("/admin/leaderboard/datasetbuild/").content.decode()
    assert "miniwob" in page and '<progress max="100" value="25">' in page and "12/48" in page
    assert admin_client.get(f"/admin/leaderboard/datasetbuild/{b.pk}/change/").status_code == 200


def test_every_dataset_version_names_the_builder_that_makes_it() -> None:
    """``qval.envs.registry.VERSIONS`` (how a loaded dataset finds its environment, superseded versions included) maps each
    ``slug@version`` to a builder whose spec is that version, and holds every current builder."""
    assert set(registry.BUILDERS.values()) <= set(registry.VERSIONS.values())
    for key, make in registry.VERSIONS.items():
        env, spec = make()
        try:
            assert f"{spec.slug}@{spec.version}" == key
        finally:
            env.close()
    assert len({make for make in registry.VERSIONS.values()}) == len(registry.VERSIONS)


def test_a_running_build_estimates_its_time_left_from_the_stage_rate(db, client) -> None:
    now = timezone.now()
    # A resumed build: 6 states came from the checkpoint, 10 more labelled in the 5 minutes since the stage began.
    b = DatasetBuild.objects.create(name="miniwob", status="running", stage="label", done=16, total=62,
                                    stage_start_done=6, stage_started_at=now - timedelta(minutes=5, seconds=20),
                                    started_at=now - timedelta(minutes=9), updated_at=now - timedelta(seconds=20))
    # 46 states left at 30 s each (10 in 300 s up to the last report), less the 20 s since that report: 1360 s.
    assert b.seconds_left(now) == pytest.approx(46 * 30 - 20)
    assert b.time_left == "about 23 min left"
    api = next(row for row in client.get("/api/v1/builds/").json() if row["id"] == b.pk)
    assert api["time_left"] == "about 23 min left" and 1340 <= api["seconds_left"] <= 1360
    page = client.get("/status/").content.decode()
    assert '<span class="time-left">about 23 min left</span>' in page
    # No estimate before the stage has done anything, nor once the build is over.
    DatasetBuild.objects.filter(pk=b.pk).update(done=6)
    b.refresh_from_db()
    assert b.seconds_left(now) is None and b.time_left == ""
    DatasetBuild.objects.filter(pk=b.pk).update(done=16, status="finished")
    b.refresh_from_db()
    assert b.seconds_left(now) is None and b.as_dict()["seconds_left"] is None


def test_the_recorder_starts_the_stage_clock_at_each_new_stage(db) -> None:
    b = DatasetBuild.objects.create(name="tiny", status="running", started_at=timezone.now())
    record = building.Recorder(b.pk, interval=0.0)
    record(3, 10, "collect")
    b.refresh_from_db()
    assert (b.stage, b.stage_start_done) == ("collect", 3) and b.stage_started_at == b.updated_at
    collect_started = b.stage_started_at
    record(7, 10, "collect")
    b.refresh_from_db()
    assert b.stage_started_at == collect_started and b.stage_start_done == 3 and b.done == 7
    record(4, 30, "label")  # a resumed build: 4 states were in the checkpoint
    b.refresh_from_db()
    assert b.stage_started_at > collect_started and b.stage_start_done == 4

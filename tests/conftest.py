"""Shared fixtures: the FrozenLake dataset, a loaded copy in the test database, users,
a real Celery worker process for end-to-end tests, and the podman engine and base image
of method-container tests."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

from qval import build, hidden, schema
from qval.envs.base import Environment
from qval.envs import registry

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
XDIST_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
"""This process's index among pytest-xdist's workers (0 without xdist): each gets Redis databases of its own."""
TEST_REDIS = os.environ.get("QVAL_TEST_REDIS", "redis://127.0.0.1:6379")
"""The Redis server of the tests' broker and cache databases (15 and 14 for the first worker, 13 and 12 for the next...)."""
TEST_BROKER_URL = os.environ.get("QVAL_TEST_BROKER_URL", f"{TEST_REDIS}/{15 - 2 * XDIST_WORKER}")
"""The broker of a test session's Celery messages: a Redis database of its own (worker processes flush it)."""
TEST_CACHE_URL = os.environ.get("QVAL_TEST_CACHE_URL", f"{TEST_REDIS}/{14 - 2 * XDIST_WORKER}")
"""The cache of a test session: a Redis database of its own, as each test empties it (``_fresh_cache``)."""
BASE_IMAGE = "localhost/qval-base:py3-slim"
TEST_SPLIT_SECRET = "66b035ca82f280fae4a18c05d575be159a033b6eef12312e7794287ac21ba758"
"""The test-split secret of every test session, unless ``QVAL_TEST_SPLIT_SECRET`` is set: fixed, so that the tests
whose hidden splits are drawn from it give the same results in every checkout and in CI. (The secret generated once
per checkout made each new checkout draw new splits, and a borderline statistical test failed on one now and then.)
Set the variable to run the tests on other splits; no site uses this one."""
os.environ.setdefault(hidden.ENV_VAR, TEST_SPLIT_SECRET)  # for this process's settings: pytest_configure


def pytest_configure(config: pytest.Config) -> None:
    """Send every task this test session queues to a Redis database of its own, and keep its cache
    (rate-limit counters, comparisons) in another, for this process and the worker processes it
    starts; make the session's test-split secret (:data:`TEST_SPLIT_SECRET` unless ``QVAL_TEST_SPLIT_SECRET``
    is set, exported) the settings' too -- pytest-django read them before this module -- so that every
    ``Dataset.read`` and worker process of the session uses it;
    record Playwright's call stacks cheaply (:mod:`qval.playwright_stacks`)."""
    from django.test.utils import override_settings

    from qval.playwright_stacks import light_stacks
    from qval_site.celery import app

    app.conf.broker_url = TEST_BROKER_URL
    os.environ["QVAL_CACHE_URL"] = TEST_CACHE_URL
    override_settings(CACHES={"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                          "LOCATION": TEST_CACHE_URL}},
                      # the tests' accounts need no slow hash (PBKDF2's iterations are a second of CPU a login here)
                      PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
                      QVAL_TEST_SPLIT_SECRET=os.environ[hidden.ENV_VAR]).enable()
    light_stacks()  # the browser tests' own Playwright calls, in xdist workers whose stacks start in <string>


NEEDS = {"engine": "container", "base_image": "container", "celery_worker_process": "worker",
         "page": "browser"}
"""A fixture a test uses -> the marker of what the test needs (``make test-fast`` leaves these out)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by what it needs, from the fixtures it uses (:data:`NEEDS`), beside its own markers; run
    the compose tests first (the rest keep their order): on a machine without the images their build is minutes of
    downloads and disk that the other test processes overlap with computing, where at the end of the run it would
    be the only thing left."""
    for item in items:
        for fixture in set(NEEDS) & set(getattr(item, "fixturenames", ())):
            item.add_marker(NEEDS[fixture])
    items.sort(key=lambda item: item.get_closest_marker("compose") is None)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """QVAL_DATA_DIR of this test session (uploads land in its ``media``)."""
    return tmp_path_factory.mktemp("qval-data")


@pytest.fixture(autouse=True)
def _media_root(settings, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """Uploads, dataset files and download caches in the session's data dir, as the worker process sees them."""
    settings.MEDIA_ROOT = data_dir / "media"
    settings.QVAL_DATASETS_DIR = data_dir / "datasets"
    settings.QVAL_DOWNLOAD_CACHE = data_dir / "cache" / "downloads"


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """An empty cache per test: rate-limit counters and cached comparisons start from zero."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(scope="session")
def test_split_secret() -> str:
    """The test-split secret of this session: the settings' (:data:`TEST_SPLIT_SECRET` unless
    ``QVAL_TEST_SPLIT_SECRET`` is set); worker processes get the same one."""
    from django.conf import settings

    return settings.QVAL_TEST_SPLIT_SECRET


@pytest.fixture(scope="session")
def frozenlake(data_dir: Path, test_split_secret: str) -> schema.Dataset:
    """The FrozenLake dataset built by our pipeline (once per session, its test split drawn from the
    session's secret), written where the site keeps a loaded dataset's files
    (``QVAL_DATASETS_DIR/<slug>-<version>``, images included)."""
    spec = registry.BUILDERS["frozenlake"]()[1]
    return build.build(registry.BUILDERS["frozenlake"], data_dir / "datasets" / f"{spec.slug}-{spec.version}", secret=test_split_secret)


class _KeptDataset:
    """The FrozenLake dataset kept in the test database for the whole session: stored once when the
    database is set up (:func:`django_db_setup`), committed, so each database test (which rolls back what
    it changes) finds it; stored again before the next database test when a test emptied the tables (a
    transactional test's teardown does: :func:`pytest_runtest_teardown`). Every database test sees the same
    rows, whatever the order."""

    dataset: schema.Dataset | None = None
    fingerprint: str = ""

    @classmethod
    def ensure(cls) -> None:
        """Store the dataset unless its rows are there (one query when they are)."""
        from leaderboard.loading import store_dataset
        from leaderboard.models import Dataset

        m = cls.dataset.manifest if cls.dataset is not None else None
        if m is not None and not Dataset.objects.filter(slug=m.slug, version=m.version).exists():
            store_dataset(cls.dataset, cls.fingerprint)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker, frozenlake: schema.Dataset):  # type: ignore[no-untyped-def]
    """The session's test database, with the FrozenLake dataset stored in it (:class:`_KeptDataset`)."""
    frozenlake.validate()
    _KeptDataset.dataset, _KeptDataset.fingerprint = frozenlake, frozenlake.compute_fingerprint()
    with django_db_blocker.unblock():
        _KeptDataset.ensure()


def _uses_db(item: pytest.Item) -> bool:
    """Whether ``item`` asks for the database (a marker, or a fixture that needs it)."""
    names = getattr(item, "fixturenames", ())
    return item.get_closest_marker("django_db") is not None or \
        bool({"db", "transactional_db", "live_server"} & set(names))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """Before the next database test, put the kept dataset back if this test's teardown emptied the tables (a
    transactional test, or one that asked for a transactional fixture only while it ran)."""
    yield
    if _KeptDataset.dataset is not None and nextitem is not None and _uses_db(nextitem):
        from pytest_django.plugin import blocking_manager_key

        with item.config.stash[blocking_manager_key].unblock():
            _KeptDataset.ensure()


@pytest.fixture
def loaded(db, frozenlake: schema.Dataset):  # type: ignore[no-untyped-def]
    """The FrozenLake dataset in the test database (stored once for the session: :class:`_KeptDataset`)."""
    from leaderboard.models import Dataset

    return Dataset.objects.get(slug=frozenlake.manifest.slug, version=frozenlake.manifest.version)


@pytest.fixture
def user(db, django_user_model):  # type: ignore[no-untyped-def]
    """A registered researcher whose email address is verified (hidden splits require one)."""
    from allauth.account.models import EmailAddress

    ada = django_user_model.objects.create_user(username="ada", email="ada@example.org", password="correct-horse-battery")
    EmailAddress.objects.create(user=ada, email=ada.email, verified=True, primary=True)
    return ada


@pytest.fixture
def staff(db, django_user_model):  # type: ignore[no-untyped-def]
    """A staff member (may launch training and Best-of-N runs from the pages)."""
    return django_user_model.objects.create_user(username="grace", email="grace@example.org",
                                                 password="correct-horse-battery", is_staff=True)


def priority_lists(queue: str) -> list[str]:
    """The Redis lists of ``queue``, in the order a worker reads them: kombu keeps one per priority step
    (``queue`` for 0, ``queue\\x06\\x16N`` for N = 3, 6, 9; the platform's runs: jobs.services.PLATFORM_PRIORITY)."""
    return [queue] + [f"{queue}\x06\x16{n}" for n in (3, 6, 9)]


def broker_messages(queue: str) -> list[dict]:  # type: ignore[type-arg]
    """The Celery messages waiting in ``queue`` of this session's Redis database, in the order a worker takes
    them (users' jobs first, each list oldest first)."""
    import json

    import redis

    broker = redis.Redis.from_url(TEST_BROKER_URL)
    return [json.loads(m) for key in priority_lists(queue) for m in reversed(broker.lrange(key, 0, -1))]


def clear_queue(queue: str) -> None:
    """Drop the messages waiting in ``queue`` of this session's Redis database."""
    import redis

    redis.Redis.from_url(TEST_BROKER_URL).delete(*priority_lists(queue))


@pytest.fixture
def api(user):  # type: ignore[no-untyped-def]
    """A DRF client authenticated with the user's token."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


BUILD_CACHE = Path(os.environ.get("QVAL_TEST_BUILD_CACHE") or Path.home() / ".cache" / "qval" / "test-builds")
"""Small datasets that fixtures build in a real environment (MiniWoB's Chromium, ALFWorld), kept
between test sessions: a set-up step of minutes on 2 cores (``make test`` caches it as it caches
the wheelhouse and the images). The tests of the builds themselves never read it."""


def _imported_core_files(path: Path) -> set[Path]:
    """The files of the core package that ``path`` imports at module level (absolute ``qval.…`` and
    relative imports; imports inside functions, such as the builders' lazy ones, are left out)."""
    import ast

    package = path.parent.relative_to(REPO).parts
    found: set[Path] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.ImportFrom):
            base = node.module.split(".") if node.module else []
            if node.level:
                base = list(package[:len(package) - node.level + 1]) + base
            names = [base + [alias.name] for alias in node.names] + [base]
        elif isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        else:
            continue
        for parts in names:
            if parts and parts[0] == "qval":
                for candidate in (REPO.joinpath(*parts).with_suffix(".py"), REPO.joinpath(*parts, "__init__.py")):
                    if candidate.is_file():
                        found.add(candidate)
    return found


def _build_digest(env_key: str) -> str:
    """The SHA-256 of every core file a cached build runs: ``qval/build.py``, the adapter that defines the
    environment class ``env_key`` starts with, and what they import, transitively (so a change to a method,
    the scorer or another environment's adapter does not build the cached datasets again)."""
    name = env_key.split("(")[0].strip()
    adapters = [path for path in (REPO / "qval" / "envs").rglob("*.py") if f"\nclass {name}(" in path.read_text()]
    assert len(adapters) == 1, f"no single adapter in qval/envs defines class {name!r} (from {env_key!r})"
    todo = {REPO / "qval" / "build.py", REPO / "qval" / "__init__.py", *adapters}
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        seen.add(path)
        todo |= _imported_core_files(path) - seen
    digest = hashlib.sha256()
    for path in sorted(seen):
        digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cached_build(env_key: str, make_env: Callable[[], Environment], spec: build.DatasetSpec) -> Path:
    """The folder of the dataset ``spec`` built in the environment ``make_env()`` (closed after), once per
    version of the build's code (:func:`_build_digest`), the spec and ``env_key`` (the environment's class and arguments); later sessions
    find it in :data:`BUILD_CACHE` (read it with ``Dataset.read``, which checks its fingerprint; never
    write into it)."""
    assert not spec.secret_test, "a secret test split depends on the session's secret: not cached"
    key = hashlib.sha256(f"{_build_digest(env_key)}|{env_key}|{spec!r}".encode()).hexdigest()[:32]
    target = BUILD_CACHE / key
    BUILD_CACHE.mkdir(parents=True, exist_ok=True)
    with (BUILD_CACHE / f".{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a parallel test worker building the same dataset: wait for it
        if not (target / "manifest.json").is_file():
            _build_into(target, key, make_env, spec)
    return target


def _build_into(target: Path, key: str, make_env: Callable[[], Environment], spec: build.DatasetSpec) -> None:
    """Build ``spec`` in ``make_env()`` and move it to ``target`` whole (a reader never sees half a build)."""
    env = make_env()
    try:
        dataset = build.build_dataset(env, spec)
    finally:
        env.close()  # MiniWoB's browser, a terminal episode folder
    partial = BUILD_CACHE / f".{key}.{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    dataset.write(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)


@contextmanager
def worker_process(queue: str, name: str, data_dir: Path, log_path: Path, stop_timeout: float, flush: bool = True,
                   **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``celery worker -Q queue --concurrency 1`` process named ``name`` on the test database
    and the test Redis (flushed first unless ``flush`` is false: a worker taking over a dead one's
    tasks), with ``QVAL_DATA_DIR=data_dir`` and ``env``; its output goes to ``log_path`` (appended).
    Stopped with SIGTERM (SIGKILL after ``stop_timeout`` s) on exit."""
    import redis
    from django.db import connection

    if flush:
        redis.Redis.from_url(TEST_BROKER_URL).flushdb()
    db = connection.settings_dict
    environ = dict(os.environ)
    environ.update(
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        CELERY_BROKER_URL=TEST_BROKER_URL,
        QVAL_DATA_DIR=str(data_dir),
        **env,
    )
    environ.pop("QVAL_INPROCESS_WORKER", None)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a" if not flush else "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "qval_site", "worker", "-Q", queue, "--concurrency", "1",
             "-n", name, "--without-gossip", "--without-mingle", "--loglevel", "INFO"],
            cwd=REPO, env=environ, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            yield proc
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=stop_timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def celery_worker_process(transactional_db, data_dir: Path):  # type: ignore[no-untyped-def]
    """A real ``celery worker`` process on queue ``scoring``, using the test database and Redis."""
    with worker_process("scoring", f"test-scoring-{os.getpid()}@%h", data_dir, data_dir / "worker.log", 20) as proc:
        yield proc


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.25):  # type: ignore[no-untyped-def]
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


@pytest.fixture(scope="session")
def engine():  # type: ignore[no-untyped-def]
    """A podman engine (qval.containers.Engine) with a work root of its own (installed by
    scripts/install.sh when missing)."""
    from qval import containers as qc

    if shutil.which("podman") is None or shutil.which("runc") is None:
        subprocess.run([str(REPO / "scripts" / "install.sh"), "dev"], cwd=REPO, capture_output=True, check=False)
    if shutil.which("podman") is None or shutil.which("runc") is None:
        pytest.skip("podman and runc cannot be installed here (scripts/install.sh installs them as root)")
    # A tmpfs when there is one: removing an image store from this VM's disk (mounted with discard)
    # takes ~6 s a job. The path stays short: podman's socket paths must.
    root = Path(tempfile.mkdtemp(prefix="qvt-", dir="/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"))
    eng = qc.Engine(work_root=root)
    yield eng
    qc.sweep(eng)
    root.rmdir()
    shutil.rmtree(eng.images.root, ignore_errors=True)  # the session's image cache (<work root>-images)


@pytest.fixture(scope="session")
def base_image(engine) -> str:  # type: ignore[no-untyped-def]
    """The project's offline base image of method containers (scripts/build-base-image.sh; cached)."""
    built = subprocess.run([str(REPO / "scripts" / "build-base-image.sh")], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    return BASE_IMAGE


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight causal LM checkpoint built locally (qval.backbone.make_tiny_model)."""
    from qval.backbone import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """SmolLM2-135M-Instruct (qval.smollm2), loaded once per session from the installed wheel (its digest checked)
    and served by our own server (qval.backbone.BackboneServer) on a Unix socket: ``(backend, "unix:PATH")``, the
    backbone spec a method run takes.  Fails (never skips) when the wheel is not installed: ``make install`` does."""
    from qval import smollm2 as smol
    from qval.backbone import BackboneServer, backend_from_spec

    try:
        backend = backend_from_spec(smol.BACKBONE_NAME, smol.backbone_spec())
    except (smol.ModelFileError, ImportError, OSError) as exc:
        pytest.fail(f"SmolLM2-135M-Instruct cannot be loaded ({exc}); `make install` installs "
                    f"{smol.DISTRIBUTION}=={smol.VERSION} and gguf + accelerate", pytrace=False)
    socket_path = tmp_path_factory.mktemp("smollm2") / "llm.sock"
    with BackboneServer(backend, budget=2**62, socket_path=socket_path):
        yield backend, f"unix:{socket_path}"


@pytest.fixture(scope="session")
def backbone_kit_tar(engine, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """The starter kit's backbone method (``Containerfile.backbone``) saved as the archive a submitter uploads."""
    kit = REPO / "examples" / "method-container"
    tag = f"localhost/qval-test-backbone-kit:{os.getpid()}-{time.monotonic_ns()}"
    built = engine.call("build", "-q", "-f", str(kit / "Containerfile.backbone"), "-t", tag, str(kit))
    assert built.returncode == 0, built.stderr
    out = tmp_path_factory.mktemp("backbone-kit") / "kit.tar"
    saved = engine.call("save", "-o", str(out), tag)
    engine.call("rmi", tag)
    assert saved.returncode == 0, saved.stderr
    return out

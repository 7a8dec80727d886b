"""A gpu worker that needs no database: it runs method containers for a site over HTTP(S).

It consumes the ``remote`` queue, where a site with ``QVAL_GPU_WORKERS=remote`` sends users' container jobs and
nothing else, so a user's job never waits behind a platform run here either, or the ``campaign`` queue, where a GPU
campaign (``scripts/gpu-campaign.sh``, :mod:`qval.campaign`) sends baseline runs of the built-in methods with the
backbone the campaign's worker serves (:func:`run_baseline_job`); the site's other baseline runs, its training and
Best-of-N runs need the database: its own gpu worker runs them from ``gpu`` (docs/workers.md).

Start it on a host with podman (as root) and the broker reachable, with no database setting at
all -- it never imports Django::

    QVAL_SITE_URL=https://qval.example.org CELERY_BROKER_URL=redis://broker:6379/0 \\
    QVAL_WORKER_NAME=gpu-box-1 QVAL_WORKER_KEY=... \\
    celery -A qval.remote_worker worker -Q remote --concurrency 1

A job's broker message holds only the submission id and a per-job token. With the token the
worker starts the job on the site (the spec: split, target, limits, archive hash), downloads the
archive (its SHA-256 checked; not when the worker's image cache holds that archive's image already:
a rerun, or another dataset split of the same upload) and the split's ``/input`` (no labels), runs the container in the
sandbox of :mod:`qval.containers` (serving a backbone of ``QVAL_BACKBONES`` on the job's socket
when the spec names one), posts heartbeats every ``heartbeat_s`` meanwhile, and posts the
predictions and logs back once; the site scores them. A baseline run's job downloads its split of the dataset
(``/dataset``: no labels, but for a method that reads them), runs the method with :func:`qval.methods.run.run_method`
on the named backbone of ``QVAL_BACKBONES`` (its responses cached under ``QVAL_DATA_DIR/cache/baselines``, so a
requeued job resumes), posts its progress with each heartbeat, and posts the predictions with what the run recorded
(counts, prompt hash, backbone kind and checkpoint). A token the site refuses (forged, expired,
spent, of an earlier attempt) ends the task without running anything.

Settings (environment): ``QVAL_SITE_URL``, ``CELERY_BROKER_URL``, ``QVAL_WORKER_NAME`` (default:
the host name), ``QVAL_WORKER_KEY`` (to register on the status page), ``QVAL_CONTAINER_ENGINE``,
``QVAL_CONTAINERS_CONF``, ``QVAL_CONTAINER_WORK_ROOT``, ``QVAL_BACKBONES``,
``QVAL_BACKBONE_TOKEN_BUDGET``, ``QVAL_HEARTBEAT_S`` (worker heartbeats, default 10),
``QVAL_JOB_VISIBILITY_S`` (the broker redelivers an unacknowledged job after this, default 7200), and for
``kind: vllm`` backbones (a ``vllm serve`` process this worker starts and manages, as a local gpu worker
does) ``QVAL_VLLM_EXECUTABLE`` (default ``vllm``), ``QVAL_VLLM_STARTUP_S`` (default 900) and
``QVAL_DATA_DIR`` (the servers' logs go to its ``logs/``; default ``./var``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import socket
import math
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from celery import Celery
from celery.signals import celeryd_after_setup, worker_process_shutdown, worker_ready, worker_shutting_down

from qval import containers as qc
from qval.backbone import Backend, Backends
from qval.envs.terminalbench.adapter import sweep_leftovers
from qval.vllm import VLLMManager

log = logging.getLogger(__name__)

TASK_NAME = "qval.remote_worker.run_job"
BASELINE_TASK_NAME = "qval.remote_worker.run_baseline_job"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Config:
    """A remote worker's settings (from the environment by :meth:`from_env`)."""

    site: str
    name: str
    key: str = ""
    heartbeat_s: float = 10.0
    backbones: dict[str, dict[str, Any]] = field(default_factory=dict)
    token_budget: int = 2_000_000
    vllm_command: tuple[str, ...] = ("vllm",)
    vllm_startup_s: float = 900.0
    data_dir: Path = Path("var")

    @classmethod
    def from_env(cls) -> "Config":
        site = os.environ.get("QVAL_SITE_URL", "").rstrip("/")
        if not site:
            raise RuntimeError("QVAL_SITE_URL is not set: the remote worker gets its jobs from the site")
        return cls(site=site, name=os.environ.get("QVAL_WORKER_NAME") or socket.gethostname(),
                   key=os.environ.get("QVAL_WORKER_KEY", ""),
                   heartbeat_s=float(os.environ.get("QVAL_HEARTBEAT_S", "10")),
                   backbones=json.loads(os.environ.get("QVAL_BACKBONES") or "{}"),
                   token_budget=int(os.environ.get("QVAL_BACKBONE_TOKEN_BUDGET", "2000000")),
                   vllm_command=tuple(shlex.split(os.environ.get("QVAL_VLLM_EXECUTABLE") or "vllm")),
                   vllm_startup_s=float(os.environ.get("QVAL_VLLM_STARTUP_S", "900")),
                   data_dir=Path(os.environ.get("QVAL_DATA_DIR") or "var"))


class Refused(Exception):
    """The site refused the job's token (forged, expired, spent, requeued) or the job is final."""


class Client:
    """The job protocol of one job, over HTTP(S) with its token."""

    def __init__(self, config: Config, submission_id: int, token: str) -> None:
        self.base = f"{config.site}/api/v1/jobs/{submission_id}"
        self.session = requests.Session()
        self.session.headers.update({"Authorization": f"Job {token}", "X-QVal-Worker": config.name})

    def _call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        resp = self.session.request(method, f"{self.base}/{path}", timeout=kwargs.pop("timeout", 60), **kwargs)
        if resp.status_code in (403, 409):
            raise Refused(f"{path}: {resp.status_code} {resp.text[:300]}")
        resp.raise_for_status()
        return resp

    def start(self) -> dict[str, Any]:
        return self._call("POST", "start").json()

    def download(self, path: str, dest: Path) -> str:
        """Stream ``path`` to ``dest``; return its SHA-256."""
        digest = hashlib.sha256()
        with self._call("GET", path, stream=True, timeout=300) as resp, dest.open("wb") as fh:
            for chunk in resp.iter_content(_CHUNK):
                digest.update(chunk)
                fh.write(chunk)
        return digest.hexdigest()

    def heartbeat(self, progress: dict[str, int] | None = None) -> None:
        self._call("POST", "heartbeat", json={"progress": progress} if progress else None, timeout=30)

    def result(self, run: dict[str, Any], predictions: bytes | None) -> None:
        """Post the run (and its predictions), always as multipart: the only body the site's endpoint parses."""
        files: dict[str, tuple[str | None, bytes | str]] = {"run": (None, json.dumps(run))}
        if predictions is not None:
            files["predictions"] = ("predictions.jsonl", predictions)
        self._call("POST", "result", files=files, timeout=300)


def _beat(client: Client, every: float, stop: threading.Event, progress: dict[str, int]) -> None:
    while not stop.wait(every):
        try:
            client.heartbeat(dict(progress))
        except Refused as exc:  # the reaper gave the job up: its result will be refused too
            log.warning("heartbeat refused: %s", exc)
            return
        except requests.RequestException as exc:  # the site is restarting; the next beat may pass
            log.warning("heartbeat failed: %s", exc)


Runner = Callable[[Client, dict[str, Any], dict[str, int]], tuple[dict[str, Any], "bytes | None"]]
"""What runs a started job: ``(client, spec, progress)`` to the posted ``run`` and predictions (``progress``: a dict
the runner keeps up to date, posted with each heartbeat)."""


def run_job(config: Config, engine: qc.Engine, submission_id: int, token: str) -> str:
    """Run one remote container job end to end; return ``posted`` or ``refused``."""
    return _serve(config, submission_id, token, lambda client, spec, progress: _run(client, engine, spec, config))


def run_baseline_job(config: Config, submission_id: int, token: str) -> str:
    """Run one baseline run of a GPU campaign end to end; return ``posted`` or ``refused``."""
    return _serve(config, submission_id, token, lambda client, spec, progress: _run_baseline(client, spec, config,
                                                                                           progress))


def _serve(config: Config, submission_id: int, token: str, runner: Runner) -> str:
    """Start the job on the site, run it with ``runner`` while a thread sends heartbeats, post its result once."""
    client = Client(config, submission_id, token)
    try:
        spec = client.start()
    except Refused as exc:
        log.warning("job %s refused by the site: %s", submission_id, exc)
        return "refused"
    stop = threading.Event()
    progress: dict[str, int] = {}
    beat = threading.Thread(target=_beat, args=(client, float(spec["heartbeat_s"]), stop, progress), daemon=True)
    beat.start()
    try:
        run, predictions = runner(client, spec, progress)
    except Refused as exc:
        log.warning("job %s refused by the site while running: %s", submission_id, exc)
        return "refused"
    except Exception as exc:  # noqa: BLE001 - engine missing, download cut: the platform's fault
        log.exception("job %s could not run", submission_id)
        run, predictions = {"platform_error": f"{type(exc).__name__}: {exc}"[:2000]}, None
    finally:
        stop.set()
    try:
        client.result(run, predictions)
    except Refused as exc:
        log.warning("result of job %s refused: %s", submission_id, exc)
        return "refused"
    log.info("job %s: result posted (%s)", submission_id, run.get("error") or run.get("platform_error") or "finished")
    return "posted"


def _run_baseline(client: Client, spec: dict[str, Any], config: Config,
                  progress: dict[str, int]) -> tuple[dict[str, Any], bytes | None]:
    """Fetch the split and run the method of baseline job ``spec`` on its backbone; the posted run and predictions
    (a method that cannot run on what it was given: an ``error``, which fails the run with that reason)."""
    from qval import schema
    from qval.methods.llm import method_backbone
    from qval.methods.registry import MethodError
    from qval.methods.run import Progress, run_method, shared_cache_dir, write_predictions

    name, method = str(spec["backbone"]), str(spec["method"])
    if name not in config.backbones:
        return {"error": f"backbone {name!r} is not in the QVAL_BACKBONES of worker {config.name} "
                         f"(it serves {sorted(config.backbones) or 'none'})"}, None

    def report(p: Progress) -> None:
        progress.update(done=p.done, total=p.total, tokens=p.tokens)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="qval-remote-baseline-") as tmp:
        folder = Path(tmp) / "dataset"
        client.download("dataset", Path(tmp) / "dataset.tar")
        with tarfile.open(Path(tmp) / "dataset.tar") as tar:
            tar.extractall(folder, filter="data")
        dataset = schema.Dataset.read_split(folder)
        try:
            backbone, options, backbone_config = method_backbone(name, config.backbones[name], vllm_manager(config))
            output = run_method(method, dataset, str(spec["split"]), str(spec["target"]), backbone,
                                seed=int(spec.get("seed", 0)), cache_dir=shared_cache_dir(config.data_dir),
                                options={**dict(spec.get("options") or {}), **options}, dataset_dir=folder,
                                progress=report)
        except MethodError as exc:
            return {"error": f"the baseline run cannot proceed: {exc}"}, None
        predictions = write_predictions(output, Path(tmp) / "predictions.jsonl").read_bytes()
    meta = {k: v for k, v in output.meta.items() if _jsonable(v)}
    return {"error": None, "exit_code": None, "wall_s": time.monotonic() - started, "num_nan": output.num_nan,
            "config": {**meta, **backbone_config}, "token_usage": {"tokens": int(progress.get("tokens", 0))}}, predictions


def _jsonable(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, (str, int, bool, type(None), list, dict))


def _run(client: Client, engine: qc.Engine, spec: dict[str, Any], config: Config) -> tuple[dict[str, Any], bytes | None]:
    """Fetch and run the job of ``spec`` (:func:`qval.containers.run_method_container`)."""

    def fetch_archive(job_dir: Path) -> Path:
        archive = job_dir / "upload.image"
        digest = client.download("archive", archive)
        if digest != spec["archive_sha256"]:
            raise RuntimeError(f"the archive downloaded has SHA-256 {digest[:12]}, not {spec['archive_sha256'][:12]}")
        return archive

    def write_inputs(input_dir: Path) -> None:
        inputs = input_dir.parent / "input.tar"
        client.download("input", inputs)
        with tarfile.open(inputs) as tar:
            tar.extractall(input_dir, filter="data")
        inputs.unlink()

    name = spec.get("backbone")
    served = None if name is None else qc.ServedBackbone(
        name, served_backend(config, name), int(config.backbones[name].get("token_budget", config.token_budget)))
    try:
        result, usage = qc.run_method_container(engine, spec["archive_sha256"], fetch_archive, write_inputs,
                                                qc.Limits(**spec["limits"]), served)
    except qc.ArchiveRejected as exc:
        return {"error": f"invalid container archive: {exc}"}, None
    run = {"error": result.error, "exit_code": result.exit_code, "wall_s": result.wall_s,
           "stdout": result.stdout, "stderr": result.stderr, "token_usage": usage}
    return run, result.predictions


_BACKENDS: Backends | None = None
_VLLM: VLLMManager | None = None


def vllm_manager(config: Config) -> VLLMManager:
    """This worker process's manager of ``vllm serve`` processes (one per process, made at first use)."""
    global _VLLM
    if _VLLM is None:
        _VLLM = VLLMManager(config.vllm_command, log_dir=config.data_dir / "logs", startup_timeout_s=config.vllm_startup_s)
    return _VLLM


def served_backend(config: Config, name: str) -> Backend:
    """The backend of ``QVAL_BACKBONES[name]`` (:class:`qval.backbone.Backends`: loaded once per worker
    process; a ``kind: vllm`` entry is this worker's own ``vllm serve`` process, started on demand)."""
    global _BACKENDS
    if name not in config.backbones:
        raise RuntimeError(f"backbone {name!r} is not in this worker's QVAL_BACKBONES")
    if _BACKENDS is None:
        _BACKENDS = Backends(vllm_manager(config))
    return _BACKENDS.get(name, config.backbones[name])


# -- the Celery application (no Django) ------------------------------------------------------
app = Celery("qval-remote", set_as_current=False)  # importing this module (the CLI, the site's tests) must not
# make it the process's current app: the site sends its tasks by name through ``celery.current_app``
app.conf.update(
    broker_url=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
    task_ignore_result=True,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    broker_transport_options={"visibility_timeout": int(os.environ.get("QVAL_JOB_VISIBILITY_S", "7200"))},
)


@app.task(name=TASK_NAME, acks_late=True)
def run_job_task(submission_id: int, token: str) -> str:
    """The broker's entry: run the job ``submission_id`` with ``token``."""
    return run_job(Config.from_env(), qc.Engine.from_env(), submission_id, token)


@app.task(name=BASELINE_TASK_NAME, acks_late=True)
def run_baseline_job_task(submission_id: int, token: str) -> str:
    """The broker's entry of a GPU campaign's baseline run ``submission_id`` with ``token``."""
    return run_baseline_job(Config.from_env(), submission_id, token)


def register(config: Config, queues: str, stop: threading.Event) -> None:
    """Register on the site and send a heartbeat every ``heartbeat_s`` until ``stop`` is set."""
    while True:
        try:
            resp = requests.post(f"{config.site}/api/v1/workers/heartbeat", json={"name": config.name, "queues": queues},
                                 headers={"Authorization": f"Worker {config.key}"}, timeout=30)
            if resp.status_code != 200:
                log.warning("the site refused the worker heartbeat: %s %s", resp.status_code, resp.text[:200])
        except requests.RequestException as exc:
            log.warning("worker heartbeat failed: %s", exc)
        if stop.wait(config.heartbeat_s):
            return


_stop = threading.Event()


@celeryd_after_setup.connect
def _sweep(sender: str, instance: Any, **kwargs: Any) -> None:
    """Before the first job: remove the containers and job folders a killed predecessor left."""
    engine = qc.Engine.from_env()
    try:
        removed = qc.sweep(engine)
        log.info("remote worker %s swept %d leftovers of method-container jobs: %s", sender, len(removed), removed)
        removed = sweep_leftovers(engine)
        log.info("remote worker %s swept %d leftovers of terminal sandboxes: %s", sender, len(removed), removed)
    except OSError as exc:  # no container engine here (a GPU box for campaigns): container jobs will say so
        log.warning("remote worker %s found no container engine (%s): nothing swept", sender, exc)


@worker_ready.connect
def _start_heartbeats(sender: Any, **kwargs: Any) -> None:
    config = Config.from_env()
    if config.key:
        queues = ",".join(sorted(sender.app.amqp.queues.consume_from or {}))
        threading.Thread(target=register, args=(config, queues, _stop), name="worker-heartbeat", daemon=True).start()


@worker_shutting_down.connect
def _stop_heartbeats(**kwargs: Any) -> None:
    _stop.set()


@worker_process_shutdown.connect
def _stop_vllm_servers(**kwargs: Any) -> None:
    """Stop the ``vllm serve`` processes this worker process started."""
    if _VLLM is not None:
        _VLLM.stop_all()

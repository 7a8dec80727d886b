"""The lifecycle of ``vllm serve`` processes a GPU worker runs for its named backbones.

A maintainer names a local checkpoint in ``QVAL_BACKBONES`` (``{"kind": "vllm", "path": DIR,
"served_model_name": NAME, "args": [...]}``); :class:`VLLMManager` then

* starts ``<executable> serve DIR --host 127.0.0.1 --port P --served-model-name NAME [args]``
  (the executable is ``vllm`` in production; tests name a stand-in,
  ``scripts/vllm-standin``, which accepts the same flags and serves :mod:`qval.backbone`);
* waits until it is healthy: ``GET /health`` answers 200 and ``GET /v1/models`` lists ``NAME``;
* reuses the running server for every later job of that backbone, and starts it again when the
  process died or stopped answering;
* stops every server it started (SIGTERM, then SIGKILL) on :meth:`VLLMManager.stop_all`, which
  the worker calls when it shuts down.  A server also receives SIGTERM when the process that
  started it dies (Linux ``PR_SET_PDEATHSIG``), so a killed worker leaves no GPU-holding orphan.

The server listens on a loopback port picked free at start.  Django-free.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_EXECUTABLE = "vllm"
"""The production server: ``vllm serve`` from the vLLM package."""


class VLLMError(RuntimeError):
    """A server could not be started or did not become healthy; the message names why."""


@dataclass(frozen=True)
class ServeSpec:
    """How to serve one backbone: checkpoint ``path``, ``served_model_name`` and extra ``args``."""

    name: str
    path: Path
    served_model_name: str
    args: tuple[str, ...] = ()

    @classmethod
    def from_setting(cls, name: str, entry: Mapping[str, Any]) -> ServeSpec:
        """The spec of ``QVAL_BACKBONES[name]`` (a ``kind: vllm`` entry); :class:`VLLMError` when malformed."""
        path = entry.get("path")
        if not path:
            raise VLLMError(f"backbone {name!r}: a vllm entry needs 'path' (a local checkpoint directory or GGUF file)")
        args = entry.get("args") or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise VLLMError(f"backbone {name!r}: 'args' must be a list of strings, got {args!r}")
        return cls(name=name, path=Path(str(path)), served_model_name=str(entry.get("served_model_name") or name),
                   args=tuple(args))


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child, before exec: receive SIGTERM when the parent dies (Linux only; ignored elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setsid()


@dataclass
class ServedModel:
    """One running server: its spec, process, URL and log file."""

    spec: ServeSpec
    process: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (``http://127.0.0.1:PORT/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.process.poll() is None

    def healthy(self, timeout_s: float = 5.0) -> bool:
        """``/health`` answers 200 and ``/v1/models`` lists the served model name."""
        if not self.alive():
            return False
        base = f"http://{self.host}:{self.port}"
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=timeout_s) as r:
                if r.status != 200:
                    return False
            with urllib.request.urlopen(f"{base}/v1/models", timeout=timeout_s) as r:
                models = json.loads(r.read().decode("utf-8")).get("data") or []
        except (OSError, ValueError, urllib.error.URLError):
            return False
        return any(m.get("id") == self.spec.served_model_name for m in models if isinstance(m, dict))

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the server's process group, SIGKILL after ``grace_s``."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass


class VLLMManager:
    """Starts, health-checks, reuses and stops ``vllm serve`` processes (see the module docstring)."""

    def __init__(self, executable: str | Sequence[str] = DEFAULT_EXECUTABLE, *, log_dir: str | Path,
                 host: str = "127.0.0.1", startup_timeout_s: float = 600.0) -> None:
        self.command = [executable] if isinstance(executable, str) else list(executable)
        self.log_dir = Path(log_dir)
        self.host = host
        self.startup_timeout_s = startup_timeout_s
        self._servers: dict[str, ServedModel] = {}
        self._lock = threading.Lock()
        self.starts = 0
        """How many servers this manager started (a reused one is not counted again)."""

    def ensure(self, spec: ServeSpec) -> ServedModel:
        """A healthy server of ``spec``: the running one when it still answers, else a new one."""
        with self._lock:
            current = self._servers.get(spec.name)
            if current is not None and current.spec == spec and current.healthy():
                return current
            if current is not None:
                log.warning("vllm server of %s is %s; starting it again", spec.name,
                            "dead" if not current.alive() else "unhealthy or reconfigured")
                current.stop()
                del self._servers[spec.name]
            server = self._start(spec)
            self._servers[spec.name] = server
            return server

    def _start(self, spec: ServeSpec) -> ServedModel:
        if not spec.path.exists():  # a checkpoint directory, or a single-file (GGUF) checkpoint
            raise VLLMError(f"backbone {spec.name!r}: checkpoint {spec.path} does not exist")
        port = _free_port(self.host)
        argv = [*self.command, "serve", str(spec.path), "--host", self.host, "--port", str(port),
                "--served-model-name", spec.served_model_name, *spec.args]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"vllm-{spec.name}-{port}.log"
        log.info("starting %s", " ".join(argv))
        with log_path.open("ab") as out:
            try:
                process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           preexec_fn=_die_with_parent)  # noqa: PLW1509 - only prctl + setsid
            except OSError as exc:
                raise VLLMError(f"cannot start {argv[0]!r} for backbone {spec.name!r}: {exc}") from exc
        server = ServedModel(spec=spec, process=process, host=self.host, port=port, log_path=log_path)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if not server.alive():
                tail = log_path.read_text(errors="replace")[-2000:]
                raise VLLMError(f"the server of backbone {spec.name!r} exited with code {process.returncode} "
                                f"while starting; its log ends: {tail}")
            if server.healthy(timeout_s=2.0):
                self.starts += 1
                log.info("vllm server of %s healthy at %s after %.1f s", spec.name, server.url,
                         time.monotonic() - server.started_at)
                return server
            time.sleep(0.5)
        server.stop()
        raise VLLMError(f"the server of backbone {spec.name!r} was not healthy within {self.startup_timeout_s:.0f} s "
                        f"(log: {log_path})")

    def running(self) -> dict[str, ServedModel]:
        """The servers this manager holds, by backbone name."""
        return dict(self._servers)

    def stop_all(self) -> None:
        """Stop every server this manager started."""
        with self._lock:
            for server in self._servers.values():
                server.stop()
            self._servers.clear()

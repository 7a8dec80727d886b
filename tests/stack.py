"""A whole site on loopback, made of real processes the caller can kill and restart: a private
PostgreSQL (``initdb`` into a folder of its own), a private Redis (append-only file, so queued
messages survive a restart), gunicorn, Celery workers and beat. Used by the fault tests
(tests/test_faults.py) and the load benchmark (benchmarks/load.py). Django-free: the site runs
only in the child processes, which read ``DATABASE_URL`` etc. from their environment.

Never touches the machine's shared PostgreSQL or Redis: every port is given by the caller.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

from qval import hidden

REPO = Path(__file__).resolve().parents[1]
PG_BIN = Path(os.environ.get("QVAL_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _wait(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout} s")


def _listening(port: int) -> bool:
    """Whether something accepts connections on ``127.0.0.1:port``."""
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Stack:
    """The site's processes under ``root`` on ports ``port`` (PostgreSQL), ``port+1`` (Redis) and
    ``port+2`` (web), each plus 100 per pytest-xdist worker. ``env``: extra settings of every site process."""

    def __init__(self, root: Path, port: int, env: dict[str, str] | None = None) -> None:
        self.root = root
        port += 100 * int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])  # each xdist worker its own ports
        self.pg_port, self.redis_port, self.web_port = port, port + 1, port + 2
        self.url = f"http://127.0.0.1:{self.web_port}"
        self.redis_dir, self.data_dir, self.logs = (root / n for n in ("redis", "data", "logs"))
        # Outside ``root``: the server runs as the user postgres, who cannot enter a 0700 temporary folder.
        self.pg_dir = Path(tempfile.mkdtemp(prefix="qval-pg-")) / "data"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        environ = {k: v for k, v in os.environ.items()
                   if not k.startswith(("DATABASE_URL", "CELERY_", "QVAL_", "DJANGO_SETTINGS"))}
        environ.update({
            "PYTHONPATH": str(REPO),
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:{self.pg_port}/qval",
            "CELERY_BROKER_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "QVAL_CACHE_URL": f"redis://127.0.0.1:{self.redis_port}/1",
            "QVAL_DATA_DIR": str(self.data_dir),
            "QVAL_CONTAINER_WORK_ROOT": str(root / "jobs"),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "QVAL_THROTTLE_RATES": '{"upload_user": "1000/min", "upload_anon": "1000/min"}',
            # the test session's split secret (tests/conftest.py): the datasets it built read with it
            hidden.ENV_VAR: os.environ.get(hidden.ENV_VAR, ""),
            **(env or {}),
        })
        self.env = environ

    # -- PostgreSQL ------------------------------------------------------------------------
    def _as_postgres(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*prefix, *argv], capture_output=True, text=True)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
        return done

    def init_pg(self) -> None:
        self.pg_dir.parent.chmod(0o755)
        self.pg_dir.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.pg_dir, "postgres", "postgres")
        self._as_postgres(str(PG_BIN / "initdb"), "-D", str(self.pg_dir), "-A", "trust", "-U", "postgres")
        self.start_pg()
        self._as_postgres(str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "postgres", "qval")

    def start_pg(self) -> None:
        """Start the private PostgreSQL and wait for it (up to 180 s: a machine busy with parallel tests starts it
        slowly); a failure says what the server logged."""
        opts = f"-p {self.pg_port} -k {self.pg_dir} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on"
        server_log = self.pg_dir / "server.log"
        # a stack this port served just before (a module's stack set up again) may still be going away
        _wait(lambda: not _listening(self.pg_port), 60, f"port {self.pg_port} free")
        try:
            self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.pg_dir), "-o", opts, "-l", str(server_log),
                              "-w", "-t", "180", "start")
        except RuntimeError as exc:
            logged = server_log.read_text(errors="replace")[-3000:] if server_log.exists() else "(no server log)"
            raise RuntimeError(f"{exc}\nserver log:\n{logged}") from exc

    def stop_pg(self, mode: str = "fast") -> None:
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.pg_dir), "-m", mode, "-w", "stop", check=False)

    # -- Redis -------------------------------------------------------------------------------
    def start_redis(self) -> None:
        self.redis_dir.mkdir(parents=True, exist_ok=True)
        self._spawn("redis", ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
                              "--dir", str(self.redis_dir), "--appendonly", "yes", "--appendfsync", "always",
                              "--save", ""])
        _wait(lambda: subprocess.run(["redis-cli", "-p", str(self.redis_port), "ping"], capture_output=True,
                                     text=True).stdout.strip() == "PONG", 20, "redis up")

    def stop_redis(self) -> None:
        """A clean shutdown (what a restart by an orchestrator does); the AOF keeps the queues."""
        subprocess.run(["redis-cli", "-p", str(self.redis_port), "shutdown"], capture_output=True)
        self.procs.pop("redis").wait(timeout=20)

    # -- site processes ------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(argv, cwd=REPO, env={**self.env, **(env or {})}, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        return proc

    def manage(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed: {done.stderr[-3000:]}")
        return done.stdout

    def load_dataset(self, directory: Path) -> None:
        """Copy a built dataset folder where the site keeps it and load it into the database."""
        dest = self.data_dir / "datasets" / directory.name
        shutil.copytree(directory, dest)
        self.manage("shell", "-c", "from qval.schema import Dataset; from leaderboard.loading import load_dataset; "
                                   f"load_dataset(Dataset.read({str(dest)!r}))")

    def start_web(self, workers: int = 2, threads: int = 4) -> None:
        self._spawn("web", [sys.executable, "-m", "gunicorn", "qval_site.wsgi", "-b", f"127.0.0.1:{self.web_port}",
                            "--workers", str(workers), "--threads", str(threads), "--timeout", "120"])
        _wait(lambda: self._answers("/api/v1/datasets/"), 60, "web up")

    def _answers(self, path: str) -> bool:
        try:
            return requests.get(self.url + path, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def start_worker(self, name: str, queues: str, concurrency: int = 1,
                     env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A site worker (with the database) named ``name`` on ``queues``, under ``scripts/supervise.sh`` as
        ``make up`` runs it (started again if it exits; :meth:`kill` signals the whole group)."""
        return self._spawn(name, [str(REPO / "scripts" / "supervise.sh"), sys.executable, "-m", "celery", "-A", "qval_site", "worker", "-Q", queues,
                                  "--concurrency", str(concurrency), "-n", f"{name}@%h", "--without-gossip",
                                  "--without-mingle", "--loglevel", "INFO"], env)

    def start_beat(self) -> subprocess.Popen[bytes]:
        """Celery beat, sending the reapers (a process of its own, so killing a worker spares it)."""
        return self._spawn("beat", [sys.executable, "-m", "celery", "-A", "qval_site", "beat", "--loglevel", "INFO",
                                    "-s", str(self.root / "beat-schedule")])

    def start_remote_worker(self, name: str, key: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """A remote gpu worker (qval.remote_worker) with NO database setting in its environment."""
        keep = {k: v for k, v in os.environ.items()
                if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "CONTAINERS_CONF")}
        environ = {**keep, "PYTHONPATH": str(REPO), "CELERY_BROKER_URL": self.env["CELERY_BROKER_URL"],
                   "QVAL_SITE_URL": self.url, "QVAL_WORKER_NAME": name, "QVAL_WORKER_KEY": key,
                   "QVAL_CONTAINER_WORK_ROOT": self.env["QVAL_CONTAINER_WORK_ROOT"], "QVAL_HEARTBEAT_S": "1",
                   **(env or {})}
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "qval.remote_worker", "worker", "-Q", "remote",
                                     "--concurrency", "1", "-n", f"{name}@%h", "--without-gossip", "--without-mingle",
                                     "--loglevel", "INFO"], cwd=REPO, env=environ, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def kill(self, name: str, sig: int = signal.SIGKILL, timeout: float = 60) -> None:
        """Send ``sig`` to the process group of ``name`` (a worker and its children) and wait for it."""
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def start(self, dataset: Path, scoring_concurrency: int = 2) -> "Stack":
        """PostgreSQL, Redis, migrations, the dataset, web, one scoring worker and beat."""
        self.init_pg()
        self.start_redis()
        self.manage("migrate", "--noinput")
        self.load_dataset(dataset)
        self.start_web()
        self.start_worker("scoring", "scoring", concurrency=scoring_concurrency)
        self.start_beat()
        return self

    def close(self) -> None:
        for name in list(self.procs):
            if name != "redis":
                self.kill(name, signal.SIGTERM, timeout=30)
        if "redis" in self.procs:
            self.stop_redis()
        self.stop_pg("immediate")
        pid_file = self.pg_dir / "postmaster.pid"
        if pid_file.exists():  # pg_ctl did not stop it: removing its folder would leave it holding the port
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
            except (ValueError, IndexError, ProcessLookupError):
                pass
        _wait(lambda: not _listening(self.pg_port), 60, f"port {self.pg_port} released")
        shutil.rmtree(self.pg_dir.parent, ignore_errors=True)

    # -- the API ----------------------------------------------------------------------------------
    def token(self, username: str) -> str:
        return self.manage("issue_token", "--username", username, "--verified-email", f"{username}@example.org").strip()

    def upload(self, token: str, content: bytes, filename: str = "preds.jsonl", **fields: str) -> requests.Response:
        data = {"dataset": "frozenlake-8x8", "split": "dev", "target": "q", "method_name": "m", **fields}
        return requests.post(f"{self.url}/api/v1/submissions/", data=data, files={"file": (filename, content)},
                             headers={"Authorization": f"Token {token}"}, timeout=120)

    def submission(self, token: str, pk: int) -> dict[str, Any]:
        resp = requests.get(f"{self.url}/api/v1/submissions/{pk}/", headers={"Authorization": f"Token {token}"},
                            timeout=30)
        resp.raise_for_status()
        return resp.json()

    def wait_final(self, token: str, pk: int, timeout: float = 180) -> dict[str, Any]:
        def final() -> dict[str, Any] | None:
            try:
                data = self.submission(token, pk)
            except requests.RequestException:
                return None
            return data if data["final"] else None

        return _wait(final, timeout, f"submission {pk} final", interval=0.3)

    def wait_state(self, token: str, pk: int, state: str, timeout: float = 120) -> dict[str, Any]:
        return _wait(lambda: (d := self.submission(token, pk))["state"] == state and d, timeout,
                     f"submission {pk} {state}", interval=0.1)

    def count(self, query: str) -> int:
        """Evaluate a Django ORM expression in a child process (e.g. ``Submission.objects.count()``)."""
        out = self.manage("shell", "-c", f"from submissions.models import Submission, Result; print({query})")
        return int(out.strip().splitlines()[-1])

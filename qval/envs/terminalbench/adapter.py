"""TerminalBench-style shell tasks as a QVal environment adapter, every command run in a podman sandbox.

* **Tasks.**  One TOML file per task in ``qval/envs/terminalbench/tasks/`` (:func:`load_tasks`), in
  Terminal-Bench's layout made compact: ``instruction``; ``setup``, the shell script that makes the
  initial ``/app``; ``solution``, the scripted solution as a list of shell commands (the reference
  policy); ``tests``, the shell script that decides success (run with ``set -e``; exit status 0: solved;
  Python checks run as ``python3 - <<'EOF'`` inside it); ``kind`` (files, git, python, archives, permissions,
  services); and the near misses, harmful and neutral commands an agent might type instead
  (``near_misses``, ``harmful``, ``neutral``).  ``{{name}}`` placeholders take the values of
  ``[params]``: the public instance of a task uses the first value of each, a hidden one (the secret
  test split, :meth:`Terminal.hide_tasks`) values drawn by ``random.Random(seed)``.
* **Sandbox.**  Each command runs in a fresh container of the image built by
  ``scripts/build-terminal-image.sh`` (Debian bookworm: bash, coreutils, findutils, grep, sed,
  mawk, diffutils, tar, gzip, git, procps, python3), referred to by its image ID, with the flags of
  method containers (:mod:`qval.containers`: engine configuration ``containers/containers.conf``,
  ``--pull=never``, no network, read-only root filesystem, a 64 MiB ``/tmp``, memory, CPU and pids
  limits, user 65534, all capabilities dropped, no-new-privileges) and the host folder of the
  episode mounted at ``/app`` (the working directory).  A command is ``bash -c`` with stderr folded
  into stdout; it is killed after :data:`COMMAND_TIMEOUT_S` s (its output is then not shown: how much
  it printed depends on timing).  Git identities and dates are fixed
  (:data:`SHELL_ENV`), so commits hash the same on every run.
* **State.**  The contents of ``/app`` after the commands so far (paths, modes, contents); processes
  do not outlive their command (each command has a container of its own), so a "service" task is
  solved by writing the files that start it, and its tests start and probe it.
* **Actions.**  A shell command, or :data:`SUBMIT`.  Submitting runs the task's tests in the sandbox
  and ends the episode: reward 1 when they pass, else 0 (as Terminal-Bench, tests run once, when the
  agent says it is done).  The horizon (counted from the episode start) is the same for every task:
  the longest solution plus its submit plus 4 steps by default.
* **Observation (text).**  The instruction, how commands run, then every command so far with its
  output (at most :data:`OUTPUT_CHARS` characters: head and tail) and a non-zero exit status.
* **Candidates** (:meth:`Terminal.candidates`, deterministic per task and state): the reference
  action; the solution step after it (skipping ahead); the task's near misses (wrong flag or path),
  harmful commands (deleting or clobbering what the task needs), neutral ones (``ls -A``, looking at
  files) and a premature ``submit``; duplicates dropped, in that order.  A dataset state offers the
  actor's action, the reference action and two others drawn by the candidate RNG
  (:meth:`Terminal.sample_candidates`).
* **Reference policy and recovery.**  The next solution step not yet in the history (by its text),
  then ``submit``.  A detour is recovered from by carrying on with the remaining steps, with no
  repair step: what a detour broke for good (a deleted input, a wrong commit) stays broken and the
  labels say so.
* **Snapshot/restore.**  A :class:`TerminalSnapshot` holds a tar of ``/app`` (and the outputs shown
  so far); restoring empties the episode folder and unpacks it, without replaying a command
  (``restore_mode="replay"`` replays instead, to compare).  The initial ``/app`` of each task is made
  once per process by running its setup in the sandbox.  :meth:`Terminal.filesystem` lists ``/app``
  as restore and replay must agree on it (git's index caches file times and inodes: only its
  presence counts).
* **Kept steps.**  A step from a state already stepped from with the same command in this process
  (the same task and command history) is not run again: ``/app`` after it, its output and reward are
  kept (the :data:`KEPT_STEPS` most recent) and unpacked, as a restore is (``kept_steps=0``: always
  run).  Commands are deterministic given the history (fixed git dates, no clocks or randomness in
  the tasks), which the restore-equals-replay test checks; labelling rollouts share most of their
  steps (a candidate's next state is its rollout's first step, the reference's rollout is the
  state's V rollout), so this saves most container runs.
* **Determinism.**  The listing commands of the task files sort what they print (``find … | sort``,
  archives made with ``tar --sort=name``), so observations do not depend on a filesystem's directory
  order; what still does is the order of the error messages of a recursive command that fails on
  several entries (``chmod -R`` in permissions-private-tree): identical on one machine, possibly not
  on another filesystem.

Django-free.
"""

from __future__ import annotations

import collections
import hashlib
import io
import os
import random
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from qval.containers import Engine, Limits

from ..base import Environment, Snapshot

TASK_DIR = Path(__file__).with_name("tasks")
"""Where the task files are (one ``<task id>.toml`` each)."""

IMAGE = "localhost/qval-terminal:bookworm"
"""The image tag ``scripts/build-terminal-image.sh`` builds."""

KINDS: tuple[str, ...] = ("files", "git", "python", "archives", "permissions", "services")
"""Task kinds (Terminal-Bench's easy tier), recorded as each state's task type."""

SUBMIT = "submit"
"""The action that runs the task's tests and ends the episode."""

COMMAND_TIMEOUT_S = 3
"""A command still running after this many seconds is killed."""

CONMON_EARLY_S = 0.5
"""How much sooner than ``--timeout`` podman may kill a container. conmon's timer counts whole seconds (GLib
rounds such a timer's deadline to a shared mark, up to a quarter second down), and it starts after our
clock does; measured here: killed 2.98-3.02 s after ``podman run`` began for a 3 s limit. An exit status
255 at least ``timeout - CONMON_EARLY_S`` s after the start is taken as the kill."""

TEST_TIMEOUT_S = 20
"""The tests of a task are stopped (failed) after this many seconds."""

OUTPUT_CHARS = 600
"""The observation keeps at most this many characters of a command's output (half head, half tail)."""

MAX_APP_BYTES = 16 * 1024 * 1024
"""``/app`` may not grow beyond this (a runaway command); the step raises instead."""

KEPT_STEPS = 512
"""How many steps an environment keeps (least recently used dropped) to take again without a container."""

LIMITS = Limits(timeout_s=COMMAND_TIMEOUT_S, memory_mb=512, cpus=1.0, pids=64, tmp_mb=64)
"""The resources of every command's container."""

CONTAINER_LABEL = "org.qval.terminal"
"""Label of every sandbox container (:func:`sweep_leftovers` finds them by it)."""

EPISODE_PREFIX = "qval-terminal-"
"""Name prefix of the episode folders made in the system's temporary folder."""

LEFTOVER_AGE_S = 600
"""A sandbox container or episode folder this much older than the sweep is a leftover: a command lives at
most :data:`TEST_TIMEOUT_S` plus podman's start, and a live episode folder is rewritten at every restore."""

APP_UID = 65534
"""The user (nobody) commands run as and who owns ``/app``."""

SHELL_ENV: dict[str, str] = {
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "TZ": "UTC",
    "GIT_AUTHOR_NAME": "QVal Agent",
    "GIT_AUTHOR_EMAIL": "agent@qval.invalid",
    "GIT_COMMITTER_NAME": "QVal Agent",
    "GIT_COMMITTER_EMAIL": "agent@qval.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
}
"""The environment every command and test runs with (fixed git identity and dates: same hashes every run)."""

INTRO = (
    "Each command runs in a fresh bash shell in /app (no network, no root; files persist between commands, "
    f"processes do not). Type `{SUBMIT}` when the task is done: the tests then run once."
)

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_FIELDS = {"kind", "instruction", "setup", "solution", "tests", "near_misses", "harmful", "neutral", "params"}


class TaskFileError(ValueError):
    """A task file is malformed; the message names the file and what is wrong."""


@dataclass(frozen=True)
class TerminalTask:
    """One playable task instance (placeholders filled in)."""

    id: str
    kind: str
    instruction: str
    setup: str
    solution: tuple[str, ...]
    tests: str
    near_misses: tuple[str, ...]
    harmful: tuple[str, ...]
    neutral: tuple[str, ...]


@dataclass(frozen=True)
class TaskTemplate:
    """A task file: a :class:`TerminalTask` with ``{{name}}`` placeholders and the values they may take."""

    id: str
    raw: dict[str, Any]
    params: dict[str, tuple[str, ...]]
    digest: str
    """SHA-256 of the file's bytes (recorded in the environment's config)."""

    @property
    def kind(self) -> str:
        """The task's kind (:data:`KINDS`)."""
        return str(self.raw["kind"])

    def instance(self, values: dict[str, str] | None = None, task_id: str | None = None) -> TerminalTask:
        """The task with ``values`` (default: the first value of every parameter) substituted."""
        chosen = {name: options[0] for name, options in self.params.items()}
        chosen.update(values or {})

        def fill(text: str) -> str:
            return _PLACEHOLDER.sub(lambda m: chosen[m.group(1)], text)

        raw = self.raw
        return TerminalTask(
            id=task_id or self.id,
            kind=self.kind,
            instruction=fill(raw["instruction"]).strip(),
            setup=fill(raw["setup"]),
            solution=tuple(fill(c).strip() for c in raw["solution"]),
            tests=fill(raw["tests"]),
            near_misses=tuple(fill(c).strip() for c in raw.get("near_misses", ())),
            harmful=tuple(fill(c).strip() for c in raw.get("harmful", ())),
            neutral=tuple(fill(c).strip() for c in raw.get("neutral", ())),
        )

    def draw(self, seed: int, task_id: str) -> TerminalTask:
        """The instance whose parameter values ``random.Random(seed)`` draws (in the file's parameter order)."""
        rng = random.Random(seed)
        return self.instance({name: rng.choice(options) for name, options in self.params.items()}, task_id)


def parse_task(path: Path) -> TaskTemplate:
    """Read and check one task file (:class:`TaskFileError` says what is wrong)."""
    data = path.read_bytes()
    try:
        raw = tomllib.loads(data.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"{path.name}: not valid TOML: {exc}") from exc
    where = path.name
    unknown = set(raw) - _FIELDS
    if unknown:
        raise TaskFileError(f"{where}: unknown fields {sorted(unknown)}; expected {sorted(_FIELDS)}")
    for field in ("kind", "instruction", "setup", "tests"):
        if not isinstance(raw.get(field), str) or not raw[field].strip() and field != "setup":
            raise TaskFileError(f"{where}: {field!r} must be a non-empty string")
    if raw["kind"] not in KINDS:
        raise TaskFileError(f"{where}: kind {raw['kind']!r} is not one of {', '.join(KINDS)}")
    for field in ("solution", "near_misses", "harmful", "neutral"):
        value = raw.get(field, [])
        if not isinstance(value, list) or not all(isinstance(c, str) and c.strip() for c in value):
            raise TaskFileError(f"{where}: {field!r} must be a list of non-empty command strings")
    if not raw["solution"]:
        raise TaskFileError(f"{where}: the solution needs at least one command")
    params = raw.get("params", {})
    if not isinstance(params, dict) or not all(
        isinstance(v, list) and v and all(isinstance(x, str) for x in v) for v in params.values()
    ):
        raise TaskFileError(f"{where}: 'params' must map names to non-empty lists of strings")
    text = data.decode()
    used = set(_PLACEHOLDER.findall(text))
    if used - set(params):
        raise TaskFileError(f"{where}: placeholders without a parameter: {sorted(used - set(params))}")
    template = TaskTemplate(id=path.stem, raw=raw, params={k: tuple(v) for k, v in params.items()},
                            digest=hashlib.sha256(data).hexdigest())
    for values in [None, *({name: opts[-1]} for name, opts in template.params.items())]:
        task = template.instance(values)
        if SUBMIT in task.solution or len(set(task.solution)) != len(task.solution):
            raise TaskFileError(f"{where}: solution commands must be distinct and never {SUBMIT!r}")
        clash = set(task.solution) & set(task.near_misses + task.harmful + task.neutral + (SUBMIT,))
        if clash:
            raise TaskFileError(f"{where}: {sorted(clash)} is both a solution step and another candidate")
    if params and not any(f"{{{{{name}}}}}" in raw["instruction"] for name in params):
        raise TaskFileError(f"{where}: the instruction must show a parameter (it names the instance)")
    return template


def load_tasks(directory: Path = TASK_DIR) -> dict[str, TaskTemplate]:
    """Every task file of ``directory``, by id, in file-name order."""
    paths = sorted(directory.glob("*.toml"))
    if not paths:
        raise TaskFileError(f"no task files (*.toml) in {directory}")
    return {path.stem: parse_task(path) for path in paths}


@dataclass(frozen=True)
class TerminalSnapshot(Snapshot):
    """A state: the task, the commands so far, their outputs as shown, and a tar of ``/app``."""

    outputs: tuple[str, ...]
    files: bytes
    terminated: bool


@dataclass(frozen=True)
class _Kept:
    """A step taken before in this process: ``/app`` after it (a tar), its output as shown, reward and end."""

    files: bytes
    output: str
    reward: float
    terminated: bool


@dataclass(frozen=True)
class Ran:
    """What one container run gave: its exit status (``None``: killed at the time limit) and its output."""

    status: int | None
    output: str


class Sandbox:
    """Runs shell scripts in containers of :data:`IMAGE` with a host folder mounted at ``/app``."""

    def __init__(self, engine: Engine | None = None, image: str = IMAGE, limits: Limits = LIMITS) -> None:
        self.engine = engine or Engine.from_env()
        if self.engine.kind != "podman":
            raise ValueError("the terminal environment runs its commands with podman")
        self.limits = limits
        self.image = image
        self._image_id: str | None = None
        self.runs = 0
        """How many containers this sandbox started."""

    @property
    def image_id(self) -> str:
        """The ID of :attr:`image` (looked up on first use; containers are started by ID, never pulled)."""
        if self._image_id is None:
            found = self.engine.call("image", "inspect", "--format", "{{.Id}}", self.image)
            if found.returncode != 0:
                raise RuntimeError(f"the image {self.image} is missing: build it with scripts/build-terminal-image.sh "
                                   f"({found.stderr.strip()[-300:]})")
            self._image_id = found.stdout.strip().removeprefix("sha256:")
        return self._image_id

    def run(self, app: Path, script: str, timeout_s: float) -> Ran:
        """Run ``script`` with ``bash`` in ``/app`` (= ``app``), stderr folded into stdout."""
        limits = self.limits
        name = f"qval-term-{uuid.uuid4().hex[:12]}"
        env_flags = [flag for key, value in SHELL_ENV.items() for flag in ("-e", f"{key}={value}")]
        argv = self.engine.command(
            "run", "--rm", "--name", name, "--label", f"{CONTAINER_LABEL}=1", "--pull=never", "--network=none",
            "--read-only", "--read-only-tmpfs=false", "--timeout", str(int(timeout_s)),
            "--tmpfs", f"/tmp:rw,size={limits.tmp_mb}m,mode=1777,nosuid,nodev",
            f"--memory={limits.memory_mb}m", f"--memory-swap={limits.memory_mb}m", f"--pids-limit={limits.pids}",
            f"--cpus={limits.cpus:g}", "--user", f"{APP_UID}:{APP_UID}", "--cap-drop=ALL",
            "--security-opt", "no-new-privileges", "--log-driver=none", *env_flags,
            "-v", f"{app}:/app:rw", "-w", "/app", self.image_id, "bash", "-c", "exec 2>&1\n" + script,
        )
        self.runs += 1
        env = dict(os.environ, CONTAINERS_CONF=str(self.engine.conf))
        started = time.monotonic()
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=env, timeout=timeout_s + 30, check=False, cwd=app.parent)
        except subprocess.TimeoutExpired:
            self.engine.call("rm", "-f", "-t", "0", name)
            return Ran(None, "")
        output = proc.stdout.decode(errors="replace")
        if proc.returncode == 255 and time.monotonic() - started >= timeout_s - CONMON_EARLY_S:
            return Ran(None, output)  # podman's --timeout killed it (a command's own exit 255 comes sooner)
        if proc.returncode == 125:  # podman itself failed: never a command's doing
            raise RuntimeError(f"podman could not run the command: {output.strip()[-500:]}")
        return Ran(proc.returncode, output)


def sweep_leftovers(engine: Engine, older_than_s: float = LEFTOVER_AGE_S, temp_dir: Path | None = None) -> list[str]:
    """Remove the sandbox containers and episode folders a killed process left; return what was removed.

    Only those older than ``older_than_s`` (by the container's creation time and the last change in the
    folder): a build or a learned run in another worker may be using younger ones.  ``temp_dir``: where
    the episode folders are (default: the system's temporary folder).  Workers call it when they start,
    beside :func:`qval.containers.sweep`.
    """
    now = time.time()
    removed: list[str] = []
    if engine.kind == "podman":
        listed = engine.call("ps", "-a", "--filter", f"label={CONTAINER_LABEL}", "--format", "{{.Names}} {{.Created.Unix}}")
        for line in listed.stdout.splitlines():
            name, _, created = line.partition(" ")
            if name and created.strip().isdigit() and now - int(created) >= older_than_s:
                engine.call("rm", "-f", "-t", "0", name)
                removed.append(name)
    for folder in sorted(Path(temp_dir or tempfile.gettempdir()).glob(f"{EPISODE_PREFIX}*")):
        try:
            age = now - max([folder.stat().st_mtime, *(p.stat().st_mtime for p in folder.iterdir())])
        except OSError:  # not a folder, or removed meanwhile
            continue
        if age >= older_than_s:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


def _clip(text: str, limit: int = OUTPUT_CHARS) -> str:
    """``text`` with at most ``limit`` characters: its head and tail around a marker."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"


class Terminal(Environment):
    """Shell tasks in a podman sandbox; see the module docstring.

    ``tasks``: the task files to play (default: every task file, in file-name order); ``copies``: how many
    times the list is played, the ``k``-th copy (from 2) with task ids ``'{file}#{k}'`` (the same file and
    parameters until :meth:`hide_tasks` draws others: a dataset whose test split plays every file with
    secret parameters lists them twice); ``horizon``: default the longest solution plus its submit plus 4.
    """

    name = "terminalbench"
    reference_policy = "scripted solution: the next solution step not yet run, then submit (no repair step)"

    def __init__(
        self,
        tasks: Sequence[str] | None = None,
        horizon: int | None = None,
        *,
        task_dir: Path = TASK_DIR,
        engine: Engine | None = None,
        restore_mode: str = "direct",
        kept_steps: int = KEPT_STEPS,
        copies: int = 1,
    ) -> None:
        templates = load_tasks(task_dir)
        chosen = list(templates) if tasks is None else list(tasks)
        unknown = [t for t in chosen if t not in templates]
        if unknown:
            raise KeyError(f"unknown terminal tasks {unknown}; task files in {task_dir}: {', '.join(templates)}")
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"duplicate tasks in {chosen}")
        if restore_mode not in ("direct", "replay"):
            raise ValueError(f"restore_mode must be 'direct' or 'replay', got {restore_mode!r}")
        if copies < 1:
            raise ValueError(f"copies must be at least 1, got {copies}")
        self.templates = {t: templates[t] for t in chosen}
        self._template_of = {t if k == 1 else f"{t}#{k}": t for k in range(1, copies + 1) for t in chosen}
        self.instances: dict[str, TerminalTask | None] = {
            task_id: templates[file].instance(task_id=task_id) for task_id, file in self._template_of.items()}
        longest = max(len(task.solution) for task in self.instances.values() if task is not None)
        super().__init__(horizon if horizon is not None else longest + 1 + 4)
        self.restore_mode = restore_mode
        self.sandbox = Sandbox(engine)
        self._root: Path | None = None
        self._initial: dict[str, bytes] = {}
        self._outputs: list[str] = []
        self.restore_counts = {"direct": 0, "replay": 0}
        """How many restores unpacked a snapshot and how many replayed."""
        self.kept_steps = kept_steps
        self._kept: collections.OrderedDict[tuple[str, tuple[str, ...]], _Kept] = collections.OrderedDict()
        self.step_counts = {"run": 0, "kept": 0}
        """How many steps ran a container and how many were taken from the kept steps."""

    # -- Environment -------------------------------------------------------------------
    @property
    def tasks(self) -> Sequence[str]:
        return tuple(self.instances)

    def config(self) -> dict[str, Any]:
        tasks: list[dict[str, Any]] = []
        for task_id in self.instances:
            template = self.templates[self._template_of[task_id]]
            entry: dict[str, Any] = {"task": task_id, "kind": template.kind}
            if task_id in self.hidden:
                entry["hidden"] = True
            else:
                entry["file_sha256"] = template.digest
            tasks.append(entry)
        return {
            "image": f"{IMAGE} (scripts/build-terminal-image.sh)",
            "tasks": tasks,
            **({"hidden_tasks": "task ids 'hidden-{position}': the task file of that position with parameter values "
                "drawn by random.Random(seed), seed derived from the maintainer's secret"} if self.hidden else {}),
            "horizon": self.horizon,
            "reward": f"1 when the task's tests pass after {SUBMIT!r} (which ends the episode), else 0",
            "sandbox": {"command_timeout_s": COMMAND_TIMEOUT_S, "test_timeout_s": TEST_TIMEOUT_S,
                        "memory_mb": LIMITS.memory_mb, "pids": LIMITS.pids, "cpus": LIMITS.cpus,
                        "network": "none", "user": APP_UID},
            "observation": f"instruction, then every command with its output (at most {OUTPUT_CHARS} characters)",
            "candidates": "reference action, the solution step after it, near misses, harmful and neutral "
                          "commands of the task file, submit",
        }

    def _reset(self, task: str) -> None:
        self._unpack(self._initial_files(task))
        self._outputs = []

    def _step(self, action: str) -> tuple[float, bool]:
        key = (self.task, (*self._history, action))
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            self._unpack(kept.files)
            self._outputs.append(kept.output)
            self.step_counts["kept"] += 1
            return kept.reward, kept.terminated
        reward, terminated = self._run_step(action)
        self.step_counts["run"] += 1
        if self.kept_steps:
            self._kept[key] = _Kept(self._pack(), self._outputs[-1], reward, terminated)
            while len(self._kept) > self.kept_steps:
                self._kept.popitem(last=False)
        return reward, terminated

    def _run_step(self, action: str) -> tuple[float, bool]:
        """Run ``action`` (a command, or the tests for :data:`SUBMIT`) in the sandbox."""
        task = self._instance(self.task)
        if action == SUBMIT:
            ran = self.sandbox.run(self._app, "set -e\n" + task.tests, TEST_TIMEOUT_S)
            passed = ran.status == 0
            self._outputs.append("tests passed" if passed else "tests failed")
            return (1.0 if passed else 0.0), True
        ran = self.sandbox.run(self._app, action, COMMAND_TIMEOUT_S)
        shown = _clip(ran.output.rstrip("\n"))
        if ran.status is None:  # how much it printed before it was killed depends on timing: not shown
            shown = f"[killed: still running after {COMMAND_TIMEOUT_S} s]"
        elif ran.status != 0:
            shown += f"\n[exit status {ran.status}]"
        self._outputs.append(shown.strip("\n"))
        self._check_size()
        return 0.0, False

    def observation(self) -> str:
        task = self._instance(self.task)
        parts = [f"Task: {task.instruction}", INTRO]
        for command, output in zip(self._history, self._outputs):
            parts.append(f"$ {command}" + (f"\n{output}" if output else ""))
        return "\n\n".join(parts)

    def candidates(self) -> list[str]:
        task = self._instance(self.task)
        reference = self.reference_action()
        ahead: list[str] = []
        if reference != SUBMIT:
            left = [c for c in task.solution if c not in self._history]
            ahead = left[1:2]
        ordered = [reference, *ahead, *task.near_misses, *task.harmful, "ls -A", *task.neutral, SUBMIT]
        return list(dict.fromkeys(ordered))

    def sample_candidates(self, actor_action: str, rng: random.Random) -> list[str]:
        """The actor's action, the reference action and two other candidates drawn by ``rng``, in candidate order."""
        commands = self.candidates()
        keep = {actor_action, self.reference_action()}
        others = [c for c in commands if c not in keep]
        keep |= set(rng.sample(others, min(4 - len(keep), len(others))))
        return [c for c in commands if c in keep]

    def instance(self) -> str:
        """The task's instruction (with its parameter values), which starts every observation."""
        return self._instance(self.task).instruction

    def task_type(self, task: str) -> str:
        """The task's kind (:data:`KINDS`)."""
        return self.templates[self._template_of[task]].kind

    def reference_action(self) -> str:
        """The first solution step not yet in the history, else :data:`SUBMIT`."""
        done = set(self._history)
        return next((c for c in self._instance(self.task).solution if c not in done), SUBMIT)

    def hide_tasks(self, seeds: dict[str, int | None]) -> None:
        """Rename each task in ``seeds`` to ``hidden-{position}`` and play its file with parameters drawn from the seed."""
        unknown = set(seeds) - set(self.instances)
        if unknown:
            raise KeyError(f"unknown tasks {sorted(unknown)}")
        instances: dict[str, TerminalTask | None] = {}
        hidden = set(self.hidden)
        for j, (task_id, task) in enumerate(self.instances.items()):
            if task_id not in seeds:
                instances[task_id] = task
                continue
            new = f"hidden-{j}"
            template = self._template_of.pop(task_id)
            self._template_of[new] = template
            seed = seeds[task_id]
            instances[new] = None if seed is None else self.templates[template].draw(seed, new)
            self._initial.pop(task_id, None)
            self._initial.pop(new, None)
            self._kept.clear()
            hidden.add(new)
        self.instances = instances
        self.hidden = frozenset(hidden)

    # -- snapshots ---------------------------------------------------------------------
    def snapshot(self) -> TerminalSnapshot:
        return TerminalSnapshot(task=self.task, history=self.history, outputs=tuple(self._outputs),
                                files=self._pack(), terminated=self._terminated)

    def restore(self, snapshot: Snapshot) -> None:
        """Unpack the snapshot's ``/app`` (``restore_mode="direct"``); plain snapshots and replay mode replay."""
        if self.restore_mode == "replay" or not isinstance(snapshot, TerminalSnapshot):
            super().restore(snapshot)
            self.restore_counts["replay"] += 1
            return
        if snapshot.task not in self.instances:
            raise KeyError(f"unknown task {snapshot.task!r} for environment {self.name!r}")
        self._unpack(snapshot.files)
        self._task = snapshot.task
        self._history = list(snapshot.history)
        self._outputs = list(snapshot.outputs)
        self._terminated = snapshot.terminated
        self.restore_counts["direct"] += 1

    # -- helpers -----------------------------------------------------------------------
    def task_spec(self, task: str | None = None) -> TerminalTask:
        """The playable instance of ``task`` (default: the current one)."""
        return self._instance(task or self.task)

    @property
    def app_dir(self) -> Path:
        """The host folder mounted at ``/app``: the current state."""
        return self._app

    def run_tests(self) -> bool:
        """Whether the current task's tests pass on the current ``/app`` (the state is left as it was)."""
        files = self._pack()
        try:
            return self.sandbox.run(self._app, "set -e\n" + self._instance(self.task).tests, TEST_TIMEOUT_S).status == 0
        finally:
            self._unpack(files)

    def filesystem(self) -> dict[str, tuple[str, int, str]]:
        """``/app`` as restore and replay must agree on it: relative path → (type, permission bits, SHA-256 of the
        content or link target); times are left out, and so are the bytes of git's index (its stat cache)."""
        listing: dict[str, tuple[str, int, str]] = {}
        for dirpath, dirnames, filenames in os.walk(self._app):
            for name in sorted(dirnames + filenames):
                path = Path(dirpath) / name
                rel = path.relative_to(self._app).as_posix()
                st = path.lstat()
                if path.is_symlink():
                    listing[rel] = ("link", 0, os.readlink(path))
                elif path.is_dir():
                    listing[rel] = ("dir", st.st_mode & 0o7777, "")
                elif rel.endswith(".git/index"):
                    listing[rel] = ("file", st.st_mode & 0o7777, "git index")
                else:
                    listing[rel] = ("file", st.st_mode & 0o7777, hashlib.sha256(path.read_bytes()).hexdigest())
        listing["."] = ("dir", self._app.lstat().st_mode & 0o7777, "")
        return dict(sorted(listing.items()))

    def close(self) -> None:
        """Remove the episode folder."""
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    @property
    def _app(self) -> Path:
        """The host folder mounted at ``/app`` (made on first use)."""
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix=EPISODE_PREFIX))
            os.chmod(self._root, 0o755)
        return self._root / "app"

    def _instance(self, task: str) -> TerminalTask:
        instance = self.instances[task]
        if instance is None:
            raise RuntimeError(f"task {task} is drawn from the test-split secret, which this build lacks")
        return instance

    def _initial_files(self, task: str) -> bytes:
        """The tar of the task's initial ``/app``: its setup run in the sandbox once per process."""
        if task not in self._initial:
            self._unpack(None)
            ran = self.sandbox.run(self._app, "set -e\n" + self._instance(task).setup, TEST_TIMEOUT_S)
            if ran.status != 0:
                raise RuntimeError(f"the setup of terminal task {task} failed ({ran.status}): {ran.output[-1000:]}")
            self._initial[task] = self._pack()
        return self._initial[task]

    def _pack(self) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(self._app, arcname=".")
        return buf.getvalue()

    def _unpack(self, files: bytes | None) -> None:
        """Make ``/app`` hold exactly ``files`` (``None``: empty, owned by the sandbox user)."""
        shutil.rmtree(self._app, ignore_errors=True)
        self._app.mkdir()
        if files is None:
            os.chown(self._app, APP_UID, APP_UID)
            os.chmod(self._app, 0o755)
            return
        with tarfile.open(fileobj=io.BytesIO(files), mode="r") as tar:
            tar.extractall(self._app, numeric_owner=True, filter="fully_trusted")

    def _check_size(self) -> None:
        total = sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(self._app) for f in files)
        if total > MAX_APP_BYTES:
            raise RuntimeError(f"{self.task}: /app grew to {total} bytes after {self._history[-1]!r}")


"""How many CPU threads a model server may use now: the cores the rest of the machine leaves idle.

A CPU model server decodes fastest with a thread per core while nothing else runs, and slowest with a
thread per core beside another busy process: each step waits for its thread the other process holds
(benchmarks/README.md, "Threads of the gpu worker": 2 threads 1.45 times as fast as 1 on an idle 2-core
machine, 2.1 times as slow beside one busy process).  :class:`ThreadGovernor` measures, about once a
second, how much CPU the other processes used on this process's cores (the machine's busy time from
``/proc/stat`` less this process's own) and gives the server the cores they left idle, so a user's job
that starts beside it gets a core within a second.  Linux only; elsewhere it keeps the thread count it
was started with.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ThreadGovernor", "others_busy", "own_group", "quota_cores", "threads_for"]

PROC_STAT = Path("/proc/stat")
CGROUP = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
# another process using more than this share of a core gets a core of its own
_YIELD_AT = 0.3


@dataclass(frozen=True)
class Sample:
    """A moment's counters: seconds since an arbitrary start, the machine's busy CPU seconds on our cores,
    and this process's own CPU seconds."""
    wall: float
    machine_busy: float
    own: float


def _busy_seconds(stat_text: str, cores: Collection[int]) -> float:
    """Busy CPU seconds of ``cores`` since boot, from the text of ``/proc/stat`` (everything but idle and
    iowait)."""
    tick = os.sysconf("SC_CLK_TCK")
    busy = 0
    for line in stat_text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cores:
            continue
        fields = [int(v) for v in rest.split()]
        # user nice system idle iowait irq softirq steal (guest times are inside user and nice)
        busy += sum(fields[:8]) - fields[3] - fields[4]
    return busy / tick


def own_group(proc_cgroup: str, controller: str = "") -> str:
    """This process's control group, as ``/proc/self/cgroup`` names it: the v2 entry (``0::/path``) when
    ``controller`` is empty, else the v1 hierarchy that lists ``controller``; ``/`` when there is none."""
    for line in proc_cgroup.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if (controllers == "" if not controller else controller in controllers.split(",")) and path:
            return path
    return "/"


def _quota_at(group: Path, v2: bool) -> float | None:
    try:
        if v2:
            quota, _, period = (group / "cpu.max").read_text().strip().partition(" ")
            return None if quota == "max" else int(quota) / int(period or 100_000)
        quota_us = int((group / "cpu.cfs_quota_us").read_text())
        return None if quota_us <= 0 else quota_us / int((group / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None


def quota_cores(root: Path = CGROUP, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The CPU cores this process's control group may use (a container's ``--cpus``): the smallest quota on
    the way from its own group (``proc_cgroup``) up to ``root``, from cgroup v2's ``cpu.max`` or v1's
    ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``; ``None`` when no quota is set or none can be read.  A
    container may see every core of its host and be allowed two; a process in a sub-group of a host (a
    systemd slice) is held by its group's quota and every ancestor's."""
    v2 = (root / "cgroup.controllers").is_file()
    base = root if v2 else root / "cpu"
    try:
        path = own_group(proc_cgroup.read_text(), "" if v2 else "cpu")
    except OSError:
        path = "/"
    group = base / path.lstrip("/")
    # inside a container without a cgroup namespace the mount is already the own group
    if not group.is_dir():
        group = base
    quotas = []
    while True:
        quota = _quota_at(group, v2)
        if quota is not None:
            quotas.append(quota)
        if group == base or base not in group.parents:
            break
        group = group.parent
    return min(quotas) if quotas else None


def others_busy(before: Sample, after: Sample) -> float:
    """Cores' worth of CPU the other processes used between two samples (0 when no time passed)."""
    wall = after.wall - before.wall
    if wall <= 0:
        return 0.0
    others = (after.machine_busy - before.machine_busy) - (after.own - before.own)
    return max(0.0, others / wall)


def threads_for(cores: int, others: float, limit: int) -> int:
    """The threads to use on ``cores`` cores while other processes use ``others`` cores' worth: a core for
    each of theirs (one using more than 30 % of a core counts as a whole one), the rest ours, at least one and
    at most ``limit``."""
    taken = math.floor(others + 1 - _YIELD_AT)
    return max(1, min(limit, cores - taken))


class ThreadGovernor:
    """Sets a model server's CPU threads to what the rest of the machine leaves idle (module docstring).

    Call :meth:`tick` often (each decoding step): at most every ``interval_s`` seconds it reads the
    counters, and calls ``set_threads`` when the count should change.  ``limit``: at most this many threads
    (default: this process's cores, or fewer where its control group's quota allows fewer: :func:`quota_cores`).
    """

    def __init__(self, set_threads: Callable[[int], None], threads: int, *, limit: int | None = None,
                 interval_s: float = 1.0) -> None:
        self.cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        quota = quota_cores(CGROUP, PROC_CGROUP)
        self.limit = limit or max(1, min(len(self.cores), math.floor(quota) if quota else len(self.cores)))
        self.interval_s = interval_s
        self.threads = threads
        self._set = set_threads
        self._last: Sample | None = None
        self.enabled = bool(self.cores) and PROC_STAT.is_file()

    def sample(self) -> Sample:
        """The counters now."""
        times = os.times()
        return Sample(time.monotonic(), _busy_seconds(PROC_STAT.read_text(), set(self.cores)),
                      times.user + times.system)

    def tick(self) -> int:
        """The thread count, changed first when a measuring interval has passed and the machine's load asks for
        another."""
        if not self.enabled:
            return self.threads
        now = time.monotonic()
        if self._last is not None and now - self._last.wall < self.interval_s:
            return self.threads
        current = self.sample()
        if self._last is not None:
            wanted = threads_for(len(self.cores), others_busy(self._last, current), self.limit)
            if wanted != self.threads:
                self._set(wanted)
                self.threads = wanted
        self._last = current
        return self.threads

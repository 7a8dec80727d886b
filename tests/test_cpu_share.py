"""qval.cpu_share: a CPU model server takes the cores the machine's other processes leave idle."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from qval import backbone as bb
from qval import cpu_share
from qval.cpu_share import Sample, ThreadGovernor, others_busy, threads_for

LINUX = Path("/proc/stat").is_file() and hasattr(os, "sched_getaffinity")


@pytest.mark.parametrize("cores, others, limit, threads", [
    (2, 0.0, 2, 2),     # idle machine: both cores
    (2, 0.25, 2, 2),    # a light load (a web request now and then) keeps both
    (2, 0.35, 2, 1),    # more than 30 % of a core: it gets the core
    (2, 1.0, 2, 1),
    (2, 3.0, 2, 1),     # never fewer than one
    (16, 2.5, 16, 13),  # three busy processes' worth
    (16, 0.0, 4, 4),    # the limit
])
def test_threads_are_the_cores_the_others_leave(cores: int, others: float, limit: int, threads: int) -> None:
    assert threads_for(cores, others, limit) == threads


def test_others_are_the_machine_less_this_process() -> None:
    before = Sample(wall=10.0, machine_busy=100.0, own=40.0)
    assert others_busy(before, Sample(wall=12.0, machine_busy=104.0, own=42.0)) == pytest.approx(1.0)
    assert others_busy(before, Sample(wall=12.0, machine_busy=102.0, own=42.0)) == 0.0  # only ours
    assert others_busy(before, before) == 0.0


def test_busy_time_reads_only_our_cores() -> None:
    tick = os.sysconf("SC_CLK_TCK")
    text = ("cpu  300 0 30 900 60 0 0 0 0 0\n"
            "cpu0 100 0 10 300 20 0 0 0 0 0\n"
            "cpu1 200 0 20 600 40 0 0 0 0 0\n"
            "intr 12345\n")
    assert cpu_share._busy_seconds(text, {0}) == pytest.approx(110 / tick)
    assert cpu_share._busy_seconds(text, {0, 1}) == pytest.approx(330 / tick)


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@pytest.mark.skipif(not LINUX, reason="reads /proc/stat")
def test_this_process_work_is_counted_by_the_machine_too() -> None:
    """The two counters share a unit: a second of our own work shows as at least most of a second of the machine's,
    so our own work is never taken for another process's."""
    governor = ThreadGovernor(lambda n: None, 1)
    before = governor.sample()
    _spin(0.6)
    after = governor.sample()
    assert after.own - before.own >= 0.55
    assert after.machine_busy - before.machine_busy >= 0.9 * (after.own - before.own)


@pytest.mark.skipif(not LINUX or len(os.sched_getaffinity(0)) < 2, reason="needs /proc/stat and two cores")
def test_a_busy_process_beside_gets_a_core_within_a_second() -> None:
    chosen: list[int] = []
    cores = len(os.sched_getaffinity(0))
    governor = ThreadGovernor(chosen.append, cores, interval_s=0.5)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # it is running
        governor.tick()  # the first sample
        time.sleep(0.6)
        assert governor.tick() <= cores - 1
        assert chosen and chosen[-1] == governor.threads
    finally:
        spinner.kill()
        spinner.wait()


def test_a_cpu_model_runs_on_its_threads_and_leaves_the_process_its_own(tiny_model: Path) -> None:
    own = torch.get_num_threads()
    backend = bb.backend_from_spec("tiny", {"kind": "transformers", "path": str(tiny_model), "device": "cpu",
                                            "threads": own + 1})
    seen: list[int] = []
    forward = backend.model.forward

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(torch.get_num_threads())
        return forward(*args, **kwargs)

    backend.model.forward = spy
    backend.generate([{"role": "user", "content": "Is the action good?"}], None, bb.Sampling(max_tokens=3))
    assert seen and set(seen) == {own + 1}
    assert torch.get_num_threads() == own
    auto = bb.TransformersBackend(tiny_model, device="cpu")
    assert isinstance(auto.governor, ThreadGovernor)


@pytest.mark.parametrize("threads", ["two", 0, -1, None])
def test_a_bad_thread_count_is_named(tiny_model: Path, threads: object) -> None:
    with pytest.raises(ValueError, match=f"threads must be 'auto' or a whole number of at least 1, got {threads!r}"):
        bb.TransformersBackend(tiny_model, device="cpu", threads=threads)  # type: ignore[arg-type]


@pytest.mark.skipif(not LINUX or len(os.sched_getaffinity(0)) < 2, reason="needs /proc/stat and two cores")
def test_an_auto_model_gives_a_busy_process_beside_a_core_while_it_decodes(tiny_model: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    backend = bb.TransformersBackend(tiny_model, device="cpu")
    assert backend.governor is not None
    backend.governor.interval_s = 0.05
    backend.governor.threads = cores  # as if the machine had been idle
    seen: list[int] = []
    forward = backend.model.forward

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(torch.get_num_threads())
        time.sleep(0.01)  # a step of a real model's length, so that ticks fall between steps
        return forward(*args, **kwargs)

    backend.model.forward = spy
    own = torch.get_num_threads()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        backend.generate([{"role": "user", "content": "Is the action good?"}], None,
                         bb.Sampling(max_tokens=40, temperature=0.0))
    finally:
        spinner.kill()
        spinner.wait()
    assert seen[0] == cores and seen[-1] <= cores - 1
    assert torch.get_num_threads() == own


def _v2(root: Path, quotas: dict[str, str], own: str) -> Path:
    """A cgroup v2 tree under ``root`` with ``cpu.max`` at each of ``quotas``' groups, and a
    ``/proc/self/cgroup`` naming ``own``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / own.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for group, text in quotas.items():
        (root / group.lstrip("/") / "cpu.max").write_text(text)
    (root / "self-cgroup").write_text(f"0::{own}\n")
    return root / "self-cgroup"


def test_a_control_groups_quota_caps_the_threads(tmp_path: Path) -> None:
    """A container may see every core of its host and be allowed two: the quota is the limit."""
    proc = _v2(tmp_path, {"/": "250000 100000\n"}, "/")
    assert cpu_share.quota_cores(tmp_path, proc) == pytest.approx(2.5)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpu_share.quota_cores(tmp_path, proc) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "self-cgroup").write_text("4:memory:/x\n2:cpu,cpuacct:/\n0::/\n")
    assert cpu_share.quota_cores(v1, v1 / "self-cgroup") is None
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("150000\n")
    assert cpu_share.quota_cores(v1, v1 / "self-cgroup") == pytest.approx(1.5)
    assert cpu_share.quota_cores(tmp_path / "none", tmp_path / "none" / "self-cgroup") is None


def test_the_quota_is_read_from_the_own_group_and_its_ancestors(tmp_path: Path) -> None:
    """On a host without a cgroup namespace the process sits in a sub-group (a systemd slice, a service): its
    group's quota holds it, and so does every ancestor's, the tightest winning; the root's absence of one
    says nothing."""
    own = "/system.slice/qval.service"
    proc = _v2(tmp_path, {"/system.slice": "300000 100000\n", own: "150000 100000\n"}, own)
    assert cpu_share.quota_cores(tmp_path, proc) == pytest.approx(1.5)
    (tmp_path / own.lstrip("/") / "cpu.max").write_text("max 100000\n")
    assert cpu_share.quota_cores(tmp_path, proc) == pytest.approx(3.0)
    (tmp_path / "system.slice" / "cpu.max").write_text("max 100000\n")
    assert cpu_share.quota_cores(tmp_path, proc) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu" / "docker" / "abc").mkdir(parents=True)
    for group, quota in (("docker", "-1"), ("docker/abc", "50000")):
        (v1 / "cpu" / group / "cpu.cfs_quota_us").write_text(quota + "\n")
        (v1 / "cpu" / group / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "self-cgroup").write_text("3:cpuset:/\n2:cpuacct,cpu:/docker/abc\n")
    assert cpu_share.quota_cores(v1, v1 / "self-cgroup") == pytest.approx(0.5)
    # a container without a namespace: its own group is the mount, and the path it is named by is not there
    (v1 / "self-cgroup").write_text("2:cpu,cpuacct:/elsewhere/def\n")
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("200000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_share.quota_cores(v1, v1 / "self-cgroup") == pytest.approx(2.0)


def test_own_group_reads_v2_and_v1_lines() -> None:
    text = "12:cpu,cpuacct:/a/b\n1:name=systemd:/s\n0::/user.slice/x.scope\n"
    assert cpu_share.own_group(text) == "/user.slice/x.scope"
    assert cpu_share.own_group(text, "cpu") == "/a/b"
    assert cpu_share.own_group(text, "memory") == "/"
    assert cpu_share.own_group("") == "/"


def test_the_governor_keeps_within_the_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _v2(tmp_path, {"/": "100000 100000\n"}, "/")
    monkeypatch.setattr(cpu_share, "CGROUP", tmp_path)
    monkeypatch.setattr(cpu_share, "PROC_CGROUP", proc)
    assert ThreadGovernor(lambda n: None, 1).limit == 1

"""The sandboxed method-container runner (qval.containers), proven with real podman runs.

Every limit is checked from inside a container: one probe image (the project's offline base image
plus ``probes.py``) does what ``/input/probe`` names.  After each test no container, job directory
or mount of the runner may be left.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from qval import containers as qc
from qval import schema
from qval.scoring import score, truth_from_dataset

REPO = Path(__file__).resolve().parents[1]
BASE_IMAGE = "localhost/qval-base:py3-slim"
SESSION = uuid.uuid4().hex[:8]  # tags of our own: other test sessions may share the default store
PROBE_IMAGE = f"localhost/qval-test-probes:{SESSION}"

pytestmark = pytest.mark.container

PROBES = r'''
import json, os, resource, socket, sys, time

def method():
    """A tiny method: a deterministic score for every point of /input."""
    with open("/input/points.jsonl") as fh:
        points = [json.loads(line) for line in fh]
    with open("/output/predictions.jsonl", "w") as out:
        for i, p in enumerate(points):
            out.write(json.dumps({"id": p["id"], "score": (i * 7) % 11 + len(p["action"])}) + "\n")
    json.dump({"points": len(points)}, open("/output/metadata.json", "w"))
    print("scored", len(points), "points")

def sandbox():
    """Report identity, capabilities, network, writable paths and any file holding a token."""
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
    report = {"uid": os.getuid(), "gid": os.getgid(), "cap_eff": status["CapEff"].strip(),
              "cap_bnd": status["CapBnd"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
              "interfaces": sorted(os.listdir("/sys/class/net"))}
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2).close()
        report["connect"] = "connected"
    except OSError as exc:
        report["connect"] = type(exc).__name__ + ": " + str(exc)
    writes = {}
    for path in ["/probe-file", "/etc/probe", "/usr/lib/probe", "/input/probe-file", "/usr/bin/probe",
                 "/output/probe-file", "/tmp/probe-file"]:
        try:
            open(path, "w").write("x")
            writes[path] = "written"
        except OSError as exc:
            writes[path] = exc.strerror
    report["writes"] = writes
    token = TOKEN.encode()
    found = []
    for root, dirs, files in os.walk("/"):
        if root in ("/proc", "/sys", "/dev"):
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(root, name)
            if path == "/input/token":
                continue
            try:
                if os.path.islink(path) or os.path.getsize(path) > 4 << 20:
                    continue
                if token in name.encode() or token in open(path, "rb").read():
                    found.append(path)
            except OSError:
                pass
    report["token_found"] = found
    start, children = time.time(), []
    for _ in range(2):  # two busy processes for 1.5 s of wall clock
        pid = os.fork()
        if pid == 0:
            while time.time() - start < 1.5:
                pass
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    report["busy_cpu_s"] = usage.ru_utime + usage.ru_stime
    print(json.dumps(report))
    method()

def memhog():
    chunks = []
    while True:
        chunks.append(bytearray(16 << 20))  # zero-filled: every page is touched
        print("allocated", 16 * len(chunks), "MiB", flush=True)

def forkbomb():
    count = 0
    while True:
        try:
            pid = os.fork()
        except OSError as exc:
            print(json.dumps({"forked": count, "error": exc.strerror}), flush=True)
            sys.exit(3)
        if pid == 0:  # a sleeper whose command line carries the token
            os.execv(sys.executable, ["python3", "-c", "import time; time.sleep(60)", TOKEN])
        count += 1

def sleeper():
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # kept across exec
    if TOKEN not in sys.argv:  # run on with the token in the command line
        os.execv(sys.executable, ["python3", "/probes.py", TOKEN])
    print("sleeping", flush=True)
    time.sleep(10**6)

def flood():
    """Write 1 GB to /output, ignoring ENOSPC, then linger: only the runner can stop it."""
    block = b"x" * (1 << 20)
    with open("/output/big", "wb", buffering=0) as fh:
        for _ in range(1024):
            try:
                fh.write(block)
            except OSError:
                pass
    time.sleep(60)

def spam():
    for i in range(300000):
        print("line", i, "x" * 80)
    print("the end")
    sys.exit(5)

def nothing():
    print("done, but wrote nothing")

def badfile():
    ids = [json.loads(line)["id"] for line in open("/input/points.jsonl")]
    with open("/output/predictions.jsonl", "w") as out:
        out.write(json.dumps({"id": ids[0], "score": 0.5}) + "\n")
        out.write(json.dumps({"id": "no-such-id", "score": 0.1}) + "\n")
        out.write(json.dumps({"id": ids[0], "score": 0.7}) + "\n")

def symlink():
    os.symlink("/etc/passwd", "/output/predictions.jsonl")

TOKEN = open("/input/token").read().strip() if os.path.exists("/input/token") else "no-token"
globals()[open("/input/probe").read().strip()]()
'''


# -- fixtures (engine and base_image: tests/conftest.py) ---------------------------------
@pytest.fixture(scope="session")
def probe_tar(engine: qc.Engine, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The probe image, built on the project's base image and saved as a docker-archive."""
    context = tmp_path_factory.mktemp("probe-image")
    (context / "probes.py").write_text(PROBES)
    (context / "Containerfile").write_text(f'FROM {BASE_IMAGE}\nCOPY probes.py /probes.py\nCMD ["python3", "/probes.py"]\n')
    result = engine.call("build", "-q", "-t", PROBE_IMAGE, str(context))
    assert result.returncode == 0, result.stderr
    tar = context / "probes.tar"
    result = engine.call("save", "-o", str(tar), PROBE_IMAGE)
    assert result.returncode == 0, result.stderr
    yield tar
    engine.call("rmi", PROBE_IMAGE)


@pytest.fixture
def nothing_left(engine: qc.Engine):
    """After the test: no runner container anywhere, no job directory, no mount under the work root."""
    yield
    assert list(engine.work_root.iterdir()) == []
    assert qc._mounts_under(engine.work_root) == []
    listed = engine.call("ps", "-a", "--filter", f"label={qc.LABEL}", "--format", "{{.Names}}")
    assert listed.stdout.split() == []
    assert _runtime_containers_under(engine.work_root) == []


def _runtime_containers_under(folder: Path) -> list[str]:
    """The IDs of the containers the OCI runtime still holds whose bundle lies under ``folder``."""
    listed = subprocess.run([qc.RUNTIME, "list", "--format", "json"], capture_output=True, text=True, check=True)
    return [c["id"] for c in json.loads(listed.stdout or "null") or [] if c["bundle"].startswith(f"{folder}/")]


def _processes_with(token: str) -> list[str]:
    """Command lines of the host's processes that carry ``token`` (the probes put it in theirs)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and token in cmdline:
            found.append(cmdline)
    return found


def _probe(engine: qc.Engine, tar: Path, probe: str, limits: qc.Limits, ds: schema.Dataset,
           token: str = "no-token") -> qc.RunResult:
    with qc.Job(engine) as job:
        image_id = job.load(tar)
        qc.write_input(ds, "dev", "q", job.input_dir)
        (job.input_dir / "probe").write_text(probe)
        (job.input_dir / "token").write_text(token)
        return job.run(image_id, limits)


# -- /input and archives (no engine needed) -----------------------------------------------
def test_input_folder_holds_inputs_only(frozenlake: schema.Dataset, tmp_path: Path) -> None:
    qc.write_input(frozenlake, "dev", "q", tmp_path / "q")
    points = [json.loads(line) for line in (tmp_path / "q" / "points.jsonl").read_text().splitlines()]
    states = frozenlake.states_in("dev")
    assert [p["id"] for p in points] == [c.id for s in states for c in s.candidates]
    assert set(points[0]) == {"id", "group", "task", "history", "state", "action", "next_state", "is_actor",
                              "image", "next_image", "end_image"}  # goal images: a public split
    first = states[0]
    assert points[0]["group"] == first.id and points[0]["state"] == first.observation
    assert points[0]["next_state"] == first.candidates[0].next_state
    context = json.loads((tmp_path / "q" / "context.json").read_text())
    assert (context["target"], context["discount"], context["horizon"]) == ("q", 0.95, 30)
    assert context["action_space"] == sorted({c.action for s in states for c in s.candidates})
    assert context["num_points"] == len(points) and context["reward"] == "1 on reaching the goal, else 0"
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == ["context.json", "images", "points.jsonl"]
    assert "label" not in (tmp_path / "q" / "points.jsonl").read_text()

    qc.write_input(frozenlake, "dev", "v", tmp_path / "v")
    v_points = [json.loads(line) for line in (tmp_path / "v" / "points.jsonl").read_text().splitlines()]
    assert [p["id"] for p in v_points] == [s.id for s in states]
    assert set(v_points[0]) == {"id", "task", "history", "state", "image", "end_image"}


def test_input_folder_copies_the_images_it_names(frozenlake: schema.Dataset, tmp_path: Path) -> None:
    plain = [replace(s, image=None, end_image=None,
                     candidates=tuple(replace(c, next_image=None, end_image=None) for c in s.candidates))
             for s in frozenlake.states_in("dev")]  # no image but the one named here
    state = plain[0]
    pictured = replace(frozenlake, states=[replace(state, image="s0.png")] + plain[1:], images={})
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "s0.png").write_bytes(b"\x89PNG fake")
    qc.write_input(pictured, state.split, "v", tmp_path / "in", images_from=tmp_path / "imgs")
    assert (tmp_path / "in" / "images" / "s0.png").read_bytes() == b"\x89PNG fake"
    with pytest.raises(schema.SchemaError, match="names 1 images but no image folder"):
        qc.write_input(pictured, state.split, "v", tmp_path / "in2")
    # Without images_from, the dataset's own images are written (FrozenLake has one per state, and a goal image).
    own = qc.write_input(frozenlake, "dev", "v", tmp_path / "own")
    dev = frozenlake.states_in("dev")
    assert sorted(p.name for p in (own / "images").iterdir()) == sorted([s.image for s in dev] + [s.end_image for s in dev])
    assert (own / "images" / dev[0].image).read_bytes() == frozenlake.images[dev[0].image]


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def image_archive(path: Path, layers: list[bytes], *, config: bytes | None = None, config_id: str | None = None) -> Path:
    """A docker-archive laid out as ``podman save`` writes one: each layer an uncompressed tar named
    by its SHA-256, the image configuration (naming those digests) named by its own, a manifest.

    ``config``: other bytes for the configuration; ``config_id``: another name for it (a spoof)."""
    digests = [_sha256(layer) for layer in layers]
    if config is None:
        config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/true"]},
                             "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in digests]}}).encode()
    config_id = config_id or _sha256(config)
    manifest = [{"Config": f"{config_id}.json", "RepoTags": None, "Layers": [f"{d}.tar" for d in digests]}]
    members = {f"{d}.tar": layer for d, layer in zip(digests, layers)}
    return _tar(path, {**members, f"{config_id}.json": config, "manifest.json": json.dumps(manifest).encode()})


def test_archives_that_are_not_one_image_are_refused(tmp_path: Path) -> None:
    config = "a" * 64 + ".json"
    manifest = [{"Config": config, "RepoTags": ["x:1"], "Layers": ["l/layer.tar"]}]
    text = tmp_path / "text.tar"
    text.write_bytes(b"just text\n" * 100)
    cases = {
        "not a tar archive": text,
        "no manifest.json": _tar(tmp_path / "oci.tar", {"index.json": b"{}", "oci-layout": b"{}"}),
        "exactly one image": _tar(tmp_path / "two.tar", {"manifest.json": json.dumps(manifest * 2).encode()}),
        "unsafe or repeated entry '../evil'": _tar(tmp_path / "evil.tar", {"../evil": b"x"}),
        "names files the archive lacks: l/layer.tar": _tar(
            tmp_path / "short.tar", {"manifest.json": json.dumps(manifest).encode(), config: b"{}"}),
    }
    for message, path in cases.items():
        with pytest.raises(qc.ArchiveRejected, match=message.replace("(", r"\(")):
            qc.sanitize_archive(path, tmp_path / "out.tar")

    layer = _tar(tmp_path / "layer.tar", {"f": b"y"}).read_bytes()
    genuine = json.dumps({"rootfs": {"type": "layers", "diff_ids": [f"sha256:{_sha256(layer)}"]}}).encode()
    config = f"{_sha256(genuine)}.json"
    manifest = [{"Config": config, "RepoTags": ["x:1"], "Layers": ["l/layer.tar"]}]
    good = tmp_path / "good.tar"
    with tarfile.open(good, "w") as tar:  # docker's layout: l/layer.tar a link to the layer named by its digest
        for name, data in {"manifest.json": json.dumps(manifest).encode(), config: genuine,
                           f"{_sha256(layer)}.tar": layer, "repositories": b'{"x": {"1": "b"}}'}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("l/layer.tar")
        link.type, link.linkname = tarfile.SYMTYPE, f"../{_sha256(layer)}.tar"
        tar.addfile(link)
    assert qc.sanitize_archive(good, tmp_path / "out.tar") == _sha256(genuine)
    with tarfile.open(tmp_path / "out.tar") as out:
        assert sorted(out.getnames()) == sorted([config, "l/layer.tar", f"{_sha256(layer)}.tar", "manifest.json"])
        assert json.load(out.extractfile("manifest.json"))[0]["RepoTags"] is None
    with pytest.raises(qc.ArchiveRejected, match="the archive is 0 MiB; the limit is 0 MiB"):
        qc.sanitize_archive(good, tmp_path / "out.tar", max_archive_bytes=1000)

    # A gzip bomb: 64 MiB of zeros compress to a few KiB; the uncompressed cap stops it.
    bomb = tmp_path / "bomb.tar.gz"
    with tarfile.open(bomb, "w:gz") as tar:
        info = tarfile.TarInfo("zeros")
        info.size = 64 << 20
        tar.addfile(info, io.BytesIO(bytes(64 << 20)))
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(qc.ArchiveRejected, match="uncompressed archive is larger than the limit of 16 MiB"):
        qc.sanitize_archive(bomb, tmp_path / "out.tar", max_image_bytes=16 << 20)


def test_the_image_id_is_computed_from_the_archives_content(tmp_path: Path) -> None:
    """The ID is the configuration's SHA-256, and the configuration's layer digests must be the
    layers' (issue 20, item 6): no file name the archive gives is believed."""
    layer = _tar(tmp_path / "layer.tar", {"f": b"y"}).read_bytes()
    other = _tar(tmp_path / "other.tar", {"f": b"z"}).read_bytes()
    honest = image_archive(tmp_path / "honest.tar", [layer])
    with tarfile.open(honest) as tar:
        config = next(tar.extractfile(m).read() for m in tar if m.name.endswith(".json") and m.name != "manifest.json")
    image_id = qc.sanitize_archive(honest, Path(os.devnull))
    assert image_id == _sha256(config)
    victim = "b" * 64
    cases = {
        f"the image configuration is named {victim[:12]} but its SHA-256 is {image_id[:12]}":
            image_archive(tmp_path / "named.tar", [layer], config_id=victim),
        f"layer 1 ('{_sha256(other)}.tar') has SHA-256 {_sha256(other)[:12]}, not the digest {_sha256(layer)[:12]}":
            image_archive(tmp_path / "swapped.tar", [other], config=config),
        "the image configuration is not a JSON object":
            image_archive(tmp_path / "text.tar", [layer], config=b"not json"),
        "the image configuration has no rootfs.diff_ids":
            image_archive(tmp_path / "bare.tar", [layer], config=b'{"os": "linux"}'),
        "manifest.json lists 2 layers; the image configuration names 1 layer digests":
            image_archive(tmp_path / "more.tar", [layer, other], config=config),
    }
    for message, path in cases.items():
        with pytest.raises(qc.ArchiveRejected, match=re.escape(message)):
            qc.sanitize_archive(path, Path(os.devnull))


def test_what_cannot_be_removed_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A job directory the clean-up cannot remove is not left silently (issue 26): the attempts
    end, and what is left is logged and returned (the next sweep tries again)."""
    job_dir = tmp_path / "jobs" / "qv000000000000"
    job_dir.mkdir(parents=True)
    stuck = job_dir / "stuck"
    stuck.write_text("x")
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +i (an immutable file) needs root and a filesystem that has the attribute")
    try:
        with caplog.at_level(logging.WARNING, logger="qval.containers"):
            assert qc._remove_tree(job_dir, attempts=2) == [str(stuck)]
        assert f"{job_dir} is still there after 2 attempts" in caplog.text and str(stuck) in caplog.text
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)
    assert qc._remove_tree(job_dir) == [] and not job_dir.exists()


def test_the_sandbox_command_line(tmp_path: Path) -> None:
    """GPUs are passed only when asked for, in each engine's own way (no GPU on the test machines)."""
    for kind, gpu_flag in (("podman", ["--device", "nvidia.com/gpu=all"]), ("docker", ["--gpus", "all"])):
        job = qc.Job(qc.Engine(kind=kind, work_root=tmp_path / kind))
        plain = job.run_argv("n", "f" * 64, qc.Limits())
        with_gpu = job.run_argv("n", "f" * 64, qc.Limits(gpu=True))
        assert with_gpu[-1] == plain[-1] == "f" * 64
        assert with_gpu[:-1] == plain[:-1] + gpu_flag
        assert ("--root" in plain) == (kind == "podman")
        assert "--rm" in plain and "--pull=never" in plain  # removed by the engine as it exits; never pulled
        job.close()
        assert not job.dir.exists()


# -- real podman runs --------------------------------------------------------------------
def test_a_method_runs_and_is_scored_like_an_upload(engine, probe_tar, frozenlake, tmp_path, nothing_left) -> None:
    gz = tmp_path / "probes.tar.gz"
    with probe_tar.open("rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst)
    with qc.Job(engine) as job:
        image_id = job.load(gz)
        qc.write_input(frozenlake, "dev", "q", job.input_dir)
        (job.input_dir / "probe").write_text("method")
        started = time.monotonic()
        result = job.run(image_id, qc.Limits(timeout_s=60, memory_mb=256))
        overhead = time.monotonic() - started
    num_candidates = sum(len(s.candidates) for s in frozenlake.states_in("dev"))
    assert result.error is None, (result.error, result.stderr)
    assert result.exit_code == 0 and result.stdout == f"scored {num_candidates} points\n"
    assert result.metadata == {"points": num_candidates}
    assert overhead < 15

    truth = truth_from_dataset(frozenlake, "dev", "q")
    evaluation = qc.evaluate(result, truth, bootstrap_resamples=0)
    assert evaluation.outcome == "finished" and evaluation.coverage.provided == evaluation.coverage.expected
    frame = pd.read_json(io.BytesIO(result.predictions), lines=True, dtype={"id": str})
    expected = score(truth, frame["id"].to_numpy(object), frame["score"].to_numpy(np.float64), bootstrap_resamples=0)
    assert [(r.metric, r.value) for r in evaluation.rows] == [(r.metric, r.value) for r in expected]
    assert {r.metric for r in evaluation.rows} >= {"spearman", "kendall_tau", "ranking_spearman"}


def test_the_sandbox_seen_from_inside(engine, probe_tar, frozenlake, tmp_path, nothing_left) -> None:
    token = uuid.uuid4().hex
    # Labels planted on the host: beside the job directories, in /tmp and in a dataset directory.
    planted = [engine.work_root.parent / f"qvt-labels-{token}.jsonl", Path("/tmp") / f"labels-{token}.txt"]
    for path in planted:
        path.write_text(f'{{"id": "x", "value": 1.0, "token": "{token}"}}\n')
    ds_dir = frozenlake.write(tmp_path / "dataset")
    with (ds_dir / "labels.jsonl").open("a") as fh:
        fh.write(json.dumps({"id": token, "target": "q", "value": 0.0}) + "\n")
    try:
        result = _probe(engine, probe_tar, "sandbox", qc.Limits(timeout_s=60, cpus=0.5, memory_mb=256),
                        frozenlake, token=token)
    finally:
        for path in planted:
            path.unlink()
    assert result.error is None, (result.error, result.stderr)
    report = json.loads(result.stdout.splitlines()[0])
    assert (report["uid"], report["gid"]) == (65534, 65534)
    assert int(report["cap_eff"], 16) == 0 and int(report["cap_bnd"], 16) == 0
    assert report["no_new_privs"] == "1"
    assert report["interfaces"] == ["lo"]
    assert report["connect"].startswith("OSError") and "unreachable" in report["connect"]
    assert report["writes"] == {
        "/probe-file": "Read-only file system", "/etc/probe": "Read-only file system",
        "/usr/lib/probe": "Read-only file system", "/input/probe-file": "Read-only file system",
        "/usr/bin/probe": "Read-only file system", "/output/probe-file": "written", "/tmp/probe-file": "written",
    }
    assert report["token_found"] == []
    assert report["busy_cpu_s"] < 1.1  # two busy processes for 1.5 s under --cpus=0.5: at most ~0.75 s


def test_a_memory_hog_ends_out_of_memory(engine, probe_tar, frozenlake, nothing_left) -> None:
    result = _probe(engine, probe_tar, "memhog", qc.Limits(timeout_s=60, memory_mb=128), frozenlake)
    assert result.error == "out of memory: killed at the 128 MiB memory limit"
    assert "allocated 16 MiB" in result.stdout and "allocated 256 MiB" not in result.stdout
    assert result.wall_s < 30


def test_a_fork_bomb_is_contained(engine, probe_tar, frozenlake, nothing_left) -> None:
    token = uuid.uuid4().hex
    result = _probe(engine, probe_tar, "forkbomb", qc.Limits(timeout_s=60, pids=32), frozenlake, token)
    assert result.error == "exited with code 3"
    report = json.loads(result.stdout)
    assert 10 < report["forked"] < 32 and report["error"] == "Resource temporarily unavailable"
    assert _processes_with(token) == []  # the sleeping children went with the container


@pytest.mark.slow
def test_a_sleeper_ends_timeout_near_its_limit(engine, probe_tar, frozenlake, nothing_left) -> None:
    result = _probe(engine, probe_tar, "sleeper", qc.Limits(timeout_s=4), frozenlake)
    assert result.error == "timeout: still running after the 4 s limit"
    assert result.stdout == "sleeping\n"
    assert 4 <= result.wall_s < 8


def test_writing_1_gb_to_output_is_stopped(engine, probe_tar, frozenlake, nothing_left) -> None:
    free_before = shutil.disk_usage(engine.work_root).free
    result = _probe(engine, probe_tar, "flood", qc.Limits(timeout_s=60, output_mb=16), frozenlake)
    assert result.error == "output too large: /output reached its 16 MiB limit"
    assert result.wall_s < 15  # stopped by the runner, not by its 60 s sleep or the timeout
    assert free_before - shutil.disk_usage(engine.work_root).free < 256 << 20


def _mounts_at(point: Path) -> int:
    """How many mounts are stacked on ``point`` (from the kernel's own table)."""
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        return sum(line.split()[4] == str(point) for line in fh)


def test_mounts_left_in_a_stopped_job_are_all_removed(engine, probe_tar, frozenlake, nothing_left) -> None:
    """Issue 26: after an output-size kill, job directories were left behind under load.

    Each podman process on a job's store mounts the store's ``overlay`` folder on itself as it
    starts (unless it is mounted already) and unmounts it as it ends -- but not when it exits on
    an error.  An output-size kill starts several at once: the runner's ``rm -f``, ``run --rm``
    ending, and the exit command conmon runs when the container stops, which a loaded machine
    starts late; two can stack their mounts, and one that fails (its container is gone) leaves
    its mount.  The runner unmounted once, then retried only the removal, for 15 s, and gave up
    silently.  Here the two mounts are made for real after the kill: closing must remove both.
    """
    with qc.Job(engine) as job:
        image_id = job.load(probe_tar)
        qc.write_input(frozenlake, "dev", "q", job.input_dir)
        (job.input_dir / "probe").write_text("flood")
        result = job.run(image_id, qc.Limits(timeout_s=60, output_mb=16))
        overlay = job.dir / "store" / "overlay"
        assert overlay.is_dir()
        for _ in range(2):
            subprocess.run(["mount", "--bind", str(overlay), str(overlay)], check=True)
        assert _mounts_at(overlay) == 2
        started = time.monotonic()
    assert time.monotonic() - started < 10
    assert result.error == "output too large: /output reached its 16 MiB limit"
    # nothing_left: no job directory, no mount, no container


def test_failures_a_submitter_can_act_on(engine, probe_tar, frozenlake, nothing_left) -> None:
    truth = truth_from_dataset(frozenlake, "dev", "q")
    with qc.Job(engine) as job:
        image_id = job.load(probe_tar)
        qc.write_input(frozenlake, "dev", "q", job.input_dir)
        results = {}
        for probe in ("spam", "nothing", "badfile", "symlink"):
            (job.input_dir / "probe").write_text(probe)
            results[probe] = job.run(image_id, qc.Limits(timeout_s=60))

    spam = results["spam"]
    assert spam.error == "exited with code 5" and spam.exit_code == 5
    assert spam.stdout.startswith("line 0 ") and spam.stdout.endswith("line 299999 " + "x" * 80 + "\nthe end\n")
    assert "bytes left out ...]" in spam.stdout and len(spam.stdout.encode()) < 2 * qc.LOG_KEEP_BYTES + 100

    assert results["nothing"].error == "no predictions written: the container exited 0 without writing /output/predictions.jsonl"
    assert results["nothing"].stdout == "done, but wrote nothing\n"
    assert results["symlink"].error.startswith("no predictions written: /output/predictions.jsonl is not a regular file")

    evaluation = qc.evaluate(results["badfile"], truth, bootstrap_resamples=0)
    assert evaluation.outcome == "failed" and evaluation.error.startswith("predictions invalid: ")
    assert "line 2: id 'no-such-id' is not an id of this split" in evaluation.error and "line 3" in evaluation.error
    assert {p.code for p in evaluation.problems} == {"unknown_id", "duplicate_id"}
    assert qc.evaluate(results["nothing"], truth).error == results["nothing"].error


def test_a_command_that_cannot_start_is_told_apart_from_one_exiting_127(engine, probe_tar, frozenlake,
                                                                          nothing_left) -> None:
    """``run --rm`` leaves no container to inspect: the engine's exit status and its ``Error:`` line tell."""
    with qc.Job(engine) as job:
        image_id = job.load(probe_tar)
        qc.write_input(frozenlake, "dev", "q", job.input_dir)
        missing = job.run(image_id, qc.Limits(timeout_s=60), command=("/no-such-program",))
        own = job.run(image_id, qc.Limits(timeout_s=60),
                      command=("python3", "-c", "import sys; print('Error: mine', file=sys.stderr); sys.exit(127)"))
    assert missing.error == "the container could not be started (podman exit status 127; see stderr)"
    assert missing.exit_code is None and "no-such-program" in missing.stderr
    assert (own.error, own.exit_code) == ("exited with code 127", 127)  # its own "Error:" is not the engine's


def test_a_tar_claiming_another_images_tag_changes_nothing(engine, probe_tar, tmp_path, nothing_left) -> None:
    def image_id(ref: str) -> str:
        return engine.call("image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()

    base_before = image_id(BASE_IMAGE)
    hijack = tmp_path / "hijack.tar"
    with tarfile.open(probe_tar) as src, tarfile.open(hijack, "w") as dst:
        for member in src:
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name == "manifest.json":
                manifest = json.loads(data)
                manifest[0]["RepoTags"] = [BASE_IMAGE]
                data = json.dumps(manifest).encode()
            elif member.name == "repositories":
                data = json.dumps({"localhost/qval-base": {"py3-slim": "0" * 64}}).encode()
            if data is not None:
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)

    with qc.Job(engine) as job:
        loaded = job.load(hijack)
        tags = engine.call("images", "--format", "{{.Repository}}:{{.Tag}}", store=job.dir).stdout.split()
        assert tags == ["<none>:<none>"]  # loaded by ID only, even in its own store
    assert loaded == image_id(PROBE_IMAGE).removeprefix("sha256:") != base_before.removeprefix("sha256:")
    assert image_id(BASE_IMAGE) == base_before


def _worker_killed_while_its_container_runs(engine, probe_tar, tmp_path) -> tuple[Path, list[str], str]:  # type: ignore[no-untyped-def]
    """A worker process that runs the probe's sleeper in a job, killed (SIGKILL) once its container runs: the job's
    folder, the container's names as the engine listed them then, and the token only the container's processes
    carry (in their environment, not their command line)."""
    token = uuid.uuid4().hex
    worker = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from qval import build, containers as qc
        from qval.envs import registry
        ds = build.build(registry.BUILDERS["frozenlake"], Path({str(tmp_path / "ds")!r}))
        job = qc.Job(qc.Engine(work_root=Path({str(engine.work_root)!r})))
        image_id = job.load(Path({str(probe_tar)!r}))
        qc.write_input(ds, "dev", "q", job.input_dir)
        (job.input_dir / "probe").write_text("sleeper")
        (job.input_dir / "token").write_text(os.environ["QVT_TOKEN"])
        job.run(image_id, qc.Limits(timeout_s=300))
    """)
    proc = subprocess.Popen([sys.executable, "-c", worker], cwd=REPO, start_new_session=True,
                            env=dict(os.environ, QVT_TOKEN=token))  # not in its command line
    deadline = time.monotonic() + 120
    running: list[str] = []
    while not (running and _processes_with(token)) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
        running = [name for job_dir in engine.work_root.iterdir() if (job_dir / "store").exists()
                   for name in engine.call("ps", "--format", "{{.Names}}", store=job_dir).stdout.split()]
    assert running, "the worker never started its container"
    os.kill(proc.pid, signal.SIGKILL)  # the worker dies; its container, store and /output mount stay
    proc.wait()
    assert len(list(engine.work_root.iterdir())) == 1 and qc._mounts_under(engine.work_root)
    assert len(_processes_with(token)) == 1
    return next(engine.work_root.iterdir()), running, token


@pytest.mark.slow
def test_sweep_removes_what_a_killed_worker_left(engine, probe_tar, frozenlake, tmp_path, nothing_left) -> None:
    _, running, token = _worker_killed_while_its_container_runs(engine, probe_tar, tmp_path)
    removed = qc.sweep(engine)
    assert running[0] in removed
    assert _processes_with(token) == []
    # nothing_left checks the work root, the mounts and the shared store


@pytest.mark.slow
def test_sweep_ends_a_container_its_engine_no_longer_lists(engine, probe_tar, frozenlake, tmp_path,
                                                           nothing_left) -> None:
    """Podman has listed nothing in a killed worker's job store while the job's container ran (its conmon did; 2 of
    13 runs of the killed-worker test in tests/test_faults.py). With the store's state database gone the engine
    lists nothing in the same way; the sweep still ends the container and names it."""
    job_dir, running, token = _worker_killed_while_its_container_runs(engine, probe_tar, tmp_path)
    (job_dir / "store" / "libpod" / "bolt_state.db").unlink()
    assert engine.call("ps", "-a", "--format", "{{.Names}}", store=job_dir).stdout.split() == []
    removed = qc.sweep(engine)
    assert running == [qc.container_name(job_dir.name)] and running[0] in removed
    assert _processes_with(token) == []


@pytest.mark.slow
@pytest.mark.parametrize("forgotten_by", ["podman's state", "podman's state and store", "podman and runc"])
def test_sweep_ends_a_container_killed_between_its_create_and_start(engine, probe_tar, forgotten_by,
                                                                    nothing_left) -> None:
    """A worker killed while its `podman run` started the container -- after runc's `create`, before its `start` --
    left conmon and a waiting `runc init` behind, while podman's state and store no longer had the container (the
    killed-worker test in tests/test_faults.py failed that way in CI, and in 4 of 8 runs here before the whole fix).
    `create` and `init` leave a container in that state; then podman's state database goes, or its store's folder
    for the container as well, or runc's state instead (a `runc create` killed before it wrote it: only the
    container's cgroup still names it). The sweep ends the container in every case and names it."""
    with qc.Job(engine) as job:
        image_id = job.load(probe_tar)
        name = qc.container_name(job.id)
        argv = job.run_argv(name, image_id, qc.Limits())
        argv[argv.index("run")] = "create"
        job._mount_output(qc.Limits().output_mb)
        created = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, CONTAINERS_CONF=str(engine.conf)))
        assert created.returncode == 0, created.stderr
        assert engine.call("init", name, store=job.dir).returncode == 0
        container_id = engine.call("inspect", "--format", "{{.Id}}", name, store=job.dir).stdout.strip()
        state = json.loads(subprocess.run([qc.RUNTIME, "state", container_id], capture_output=True).stdout)
        assert state["status"] == "created" and qc._running(state["pid"])
        (job.dir / "store" / "libpod" / "bolt_state.db").unlink()
        assert engine.call("ps", "-a", "--format", "{{.Names}}", store=job.dir).stdout.split() == []
        if forgotten_by == "podman's state and store":
            folder = job.dir / "store" / "overlay-containers" / container_id
            for point in qc._mounts_under(folder):
                assert subprocess.run(["umount", str(point)]).returncode == 0
            shutil.rmtree(folder)
        elif forgotten_by == "podman and runc":
            shutil.rmtree(Path("/run/runc") / container_id)  # runc's state folder (root's default --root)
            assert subprocess.run([qc.RUNTIME, "state", container_id], capture_output=True).returncode != 0
        removed = qc.sweep(engine)
        assert name in removed and str(job.dir) in removed
        assert subprocess.run([qc.RUNTIME, "state", container_id], capture_output=True).returncode != 0
        assert not qc._running(state["pid"])


# -- the starter kit through the CLI ----------------------------------------------------
KIT_IMAGE = f"localhost/qval-test-kit:{SESSION}"


def test_the_starter_kit_runs_through_the_cli(engine, probe_tar, frozenlake, tmp_path, capsys, monkeypatch,
                                              nothing_left) -> None:
    from qval import cli

    built = engine.call("build", "-q", "-t", KIT_IMAGE, str(REPO / "examples" / "method-container"))
    assert built.returncode == 0, built.stderr
    monkeypatch.setenv("QVAL_CONTAINER_WORK_ROOT", str(engine.work_root))
    dataset_dir = frozenlake.write(tmp_path / "frozenlake")
    try:
        code = cli.main(["run-container", KIT_IMAGE, "--dataset", str(dataset_dir), "--split", "dev",
                         "--out", str(tmp_path / "out"), "--bootstrap", "0", "--json", "--timeout", "120"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert "container finished" in err
        printed = {r["metric"]: r["value"] for r in json.loads(out)}
        frame = pd.read_json(tmp_path / "out" / "predictions.jsonl", lines=True, dtype={"id": str},
                             precise_float=True)  # the floats the CLI scored, to the last bit
        truth = truth_from_dataset(frozenlake, "dev", "q")
        expected = score(truth, frame["id"].to_numpy(object), frame["score"].to_numpy(np.float64), bootstrap_resamples=0)
        assert printed == {r.metric: r.value for r in expected}
        assert printed["spearman"] > 0.5 and printed["ranking_spearman"] > 0.5  # the heuristic is a good one
        meta = json.loads((tmp_path / "out" / "metadata.json").read_text())
        assert meta == {"method": "manhattan-heuristic", "points": len(frame)}
        assert (tmp_path / "out" / "stdout.txt").read_text().startswith(f"scored {len(frame)} points of {frozenlake.manifest.key}")

        # The saved archive (the file a submitter uploads) runs the same way; here as a table.
        saved = engine.call("save", "-o", str(tmp_path / "kit.tar"), KIT_IMAGE)
        assert saved.returncode == 0, saved.stderr
        code = cli.main(["run-container", str(tmp_path / "kit.tar"), "--dataset", str(dataset_dir), "--bootstrap", "0"])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert out.splitlines()[0] == f"{len(truth.point_ids)} of {len(truth.point_ids)} evaluation points provided"
        assert f"{printed['spearman']:.4f}" in next(x for x in out.splitlines() if x.startswith("spearman"))

        # Failures print the reason and the container's output.
        code = cli.main(["run-container", str(probe_tar), "--dataset", str(dataset_dir), "--bootstrap", "0"])
        out, err = capsys.readouterr()
        assert code == 1 and "qval: error: exited with code 1" in err and "FileNotFoundError" in err  # no /input/probe
        code = cli.main(["run-container", "localhost/no-such-image", "--dataset", str(dataset_dir)])
        out, err = capsys.readouterr()
        assert code == 1 and "'localhost/no-such-image' is neither an image archive file nor an image podman knows" in err
    finally:
        engine.call("rmi", KIT_IMAGE)

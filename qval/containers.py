"""Run a submitted method container in a sandbox and score what it writes.

A method container is a ``docker save``/``podman save`` archive (tar or tar.gz).  The runner

1. **loads** it (:meth:`Job.load`): the archive is copied with caps on its size and on its
   uncompressed size, anything that is not a one-image docker-archive is refused, the tags it
   claims are removed, and it is loaded into a store of its own, so it can neither retag nor
   replace any other image; the image is referred to by its ID and never pulled.  With podman that
   store is loaded **once per image ID** (:class:`ImageCache`): a read-only store holding only
   that image, shared by every job of an archive of the same content and its reruns as an
   additional image store of the job's own empty store (``--root``/``--runroot`` under the job's
   directory), so a rerun skips the load (the archive's SHA-256 names its image ID).  The image
   ID is computed from the archive's content, never read from its file names;
2. **writes** ``/input`` (:func:`write_input`): ``points.jsonl`` (one line per candidate for target
   ``q``, per state for target ``v``), ``context.json`` and ``images/`` -- inputs only, labels are
   never written anywhere the container can see;
3. **runs** it (:meth:`Job.run`) with every sandbox flag: no network, read-only root filesystem,
   ``/input`` read-only, ``/output`` a size-capped tmpfs, a size-capped ``/tmp``, user
   65534:65534, all capabilities dropped, no-new-privileges, memory (swap included), CPU, pids and
   wall-clock limits (:class:`Limits`), a GPU only when asked for, and -- only when the
   submitter chose a backbone -- the folder of the job's model socket read-only at ``/run/qval``
   (:mod:`qval.backbone` serves it; the container still has no network);
4. **classifies** the outcome (:class:`RunResult`): finished, or failed with ``timeout``,
   ``out of memory``, ``exited with code N``, ``output too large``, ``no predictions written``,
   with the first and last 64 KiB of stdout and stderr;
5. **scores** ``/output/predictions.jsonl`` (:func:`evaluate`) with the validation and scoring
   code of uploaded files (:mod:`qval.predictions`, :mod:`qval.scoring`).

Containers, per-job stores and mounts are removed when a :class:`Job` closes (mounts before
the directory, retried: :func:`_remove_tree`; what is left is logged); :func:`sweep` removes
what a killed worker or a failed clean-up left behind (call it at worker start).  The engine is podman
(default) or docker (``QVAL_CONTAINER_ENGINE``); podman runs with the project's engine
configuration ``containers/containers.conf`` (runtime runc, nofile/nproc ulimits) through
``CONTAINERS_CONF``.  The runner needs root (rootful podman, tmpfs mounts for ``/output``).

This module is Django-free. Steps 1-3, with the job's backbone served, are one function,
:func:`run_method_container`, which the CLI (``qval run-container``), the site's gpu worker and a
remote gpu worker all call::

    result, usage = run_method_container(Engine.from_env(), sha256, lambda job_dir: archive,
                                         lambda input_dir: write_input(dataset, "test", "q", input_dir),
                                         Limits(timeout_s=600))
    evaluation = evaluate(result, truth)
"""

from __future__ import annotations

import collections
import fcntl
import gzip
import hashlib
import json
import logging
import os
import posixpath
import re
import signal
import shutil
import stat
import subprocess
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Literal

from qval import predictions as qpred
from qval import safejson, schema
from qval.backbone import SOCKET_IN_CONTAINER, Backend, BackboneServer, is_socket
from qval.scoring import MetricRow, Truth, score

log = logging.getLogger(__name__)

LABEL = "org.qval.job"
"""Label on every container the runner starts (value: the job id); :func:`sweep` finds them by it."""

RUNTIME = "runc"
"""The OCI runtime podman runs containers with (``containers/containers.conf``); :func:`sweep` asks it
directly for a container podman no longer lists."""

LOG_KEEP_BYTES = 64 * 1024
"""How much of the start and of the end of stdout and stderr a :class:`RunResult` keeps."""

MAX_ARCHIVE_BYTES = 4 * 1024**3
"""Default cap on the uploaded archive (as uploaded, possibly gzip-compressed)."""

MAX_IMAGE_BYTES = 8 * 1024**3
"""Default cap on the archive's uncompressed size."""

MAX_METADATA_BYTES = 1024 * 1024
"""Largest ``/output/metadata.json`` accepted."""

CONTAINER_USER = "65534:65534"
"""The unprivileged user (nobody:nogroup) every container runs as."""

DEFAULT_CONF = Path(__file__).resolve().parents[1] / "containers" / "containers.conf"
DEFAULT_WORK_ROOT = Path("/var/tmp/qval-jobs")

_MAX_MANIFEST_BYTES = 1024 * 1024
_MAX_CONFIG_BYTES = 4 * 1024 * 1024  # an image configuration (its history included) is a few KiB
_MAX_KEPT_BYTES = 4 * _MAX_CONFIG_BYTES  # what sanitize_archive keeps in all of members that may be one
_CONFIG_NAME = re.compile(r"(?:blobs/sha256/)?([0-9a-f]{64})(?:\.json)?")
_POLL_S = 0.2
_KILL_GRACE_S = 30.0
_BACKSTOP_S = 30  # podman's own --timeout: beyond ours, for when the worker itself dies


class ContainerError(Exception):
    """A method container could not be loaded or run; the message is meant for the submitter."""


class ArchiveRejected(ContainerError):
    """The uploaded file is not an image archive the runner accepts."""


class EngineUnavailable(ContainerError):
    """The container engine is not installed or does not answer."""


@dataclass(frozen=True)
class Engine:
    """Which container engine runs method containers, and where jobs keep their files.

    ``kind``: ``podman`` (each job runs from a store of its own, its image from the shared
    read-only :class:`ImageCache`) or ``docker`` (one shared store; archives are loaded without
    their tags and images referred to by ID only).  ``conf``: the podman engine configuration
    (``CONTAINERS_CONF``).  ``work_root``: the parent of every job's directory; :func:`sweep`
    empties it.  ``image_cache``: where the per-image read-only stores live (default: beside
    ``work_root``, named ``<work_root>-images``); ``image_cache_days``: a cached image not used
    for this long is removed by :func:`sweep`.
    """

    kind: Literal["podman", "docker"] = "podman"
    conf: Path = DEFAULT_CONF
    work_root: Path = DEFAULT_WORK_ROOT
    image_cache: Path | None = None
    image_cache_days: float = 7.0

    @property
    def images(self) -> "ImageCache":
        """The cache of loaded images (podman)."""
        root = self.image_cache or self.work_root.with_name(self.work_root.name + "-images")
        return ImageCache(self, root)

    @classmethod
    def from_env(cls) -> "Engine":
        """The engine from ``QVAL_CONTAINER_ENGINE``, ``QVAL_CONTAINERS_CONF``, ``QVAL_CONTAINER_WORK_ROOT``,
        ``QVAL_CONTAINER_IMAGE_CACHE`` and ``QVAL_CONTAINER_IMAGE_CACHE_DAYS``."""
        kind = os.environ.get("QVAL_CONTAINER_ENGINE", "podman")
        if kind not in ("podman", "docker"):
            raise ContainerError(f"QVAL_CONTAINER_ENGINE={kind!r}: expected podman or docker")
        cache = os.environ.get("QVAL_CONTAINER_IMAGE_CACHE")
        return cls(
            kind=kind,  # type: ignore[arg-type]
            conf=Path(os.environ.get("QVAL_CONTAINERS_CONF", DEFAULT_CONF)),
            work_root=Path(os.environ.get("QVAL_CONTAINER_WORK_ROOT", DEFAULT_WORK_ROOT)),
            image_cache=Path(cache) if cache else None,
            image_cache_days=float(os.environ.get("QVAL_CONTAINER_IMAGE_CACHE_DAYS", "7")),
        )

    def command(self, *args: str, store: Path | None = None) -> list[str]:
        """An engine command line; ``store``: a podman job directory whose store it works on (with the
        read-only image store named in its ``imagestore`` file as an additional image store)."""
        if store is not None and self.kind == "podman":
            extra = []
            if (store / "imagestore").is_file():
                extra = ["--storage-opt", f"additionalimagestore={(store / 'imagestore').read_text().strip()}"]
            return ["podman", "--root", str(store / "store"), "--runroot", str(store / "run"), *extra, *args]
        return [self.kind, *args]

    def call(self, *args: str, store: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run an engine command to completion and return it (whatever its exit status)."""
        env = dict(os.environ, CONTAINERS_CONF=str(self.conf))
        try:
            return subprocess.run(
                self.command(*args, store=store), capture_output=True, text=True, env=env,
                stdin=subprocess.DEVNULL, timeout=timeout, check=False,
            )
        except FileNotFoundError as exc:
            raise EngineUnavailable(
                f"the container engine {self.kind!r} is not installed (scripts/install.sh installs podman and runc)"
            ) from exc


@dataclass(frozen=True)
class Limits:
    """The resources one run of a method container gets.

    ``timeout_s``: wall clock from the start of ``run`` until the container is killed;
    ``memory_mb``: memory, swap included; ``cpus``: CPU time in cores; ``pids``: processes and
    threads; ``output_mb``: the size of ``/output``; ``tmp_mb``: the size of ``/tmp``; ``gpu``: pass
    every GPU through (podman: ``--device nvidia.com/gpu=all`` through CDI; docker: ``--gpus all``).
    """

    timeout_s: float = 600.0
    memory_mb: int = 2048
    cpus: float = 1.0
    pids: int = 256
    output_mb: int = 64
    tmp_mb: int = 64
    gpu: bool = False


@dataclass(frozen=True)
class RunResult:
    """What one run of a method container ended with.

    ``error`` is ``None`` when the container exited 0 and wrote ``/output/predictions.jsonl``
    (then in ``predictions``); otherwise it starts with ``timeout``, ``out of memory``,
    ``exited with code N``, ``output too large``, ``no predictions written``, ``metadata invalid``
    or ``the container could not be started``.  ``stdout``/``stderr`` hold the first and last
    :data:`LOG_KEEP_BYTES` of each stream, with a marker where bytes were left out.
    """

    error: str | None
    exit_code: int | None
    wall_s: float
    stdout: str
    stderr: str
    predictions: bytes | None = None
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class Evaluation:
    """A run and the scoring of its predictions: ``outcome`` ``finished`` (``rows`` set, and ``preds``: the
    predictions as parsed, so nothing parses them again) or ``failed`` (``error`` set)."""

    outcome: Literal["finished", "failed"]
    error: str | None
    run: RunResult
    rows: list[MetricRow] = field(default_factory=list)
    coverage: qpred.Coverage | None = None
    problems: list[qpred.Problem] = field(default_factory=list)
    preds: qpred.Predictions | None = None


# -- /input ----------------------------------------------------------------------------
def write_input(
    ds: schema.Dataset, split: str, target: str, directory: str | Path, *, images_from: str | Path | None = None
) -> Path:
    """Write the ``/input`` folder of a split: ``points.jsonl``, ``context.json``, ``images/``.

    Target ``q``: one line per candidate ``{"id", "group", "task", "history", "state", "action",
    "next_state", "is_actor", "image", "next_image"}`` (``group``: the state id; the actors'
    ids are the pointwise points, the others are scored for the per-state ranking).  Target ``v``:
    one line per state ``{"id", "task", "history", "state", "image"}``.  On a public split of a
    dataset with goal images each line also has ``"end_image"`` (the candidate's, or the state's
    for ``v``); on a hidden split never (:func:`qval.schema.goal_images_public`).  ``context.json`` describes
    the environment, reward, observation and action spaces, discount, horizon and target.  Image
    file names refer to ``images/``, copied from ``images_from`` (default: the dataset's own
    ``ds.images``).  No label is ever written.
    """
    if target not in schema.TARGETS:
        raise schema.SchemaError(f"unknown target {target!r}; expected one of {', '.join(schema.TARGETS)}")
    states = ds.states_in(split)
    if not states:
        raise schema.SchemaError(f"dataset {ds.manifest.key} has no split {split!r}")
    directory = Path(directory)
    (directory / "images").mkdir(parents=True, exist_ok=True)
    images: set[str] = set()
    goal = schema.goal_images_public(split)
    with (directory / "points.jsonl").open("w", encoding="utf-8") as fh:
        for s in states:
            base = {"task": s.task, "history": list(s.history), "state": s.observation, "image": s.image}
            images.update(x for x in [s.image] if x)
            if target == "v":
                rec = {"id": s.id, **base}
                if goal and s.end_image:
                    rec["end_image"] = s.end_image
                    images.add(s.end_image)
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                continue
            for c in s.candidates:
                images.update(x for x in [c.next_image] if x)
                rec = {"id": c.id, "group": s.id, **base, "action": c.action, "next_state": c.next_state,
                       "is_actor": c.is_actor, "next_image": c.next_image}
                if goal and c.end_image:
                    rec["end_image"] = c.end_image
                    images.add(c.end_image)
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    if images:
        if images_from is None and not all(name in ds.images for name in images):
            raise schema.SchemaError(f"split {split!r} names {len(images)} images but no image folder was given")
        for name in sorted(images):
            if PurePosixPath(name).name != name:
                raise schema.SchemaError(f"image name {name!r} must be a plain file name")
            if images_from is None:  # the dataset's own images (a build's, or images/ of a dataset read from disk)
                (directory / "images" / name).write_bytes(ds.images[name])
            else:
                shutil.copyfile(Path(images_from) / name, directory / "images" / name)
    m = ds.manifest
    context = {
        "dataset": m.key,
        "name": m.name,
        "split": split,
        "target": target,
        "environment": m.environment,
        "description": m.description,
        "environment_config": m.config.get("environment", {}),
        "reward": m.config.get("environment", {}).get("reward"),
        "observation_space": {"modalities": list(m.modalities), "state": "text" if "text" in m.modalities else None},
        "action_space": sorted({c.action for s in states for c in s.candidates}),
        "discount": m.labelling.get("discount"),
        "horizon": m.labelling.get("horizon"),
        "num_points": sum(len(s.candidates) for s in states) if target == "q" else len(states),
        "predictions": 'write /output/predictions.jsonl: one {"id": ..., "score": ...} per line',
    }
    (directory / "context.json").write_text(json.dumps(context, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return directory


# -- archives --------------------------------------------------------------------------
class _CappedReader:
    """A binary reader that raises :class:`ArchiveRejected` once more than ``cap`` bytes were read."""

    def __init__(self, raw: IO[bytes], cap: int, what: str) -> None:
        self._raw, self._cap, self._what, self.count = raw, cap, what, 0

    def read(self, size: int = -1) -> bytes:
        try:
            data = self._raw.read(size)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise ArchiveRejected(f"the archive is damaged: {exc}") from exc
        self.count += len(data)
        if self.count > self._cap:
            raise ArchiveRejected(f"the {self._what} is larger than the limit of {self._cap / 1024**2:.0f} MiB")
        return data


def _safe_member_name(name: str) -> bool:
    path = PurePosixPath(name)
    return bool(name) and not path.is_absolute() and ".." not in path.parts


def sanitize_archive(src: Path, dest: Path, *, max_archive_bytes: int = MAX_ARCHIVE_BYTES,
                     max_image_bytes: int = MAX_IMAGE_BYTES) -> str:
    """Copy a one-image docker-archive (tar or tar.gz) to ``dest`` as a plain tar without tags.

    Refuses, with :class:`ArchiveRejected`: a file over ``max_archive_bytes``, an uncompressed
    stream over ``max_image_bytes``, anything that is not a tar, a tar without a docker-archive
    ``manifest.json`` (an OCI archive included), more than one image, unsafe or repeated member
    names, device files, and a manifest naming files the tar lacks.  ``RepoTags`` in the manifest
    and the legacy ``repositories`` file are dropped, so loading the copy tags nothing.

    The image ID is computed here, never taken from the archive's file names: the SHA-256 of the
    image configuration's bytes, which must be the name the manifest gives it, and every layer's
    SHA-256 must be the ``rootfs.diff_ids`` entry that configuration names for it (layers are
    uncompressed tars, as ``docker save`` and ``podman save`` write them; :func:`_verify_digests`).
    One ID is thus one content, layers included.  Returns that image ID (hex).
    """
    size = src.stat().st_size
    if size > max_archive_bytes:
        raise ArchiveRejected(f"the archive is {size / 1024**2:.0f} MiB; the limit is {max_archive_bytes / 1024**2:.0f} MiB")
    with src.open("rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        stream: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
        reader = _CappedReader(stream, max_image_bytes, "uncompressed archive" if gzipped else "archive")
        try:
            tin = tarfile.open(fileobj=reader, mode="r|")  # type: ignore[call-overload]
        except tarfile.ReadError as exc:
            raise ArchiveRejected(
                "the file is not a tar archive (or a gzip-compressed one); save the image with "
                "`docker save IMAGE -o method.tar` or `podman save IMAGE -o method.tar`"
            ) from exc
        seen: set[str] = set()
        links: dict[str, str] = {}  # a member that is a link: the member it names
        digests: dict[str, str] = {}  # a regular member: the hex SHA-256 of its bytes
        config: dict[str, bytes] = {}  # the members that may be the image configuration
        kept = 0
        manifest: Any = None
        try:
            with tin, tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tout:
                for member in tin:
                    name = member.name.rstrip("/")
                    if name.startswith("./"):
                        name = name[2:]
                    if not _safe_member_name(name) or name in seen:
                        raise ArchiveRejected(f"the archive has an unsafe or repeated entry {member.name!r}")
                    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                        raise ArchiveRejected(f"the archive has a special file {member.name!r}")
                    seen.add(name)
                    if name == "repositories":
                        continue
                    if name == "manifest.json":
                        manifest = _read_manifest(tin, member)
                        data = json.dumps(manifest).encode()
                        member.size = len(data)
                        tout.addfile(member, _BytesReader(data))
                    elif member.isfile():
                        hashed = _Digest(tin.extractfile(member))  # type: ignore[arg-type]
                        # The configuration's bytes are kept to read its layer digests: those of a
                        # member that may be it (a small JSON object named like one; once the
                        # manifest is read, the one it names), within _MAX_KEPT_BYTES in all.
                        wanted = manifest[0]["Config"] == name if manifest else bool(_CONFIG_NAME.fullmatch(name))
                        if wanted and member.size <= _MAX_CONFIG_BYTES:
                            data = hashed.read()
                            if data[:1] == b"{" and kept + len(data) <= _MAX_KEPT_BYTES:
                                config[name] = data
                                kept += len(data)
                            tout.addfile(member, _BytesReader(data))
                        else:
                            tout.addfile(member, hashed)
                        digests[name] = hashed.hexdigest()
                    else:
                        if member.issym() or member.islnk():
                            target = member.linkname if member.islnk() else str(
                                PurePosixPath(name).parent / member.linkname)
                            links[name] = posixpath.normpath(target)
                        tout.addfile(member)
        except tarfile.TarError as exc:
            raise ArchiveRejected(f"the tar archive is damaged: {exc}") from exc
    if manifest is None:
        raise ArchiveRejected(
            "the archive has no manifest.json, so it is not a docker-archive image; save the image with "
            "`docker save IMAGE -o method.tar` or `podman save --format docker-archive IMAGE -o method.tar`"
        )
    entry = manifest[0]
    missing = [n for n in [entry["Config"], *entry["Layers"]] if n not in seen]
    if missing:
        raise ArchiveRejected(f"manifest.json names files the archive lacks: {', '.join(missing[:3])}")
    return _verify_digests(entry, config, digests, links)


def _verify_digests(entry: dict[str, Any], config: dict[str, bytes], digests: dict[str, str],
                    links: dict[str, str]) -> str:
    """The image ID of a docker-archive's manifest ``entry``, computed from content: the SHA-256
    of its configuration, checked against the name the manifest gives it, and every layer's
    digest checked against the configuration's ``rootfs.diff_ids``.

    ``config``: the bytes of the members that may be the configuration; ``digests``: every
    regular member's SHA-256; ``links``: link members and what they name.
    Raises :class:`ArchiveRejected` on any mismatch.
    """

    def resolve(name: str) -> str:
        for _ in range(8):  # docker's `<id>/layer.tar` links to `<diff id>.tar`; no chains beyond
            if name not in links:
                return name
            name = links[name]
        raise ArchiveRejected(f"the archive's link {name!r} does not end at a file")

    name = resolve(entry["Config"])
    claimed = _CONFIG_NAME.fullmatch(entry["Config"]).group(1)  # type: ignore[union-attr]
    image_id = digests.get(name)
    if image_id != claimed:
        found = f"its SHA-256 is {image_id[:12]}" if image_id else "it is not a file"
        raise ArchiveRejected(f"the image configuration is named {claimed[:12]} but {found}: "
                              "the archive is not what `docker save` or `podman save` wrote")
    if name not in config:
        raise ArchiveRejected(f"the image configuration is not a JSON object of at most {_MAX_CONFIG_BYTES // 1024**2} MiB")
    try:
        diff_ids = safejson.load_json(config[name])["rootfs"]["diff_ids"]
    except (safejson.JSONError, TypeError, KeyError):
        raise ArchiveRejected("the image configuration has no rootfs.diff_ids (the digests of its layers)") from None
    if not isinstance(diff_ids, list) or len(diff_ids) != len(entry["Layers"]):
        raise ArchiveRejected(f"manifest.json lists {len(entry['Layers'])} layers; the image configuration "
                              f"names {len(diff_ids) if isinstance(diff_ids, list) else 'no list of'} layer digests")
    for i, (layer, expected) in enumerate(zip(entry["Layers"], diff_ids)):
        member = resolve(layer)
        if member not in digests:
            raise ArchiveRejected(f"layer {layer!r} is not a file of the archive")
        if expected != f"sha256:{digests[member]}":
            raise ArchiveRejected(f"layer {i + 1} ({layer!r}) has SHA-256 {digests[member][:12]}, not the digest "
                                  f"{str(expected).removeprefix('sha256:')[:12]} the image configuration names")
    return image_id


class _Digest:
    """A binary reader that computes the SHA-256 of what is read through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw, self._hash = raw, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._hash.update(data)
        return data

    def hexdigest(self) -> str:
        """The hex SHA-256 of the bytes read so far."""
        return self._hash.hexdigest()


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self._data, self._pos = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._pos + size
        chunk, self._pos = self._data[self._pos:end], min(end, len(self._data))
        return chunk


def _read_manifest(tin: tarfile.TarFile, member: tarfile.TarInfo) -> list[dict[str, Any]]:
    """The docker-archive manifest with its tags removed; raises :class:`ArchiveRejected` when malformed."""
    if not member.isfile() or member.size > _MAX_MANIFEST_BYTES:
        raise ArchiveRejected("manifest.json is not a small regular file")
    fh = tin.extractfile(member)
    assert fh is not None
    try:
        manifest = safejson.load_json(fh.read())
    except safejson.JSONError as exc:
        raise ArchiveRejected(f"manifest.json is not valid JSON: {exc}") from None
    if not isinstance(manifest, list) or len(manifest) != 1:
        count = len(manifest) if isinstance(manifest, list) else "no list of"
        raise ArchiveRejected(f"the archive must hold exactly one image; its manifest.json has {count} images")
    entry = manifest[0]
    if not (isinstance(entry, dict) and isinstance(entry.get("Config"), str)
            and _CONFIG_NAME.fullmatch(entry["Config"])
            and isinstance(entry.get("Layers"), list) and all(isinstance(x, str) for x in entry["Layers"])):
        raise ArchiveRejected("manifest.json does not describe an image (Config and Layers)")
    return [{**entry, "RepoTags": None}]


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class ImageCache:
    """Read-only podman stores of verified images, one per image ID, shared by the jobs that run them.

    Layout under ``root``:

    * ``<image id>/store``: a podman store holding only that image (no tag), loaded from a
      sanitised archive (:func:`sanitize_archive`) and checked to hold that ID; complete once
      ``<image id>/ready`` exists (its mtime: the last use);
    * ``<image id>.lock``: jobs hold it shared while they run from the store; loading and removal
      hold it exclusively;
    * ``archives/<archive sha256>``: the image ID that archive was verified to hold, so a rerun
      of the same upload skips reading and loading it.

    A job mounts the store as an *additional image store* of its own empty store: the image is
    found by ID only, the job cannot write to the shared store, and nothing another archive
    claims (tags included) can reach it.  The ID is the one :func:`sanitize_archive` computes
    from the archive's bytes (the SHA-256 of the image configuration, whose layer digests it
    checks too), never a name the archive gives, and podman's load must produce it: one ID is
    one content, so a store is shared only by archives holding the very same image, whoever
    uploaded them.  A load leaves nothing mounted, a failed one nothing at all.
    """

    def __init__(self, engine: Engine, root: Path) -> None:
        self.engine, self.root = engine, root

    def store(self, image_id: str) -> Path:
        """The read-only store of an image ID."""
        return self.root / image_id / "store"

    def open(self, archive: Path, work_dir: Path, *, max_archive_bytes: int = MAX_ARCHIVE_BYTES,
             max_image_bytes: int = MAX_IMAGE_BYTES) -> tuple[str, int]:
        """The image ID of an uploaded archive, loaded into its store unless cached; and a file
        descriptor holding the store's lock shared (close it when the job is done).

        ``work_dir``: the job's directory (the sanitised copy and podman's run root of the load
        go there).  Raises :class:`ArchiveRejected` as :func:`sanitize_archive` does, or when
        podman cannot load the archive.
        """
        digest = file_sha256(archive)
        cached = self.open_cached(digest)
        if cached is not None:
            return cached
        index = self.root / "archives" / digest
        copy = work_dir / "image.tar"
        try:
            image_id = sanitize_archive(archive, copy, max_archive_bytes=max_archive_bytes,
                                        max_image_bytes=max_image_bytes)
            fd = self._lock(image_id, fcntl.LOCK_EX)
            try:
                if not (self.root / image_id / "ready").exists():
                    self._load(image_id, copy, work_dir / "lr")
                (self.root / image_id / "ready").touch()
                fcntl.flock(fd, fcntl.LOCK_SH)
            except BaseException:
                os.close(fd)
                raise
        finally:
            copy.unlink(missing_ok=True)
        index.parent.mkdir(parents=True, exist_ok=True)
        tmp = index.with_name(f".{digest}.{uuid.uuid4().hex}")
        tmp.write_text(image_id)
        os.replace(tmp, index)
        return image_id, fd

    def open_cached(self, archive_sha256: str) -> tuple[str, int] | None:
        """The image ID and shared lock (as :meth:`open`) of the archive with this SHA-256 when its
        image is in the cache already, else ``None`` (the archive is then not needed to run it)."""
        if not archive_sha256.isalnum():
            return None
        index = self.root / "archives" / archive_sha256
        if not index.is_file():
            return None
        image_id = index.read_text().strip()
        fd = self._lock(image_id, fcntl.LOCK_SH)
        if (self.root / image_id / "ready").exists():
            (self.root / image_id / "ready").touch()
            return image_id, fd
        os.close(fd)  # removed since: the archive must be loaded again
        return None

    def _lock(self, image_id: str, mode: int) -> int:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / f"{image_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, mode)
        return fd

    def _load(self, image_id: str, tar: Path, run_root: Path) -> None:
        """Load a sanitised archive into the image's store (replacing a half-loaded one) and check its ID.

        The load leaves nothing mounted (podman mounts the store's ``overlay`` folder on itself);
        a failed one leaves no store either.  Raises :class:`ArchiveRejected` when podman cannot
        load it, :class:`ContainerError` when a half-loaded store cannot be removed (logged).
        """
        folder = self.root / image_id
        self._discard(folder)
        store = folder / "store"
        store.mkdir(parents=True)
        podman = ["podman", "--root", str(store), "--runroot", str(run_root)]
        env = dict(os.environ, CONTAINERS_CONF=str(self.engine.conf))
        try:
            loaded = subprocess.run([*podman, "load", "-q", "-i", str(tar)], capture_output=True, text=True, env=env,
                                    stdin=subprocess.DEVNULL, timeout=1800, check=False)
            found = subprocess.run([*podman, "image", "inspect", "--format", "{{.Id}}", image_id], capture_output=True,
                                   text=True, env=env, stdin=subprocess.DEVNULL, timeout=300, check=False)
        finally:
            for point in _mounts_under(folder):
                _umount(point)
        if loaded.returncode != 0 or found.stdout.strip().removeprefix("sha256:") != image_id:
            self._discard(folder)
            why = loaded.stderr.strip()[-2000:] if loaded.returncode != 0 else f"it did not produce image {image_id[:12]}"
            raise ArchiveRejected(f"podman could not load the image: {why}")

    @staticmethod
    def _discard(folder: Path) -> None:
        """Remove an image's folder with its mounts (:func:`_remove_tree`; its lock held exclusively)."""
        left = _remove_tree(folder)
        if left:
            raise ContainerError(f"the image store {folder} cannot be removed: {', '.join(left[:3])}")

    def prune(self) -> list[str]:
        """Remove the stores not used for ``engine.image_cache_days`` and half-loaded ones, and
        unmount whatever is mounted in the others, of images no job holds; return the image IDs
        of the stores removed (what cannot be removed is logged and tried again next time)."""
        if not self.root.is_dir():
            return []
        cutoff = time.time() - self.engine.image_cache_days * 86400
        removed = []
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir() and p.name != "archives"):
            ready = folder / "ready"
            fresh = ready.exists() and ready.stat().st_mtime >= cutoff
            if fresh and not _mounts_under(folder):
                continue
            fd = os.open(self.root / f"{folder.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # a job uses it or loads it right now
            try:
                if fresh:  # a store is used read-only: nothing in it needs a mount once no job holds it
                    for point in _mounts_under(folder):
                        log.warning("image cache: unmounting %s, left by an earlier load or job", point)
                        _umount(point)
                elif not _remove_tree(folder):
                    removed.append(folder.name)
            finally:
                os.close(fd)
        if removed and (self.root / "archives").is_dir():
            for entry in (self.root / "archives").iterdir():
                if entry.is_file() and entry.read_text().strip() in removed:
                    entry.unlink(missing_ok=True)
        return removed


# -- running ---------------------------------------------------------------------------
class _Capture:
    """Drains a pipe in a thread, keeping the first and last :data:`LOG_KEEP_BYTES`."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.total = 0
        self._head = bytearray()
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_bytes = 0
        self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self._thread.start()

    def _drain(self, pipe: IO[bytes]) -> None:
        for chunk in iter(lambda: pipe.read1(65536), b""):  # type: ignore[attr-defined]
            self.total += len(chunk)
            if len(self._head) < LOG_KEEP_BYTES:
                self._head += chunk[: LOG_KEEP_BYTES - len(self._head)]
            self._tail.append(chunk)
            self._tail_bytes += len(chunk)
            while self._tail_bytes - len(self._tail[0]) >= LOG_KEEP_BYTES:
                self._tail_bytes -= len(self._tail.popleft())

    def text(self) -> str:
        """The kept text (after the pipe closed): all of it, or head, a marker and tail."""
        self._thread.join()
        if self.total <= 2 * LOG_KEEP_BYTES:
            rest = self.total - len(self._head)  # the bytes after the head, all still in the tail
            tail = b"".join(self._tail)[-rest:] if rest else b""
            return (bytes(self._head) + tail).decode(errors="replace")
        tail = b"".join(self._tail)[-LOG_KEEP_BYTES:]
        skipped = self.total - 2 * LOG_KEEP_BYTES
        return (self._head.decode(errors="replace") + f"\n[... {skipped} bytes left out ...]\n"
                + tail.decode(errors="replace"))


class Job:
    """One method container's job: its directory, image store, ``/input``, ``/output`` and container.

    Use as a context manager: closing removes the container, the loaded image (docker), every
    mount and the whole job directory.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.id = "qv" + uuid.uuid4().hex[:12]
        self.dir = engine.work_root / self.id
        self.input_dir = self.dir / "input"
        self._output_dir = self.dir / "output"
        self._images: list[str] = []
        self._cache_lock: int | None = None
        self._containers_left = False  # whether a run may have left a container behind (close then looks)
        self.dir.mkdir(parents=True)
        self.input_dir.mkdir()

    @property
    def backbone_socket(self) -> Path:
        """Where to serve this job's backbone (:class:`qval.backbone.BackboneServer`) before :meth:`run`.

        Its folder, holding only the socket, is mounted read-only at ``/run/qval`` in the container.
        """
        return self.dir / "backbone" / "backbone.sock"

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove everything this job created (a cached image stays, for the next job of its archive)."""
        if self.engine.kind == "docker":
            for image_id in self._images:
                self.engine.call("rmi", image_id)  # fails, harmlessly, while another job runs the same image
        _remove_job_dir(self.engine, self.dir, containers=self._containers_left)
        if self._cache_lock is not None:
            os.close(self._cache_lock)
            self._cache_lock = None

    def load_cached(self, archive_sha256: str) -> str | None:
        """podman: the image ID of the archive with this SHA-256 when its image is cached
        (:meth:`ImageCache.open_cached`), made runnable by this job as :meth:`load` does; else
        ``None`` (call :meth:`load` with the archive)."""
        if self.engine.kind != "podman" or self._cache_lock is not None:
            return None
        cached = self.engine.images.open_cached(archive_sha256)
        if cached is None:
            return None
        image_id, self._cache_lock = cached
        (self.dir / "imagestore").write_text(str(self.engine.images.store(image_id)))
        return image_id

    def load(self, archive: str | Path, *, max_archive_bytes: int = MAX_ARCHIVE_BYTES,
             max_image_bytes: int = MAX_IMAGE_BYTES) -> str:
        """Make an uploaded archive's image runnable by this job (see :func:`sanitize_archive`); return its ID.

        podman: from the shared read-only store of its image ID (:class:`ImageCache`; loaded the
        first time), added to the job's own empty store; docker: loaded into the engine's store.
        """
        if self.engine.kind == "podman":
            image_id, self._cache_lock = self.engine.images.open(
                Path(archive), self.dir, max_archive_bytes=max_archive_bytes, max_image_bytes=max_image_bytes)
            (self.dir / "imagestore").write_text(str(self.engine.images.store(image_id)))  # checked at its load
            return image_id
        copy = self.dir / "image.tar"
        try:
            image_id = sanitize_archive(Path(archive), copy, max_archive_bytes=max_archive_bytes,
                                        max_image_bytes=max_image_bytes)
            loaded = self.engine.call("load", "-i", str(copy), store=self.dir)
        finally:
            copy.unlink(missing_ok=True)
        if loaded.returncode != 0:
            raise ArchiveRejected(f"{self.engine.kind} could not load the image: {loaded.stderr.strip()[-2000:]}")
        self._images.append(image_id)
        found = self.engine.call("image", "inspect", "--format", "{{.Id}}", image_id, store=self.dir)
        if found.stdout.strip().removeprefix("sha256:") != image_id:
            raise ArchiveRejected(f"the loaded archive did not produce image {image_id[:12]}: {found.stderr.strip()}")
        return image_id

    def run_argv(self, name: str, image_id: str, limits: Limits, backbone: str | None = None,
                 command: tuple[str, ...] = ()) -> list[str]:
        """The engine command line that runs ``image_id`` (with ``command`` instead of its own, when given)
        in the sandbox (see the module docstring).

        ``backbone``: the served model's name; the socket's folder is mounted read-only at
        ``/run/qval`` and ``QVAL_BACKBONE_SOCKET`` / ``QVAL_BACKBONE_MODEL`` tell the container.
        """
        podman = self.engine.kind == "podman"
        argv = [
            "run", "--rm", "--name", name, "--label", f"{LABEL}={self.id}", "--pull=never",
            "--network=none", "--read-only",
            *(["--read-only-tmpfs=false", "--timeout", str(int(limits.timeout_s) + _BACKSTOP_S)] if podman else []),
            "--tmpfs", f"/tmp:rw,size={limits.tmp_mb}m,mode=1777,nosuid,nodev",
            f"--memory={limits.memory_mb}m", f"--memory-swap={limits.memory_mb}m",
            f"--pids-limit={limits.pids}", f"--cpus={limits.cpus:g}",
            "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
            "--user", CONTAINER_USER, "--cap-drop=ALL", "--security-opt", "no-new-privileges",
            "--log-driver=none",
            "-v", f"{self.input_dir}:/input:ro", "-v", f"{self._output_dir}:/output:rw",
        ]
        if limits.gpu:
            argv += ["--device", "nvidia.com/gpu=all"] if podman else ["--gpus", "all"]
        if backbone is not None:
            inside = PurePosixPath(SOCKET_IN_CONTAINER)
            argv += ["-v", f"{self.backbone_socket.parent}:{inside.parent}:ro",
                     "-e", f"QVAL_BACKBONE_SOCKET={inside}", "-e", f"QVAL_BACKBONE_MODEL={backbone}"]
        return self.engine.command(*argv, image_id, *command, store=self.dir)

    def run(self, image_id: str, limits: Limits = Limits(), backbone: str | None = None,
            command: tuple[str, ...] = ()) -> RunResult:
        """Run a loaded image once on ``input_dir`` under ``limits`` and classify how it ended.

        ``backbone``: the name of the model a :class:`qval.backbone.BackboneServer` serves on
        :attr:`backbone_socket` for the whole run (the caller starts and stops it).
        """
        if backbone is not None and not is_socket(self.backbone_socket):
            raise ContainerError(f"no backbone is served on {self.backbone_socket}; start the server before the run")
        self._mount_output(limits.output_mb)
        name = container_name(self.id)
        env = dict(os.environ, CONTAINERS_CONF=str(self.engine.conf))
        self._containers_left = True
        start = time.monotonic()
        # cwd: conmon (started by `podman run`) drops an empty "oom" file in its working directory when
        # the container's cgroup v1 goes away; it must land in the job's folder, not the worker's.
        proc = subprocess.Popen(self.run_argv(name, image_id, limits, backbone, command), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=self.dir)
        assert proc.stdout is not None and proc.stderr is not None
        out, err = _Capture(proc.stdout), _Capture(proc.stderr)
        killed_for: str | None = None
        try:
            while proc.poll() is None:
                if time.monotonic() - start >= limits.timeout_s:
                    killed_for = "timeout"
                elif _is_full(self._output_dir):
                    killed_for = "output"
                if killed_for:
                    break
                try:  # returns as soon as the run ends (a sleep would add up to _POLL_S to every job)
                    proc.wait(timeout=_POLL_S)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            # `run --rm` removed a container that exited by itself; one still running is removed here.
            if proc.poll() is None:
                removed = self.engine.call("rm", "-f", "-t", "0", name, store=self.dir)
                try:
                    proc.wait(timeout=_KILL_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                self._containers_left = removed.returncode != 0
            else:
                self._containers_left = False
            wall = time.monotonic() - start
        stderr = err.text()
        code: int | None = proc.returncode
        full = _is_full(self._output_dir)
        if killed_for == "timeout":
            error: str | None = f"timeout: still running after the {limits.timeout_s:g} s limit"
        elif killed_for == "output" or full:
            error = f"output too large: /output reached its {limits.output_mb} MiB limit"
        elif _not_started(code, stderr):
            error = f"the container could not be started ({self.engine.kind} exit status {code}; see stderr)"
            code = None
        elif code == 137:
            error = f"out of memory: killed at the {limits.memory_mb} MiB memory limit"
        elif code != 0:
            error = f"exited with code {code}"
        else:
            error = None
        predictions = metadata = None
        if error is None:
            predictions, error = _read_output_file(self._output_dir / "predictions.jsonl", limits.output_mb * 1024**2)
            if predictions is None:
                error = f"no predictions written: {error}"
            else:
                metadata, error = _read_metadata(self._output_dir / "metadata.json")
        return RunResult(error=error, exit_code=code, wall_s=round(wall, 3), stdout=out.text(), stderr=stderr,
                         predictions=predictions if error is None else None, metadata=metadata)

    def _mount_output(self, size_mb: int) -> None:
        """A fresh tmpfs of ``size_mb`` MiB at the job's output folder, owned by the container user."""
        if self._output_dir.is_mount():
            _umount(self._output_dir)
        self._output_dir.mkdir(exist_ok=True)
        uid, gid = CONTAINER_USER.split(":")
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700,uid={uid},gid={gid},nosuid,nodev,noexec",
             "tmpfs", str(self._output_dir)], capture_output=True, text=True, check=False)
        if mounted.returncode != 0:
            raise ContainerError(f"cannot mount the size-limited /output (the runner needs root): {mounted.stderr.strip()}")


def _not_started(code: int | None, stderr: str) -> bool:
    """Whether ``run`` ended before the container's command ran: the engine's own failure (exit status
    125), or the OCI runtime unable to run the command (126, 127), which the engine's error, the last
    line of stderr, names; a command that exits 126 or 127 by itself did run."""
    last = stderr.rstrip().rsplit("\n", 1)[-1]
    engine_error = last.startswith(("Error: ", "docker: Error")) and "OCI runtime" in last
    return code == 125 or (code in (126, 127) and engine_error)


def _is_full(directory: Path) -> bool:
    st = os.statvfs(directory)
    return st.f_bavail == 0


def _read_output_file(path: Path, max_bytes: int) -> tuple[bytes | None, str | None]:
    """A regular file the container wrote (never following a link); ``(None, why)`` when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, f"the container exited 0 without writing /output/{path.name}"
    except OSError as exc:
        return None, f"/output/{path.name} is not a regular file ({exc.strerror})"
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None, f"/output/{path.name} is not a regular file"
        return fh.read(max_bytes + 1), None


def _read_metadata(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``/output/metadata.json`` (optional): a JSON object of at most :data:`MAX_METADATA_BYTES`."""
    if not os.path.lexists(path):
        return None, None
    data, why = _read_output_file(path, MAX_METADATA_BYTES)
    if data is None:
        return None, f"metadata invalid: {why}"
    if len(data) > MAX_METADATA_BYTES:
        return None, f"metadata invalid: /output/metadata.json is larger than {MAX_METADATA_BYTES // 1024} KiB"
    try:
        meta = safejson.load_json(data)
    except safejson.JSONError as exc:
        return None, f"metadata invalid: /output/metadata.json is not JSON ({exc})"
    if not isinstance(meta, dict):
        return None, "metadata invalid: /output/metadata.json must hold a JSON object"
    return meta, None


# -- scoring ---------------------------------------------------------------------------
def evaluate(result: RunResult, truth: Truth, *, bootstrap_resamples: int = 1000) -> Evaluation:
    """Score a run's ``predictions.jsonl`` exactly as an uploaded JSON Lines file is scored.

    Whatever the container wrote -- malformed, hostile, nested a hundred thousand levels deep --
    ends in a ``failed`` evaluation that lists the file's problems (the user's fault), never in
    an exception.
    """
    if result.error is not None or result.predictions is None:
        return Evaluation("failed", result.error or "no predictions written", result)
    try:
        preds, coverage = qpred.parse_and_validate(result.predictions, "predictions.jsonl", truth.index)
    except qpred.ValidationFailed as exc:
        shown = "; ".join(p.message for p in exc.problems[:3])
        more = f" (and {len(exc.problems) - 3} more problems)" if len(exc.problems) > 3 else ""
        return Evaluation("failed", f"predictions invalid: {shown}{more}", result, problems=exc.problems)
    rows = score(truth, preds.ids, preds.scores, samples=preds.samples, codes=preds.codes(truth.index),
                 bootstrap_resamples=bootstrap_resamples)
    return Evaluation("finished", None, result, rows=rows, coverage=coverage, preds=preds)


# -- clean-up --------------------------------------------------------------------------
def _mounts_under(directory: Path) -> list[Path]:
    """Mount points at or below ``directory``, deepest first; a point with mounts stacked on it
    is listed once per mount (each ``umount`` removes the top one)."""
    prefix = str(directory.resolve())
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            point = line.split()[4].encode().decode("unicode_escape")  # \040 for spaces
            if point == prefix or point.startswith(prefix + "/"):
                found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _umount(point: Path) -> None:
    if subprocess.run(["umount", str(point)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


def _remove_job_dir(engine: Engine, directory: Path, *, containers: bool = True) -> list[str]:
    """Remove a job's containers, mounts and directory (:func:`_remove_tree`); return the names of
    the containers removed.

    ``containers``: whether a container of the job may be left in its store (``False``: its runs
    removed theirs, and the engine is not asked)."""
    removed = []
    if containers and engine.kind == "podman" and (directory / "store").exists():
        listed = engine.call("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}", store=directory)
        if listed.returncode != 0:
            log.warning("could not list the containers of %s (exit %d): %s", directory, listed.returncode,
                        listed.stderr.strip()[-500:])
        for name in listed.stdout.split():
            _remove_container(engine, name, store=directory)
            removed.append(name)
        # A container podman does not list is ended through its runtime. Seen in the killed-worker fault test
        # (tests/test_faults.py): `podman run` killed between the runtime's `create` and `start` left conmon and a
        # waiting `runc init`, while podman's state and store no longer had the container (what removed it there
        # was not established) -- and it outlived the job's folder. The job's engine processes go first (conmon, a
        # `runc create` in flight: no container is created after this); then the runtime deletes every container
        # it holds in the job's folder or still in its store; then any process still in such a container's cgroup
        # is killed (an init whose `create` died before it wrote its state).
        _stop_processes_in(directory)
        unlisted = sorted(set(_container_ids(directory)) | set(_runtime_containers_in(directory)))
        for container_id in unlisted:
            _delete_from_runtime(container_id)
        _kill_and_wait(_processes_in_cgroups_of(unlisted))
        if unlisted and container_name(directory.name) not in removed:
            removed.append(container_name(directory.name))
    _remove_tree(directory)
    return removed


def container_name(job_id: str) -> str:
    """The name of the container a :class:`Job` ``job_id`` runs (its id is its folder's name)."""
    return f"qval-{job_id}"


def _container_ids(directory: Path) -> list[str]:
    """The IDs of the containers in a podman job folder's store (each has a folder there from its
    creation until its removal)."""
    return sorted(p.name for p in (directory / "store" / "overlay-containers").glob("*") if p.is_dir())


def _runtime_containers_in(directory: Path) -> list[str]:
    """The IDs of the containers the OCI runtime (:data:`RUNTIME`) holds whose bundle is in ``directory``."""
    try:
        listed = subprocess.run([RUNTIME, "list", "--format", "json"], capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=60, check=True)
        held = json.loads(listed.stdout) or []  # `null` when it holds none
    except (OSError, subprocess.SubprocessError, ValueError) as exc:  # its stderr, when it exited non-zero
        log.warning("%s could not list its containers: %s %s", RUNTIME, exc, (getattr(exc, "stderr", "") or "")[-500:])
        return []
    return [c["id"] for c in held if str(c.get("bundle", "")).startswith(f"{directory}/")]


def _delete_from_runtime(container_id: str) -> None:
    """Have the OCI runtime (:data:`RUNTIME`) kill every process of a container and forget it (its
    state and cgroups); a container it does not hold is no error (``--force``)."""
    try:
        deleted = subprocess.run([RUNTIME, "delete", "--force", container_id], capture_output=True, text=True,
                                 stdin=subprocess.DEVNULL, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("%s could not delete container %s: %s", RUNTIME, container_id[:12], exc)
        return
    if deleted.returncode != 0:
        log.warning("%s could not delete container %s (exit %d): %s", RUNTIME, container_id[:12],
                    deleted.returncode, deleted.stderr.strip()[-500:])


def _processes_in_cgroups_of(container_ids: list[str]) -> list[int]:
    """The host's processes whose cgroups name one of ``container_ids`` (podman puts a container's
    processes in ``libpod-<id>`` cgroups; a container ID is 64 hex digits, so no other process matches)."""
    if not container_ids:
        return []

    def in_container(entry: Path) -> bool:
        cgroup = (entry / "cgroup").read_text()
        return any(container_id in cgroup for container_id in container_ids)

    return _processes_where(in_container)


def _processes_where(test: Callable[[Path], bool]) -> list[int]:
    """The PIDs of the host's processes (but this one) whose ``/proc/<pid>`` folder passes ``test``; a
    process that ends while it is read (``OSError``) is left out."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if test(entry):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


_REMOVE_ATTEMPTS = 10
"""How many times :func:`_remove_tree` tries (pausing 0.05 s, doubling up to 4 s: about 20 s in all)."""


def _remove_tree(directory: Path, attempts: int = _REMOVE_ATTEMPTS) -> list[str]:
    """Remove ``directory``, its mounts and the engine processes working in it; return what is left
    (empty once it is gone), which is also logged.

    An attempt first stops every process working in the folder (:func:`_stop_processes_in`),
    then unmounts every mount under it, deepest first, then removes the tree.  A podman process
    mounts its store's ``overlay`` folder on itself as it starts, and one can start after a
    container was removed -- the exit command conmon runs when a container stops, which a
    loaded machine may start late -- so the attempts go on, with a growing pause, until the
    folder is gone *and* no process works in it, at most ``attempts`` times.  What is still
    there then is logged and left to :func:`sweep`.
    """
    pause = 0.05
    for _ in range(attempts):
        stopped = _stop_processes_in(directory)
        if not stopped and not os.path.lexists(directory):
            return []
        for point in _mounts_under(directory):
            _umount(point)
        shutil.rmtree(directory, ignore_errors=True)
        if os.path.lexists(directory):
            time.sleep(pause)
            pause = min(2 * pause, 4.0)
    if not os.path.lexists(directory) and not _stop_processes_in(directory):
        return []
    left = [f"mount {point}" for point in _mounts_under(directory)]
    if os.path.lexists(directory):
        left += [str(path) for path in sorted(directory.rglob("*"), key=lambda p: len(p.parts))[:20]] or [str(directory)]
    log.warning("%s is still there after %d attempts to remove it (qval.containers.sweep removes it later): %s",
                directory, attempts, left)
    return left


def _remove_container(engine: Engine, name: str, store: Path | None = None) -> None:
    """``rm -f`` a container, then make sure its init process is gone: SIGKILL it if the engine let it
    live (its ``rm`` can fail while the ``run`` of a worker that died still holds the container), and
    wait; with it goes the container's PID namespace, every process of the method."""
    pid = engine.call("inspect", "--format", "{{.State.Pid}}", name, store=store).stdout.strip()
    engine.call("rm", "-f", "-t", "0", name, store=store)
    if pid.isdigit() and int(pid) > 0:
        _kill_and_wait([int(pid)])


def _kill_and_wait(pids: list[int], timeout_s: float = 10.0) -> None:
    """SIGKILL ``pids`` and wait (at most ``timeout_s``) until none of them runs."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _running(pid)]
        time.sleep(0.02)


def _stop_processes_in(directory: Path, timeout_s: float = 10.0) -> int:
    """SIGKILL every process (but this one) whose command line names ``directory`` or whose working
    directory is in it, and wait until they are gone; return how many there were."""
    folder = str(directory)

    def works_in(entry: Path) -> bool:
        cwd = os.readlink(entry / "cwd").removesuffix(" (deleted)")
        return folder.encode() in (entry / "cmdline").read_bytes() or cwd == folder or cwd.startswith(folder + "/")

    pids = _processes_where(works_in)
    _kill_and_wait(pids, timeout_s)
    return len(pids)


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its parent does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


@dataclass(frozen=True)
class ServedBackbone:
    """A backbone a job's container may call: ``name`` (its ``QVAL_BACKBONES`` entry), the ``backend``
    that answers and the job's ``token_budget``."""

    name: str
    backend: Backend
    token_budget: int


def run_method_container(engine: Engine, archive_sha256: str | None, fetch_archive: Callable[[Path], Path],
                         write_inputs: Callable[[Path], None], limits: Limits,
                         backbone: ServedBackbone | None = None, *, max_archive_bytes: int = MAX_ARCHIVE_BYTES,
                         max_image_bytes: int = MAX_IMAGE_BYTES) -> tuple[RunResult, dict[str, int]]:
    """The platform's one run of a method container, for the site's gpu worker and a remote worker alike.

    In a fresh :class:`Job` (removed after): the image of the archive with SHA-256 ``archive_sha256``,
    from the image cache when it holds it (``None``: not looked up), else loaded from the file that
    ``fetch_archive(job_dir)`` returns (a path the caller owns, or a file it wrote under ``job_dir``,
    removed after the load); ``write_inputs(input_dir)`` fills
    ``/input``; the container runs under ``limits``, with ``backbone`` served on the job's socket for the
    whole run when given. Returns the run and the backbone's token use (empty without one).
    :class:`ArchiveRejected` when the archive is refused; other errors are the platform's.
    """
    with Job(engine) as job:
        image_id = None if archive_sha256 is None else job.load_cached(archive_sha256)  # a rerun, or another job
        if image_id is not None:
            log.info("archive %s: image %s cached, not fetched", archive_sha256[:12], image_id[:12])
        else:
            archive = fetch_archive(job.dir)
            try:
                image_id = job.load(archive, max_archive_bytes=max_archive_bytes, max_image_bytes=max_image_bytes)
            finally:
                if archive.parent == job.dir:
                    archive.unlink(missing_ok=True)
        write_inputs(job.input_dir)
        if backbone is None:
            return job.run(image_id, limits), {}
        with BackboneServer(backbone.backend, backbone.token_budget, socket_path=job.backbone_socket) as server:
            result = job.run(image_id, limits, backbone=backbone.name)
        return result, server.usage.as_dict()


def sweep(engine: Engine) -> list[str]:
    """Remove every container, job directory and mount a runner left behind; return what was removed.

    Call it when a worker starts, before it runs any job: it empties ``engine.work_root``
    (mounts first, :func:`_remove_tree`), removes every container labelled :data:`LABEL` in the
    engine's shared store, and prunes the image cache -- stale and half-loaded stores, and mounts
    left in the others (:meth:`ImageCache.prune`; reported as ``image <id>``).
    """
    removed: list[str] = []
    listed = engine.call("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}")
    for name in listed.stdout.split():
        _remove_container(engine, name)
        removed.append(name)
    if engine.work_root.is_dir():
        for directory in sorted(engine.work_root.iterdir()):
            removed += _remove_job_dir(engine, directory)
            if not os.path.lexists(directory):  # else logged by _remove_tree
                removed.append(str(directory))
    if engine.kind == "podman":
        removed += [f"image {image_id}" for image_id in engine.images.prune()]
    return removed

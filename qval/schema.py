"""The QVal dataset schema: states, candidate actions and their reference labels.

A dataset is a list of *states* sampled from agent trajectories.  Every state carries a
small set of *candidate actions*; exactly one of them is the action the collecting actor
took.  That gives two kinds of evaluation point per state:

* the **pointwise** point: the actor's candidate (target ``q``) or the state itself
  (target ``v``);
* the **ranking** point: all candidates of the state, ranked within the state.

Labels are kept apart from inputs: ``q_labels`` maps every candidate id to its reference
Q-value, ``v_labels`` maps every state id to its reference V-value.  On disk a dataset is a
directory of JSON Lines files plus a manifest (see :meth:`Dataset.write`), and its
*fingerprint* is a SHA-256 over a canonical serialisation of inputs, labels and the
building configuration, so two builds with the same configuration have the same
fingerprint.

**Images.**  ``State.image`` and ``Candidate.next_image`` are plain file names (PNG) in the
``images/`` folder beside the dataset files.  In memory their bytes are reached through
``Dataset.images`` (a mapping name → bytes: a dict for a fresh build, :class:`ImageFolder`
for a dataset read from disk).  When a dataset names images, the fingerprint also covers
the SHA-256 of every named file, so a changed or missing image is detected on read; a
dataset without images has exactly the fingerprint it had before images existed.

This module is Django-free: the CLI, the workers and method containers use it directly.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Iterator, Mapping

SPLITS: tuple[str, ...] = ("train", "dev", "test")
"""Split names. ``train`` and ``dev`` labels are public, ``test`` labels are hidden."""

PUBLIC_SPLITS: frozenset[str] = frozenset({"train", "dev"})


def goal_images_public(split: str) -> bool:
    """Whether the goal images (``end_image``) of ``split`` may leave the platform.

    They show where the reference rollout ends — reaching the goal or not — so they correlate
    with V and Q: on a hidden split they are withheld from downloads, exports, image URLs and a
    container's ``/input``, and only the platform's own (built-in) methods read them.
    """
    return split in PUBLIC_SPLITS

TARGETS: tuple[str, ...] = ("q", "v")
"""``q``: a score per candidate action; ``v``: a score per state."""

SCHEMA_VERSION = 1


class SchemaError(ValueError):
    """A dataset directory or record that does not follow the schema."""


@dataclass(frozen=True)
class Candidate:
    """One candidate action of a state."""

    id: str
    state_id: str
    index: int
    action: str
    next_state: str
    is_actor: bool
    next_image: str | None = None
    end_image: str | None = None
    """The goal image: the final state of the reference rollout after this action (``trajectory_end``)."""


@dataclass(frozen=True)
class State:
    """One sampled state of a trajectory with its candidate actions."""

    id: str
    split: str
    trajectory: int
    step: int
    task: str
    observation: str
    history: tuple[str, ...]
    candidates: tuple[Candidate, ...]
    image: str | None = None
    end_image: str | None = None
    """The goal image: the final state of the reference policy's rollout from this state."""
    task_type: str | None = None
    """The kind of task (ALFWorld's task type, e.g. ``pick_heat_then_place_in_recep``), where the
    environment has several kinds (:meth:`qval.envs.base.Environment.task_type`)."""

    @property
    def actor_candidate(self) -> Candidate:
        """The candidate the collecting actor took (exactly one per state)."""
        actors = [c for c in self.candidates if c.is_actor]
        if len(actors) != 1:
            raise SchemaError(f"state {self.id}: expected exactly one actor candidate, found {len(actors)}")
        return actors[0]


@dataclass
class Manifest:
    """Provenance and labelling settings of a dataset version."""

    slug: str
    name: str
    version: str
    environment: str
    description: str
    modalities: list[str]
    labelling: dict[str, Any]
    config: dict[str, Any]
    schema_version: int = SCHEMA_VERSION
    fingerprint: str = ""
    build_info: dict[str, Any] = field(default_factory=dict)
    split_fingerprints: dict[str, str] = field(default_factory=dict)
    """Per split (:meth:`Dataset.split_fingerprint`); a secret test split's is keyed by the secret."""

    @property
    def secret_test(self) -> bool:
        """Whether the test split is drawn from the maintainer's secret (:mod:`qval.hidden`)."""
        return bool(self.config.get("collection", {}).get("secret_test"))

    @property
    def key(self) -> str:
        """``slug@version``, the dataset's public name."""
        return f"{self.slug}@{self.version}"


class ImageFolder(Mapping[str, bytes]):
    """The image files of a folder as a read-only mapping name → bytes (read on access)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def __getitem__(self, name: str) -> bytes:
        if not _plain_name(name):
            raise KeyError(name)
        try:
            return (self.directory / name).read_bytes()
        except OSError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and _plain_name(name) and (self.directory / name).is_file()

    def __iter__(self) -> Iterator[str]:
        if not self.directory.is_dir():
            return iter(())
        return iter(sorted(p.name for p in self.directory.iterdir() if p.is_file()))

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass
class Dataset:
    """A whole dataset: manifest, states (with candidates), labels and the bytes of its images."""

    manifest: Manifest
    states: list[State]
    q_labels: dict[str, float]
    v_labels: dict[str, float]
    images: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    """Image file name → PNG bytes for every name in ``State.image``/``Candidate.next_image``."""
    secret: str | None = field(default=None, repr=False, compare=False)
    """The test-split secret, needed for the fingerprint of a dataset whose test split is secret."""

    # -- views -------------------------------------------------------------------------
    def states_in(self, split: str) -> list[State]:
        """States of one split, in dataset order."""
        return [s for s in self.states if s.split == split]

    def point_ids(self, split: str, target: str) -> list[str]:
        """The pointwise evaluation ids of a split, in dataset order.

        Target ``q``: the actor candidate of every state; target ``v``: every state.
        This is the order the QVal reference JSON format's ``values`` list follows.
        """
        if target == "q":
            return [s.actor_candidate.id for s in self.states_in(split)]
        if target == "v":
            return [s.id for s in self.states_in(split)]
        raise SchemaError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")

    def image_names(self, split: str | None = None) -> list[str]:
        """Every image file name the states (of ``split``, or all) and their candidates name, sorted."""
        names: set[str] = set()
        for state in self.states if split is None else self.states_in(split):
            names.update(n for n in (state.image, state.end_image) if n)
            for c in state.candidates:
                names.update(n for n in (c.next_image, c.end_image) if n)
        return sorted(names)

    def end_image_names(self, split: str | None = None) -> list[str]:
        """The goal images (``end_image`` of states and candidates) of ``split`` (or all), sorted."""
        names: set[str] = set()
        for state in self.states if split is None else self.states_in(split):
            if state.end_image:
                names.add(state.end_image)
            names.update(c.end_image for c in state.candidates if c.end_image)
        return sorted(names)

    def image_sha256(self, split: str | None = None) -> dict[str, str]:
        """SHA-256 (hex) of every named image (of ``split``, or all); :class:`SchemaError` when one is missing."""
        digests = {}
        for name in self.image_names(split):
            if not _plain_name(name):
                raise SchemaError(f"image name {name!r} must be a plain file name")
            try:
                data = self.images[name]
            except KeyError:
                raise SchemaError(f"image {name!r} is named by the dataset but missing") from None
            digests[name] = hashlib.sha256(data).hexdigest()
        return digests

    def labels_for(self, target: str) -> dict[str, float]:
        """The label mapping of a target."""
        if target == "q":
            return self.q_labels
        if target == "v":
            return self.v_labels
        raise SchemaError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")

    # -- fingerprint -------------------------------------------------------------------
    def compute_fingerprint(self) -> str:
        """SHA-256 over manifest settings, inputs, labels and image bytes (not build timings).

        The image part (the sorted ``(name, SHA-256 of the file)`` pairs) is added only when the
        dataset names images, so text-only datasets keep their fingerprints.  A dataset whose test
        split is secret (``Manifest.secret_test``) hashes the settings and its
        :meth:`split_fingerprints` instead, so its fingerprint confirms nothing about a guessed
        test split either.
        """
        h = hashlib.sha256()
        head = {
            "schema_version": self.manifest.schema_version,
            "slug": self.manifest.slug,
            "version": self.manifest.version,
            "environment": self.manifest.environment,
            "labelling": self.manifest.labelling,
            "config": self.manifest.config,
        }
        h.update(_canonical(head))
        if self.manifest.secret_test:
            h.update(_canonical(sorted(self.split_fingerprints().items())))
            return h.hexdigest()
        for state in self.states:
            h.update(_canonical(_state_record(state)))
            for cand in state.candidates:
                h.update(_canonical(_candidate_record(cand)))
        h.update(_canonical(sorted(self.q_labels.items())))
        h.update(_canonical(sorted(self.v_labels.items())))
        digests = self.image_sha256()
        if digests:
            h.update(_canonical(sorted(digests.items())))
        return h.hexdigest()

    def split_fingerprint(self, split: str, key: bytes | None = None) -> str:
        """SHA-256 (hex) of one split: environment, labelling, the split's records, labels and image
        digests — not the version or the collection settings, so a split copied unchanged into a
        new version keeps its fingerprint.  With ``key``: HMAC-SHA256 under that key instead (a
        commitment that only the key's holder can check)."""
        h = hmac.new(key, digestmod=hashlib.sha256) if key is not None else hashlib.sha256()
        head = {
            "schema_version": self.manifest.schema_version,
            "environment": self.manifest.environment,
            "labelling": self.manifest.labelling,
            "split": split,
        }
        h.update(_canonical(head))
        states = self.states_in(split)
        for state in states:
            h.update(_canonical(_state_record(state)))
            for cand in state.candidates:
                h.update(_canonical(_candidate_record(cand)))
        h.update(_canonical(sorted((c.id, self.q_labels[c.id]) for s in states for c in s.candidates)))
        h.update(_canonical(sorted((s.id, self.v_labels[s.id]) for s in states)))
        digests = self.image_sha256(split)
        if digests:
            h.update(_canonical(sorted(digests.items())))
        return h.hexdigest()

    def split_fingerprints(self) -> dict[str, str]:
        """:meth:`split_fingerprint` of every split present; a secret test split's is keyed by
        :func:`qval.hidden.fingerprint_key` (:class:`SchemaError` without ``secret``)."""
        from qval import hidden

        out = {}
        for split in SPLITS:
            if not self.states_in(split):
                continue
            key = None
            if split not in PUBLIC_SPLITS and self.manifest.secret_test:
                if not self.secret:
                    raise SchemaError(
                        f"the test split of {self.manifest.key} is drawn from a secret: its fingerprint needs "
                        f"{hidden.ENV_VAR}"
                    )
                key = hidden.fingerprint_key(self.secret, self.manifest.key)
            out[split] = self.split_fingerprint(split, key)
        return out

    # -- I/O ---------------------------------------------------------------------------
    def write(self, directory: str | Path) -> Path:
        """Write the dataset to ``directory`` and return it.

        Files: ``manifest.json``, ``states.jsonl``, ``candidates.jsonl`` and
        ``labels.jsonl`` (``{"id", "target", "value"}``; kept apart so inputs can be
        handed out without labels), and ``images/`` holding every named image (only when
        the dataset names images).  Afterwards ``images`` reads from that folder, and ``manifest`` is a
        copy holding the fingerprints (a dataset this one was derived from keeps its own).
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        # A manifest of its own: a dataset derived with ``dataclasses.replace`` (a subset, a copy without images)
        # shares its origin's, whose fingerprint must stay the origin's.
        self.manifest = replace(self.manifest, fingerprint=self.compute_fingerprint(),
                                split_fingerprints=self.split_fingerprints() if self.manifest.secret_test
                                else self.manifest.split_fingerprints)
        names = self.image_names()
        if names:
            folder = directory / "images"
            folder.mkdir(exist_ok=True)
            same = isinstance(self.images, ImageFolder) and _same_dir(self.images.directory, folder)
            if not same:
                for name in names:
                    tmp = folder / f".{name}.tmp"
                    tmp.write_bytes(self.images[name])
                    tmp.replace(folder / name)
            self.images = ImageFolder(folder)
        _write_jsonl(directory / "states.jsonl", (_state_record(s) for s in self.states))
        _write_jsonl(
            directory / "candidates.jsonl",
            (_candidate_record(c) for s in self.states for c in s.candidates),
        )
        labels = [{"id": k, "target": "q", "value": v} for k, v in self.q_labels.items()]
        labels += [{"id": k, "target": "v", "value": v} for k, v in self.v_labels.items()]
        _write_jsonl(directory / "labels.jsonl", labels)
        (directory / "manifest.json").write_text(
            json.dumps(asdict(self.manifest), indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        return directory

    @classmethod
    def read(cls, directory: str | Path, secret: str | None = None) -> "Dataset":
        """Read a dataset written by :meth:`write`, checking its fingerprint.

        Named images must exist in ``directory/images`` and hash to what the fingerprint
        covers; their bytes are read from there on access (``images``).  A dataset whose test
        split is secret needs the secret (``secret``, else :func:`qval.hidden.configured_secret`)
        when it holds that split.
        """
        from qval import hidden

        directory = Path(directory)
        manifest, states, q_labels, v_labels = _read_folder(directory)
        ds = cls(manifest=manifest, states=states, q_labels=q_labels, v_labels=v_labels,
                 images=ImageFolder(directory / "images"), secret=secret or hidden.configured_secret())
        expected = manifest.fingerprint
        try:
            actual = ds.compute_fingerprint()
        except SchemaError as exc:
            raise SchemaError(f"{directory}: {exc}") from exc
        if expected != actual:
            raise SchemaError(f"{directory}: fingerprint mismatch (manifest {expected}, content {actual})")
        return ds

    @classmethod
    def read_split(cls, directory: str | Path) -> "Dataset":
        """Read a folder written by :func:`write_split`: one split of a dataset, its labels only when they were
        written, its fingerprint not checked (the manifest's is the whole dataset's)."""
        directory = Path(directory)
        manifest, states, q_labels, v_labels = _read_folder(directory)
        return cls(manifest=manifest, states=states, q_labels=q_labels, v_labels=v_labels,
                   images=ImageFolder(directory / "images"))

    def validate(self) -> None:
        """Check internal consistency: unique ids, one actor per state, every label present."""
        seen: set[str] = set()
        for state in self.states:
            if state.split not in SPLITS:
                raise SchemaError(f"state {state.id}: split {state.split!r} not in {SPLITS}")
            if state.id in seen:
                raise SchemaError(f"duplicate id {state.id}")
            seen.add(state.id)
            state.actor_candidate  # noqa: B018 - raises when not exactly one
            if state.id not in self.v_labels:
                raise SchemaError(f"state {state.id} has no V label")
            for cand in state.candidates:
                if cand.id in seen:
                    raise SchemaError(f"duplicate id {cand.id}")
                seen.add(cand.id)
                if cand.state_id != state.id:
                    raise SchemaError(f"candidate {cand.id} points at state {cand.state_id}, not {state.id}")
                if cand.id not in self.q_labels:
                    raise SchemaError(f"candidate {cand.id} has no Q label")
        self.image_sha256()  # raises when a named image is missing or badly named
        if self.image_names() and "image" not in self.manifest.modalities:
            raise SchemaError(f"the dataset names images but its modalities {self.manifest.modalities} lack 'image'")


def _read_folder(directory: Path) -> tuple[Manifest, list[State], dict[str, float], dict[str, float]]:
    """The manifest, states (with their candidates) and Q and V labels of a dataset folder."""
    try:
        manifest = Manifest(**json.loads((directory / "manifest.json").read_text(encoding="utf-8")))
    except (OSError, TypeError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{directory}/manifest.json: {exc}") from exc
    by_state: dict[str, list[Candidate]] = {}
    for rec in read_jsonl(directory / "candidates.jsonl"):
        cand = Candidate(**rec)
        by_state.setdefault(cand.state_id, []).append(cand)
    states = []
    for rec in read_jsonl(directory / "states.jsonl"):
        rec["history"] = tuple(rec["history"])
        rec["candidates"] = tuple(sorted(by_state.get(rec["id"], []), key=lambda c: c.index))
        states.append(State(**rec))
    q_labels: dict[str, float] = {}
    v_labels: dict[str, float] = {}
    if (directory / "labels.jsonl").is_file():
        for rec in read_jsonl(directory / "labels.jsonl"):
            (q_labels if rec["target"] == "q" else v_labels)[rec["id"]] = float(rec["value"])
    return manifest, states, q_labels, v_labels


def write_split(directory: str | Path, split: str, out: str | Path, *, labels: bool, images: bool) -> Path:
    """Write into ``out`` the part of dataset folder ``directory`` that a method run on ``split`` reads: its
    ``manifest.json``, the split's states and candidates, the split's labels only when ``labels``, the images its
    states and candidates name only when ``images``; return ``out`` (read it with :meth:`Dataset.read_split`)."""
    directory, out = Path(directory), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(directory / "manifest.json", out / "manifest.json")
    states = [rec for rec in read_jsonl(directory / "states.jsonl") if rec["split"] == split]
    ids = {rec["id"] for rec in states}
    candidates = [rec for rec in read_jsonl(directory / "candidates.jsonl") if rec["state_id"] in ids]
    ids |= {rec["id"] for rec in candidates}
    _write_jsonl(out / "states.jsonl", states)
    _write_jsonl(out / "candidates.jsonl", candidates)
    if labels:
        _write_jsonl(out / "labels.jsonl", (rec for rec in read_jsonl(directory / "labels.jsonl") if rec["id"] in ids))
    if images:
        names = {rec.get(key) for rec in (*states, *candidates) for key in ("image", "next_image", "end_image")}
        for name in sorted(n for n in names if n):
            (out / "images").mkdir(exist_ok=True)
            shutil.copyfile(directory / "images" / name, out / "images" / name)
    return out


def _state_record(state: State) -> dict[str, Any]:
    rec = asdict(state)
    rec.pop("candidates")
    rec["history"] = list(state.history)
    for optional in ("end_image", "task_type"):
        if rec[optional] is None:  # absent, so datasets without them keep their fingerprints
            del rec[optional]
    return rec


def _candidate_record(cand: Candidate) -> dict[str, Any]:
    rec = asdict(cand)
    if rec["end_image"] is None:
        del rec["end_image"]
    return rec


def _plain_name(name: str) -> bool:
    return bool(name) and PurePosixPath(name).name == name and "\\" not in name and not name.startswith(".")


def _same_dir(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def _write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, sort_keys=True, ensure_ascii=False) + "\n")
    tmp.replace(path)


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a dataset's JSON Lines file; :class:`SchemaError` naming the file and line."""
    try:
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise SchemaError(f"{path}:{lineno}: {exc}") from exc
    except OSError as exc:
        raise SchemaError(f"{path}: {exc}") from exc

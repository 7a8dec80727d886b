"""A dataset's inputs without its labels: what the learned family may read.

:func:`read_inputs` reads ``manifest.json``, ``states.jsonl`` and ``candidates.jsonl`` of a
dataset directory written by :meth:`qval.schema.Dataset.write` and never opens
``labels.jsonl`` (so it cannot check the fingerprint, which covers the labels; the manifest's
fingerprint still names the dataset for caches).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from qval import schema


@dataclass(frozen=True)
class Point:
    """What a learned model scores: the task, the state's text and (for Q) an action."""

    task: str
    state: str
    action: str | None = None


@dataclass(frozen=True)
class Inputs:
    """Manifest and states (with candidates) of a dataset, no labels."""

    directory: Path
    manifest: schema.Manifest
    states: tuple[schema.State, ...]

    @property
    def fingerprint(self) -> str:
        """The manifest's fingerprint (the cache key of features)."""
        return self.manifest.fingerprint

    def states_in(self, split: str) -> list[schema.State]:
        """States of one split, in dataset order."""
        if split not in schema.SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {', '.join(schema.SPLITS)}")
        return [s for s in self.states if s.split == split]


def read_inputs(directory: str | Path) -> Inputs:
    """The inputs of the dataset in ``directory`` (never its labels)."""
    directory = Path(directory)
    try:
        manifest = schema.Manifest(**json.loads((directory / "manifest.json").read_text(encoding="utf-8")))
    except (OSError, TypeError, json.JSONDecodeError) as exc:
        raise schema.SchemaError(f"{directory}/manifest.json: {exc}") from exc
    by_state: dict[str, list[schema.Candidate]] = {}
    for rec in schema.read_jsonl(directory / "candidates.jsonl"):
        cand = schema.Candidate(**rec)
        by_state.setdefault(cand.state_id, []).append(cand)
    states = []
    for rec in schema.read_jsonl(directory / "states.jsonl"):
        rec["history"] = tuple(rec["history"])
        rec["candidates"] = tuple(sorted(by_state.get(rec["id"], []), key=lambda c: c.index))
        states.append(schema.State(**rec))
    return Inputs(directory=directory, manifest=manifest, states=tuple(states))

"""What the image methods compare against: per-environment goal texts and per-point images.

**Texts** (``goal_texts.json``, versioned): for each environment a target-goal text, a goal-free
*baseline* text (VLM-RM's direction) and three *negative* goals (VLM-SoR).  A goal containing
``{objective}`` is filled per state from its observation with the environment's ``objective``
pattern (ALFWorld's "Your task is to: …", MiniWoB's "Goal: …").

**Images** (:func:`image_points`): the image a point is scored on — the *next* state's image for
target ``q`` (Q̂(s, a) = V̂(s')), the state's own image for target ``v`` — and its goal image
(``end_image``: the final state of the reference rollout from that point, ``trajectory_end``),
taken from the candidate row for ``q`` and from the state row for ``v``.

The shared driver :func:`score_points` loads the encoder once, embeds the images in batches,
reports progress after every batch and turns a missing or unreadable image into a counted NaN.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from qval import schema
from qval.methods import encoders
from qval.methods.registry import MethodContext, MethodError, MethodOutput

TEXTS_PATH = Path(__file__).with_name("goal_texts.json")


@dataclass(frozen=True)
class GoalTexts:
    """The texts of one environment."""

    goal: str
    baseline: str
    negatives: tuple[str, ...]
    objective: str | None = None
    """Regular expression with an ``objective`` group, read from the observation, when ``goal`` needs it."""

    def goal_for(self, observation: str) -> str | None:
        """The goal text of a state (None when its objective cannot be found in the observation)."""
        if "{objective}" not in self.goal:
            return self.goal
        match = re.search(self.objective or "(?!)", observation, flags=re.MULTILINE)
        return self.goal.format(objective=match.group("objective").strip()) if match else None


@functools.lru_cache(maxsize=1)
def _texts_file() -> dict[str, Any]:
    return json.loads(TEXTS_PATH.read_text(encoding="utf-8"))


def texts_version() -> dict[str, str]:
    """Version and SHA-256 of the texts file (recorded in every run's meta)."""
    return {"texts_version": _texts_file()["version"],
            "texts_sha256": hashlib.sha256(TEXTS_PATH.read_bytes()).hexdigest()}


def goal_texts(environment: str) -> GoalTexts:
    """The texts of ``environment``; :class:`MethodError` when the file has none for it."""
    entry = _texts_file()["environments"].get(environment)
    if entry is None:
        raise MethodError(f"no goal texts for environment {environment!r} in {TEXTS_PATH.name}; "
                          f"known: {', '.join(sorted(_texts_file()['environments']))}")
    return GoalTexts(goal=entry["goal"], baseline=entry["baseline"], negatives=tuple(entry["negatives"]),
                     objective=entry.get("objective"))


@dataclass(frozen=True)
class ImagePoint:
    """One evaluation point of an image method."""

    id: str
    image: str | None
    """File name of the image the point is scored on (next state for ``q``, the state for ``v``)."""
    end_image: str | None
    observation: str
    """The state's text observation (where a per-task goal text is read from)."""


def image_points(ctx: MethodContext) -> list[ImagePoint]:
    """The points of ``ctx`` with their images (see the module docstring)."""
    points = []
    for state in ctx.points:
        if ctx.target == "q":
            cand = state.actor_candidate
            points.append(ImagePoint(cand.id, cand.next_image, cand.end_image, state.observation))
        elif ctx.target == "v":
            points.append(ImagePoint(state.id, state.image, state.end_image, state.observation))
        else:
            raise MethodError(f"image methods score targets q and v, not {ctx.target!r}")
    return points


Scorer = Callable[[np.ndarray, list[ImagePoint], "Batch"], np.ndarray]
"""Scores of a batch: (state embeddings, the batch's points, what the batch knows) → one score each."""


@dataclass
class Batch:
    """What a scorer may use besides the state embeddings: goal-image embeddings and the encoder."""

    goal_images: np.ndarray | None
    encoder: encoders.Encoder


def text_goal_scorer(encoder: encoders.Encoder, texts: GoalTexts,
                     score: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Scorer:
    """A scorer of each image against its state's goal text by ``score(state rows, goal vector)``.

    Each distinct goal text is embedded once; a state whose goal text cannot be read gets NaN.
    """
    goals: dict[str, np.ndarray] = {}

    def scorer(states: np.ndarray, points: list[ImagePoint], batch: Batch) -> np.ndarray:
        out = np.full(len(points), np.nan)
        for i, point in enumerate(points):
            goal = texts.goal_for(point.observation)
            if goal is not None:
                if goal not in goals:
                    goals[goal] = encoder.encode_texts([goal])[0]
                out[i] = score(states[i:i + 1], goals[goal])[0]
        return out

    return scorer


@functools.lru_cache(maxsize=2)
def _encoder(spec: encoders.EncoderSpec, seed: int, device: str | None, batch_size: int) -> encoders.Encoder:
    return encoders.Encoder(spec, seed=seed, device=device, batch_size=batch_size)


def load_encoder(ctx: MethodContext, *, kind: str) -> encoders.Encoder:
    """The encoder named by ``ctx.backbone`` (kept loaded for the next run), checked to be of ``kind``.

    ``kind`` is ``"open_clip"`` (image and text towers) or ``"resnet"``.
    """
    try:
        spec = encoders.resolve(ctx.backbone)
    except encoders.EncoderError as exc:
        raise MethodError(str(exc)) from exc
    if spec.kind != kind:
        wanted = "an open_clip image–text model" if kind == "open_clip" else "resnet50"
        raise MethodError(f"backbone {ctx.backbone!r} is a {spec.arch} encoder; this method needs {wanted}")
    batch_size = int(ctx.options.get("batch_size", encoders.DEFAULT_BATCH_SIZE))
    return _encoder(spec, ctx.seed, ctx.options.get("device"), batch_size)


def require_goal_images(ctx: MethodContext) -> None:
    """:class:`MethodError` when no point of ``ctx`` has a goal image (a dataset version without them)."""
    points = image_points(ctx)
    if points and not any(p.end_image for p in points):
        raise MethodError(
            f"dataset {ctx.dataset.manifest.key} has no goal images (end_image) in split {ctx.split!r}: "
            f"use a dataset version with trajectory_end images")


def score_points(ctx: MethodContext, encoder: encoders.Encoder, scorer: Scorer, *, goal_image: bool,
                 meta: dict[str, Any]) -> MethodOutput:
    """Score every point of ``ctx`` with ``scorer``, batch by batch; unusable points are counted NaNs.

    With ``goal_image`` each point also needs its ``end_image`` (see :func:`require_goal_images`);
    a single missing one is a NaN.
    """
    points = image_points(ctx)
    if goal_image:
        require_goal_images(ctx)
    scores = {point.id: math.nan for point in points}  # dataset order
    counts = {"no_image": 0, "unreadable_image": 0, "no_goal_image": 0, "unscored": 0}
    done = 0
    for start in range(0, len(points), encoder.batch_size):
        chunk = points[start:start + encoder.batch_size]
        usable, images, goals = [], [], []
        for point in chunk:
            reason = None
            image = _read(ctx.dataset, point.image)
            goal = _read(ctx.dataset, point.end_image) if goal_image else None
            if point.image is None:
                reason = "no_image"
            elif image is None:
                reason = "unreadable_image"
            elif goal_image and goal is None:
                reason = "no_goal_image" if point.end_image is None else "unreadable_image"
            if reason:
                counts[reason] += 1
                continue
            usable.append(point)
            images.append(image)
            goals.append(goal)
        if usable:
            states = encoder.encode_images(images)
            batch = Batch(goal_images=encoder.encode_images(goals) if goal_image else None, encoder=encoder)
            values = scorer(states, usable, batch)
            for point, value in zip(usable, values):
                if not np.isfinite(value):  # e.g. no objective in the observation for a per-task goal text
                    counts["unscored"] += 1
                scores[point.id] = float(value)
        done += len(chunk)
        ctx.progress(done, len(points))
    full = {**meta, **counts, "encoder": encoder.spec.describe(), "device": encoder.device,
            "batch_size": encoder.batch_size}
    return MethodOutput.from_scores(scores, meta=full)


def _read(dataset: schema.Dataset, name: str | None) -> Any:
    if not name:
        return None
    try:
        return encoders.load_image(dataset.images[name])
    except (KeyError, OSError, ValueError):
        return None

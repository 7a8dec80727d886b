"""Pre-trained family: value-pretrained visual representations (VIP, LIV) against a goal.

The goal is the point's ``end_image`` (``trajectory_end``: the rendered final state of the
reference rollout from the point), except for ``liv-txt``, whose goal is the environment's goal
text (:mod:`qval.methods.goals`).  Images are those of the point (next state for target ``q``).

* ``vip`` — ResNet-50 (VIP's; backbone ``vip`` or ``resnet50:PATH``): ``−‖φ(o) − φ(g)‖₂``.
* ``liv-cos`` — LIV's CLIP-RN50 image tower (backbone ``liv`` or an open_clip spec): cosine
  similarity of the image and goal-image embeddings.
* ``liv-l2`` — the same embeddings, ``−‖φ(o) − φ(g)‖₂``.
* ``liv-txt`` — LIV's image and text towers: cosine similarity of the image and the goal text.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from qval.methods.embedding import cosine
from qval.methods.goals import (Batch, ImagePoint, goal_texts, load_encoder, require_goal_images, score_points,
                               text_goal_scorer, texts_version)
from qval.methods.registry import MethodContext, MethodOutput, method


def negative_l2(states: np.ndarray, goals: np.ndarray) -> np.ndarray:
    """``−‖s − g‖₂`` for each state row and its goal row (raw embeddings, as VIP's reward)."""
    return -np.linalg.norm(np.asarray(states, dtype=np.float64) - np.asarray(goals, dtype=np.float64), axis=-1)


def _image_goal(ctx: MethodContext, kind: str, score: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> MethodOutput:
    """Score each image against its goal image's embedding with ``score(states, goals)``."""
    require_goal_images(ctx)
    encoder = load_encoder(ctx, kind=kind)

    def scorer(states: np.ndarray, points: list[ImagePoint], batch: Batch) -> np.ndarray:
        return score(states, batch.goal_images)

    return score_points(ctx, encoder, scorer, goal_image=True, meta={"goal": "trajectory_end"})


@method("vip", family="pre-trained", targets=("q", "v"), modality="image", needs="image-encoder",
        description="VIP: negative L2 distance between ResNet-50 embeddings of the image and its "
                    "trajectory_end goal image.")
def vip_method(ctx: MethodContext) -> MethodOutput:
    """``vip``."""
    return _image_goal(ctx, "resnet", negative_l2)


@method("liv-cos", family="pre-trained", targets=("q", "v"), modality="image", needs="image-text-encoder",
        description="LIV (CLIP-RN50): cosine similarity of the image and its trajectory_end goal image.")
def liv_cos_method(ctx: MethodContext) -> MethodOutput:
    """``liv-cos``."""
    return _image_goal(ctx, "open_clip", cosine)


@method("liv-l2", family="pre-trained", targets=("q", "v"), modality="image", needs="image-text-encoder",
        description="LIV (CLIP-RN50): negative L2 distance of the image and its trajectory_end goal image.")
def liv_l2_method(ctx: MethodContext) -> MethodOutput:
    """``liv-l2``."""
    return _image_goal(ctx, "open_clip", negative_l2)


@method("liv-txt", family="pre-trained", targets=("q", "v"), modality="image", needs="image-text-encoder",
        description="LIV (CLIP-RN50): cosine similarity of the image and the environment's goal text.")
def liv_txt_method(ctx: MethodContext) -> MethodOutput:
    """``liv-txt``."""
    encoder = load_encoder(ctx, kind="open_clip")
    texts = goal_texts(ctx.dataset.manifest.environment)
    scorer = text_goal_scorer(encoder, texts, cosine)
    return score_points(ctx, encoder, scorer, goal_image=False, meta={**texts_version(), "goal": "text"})

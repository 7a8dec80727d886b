"""Embedding family: a frozen image–text encoder (CLIP, SigLIP) compares a state image with goal texts.

All four score the image of the point (for target ``q`` the *next* state's image) against the
environment's texts (:mod:`qval.methods.goals`); embeddings are L2-normalised first.

* ``vlm-rm-cos`` — cosine similarity of the image and the goal text.
* ``vlm-rm`` — VLM-RM's goal–baseline regularisation: with ``d = g − b`` (goal and baseline
  text embeddings) and ``P = d dᵀ / ‖d‖²`` the projection on that direction, the score is
  ``1 − ½ ‖(α P + (1 − α) I)(x − g)‖²``; ``α = 0.5``.  At ``α = 0`` it is the cosine above (for
  unit vectors ``1 − ½‖x − g‖² = x·g``); at ``α = 1`` only progress along ``d`` counts.
* ``vlm-sor-softmax`` — VLM-SoR: the softmax, at temperature ``τ = 0.07``, of the cosine
  similarities to the goal and the three negative goals; the score is the goal's probability.
* ``vlm-sor`` — that probability thresholded: 1.0 when it exceeds ``β = 0.5``, else 0.0.

The pure functions below work on embedding arrays; the registered methods feed them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from qval.methods.goals import goal_texts, load_encoder, score_points, text_goal_scorer, texts_version
from qval.methods.registry import MethodContext, MethodOutput, get_method, method


def normalize(x: np.ndarray) -> np.ndarray:
    """Rows (or a vector) scaled to unit L2 norm."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def cosine(states: np.ndarray, goals: np.ndarray) -> np.ndarray:
    """Cosine similarity of each state row with its goal row (or one goal vector for all)."""
    return np.sum(normalize(states) * normalize(goals), axis=-1)


def vlm_rm(states: np.ndarray, goal: np.ndarray, baseline: np.ndarray, alpha: float) -> np.ndarray:
    """VLM-RM scores ``1 − ½‖(αP + (1−α)I)(x − g)‖²`` of unit-normalised states (see the module docstring)."""
    x, g, b = normalize(states), normalize(goal), normalize(baseline)
    d = g - b
    norm2 = float(d @ d)
    diff = x - g
    along = np.outer(diff @ d / norm2, d) if norm2 > 0 else np.zeros_like(diff)
    shifted = alpha * along + (1.0 - alpha) * diff
    return 1.0 - 0.5 * np.sum(shifted * shifted, axis=-1)


def sor_probability(states: np.ndarray, goal: np.ndarray, negatives: np.ndarray, tau: float) -> np.ndarray:
    """Softmax probability (temperature ``tau``) of the goal among goal + negatives, by cosine similarity."""
    texts = normalize(np.vstack([goal[None, :], negatives]))
    logits = normalize(states) @ texts.T / tau
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p[:, 0] / p.sum(axis=1)


def sor_threshold(probability: np.ndarray, beta: float) -> np.ndarray:
    """1.0 where ``probability > beta``, else 0.0."""
    return (np.asarray(probability) > beta).astype(np.float64)


@dataclass(frozen=True)
class _Texts:
    """The environment's embedded texts and the run's parameters, as a score function sees them."""

    baseline: np.ndarray
    negatives: np.ndarray
    params: dict[str, Any]


Score = Callable[[np.ndarray, np.ndarray, _Texts], np.ndarray]
"""(state embeddings, goal-text embedding, the other texts) → scores."""


def _run(ctx: MethodContext, name: str, score: Score) -> MethodOutput:
    """Embed the fixed texts once, then score the images in batches against their states' goal texts."""
    spec = get_method(name)
    encoder = load_encoder(ctx, kind="open_clip")
    texts = goal_texts(ctx.dataset.manifest.environment)
    params = {k: ctx.option(spec, k) for k in spec.params}
    fixed = encoder.encode_texts([texts.baseline, *texts.negatives])
    embedded = _Texts(baseline=fixed[0], negatives=fixed[1:], params=params)
    scorer = text_goal_scorer(encoder, texts, lambda x, g: score(x, g, embedded))
    return score_points(ctx, encoder, scorer, goal_image=False, meta={**texts_version(), "params": params})


_DESCRIBE = "Image of the point (next state for Q) against per-environment goal texts, frozen CLIP/SigLIP."


@method("vlm-rm-cos", family="embedding", targets=("q", "v"), modality="image", needs="image-text-encoder",
        description="Cosine similarity of the image and the goal text. " + _DESCRIBE)
def vlm_rm_cos_method(ctx: MethodContext) -> MethodOutput:
    """``vlm-rm-cos``."""
    return _run(ctx, "vlm-rm-cos", lambda x, g, t: cosine(x, g))


@method("vlm-rm", family="embedding", targets=("q", "v"), modality="image", needs="image-text-encoder",
        params={"alpha": 0.5},
        description="VLM-RM: distance to the goal text along the goal − baseline direction (α). " + _DESCRIBE)
def vlm_rm_method(ctx: MethodContext) -> MethodOutput:
    """``vlm-rm``."""
    return _run(ctx, "vlm-rm", lambda x, g, t: vlm_rm(x, g, t.baseline, float(t.params["alpha"])))


@method("vlm-sor-softmax", family="embedding", targets=("q", "v"), modality="image", needs="image-text-encoder",
        params={"tau": 0.07},
        description="VLM-SoR: softmax probability (τ) of the goal text among it and 3 negative goals. " + _DESCRIBE)
def vlm_sor_softmax_method(ctx: MethodContext) -> MethodOutput:
    """``vlm-sor-softmax``."""
    return _run(ctx, "vlm-sor-softmax", lambda x, g, t: sor_probability(x, g, t.negatives, float(t.params["tau"])))


@method("vlm-sor", family="embedding", targets=("q", "v"), modality="image", needs="image-text-encoder",
        params={"tau": 0.07, "beta": 0.5},
        description="VLM-SoR thresholded: 1 when the goal's softmax probability exceeds β, else 0. " + _DESCRIBE)
def vlm_sor_method(ctx: MethodContext) -> MethodOutput:
    """``vlm-sor``."""
    return _run(ctx, "vlm-sor", lambda x, g, t: sor_threshold(
        sor_probability(x, g, t.negatives, float(t.params["tau"])), float(t.params["beta"])))

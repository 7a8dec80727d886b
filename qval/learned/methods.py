"""Entry points: train a learned method on a dataset directory, score a split, adapt to the method registry.

* :func:`environment_for`: the dataset's environment and spec, from :data:`qval.envs.registry.VERSIONS`
  (matched by slug and version).
* :func:`train`: read the inputs (never the labels), gather experience, fit, store the weights
  (:func:`qval.learned.store.save`) under ``{root}/…``; returns the stored folder and model.
* :func:`score_split`: id → score for every point of a split — for target ``q`` every candidate
  (so the per-state ranking is scored too), for ``v`` every state.
* :class:`Scorer`: a trained model bound to its feature cache, ``score(points)`` → Q-values;
  ``score_candidates(states)`` is what a Best-of-N run's learned picker calls
  (:func:`qval.best_of_n.score_picker`) to pick among an environment's candidates.
* :func:`run`: ``run(name, ctx) -> output`` for the built-in method registry
  (``ctx.dataset_dir, split, target, points, seed, progress, cache_dir, options``; options
  ``model`` = a stored model folder, else the newest model of the method for the dataset with the
  featuriser under ``options["models_root"]`` (default ``cache_dir/learned``), else one is trained first;
  ``featuriser`` = a :func:`~qval.learned.features.featuriser_from_spec` spec, default
  :data:`~qval.learned.defaults.DEFAULT_FEATURISER`;
  an ``amc-value`` model with LoRA adapters scores through its own fine-tuned backbone).
  :mod:`qval.methods.learned` registers the three methods with it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from qval import build, schema
from qval.envs import registry
from qval.envs.base import Environment
from qval.learned import defaults
from qval.learned.data import Inputs, Point, read_inputs
from qval.learned.features import FeatureCache, Featuriser, featuriser_from_spec
from qval.methods.registry import MethodOutput

if TYPE_CHECKING:  # torch: imported where a model is trained or loaded (the site's image has none)
    from qval.learned.store import TrainedModel

METHODS: dict[str, dict[str, Any]] = {
    "best-of-q": {
        "defaults": defaults.BEST_OF_Q,
        "main": ("steps", "batch_size", "lr", "discount", "tau"),
        "description": "Best-of-Q: IQL (expectile τ=0.7) Q and V networks on frozen features of state, action and "
                       "task; transitions of the train split's trajectories and of every train candidate continued "
                       "by the ε-greedy actor, rewards from the environment.",
    },
    "qlass": {
        "defaults": defaults.QLASS,
        "main": ("steps", "batch_size", "lr", "discount", "width", "depth", "epsilon"),
        "description": "QLASS: a QNet regressed on max-backup Q-values (γ=0.9) of exploration trees grown from the "
                       "train states with the environment's restore and candidate sampler.",
    },
    "amc-value": {
        "defaults": defaults.AMC_VALUE,
        "main": ("steps", "batch_size", "lr", "discount", "samples", "epsilon", "lora", "lora_rank", "lora_alpha",
                 "lora_lr"),
        "description": "Agentic Monte Carlo: a value head regressed on Monte-Carlo returns of continuations sampled "
                       "with the ε-noisy actor from each train state and each of its candidates, and on the "
                       "return-to-go of every later step of them; with lora and a "
                       "local backbone (featuriser local:PATH), LoRA adapters (r=8, α=16) of the backbone's attention "
                       "and MLP projections are fine-tuned jointly with the head, base weights frozen.",
    },
}
"""Method name → default parameters, the main ones (offered by the site's training form) and a
one-line description (shown on the method's page)."""

FAMILY = "Learned"

Progress = Callable[[int, int, str], None]


def environment_for(inputs: Inputs) -> tuple[Environment, build.DatasetSpec]:
    """The environment and spec that built the dataset (:func:`qval.envs.registry.builder_for`: superseded versions and
    fresh hidden splits included)."""
    make = registry.builder_for(f"{inputs.manifest.slug}@{inputs.manifest.version}")
    if make is None:
        raise ValueError(f"no environment builds {inputs.manifest.key}; the learned methods need the dataset's "
                         f"environment (one of qval.envs.registry.VERSIONS) to gather train experience")
    return make()


def train(method: str, dataset_dir: str | Path, root: str | Path, *, featuriser: Featuriser,
          cache_dir: str | Path | None = None, seed: int = 0, params: dict[str, Any] | None = None,
          progress: Progress | None = None, env: Environment | None = None,
          spec: build.DatasetSpec | None = None) -> tuple[Path, TrainedModel]:
    """Train ``method`` on the dataset in ``dataset_dir`` and store it under ``root``.

    ``env``/``spec``: the dataset's environment (default: :func:`environment_for`; tests pass a
    small one).  Only ``states.jsonl``, ``candidates.jsonl`` and ``manifest.json`` are read.
    """
    from qval.learned import store, trainers  # torch

    if method not in METHODS:
        raise KeyError(f"unknown learned method {method!r}; choose one of {', '.join(METHODS)}")
    inputs = read_inputs(dataset_dir)
    own_env = env is None
    if env is None or spec is None:
        env, spec = environment_for(inputs) if env is None else (env, spec)
    feats = FeatureCache(featuriser, cache_dir, inputs.fingerprint)
    try:
        if method == "best-of-q":
            assert spec is not None
            model = trainers.train_best_of_q(inputs, env, spec, feats, seed=seed, params=params, progress=progress)
        elif method == "qlass":
            model = trainers.train_qlass(inputs, env, feats, seed=seed, params=params, progress=progress)
        else:
            model = trainers.train_amc_value(inputs, env, feats, seed=seed, params=params, progress=progress)
    finally:
        if own_env:
            env.close()
    return store.save(model, root), model


def score_split(model: TrainedModel, inputs: Inputs, split: str, target: str, feats: FeatureCache) -> dict[str, float]:
    """Scores of every point of ``split``: each candidate's Q (target ``q``) or each state's V (``v``)."""
    if model.fingerprint != inputs.fingerprint:
        raise ValueError(f"the model was trained on dataset {model.dataset} ({model.fingerprint[:12]}), "
                         f"not on {inputs.manifest.key} ({inputs.fingerprint[:12]})")
    return score_states(model, inputs.states_in(split), target, feats)


def score_states(model: TrainedModel, states: Sequence[Any], target: str, feats: FeatureCache) -> dict[str, float]:
    """Scores of the given states (a split's, or new ones such as a Best-of-N turn's): each
    candidate's Q (target ``q``) or each state's V (``v``), by id."""
    if target == "q":
        cands = [(c.id, Point(s.task, s.observation, c.action)) for s in states for c in s.candidates]
        values = model.q([p for _, p in cands], feats)
        return {cid: float(v) for (cid, _), v in zip(cands, values)}
    if target == "v":
        values = model.v([Point(s.task, s.observation) for s in states],
                         [[c.action for c in s.candidates] for s in states], feats)
        return {s.id: float(v) for s, v in zip(states, values)}
    raise ValueError(f"unknown target {target!r}; expected q or v")


@dataclass
class Scorer:
    """A trained model with its features: ``score(points)`` gives Q(s, a) for text points."""

    model: TrainedModel
    feats: FeatureCache

    @classmethod
    def open(cls, folder: str | Path, featuriser: Featuriser, cache_dir: str | Path | None = None) -> "Scorer":
        """Load a stored model; ``featuriser`` must be the one it was trained with."""
        from qval.learned import store  # torch

        model = store.load(folder)
        return cls(model, FeatureCache(featuriser, cache_dir, model.fingerprint))

    def score(self, points: Sequence[Point]) -> list[float]:
        """Q(s, a) of each (task, state, action) point."""
        return [float(v) for v in self.model.q(points, self.feats)]

    def score_candidates(self, states: Sequence[schema.State]) -> dict[str, float]:
        """Q(s, a) of every candidate of ``states`` by candidate id (a :data:`qval.best_of_n.ScoreStates`)."""
        return score_states(self.model, states, "q", self.feats)


def latest_model(root: str | Path, method: str, dataset_key: str, featuriser: str) -> Path | None:
    """The most recently written stored model of ``method`` for ``slug@version`` trained on the features named
    ``featuriser`` (a :attr:`Featuriser.name`), or None: a model of other features cannot score with these."""
    folder = Path(root) / method / dataset_key.replace("@", "-")
    found = sorted((p for p in folder.glob("*/model.json")
                    if json.loads(p.read_text(encoding="utf-8")).get("featuriser") == featuriser),
                   key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def run(method: str, ctx: Any) -> MethodOutput:
    """Score ``ctx.split`` of ``ctx.dataset_dir`` with learned ``method`` (a registry ``run``; see the module docstring).

    ``ctx.points``: states (their candidates for ``q``, themselves for ``v``) or ids to return;
    empty → every point of the split.
    """
    options = dict(getattr(ctx, "options", None) or {})
    if getattr(ctx, "dataset_dir", None) is None:
        raise ValueError(f"{method} needs the dataset's directory (ctx.dataset_dir): it trains in the dataset's environment")
    if getattr(ctx, "cache_dir", None) is None and not (options.get("model") and options.get("models_root")):
        raise ValueError(f"{method} needs ctx.cache_dir (features, models) or options 'model' and 'models_root'")
    cache = Path(ctx.cache_dir) if ctx.cache_dir is not None else Path(options["models_root"])
    root = options.get("models_root", cache / "learned")
    featuriser = featuriser_from_spec(options.get("featuriser", defaults.DEFAULT_FEATURISER))
    inputs = read_inputs(ctx.dataset_dir)
    folder = options.get("model") or latest_model(root, method, inputs.manifest.key, featuriser.name)
    if folder is None:
        progress = ctx.progress

        def report(done: int, total: int, stage: str) -> None:
            progress(done, total)

        folder, _ = train(method, ctx.dataset_dir, root, featuriser=featuriser, cache_dir=cache / "features",
                          seed=ctx.seed, params=options.get("params"), progress=report)
    from qval.learned import store  # torch

    model = store.load(folder)
    feats = FeatureCache(featuriser, cache / "features", inputs.fingerprint)
    points = list(ctx.points or [])
    if points and all(isinstance(p, schema.State) for p in points):
        # the registry passes states: score exactly those (a split's, or a Best-of-N turn's new ones)
        if model.fingerprint != inputs.fingerprint:
            raise ValueError(f"the model was trained on dataset {model.dataset}, not on {inputs.manifest.key}")
        scores = score_states(model, points, ctx.target, feats)
    else:
        scores = score_split(model, inputs, ctx.split, ctx.target, feats)
        wanted = [p["id"] if isinstance(p, dict) else getattr(p, "id", p) for p in points]
        if wanted:
            scores = {i: scores.get(i, math.nan) for i in wanted}
    num_nan = sum(1 for v in scores.values() if v != v)
    return MethodOutput(scores=scores, num_nan=num_nan,
                  meta={"model": str(folder), "version": model.version, "featuriser": model.featuriser,
                        "data": model.data})

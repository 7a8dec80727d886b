"""The registry of built-in methods: small registered units that turn a split's points into scores.

Contract (other modules of :mod:`qval.methods` register against exactly this)::

    @method("direct-single", family="direct", targets=("q", "v"), modality="text",
            needs="chat-llm", version="1", description="...", params={"temperature": 0.0})
    def direct_single(ctx: MethodContext) -> MethodOutput: ...

* :class:`MethodSpec` -- ``name``, ``family`` (a slug of :data:`qval.families.FAMILY_SLUGS`),
  ``targets`` (a subset of ``("q", "v", "ranking")``: ``ranking`` means the method scores every
  candidate of a state, which a target-``q`` submission turns into the ranking metrics),
  ``modality`` (``"text"`` | ``"image"``), ``needs`` (``"chat-llm"`` | ``"chat-llm-logprobs"`` |
  ``"vlm"`` | ``"image-text-encoder"`` | ``"image-encoder"`` | ``"none"``), ``version``,
  ``description``, ``params`` (the method's fixed hyperparameters; ``ctx.options`` may override
  the ones a method documents), ``reads_labels`` (whether it reads the split's labels: a teacher's
  evidence; a remote worker gets them only then) and ``run``.
* :class:`MethodContext` -- what one run gets: the dataset (``dataset``; ``dataset_dir`` when it is
  on disk), ``split``, ``target`` (``"q"`` or ``"v"``), ``points`` (the split's
  :class:`~qval.schema.State` objects in dataset order), ``backbone`` (an OpenAI-compatible URL,
  ``unix:PATH`` of a socket, a local checkpoint directory or an encoder spec), ``seed``,
  ``progress(done, total)``, ``cache_dir`` (responses and anything else worth keeping between
  runs) and ``options``; a method's model client sets ``meter`` (anything with a ``tokens``
  count), which a caller's progress report reads.
* :class:`MethodOutput` -- ``scores`` (evaluation id → score; NaN allowed: a point the method
  could not score), ``num_nan``, ``meta`` (JSON-serialisable: counts, prompt hashes, ...) and,
  for methods that produce several samples per id (``codegen``), ``samples`` (id → one score per
  sample; then ``scores`` holds their mean over the finite samples).

Evaluation ids are those of :mod:`qval.scoring`: the actor candidate's id (target ``q``), the
state id (target ``v``) or every candidate's id (ranking methods).

Built-in modules are found by :func:`all_methods` / :func:`get_method`: every module of the
:mod:`qval.methods` package is imported once, so a new module registers itself by being there.
Modules must import heavy dependencies (torch, open_clip, openai) inside functions, so that
listing the methods stays cheap.  This module is Django-free.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from qval import schema
from qval.families import FAMILY_SLUGS

TARGETS: tuple[str, ...] = ("q", "v", "ranking")
MODALITIES: tuple[str, ...] = ("text", "image")
NEEDS: tuple[str, ...] = ("chat-llm", "chat-llm-logprobs", "vlm", "image-text-encoder", "image-encoder", "none")


class MethodError(RuntimeError):
    """A method cannot run with what it was given (unknown name, wrong target, missing backbone...)."""


def _no_progress(done: int, total: int) -> None:
    """The default progress callback."""


@dataclass
class MethodContext:
    """What one run of a method gets (see the module docstring)."""

    dataset: schema.Dataset
    split: str
    target: str
    points: list[schema.State]
    backbone: str
    dataset_dir: Path | None = None
    seed: int = 0
    progress: Callable[[int, int], None] = _no_progress
    cache_dir: Path | None = None
    options: dict[str, Any] = field(default_factory=dict)
    meter: Any = None

    def option(self, spec: "MethodSpec", name: str) -> Any:
        """``options[name]`` when given, else the method's own ``params[name]``."""
        return self.options.get(name, spec.params.get(name))


@dataclass
class MethodOutput:
    """What a run produced: scores by evaluation id (NaN allowed), their NaN count and metadata."""

    scores: dict[str, float]
    num_nan: int
    meta: dict[str, Any] = field(default_factory=dict)
    samples: dict[str, list[float]] | None = None

    @classmethod
    def from_scores(cls, scores: Mapping[str, float], meta: dict[str, Any] | None = None,
                    samples: dict[str, list[float]] | None = None) -> "MethodOutput":
        """An output whose ``num_nan`` is counted from ``scores`` (non-finite scores become NaN)."""
        clean = {k: (float(v) if v is not None and math.isfinite(float(v)) else math.nan) for k, v in scores.items()}
        return cls(scores=clean, num_nan=sum(1 for v in clean.values() if math.isnan(v)), meta=dict(meta or {}),
                   samples=samples)


@dataclass(frozen=True)
class MethodSpec:
    """One registered method."""

    name: str
    family: str
    targets: tuple[str, ...]
    modality: str
    needs: str
    version: str
    description: str
    params: Mapping[str, Any]
    run: Callable[[MethodContext], MethodOutput]
    reads_labels: bool = False

    def supports(self, target: str) -> bool:
        """Whether a run for target ``q`` or ``v`` makes sense (ranking methods run as target ``q``)."""
        return target in self.targets or (target == "q" and "ranking" in self.targets)


_REGISTRY: dict[str, MethodSpec] = {}
_LOADED = False


def method(name: str, *, family: str, targets: tuple[str, ...], modality: str, needs: str, version: str = "1",
           description: str = "", params: Mapping[str, Any] | None = None, reads_labels: bool = False
           ) -> Callable[[Callable[[MethodContext], MethodOutput]], Callable[[MethodContext], MethodOutput]]:
    """Register the decorated function as the ``run`` of method ``name``."""
    if family not in FAMILY_SLUGS:
        raise ValueError(f"method {name}: unknown family {family!r}; expected one of {sorted(FAMILY_SLUGS)}")
    if not targets or not set(targets) <= set(TARGETS):
        raise ValueError(f"method {name}: targets {targets!r} must be a non-empty subset of {TARGETS}")
    if modality not in MODALITIES:
        raise ValueError(f"method {name}: modality {modality!r} not in {MODALITIES}")
    if needs not in NEEDS:
        raise ValueError(f"method {name}: needs {needs!r} not in {NEEDS}")

    def register(run: Callable[[MethodContext], MethodOutput]) -> Callable[[MethodContext], MethodOutput]:
        if name in _REGISTRY and _REGISTRY[name].run is not run:
            raise ValueError(f"method {name!r} is registered twice")
        _REGISTRY[name] = MethodSpec(name=name, family=family, targets=tuple(targets), modality=modality, needs=needs,
                                     version=version, description=description, params=dict(params or {}), run=run,
                                     reads_labels=reads_labels)
        return run

    return register


def _load_builtins() -> None:
    """Import every module of the :mod:`qval.methods` package once (each registers its methods)."""
    global _LOADED
    if _LOADED:
        return
    package = importlib.import_module("qval.methods")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        importlib.import_module(f"qval.methods.{info.name}")
    _LOADED = True


def get_method(name: str) -> MethodSpec:
    """The registered method ``name``; :class:`MethodError` naming the known ones otherwise."""
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise MethodError(f"unknown method {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def all_methods() -> list[MethodSpec]:
    """Every registered method, by family (in :data:`qval.families.ALL` order) then name."""
    from qval.families import ALL

    _load_builtins()
    order = {f.slug: i for i, f in enumerate(ALL)}
    return sorted(_REGISTRY.values(), key=lambda s: (order.get(s.family, len(order)), s.name))


CHAT_NEEDS = frozenset({"chat-llm", "chat-llm-logprobs"})
"""The ``needs`` of a method that asks a chat model (a backbone served over the OpenAI-compatible API)."""


def chat_methods() -> list[str]:
    """Every text method that asks a chat model (:data:`CHAT_NEEDS`), in :func:`all_methods`' order: the methods of
    the LLM reference rows and of a GPU campaign (the image methods need encoder weights)."""
    return [m.name for m in all_methods() if m.modality == "text" and m.needs in CHAT_NEEDS]

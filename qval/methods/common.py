"""What the prompted methods share: opening the backbone for a run and the run's metadata.  Django-free."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from qval.methods import context
from qval.methods.llm import DEFAULT_CONCURRENCY, LLMClient, open_backbone
from qval.methods.registry import MethodContext, MethodError, MethodSpec


@contextlib.contextmanager
def llm_for(ctx: MethodContext) -> Iterator[LLMClient]:
    """The run's client: ``ctx.backbone`` with the run's cache (``ctx.cache_dir/llm``) and concurrency.

    ``ctx.options``: ``concurrency`` (requests at once), ``model`` (the served model's name,
    default: the first the server lists), ``backbone_identity`` (the model's name in cache keys,
    e.g. ``NAME@checkpoint-hash`` when a caller serves a checkpoint itself) and ``serving`` (how a checkpoint
    served here is served: :func:`qval.methods.llm.method_backbone`).
    """
    cache = ctx.cache_dir / "llm" if ctx.cache_dir else None
    with open_backbone(ctx.backbone, cache_dir=cache, concurrency=int(ctx.options.get("concurrency", DEFAULT_CONCURRENCY)),
                       model=ctx.options.get("model"), identity=ctx.options.get("backbone_identity"),
                       serving=ctx.options.get("serving")) as client:
        ctx.meter = client
        yield client


def env_of(ctx: MethodContext) -> context.EnvText:
    """The method context texts of the run's environment."""
    try:
        return context.env_text(ctx.dataset.manifest.environment)
    except context.PromptError as exc:
        raise MethodError(str(exc)) from exc


def sampling(spec: MethodSpec, ctx: MethodContext) -> dict[str, Any]:
    """The decoding parameters of a run (the method's params, overridden by ``ctx.options``)."""
    return {name: ctx.option(spec, name) for name in ("temperature", "top_p", "max_tokens")}


def run_meta(spec: MethodSpec, ctx: MethodContext, client: LLMClient, **extra: Any) -> dict[str, Any]:
    """The metadata every prompted run records: versions, prompt hash, backbone, sampling, seed and usage."""
    return {
        "method": spec.name, "method_version": spec.version, "prompt_version": context.PROMPT_VERSION,
        "prompt_hash": context.prompt_hash(), "backbone": client.identity, "model": client.model,
        "params": {**dict(spec.params), **{k: v for k, v in ctx.options.items() if k in spec.params}},
        "seed": ctx.seed, "requests": client.requests, "cache_hits": client.cache_hits, "failed_points": client.failures,
        "prompt_tokens": client.prompt_tokens, "completion_tokens": client.completion_tokens, **extra,
    }


def require_labels(ctx: MethodContext, spec: MethodSpec) -> dict[str, float]:
    """The Q labels of the run's split (methods whose teacher reads them); :class:`MethodError` when hidden."""
    labels = ctx.dataset.q_labels
    missing = [c.id for s in ctx.points for c in s.candidates if c.id not in labels]
    if missing:
        raise MethodError(f"{spec.name} reads the split's Q labels (teacher evidence), but {len(missing)} candidates "
                          f"have none (e.g. {missing[0]}); only the platform runs it on hidden-label splits")
    return labels

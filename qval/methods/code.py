"""Code family: the model writes a ``signal_function``; the sandbox runs it on every point.

* ``codegen``: ``samples`` (16) functions generated independently (seeds ``seed`` …); each is
  validated (:func:`qval.methods.sandbox.validate`) and run on every point in the sandbox.  The
  output has one sample per function (an invalid one is all NaN), so the site reports every
  function's own correlation and the mean's.
* ``codegen-avg``: the same functions (same requests, so answered from the cache after a
  ``codegen`` run); the score is the mean over the functions that gave a finite value.
* ``eureka``: ``iterations`` (16) rounds of ``samples`` (8) functions; each round's functions
  run on ``judge_points`` (8) held-out points (drawn by ``seed``), an LLM judge (the same
  backbone) picks the best from their values, and the winner with the judge's remark is
  shown in the next round's prompt.  The last winner is run on every point.

Generated code never runs in this process: only in :mod:`qval.methods.sandbox`.  Django-free.
"""

from __future__ import annotations

import random
import re
from typing import Any

from qval.methods import context, parsing, sandbox
from qval.methods.common import env_of, llm_for, run_meta, sampling
from qval.methods.context import Point
from qval.methods.llm import LLMClient, LLMError
from qval.methods.registry import MethodContext, MethodOutput, MethodSpec, get_method, method

_GEN = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 1024, "call_timeout_s": 2.0}
NUM_EXAMPLES = 3


def signature(target: str) -> tuple[str, int]:
    """The required signature text and arity for a target."""
    if target == "q":
        return "signal_function(state: str, action: str, next_state: str) -> float", 3
    return "signal_function(state: str) -> float", 1


def inputs_of(points: list[Point]) -> list[tuple[str, ...]]:
    """The arguments ``signal_function`` gets for each point."""
    return [(p.state.observation, p.candidate.action, p.candidate.next_state) if p.candidate else (p.state.observation,)
            for p in points]


def _prompt(ctx: MethodContext, points: list[Point], extra: str = "") -> list[dict[str, str]]:
    env = env_of(ctx)
    examples = "\n\n".join(f"Example {i}:\n" + "\n".join(f"{name}: {value!r}" for name, value in zip(
        ("state", "action", "next_state"), args)) for i, args in enumerate(inputs_of(points[:NUM_EXAMPLES]), 1))
    system = context.render("codegen_system", value_definition=context.value_definition(ctx.target),
                            environment=context.environment_block(env))
    user = context.render("codegen_user", quantity=context.quantity(ctx.target), signature=signature(ctx.target)[0],
                          modules=", ".join(sandbox.ALLOWED_MODULES), examples=examples)
    return [{"role": "system", "content": system}, {"role": "user", "content": extra + user}]


def generate(llm: LLMClient, spec: MethodSpec, ctx: MethodContext, messages: list[dict[str, str]], n: int,
             seed: int) -> tuple[list[str | None], list[str]]:
    """``n`` generated functions (None where the reply had no valid one) and the reasons for the invalid ones."""
    params = sampling(spec, ctx)
    arity = signature(ctx.target)[1]
    replies = llm.map(lambda k: llm.chat(messages, seed=seed + k, **params).text, list(range(n)),
                      on_error=lambda k: "")
    sources: list[str | None] = []
    problems = []
    for reply in replies:
        code = sandbox.extract_code(reply)
        problem = "no code block" if code is None else sandbox.validate(code, arity)
        sources.append(code if problem is None else None)
        if problem:
            problems.append(problem)
    return sources, problems


def run_valid(sources: list[str | None], inputs: list[tuple[str, ...]], timeout: float) -> list[list[float]]:
    """Every source's scores on ``inputs`` (all NaN for a None source), the valid ones run in one sandbox."""
    valid = [s for s in sources if s is not None]
    results = iter(sandbox.run_functions(valid, inputs, call_timeout_s=timeout))
    return [next(results) if s is not None else [float("nan")] * len(inputs) for s in sources]


def _codegen(name: str, ctx: MethodContext) -> tuple[MethodSpec, list[Point], list[list[float]], dict[str, Any]]:
    spec = get_method(name)
    points = context.points_of(ctx.points, ctx.target)
    with llm_for(ctx) as llm:
        sources, problems = generate(llm, spec, ctx, _prompt(ctx, points), int(ctx.option(spec, "samples")), ctx.seed)
        ctx.progress(0, len(points))
        rows = run_valid(sources, inputs_of(points), float(ctx.option(spec, "call_timeout_s")))
        ctx.progress(len(points), len(points))
        meta = run_meta(spec, ctx, llm, valid_functions=sum(s is not None for s in sources), invalid_reasons=problems)
    return spec, points, rows, meta


@method("codegen", family="code", targets=("q", "v"), modality="text", needs="chat-llm",
        description="16 generated signal_functions run in the sandbox; one sample per function.",
        params={**_GEN, "samples": 16})
def codegen(ctx: MethodContext) -> MethodOutput:
    """``codegen``."""
    _, points, rows, meta = _codegen("codegen", ctx)
    samples = {p.id: [row[i] for row in rows] for i, p in enumerate(points)}
    return MethodOutput.from_scores({k: parsing.mean(v) for k, v in samples.items()}, meta, samples=samples)


@method("codegen-avg", family="code", targets=("q", "v"), modality="text", needs="chat-llm",
        description="The codegen functions' mean prediction per point.", params={**_GEN, "samples": 16})
def codegen_avg(ctx: MethodContext) -> MethodOutput:
    """``codegen-avg``."""
    _, points, rows, meta = _codegen("codegen-avg", ctx)
    return MethodOutput.from_scores({p.id: parsing.mean([row[i] for row in rows]) for i, p in enumerate(points)}, meta)


def parse_best(reply: str, n: int) -> int | None:
    """The 0-based candidate in the last ``<best>k</best>`` (1 ≤ k ≤ n), or None."""
    found = re.findall(r"<best>\s*(\d+)\s*</best>", reply)
    return int(found[-1]) - 1 if found and 1 <= int(found[-1]) <= n else None


@method("eureka", family="code", targets=("q", "v"), modality="text", needs="chat-llm",
        description="Iterative code search: rounds of generated functions judged by the LLM on held-out points.",
        params={**_GEN, "iterations": 16, "samples": 8, "judge_points": 8})
def eureka(ctx: MethodContext) -> MethodOutput:
    """``eureka``."""
    spec = get_method("eureka")
    env = env_of(ctx)
    points = context.points_of(ctx.points, ctx.target)
    iterations, n = int(ctx.option(spec, "iterations")), int(ctx.option(spec, "samples"))
    timeout = float(ctx.option(spec, "call_timeout_s"))
    judged = random.Random(f"{ctx.seed}/eureka/judge").sample(points, min(int(ctx.option(spec, "judge_points")), len(points)))
    judge_inputs = inputs_of(judged)
    best: tuple[str, list[float], str] | None = None
    history = []
    with llm_for(ctx) as llm:
        for it in range(1, iterations + 1):
            extra = context.render("eureka_iteration", iteration=it, total=iterations) + "\n\n"
            if best is not None:
                extra += context.render("eureka_feedback", best_code=best[0],
                                        best_values=", ".join(f"{v:.4g}" for v in best[1]), remark=best[2]) + "\n\n"
            sources, _ = generate(llm, spec, ctx, _prompt(ctx, points, extra), n, ctx.seed + 1000 * it)
            rows = run_valid(sources, judge_inputs, timeout)
            valid = [i for i, s in enumerate(sources) if s is not None]
            if valid:
                listing = "\n".join(f"Candidate {j}: " + ", ".join(f"{v:.4g}" for v in rows[i])
                                    for j, i in enumerate(valid, 1))
                shown = "\n\n".join(f"Datapoint {k}:\n{context.point_text(env, p.state, p.candidate)}"
                                    for k, p in enumerate(judged, 1))
                try:
                    judgement = llm.chat([{"role": "user", "content": context.render(
                        "eureka_judge", value_definition=context.value_definition(ctx.target),
                        environment=context.environment_block(env), n_points=len(judged),
                        quantity=context.quantity(ctx.target), points=shown, candidates=listing)}],
                        seed=ctx.seed + it, max_tokens=256, temperature=0.0).text
                except LLMError:
                    judgement = ""
                pick = parse_best(judgement, len(valid))
                chosen = valid[pick if pick is not None else 0]
                remark = re.sub(r"<best>.*?</best>", "", judgement, flags=re.S).strip()[:300] or "(none)"
                best = (sources[chosen] or "", rows[chosen], remark)
                history.append({"iteration": it, "valid": len(valid), "judge_pick": None if pick is None else pick + 1})
            else:
                history.append({"iteration": it, "valid": 0, "judge_pick": None})
            ctx.progress(it, iterations + 1)
        final = run_valid([best[0] if best else None], inputs_of(points), timeout)[0]
        ctx.progress(iterations + 1, iterations + 1)
        meta = run_meta(spec, ctx, llm, rounds=history, final_code=best[0] if best else None)
    return MethodOutput.from_scores({p.id: v for p, v in zip(points, final)}, meta)

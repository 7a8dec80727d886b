"""Direct family: the model states a value.

* ``direct-single``: one prompt per point, the value in ``<answer>`` (reasoning may come first).
* ``direct-batched``: 4 points per prompt, values in ``<answer_1>`` … ``<answer_4>``.
* ``direct-sequential``: up to 8 points of one trajectory (in step order) as successive user
  turns of one conversation, one ``<answer>`` per turn, earlier answers kept in the chat.
* ``direct-16``: the ``direct-single`` prompt sampled 16 times (seeds ``seed`` … ``seed + 15``);
  the mean of the parsable answers.
* ``gvl``: all points of one trajectory shown in an order shuffled by ``seed`` without time
  steps, one value per transition in numbered tags, mapped back to the points.

An answer that does not parse is NaN (counted).  Django-free.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

from qval.methods import context, parsing
from qval.methods.common import env_of, llm_for, run_meta, sampling
from qval.methods.context import Point
from qval.methods.registry import MethodContext, MethodOutput, get_method, method

_DECODING = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 256}


def _system(env: context.EnvText, target: str) -> str:
    return context.render("direct_system", value_definition=context.value_definition(target),
                          action_clause=", the action taken and the state it led to" if target == "q" else "",
                          quantity=context.quantity(target), environment=context.environment_block(env))


def _single_messages(env: context.EnvText, target: str, point: Point) -> list[dict[str, str]]:
    return [{"role": "system", "content": _system(env, target)},
            {"role": "user", "content": context.render("direct_user", quantity=context.quantity(target),
                                                       point=context.point_text(env, point.state, point.candidate))}]


def _pointwise(name: str, ctx: MethodContext, samples: int) -> MethodOutput:
    spec = get_method(name)
    env, points, params = env_of(ctx), context.points_of(ctx.points, ctx.target), sampling(spec, ctx)
    # every sample is a request of its own: those of one point (the same prompt) go out together, so the server
    # reads the prompt once for all of them, and a failed request loses its sample alone (NaN, not unparsable)
    prompts = [_single_messages(env, ctx.target, point) for point in points]
    jobs = [(messages, k) for messages in prompts for k in range(samples)]
    with llm_for(ctx) as llm:
        def answer(job: tuple[list[dict[str, str]], int]) -> float | None:
            messages, k = job
            return parsing.parse_answer(llm.chat(messages, seed=ctx.seed + k, **params).text)

        values = llm.map(answer, jobs, ctx.progress, on_error=lambda job: None)
        unparsed = sum(1 for v in values if v is not None and math.isnan(v))
        scores = {point.id: parsing.mean([math.nan if v is None else v for v in values[i * samples:(i + 1) * samples]])
                  for i, point in enumerate(points)}
        return MethodOutput.from_scores(scores, run_meta(spec, ctx, llm, unparsable_answers=unparsed))


@method("direct-single", family="direct", targets=("q", "v"), modality="text", needs="chat-llm",
        description="One prompt per point; the value inside <answer> tags.", params=_DECODING)
def direct_single(ctx: MethodContext) -> MethodOutput:
    """``direct-single``."""
    return _pointwise("direct-single", ctx, samples=1)


@method("direct-16", family="direct", targets=("q", "v"), modality="text", needs="chat-llm",
        description="The direct-single prompt sampled 16 times; the mean of the parsable answers.",
        params={**_DECODING, "temperature": 1.0, "samples": 16})
def direct_16(ctx: MethodContext) -> MethodOutput:
    """``direct-16``."""
    return _pointwise("direct-16", ctx, samples=int(ctx.option(get_method("direct-16"), "samples")))


def _chunks(points: list[Point], size: int) -> list[list[Point]]:
    return [points[i:i + size] for i in range(0, len(points), size)]


@method("direct-batched", family="direct", targets=("q", "v"), modality="text", needs="chat-llm",
        description="Four points per prompt, one <answer_i> tag each.", params={**_DECODING, "batch_size": 4})
def direct_batched(ctx: MethodContext) -> MethodOutput:
    """``direct-batched``."""
    spec = get_method("direct-batched")
    env, params = env_of(ctx), sampling(spec, ctx)
    batches = _chunks(context.points_of(ctx.points, ctx.target), int(ctx.option(spec, "batch_size")))
    quantity = context.quantity(ctx.target)
    with llm_for(ctx) as llm:
        def score(batch: list[Point]) -> list[float]:
            datapoints = "\n\n".join(f"## Datapoint {i}\n{context.point_text(env, p.state, p.candidate)}"
                                     for i, p in enumerate(batch, 1))
            user = context.render("direct_batched_user", quantity=quantity, n=len(batch), datapoints=datapoints,
                                  tags=context.answer_tags(len(batch)))
            reply = llm.chat([{"role": "system", "content": _system(env, ctx.target)},
                              {"role": "user", "content": user}], seed=ctx.seed, **params)
            return parsing.parse_numbered_answers(reply.text, len(batch))

        results = llm.map(score, batches, ctx.progress, on_error=lambda b: [math.nan] * len(b))
        scores = {p.id: v for batch, values in zip(batches, results) for p, v in zip(batch, values)}
        return MethodOutput.from_scores(scores, run_meta(spec, ctx, llm, prompts=len(batches)))


def by_trajectory(points: list[Point]) -> list[list[Point]]:
    """Points grouped by trajectory (in first-seen order), each group in step order."""
    groups: dict[int, list[Point]] = defaultdict(list)
    for p in points:
        groups[p.state.trajectory].append(p)
    return [sorted(g, key=lambda p: p.state.step) for g in groups.values()]


@method("direct-sequential", family="direct", targets=("q", "v"), modality="text", needs="chat-llm",
        description="Up to eight points of one trajectory as successive turns of one chat, one answer per turn.",
        params={**_DECODING, "batch_size": 8})
def direct_sequential(ctx: MethodContext) -> MethodOutput:
    """``direct-sequential``."""
    spec = get_method("direct-sequential")
    env, params = env_of(ctx), sampling(spec, ctx)
    size = int(ctx.option(spec, "batch_size"))
    batches = [chunk for group in by_trajectory(context.points_of(ctx.points, ctx.target))
               for chunk in _chunks(group, size)]
    quantity = context.quantity(ctx.target)
    with llm_for(ctx) as llm:
        def score(batch: list[Point]) -> list[float]:
            messages = [{"role": "system", "content": _system(env, ctx.target)}]
            values = []
            for i, p in enumerate(batch, 1):
                messages.append({"role": "user", "content": context.render(
                    "direct_sequential_user", i=i, n=len(batch), quantity=quantity,
                    point=context.point_text(env, p.state, p.candidate))})
                reply = llm.chat(messages, seed=ctx.seed, **params).text
                messages.append({"role": "assistant", "content": reply})
                values.append(parsing.parse_answer(reply))
            return values

        results = llm.map(score, batches, ctx.progress, on_error=lambda b: [math.nan] * len(b))
        scores = {p.id: v for batch, values in zip(batches, results) for p, v in zip(batch, values)}
        return MethodOutput.from_scores(scores, run_meta(spec, ctx, llm, conversations=len(batches)))


def shuffled(points: list[Point], seed: int) -> list[Point]:
    """``points`` in the order gvl shows them: shuffled by ``random.Random(f"{seed}/gvl/{first id}")``."""
    order = list(points)
    random.Random(f"{seed}/gvl/{points[0].id}").shuffle(order)
    return order


@method("gvl", family="direct", targets=("q", "v"), modality="text", needs="chat-llm",
        description="A whole trajectory's transitions shown shuffled; one value each, mapped back.",
        params={**_DECODING, "max_tokens": 512, "max_transitions": 32})
def gvl(ctx: MethodContext) -> MethodOutput:
    """``gvl``."""
    spec = get_method("gvl")
    env, params = env_of(ctx), sampling(spec, ctx)
    size = int(ctx.option(spec, "max_transitions"))
    groups = [chunk for group in by_trajectory(context.points_of(ctx.points, ctx.target)) for chunk in _chunks(group, size)]
    with llm_for(ctx) as llm:
        def score(group: list[Point]) -> list[float]:
            shown = shuffled(group, ctx.seed)
            transitions = "\n\n".join(
                f"### Transition {i}\n{context.point_text(env, p.state, p.candidate)}" for i, p in enumerate(shown, 1))
            system = context.render("gvl_system", value_definition=context.value_definition(ctx.target),
                                    quantity=context.quantity(ctx.target), environment=context.environment_block(env))
            user = context.render("gvl_user", task=group[0].state.task, transitions=transitions, n=len(shown),
                                  tags=context.answer_tags(len(shown)))
            reply = llm.chat([{"role": "system", "content": system}, {"role": "user", "content": user}],
                             seed=ctx.seed, **params)
            by_id = dict(zip((p.id for p in shown), parsing.parse_numbered_answers(reply.text, len(shown))))
            return [by_id[p.id] for p in group]

        results = llm.map(score, groups, ctx.progress, on_error=lambda g: [math.nan] * len(g))
        scores = {p.id: v for group, values in zip(groups, results) for p, v in zip(group, values)}
        return MethodOutput.from_scores(scores, run_meta(spec, ctx, llm, trajectories=len(groups)))

"""Intrinsic family: the model's own yes/no belief, read from logprobs.

Both methods score the answers ``Yes`` and ``No`` as the assistant's reply (the sum of their
token logprobs, :meth:`~qval.methods.llm.LLMClient.continuation_logprobs`) and normalise:
``log p(yes) = lp(Yes) − lse(lp(Yes), lp(No))``.

* ``verifier``: one yes/no question per criterion of the environment (its definition in the
  prompt); the point's score is the mean of the criteria's ``log p(yes)``.
* ``Δbelief``: ``log p(success | post) − log p(success | pre)``: the pre context shows the
  state, the post context also the candidate action and its resulting state.  Every candidate
  of a state is scored (pointwise Q on the actor's, and the ranking metrics).  Django-free.
"""

from __future__ import annotations

import math

from qval.methods import context, parsing
from qval.methods.common import env_of, llm_for, run_meta
from qval.methods.context import Point
from qval.methods.llm import LLMClient, Messages
from qval.methods.registry import MethodContext, MethodOutput, get_method, method


def log_p_yes(llm: LLMClient, messages: Messages) -> float:
    """Normalised log-probability of answering Yes to the chat ``messages``."""
    return parsing.log_yes_probability(llm.continuation_logprobs(messages, "Yes"),
                                       llm.continuation_logprobs(messages, "No"))


@method("verifier", family="intrinsic", targets=("q", "v"), modality="text", needs="chat-llm-logprobs",
        description="Yes/no logprob readout per environment criterion, averaged.")
def verifier(ctx: MethodContext) -> MethodOutput:
    """``verifier``."""
    spec = get_method("verifier")
    env = env_of(ctx)
    points = context.points_of(ctx.points, ctx.target)
    system = context.render("verifier_system", value_definition=context.value_definition(ctx.target),
                            environment=context.environment_block(env))
    with llm_for(ctx) as llm:
        def score(point: Point) -> float:
            text = context.point_text(env, point.state, point.candidate)
            return parsing.mean([log_p_yes(llm, [
                {"role": "system", "content": system},
                {"role": "user", "content": context.render("verifier_user", criterion_name=c["name"],
                                                           criterion_description=c["description"], point=text,
                                                           question=c["question"])}]) for c in env.criteria])

        results = llm.map(score, points, ctx.progress, on_error=lambda p: math.nan)
        return MethodOutput.from_scores({p.id: r for p, r in zip(points, results)},
                                        run_meta(spec, ctx, llm, criteria=[c["name"] for c in env.criteria]))


@method("Δbelief", family="intrinsic", targets=("q", "ranking"), modality="text", needs="chat-llm-logprobs",
        description="Change of the model's log-belief in eventual success once the action's outcome is shown.")
def delta_belief(ctx: MethodContext) -> MethodOutput:
    """``Δbelief``."""
    spec = get_method("Δbelief")
    env = env_of(ctx)
    system = context.render("belief_system", value_definition=context.value_definition("q"),
                            environment=context.environment_block(env))
    with llm_for(ctx) as llm:
        def score(state) -> dict[str, float]:  # type: ignore[no-untyped-def]
            pre = log_p_yes(llm, [{"role": "system", "content": system}, {"role": "user", "content": context.render(
                "belief_pre", point=context.point_text(env, state, None))}])
            return {c.id: log_p_yes(llm, [{"role": "system", "content": system}, {"role": "user", "content": context.render(
                "belief_post", point=context.point_text(env, state, c))}]) - pre for c in state.candidates}

        results = llm.map(score, ctx.points, ctx.progress,
                          on_error=lambda s: {c.id: math.nan for c in s.candidates})
        return MethodOutput.from_scores({k: v for r in results for k, v in r.items()}, run_meta(spec, ctx, llm))

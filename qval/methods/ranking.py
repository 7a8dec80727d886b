"""Ranking family: ``ranking`` asks for the candidates' order from best to worst.

One prompt per state lists its K candidates (1…K) with their resulting states; the last
comma-separated permutation of 1…K in the reply is the order.  A candidate at position r
(0 = best) scores ``K − r``, so higher is better and the per-state Spearman is that of the
permutation.  A reply without a valid permutation leaves the state's candidates NaN
(``meta["unparsable_states"]`` counts them).  Django-free.
"""

from __future__ import annotations

import math

from qval import schema
from qval.methods import context, parsing
from qval.methods.common import env_of, llm_for, run_meta, sampling
from qval.methods.registry import MethodContext, MethodOutput, get_method, method


def permutation_scores(order: list[int] | None, k: int) -> list[float]:
    """Score per candidate index from a 0-based best-to-worst order (NaN for all when None)."""
    if order is None:
        return [math.nan] * k
    scores = [math.nan] * k
    for position, index in enumerate(order):
        scores[index] = float(k - position)
    return scores


@method("ranking", family="ranking", targets=("ranking",), modality="text", needs="chat-llm",
        description="The candidates ranked best to worst in one prompt per state; last valid permutation parsed.",
        params={"temperature": 0.0, "top_p": 1.0, "max_tokens": 256})
def ranking(ctx: MethodContext) -> MethodOutput:
    """``ranking``."""
    spec = get_method("ranking")
    env, params = env_of(ctx), sampling(spec, ctx)
    with llm_for(ctx) as llm:
        def score(state: schema.State) -> list[float]:
            k = len(state.candidates)
            candidates = "\n\n".join(f"[Candidate {i}]\n{c.action}\n[Resulting state {i}]\n{c.next_state}"
                                     for i, c in enumerate(state.candidates, 1))
            example = ", ".join(str(i) for i in range(k, 0, -1))
            system = context.render("ranking_system", value_definition=context.value_definition("q"),
                                    environment=context.environment_block(env), example=example)
            user = context.render("ranking_user", k=k, point=context.point_text(env, state, None), candidates=candidates)
            reply = llm.chat([{"role": "system", "content": system}, {"role": "user", "content": user}],
                             seed=ctx.seed, **params)
            return permutation_scores(parsing.parse_permutation(reply.text, k), k)

        results = llm.map(score, ctx.points, ctx.progress, on_error=lambda s: [math.nan] * len(s.candidates))
        scores = {c.id: v for state, values in zip(ctx.points, results) for c, v in zip(state.candidates, values)}
        unparsable = sum(1 for values in results if values and math.isnan(values[0]))
        return MethodOutput.from_scores(scores, run_meta(spec, ctx, llm, unparsable_states=unparsable))

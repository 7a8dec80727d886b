"""Self-distillation family: how much likelier the action becomes once its outcome is known.

Each candidate action ``a`` of a state is scored as the assistant's reply in two chats on the
same backbone: a *student* that sees the state only and a *teacher* that also sees evidence
about ``a``.  The score is ``mean_t lp_teacher(a_t) − mean_t lp_student(a_t)`` (the mean over
the action's tokens).  Every candidate is scored (ranking metrics; the actor's gives pointwise Q).

* ``sdpo``: the evidence is the resulting state and a good/bad hint: *good* when the
  candidate's reference Q label exceeds the median of its state's candidates, else *bad*.
* ``sdpo-gt``: the resulting state and a summary of the reference rollout from it: the stored
  Q label, whether it reached success (label > 0; rewards are 1 at success only) and the
  remaining steps implied by the discount (``1 + log Q / log γ``).  Our datasets do not store the
  expert's next action, so the summary says it is unknown.

Both read the split's labels, so only the platform runs them on hidden-label splits; the
evidence is built in memory, sent only to the backbone, never logged and never part of the
output or its metadata.  Django-free.
"""

from __future__ import annotations

import math
import statistics

from qval import schema
from qval.methods import context, parsing
from qval.methods.common import env_of, llm_for, require_labels, run_meta
from qval.methods.registry import MethodContext, MethodOutput, get_method, method


def token_delta(teacher: list[float], student: list[float]) -> float:
    """Mean teacher token logprob minus mean student token logprob (NaN when either is empty)."""
    return parsing.mean(teacher) - parsing.mean(student) if teacher and student else math.nan


def _hint(labels: dict[str, float], state: schema.State, cand: schema.Candidate) -> str:
    median = statistics.median(labels[c.id] for c in state.candidates)
    return ("This action was judged good: it does better than most actions here." if labels[cand.id] > median
            else "This action was judged bad: it does no better than most actions here.")


def _rollout_summary(labels: dict[str, float], discount: float, cand: schema.Candidate, env: context.EnvText) -> str:
    value = labels[cand.id]
    success = value > 0
    steps = "unknown"
    if success and 0 < discount < 1:
        steps = str(max(1, round(1 + math.log(value) / math.log(discount))))
    elif success:
        steps = "unknown (undiscounted)"
    return (f"Next expert {env.action_label} after this action: unknown (not stored)\n"
            f"Reference rollout {env.outcome_label}: {'yes' if success else 'no'}\n"
            f"Steps the reference rollout needed to succeed: {steps if success else 'did not succeed'}\n"
            f"Stored reference value of the action: {value:.4g}")


def _sdpo(name: str, ctx: MethodContext, oracle: bool) -> MethodOutput:
    spec = get_method(name)
    env = env_of(ctx)
    labels = require_labels(ctx, spec)
    discount = float(ctx.dataset.manifest.labelling.get("discount", 1.0))
    system = context.render("sdpo_system", value_definition=context.value_definition("q"),
                            gt_clause=", and a summary of a reference rollout from there" if oracle else "",
                            environment=context.environment_block(env))
    with llm_for(ctx) as llm:
        def score(state: schema.State) -> dict[str, float]:
            point = context.point_text(env, state, None)
            student = [{"role": "system", "content": system},
                       {"role": "user", "content": context.render("sdpo_student", point=point)}]
            out = {}
            for cand in state.candidates:
                evidence = f"Resulting state:\n{cand.next_state}\n\n" + (
                    _rollout_summary(labels, discount, cand, env) if oracle else _hint(labels, state, cand))
                teacher = [{"role": "system", "content": system},
                           {"role": "user", "content": context.render("sdpo_teacher", point=point, action=cand.action,
                                                                      feedback=evidence)}]
                out[cand.id] = token_delta(llm.continuation_logprobs(teacher, cand.action),
                                           llm.continuation_logprobs(student, cand.action))
            return out

        results = llm.map(score, ctx.points, ctx.progress,
                          on_error=lambda s: {c.id: math.nan for c in s.candidates})
        return MethodOutput.from_scores({k: v for r in results for k, v in r.items()}, run_meta(spec, ctx, llm))


@method("sdpo", family="self-distillation", targets=("ranking",), modality="text", needs="chat-llm-logprobs",
        reads_labels=True, description="Teacher (next state + good/bad hint from the labels) minus student mean token logprob of the action.")
def sdpo(ctx: MethodContext) -> MethodOutput:
    """``sdpo``."""
    return _sdpo("sdpo", ctx, oracle=False)


@method("sdpo-gt", family="self-distillation", targets=("ranking",), modality="text", needs="chat-llm-logprobs",
        reads_labels=True, description="sdpo with an oracle teacher: next state and a summary of the stored reference rollout.")
def sdpo_gt(ctx: MethodContext) -> MethodOutput:
    """``sdpo-gt``."""
    return _sdpo("sdpo-gt", ctx, oracle=True)

"""Where a submission's job waits: its message priority, from who runs it and what it costs.

A user's job goes first (:data:`jobs.services.USER_PRIORITY`), the platform's own runs behind every user's job
(:data:`jobs.services.PLATFORM_PRIORITY`), and the platform's costliest runs behind those
(:data:`jobs.services.COSTLY_PRIORITY`): on one gpu worker filling a fresh site (most of a day on a CPU), every
board's cheap LLM rows then come before any board's costly ones, whichever dataset was built first.
"""

from __future__ import annotations

from jobs.services import COSTLY_PRIORITY, PLATFORM_PRIORITY, USER_PRIORITY

from .models import Submission

CHAT_REFERENCE_ORDER = ("verifier", "direct-batched", "codegen", "codegen-avg", "direct-single", "gvl", "ranking",
                        "Δbelief", "direct-sequential", "sdpo", "sdpo-gt", "eureka", "direct-16")
"""The order of a dataset's LLM reference rows in the queue: cheapest first, so that while one gpu worker fills a
fresh site each board shows most of its rows soonest.  SmolLM2's CPU seconds per FrozenLake test state on one core
(``benchmarks/smollm2_cost.py``; ``benchmarks/README.md``): 1.4 to 7.8 for the per-state methods in this order,
``codegen`` 259 s a run (about 2.7 a state; ``codegen-avg`` then reads its functions from the response cache),
``eureka`` 2,142 s a run (22.5 a state), ``direct-16`` 39.  A method not listed goes last."""
COSTLY_METHODS = frozenset({"eureka", "direct-16"})
"""The methods whose runs go behind the platform's other runs (:data:`jobs.services.COSTLY_PRIORITY`): each costs
more than the other eleven of :data:`CHAT_REFERENCE_ORDER` together (61 of 104 CPU s per FrozenLake test state)."""


def priority(sub: Submission) -> int:
    """The message priority of ``sub``'s job (module docstring): a baseline run is the platform's own."""
    if sub.source != Submission.SOURCE_BASELINE:
        return USER_PRIORITY
    return COSTLY_PRIORITY if sub.method_name in COSTLY_METHODS else PLATFORM_PRIORITY

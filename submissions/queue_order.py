"""Where a submission's job waits and for how long: its message priority, from who runs it and what it costs,
and the work it is expected to take (:func:`expected_work`), by which the status page estimates a queue's time.

A user's job goes first (:data:`jobs.services.USER_PRIORITY`), the platform's own runs behind every user's job
(:data:`jobs.services.PLATFORM_PRIORITY`), and the platform's costliest runs behind those
(:data:`jobs.services.COSTLY_PRIORITY`): on one gpu worker filling a fresh site (most of a day on a CPU), every
board's cheap LLM rows then come before any board's costly ones, whichever dataset was built first.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Count

from jobs.services import COSTLY_PRIORITY, PLATFORM_PRIORITY, USER_PRIORITY, Work
from leaderboard.models import Dataset, State

from .models import Submission

CHAT_REFERENCE_ORDER = ("verifier", "direct-batched", "codegen", "codegen-avg", "direct-single", "gvl", "ranking",
                        "Δbelief", "direct-sequential", "sdpo", "sdpo-gt", "eureka", "direct-16")
"""The order of a dataset's LLM reference rows in the queue: cheapest first, so that while one gpu worker fills a
fresh site each board shows most of its rows soonest (their costs: :data:`CPU_SECONDS`; ``codegen-avg`` reads
``codegen``'s functions from the response cache).  A method not listed goes last."""
CPU_SECONDS: dict[str, tuple[float, float]] = {
    "verifier": (0, 1.4), "direct-batched": (0, 2.2), "codegen": (259, 0), "codegen-avg": (1, 0),
    "direct-single": (0, 3.1), "gvl": (0, 4.6), "ranking": (0, 5.0), "Δbelief": (0, 5.2),
    "direct-sequential": (0, 6.7), "sdpo": (0, 7.2), "sdpo-gt": (0, 7.8), "eureka": (2142, 0), "direct-16": (0, 38.8)}
"""What each chat-model method's run costs: CPU seconds once per run and per test state, SmolLM2-135M-Instruct on
one core of a 2-core machine on FrozenLake (``benchmarks/smollm2_cost.py``, its table in ``benchmarks/README.md``;
``codegen-avg`` after ``codegen``, from the cache).  Another machine, backbone or environment changes the seconds
more than their ratios (the same table on an H200: 7–11 times faster for every method), so the status page uses
them as relative work (:func:`expected_work`), scaled by the seconds per unit the finished and running runs measure
(:func:`jobs.queues.summaries`)."""
COSTLY_METHODS = frozenset({"eureka", "direct-16"})
"""The methods whose runs go behind the platform's other runs (:data:`jobs.services.COSTLY_PRIORITY`): the two cost
more than the other eleven of :data:`CHAT_REFERENCE_ORDER` together (:data:`CPU_SECONDS`: 6,022 CPU s on
FrozenLake's 100 test states against 4,580)."""


def priority(sub: Submission) -> int:
    """The message priority of ``sub``'s job (module docstring): a baseline run is the platform's own."""
    if sub.source != Submission.SOURCE_BASELINE:
        return USER_PRIORITY
    return COSTLY_PRIORITY if sub.method_name in COSTLY_METHODS else PLATFORM_PRIORITY


def expected_work(subs: Sequence[Submission]) -> list[Work | None]:
    """Each of ``subs``' expected :class:`~jobs.services.Work`, in :data:`CPU_SECONDS`' seconds: its method's cost
    once per run plus per state times the states of its split, alike the runs of its method on its dataset's
    environment (ALFWorld's prompts cost a method more than FrozenLake's, and unlike for each method); ``None`` for a
    job not tabled there (a user's job, a method that needs no chat model).  Two queries for all of them."""
    costs = [CPU_SECONDS.get(s.method_name) if s.source == Submission.SOURCE_BASELINE else None for s in subs]
    tabled = [s for s, cost in zip(subs, costs, strict=True) if cost is not None]
    if not tabled:
        return [None] * len(subs)
    datasets = {s.dataset_id for s in tabled}
    counts = {(row["dataset_id"], row["split"]): row["n"] for row in (
        State.objects.filter(dataset_id__in=datasets, split__in={s.split for s in tabled})
        .values("dataset_id", "split").annotate(n=Count("id")))}
    environment = dict(Dataset.objects.filter(pk__in=datasets).values_list("pk", "environment__slug"))
    return [None if cost is None else
            Work(cost[0] + cost[1] * counts.get((sub.dataset_id, sub.split), 0),
                 f"{sub.method_name}@{environment[sub.dataset_id]}")
            for sub, cost in zip(subs, costs, strict=True)]

"""Where a submission's job waits and for how long: its message priority, from who runs it and what it costs,
and the work it is expected to take (:func:`expected_work`), by which the status page estimates a queue's time.

A user's job goes first (:data:`jobs.services.USER_PRIORITY`), the platform's own runs behind every user's job
(:data:`jobs.services.PLATFORM_PRIORITY`), and the platform's costliest runs behind those
(:data:`jobs.services.COSTLY_PRIORITY`): on one gpu worker filling a fresh site (most of a day on a CPU), every
board's cheap LLM rows then come before any board's costly ones, whichever dataset was built first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from django.db.models import Count

from jobs.services import COSTLY_PRIORITY, PLATFORM_PRIORITY, USER_PRIORITY, Work
from leaderboard.models import Dataset, State
from qval.envs import registry

from .models import Submission

READS_AFTER = {"codegen-avg": "codegen"}
"""A method whose run asks the same requests as another's, so that it reads that one's answers from the response
cache: its reference row is queued right after the other's (:func:`cheapest_first`)."""
CPU_SECONDS: dict[str, tuple[float, float]] = {
    "verifier": (0, 1.4), "direct-batched": (0, 2.2), "codegen": (259, 0), "codegen-avg": (1, 0),
    "direct-single": (0, 3.1), "gvl": (0, 4.6), "ranking": (0, 5.0), "Δbelief": (0, 5.2),
    "direct-sequential": (0, 6.7), "sdpo": (0, 7.2), "sdpo-gt": (0, 7.8), "eureka": (2142, 0), "direct-16": (0, 38.8)}
"""What each chat-model method's run costs: CPU seconds once per run and per test state, SmolLM2-135M-Instruct on one
core of a 2-core machine on FrozenLake (``benchmarks/smollm2_cost.py``, its table in ``benchmarks/README.md``;
``codegen-avg`` after ``codegen``, from the cache): the costs on any environment whose entry measured none of its own
(:attr:`qval.envs.entry.EnvironmentEntry.method_cpu_seconds`: ALFWorld's scene and admissible commands cost the nine
per-state methods 5.8 times FrozenLake's grid together, each unlike the others).  Another machine or backbone changes
the seconds more than their ratios (the same table on an H200: 7–11 times faster for every method), so the status
page uses them as relative work (:func:`expected_work`), scaled by the seconds per unit the finished and running runs
measure (:func:`jobs.queues.summaries`)."""
COSTLY_METHODS = frozenset({"eureka", "direct-16"})
"""The methods whose runs go behind the platform's other runs (:data:`jobs.services.COSTLY_PRIORITY`): the two cost
more than the other eleven chat-model methods together (:data:`CPU_SECONDS`: 6,022 CPU s on
FrozenLake's 100 test states against 4,580)."""


def priority(sub: Submission) -> int:
    """The message priority of ``sub``'s job (module docstring): a baseline run is the platform's own."""
    if sub.source != Submission.SOURCE_BASELINE:
        return USER_PRIORITY
    return COSTLY_PRIORITY if sub.method_name in COSTLY_METHODS else PLATFORM_PRIORITY


def cpu_seconds(method: str, environment: str) -> tuple[float, float] | None:
    """``method``'s CPU seconds once per run and per state on ``environment``: as measured on its prompts (its
    registry entry's :attr:`~qval.envs.entry.EnvironmentEntry.method_cpu_seconds`), else :data:`CPU_SECONDS`;
    ``None`` for a method not tabled.  So before any row has run on ALFWorld, the status page weighs its rows as
    they will cost."""
    entry = registry.ENVIRONMENTS.get(environment)
    return (entry.method_cpu_seconds.get(method) if entry else None) or CPU_SECONDS.get(method)


def cheapest_first(methods: Sequence[str], environment: str, states: int) -> list[str]:
    """``methods`` in the order a dataset's LLM reference rows are queued: cheapest first on its ``states`` test
    states of ``environment`` (:func:`cpu_seconds`), so that while one gpu worker fills a fresh site each board
    shows most of its rows soonest (on FrozenLake's 100 states ``verifier`` first; on ALFWorld, where it costs 31
    times as much, ``direct-batched``); a method of :data:`READS_AFTER` right after the one it reads; a method not
    tabled last, in the order given."""
    def cost(name: str) -> float:
        found = cpu_seconds(name, environment)
        return math.inf if found is None else found[0] + found[1] * states

    def key(name: str) -> tuple[float, int]:
        first = READS_AFTER.get(name)
        return (cost(first), 1) if first in methods else (cost(name), 0)

    return sorted(methods, key=key)


def _sent_share(sub: Submission) -> float:
    """The share of ``sub``'s model requests that went to the model rather than the response cache (its run's
    ``requests`` and ``cache_hits``; 1 where it has not recorded them yet): a rerun answered from the cache did
    next to none of its work, and would otherwise measure its method as nearly free."""
    sent, hits = sub.config.get("requests"), sub.config.get("cache_hits")
    if not isinstance(sent, int) or not isinstance(hits, int) or sent + hits == 0:
        return 1.0
    return sent / (sent + hits)


def expected_work(subs: Sequence[Submission]) -> list[Work | None]:
    """Each of ``subs``' expected :class:`~jobs.services.Work`, in CPU seconds (:func:`cpu_seconds` on its
    dataset's environment): its method's cost once per run plus per state times the states of its split, times the
    share of its requests sent to the model (:func:`_sent_share`), alike the runs of its method on that environment
    (ALFWorld's prompts cost a method more than FrozenLake's, and unlike for each method); ``None`` for a job not
    tabled (a user's job, a method that needs no chat model).  Two queries for all of them."""
    baseline = [s for s in subs if s.source == Submission.SOURCE_BASELINE]
    if not baseline:
        return [None] * len(subs)
    datasets = {s.dataset_id for s in baseline}
    counts = {(row["dataset_id"], row["split"]): row["n"] for row in (
        State.objects.filter(dataset_id__in=datasets, split__in={s.split for s in baseline})
        .values("dataset_id", "split").annotate(n=Count("id")))}
    environment = dict(Dataset.objects.filter(pk__in=datasets).values_list("pk", "environment__slug"))
    works: list[Work | None] = []
    for sub in subs:
        env = environment.get(sub.dataset_id, "")
        cost = cpu_seconds(sub.method_name, env) if sub.source == Submission.SOURCE_BASELINE else None
        works.append(None if cost is None else
                     Work((cost[0] + cost[1] * counts.get((sub.dataset_id, sub.split), 0)) * _sent_share(sub),
                          f"{sub.method_name}@{env}"))
    return works

"""Reference Q- and V-values by Max-Value Monte Carlo under an environment's reference policy.

For a state ``s`` (a :class:`~qval.envs.base.Snapshot`) and a candidate action ``a``:

* one **rollout** restores ``s``, forces ``a``, then follows
  :meth:`~qval.envs.base.Environment.reference_action` until the episode is done (terminated
  or out of horizon, which is counted from the start of the episode), and returns the
  discounted return ``sum_k discount**k * r_k`` where ``r_0`` is the forced action's reward;
* ``Q(s, a)`` is the **maximum** over ``num_rollouts`` rollouts (Max-Value Monte Carlo; one
  rollout suffices for a deterministic environment and policy);
* ``V(s)`` is the same without forcing: the reference policy acts from ``s`` itself.

**Shared rollouts.**  For an environment that declares itself deterministic
(:attr:`~qval.envs.base.Environment.deterministic`) and one rollout per label,
:func:`label_state` plays each rollout once and reads everything off it: a candidate's next
state is the state after its forced action on the way, ``V(s)`` is ``Q(s, a)`` (and its end
the same) when the reference action ``a`` is a candidate, and the first rollout starts from
the state the environment is in when the caller says it is ``s`` already.  Every such rollout
takes the same actions from the same state as the separate ones it replaces, so the labels,
next states and end states are the same, for about half the restores.

Only the :class:`~qval.envs.base.Environment` interface is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from qval.envs.base import Environment, Snapshot

AtEnd = Callable[[Environment], Any]
"""Called with the environment in the final state of a rollout (e.g. to render it)."""

AtNext = Callable[[Environment], Any]
"""Called with the environment in a candidate's next state (e.g. to read its observation)."""

AGGREGATION = "max"
"""How the returns of several rollouts are combined (recorded in a manifest)."""


@dataclass(frozen=True)
class StateLabels:
    """The labels of one state: ``q[i]`` is the Q-value of ``candidates[i]``."""

    candidates: tuple[str, ...]
    q: tuple[float, ...]
    v: float
    q_end: tuple[Any, ...] = ()
    """With ``at_end``: its value at the end of each candidate's best rollout (the trajectory end)."""
    v_end: Any = None
    """With ``at_end``: its value at the end of the state's best reference rollout."""
    next: tuple[Any, ...] = ()
    """With ``at_next``: its value in each candidate's next state."""


def rollout(
    env: Environment, snapshot: Snapshot, first_action: str | None, discount: float, at_end: AtEnd | None = None
) -> tuple[float, Any]:
    """Discounted return of one rollout from ``snapshot``, and ``at_end(env)`` in its final state
    (``None`` without ``at_end``).  ``first_action`` is forced first (``None``: the reference policy
    acts from the start)."""
    env.restore(snapshot)
    total, _, end = _play(env, first_action, discount, at_end, None)
    return total, end


def _play(
    env: Environment, first_action: str | None, discount: float, at_end: AtEnd | None, at_next: AtNext | None
) -> tuple[float, Any, Any]:
    """A rollout from the state ``env`` is in: its discounted return, ``at_next(env)`` after the forced
    ``first_action`` and ``at_end(env)`` in its final state (``None`` for a callback not given)."""
    total, weight, after_first = 0.0, 1.0, None
    if first_action is not None:
        total += env.step(first_action).reward
        weight = discount
        after_first = at_next(env) if at_next is not None else None
    while not env.done:
        total += weight * env.step(env.reference_action()).reward
        weight *= discount
    return total, after_first, at_end(env) if at_end is not None else None


def rollout_return(env: Environment, snapshot: Snapshot, first_action: str | None, discount: float) -> float:
    """Discounted return of one rollout from ``snapshot`` (:func:`rollout`)."""
    return rollout(env, snapshot, first_action, discount)[0]


def _best(
    env: Environment, snapshot: Snapshot, action: str | None, discount: float, num_rollouts: int, at_end: AtEnd | None
) -> tuple[float, Any]:
    """The first rollout with the maximum return (and its ``at_end`` value)."""
    best: tuple[float, Any] | None = None
    for _ in range(num_rollouts):
        result = rollout(env, snapshot, action, discount, at_end)
        if best is None or result[0] > best[0]:
            best = result
    assert best is not None
    return best


def q_value(env: Environment, snapshot: Snapshot, action: str, *, discount: float, num_rollouts: int = 1) -> float:
    """``Q(snapshot, action)``: the maximum discounted return over ``num_rollouts`` rollouts."""
    _check(discount, num_rollouts)
    return max(rollout_return(env, snapshot, action, discount) for _ in range(num_rollouts))


def v_value(env: Environment, snapshot: Snapshot, *, discount: float, num_rollouts: int = 1) -> float:
    """``V(snapshot)``: the maximum discounted return of the reference policy over ``num_rollouts``."""
    _check(discount, num_rollouts)
    return max(rollout_return(env, snapshot, None, discount) for _ in range(num_rollouts))


def shares_rollouts(env: Environment, num_rollouts: int) -> bool:
    """Whether :func:`label_state` shares rollouts (module docstring): a deterministic environment, one rollout."""
    return env.deterministic and num_rollouts == 1


def label_state(
    env: Environment,
    snapshot: Snapshot,
    candidates: tuple[str, ...],
    *,
    discount: float,
    num_rollouts: int = 1,
    at_end: AtEnd | None = None,
    at_next: AtNext | None = None,
    at_snapshot: bool = False,
) -> StateLabels:
    """Q-values of every candidate and the V-value of ``snapshot``.

    ``at_end``: also record ``at_end(env)`` at the end of the rollout that gave each label (the
    first rollout with the maximum return), in ``q_end`` and ``v_end``.  ``at_next``: also record
    ``at_next(env)`` in each candidate's next state, in ``next`` (before any rollout, from a restore
    of ``snapshot`` and one step each, unless rollouts are shared).  ``at_snapshot``: ``env`` is in
    ``snapshot`` now (used by shared rollouts only, to skip one restore).
    """
    _check(discount, num_rollouts)
    if shares_rollouts(env, num_rollouts):
        return _label_shared(env, snapshot, candidates, discount, at_end, at_next, at_snapshot)
    after: list[Any] = []
    if at_next is not None:
        for action in candidates:
            env.restore(snapshot)
            env.step(action)
            after.append(at_next(env))
    q_results = [_best(env, snapshot, a, discount, num_rollouts, at_end) for a in candidates]
    v, v_end = _best(env, snapshot, None, discount, num_rollouts, at_end)
    return StateLabels(
        candidates=candidates,
        q=tuple(r[0] for r in q_results),
        v=v,
        q_end=tuple(r[1] for r in q_results) if at_end is not None else (),
        v_end=v_end,
        next=tuple(after),
    )


def _label_shared(
    env: Environment,
    snapshot: Snapshot,
    candidates: tuple[str, ...],
    discount: float,
    at_end: AtEnd | None,
    at_next: AtNext | None,
    at_snapshot: bool,
) -> StateLabels:
    """:func:`label_state` with one rollout per candidate, which also gives the next state and, when the
    reference action is a candidate, ``V`` (module docstring: shared rollouts)."""
    if not at_snapshot:
        env.restore(snapshot)
    reference = None if env.done else env.reference_action()
    v_result: tuple[float, Any, Any] | None = None
    if reference not in candidates:
        v_result = _play(env, None, discount, at_end, None)
        at_snapshot = False
    results: list[tuple[float, Any, Any]] = []
    for action in candidates:
        if not at_snapshot:
            env.restore(snapshot)
        at_snapshot = False
        results.append(_play(env, action, discount, at_end, at_next))
    if v_result is None:
        v_result = results[candidates.index(reference)]  # type: ignore[arg-type]
    return StateLabels(
        candidates=candidates,
        q=tuple(r[0] for r in results),
        v=v_result[0],
        q_end=tuple(r[2] for r in results) if at_end is not None else (),
        v_end=v_result[2],
        next=tuple(r[1] for r in results) if at_next is not None else (),
    )


def _check(discount: float, num_rollouts: int) -> None:
    if not 0.0 < discount <= 1.0:
        raise ValueError(f"discount must be in (0, 1], got {discount}")
    if num_rollouts < 1:
        raise ValueError(f"num_rollouts must be at least 1, got {num_rollouts}")

"""Experience gathered in a dataset's environment from its train tasks: what the trainers learn from.

All of it starts from the train split only — the train states' snapshots (task + action
history, which are inputs) and the train trajectories' indices — and takes rewards from the
environment, never from labels.

* :func:`trajectory_transitions`: the train trajectories re-collected with the dataset's seeded
  actor (:func:`qval.build.collect`, deterministic) and replayed for their rewards.
* :func:`branch_transitions`: every candidate the train states offer (restore, force the
  candidate), continued by the ε-greedy actor to the end of the episode, so the offline data
  also holds actions the actor did not take *and* what follows them (Best-of-Q's ε-greedy
  exploration data; a next state with no transitions of its own would leave its V untrained);
  with ``depth`` the states those continuations visit first offer every candidate too.
* :func:`grow_tree` / :func:`max_backup`: QLASS exploration trees (width ``W`` at the first
  ``D`` levels via the environment's candidate sampler, then the actor continues to the end)
  and their Q-values ``Q(n) = r + γ·max over n's children`` (``r`` at a leaf).
* :func:`mc_value` / :func:`mc_returns`: the mean discounted return of ``K`` continuations
  sampled with the actor (Agentic Monte Carlo's value targets), and the return-to-go of every
  step of those continuations (AMC's Eq. 7 takes every step of a sampled trajectory as a point).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from qval import build, schema
from qval.envs.base import Environment, Snapshot

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Transition:
    """One step ``(s, a, r, s')`` in text: ``done`` when the episode ended with it."""

    task: str
    state: str
    action: str
    reward: float
    next_state: str
    done: bool


@dataclass
class TreeNode:
    """A state of an exploration tree; ``edges`` are the actions tried from it."""

    task: str
    observation: str
    edges: list["Edge"] = field(default_factory=list)


@dataclass
class Edge:
    """An action tried from a node: its reward, whether it ended the episode, the node it led to."""

    action: str
    reward: float
    done: bool
    child: TreeNode | None = None


def snapshot_of(state: schema.State) -> Snapshot:
    """The snapshot a dataset state restores to (its task and action history)."""
    return Snapshot(task=state.task, history=tuple(state.history))


def discounted_return(rewards: Sequence[float], discount: float) -> float:
    """``sum_k discount**k * rewards[k]``."""
    total, weight = 0.0, 1.0
    for r in rewards:
        total += weight * r
        weight *= discount
    return total


def trajectory_transitions(env: Environment, spec: build.DatasetSpec, indices: Iterable[int],
                           progress: Progress | None = None) -> list[Transition]:
    """Every step of the trajectories ``indices`` (re-collected as the dataset's build did)."""
    indices = sorted(set(indices))
    out: list[Transition] = []
    for done_count, index in enumerate(indices):
        trajectory = build.collect(env, index, spec)
        env.reset(trajectory.task)
        for turn in trajectory.turns:
            result = env.step(turn.action)
            out.append(Transition(trajectory.task, turn.observation, turn.action, result.reward,
                                  result.observation, result.done))
        if progress:
            progress(done_count + 1, len(indices), "trajectories")
    return out


def branch_transitions(env: Environment, states: Sequence[schema.State], progress: Progress | None = None, *,
                       epsilon: float | None = None, rng: random.Random | None = None,
                       depth: int = 0) -> list[Transition]:
    """Every candidate of ``states`` from the restored state: one step, or (``epsilon`` given) the step and then
    the actor with ``epsilon`` noise (draws from ``rng``) until the episode is done.

    ``depth`` (continued branches only) closes the coverage gap of offering moves at the train states only: the
    first ``depth`` states not yet offered that each continuation of a train state's candidate visits offer their
    candidates too (:meth:`~qval.envs.base.Environment.sample_candidates` of the actor's move there, as a dataset
    state's), each one not the actor's (whose outcome the continuation already holds) forced from the restored
    state and continued by the actor to the end, without further branching.  A state (task and observation) offers its
    candidates once: one already offered, a train state included, is passed over.  Cost: with ``C`` candidates a
    state, at most ``len(states) · C · depth`` extra branch points of ``C − 1`` continuations each, so
    ``depth = 1`` can make up to ``C`` times the continuations of ``depth = 0`` (fewer where states repeat).
    """
    if epsilon is not None and rng is None:
        raise ValueError("continued branches need an rng for the actor's draws")
    if depth < 0 or (depth and epsilon is None):
        raise ValueError(f"depth must be >= 0 and needs continued branches (an epsilon), got {depth}")
    out: list[Transition] = []
    offered = {(s.task, s.observation) for s in states}

    def continue_from(task: str, observation: str, action: str, visits: list[tuple[Snapshot, str]] | None) -> None:
        """Step ``action`` from the current state, then let the actor play to the end; while ``visits`` wants more,
        note each visited state's snapshot and the actor's move there."""
        while True:
            result = env.step(action)
            out.append(Transition(task, observation, action, result.reward, result.observation, result.done))
            if result.done or epsilon is None:
                return
            assert rng is not None
            observation, action = result.observation, env.actor_action(rng, epsilon)
            if visits is not None and len(visits) < depth and (task, observation) not in offered:
                offered.add((task, observation))
                visits.append((env.snapshot(), action))

    for i, state in enumerate(states):
        for cand in state.candidates:
            env.restore(snapshot_of(state))
            visits: list[tuple[Snapshot, str]] = []
            continue_from(state.task, state.observation, cand.action, visits if depth else None)
            for snap, taken in visits:
                env.restore(snap)
                observation = env.observation()
                assert rng is not None
                for other in env.sample_candidates(taken, rng):
                    if other != taken:
                        env.restore(snap)
                        continue_from(state.task, observation, other, None)
        if progress:
            progress(i + 1, len(states), "branches")
    return out


def grow_tree(env: Environment, snapshot: Snapshot, *, width: int, depth: int, epsilon: float,
              rng: random.Random) -> TreeNode:
    """An exploration tree from ``snapshot``.

    At the first ``depth`` levels a node tries up to ``width`` actions: the actor's action and
    others drawn from :meth:`~qval.envs.base.Environment.sample_candidates`, each from the
    restored node; below that the actor (reference policy with ε-noise) plays on in place until
    the episode is done (one chain, no restore per step).
    """
    if width < 1 or depth < 0:
        raise ValueError(f"width must be >= 1 and depth >= 0, got {width} and {depth}")
    env.restore(snapshot)
    root = TreeNode(snapshot.task, env.observation())

    def expand(node: TreeNode, snap: Snapshot, level: int) -> None:
        env.restore(snap)
        action = env.actor_action(rng, epsilon)
        if level >= depth:
            while True:
                result = env.step(action)
                edge = Edge(action, result.reward, result.done)
                node.edges.append(edge)
                if result.done:
                    return
                node = edge.child = TreeNode(snapshot.task, result.observation)
                action = env.actor_action(rng, epsilon)
        others = [a for a in env.sample_candidates(action, rng) if a != action]
        pending: list[tuple[TreeNode, Snapshot]] = []
        for tried in [action] + rng.sample(others, min(width - 1, len(others))):
            env.restore(snap)
            result = env.step(tried)
            edge = Edge(tried, result.reward, result.done)
            node.edges.append(edge)
            if not result.done:
                edge.child = TreeNode(snapshot.task, result.observation)
                pending.append((edge.child, env.snapshot()))
        for child, child_snap in pending:
            expand(child, child_snap, level + 1)

    expand(root, snapshot, 0)
    return root


def max_backup(root: TreeNode, discount: float) -> list[tuple[str, str, str, float]]:
    """``(task, state, action, Q)`` of every edge of the tree, ``Q = r + discount · max over the child's edges``.

    An edge whose episode ended, or whose child was not expanded, has ``Q = r``.
    """
    out: list[tuple[str, str, str, float]] = []

    def q_of(node: TreeNode, edge: Edge) -> float:
        future = 0.0
        if edge.child is not None and edge.child.edges:
            future = max(q_of(edge.child, e) for e in edge.child.edges)
        q = edge.reward + discount * future
        out.append((node.task, node.observation, edge.action, q))
        return q

    for edge in root.edges:
        q_of(root, edge)
    return out


def mc_returns(env: Environment, snapshot: Snapshot, first_action: str | None, *, samples: int, epsilon: float,
               discount: float, rng: random.Random) -> list[list[tuple[str, str, float]]]:
    """``samples`` continuations by the actor from ``snapshot`` (``first_action`` forced first): each a list of
    ``(observation, action, discounted return from that step on)``, the first item the snapshot's own."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    out = []
    for _ in range(samples):
        env.restore(snapshot)
        steps: list[tuple[str, str, float]] = []
        action = first_action
        while not env.done:
            observation = env.observation()
            action = action if action is not None else env.actor_action(rng, epsilon)
            steps.append((observation, action, env.step(action).reward))
            action = None
        rewards = [r for _, _, r in steps]
        out.append([(obs, act, discounted_return(rewards[k:], discount)) for k, (obs, act, _) in enumerate(steps)])
    return out


def mc_value(env: Environment, snapshot: Snapshot, first_action: str | None, *, samples: int, epsilon: float,
             discount: float, rng: random.Random) -> float:
    """Mean discounted return of ``samples`` continuations by the actor from ``snapshot`` (``first_action`` forced first)."""
    runs = mc_returns(env, snapshot, first_action, samples=samples, epsilon=epsilon, discount=discount, rng=rng)
    return sum(run[0][2] if run else 0.0 for run in runs) / samples

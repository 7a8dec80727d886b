"""Reference methods: what a reader would try before any model, so that every board has rows to beat.

None of them needs a backbone (``needs="none"``); all are family ``other``.

* ``random``: a uniform score in [0, 1) per evaluation id, drawn from a hash of the run's seed and the
  id, so a point keeps its score whatever else is in the split and a rerun gives the same file.
* ``constant``: the same score (:data:`CONSTANT`) for every point.  Its correlations are undefined (a
  constant input), so its row finishes with no ρ: the board counts it as unranked.
* ``step-index``: the state's step within its trajectory (for target Q, the step of the state the
  action is taken in).  Positive, not negated: an agent that is still going after more steps has
  usually come closer to finishing its task, so later states tend to be worth more.  Every candidate
  of a state gets the same score, so it has no ranking variant.
* ``goal-distance`` (FrozenLake only: its folder declares it, :attr:`qval.envs.entry.EnvironmentEntry.methods`): minus the number of moves from the
  agent's cell to the goal on the map the observation prints (breadth-first search through ``S`` and
  ``F`` cells); for target Q the cell the action leads to (the candidate's next observation), for V
  the current one.  A hole, or a cell walled off from the goal, scores ``-(rows × columns)``, below
  every reachable cell.  This is a distance heuristic that FrozenLake's open-book observations allow
  (the whole map is in the text), not a learned or prompted signal.

Every method reads the split's observations only, never a label.  None reads how a state is shown -- text or
image -- only what the state is (its id, its step, the map it holds): a run stands for every modality a dataset
offers (:func:`modalities_for`), so a dataset with images gets the same reference rows on its image boards.
(``goal-distance`` takes the map from the text observation; the image shows that same map.)  Django-free.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from qval import schema
from qval.envs import registry
from qval.methods.context import points_of
from qval.methods.registry import MethodContext, MethodError, MethodOutput, method

CONSTANT: float = 0.0
"""The score ``constant`` gives every point."""

NAMES: tuple[str, ...] = ("random", "constant", "step-index", "goal-distance")
"""Every reference method, in the order the boards are seeded with them."""

_CELLS = frozenset("SFHG@")


def methods_for(environment: str) -> tuple[str, ...]:
    """The reference methods that apply to a dataset of ``environment`` (in :data:`NAMES` order): those no
    environment declares its own (:func:`qval.envs.registry.environment_only_methods`), and its own."""
    only = registry.environment_only_methods()
    return tuple(n for n in NAMES if n not in only or n in registry.methods_only_for(environment))


def modalities_for(name: str, offered: Sequence[str]) -> tuple[str, ...]:
    """The modalities of ``offered`` (a dataset's, in its order) whose boards reference method ``name`` has a row
    on: all of them, since no reference method reads how a state is shown; :class:`MethodError` for a name that
    is not a reference method."""
    if name not in NAMES:
        raise MethodError(f"{name!r} is not a reference method; they are {', '.join(NAMES)}")
    return tuple(offered)


def _scored_ids(ctx: MethodContext, per_candidate: bool) -> list[tuple[str, schema.State, schema.Candidate | None]]:
    """``(id, state, candidate)`` of what a run scores: every candidate for target Q when the method ranks
    (``per_candidate``), else the split's points (:func:`qval.methods.context.points_of`)."""
    if ctx.target == "q" and per_candidate:
        return [(c.id, s, c) for s in ctx.points for c in s.candidates]
    return [(p.id, p.state, p.candidate) for p in points_of(ctx.points, ctx.target)]


def uniform(seed: int, point_id: str) -> float:
    """A uniform number in [0, 1) that depends only on ``seed`` and ``point_id``."""
    digest = hashlib.blake2b(f"{seed}:{point_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


@method("random", family="other", targets=("q", "v", "ranking"), modality="text", needs="none",
        description="Reference: a uniform score in [0, 1) per point, fixed by the run's seed and the point's id. "
                    "What chance looks like on this board.")
def random_scores(ctx: MethodContext) -> MethodOutput:
    """``random``: :func:`uniform` of the run's seed for every candidate (Q) or state (V)."""
    scored = _scored_ids(ctx, per_candidate=True)
    ctx.progress(len(scored), len(scored))
    return MethodOutput.from_scores({i: uniform(ctx.seed, i) for i, _, _ in scored}, {"seed": ctx.seed})


@method("constant", family="other", targets=("q", "v"), modality="text", needs="none",
        description="Reference: the same score for every point. Its correlations are undefined, so it finishes "
                    "unranked: it shows how a board treats a method that does not discriminate.",
        params={"value": CONSTANT})
def constant_scores(ctx: MethodContext) -> MethodOutput:
    """``constant``: :data:`CONSTANT` for every point."""
    scored = _scored_ids(ctx, per_candidate=False)
    ctx.progress(len(scored), len(scored))
    return MethodOutput.from_scores({i: CONSTANT for i, _, _ in scored})


@method("step-index", family="other", targets=("q", "v"), modality="text", needs="none",
        description="Reference: the state's step number in its trajectory, as it is (not negated): later states "
                    "have usually come closer to the end of the task, so they tend to be worth more.")
def step_index(ctx: MethodContext) -> MethodOutput:
    """``step-index``: the state's ``step`` (for Q, the state the action is taken in)."""
    scored = _scored_ids(ctx, per_candidate=False)
    ctx.progress(len(scored), len(scored))
    return MethodOutput.from_scores({i: float(state.step) for i, state, _ in scored})


# -- FrozenLake's distance to the goal ---------------------------------------------------------------
def grid_of(observation: str) -> list[str]:
    """The map rows of a FrozenLake observation (the lines made of ``S F H G @`` only, all of one width);
    :class:`MethodError` when there is none."""
    rows = [line.strip() for line in observation.splitlines() if line.strip() and set(line.strip()) <= _CELLS]
    if not rows or len({len(r) for r in rows}) != 1 or sum(r.count("@") for r in rows) != 1:
        raise MethodError(f"not a FrozenLake observation (no map with one @): {observation[:80]!r}")
    return rows


def goal_distance(observation: str, before: str | None = None) -> float:
    """Minus the fewest moves from the agent's cell (``@``) to the goal on the printed map.

    The ``@`` hides the cell under the agent; ``before``, the observation one step earlier (the state a
    Q candidate's action is taken in), shows it when the agent moved.  Otherwise the agent stands on the
    goal when no ``G`` is left on the map, and on passable ice when one is (a sampled state never ends an
    episode).  A hole or a cell cut off from the goal scores ``-(rows × columns)``.
    """
    from qval.envs.frozenlake.adapter import UNREACHABLE, goal_distances  # gymnasium: imported on use

    rows = grid_of(observation)
    ncol = len(rows[0])
    cell = next(r * ncol + c for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "@")
    under = "G" if not any("G" in row for row in rows) else "F"
    if before is not None:
        earlier = grid_of(before)
        if len(earlier) == len(rows) and len(earlier[0]) == ncol and earlier[cell // ncol][cell % ncol] != "@":
            under = earlier[cell // ncol][cell % ncol]
    r, c = divmod(cell, ncol)
    rows[r] = rows[r][:c] + under + rows[r][c + 1:]
    distance = goal_distances(rows)[cell]
    return -float(len(rows) * ncol) if distance == UNREACHABLE else -float(distance)


@method("goal-distance", family="other", targets=("q", "v", "ranking"), modality="text", needs="none",
        description="Reference, FrozenLake only: a distance heuristic, not a model. Minus the shortest-path number of "
                    "moves from the agent's cell to the goal on the map printed in the observation (for Q, the cell "
                    "the action leads to; a hole scores below every reachable cell). FrozenLake is open book: its "
                    "observation shows the whole map, which is what lets a 20-line search score well here.")
def goal_distance_scores(ctx: MethodContext) -> MethodOutput:
    """``goal-distance``: :func:`goal_distance` of every candidate's next observation (Q) or state (V)."""
    if "goal-distance" not in registry.methods_only_for(ctx.dataset.manifest.environment):
        raise MethodError(f"goal-distance reads FrozenLake maps; dataset {ctx.dataset.manifest.key} is "
                          f"{ctx.dataset.manifest.environment}")
    scored = _scored_ids(ctx, per_candidate=True)
    scores = {i: goal_distance(c.next_state, state.observation) if c is not None else goal_distance(state.observation)
              for i, state, c in scored}
    ctx.progress(len(scored), len(scored))
    return MethodOutput.from_scores(scores)

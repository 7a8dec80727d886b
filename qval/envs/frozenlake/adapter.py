"""Gymnasium FrozenLake (deterministic, random maps) as a QVal environment adapter.

* **Maps.**  ``generate_random_map(size=size, seed=s)`` for each ``s`` of ``map_seeds``
  (default: seeds 42..49, one map per seed); task ``"map-i"`` is the map of the ``i``-th seed.
* **Dynamics.**  The real ``gymnasium.make("FrozenLake-v1", desc=map, is_slippery=False)``
  environment, one instance per map.  Reward 1 on reaching the goal ``G``, else 0; stepping
  into a hole ``H`` or onto ``G`` terminates.  The horizon is enforced by the adapter,
  counted from the start of the episode (Gymnasium's own ``TimeLimit`` of 100 steps never
  triggers because every episode is reset well within it).
* **Restore.**  A :class:`FrozenLakeSnapshot` holds the agent's cell and the action history
  (its length is the step count).  Restoring resets the map's gymnasium env and then sets its
  internal state ``env.unwrapped.s`` to the cell — the whole state of deterministic
  FrozenLake.  A plain :class:`~qval.envs.base.Snapshot` is restored by replay.
* **Policies.**  The reference policy moves to the neighbouring cell with the smallest
  breadth-first-search distance to the goal (ties: lowest gymnasium action id); the BFS only
  chooses actions, the gymnasium env produces every transition and reward.
* **Observation.**  A one-line legend, then the map's rows of ``S/F/H/G`` with the agent's
  cell replaced by ``@``.  Image (:meth:`FrozenLake.observation_image`, :func:`render_map`):
  a 512×512 RGB drawing of the same grid — ice tiles, the start square, dark holes, the
  green goal with a gold star, the agent as a red disc — made with PIL only (no pygame),
  so the same state always gives the same pixels.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import gymnasium
from gymnasium.envs.toy_text.frozen_lake import generate_random_map
from PIL import Image, ImageDraw

from ..base import Environment, Snapshot

ACTIONS: tuple[str, ...] = ("move left", "move down", "move right", "move up")
"""Action texts; position ``i`` is gymnasium's action id ``i`` (LEFT, DOWN, RIGHT, UP)."""

MOVES: tuple[tuple[int, int], ...] = ((0, -1), (1, 0), (0, 1), (-1, 0))
"""(row, column) offset of each action id; a move off the grid leaves the agent in place."""

MAP_SEEDS: tuple[int, ...] = tuple(range(42, 50))
"""Seeds of the default maps: map ``i`` is ``generate_random_map(size, seed=42 + i)``."""

LEGEND = "FrozenLake: you are @. Reach the goal G without falling into a hole H (S start, F frozen ice)."

UNREACHABLE = -1
"""Distance of a cell from which the goal cannot be reached (holes, walled-in cells)."""


IMAGE_SIZE = 512
"""Width and height of :func:`render_map` images, in pixels."""

_ICE, _START, _GRID = (214, 236, 250), (188, 214, 236), (150, 182, 210)
_HOLE, _HOLE_RIM = (22, 46, 96), (70, 110, 160)
_GOAL, _STAR = (96, 176, 96), (250, 206, 40)
_AGENT, _AGENT_RIM = (214, 40, 40), (255, 255, 255)


@functools.lru_cache(maxsize=4096)
def _render(rows: tuple[str, ...], position: int, size: int) -> Image.Image:
    nrow, ncol = len(rows), len(rows[0])
    tile = size // max(nrow, ncol)
    left, top = (size - tile * ncol) // 2, (size - tile * nrow) // 2
    image = Image.new("RGB", (size, size), _GRID)
    draw = ImageDraw.Draw(image)
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            x0, y0 = left + c * tile, top + r * tile
            box = [x0 + 1, y0 + 1, x0 + tile - 2, y0 + tile - 2]
            draw.rectangle(box, fill=_START if ch == "S" else _GOAL if ch == "G" else _ICE)
            inset = tile // 8
            if ch == "H":
                draw.ellipse([x0 + inset, y0 + inset + tile // 16, x0 + tile - inset, y0 + tile - inset],
                             fill=_HOLE, outline=_HOLE_RIM, width=max(1, tile // 32))
            elif ch == "G":
                cx, cy, outer, inner = x0 + tile / 2, y0 + tile / 2, tile * 0.38, tile * 0.16
                points = [
                    (cx + (outer if k % 2 == 0 else inner) * math.sin(k * math.pi / 5),
                     cy - (outer if k % 2 == 0 else inner) * math.cos(k * math.pi / 5))
                    for k in range(10)
                ]
                draw.polygon([(round(x), round(y)) for x, y in points], fill=_STAR)
            elif ch == "S":
                draw.rectangle([x0 + inset, y0 + inset, x0 + tile - inset, y0 + tile - inset],
                               outline=_GRID, width=max(1, tile // 32))
    r, c = divmod(position, ncol)
    x0, y0, inset = left + c * tile, top + r * tile, tile // 5
    draw.ellipse([x0 + inset, y0 + inset, x0 + tile - inset, y0 + tile - inset],
                 fill=_AGENT, outline=_AGENT_RIM, width=max(1, tile // 20))
    eye = max(1, tile // 16)
    for ex in (x0 + tile * 0.4, x0 + tile * 0.6):
        ey = y0 + tile * 0.43
        draw.ellipse([round(ex) - eye, round(ey) - eye, round(ex) + eye, round(ey) + eye], fill=_AGENT_RIM)
    return image


def render_map(rows: Sequence[str], position: int, size: int = IMAGE_SIZE) -> Image.Image:
    """A ``size``×``size`` RGB drawing of the map ``rows`` with the agent on cell ``position``.

    Pure function of its arguments (cached), drawn with PIL: the same state, the same pixels.
    """
    return _render(tuple(rows), int(position), int(size)).copy()


@dataclass(frozen=True)
class FrozenLakeSnapshot(Snapshot):
    """A FrozenLake state: the task, the action history and the agent's cell (row * ncol + col)."""

    position: int


def goal_distances(rows: Sequence[str]) -> list[int]:
    """Fewest moves from every cell to the goal (0 on ``G``, :data:`UNREACHABLE` for holes).

    Breadth-first search backwards from the goal; holes and the goal end an episode, so
    they are never passed through.
    """
    nrow, ncol = len(rows), len(rows[0])
    dist = [UNREACHABLE] * (nrow * ncol)
    goal = next(r * ncol + c for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "G")
    dist[goal] = 0
    queue = deque([goal])
    while queue:
        cell = queue.popleft()
        r, c = divmod(cell, ncol)
        for dr, dc in MOVES:
            nr, nc = r + dr, c + dc
            if 0 <= nr < nrow and 0 <= nc < ncol and rows[nr][nc] in "SF" and dist[nr * ncol + nc] == UNREACHABLE:
                dist[nr * ncol + nc] = dist[cell] + 1
                queue.append(nr * ncol + nc)
    return dist


class FrozenLake(Environment):
    """Deterministic FrozenLake on random maps; see the module docstring."""

    name = "frozenlake"
    reference_policy = "shortest-path (BFS)"
    deterministic = True  # not slippery; the BFS action is a function of the cell; tested: the same dataset either way

    def __init__(self, map_seeds: Sequence[int] = MAP_SEEDS, size: int = 8, horizon: int = 30) -> None:
        super().__init__(horizon)
        self.size = size
        self.map_seeds = tuple(map_seeds)
        self.maps: dict[str, tuple[str, ...]] = {
            f"map-{i}": tuple(generate_random_map(size=size, seed=seed)) for i, seed in enumerate(self.map_seeds)
        }
        self._distances = {task: goal_distances(rows) for task, rows in self.maps.items()}
        self._envs: dict[str, gymnasium.Env[Any, Any]] = {}
        self._position = 0

    # -- Environment -------------------------------------------------------------------
    @property
    def tasks(self) -> Sequence[str]:
        return tuple(self.maps)

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "gymnasium_env": "FrozenLake-v1",
            "gymnasium_version": gymnasium.__version__,
            "is_slippery": False,
            "size": self.size,
            "map_seeds": list(self.map_seeds),
            "maps": {task: list(rows) for task, rows in self.maps.items()},
            "horizon": self.horizon,
            "reward": "1 on reaching the goal, else 0",
        }
        if self.hidden:  # absent otherwise, so older datasets keep their fingerprints
            tasks = list(self.maps)
            config["map_seeds"] = [None if t in self.hidden else s for t, s in zip(tasks, self.map_seeds)]
            config["maps"] = {t: None if t in self.hidden else list(rows) for t, rows in self.maps.items()}
            config["hidden_maps"] = "generate_random_map(size, seed) with a seed derived from the maintainer's secret"
        return config

    def hide_tasks(self, seeds: dict[str, int | None]) -> None:
        """Replace the named maps by ``generate_random_map(size, seed)`` (``None``: hidden, unplayable)."""
        unknown = set(seeds) - set(self.maps)
        if unknown:
            raise KeyError(f"unknown tasks {sorted(unknown)}")
        for task, seed in seeds.items():
            self._envs.pop(task, None)
            if seed is None:
                self.maps[task] = ()
                self._distances[task] = []
            else:
                self.maps[task] = tuple(generate_random_map(size=self.size, seed=seed))
                self._distances[task] = goal_distances(self.maps[task])
        self.hidden = self.hidden | frozenset(seeds)

    def _reset(self, task: str) -> None:
        if task not in self._envs:
            self._envs[task] = gymnasium.make("FrozenLake-v1", desc=list(self.maps[task]), is_slippery=False)
        position, _ = self._envs[task].reset()
        self._position = int(position)

    def _step(self, action: str) -> tuple[float, bool]:
        position, reward, terminated, _, _ = self._envs[self.task].step(ACTIONS.index(action))
        self._position = int(position)
        return float(reward), bool(terminated)

    def observation(self) -> str:
        r, c = self.position
        rows = list(self.maps[self.task])
        rows[r] = rows[r][:c] + "@" + rows[r][c + 1 :]
        return "\n".join([LEGEND, *rows])

    def candidates(self) -> list[str]:
        return list(ACTIONS)

    def instance(self) -> str:
        """The map: every observation shows it, the agent's ``@`` aside, which stands on ``S`` (always cell 0) or
        on an ``F`` until the episode ends, so two maps never give the same non-terminal observation."""
        return "\n".join(self.maps[self.task])

    def observation_image(self) -> Image.Image:
        """The current state drawn as a 512×512 RGB image (:func:`render_map`)."""
        return render_map(self.maps[self.task], self._position)

    def image_key(self) -> tuple[tuple[str, ...], int]:
        """The map and the agent's cell: all :func:`render_map` draws."""
        return self.maps[self.task], self._position

    def reference_action(self) -> str:
        """The move to the neighbour closest to the goal (ties: lowest action id)."""
        dist = self._distances[self.task]
        best, best_dist = ACTIONS[0], None
        for action, target in zip(ACTIONS, self._targets()):
            d = dist[target]
            if d != UNREACHABLE and (best_dist is None or d < best_dist):
                best, best_dist = action, d
        return best

    def snapshot(self) -> FrozenLakeSnapshot:
        return FrozenLakeSnapshot(task=self.task, history=self.history, position=self._position)

    def restore(self, snapshot: Snapshot) -> None:
        """Set the gymnasium env's ``unwrapped.s`` after a reset; plain snapshots replay."""
        if not isinstance(snapshot, FrozenLakeSnapshot):
            super().restore(snapshot)
            return
        self.reset(snapshot.task)
        self._envs[snapshot.task].unwrapped.s = snapshot.position  # type: ignore[attr-defined]
        self._position = snapshot.position
        self._history = list(snapshot.history)
        r, c = divmod(snapshot.position, self.size)
        self._terminated = self.maps[snapshot.task][r][c] in "GH"

    # -- helpers -----------------------------------------------------------------------
    @property
    def position(self) -> tuple[int, int]:
        """The agent's (row, column)."""
        r, c = divmod(self._position, self.size)
        return r, c

    def _targets(self) -> list[int]:
        """The cell each action (by gymnasium id) leads to from the current cell."""
        r, c = self.position
        return [
            min(max(r + dr, 0), self.size - 1) * self.size + min(max(c + dc, 0), self.size - 1)
            for dr, dc in MOVES
        ]

"""ALFWorld (text; ``pick_and_place_simple``, and all six task types) as a QVal environment adapter.

* **Scenes.**  ALFWorld's game files cannot be downloaded here, so :func:`generate_scene`
  builds ``pick_and_place_simple`` games from the room layouts the ``alfworld`` wheel ships
  (``alfworld/gen/layouts/FloorPlanN-{objects,openable}.json``): the layout's receptacle
  instances, plus one or a few instances of every other static receptacle class the room
  lists (e.g. stove burners); one or two instances of every pickupable object class of the
  room, each placed on a receptacle that ALFRED allows for it
  (``alfworld.gen.constants.VAL_RECEPTACLE_OBJECTS``); a goal "put an <object> in/on a
  <receptacle class>" that is not already satisfied; a random start location.  Everything
  is drawn from ``random.Random(f"alfworld-scene/{floorplan}/{seed}")``, so a scene is a pure
  function of ``(floorplan, seed)``.  :func:`choose_scenes` picks distinct floorplans from a
  seed.  Task id: ``"FloorPlan{floorplan}-s{seed}"``.
* **Typed scenes** (``alfworld-all-types``): ``generate_scene(floorplan, seed, task_type)`` for each of
  ALFWorld's six :data:`TASK_TYPES`, with ALFWorld's PDDL goals (``goal_library``): clean, heat and
  cool need a sink basin, microwave or fridge in the room and a target object ALFRED allows for it (and
  a destination that is not that receptacle); the light task stands a toggleable desk lamp on one of
  :data:`LAMP_HOLDERS` (desk, side table, dresser, shelf, …); pick two gets a second instance of the
  object elsewhere.  Each receptacle has a location of its own and the agent never starts at one
  (see :func:`_own_locations`).
  Drawn from ``random.Random(f"alfworld-scene/{task_type}/{floorplan}/{seed}")``; task id
  ``"FloorPlan{floorplan}-s{seed}-{task_type}"``; :func:`choose_typed_scenes` picks them per type and
  can keep only scenes the expert solves within a number of steps.  The expert is
  :class:`MoveTrackingExpert` there (see it: alfworld 0.4.2's expert mistracks puts).
  :meth:`ALFWorld.task_type` names each task's type, hidden ones included (a hidden test scene keeps
  its position's type: :func:`draw_scene`).
* **Game files.**  Each scene is written as ``game.tw-pddl`` + ``traj_data.json`` under
  :func:`cache_dir` (``$QVAL_ALFWORLD_CACHE``, default ``~/.cache/qval/alfworld``), in a
  folder named by :data:`GENERATOR_VERSION` and the task id; a missing or different file is
  regenerated.
* **Dynamics.**  TextWorld's ``PddlEnv`` wrapped in ALFWorld's ``AlfredDemangler``,
  ``AlfredInfos`` and ``AlfredExpert`` (handcoded), exactly as ALFWorld plays its own games.
  Reward 1 when the goal holds (the episode then terminates), else 0.  Actions are the
  admissible commands.
* **Reference policy.**  ALFWorld's handcoded expert: the next action is
  ``state["extra.expert_plan"][0]``.  The expert draws from Python's global :mod:`random`;
  the adapter runs it on its own random state (seeded per task at reset, part of every
  snapshot) and puts the caller's global state back afterwards.
* **Observation.**  The scene description (ALFWorld's intro: the room and the task), the
  last command and its feedback, and the admissible commands.
* **Image.**  :meth:`ALFWorld.observation_image`: a schematic render of the simulator state, not THOR's
  egocentric camera (AI2-THOR cannot run here) — the task line, the receptacle at the agent's location
  (closed: nothing of its contents), the objects seen there and held, with their examined states, and the
  room's receptacles; drawn from the engine's facts by :mod:`qval.envs.alfworld.image`.
* **Candidates.**  :meth:`ALFWorld.sample_candidates`: the actor's action and three other
  admissible commands drawn by the builder's RNG, listed in admissible-command order.
* **Restore.**  ``restore_mode="direct"`` (default): :meth:`ALFWorld.snapshot` keeps
  libdownward's state id (``get_state_id``/``set_state_id``) and copies of the Python-side
  state, and restores of that state in the same episode set them directly; a state restored
  without such a snapshot is replayed from reset once, then kept the same way (a reset, in this
  or any other adapter, invalidates them: libdownward holds one problem per process).
  ``restore_mode="replay"``: every restore replays.  Both give the same data (tested).
* **Speed.**  :func:`set_parse_memoization` caches TextWorld's text-template and query
  parsing (tatsu) and replaces the deep copies of its text generator's contexts, which
  dominate a step, and caches the PDDL-to-SAS translation, which dominates a reset, in memory and
  on disk beside the game files; the output is unchanged (tested).  Each task keeps its loaded game.
"""

from __future__ import annotations

import copy
import ctypes
import functools
import hashlib
import json
import os
import pickle
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import alfworld
import alfworld.gen.constants as alfred_constants
import alfworld.gen.goal_library as goal_library
import fast_downward
import textworld
import textworld.envs.pddl.textgen as tw_textgen
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredExpertType, AlfredInfos
from alfworld.agents.expert import HandCodedAgentFailed
from textworld.envs import PddlEnv
from PIL import Image
from textworld.logic import Rule

from ..base import Environment, Snapshot
from .image import View, render_view, view_of

TASK_TYPE = "pick_and_place_simple"
"""The task type of the original (untyped) scenes, ``alfworld-pick-place``'s."""
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
"""ALFWorld's six task types (its ``all-types`` set), in its order."""
TOOLS = {"pick_clean_then_place_in_recep": "SinkBasin", "pick_heat_then_place_in_recep": "Microwave",
         "pick_cool_then_place_in_recep": "Fridge"}
"""The receptacle a clean, heat or cool task needs (``alfred.pddl``'s CleanObject, HeatObject, CoolObject)."""
TREATMENTS = {"pick_clean_then_place_in_recep": "Cleanable", "pick_heat_then_place_in_recep": "Heatable",
              "pick_cool_then_place_in_recep": "Coolable"}
"""The ALFRED affordance list (``VAL_ACTION_OBJECTS``) the target object of those tasks must be in."""
LAMP = "DeskLamp"
"""The light of ``look_at_obj_in_light`` (a toggleable object standing on a receptacle)."""
LAMP_HOLDERS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "TVStand")
"""Receptacle classes a desk lamp is put on."""
GENERATOR_VERSION = 1
"""Bumped whenever :func:`generate_scene` changes its output (names the cache folder)."""

ALFWORLD_DIR = Path(alfworld.__file__).resolve().parent
LAYOUTS_DIR = ALFWORLD_DIR / "gen" / "layouts"
DOMAIN_FILE = ALFWORLD_DIR / "data" / "alfred.pddl"
GRAMMAR_FILE = ALFWORLD_DIR / "data" / "alfred.twl2"

STATIC_RECEPTACLES: frozenset[str] = frozenset(alfred_constants.RECEPTACLES) - frozenset(
    alfred_constants.MOVABLE_RECEPTACLES
)
"""Receptacle classes that stay in place (movable ones, e.g. bowls, are objects here)."""

EXTRA_INSTANCES = {"CounterTop": 2, "StoveBurner": 4, "Shelf": 3, "SideTable": 2}
"""Instances added for a static receptacle class the room lists but its layout file lacks (default 1)."""

OBJECT_PROPERTIES = {"Cleanable": "cleanable", "Heatable": "heatable", "Coolable": "coolable", "Sliceable": "sliceable",
                     "Toggleable": "toggleable"}
"""ALFRED's object affordance lists (``VAL_ACTION_OBJECTS``) → the PDDL predicates of ``alfred.pddl``."""

NUM_CANDIDATES = 4
"""Candidates per dataset state: the actor's action and three other admissible commands."""


# -- scene generation ----------------------------------------------------------------------
@dataclass(frozen=True)
class Scene:
    """One generated game."""

    floorplan: int
    seed: int
    object_target: str
    parent_target: str
    task_description: str
    game: dict[str, Any] = field(repr=False)
    traj_data: dict[str, Any] = field(repr=False)
    task_type: str = TASK_TYPE
    toggle_target: str = ""
    typed: bool = False
    """Made by ``generate_scene(..., task_type=…)`` (the task id names the type) rather than the
    original pick & place form (``alfworld-pick-place``)."""

    @property
    def task(self) -> str:
        """The task id: ``FloorPlan{floorplan}-s{seed}``, followed by ``-{task_type}`` for a typed scene."""
        return f"FloorPlan{self.floorplan}-s{self.seed}" + (f"-{self.task_type}" if self.typed else "")


def mangle(alfred_id: str) -> str:
    """An ALFRED object id as a PDDL name (the character mangling ALFWorld's games use)."""
    for char, word in (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_")):
        alfred_id = alfred_id.replace(char, word)
    return alfred_id


def available_floorplans() -> list[int]:
    """Floorplan numbers with both an objects and an openable layout file in the wheel, ascending."""
    numbers = []
    for path in LAYOUTS_DIR.glob("FloorPlan*-objects.json"):
        number = path.name[len("FloorPlan") : -len("-objects.json")]
        if number.isdigit() and (LAYOUTS_DIR / f"FloorPlan{number}-openable.json").exists():
            numbers.append(int(number))
    if not numbers:
        raise FileNotFoundError(f"no FloorPlan layout files in {LAYOUTS_DIR}")
    return sorted(numbers)


def choose_scenes(num_scenes: int, seed: int) -> list[tuple[int, int]]:
    """``num_scenes`` ``(floorplan, scene seed)`` pairs on distinct floorplans, drawn from ``seed``."""
    floorplans = available_floorplans()
    if not 1 <= num_scenes <= len(floorplans):
        raise ValueError(f"num_scenes must be in 1..{len(floorplans)} (distinct floorplans), got {num_scenes}")
    rng = random.Random(f"alfworld-scenes/{seed}")
    return [(fp, rng.randrange(10**6)) for fp in rng.sample(floorplans, num_scenes)]


@functools.lru_cache(maxsize=None)
def floorplans_for(task_type: str) -> tuple[int, ...]:
    """The floorplans whose room has what ``task_type`` needs (a microwave, fridge or sink basin for heat,
    cool and clean; a desk lamp and a receptacle to stand it on for the light task), ascending."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; expected one of {', '.join(TASK_TYPES)}")
    found = []
    for floorplan in available_floorplans():
        room = set(json.loads((LAYOUTS_DIR / f"FloorPlan{floorplan}-objects.json").read_text()))
        if task_type in TOOLS:
            cls = TOOLS[task_type]
            treated = set(alfred_constants.VAL_ACTION_OBJECTS[TREATMENTS[task_type]])
            if cls not in room or not room & treated:
                continue
        if task_type == "look_at_obj_in_light" and (LAMP not in room or not room & set(LAMP_HOLDERS)):
            continue
        found.append(floorplan)
    return tuple(found)


def choose_typed_scenes(per_type: int, seed: int, solved_within: int | None = None,
                        game_root: Path | None = None) -> list[tuple[int, int, str]]:
    """``per_type`` ``(floorplan, scene seed, task type)`` triples of each of :data:`TASK_TYPES`, drawn from
    ``seed``, on distinct floorplans within a type (among :func:`floorplans_for` it).

    Listed in blocks of three scenes of one type, the types in turn (``TASK_TYPES[(j // 3) % 6]`` at
    position ``j``), so that a split cycle of three gives every split the same number of each type.
    A seed whose scene cannot be made (:func:`generate_scene` raises ``ValueError``) is drawn again, and
    so is one the handcoded expert does not solve within ``solved_within`` steps, when given
    (:func:`expert_steps`: seconds per scene, so the dataset pins the result).
    """
    if per_type < 1:
        raise ValueError(f"per_type must be at least 1, got {per_type}")
    drawn: dict[str, list[tuple[int, int, str]]] = {}
    for task_type in TASK_TYPES:
        floorplans = floorplans_for(task_type)
        if per_type > len(floorplans):
            raise ValueError(f"{task_type}: {len(floorplans)} floorplans fit, {per_type} asked (distinct per type)")
        rng = random.Random(f"alfworld-typed-scenes/{seed}/{task_type}")
        drawn[task_type] = []
        for floorplan in rng.sample(floorplans, per_type):
            drawn[task_type].append(
                (floorplan, _workable_seed(floorplan, task_type, rng, solved_within, game_root), task_type))
    blocks = [drawn[t][i : i + 3] for i in range(0, per_type, 3) for t in TASK_TYPES]
    return [scene for block in blocks for scene in block]


def _workable_seed(floorplan: int, task_type: str, rng: random.Random, solved_within: int | None,
                   game_root: Path | None) -> int:
    """The first seed drawn by ``rng`` whose ``task_type`` scene on ``floorplan`` can be made (and that the
    expert solves within ``solved_within`` steps, when given)."""
    for _ in range(100):
        seed = rng.randrange(10**6)
        try:
            generate_scene(floorplan, seed, task_type)
        except ValueError:
            continue
        if solved_within is not None:
            steps = expert_steps((floorplan, seed, task_type), solved_within, game_root)
            if steps is None:
                continue
        return seed
    raise ValueError(f"FloorPlan{floorplan}: no {task_type} scene in 100 seeds")


def expert_steps(scene: tuple[int, int, str], horizon: int, game_root: Path | None = None) -> int | None:
    """How many steps the handcoded expert takes to solve the typed ``scene`` from reset, or ``None`` when
    it has not within ``horizon`` steps."""
    env = ALFWorld([scene], horizon=horizon, game_root=game_root)
    env.reset(env.tasks[0])
    reward = 0.0
    while not env.done:
        reward = env.step(env.reference_action()).reward
    return env.steps if reward > 0 else None


def draw_scene(seed: int, task_type: str, solved_within: int | None = None, game_root: Path | None = None) -> Scene:
    """The ``task_type`` scene of a secret ``seed``: floorplan drawn by ``random.Random(seed)`` among
    :func:`floorplans_for` the type, scene seed ``seed``; then further draws (floorplan and a 63-bit seed)
    while a scene cannot be made or, with ``solved_within``, the expert does not solve it within that many
    steps (:func:`expert_steps`)."""
    rng = random.Random(seed)
    floorplans = floorplans_for(task_type)
    scene_seed = seed
    for _ in range(100):
        floorplan = rng.choice(floorplans)
        try:
            scene = generate_scene(floorplan, scene_seed, task_type)
        except ValueError:
            scene = None
        if scene is not None and (solved_within is None or expert_steps(
                (floorplan, scene_seed, task_type), solved_within, game_root) is not None):
            return scene
        scene_seed = rng.randrange(2**63)
    raise ValueError(f"no {task_type} scene drawn from seed {seed}")


def _coordinate(rng: random.Random) -> str:
    return f"{rng.uniform(-3, 3):+06.2f}"


def _receptacle_class(alfred_id: str) -> str:
    if alfred_id.endswith("|SinkBasin"):
        return "SinkBasin"
    if alfred_id.endswith("|BathtubBasin"):
        return "BathtubBasin"
    return alfred_id.split("|")[0]


def _new_id(cls: str, rng: random.Random) -> str:
    """A fresh ALFRED-style id (basins carry their parent's name first, as in ALFRED)."""
    position = "|".join(_coordinate(rng) for _ in range(3))
    if cls in ("SinkBasin", "BathtubBasin"):
        return f"{cls[: -len('Basin')]}|{position}|{cls}"
    return f"{cls}|{position}"


def _location(x: float, z: float, rotation: int, horizon: int) -> str:
    """An ALFRED location name: grid cell (0.25 m), rotation (quarter turns), camera horizon."""
    return mangle(f"loc|{round(x / 0.25)}|{round(z / 0.25)}|{round(rotation / 90) % 4}|{horizon}")


Receptacles = list[tuple[str, str, str]]
"""(PDDL name, class, location) of each receptacle instance."""
Objects = list[tuple[str, str, int]]
"""(PDDL name, class, index of the receptacle it is in) of each object instance."""


def _own_locations(receptacles: Receptacles) -> Receptacles:
    """``receptacles`` with a location of its own each: a receptacle whose pose another one shares
    (drawers stacked under one counter) gets the next free camera horizon.  In a shared location
    "go to" the other receptacle is not admissible, and the handcoded expert, which plans that move,
    falls back to "look" and random commands."""
    used: set[str] = set()
    out: Receptacles = []
    for name, cls, loc in receptacles:
        base, horizon = loc.rsplit("_bar_", 1)
        value = int(horizon.replace("_minus_", "-"))
        while loc in used:
            value += 1
            loc = f"{base}_bar_{mangle(str(value))}"
        used.add(loc)
        out.append((name, cls, loc))
    return out


def _goal(task_type: str, rng: random.Random, objects: Objects, receptacles: Receptacles,
          floorplan: int) -> tuple[str, str, str]:
    """``(object_target, parent_target, toggle_target)`` of a ``task_type`` goal that does not hold yet;
    for the light task and pick two it adds the desk lamp or a second target object to ``objects``."""
    holds = alfred_constants.VAL_RECEPTACLE_OBJECTS
    present = sorted({cls for _, cls, _ in receptacles})
    if task_type == "look_at_obj_in_light":
        stands = [i for i, (_, rcls, _) in enumerate(receptacles) if rcls in LAMP_HOLDERS]
        targets = sorted({cls for _, cls, _ in objects} - {LAMP})
        if not stands or not targets:
            raise ValueError(f"FloorPlan{floorplan}: no receptacle for a {LAMP} or no object to look at")
        objects.append((mangle(_new_id(LAMP, rng)), LAMP, rng.choice(stands)))
        return rng.choice(targets), "", LAMP
    goals = [
        (ocls, rcls)
        for ocls in sorted({cls for _, cls, _ in objects})
        for rcls in present
        if ocls in holds.get(rcls, ())
        and not any(o == ocls and receptacles[r][1] == rcls for _, o, r in objects)
    ]
    if task_type in TOOLS:
        tool = TOOLS[task_type]
        if tool not in present:
            raise ValueError(f"FloorPlan{floorplan}: no {tool} for {task_type}")
        treated = alfred_constants.VAL_ACTION_OBJECTS[TREATMENTS[task_type]]
        goals = [(o, r) for o, r in goals if o in treated and r != tool]
    elif task_type == "pick_two_obj_and_place":
        # a second instance must have somewhere else to be
        goals = [(o, r) for o, r in goals
                 if any(o in holds.get(rcls, ()) for _, rcls, _ in receptacles if rcls != r)]
    if not goals:
        raise ValueError(f"FloorPlan{floorplan}: every possible {task_type} goal already holds")
    object_target, parent_target = rng.choice(goals)
    if task_type == "pick_two_obj_and_place":
        others = [i for i, (_, rcls, _) in enumerate(receptacles)
                  if rcls != parent_target and object_target in holds.get(rcls, ())]
        while sum(cls == object_target for _, cls, _ in objects) < 2:
            objects.append((mangle(_new_id(object_target, rng)), object_target, rng.choice(others)))
    return object_target, parent_target, ""


def generate_scene(floorplan: int, seed: int, task_type: str | None = None) -> Scene:
    """Build the game of ``(floorplan, seed)``; see the module docstring.

    ``task_type=None``: the original ``pick_and_place_simple`` scene (``alfworld-pick-place``'s).
    A type of :data:`TASK_TYPES`: a typed scene of that type, drawn from its own RNG
    ``random.Random(f"alfworld-scene/{task_type}/{floorplan}/{seed}")``.
    Raises ``ValueError`` when the room has no such goal.
    """
    objects_file = LAYOUTS_DIR / f"FloorPlan{floorplan}-objects.json"
    receptacles_file = LAYOUTS_DIR / f"FloorPlan{floorplan}-openable.json"
    if not objects_file.exists() or not receptacles_file.exists():
        raise FileNotFoundError(f"no layout for FloorPlan{floorplan} in {LAYOUTS_DIR}")
    if task_type is not None and task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; expected one of {', '.join(TASK_TYPES)}")
    typed = task_type is not None
    kind = task_type or TASK_TYPE
    rng = random.Random(
        f"alfworld-scene/{task_type}/{floorplan}/{seed}" if typed else f"alfworld-scene/{floorplan}/{seed}")
    room_classes = set(json.loads(objects_file.read_text()))
    # Despite its name, the "openable" file lists every receptacle instance with its interaction pose.
    posed = json.loads(receptacles_file.read_text())

    receptacles: Receptacles = []
    for alfred_id in sorted(posed):
        cls = _receptacle_class(alfred_id)
        if cls in STATIC_RECEPTACLES:
            x, z, rotation, horizon = posed[alfred_id]
            receptacles.append((mangle(alfred_id), cls, _location(x, z, rotation, horizon)))
    present = {cls for _, cls, _ in receptacles}
    for cls in sorted(room_classes & STATIC_RECEPTACLES - present):
        for _ in range(EXTRA_INSTANCES.get(cls, 1)):
            pose = (rng.randint(-12, 12) * 0.25, rng.randint(-12, 12) * 0.25, 90 * rng.randint(0, 3), 30)
            receptacles.append((mangle(_new_id(cls, rng)), cls, _location(*pose)))
    if typed:
        receptacles = _own_locations(receptacles)

    holds = alfred_constants.VAL_RECEPTACLE_OBJECTS
    objects: Objects = []
    for cls in sorted(room_classes - STATIC_RECEPTACLES):
        if cls not in alfred_constants.OBJECTS:
            continue
        holders = [i for i, (_, rcls, _) in enumerate(receptacles) if cls in holds.get(rcls, ())]
        for _ in range(rng.randint(1, 2) if holders else 0):
            objects.append((mangle(_new_id(cls, rng)), cls, rng.choice(holders)))
    if not objects:
        raise ValueError(f"FloorPlan{floorplan}: no pickupable object fits any receptacle")

    object_target, parent_target, toggle_target = _goal(kind, rng, objects, receptacles, floorplan)
    start = _location(rng.randint(-12, 12) * 0.25, rng.randint(-12, 12) * 0.25, 90 * rng.randint(0, 3), 30)
    while typed and start in {loc for _, _, loc in receptacles}:
        # Starting at a receptacle turns the intro into "You are facing the …", which the expert cannot parse.
        start = _location(rng.randint(-12, 12) * 0.25, rng.randint(-12, 12) * 0.25, 90 * rng.randint(0, 3), 30)

    object_classes = sorted({cls for _, cls, _ in objects})
    declarations = ["agent1 - agent"]
    declarations += [f"{t}Type - otype" for t in sorted(set(alfred_constants.OBJECTS) - STATIC_RECEPTACLES)]
    declarations += [f"{t}Type - rtype" for t in sorted(STATIC_RECEPTACLES)]
    declarations += [f"{name} - object" for name, _, _ in objects]
    declarations += [f"{name} - receptacle" for name, _, _ in receptacles]
    declarations += [f"{loc} - location" for loc in sorted({loc for _, _, loc in receptacles} | {start})]
    facts = [f"(receptacleType {name} {cls}Type)" for name, cls, _ in receptacles]
    facts += [f"(objectType {name} {cls}Type)" for name, cls, _ in objects]
    for rcls in sorted({cls for _, cls, _ in receptacles}):
        facts += [f"(canContain {rcls}Type {ocls}Type)" for ocls in object_classes if ocls in holds.get(rcls, ())]
    for name, cls, _ in objects:
        facts.append(f"(pickupable {name})")
        if cls in alfred_constants.MOVABLE_RECEPTACLES:
            facts.append(f"(isReceptacleObject {name})")
        facts += [f"({pred} {name})" for key, pred in OBJECT_PROPERTIES.items()
                  if cls in alfred_constants.VAL_ACTION_OBJECTS[key]]
    facts += [f"(openable {name})" for name, cls, _ in receptacles if cls in alfred_constants.OPENABLE_CLASS_LIST]
    facts.append(f"(atLocation agent1 {start})")
    facts += [f"(inReceptacle {name} {receptacles[r][0]})" for name, _, r in objects]
    facts += [f"(receptacleAtLocation {name} {loc})" for name, _, loc in receptacles]
    facts += [f"(objectAtLocation {name} {receptacles[r][2]})" for name, _, r in objects]
    params = {"obj": object_target, "recep": parent_target, "toggle": toggle_target}
    goal = goal_library.gdict[kind]["pddl"].format(**params).replace("#", "-")
    indent = "\n        "
    problem = (
        f"(define (problem plan_fp{floorplan}_s{seed})\n(:domain alfred)\n"
        f"(:objects{indent}{indent.join(declarations)}\n        )\n"
        f"(:init{indent}{indent.join(facts)}\n        )\n{goal}"
    )
    template = rng.choice(goal_library.gdict[kind]["templates"])
    description = template.format(**{k: v.lower() for k, v in params.items()})
    traj_data = {
        "task_type": kind,
        "pddl_params": {
            "object_target": object_target,
            "parent_target": parent_target,
            "toggle_target": toggle_target,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"floor_plan": f"FloorPlan{floorplan}", "random_seed": seed},
    }
    game = {
        "pddl_domain": DOMAIN_FILE.read_text(),
        "grammar": GRAMMAR_FILE.read_text().replace("UNKNOWN GOAL", description),
        "pddl_problem": problem,
        "solvable": True,
        "walkthrough": None,
    }
    return Scene(floorplan, seed, object_target, parent_target, description, game, traj_data,
                 task_type=kind, toggle_target=toggle_target, typed=typed)


def cache_dir() -> Path:
    """Where generated game files live: ``$QVAL_ALFWORLD_CACHE`` or ``~/.cache/qval/alfworld``."""
    return Path(os.environ.get("QVAL_ALFWORLD_CACHE") or Path.home() / ".cache" / "qval" / "alfworld")


def write_game(scene: Scene, root: Path | None = None) -> Path:
    """Write ``scene``'s game files under ``root`` (default :func:`cache_dir`); return ``game.tw-pddl``.

    Files that are missing or differ from the generated content are (re)written.
    """
    folder = (root or cache_dir()) / f"v{GENERATOR_VERSION}" / scene.task
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in (("traj_data.json", scene.traj_data), ("game.tw-pddl", scene.game)):
        path = folder / name
        text = json.dumps(data, sort_keys=True)
        if not path.exists() or path.read_text() != text:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
    return folder / "game.tw-pddl"


# -- parse memoization ------------------------------------------------------------------------
_ORIGINALS: dict[str, Callable[..., Any]] = {
    "parse_and_convert": tw_textgen._parse_and_convert,
    "parse_conjunctive_query": Rule.parse_conjunctive_query.__func__,  # type: ignore[attr-defined]
    "pddl2sas": fast_downward.pddl2sas,
    "copy_context": tw_textgen.copy_context,
}


def _memoized_parse_and_convert(text: str, **kwargs: Any) -> Any:
    # derive() sets attributes on the symbols it gets, so each caller gets its own copy.
    return copy.deepcopy(_cached_parse_and_convert(text, tuple(sorted(kwargs.items()))))


@functools.lru_cache(maxsize=None)
def _cached_parse_and_convert(text: str, kwargs: tuple[tuple[str, Any], ...]) -> Any:
    return _ORIGINALS["parse_and_convert"](text, **dict(kwargs))


@functools.lru_cache(maxsize=None)
def _memoized_conjunctive_query(cls: type[Rule], expr: str) -> Rule:
    return _ORIGINALS["parse_conjunctive_query"](cls, expr)


def _shallow_copy_context(context: dict[str, Any]) -> dict[str, Any]:
    """TextWorld's ``copy_context`` without its deep copies: the text generator copies a context for every
    symbol it derives, and only ever adds keys to the copy's ``variables`` and ``mapping`` (entity infos and
    placeholders are never changed), so new dicts over the same entries give the same text.  The deep copies
    were half the time of an ALFWorld step (measured in a dataset build)."""
    return {**context, "variables": dict(context["variables"]), "mapping": dict(context["mapping"])}


@functools.lru_cache(maxsize=64)
def _memoized_pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
    """The translation of ``problem`` to SAS, from this process's memo, else from the translation cache on disk
    (:func:`cache_dir`, ``sas/``: a reset of a game any process of this machine loaded before costs no
    translation), else translated and stored there."""
    key = hashlib.sha256("\0".join((metadata.version("fast-downward-textworld"), str(optimize), domain,
                                     problem)).encode()).hexdigest()
    path = cache_dir() / "sas" / f"{key}.pickle"
    try:
        return pickle.loads(path.read_bytes())  # a cache this machine's processes wrote (as the game files)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        pass
    translated = _ORIGINALS["pddl2sas"](domain, problem, verbose=verbose, optimize=optimize)
    partial = path.with_name(f".{key}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(pickle.dumps(translated, protocol=pickle.HIGHEST_PROTOCOL))
        partial.replace(path)  # whole or not at all: another process may read it now
    except OSError:  # a cache this process cannot write: translated again next time, as before the cache
        partial.unlink(missing_ok=True)
    return translated


def set_parse_memoization(enabled: bool) -> None:
    """Cache (``True``) or stop caching (``False``) the parsing TextWorld repeats, and the deep copies
    it makes; process-wide.

    On every step TextWorld re-parses the same grammar snippets and fact queries with tatsu,
    deep-copies a context for every symbol of its text (:func:`_shallow_copy_context`), and every
    reset translates the same PDDL problem to SAS twice.  Caching the three parses (text templates,
    conjunctive queries, ``fast_downward.pddl2sas``, whose translations are also kept on disk for
    every process: :func:`_memoized_pddl2sas`) and copying contexts shallowly makes steps and resets
    several times faster and leaves every observation, command and reward unchanged (tested).
    """
    if enabled:
        tw_textgen._parse_and_convert = _memoized_parse_and_convert
        tw_textgen.copy_context = _shallow_copy_context
        Rule.parse_conjunctive_query = classmethod(_memoized_conjunctive_query)  # type: ignore[assignment]
        fast_downward.pddl2sas = _memoized_pddl2sas
    else:
        tw_textgen._parse_and_convert = _ORIGINALS["parse_and_convert"]
        tw_textgen.copy_context = _ORIGINALS["copy_context"]
        Rule.parse_conjunctive_query = classmethod(_ORIGINALS["parse_conjunctive_query"])  # type: ignore[assignment]
        fast_downward.pddl2sas = _ORIGINALS["pddl2sas"]


# -- the adapter -----------------------------------------------------------------------------
_LIBDOWNWARD_LOADS = [0]
"""How many times a problem was loaded into libdownward in this process (invalidates state ids)."""


@dataclass
class _DirectState:
    """Everything a step changes, for a restore without replay (valid while ``loads`` is current)."""

    loads: int
    state_id: int
    pddl_facts: _Facts
    operators: dict[int, Any]
    game_state: Any
    prev_game_state: Any
    moves: int
    last_action: Any
    prev_command: str
    expert: Any
    expert_random: Any
    feedback: str


class ALFWorld(Environment):
    """ALFWorld text games on generated scenes; see the module docstring.

    ``scenes``: ``(floorplan, seed)`` pairs (the original pick & place scenes) or ``(floorplan, seed,
    task_type)`` triples (typed scenes of :data:`TASK_TYPES`), not mixed.
    """

    name = "alfworld"

    def __init__(
        self,
        scenes: Sequence[tuple[int, int]] | Sequence[tuple[int, int, str]],
        horizon: int = 40,
        *,
        restore_mode: str = "direct",
        memoize_parsing: bool = True,
        game_root: Path | None = None,
        solved_within: int | None = None,
    ) -> None:
        super().__init__(horizon)
        if restore_mode not in ("direct", "replay"):
            raise ValueError(f"restore_mode must be 'direct' or 'replay', got {restore_mode!r}")
        if not scenes:
            raise ValueError("at least one scene is needed")
        self.restore_mode = restore_mode
        self.solved_within = solved_within
        """Hidden typed scenes are drawn again until the expert solves them within this many steps."""
        if memoize_parsing:
            set_parse_memoization(True)
        if len({len(scene) for scene in scenes}) != 1:
            raise ValueError("scenes must be all (floorplan, seed) pairs or all (floorplan, seed, task_type) triples")
        self.typed = len(scenes[0]) == 3
        """Typed scenes (the six task types) rather than the original pick & place ones."""
        self.reference_policy = (
            "ALFWorld handcoded expert (AlfredExpert, expert_type=handcoded), told of a put as 'put' "
            "(MoveTrackingExpert)" if self.typed else "ALFWorld handcoded expert (AlfredExpert, expert_type=handcoded)"
        )
        self.scenes: dict[str, Scene | None] = {
            s.task: s for s in (generate_scene(*scene) for scene in scenes)
        }
        self._task_types = {task: s.task_type for task, s in self.scenes.items() if s is not None}
        if len(self.scenes) != len(scenes):
            raise ValueError(f"duplicate scenes in {list(scenes)}")
        self._game_root = game_root
        self._games: dict[str, Path] = {}
        self._envs: dict[str, AlfredExpert] = {}
        self._env: AlfredExpert | None = None
        self._state: Any = None
        self._intro = ""
        self._expert_random: Any = None
        self._direct: dict[tuple[str, ...], _DirectState] = {}
        self.restore_counts = {"direct": 0, "replay": 0}
        """How many restores set a kept state directly and how many replayed."""

    # -- Environment -------------------------------------------------------------------
    @property
    def tasks(self) -> Sequence[str]:
        return tuple(self.scenes)

    def config(self) -> dict[str, Any]:
        scenes: list[dict[str, Any]] = [
            {"task": task, "hidden": True} if task in self.hidden else
            {"task": s.task, "floorplan": s.floorplan, "seed": s.seed, "object_target": s.object_target,
             "parent_target": s.parent_target, "task_description": s.task_description}
            for task, s in self.scenes.items()
        ]
        if self.typed:  # the original pick & place config stays as it was (its datasets keep their fingerprints)
            for entry in scenes:
                entry["task_type"] = self._task_types[entry["task"]]
                scene = self.scenes[entry["task"]]
                if scene is not None and scene.toggle_target:
                    entry["toggle_target"] = scene.toggle_target
        hidden_rule = (
            f"task ids 'hidden-{{position}}': draw_scene(seed, task type of the position, solved_within="
            f"{self.solved_within}), seed derived from the maintainer's secret: floorplan drawn by random.Random(seed) "
            "among those that fit the type, drawn again while the expert does not solve the game within that many steps"
            if self.typed else
            "task ids 'hidden-{position}': generate_scene(floorplan, seed) with a seed derived "
            "from the maintainer's secret and the floorplan drawn by random.Random(seed)"
        )
        return {
            "alfworld_version": metadata.version("alfworld"),
            "textworld_version": metadata.version("textworld"),
            "fast_downward_textworld_version": metadata.version("fast-downward-textworld"),
            **({"task_types": list(TASK_TYPES)} if self.typed else {"task_type": TASK_TYPE}),
            # the name it had when the datasets were published (a fingerprint covers it): now adapter.generate_scene
            "scene_generator": f"qval.envs.alfworld.generate_scene v{GENERATOR_VERSION} from the wheel's FloorPlan layouts",
            "scenes": scenes,
            **({"hidden_scenes": hidden_rule} if self.hidden else {}),
            "horizon": self.horizon,
            "reward": "1 when the goal holds (the episode ends), else 0",
            "actions": "the admissible commands",
            "candidates": (
                f"the actor's action and {NUM_CANDIDATES - 1} other admissible commands drawn without replacement "
                "by random.Random(f'{seed}/candidates/{trajectory}/{step}'), in admissible-command order"
            ),
            "observation": "scene description and task, last command and feedback, admissible commands",
        }

    def _reset(self, task: str) -> None:
        env = self._load(task)
        self._expert_random = random.Random(f"alfworld-expert/{task}").getstate()
        self._state = self._with_expert_random(env.reset)
        _LIBDOWNWARD_LOADS[0] += 1
        self._intro = self._state.feedback.strip()
        self._direct = {}

    def _step(self, action: str) -> tuple[float, bool]:
        env = self._env
        assert env is not None
        state, reward, done = self._with_expert_random(lambda: _step_expert(env, action))
        self._state = state
        return float(reward), bool(done)

    def observation(self) -> str:
        parts = [self._intro]
        if self._history:
            parts.append(f"Last command: {self._history[-1]}\nFeedback: {self._state.feedback.strip()}")
        parts.append("Admissible commands:\n" + "\n".join(f"- {c}" for c in self.candidates()))
        return "\n\n".join(parts)

    def candidates(self) -> list[str]:
        return list(self._state["admissible_commands"])

    def observation_image(self) -> Image.Image:
        """A schematic render of the simulator state, not THOR's egocentric camera (which cannot run here):
        the task line, the receptacle the agent stands at (a closed one shows nothing of its contents), the
        objects it can see there and what it holds, with their examined states, and the room's receptacles
        with the current one highlighted (:mod:`qval.envs.alfworld.image`)."""
        return render_view(self.image_key())

    def image_key(self) -> View:
        """What :meth:`observation_image` draws, read from the engine's facts (equal keys, equal pixels)."""
        lines = [line for line in self._intro.splitlines() if line.startswith("Your task is to:")]
        if len(lines) != 1:
            raise RuntimeError(f"{self.task}: the intro has {len(lines)} 'Your task is to:' lines, expected one")
        facts = ((fact.name, tuple(arg.name for arg in fact.arguments)) for fact in self._state["facts"])
        return view_of(facts, lines[0])

    def instance(self) -> str:
        """The episode's introduction (the receptacles of the scene and the task), which starts every observation."""
        return self._intro

    def task_type(self, task: str) -> str:
        """The scene's ALFWorld task type (also of a hidden scene: the type of its position)."""
        return self._task_types.get(task, TASK_TYPE)

    def reference_action(self) -> str:
        """The handcoded expert's next command."""
        return str(self._state["extra.expert_plan"][0])

    def sample_candidates(self, actor_action: str, rng: random.Random) -> list[str]:
        """The actor's action and up to three other admissible commands drawn by ``rng``, in admissible order."""
        commands = self.candidates()
        others = [c for c in commands if c != actor_action]
        picked = set(rng.sample(others, min(NUM_CANDIDATES - 1, len(others))))
        return [c for c in commands if c == actor_action or c in picked]

    def snapshot(self) -> Snapshot:
        """The current state; with ``restore_mode="direct"`` it is kept too, so that even its first restore in this
        episode is direct (a Best-of-N step or a labelling rollout restores the state it is in, not a replay)."""
        snap = super().snapshot()
        if self.restore_mode == "direct":
            self._direct[snap.history] = self._capture()
        return snap

    def restore(self, snapshot: Snapshot) -> None:
        """Set a state kept in this episode directly (``restore_mode="direct"``); otherwise replay."""
        direct = self._direct.get(snapshot.history) if self.restore_mode == "direct" else None
        if direct is None or direct.loads != _LIBDOWNWARD_LOADS[0] or self._task != snapshot.task:
            super().restore(snapshot)
            self.restore_counts["replay"] += 1
            if self.restore_mode == "direct":
                self._direct[snapshot.history] = self._capture()
            return
        self._set(direct)
        self.restore_counts["direct"] += 1
        self._history = list(snapshot.history)
        self._terminated = bool(self._state["won"])

    # -- helpers -----------------------------------------------------------------------
    def hide_tasks(self, seeds: dict[str, int | None]) -> None:
        """Rename each task in ``seeds`` to ``hidden-{position}`` and play the scene drawn from its seed."""
        unknown = set(seeds) - set(self.scenes)
        if unknown:
            raise KeyError(f"unknown tasks {sorted(unknown)}")
        scenes: dict[str, Scene | None] = {}
        hidden = set(self.hidden)
        for j, (task, scene) in enumerate(self.scenes.items()):
            if task not in seeds:
                scenes[task] = scene
                continue
            seed = seeds[task]
            new = f"hidden-{j}"
            if self.typed:
                self._task_types[new] = self._task_types.pop(task)
                scenes[new] = None if seed is None else draw_scene(
                    seed, self._task_types[new], self.solved_within, self._game_root)
            else:
                scenes[new] = None if seed is None else generate_scene(
                    random.Random(seed).choice(available_floorplans()), seed)
            hidden.add(new)
            self._games.pop(task, None)
            self._envs.pop(task, None)
        self.scenes = scenes
        self.hidden = frozenset(hidden)

    def game_file(self, task: str) -> Path:
        """The scene's ``game.tw-pddl`` (written on first use; see :func:`write_game`)."""
        if task not in self._games:
            scene = self.scenes[task]
            if scene is None:
                raise RuntimeError(f"task {task} is drawn from the test-split secret, which this build lacks")
            self._games[task] = write_game(scene, self._game_root)
        return self._games[task]

    def _load(self, task: str) -> AlfredExpert:
        """The task's game, loaded on first use (a load, like a reset, replaces libdownward's problem)."""
        if task not in self._envs:
            infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=True, extras=["gamefile", "expert_plan"])
            expert = MoveTrackingExpert if self.typed else AlfredExpert
            env = expert(AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False)),
                         expert_type=AlfredExpertType.HANDCODED)
            env.load(str(self.game_file(task)))
            _LIBDOWNWARD_LOADS[0] += 1
            self._envs[task] = env
        self._env = self._envs[task]
        return self._env

    def _with_expert_random(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` with :mod:`random` on the episode's expert state; keep the caller's state."""
        outer = random.getstate()
        random.setstate(self._expert_random)
        try:
            return call()
        finally:
            self._expert_random = random.getstate()
            random.setstate(outer)

    def _pddl_env(self) -> PddlEnv:
        env: Any = self._env
        while not isinstance(env, PddlEnv):
            env = env._wrapped_env
        return env

    def _capture(self) -> _DirectState:
        env = self._env
        assert env is not None
        pddl = self._pddl_env()
        ps = pddl._pddl_state
        return _DirectState(
            loads=_LIBDOWNWARD_LOADS[0],
            state_id=_libdownward_state_id(pddl),
            pddl_facts=_copy_facts(ps),
            operators=dict(ps._operators),
            game_state=pddl.state,
            prev_game_state=pddl.prev_state,
            moves=pddl._moves,
            last_action=pddl._last_action,
            prev_command=env.prev_command,
            expert=copy.deepcopy(env._handcoded_expert),
            expert_random=self._expert_random,
            feedback=self._state.feedback,
        )

    def _set(self, direct: _DirectState) -> None:
        env = self._env
        assert env is not None
        pddl = self._pddl_env()
        ps = pddl._pddl_state
        _set_libdownward_state_id(pddl, direct.state_id)
        facts = _copy_facts(direct.pddl_facts)
        ps._facts, ps._vars_by_name, ps._vars_by_type, ps._var_counts = (
            facts._facts, facts._vars_by_name, facts._vars_by_type, facts._var_counts)
        ps._operators = dict(direct.operators)
        pddl.state, pddl.prev_state = direct.game_state, direct.prev_game_state
        pddl._moves, pddl._last_action = direct.moves, direct.last_action
        env.state, env.prev_command = direct.game_state, direct.prev_command
        env._handcoded_expert = copy.deepcopy(direct.expert)
        self._expert_random = direct.expert_random
        self._state = direct.game_state


class MoveTrackingExpert(AlfredExpert):
    """ALFWorld's handcoded expert, told of a put in the words its state tracking looks for.

    alfworld 0.4.2's grammar writes a put as "move {o} to {r}" and the expert plans it so, but its
    state tracking (``BasePolicy.update_state_tracking``) recognises a put by "put" in the last
    command: after a put it still believes it holds the object, so it tries to take it back and
    never finishes ``pick_two_obj_and_place`` (nor recovers from putting an object in the wrong
    place).  This wrapper hands the expert the last command with "move" spelled "put"; the game
    itself sees the commands unchanged.  Used for typed scenes (``alfworld-all-types``); the original
    pick & place datasets keep the unmodified expert, so their labels stay as built.
    """

    def _gather_infos(self) -> None:
        command = self.prev_command
        if command.startswith("move "):
            self.prev_command = "put " + command[len("move "):]
        try:
            super()._gather_infos()
        finally:
            self.prev_command = command


class _FactTables(Protocol):
    _facts: defaultdict[Any, set[Any]]
    _vars_by_name: dict[str, Any]
    _vars_by_type: defaultdict[Any, set[Any]]
    _var_counts: Counter[str]


@dataclass
class _Facts:
    """A copy of the fact tables of a TextWorld ``State`` (their propositions are immutable values)."""

    _facts: defaultdict[Any, set[Any]]
    _vars_by_name: dict[str, Any]
    _vars_by_type: defaultdict[Any, set[Any]]
    _var_counts: Counter[str]


def _copy_facts(tables: _FactTables) -> _Facts:
    """Copy the tables the way ``textworld.logic.State.copy`` does: new containers, shared facts."""
    return _Facts(
        defaultdict(set, {k: set(v) for k, v in tables._facts.items()}),
        dict(tables._vars_by_name),
        defaultdict(set, {k: set(v) for k, v in tables._vars_by_type.items()}),
        Counter(tables._var_counts),
    )


def _step_expert(env: AlfredExpert, command: str) -> tuple[Any, float, bool]:
    """``env.step(command)``; when the expert gives up, its plan stays ALFWorld's default ``["look"]``."""
    try:
        return env.step(command)
    except HandCodedAgentFailed:
        return env.state, float(env.state["won"]), bool(env.state["done"])


def _libdownward(pddl: PddlEnv) -> Any:
    lib = pddl.downward_lib
    lib.get_state_id.restype = ctypes.c_int
    lib.get_state_id.argtypes = []
    lib.set_state_id.restype = None
    lib.set_state_id.argtypes = [ctypes.c_int]
    return lib


def _libdownward_state_id(pddl: PddlEnv) -> int:
    return int(_libdownward(pddl).get_state_id())


def _set_libdownward_state_id(pddl: PddlEnv, state_id: int) -> None:
    _libdownward(pddl).set_state_id(state_id)


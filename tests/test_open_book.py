"""Open book, decided per environment (issue 32, item 4; README, *Threat model*): can the labels of a hidden
test state be computed from its public row (observation, history, candidates) plus public code? Each hosted
environment's answer is tried here as an attacker would try it.

* FrozenLake: yes (an observation is the whole map): declared, ``tests/test_attacks.py`` tries it.
* TerminalBench-lite: yes. The instruction every observation starts with prints the hidden instance's parameter
  values, so the public task file gives the exact instance, whose setup and the row's commands replay in the
  public sandbox image and whose candidates the public labeller labels. Secret parameters from a space too large
  to enumerate would change nothing: the values are read, not searched. Declared open book.
* MiniWoB: yes. The goal says what success needs and the tree shows the page; a search over public seeds finds
  the same page within tens of resets for the tasks with few instances (measured: 36 distinct pages in 60 seeds
  of enter-text, 20 in 60 of use-spinner), and its labels are the hidden instance's. Declared open book.
* ALFWorld: no. Where the objects the goal needs lie is drawn from the scene's 63-bit seed and hidden in
  receptacles the row has not opened; scenes that show the same room and goal place them differently, and the
  expert's return depends on where they are.
"""

from __future__ import annotations

import random
import re
import secrets
from collections import Counter

import pytest

from qval import hidden
from qval.envs import registry
from qval.envs.alfworld import adapter as alfworld
from qval.envs.terminalbench.adapter import TaskTemplate, load_tasks

OPEN_BOOK = {"frozenlake": True, "miniwob": True, "terminalbench": True, "alfworld": False}
"""Each hosted environment's answer."""


def test_each_hosted_environment_is_flagged_as_decided() -> None:
    assert {name: entry.open_book for name, entry in registry.ENVIRONMENTS.items()} == OPEN_BOOK


@pytest.mark.django_db
def test_the_migration_flags_the_environments_a_database_already_has() -> None:
    import importlib

    from django.apps import apps

    from leaderboard.models import Environment

    for slug in OPEN_BOOK:
        Environment.objects.update_or_create(slug=slug, defaults={"name": slug, "open_book": slug == "frozenlake"})
    importlib.import_module("leaderboard.migrations.0004_open_book_miniwob_terminalbench").flag(apps, None)
    assert dict(Environment.objects.values_list("slug", "open_book")) == OPEN_BOOK


# -- TerminalBench-lite: the instruction names the instance ---------------------------------------------------
def read_instance(instruction: str, templates: dict[str, TaskTemplate]) -> list[tuple[str, dict[str, str]]]:
    """The attack: every ``(task file, parameter values)`` whose instruction reads ``instruction`` (the first line
    of every observation of a state), by matching the file's instruction with its placeholders as wildcards."""
    found = []
    for name, template in templates.items():
        pattern, seen = "", set()
        for literal, placeholder in re.findall(r"(.*?)(?:\{\{(\w+)\}\}|$)", template.raw["instruction"].strip(),
                                               flags=re.S):
            pattern += re.escape(literal)
            if placeholder:
                pattern += f"(?P={placeholder})" if placeholder in seen else f"(?P<{placeholder}>.+?)"
                seen.add(placeholder)
        match = re.fullmatch(pattern, instruction, flags=re.S)
        if match:
            found.append((name, match.groupdict()))
    return found


def test_terminalbench_hidden_instances_are_read_from_their_instruction() -> None:
    """Round three, finding 4: every hidden instance is identified from its observation alone -- no secret, no
    enumeration -- so the public task file replays it and the public labeller labels it."""
    templates = load_tasks()
    secret = secrets.token_hex(32)
    for position, (name, template) in enumerate(templates.items()):
        seed = hidden.derive_seed(secret, "terminalbench-lite@probe", "task", position)  # as the build draws it
        secret_instance = template.draw(seed, f"hidden-{position}")
        read = read_instance(secret_instance.instruction, templates)
        assert [file for file, _ in read] == [name], (name, read)
        rebuilt = templates[name].instance(read[0][1], f"hidden-{position}")
        assert rebuilt == secret_instance, name  # setup, solution, tests, candidates: the same task


def test_terminalbench_parameter_values_would_be_read_from_any_space() -> None:
    """Why a larger secret space would not help: values never listed in the task file are read all the same."""
    templates = load_tasks()
    name, template = next((n, t) for n, t in templates.items() if t.params)
    unseen = {p: f"x{random.Random(p).randrange(10**12)}" for p in template.params}  # outside every public list
    task = template.instance(unseen, "hidden-0")
    assert read_instance(task.instruction, templates) == [(name, unseen)]


# -- MiniWoB: a seed search finds the page --------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.browser
def test_a_hidden_miniwob_page_is_found_by_a_seed_search_and_labelled_alike() -> None:
    from qval import labelling
    from qval.envs.miniwob.adapter import MiniWoB

    secret_seed = hidden.derive_seed(secrets.token_hex(32), "miniwob@probe", "task", 0)
    secret_env = MiniWoB(task_names=("use-spinner",), seeds=(0,), horizon=4)
    public = MiniWoB(task_names=("use-spinner",), seeds=range(200), horizon=4)
    try:
        secret_env.hide_tasks({"use-spinner:0": secret_seed})
        secret_env.reset(secret_env.tasks[0])
        shown = secret_env.observation()  # the hidden state's public row: its observation and candidates
        found = next((task for task in public.tasks if public.reset(task) == shown), None)  # the search
        assert found is not None, "no public seed of 200 shows the hidden page"
        candidates = tuple(secret_env.candidates())
        assert tuple(public.candidates()) == candidates
        truth = labelling.label_state(secret_env, secret_env.snapshot(), candidates, discount=0.95)
        attack = labelling.label_state(public, public.snapshot(), candidates, discount=0.95)
        assert attack.q == truth.q and attack.v == truth.v and max(truth.q) > 0
    finally:
        secret_env.close()
        public.close()


# -- ALFWorld: what the row shows does not fix where things are -----------------------------------------------
def _placements(scene: alfworld.Scene) -> Counter[tuple[str, str]]:
    """Where the scene puts its objects: (object class, receptacle) pairs -- which cabinet, not only a cabinet --
    the objects' own ids left out."""
    problem = scene.game["pddl_problem"]
    classes = dict(re.findall(r"\(objectType (\S+) (\S+)Type\)", problem))
    return Counter((classes[obj], receptacle) for obj, receptacle in re.findall(r"\(inReceptacle (\S+) (\S+)\)", problem))


OPEN_BOOK_SECRET = "5f0c8a2e9b7d41c3a6e2f9d8b1c4a7e05d3b9f2a8c6e1d4b7a0f3c9e2d5b8a1f"
"""A test-split secret of the form the site draws (64 hex digits), fixed."""


def test_alfworld_scenes_that_show_the_same_room_and_goal_hide_the_object_elsewhere() -> None:
    """A hidden scene is a 63-bit seed's draw. What its first observation shows -- the floorplan's receptacles
    and the goal -- is shared by many scenes, which put the goal's object (and everything else) in different,
    unopened receptacles: a search over public seeds matches what is shown, never the hidden placements.

    The secret is fixed: some rooms have one receptacle the goal's object can be in (a run with a random secret
    drew a room whose 30 scenes of the same view all put it on the one coffee table; 12 other random draws had
    3-55 holders), and a test must not pass or fail by the draw."""
    secret_seed = hidden.derive_seed(OPEN_BOOK_SECRET, "alfworld-pick-place@probe", "task", 0)
    floorplans = alfworld.available_floorplans()
    secret_scene = alfworld.generate_scene(random.Random(secret_seed).choice(floorplans), secret_seed)
    shown = (secret_scene.floorplan, secret_scene.object_target, secret_scene.parent_target)
    same_view, placements, holders = 0, set(), set()
    for seed in range(3000):  # about 13 s of scene generation; the engine is not needed
        scene = alfworld.generate_scene(secret_scene.floorplan, seed)
        placements.add(frozenset(_placements(scene).items()))
        if (scene.floorplan, scene.object_target, scene.parent_target) == shown:
            same_view += 1
            holders.add(frozenset(rec for obj, rec in _placements(scene) if obj == secret_scene.object_target))
    assert frozenset(_placements(secret_scene).items()) not in placements  # no public seed rebuilds it
    assert len(placements) == 3000  # every draw places the room's objects its own way: too many to enumerate
    assert same_view >= 2 and len(holders) >= 2, (same_view, holders)  # same room and goal, the object elsewhere

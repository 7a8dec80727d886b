"""ALFWorld's six task types (``alfworld-all-types``): generated scenes the handcoded expert solves,
labels checked by hand one step from success, restore equals replay, per-type counts on the page."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

from qval import build, labelling, schema
from qval import hidden as hidden_seeds
from qval.envs.alfworld import (
    TASK_TYPE,
    TASK_TYPES,
    ALFWorld,
    choose_typed_scenes,
    draw_scene,
    expert_steps,
    floorplans_for,
    generate_scene,
)
from qval.envs.base import Snapshot
from tests.conftest import cached_build

GAMMA = 0.95
HORIZON = 20
EXPERT_STEPS = 12
SCENES = [(409, 940061, "pick_and_place_simple"), (317, 181503, "look_at_obj_in_light"),
          (418, 608407, "pick_clean_then_place_in_recep"), (14, 829891, "pick_heat_then_place_in_recep"),
          (12, 989308, "pick_cool_then_place_in_recep"), (412, 207843, "pick_two_obj_and_place")]
"""One scene of each type, in TASK_TYPES order: the first of each type in ``choose_typed_scenes(4, seed=1)``
that the expert solves within EXPERT_STEPS steps (short games keep the labelling rollouts cheap)."""
SCENES_KEY = f"ALFWorld({SCENES}, horizon={HORIZON})"


def small_spec() -> build.DatasetSpec:
    """One trajectory of each scene, two states each: every split holds two task types."""
    return build.DatasetSpec(
        slug="alfworld-all-types-small", name="ALFWorld all types small", version="0", description="test build",
        modalities=("text",), num_trajectories=6, max_states_per_trajectory=2, epsilon=0.2, seed=5,
        discount=GAMMA, num_rollouts=1, splits=("train", "dev", "test"), split_by="task",
    )


@pytest.fixture(scope="module")
def game_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("alfworld-all-types-games")


@pytest.fixture(scope="module")
def env(game_root: Path) -> ALFWorld:
    return ALFWorld(SCENES, horizon=HORIZON, game_root=game_root)


@pytest.fixture(scope="module")
def dataset(game_root: Path) -> schema.Dataset:
    return schema.Dataset.read(cached_build(
        SCENES_KEY, lambda: ALFWorld(SCENES, horizon=HORIZON, game_root=game_root), small_spec()))


def expert_episode(env: ALFWorld, task: str) -> tuple[list[Snapshot], float]:
    """Play the expert from reset to the end: the snapshot before each of its steps, the last reward."""
    env.reset(task)
    snapshots, reward = [], 0.0
    while not env.done:
        snapshots.append(env.snapshot())
        reward = env.step(env.reference_action()).reward
    return snapshots, reward


def test_typed_scenes_have_alfworlds_goals_and_rooms_that_fit() -> None:
    assert [t for _, _, t in SCENES] == list(TASK_TYPES)
    assert [t for _, _, t in choose_typed_scenes(4, seed=1)][:12:3] == list(TASK_TYPES[:4])  # blocks of three
    for floorplan, seed, task_type in SCENES:
        scene = generate_scene(floorplan, seed, task_type)
        assert scene == generate_scene(floorplan, seed, task_type)  # a pure function of its arguments
        assert scene.task == f"FloorPlan{floorplan}-s{seed}-{task_type}" and floorplan in floorplans_for(task_type)
        assert scene.traj_data["task_type"] == task_type
        problem = scene.game["pddl_problem"]
        goal = {"look_at_obj_in_light": "(isToggled ?ot)", "pick_clean_then_place_in_recep": "(isClean ?o)",
                "pick_heat_then_place_in_recep": "(isHot ?o)", "pick_cool_then_place_in_recep": "(isCool ?o)",
                "pick_two_obj_and_place": "(not (= ?o1 ?o2))"}.get(task_type)
        assert goal is None or goal in problem
        if task_type == "look_at_obj_in_light":
            assert scene.toggle_target == "DeskLamp" and "(toggleable DeskLamp_bar_" in problem
        if task_type == "pick_two_obj_and_place":
            assert problem.count(f"(objectType {scene.object_target}_bar_") >= 2
    # The untyped form is the original pick & place scene, under its original id.
    assert generate_scene(1, 3).task == "FloorPlan1-s3" and generate_scene(1, 3).task_type == TASK_TYPE
    with pytest.raises(ValueError, match="unknown task type"):
        generate_scene(1, 3, "slice_everything")


def test_the_expert_solves_a_game_of_every_type(env: ALFWorld) -> None:
    for task in env.tasks:
        _, reward = expert_episode(env, task)
        assert reward == 1.0 and env.steps <= EXPERT_STEPS, (task, env.history)


def test_one_step_from_success_q_is_one_and_every_other_command_is_lower(env: ALFWorld) -> None:
    """By hand: in the state before the expert's last step, its command reaches the goal at once (Q = 1:
    reward 1, undiscounted first step); "inventory" wastes one step before the expert finishes (Q = γ);
    every admissible command scores at most that."""
    for task in env.tasks:
        last = expert_episode(env, task)[0][-1]
        env.restore(last)
        expert, commands = env.reference_action(), env.candidates()
        assert labelling.q_value(env, last, expert, discount=GAMMA) == 1.0, task
        assert labelling.q_value(env, last, "inventory", discount=GAMMA) == pytest.approx(GAMMA), task
        others = [c for c in commands if c != expert][:3]
        assert all(labelling.q_value(env, last, c, discount=GAMMA) <= GAMMA + 1e-12 for c in others), task


def test_every_state_names_its_task_type_and_labels_equal_a_replay(dataset: schema.Dataset, game_root: Path) -> None:
    assert {s.task_type for s in dataset.states} == set(TASK_TYPES)
    by_split = collections.defaultdict(set)
    replay = ALFWorld(SCENES, horizon=HORIZON, restore_mode="replay", game_root=game_root)
    for state in dataset.states:
        assert state.task_type == replay.task_type(state.task) and state.task.endswith(state.task_type)
        by_split[state.split].add(state.task_type)
    assert all(len(types) == 2 for types in by_split.values())  # scene j goes to split j mod 3
    for state in dataset.states[::5]:
        snap = Snapshot(task=state.task, history=state.history)
        for cand in state.candidates:
            assert labelling.q_value(replay, snap, cand.action, discount=GAMMA) == pytest.approx(
                dataset.q_labels[cand.id], abs=1e-12), cand.id
    assert replay.restore_counts["direct"] == 0


def test_hidden_test_scenes_keep_their_positions_type(game_root: Path) -> None:
    env = ALFWorld(SCENES, horizon=HORIZON, game_root=game_root)
    spec = build.DatasetSpec(slug="x", name="x", version="0", description="x", modalities=("text",),
                             num_trajectories=6, max_states_per_trajectory=1, epsilon=0.0, seed=1, discount=GAMMA,
                             splits=("train", "dev", "test"), split_by="task", secret_test=True)
    build.hide_test_tasks(env, spec, "a secret")
    assert [env.task_type(t) for t in env.tasks] == list(TASK_TYPES)
    hidden = [t for t in env.tasks if t in env.hidden]
    assert hidden == ["hidden-2", "hidden-5"]
    for task, original in zip(hidden, (SCENES[2], SCENES[5])):
        scene = env.scenes[task]
        seed = hidden_seeds.derive_seed("a secret", "x@0", "task", generate_scene(*original).task)
        assert scene == draw_scene(seed, original[2]) and scene.task_type == env.task_type(task) == original[2]
        assert scene.floorplan in floorplans_for(scene.task_type)
    # The dataset's hidden scenes are drawn again until the expert solves them (as its public ones were chosen).
    solved = draw_scene(7, "look_at_obj_in_light", solved_within=EXPERT_STEPS, game_root=game_root)
    assert expert_steps((solved.floorplan, solved.seed, solved.task_type), EXPERT_STEPS, game_root) is not None
    listed = {e["task"]: e for e in env.config()["scenes"]}
    assert listed["hidden-5"] == {"task": "hidden-5", "hidden": True, "task_type": TASK_TYPES[5]}


def test_builder_is_sized_for_200_test_points_with_a_third_of_each_type_per_split() -> None:
    env, spec = build.BUILDERS["alfworld-all-types"]()
    assert isinstance(env, ALFWorld) and spec.slug == "alfworld-all-types" and spec.version == "1.0"
    assert len(env.tasks) == 6 * build.ALFWORLD_SCENES_PER_TYPE and env.horizon == 50
    for task_type in TASK_TYPES:  # distinct rooms within a type, each fit for it
        floorplans = [fp for fp, _, t in build.ALFWORLD_ALL_TYPES_SCENES if t == task_type]
        assert len(set(floorplans)) == len(floorplans) and set(floorplans) <= set(floorplans_for(task_type))
    assert spec.secret_test and spec.split_by == "task" and spec.splits == ("train", "dev", "test")
    per_split: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for j, task in enumerate(env.tasks):
        per_split[spec.split_of(j)][env.task_type(task)] += 1
    for split, types in per_split.items():
        assert set(types) == set(TASK_TYPES) and len(set(types.values())) == 1, (split, types)
        scenes = sum(types.values())
        trajectories = spec.num_trajectories // len(env.tasks) * scenes
        assert trajectories * spec.max_states_per_trajectory >= 200, split
    # The original pick & place dataset is untouched: untyped scenes, its original config key.
    old_env, old_spec = build.BUILDERS["alfworld"]()
    assert old_spec.slug == "alfworld-pick-place" and old_env.config()["task_type"] == TASK_TYPE


@pytest.mark.django_db
def test_the_dataset_page_counts_states_per_task_type(dataset: schema.Dataset, client) -> None:  # type: ignore[no-untyped-def]
    from leaderboard.loading import load_dataset

    load_dataset(dataset)
    html = client.get(f"/datasets/{dataset.manifest.key}/").content.decode()
    table = html.split('<table id="task-types">', 1)[1].split("</table>", 1)[0]
    counts = collections.Counter((s.task_type, s.split) for s in dataset.states)
    for task_type in TASK_TYPES:
        row = table.split(f"<td><code>{task_type}</code></td>", 1)[1].split("</tr>", 1)[0]
        cells = [c.split("</td>")[0] for c in row.split('<td class="num">')[1:]]
        expected = [counts[task_type, split] for split in ("train", "dev", "test")]
        assert cells == [str(n) for n in expected + [sum(expected)]], task_type
    # Each split's table of tasks: a row per task type with its states and candidates, then its tasks.
    for split in ("train", "dev", "test"):
        rows = html.split(f'<table class="tasks" id="tasks-{split}">', 1)[1].split("</table>", 1)[0]
        shown = {g: (int(n), int(k)) for g, n, k in re.findall(
            r'<tr class="task-group" data-group="([^"]+)">.*?<td class="num">(\d+)</td><td class="num">(\d+)</td>', rows)}
        mine = [s for s in dataset.states if s.split == split]
        assert shown == {t: (sum(s.task_type == t for s in mine), sum(len(s.candidates) for s in mine if s.task_type == t))
                         for t in {s.task_type for s in mine}}, split

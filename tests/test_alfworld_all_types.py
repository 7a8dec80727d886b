"""ALFWorld's six task types (``alfworld-all-types``): generated scenes the handcoded expert solves,
labels checked by hand one step from success, restore equals replay, per-type counts on the page."""

from __future__ import annotations

import collections
import io
import math
import re
from pathlib import Path

import pytest
from PIL import Image

from qval import build, labelling, schema
from qval import hidden as hidden_seeds
from qval.envs.alfworld.adapter import (
    TASK_TYPE,
    TASK_TYPES,
    ALFWorld,
    choose_typed_scenes,
    draw_scene,
    expert_steps,
    floorplans_for,
    generate_scene,
)
from qval.envs.alfworld.image import IMAGE_SIZE, render_view, view_of
from qval.envs.base import Snapshot
from qval.envs import registry
from qval.envs.alfworld import datasets as alfworld_datasets
from tests.conftest import REPO, _imported_core_files, cached_build

GAMMA = 0.95
HORIZON = 20
EXPERT_STEPS = 12
SCENES = [(409, 940061, "pick_and_place_simple"), (317, 181503, "look_at_obj_in_light"),
          (418, 608407, "pick_clean_then_place_in_recep"), (14, 829891, "pick_heat_then_place_in_recep"),
          (12, 989308, "pick_cool_then_place_in_recep"), (412, 207843, "pick_two_obj_and_place")]
"""One scene of each type, in TASK_TYPES order: the first of each type in ``choose_typed_scenes(4, seed=1)``
that the expert solves within EXPERT_STEPS steps (short games keep the labelling rollouts cheap)."""
SCENES_KEY = f"ALFWorld({SCENES}, horizon={HORIZON})"


def small_spec(**changes: object) -> build.DatasetSpec:
    """One trajectory of each scene, two states each: every split holds two task types."""
    fields: dict[str, object] = dict(
        slug="alfworld-all-types-small", name="ALFWorld all types small", version="0", description="test build",
        modalities=("text",), num_trajectories=6, max_states_per_trajectory=2, epsilon=0.2, seed=5,
        discount=GAMMA, num_rollouts=1, splits=("train", "dev", "test"), split_by="task",
    )
    fields.update(changes)
    return build.DatasetSpec(**fields)  # type: ignore[arg-type]


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


@pytest.fixture(scope="module")
def image_dataset(game_root: Path) -> schema.Dataset:
    """The small build with images and goal images (alfworld-all-types@1.1's image settings)."""
    spec = small_spec(modalities=("text", "image"), end_images=True)
    return schema.Dataset.read(cached_build(
        SCENES_KEY, lambda: ALFWorld(SCENES, horizon=HORIZON, game_root=game_root), spec))


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
    env, spec = registry.BUILDERS["alfworld-all-types"]()
    assert isinstance(env, ALFWorld) and spec.slug == "alfworld-all-types" and spec.version == "1.1"
    assert len(env.tasks) == 6 * alfworld_datasets.SCENES_PER_TYPE and env.horizon == 50
    for task_type in TASK_TYPES:  # distinct rooms within a type, each fit for it
        floorplans = [fp for fp, _, t in alfworld_datasets.ALL_TYPES_SCENES if t == task_type]
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
    old_env, old_spec = registry.BUILDERS["alfworld"]()
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


# -- images (alfworld-all-types@1.1) -------------------------------------------------------------
HEAT = SCENES[3]
"""The heat scene: the expert opens and closes the microwave, takes a tomato from the garbage can, heats it,
opens the fridge and puts it there (12 steps)."""


def png(env: ALFWorld) -> bytes:
    return build.encode_png(env.observation_image())


def facts(env: ALFWorld) -> list[tuple[str, tuple[str, ...]]]:
    return [(f.name, tuple(a.name for a in f.arguments)) for f in env._state["facts"]]


def test_the_image_follows_moves_opening_and_taking(env: ALFWorld) -> None:
    task = generate_scene(*HEAT).task
    env.reset(task)
    task_line = "Your task is to: put a hot tomato in fridge."
    pictures = [png(env)]
    assert env.image_key().here == () and env.image_key().task == task_line  # the middle of the room
    while not env.done:
        command = env.reference_action()
        env.step(command)
        pictures.append(png(env))
        view = env.image_key()
        if command.startswith(("go to ", "open ", "take ", "heat ")):
            assert pictures[-1] != pictures[-2], command  # a move, an opening, a pick-up and heating all show
        if command.startswith("go to "):
            assert [p.name for p in view.here] == [command[len("go to "):]]
        if command.startswith("take "):
            taken = command.split(" from ")[0][len("take "):]
            assert [i.name for i in view.held] == [taken] and taken not in {i.name for i in view.here[0].items}
        if command.startswith("heat "):
            assert view.held[0].states == ("hot",)
    assert env.history[-1].startswith("move tomato 1 to fridge 1") and env.image_key().held == ()
    assert ("hot",) in {i.states for i in env.image_key().here[0].items}
    image = Image.open(io.BytesIO(pictures[0]))
    assert image.size == (IMAGE_SIZE, IMAGE_SIZE) and image.mode == "RGB"


def test_a_closed_receptacles_contents_are_not_drawn(env: ALFWorld) -> None:
    """At the closed microwave the engine knows what is in it; the picture is the same without those facts.
    Open, the same contents change the picture."""
    task = generate_scene(*HEAT).task
    env.reset(task)
    env.step("go to microwave 1")
    inside = [f for f in facts(env) if f[0] == "inreceptacle" and f[1][1] == "microwave 1"]
    assert inside  # bread, egg and plate
    task_line = env.image_key().task
    emptied = view_of([f for f in facts(env) if f not in inside], task_line)
    assert env.image_key() == emptied and env.image_key().here[0].items == ()
    assert png(env) == build.encode_png(render_view(emptied))
    env.step("open microwave 1")
    assert len(env.image_key().here[0].items) == len(inside)
    emptied = view_of([f for f in facts(env) if f not in inside], task_line)
    assert png(env) != build.encode_png(render_view(emptied))


def test_the_same_state_gives_the_same_png_restored_or_replayed(env: ALFWorld, game_root: Path) -> None:
    snapshots, _ = expert_episode(env, generate_scene(*HEAT).task)
    replay = ALFWorld([HEAT], horizon=HORIZON, restore_mode="replay", game_root=game_root)
    for snapshot in snapshots[::3] + snapshots[-1:]:
        env.restore(snapshot)
        direct = png(env)
        replay.restore(snapshot)
        assert png(replay) == direct == build.encode_png(env.observation_image()), snapshot.history
    assert env.restore_counts["direct"] > 0 and replay.restore_counts["direct"] == 0


def test_the_core_file_digest_of_cached_builds_covers_the_renderer() -> None:
    """``tests/conftest.py::_build_digest`` follows module-level imports: a renderer change rebuilds the cache."""
    alfworld = REPO / "qval" / "envs" / "alfworld"
    assert alfworld / "image.py" in _imported_core_files(alfworld / "adapter.py")


def test_version_1_1_adds_images_and_goal_images_to_1_0() -> None:
    env, spec = registry.BUILDERS["alfworld-all-types"]()
    old_env, old = registry.VERSIONS["alfworld-all-types@1.0"]()
    assert (spec.version, spec.modalities, spec.end_images) == ("1.1", ("text", "image"), True)
    assert (old.version, old.modalities, old.end_images) == ("1.0", ("text",), False)
    assert "a schematic render of the simulator state, not THOR's egocentric camera" in spec.description
    assert "Supersedes 1.0" in spec.description and "image" not in old.description.lower()
    # the same scenes, sizes, splits and environment: only the images and the card differ
    same = ("num_trajectories", "max_states_per_trajectory", "epsilon", "seed", "discount", "num_rollouts",
            "splits", "split_by", "split_cycle", "secret_test")
    assert all(getattr(spec, f) == getattr(old, f) for f in same)
    assert env.config() == old_env.config() and env.horizon == old_env.horizon
    assert "images" in spec.config() and "end_images" in spec.config() and "images" not in old.config()


def test_a_small_build_stores_a_png_per_state_candidate_and_goal_and_keeps_the_text(
        image_dataset: schema.Dataset, dataset: schema.Dataset) -> None:
    assert image_dataset.manifest.modalities == ["text", "image"]
    names = set(image_dataset.image_names())
    for state in image_dataset.states:
        expected = {state.image, state.end_image} | {c.next_image for c in state.candidates} | {
            c.end_image for c in state.candidates}
        assert None not in expected and expected <= names, state.id
        for name in (state.image, state.candidates[0].next_image, state.end_image):
            assert Image.open(io.BytesIO(image_dataset.images[name])).size == (IMAGE_SIZE, IMAGE_SIZE)
    # the text part and the labels are those of the text-only build
    def text(ds: schema.Dataset) -> list[tuple[object, ...]]:
        return [(s.id, s.split, s.task, s.task_type, s.observation, s.history,
                 [(c.id, c.action, c.next_state, c.is_actor) for c in s.candidates]) for s in ds.states]
    assert text(image_dataset) == text(dataset)
    assert image_dataset.q_labels == dataset.q_labels and image_dataset.v_labels == dataset.v_labels


@pytest.mark.parametrize("name", ["vlm-rm-cos", "vlm-sor-softmax", "liv-l2"])
@pytest.mark.parametrize("target", ["q", "v"])
def test_the_image_methods_score_the_alfworld_images(image_dataset: schema.Dataset, name: str, target: str) -> None:
    """Tiny random encoders (as in tests/test_image_methods.py): every dev point scored, from its image, the
    task's goal text (ALFWorld's 'Your task is to: …') and, for LIV, its goal image."""
    from qval.methods import goals
    from qval.methods.registry import MethodContext, get_method

    goals._encoder.cache_clear()
    backbone = "qval-tiny-rn:random" if name.startswith("liv") else "qval-tiny-vit:random"
    ctx = MethodContext(dataset=image_dataset, split="dev", target=target, points=image_dataset.states_in("dev"),
                        backbone=backbone, seed=0, options={})
    out = get_method(name).run(ctx)
    assert list(out.scores) == image_dataset.point_ids("dev", target) and out.num_nan == 0
    assert all(math.isfinite(v) for v in out.scores.values())

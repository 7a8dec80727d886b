"""The FrozenLake dataset: labels checked against an independent shortest-path computation,
images, splits by map, and resuming an interrupted build."""

from __future__ import annotations

import filecmp
import hashlib
import io
import json
from collections import deque
from dataclasses import replace

import gymnasium
import pytest
from gymnasium.envs.toy_text.frozen_lake import generate_random_map
from PIL import Image

from qval import build, labelling, schema
from qval.envs.base import Snapshot
from qval.envs.frozenlake.adapter import FrozenLake, render_map
from qval.envs import registry

GAMMA = 0.95
HORIZON = 30
# Written out independently of qval.envs.frozenlake.adapter: gymnasium's action ids.
OFFSETS = {"move left": (0, -1), "move down": (1, 0), "move right": (0, 1), "move up": (-1, 0)}


ENV, SPEC = registry.BUILDERS["frozenlake"]()
MAP_SEEDS = list(ENV.map_seeds)  # type: ignore[attr-defined]
NUM_MAPS = len(MAP_SEEDS)
V1_0_FINGERPRINT = "155c595b63d199e39054bde2c7ca319e01fc62b9f4151605a02a2c1e4c0c3b41"
"""``frozenlake-8x8@1.0`` as published (text only); images must not change a text-only fingerprint."""


@pytest.fixture(scope="module")
def dataset(frozenlake: schema.Dataset) -> schema.Dataset:
    """The session's build (its test split drawn from the session's secret)."""
    return frozenlake


def env_with_secret(secret: str) -> FrozenLake:
    """The environment the build played: the test maps drawn from ``secret``."""
    env = FrozenLake(map_seeds=MAP_SEEDS, size=8, horizon=HORIZON)
    build.hide_test_tasks(env, SPEC, secret)
    return env


def small(**changes: object) -> tuple[FrozenLake, build.DatasetSpec]:
    """The current FrozenLake spec on fewer trajectories (every split still present)."""
    fields: dict[str, object] = {"num_trajectories": 15, "version": "test", **changes}
    return FrozenLake(map_seeds=MAP_SEEDS, size=8, horizon=HORIZON), replace(SPEC, **fields)  # type: ignore[arg-type]


def _grid(observation: str) -> tuple[list[str], tuple[int, int]]:
    rows = observation.splitlines()[1:]
    agent = next((r, row.index("@")) for r, row in enumerate(rows) if "@" in row)
    return rows, agent


def _bfs_from_goal(rows: list[str]) -> dict[tuple[int, int], int]:
    n = len(rows)
    goal = next((r, c) for r in range(n) for c in range(n) if rows[r][c] == "G")
    dist = {goal: 0}
    todo = deque([goal])
    while todo:
        r, c = todo.popleft()
        for dr, dc in OFFSETS.values():
            nr, nc = r + dr, c + dc
            if 0 <= nr < n and 0 <= nc < n and rows[nr][nc] != "H" and (nr, nc) not in dist:
                dist[(nr, nc)] = dist[(r, c)] + 1
                todo.append((nr, nc))
    return dist


def _expected_q(rows: list[str], agent: tuple[int, int], action: str, step: int, maps: list[list[str]]) -> float:
    """Q under an optimal policy: γ^(moves-1) if the goal is reached within the horizon, else 0."""
    true_rows = next(m for m in maps if all(
        m[r][c] == (ch if ch != "@" else m[r][c]) for r, row in enumerate(rows) for c, ch in enumerate(row)
    ))
    n = len(true_rows)
    dr, dc = OFFSETS[action]
    nxt = (min(max(agent[0] + dr, 0), n - 1), min(max(agent[1] + dc, 0), n - 1))
    cell = true_rows[nxt[0]][nxt[1]]
    if cell == "H":
        return 0.0
    remaining = HORIZON - step - 1  # steps left after the forced move
    d = _bfs_from_goal(true_rows).get(nxt)
    if d is None or d > remaining:
        return 0.0
    return GAMMA ** d  # 1 + d moves in all, discounted by γ^(moves-1)


def test_maps_are_gymnasium_random_maps_from_seed_42(dataset: schema.Dataset) -> None:
    """Train and dev maps are public (seeds 42 + position); the test positions' maps are hidden."""
    maps = dataset.manifest.config["environment"]["maps"]
    assert MAP_SEEDS == list(range(42, 42 + NUM_MAPS)) and NUM_MAPS >= 10
    hidden = {f"map-{j}" for j in range(NUM_MAPS) if SPEC.split_of(j) == "test"}
    assert hidden == set(SPEC.hidden_tasks(ENV)) and len(hidden) == 4
    assert [maps[f"map-{i}"] for i in range(NUM_MAPS)] == [
        None if f"map-{i}" in hidden else generate_random_map(size=8, seed=s) for i, s in enumerate(MAP_SEEDS)
    ]
    assert dataset.manifest.labelling["discount"] == GAMMA
    assert dataset.manifest.labelling["aggregation"] == "max"
    assert dataset.manifest.key == f"{SPEC.slug}@{SPEC.version}" == "frozenlake-8x8@1.2"
    assert dataset.manifest.modalities == ["text", "image"]


def test_every_q_label_matches_independent_shortest_path(dataset: schema.Dataset, test_split_secret: str) -> None:
    played = env_with_secret(test_split_secret).maps
    maps = [list(played[f"map-{j}"]) for j in range(NUM_MAPS)]
    checked = 0
    nonzero = zero = 0
    for state in dataset.states:
        rows, agent = _grid(state.observation)
        true_rows = played[state.task]
        assert all(rows[r][c] in (true_rows[r][c], "@") for r in range(8) for c in range(8))
        for cand in state.candidates:
            expected = _expected_q(rows, agent, cand.action, state.step, maps)
            assert dataset.q_labels[cand.id] == pytest.approx(expected, abs=1e-12), (cand.id, cand.action)
            nonzero += expected > 0
            zero += expected == 0
            checked += 1
    assert checked == 4 * len(dataset.states)
    assert nonzero > 100 and zero > 20  # both kinds of label occur


def test_v_is_the_best_q_and_each_state_has_one_actor(dataset: schema.Dataset) -> None:
    for state in dataset.states:
        qs = [dataset.q_labels[c.id] for c in state.candidates]
        assert dataset.v_labels[state.id] == pytest.approx(max(qs), abs=1e-12)
        assert sum(c.is_actor for c in state.candidates) == 1
        assert [c.action for c in state.candidates] == list(OFFSETS)


def test_sampling_rules_and_split(dataset: schema.Dataset) -> None:
    by_traj: dict[int, list[schema.State]] = {}
    for s in dataset.states:
        by_traj.setdefault(s.trajectory, []).append(s)
    assert set(by_traj) <= set(range(SPEC.num_trajectories)) and len(by_traj) >= 0.9 * SPEC.num_trajectories
    for traj, states in by_traj.items():
        assert len(states) <= 5
        assert {s.task for s in states} == {f"map-{traj % NUM_MAPS}"}
        assert len({s.split for s in states}) == 1  # a trajectory never straddles splits
        assert all(s.step >= 1 for s in states)  # never the first turn


def test_splits_hold_disjoint_maps_train_largest(dataset: schema.Dataset) -> None:
    maps = {split: {s.task for s in dataset.states_in(split)} for split in schema.SPLITS}
    assert not (maps["train"] & maps["dev"]) and not (maps["train"] & maps["test"]) and not (maps["dev"] & maps["test"])
    cycle = ("train", "dev", "train", "test", "train")  # the weighted rule, written out here
    for split, tasks in maps.items():
        assert tasks == {f"map-{j}" for j in range(NUM_MAPS) if cycle[j % 5] == split}
    collection = dataset.manifest.config["collection"]
    assert collection["split_cycle"] == list(cycle) and collection["split_weights"] == {"train": 3, "dev": 1, "test": 1}
    sizes = {split: len(dataset.states_in(split)) for split in schema.SPLITS}
    assert sizes["train"] > sizes["dev"] and sizes["train"] > sizes["test"]
    assert sizes["dev"] >= 50 and sizes["test"] >= 50  # the global correlations need 50 pairs


def _png(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def test_every_state_and_candidate_has_a_512px_image(dataset: schema.Dataset, test_split_secret: str) -> None:
    maps = env_with_secret(test_split_secret).maps
    names = dataset.image_names()
    assert len(names) == sum(2 + 2 * len(s.candidates) for s in dataset.states)  # goal images included
    for state in dataset.states[::5]:
        assert state.image == f"{state.id}.png"
        pictures = [(state.image, state.observation)] + [(c.next_image, c.next_state) for c in state.candidates]
        for name, text in pictures:
            assert name is not None
            image = _png(dataset.images[name])
            assert (image.format, image.mode, image.size) == ("PNG", "RGB", (512, 512))
            rows, agent = _grid(text)
            # The picture is the drawing of the observed grid (the same bytes as a fresh render).
            expected = render_map(maps[state.task], agent[0] * 8 + agent[1])
            assert image.tobytes() == expected.tobytes()
        assert [c.next_image for c in state.candidates] == [f"{c.id}-next.png" for c in state.candidates]
    # Different cells, different pictures; the agent is red where it stands and nowhere else.
    first = dataset.states[0]
    rows, (row, col) = _grid(first.observation)
    pixels = _png(dataset.images[first.image]).load()
    assert pixels[col * 64 + 32, row * 64 + 40][0] > 180 and pixels[col * 64 + 32, row * 64 + 40][1] < 80
    others = {dataset.images[c.next_image] for c in first.candidates if _grid(c.next_state)[1] != (row, col)}
    assert others
    assert dataset.images[first.image] not in others


def test_the_same_state_renders_the_same_bytes(dataset: schema.Dataset, test_split_secret: str) -> None:
    build._PNG_CACHE.clear()  # encode again, do not reuse bytes
    env = env_with_secret(test_split_secret)
    for state in dataset.states[::11]:
        env.restore(Snapshot(task=state.task, history=state.history))  # by replay
        assert build.encode_png(env.observation_image()) == dataset.images[state.image]
    same = [s for s in dataset.states if s.observation == dataset.states[0].observation]
    assert len({hashlib.sha256(dataset.images[s.image]).digest() for s in same}) == 1


def test_missing_or_changed_image_is_detected_on_read(dataset: schema.Dataset, tmp_path) -> None:
    env, spec = small(num_trajectories=6)
    ds = build.build_dataset(env, spec)
    ds.write(tmp_path / "ds")
    assert schema.Dataset.read(tmp_path / "ds").compute_fingerprint() == ds.manifest.fingerprint
    first = ds.states[0]
    path = tmp_path / "ds" / "images" / first.candidates[1].next_image
    original = path.read_bytes()
    path.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    with pytest.raises(schema.SchemaError, match="fingerprint mismatch"):
        schema.Dataset.read(tmp_path / "ds")
    path.unlink()
    with pytest.raises(schema.SchemaError, match="missing"):
        schema.Dataset.read(tmp_path / "ds")


def test_text_only_datasets_keep_their_fingerprint(tmp_path) -> None:
    """frozenlake-8x8@1.0 rebuilds to its published fingerprint: no image, no image part."""
    env, spec = registry.VERSIONS["frozenlake-8x8@1.0"]()
    ds = build.build_dataset(env, spec)
    ds.write(tmp_path / "v1.0")
    assert ds.manifest.fingerprint == V1_0_FINGERPRINT and ds.manifest.modalities == ["text"]
    assert not (tmp_path / "v1.0" / "images").exists() and ds.image_names() == []
    assert all(s.image is None and all(c.next_image is None for c in s.candidates) for s in ds.states)


def test_the_first_turn_is_sampled_only_when_the_spec_asks() -> None:
    """``sample_first_turn``: the first turn joins the draw (never the last), and the manifest config
    says so only then (the default config, hence older fingerprints, unchanged)."""
    env, spec = small(secret_test=False)
    first = replace(spec, sample_first_turn=True)
    sampled, sampled_first = [], []
    for i in range(spec.num_trajectories):
        trajectory = build.collect(env, i, spec)
        last = len(trajectory.turns) - 1
        steps = [t.snapshot.step for t in build.sample_turns(trajectory, spec)]
        steps_first = [t.snapshot.step for t in build.sample_turns(trajectory, first)]
        assert all(1 <= k < last for k in steps) and all(0 <= k < last for k in steps_first)
        assert len(steps_first) == min(spec.max_states_per_trajectory, last)
        sampled += steps
        sampled_first += steps_first
    assert 0 not in sampled and 0 in sampled_first
    two = replace(trajectory, turns=trajectory.turns[:2])  # a task solved in two actions
    assert build.sample_turns(two, spec) == [] and build.sample_turns(two, first) == [two.turns[0]]
    default = spec.config()
    assert "sample_first_turn" not in default and "except the first and the last" in default["state_sampling"]
    assert first.config() == {**default, "state_sampling": "uniform without replacement among turns except the last",
                              "sample_first_turn": True}


def test_restore_equals_replay_and_next_states_come_from_gymnasium(
    dataset: schema.Dataset, test_split_secret: str
) -> None:
    env = env_with_secret(test_split_secret)
    for state in dataset.states[::7]:
        env.reset(state.task)
        for action in state.history:
            env.step(action)
        replayed = env.observation()
        env.restore(Snapshot(task=state.task, history=state.history))
        assert env.observation() == replayed == state.observation
        # The candidate's next state is what the raw gymnasium env produces.
        raw = gymnasium.make("FrozenLake-v1", desc=list(env.maps[state.task]), is_slippery=False)
        for cand in state.candidates:
            raw.reset()
            for action in state.history:
                raw.step(list(OFFSETS).index(action))
            pos, *_ = raw.step(list(OFFSETS).index(cand.action))
            rows, agent = _grid(cand.next_state)
            assert agent == divmod(int(pos), 8)


def test_labelling_rejects_bad_settings() -> None:
    env = FrozenLake()
    env.reset("map-0")
    snap = env.snapshot()
    with pytest.raises(ValueError, match="discount"):
        labelling.q_value(env, snap, "move down", discount=0.0)
    with pytest.raises(ValueError, match="num_rollouts"):
        labelling.v_value(env, snap, discount=0.9, num_rollouts=0)


def test_rebuild_is_byte_identical_and_fingerprint_is_checked(
    dataset: schema.Dataset, test_split_secret: str, tmp_path
) -> None:
    again = build.build(registry.BUILDERS["frozenlake"], tmp_path / "again", secret=test_split_secret)
    assert again.manifest.fingerprint == dataset.manifest.fingerprint
    first_dir = tmp_path / "first"
    dataset.write(first_dir)
    for name in ("states.jsonl", "candidates.jsonl", "labels.jsonl"):
        assert filecmp.cmp(first_dir / name, tmp_path / "again" / name, shallow=False), name
    for name in dataset.image_names():
        assert filecmp.cmp(first_dir / "images" / name, tmp_path / "again" / "images" / name, shallow=False), name
    assert schema.Dataset.read(tmp_path / "again", test_split_secret).manifest.fingerprint == dataset.manifest.fingerprint
    # Tampering with one label is detected on read.
    labels = (tmp_path / "again" / "labels.jsonl").read_text().splitlines()
    record = json.loads(labels[0])
    labels[0] = json.dumps({**record, "value": record["value"] + 0.5})
    (tmp_path / "again" / "labels.jsonl").write_text("\n".join(labels) + "\n")
    with pytest.raises(schema.SchemaError, match="fingerprint mismatch"):
        schema.Dataset.read(tmp_path / "again", test_split_secret)


def test_writing_a_derived_dataset_leaves_its_origin_alone(dataset: schema.Dataset, tmp_path) -> None:
    """A subset made with ``dataclasses.replace`` starts with its origin's manifest; writing it gives it a manifest
    of its own and leaves the origin's fingerprints as they were (the session's build, which other tests compare
    rebuilds with, once took a text-only subset's)."""
    before = (dataset.manifest.fingerprint, dict(dataset.manifest.split_fingerprints))
    subset = replace(dataset, states=dataset.states_in("dev")[:3])
    subset.write(tmp_path / "subset")
    assert subset.manifest.fingerprint not in ("", before[0])
    assert (dataset.manifest.fingerprint, dataset.manifest.split_fingerprints) == before
    assert dataset.compute_fingerprint() == before[0]


def test_unknown_builder_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(KeyError, match="unknown dataset 'nope'; choose one of .*frozenlake"):
        build.build(registry.builder("nope"), tmp_path)


# -- resume -------------------------------------------------------------------------------
class Stop(Exception):
    """Raised by the progress callback to interrupt a build."""


def test_interrupted_build_resumes_and_matches_an_uninterrupted_one(tmp_path, monkeypatch) -> None:
    env, spec = small()
    whole = build.build_dataset(env, spec)
    total = len(whole.states)
    assert total > 20

    labelled: list[str] = []
    real = build.make_state

    def counting(env, trajectory, turn, spec, images=None):  # type: ignore[no-untyped-def]
        labelled.append(f"t{trajectory.index:03d}-s{turn.snapshot.step:02d}")
        return real(env, trajectory, turn, spec, images)

    monkeypatch.setattr(build, "make_state", counting)
    stop_after = 9

    def interrupt(done: int, total_: int, stage: str) -> None:
        if stage == "label" and done == stop_after:
            raise Stop

    work = tmp_path / "work"
    with pytest.raises(Stop):
        build.build_dataset(FrozenLake(map_seeds=MAP_SEEDS), spec, interrupt, checkpoint=work)
    assert len(labelled) == stop_after
    first_run = list(labelled)

    calls: list[tuple[int, int, str]] = []
    labelled.clear()
    resumed = build.build_dataset(FrozenLake(map_seeds=MAP_SEEDS), spec, lambda *a: calls.append(a), checkpoint=work)
    # Only the remaining states were labelled, and progress counted the checkpointed ones.
    assert len(labelled) == total - stop_after and not set(labelled) & set(first_run)
    label_calls = [c for c in calls if c[2] == "label"]
    assert label_calls[0] == (stop_after, total, "label") and label_calls[-1] == (total, total, "label")
    assert resumed.manifest.build_info["states_resumed"] == stop_after
    assert resumed.manifest.build_info["states_labelled"] == total - stop_after
    assert resumed.compute_fingerprint() == whole.compute_fingerprint()
    resumed.write(tmp_path / "resumed")
    whole.write(tmp_path / "whole")
    assert resumed.manifest.fingerprint == whole.manifest.fingerprint
    assert schema.Dataset.read(tmp_path / "resumed").manifest.fingerprint == whole.manifest.fingerprint


def test_corrupt_last_checkpoint_line_is_ignored(tmp_path) -> None:
    env, spec = small(num_trajectories=8)
    whole = build.build_dataset(env, spec)
    work = tmp_path / "work"

    def stop_at_5(done: int, total: int, stage: str) -> None:
        if stage == "label" and done == 5:
            raise Stop

    with pytest.raises(Stop):
        build.build_dataset(FrozenLake(map_seeds=MAP_SEEDS), spec, stop_at_5, checkpoint=work)
    checkpoint = build.Checkpoint.for_build(work, env, spec)
    lines = checkpoint.path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 5
    checkpoint.path.write_bytes(b"".join(lines[:4]) + lines[4][: len(lines[4]) // 2])  # killed mid-write
    assert len(checkpoint.load()) == 4
    assert checkpoint.path.read_bytes() == b"".join(lines[:4])  # the broken tail is cut off
    checkpoint.path.write_bytes(b"".join(lines[:4]) + b"\x00garbage{")
    calls: list[tuple[int, int, str]] = []
    resumed = build.build_dataset(FrozenLake(map_seeds=MAP_SEEDS), spec, lambda *a: calls.append(a), checkpoint=work)
    assert [c for c in calls if c[2] == "label"][0][0] == 4
    assert resumed.compute_fingerprint() == whole.compute_fingerprint()


def test_build_with_work_dir_resumes_and_cleans_up(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(registry.BUILDERS, "small-frozenlake", lambda: small(num_trajectories=8))
    work = tmp_path / "work"

    def stop_at_3(done: int, total: int, stage: str) -> None:
        if stage == "label" and done == 3:
            raise Stop

    with pytest.raises(Stop):
        build.build(registry.BUILDERS["small-frozenlake"], tmp_path / "out", stop_at_3, work_dir=work)
    (folder,) = list(work.iterdir())  # one checkpoint, named by slug, version and the config hash
    assert folder.name.startswith(f"{SPEC.slug}-test-") and (folder / "checkpoint.jsonl").is_file()
    ds = build.build(registry.BUILDERS["small-frozenlake"], tmp_path / "out", work_dir=work)
    assert ds.manifest.build_info["states_resumed"] == 3
    assert list(work.iterdir()) == []  # removed once written
    assert schema.Dataset.read(tmp_path / "out").manifest.fingerprint == ds.manifest.fingerprint
    # Another configuration never reuses that work.
    other = build.Checkpoint.for_build(work, *small(num_trajectories=9))
    assert other.directory != folder


def test_shared_rollouts_give_the_same_dataset_with_fewer_restores() -> None:
    """FrozenLake (is_slippery=False) is deterministic, and declares it: the labeller reads next states and V off
    the Q rollouts (qval.labelling.shares_rollouts) and builds the same dataset, images and goal images
    included, with fewer restores."""
    datasets, restores = {}, {}
    for shared in (False, True):
        env, spec = small(num_trajectories=10, secret_test=False)
        env.deterministic = shared
        counted = [0]
        real = env.restore

        def counting(snapshot: Snapshot, real=real, counted=counted) -> None:  # type: ignore[no-untyped-def]
            counted[0] += 1
            real(snapshot)

        env.restore = counting  # type: ignore[method-assign]
        datasets[shared] = build.build_dataset(env, spec)
        restores[shared] = counted[0]
    assert labelling.shares_rollouts(env, 1) and not labelling.shares_rollouts(env, 2)
    assert registry.BUILDERS["frozenlake"]()[0].deterministic  # the hosted builds share rollouts
    old, new = datasets[False], datasets[True]
    assert new.states and new.compute_fingerprint() == old.compute_fingerprint()
    assert dict(new.images) == dict(old.images) and any(s.end_image for s in new.states)
    candidates = sum(len(s.candidates) for s in new.states)
    assert restores[False] == len(old.states) + 2 * candidates + len(old.states)  # state, next states, Q, V
    assert restores[True] <= candidates  # one rollout per candidate, the first from the restored state

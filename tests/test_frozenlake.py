"""The FrozenLake dataset: labels checked against an independent shortest-path computation."""

from __future__ import annotations

import filecmp
import json
from collections import deque

import gymnasium
import pytest
from gymnasium.envs.toy_text.frozen_lake import generate_random_map

from qval import build, labelling, schema
from qval.envs.base import Snapshot
from qval.envs.frozenlake import FrozenLake

GAMMA = 0.95
HORIZON = 30
# Written out independently of qval.envs.frozenlake: gymnasium's action ids.
OFFSETS = {"move left": (0, -1), "move down": (1, 0), "move right": (0, 1), "move up": (-1, 0)}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> schema.Dataset:
    return build.build("frozenlake", tmp_path_factory.mktemp("fl"))


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
    maps = dataset.manifest.config["environment"]["maps"]
    assert [maps[f"map-{i}"] for i in range(8)] == [generate_random_map(size=8, seed=42 + i) for i in range(8)]
    assert dataset.manifest.labelling["discount"] == GAMMA
    assert dataset.manifest.labelling["aggregation"] == "max"
    assert dataset.manifest.key == "frozenlake-8x8@1.0"


def test_every_q_label_matches_independent_shortest_path(dataset: schema.Dataset) -> None:
    maps = [generate_random_map(size=8, seed=42 + i) for i in range(8)]
    checked = 0
    nonzero = zero = 0
    for state in dataset.states:
        rows, agent = _grid(state.observation)
        true_rows = dataset.manifest.config["environment"]["maps"][state.task]
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
    assert set(by_traj) <= set(range(50)) and len(by_traj) >= 45
    for traj, states in by_traj.items():
        assert len(states) <= 5
        assert {s.task for s in states} == {f"map-{traj % 8}"}
        assert len({s.split for s in states}) == 1  # a trajectory never straddles splits
        assert all(s.step >= 1 for s in states)  # never the first turn
    for split in ("dev", "test"):
        assert {s.task for s in dataset.states_in(split)} == {f"map-{i}" for i in range(8)}
    assert len(dataset.states_in("test")) >= 50 and len(dataset.states_in("dev")) >= 50


def test_restore_equals_replay_and_next_states_come_from_gymnasium(dataset: schema.Dataset) -> None:
    env = FrozenLake()
    for state in dataset.states[::7]:
        env.reset(state.task)
        for action in state.history:
            env.step(action)
        replayed = env.observation()
        env.restore(Snapshot(task=state.task, history=state.history))
        assert env.observation() == replayed == state.observation
        # The candidate's next state is what the raw gymnasium env produces.
        raw = gymnasium.make("FrozenLake-v1", desc=dataset.manifest.config["environment"]["maps"][state.task],
                             is_slippery=False)
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


def test_rebuild_is_byte_identical_and_fingerprint_is_checked(dataset: schema.Dataset, tmp_path) -> None:
    again = build.build("frozenlake", tmp_path / "again")
    assert again.manifest.fingerprint == dataset.manifest.fingerprint
    first_dir = tmp_path / "first"
    dataset.write(first_dir)
    for name in ("states.jsonl", "candidates.jsonl", "labels.jsonl"):
        assert filecmp.cmp(first_dir / name, tmp_path / "again" / name, shallow=False), name
    assert schema.Dataset.read(tmp_path / "again").manifest.fingerprint == dataset.manifest.fingerprint
    # Tampering with one label is detected on read.
    labels = (tmp_path / "again" / "labels.jsonl").read_text().splitlines()
    record = json.loads(labels[0])
    labels[0] = json.dumps({**record, "value": record["value"] + 0.5})
    (tmp_path / "again" / "labels.jsonl").write_text("\n".join(labels) + "\n")
    with pytest.raises(schema.SchemaError, match="fingerprint mismatch"):
        schema.Dataset.read(tmp_path / "again")


def test_unknown_builder_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(KeyError, match="unknown dataset 'nope'; choose one of frozenlake"):
        build.build("nope", tmp_path)

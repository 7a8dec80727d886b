"""The Learned family (qval.learned): hand-computed IQL, tree and Monte-Carlo targets; training on
train-split experience only, without any label file; reproducible, stored, scoring dev/test."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from qval import build, schema
from qval.envs.base import Environment, Snapshot
from qval.envs.frozenlake.adapter import FrozenLake
from qval.learned import experience, methods, store
from qval.learned.data import Point, read_inputs
from qval.learned.experience import Edge, TreeNode
from qval.learned.features import CrossedNgrams, FeatureCache, HashedNgrams
from qval.learned.trainers import expectile_loss, iql_q_target
from qval.envs import registry
from tests.conftest import cached_build

FAST = {"best-of-q": {"steps": 300, "target_every": 10, "lr": 3e-3}, "qlass": {"steps": 300, "width": 2}, "amc-value": {"steps": 300, "samples": 2}}


class Corridor(Environment):
    """Walk right to the end of a corridor of length n; reward 1 on arriving."""

    name, reference_policy = "corridor", "always right"

    def __init__(self, lengths: tuple[int, ...] = (3,), horizon: int = 20) -> None:
        super().__init__(horizon)
        self._lengths = {f"n-{n}": n for n in lengths}

    tasks = property(lambda self: tuple(self._lengths))

    def config(self):  # type: ignore[no-untyped-def]
        return {"lengths": list(self._lengths.values()), "horizon": self.horizon}

    def _reset(self, task: str) -> None:
        self._pos, self._n = 0, self._lengths[task]

    def _step(self, action: str) -> tuple[float, bool]:
        self._pos = max(0, self._pos + (1 if action == "right" else -1))
        return (1.0, True) if self._pos == self._n else (0.0, False)

    def observation(self) -> str:
        return "." * self._pos + "@" + "." * (self._n - self._pos)

    def candidates(self) -> list[str]:
        return ["left", "right"]

    def reference_action(self) -> str:
        return "right"


# -- hand-computed targets ---------------------------------------------------------------
def test_expectile_loss_matches_hand_computed_values() -> None:
    diff = torch.tensor([2.0, -1.0])
    # |0.7 - 0|·4 = 2.8 and |0.7 - 1|·1 = 0.3, mean 1.55
    assert expectile_loss(diff, 0.7).item() == pytest.approx(1.55)
    # tau = 0.5 is half the squared error: (4 + 1) / 2 / 2
    assert expectile_loss(diff, 0.5).item() == pytest.approx(1.25)
    assert expectile_loss(torch.tensor([-3.0]), 0.9).item() == pytest.approx(0.1 * 9)
    with pytest.raises(ValueError, match="tau"):
        expectile_loss(diff, 1.0)


def test_iql_q_target_bootstraps_only_undone_steps() -> None:
    target = iql_q_target(torch.tensor([0.0, 1.0, 0.5]), torch.tensor([0.0, 1.0, 0.0]),
                          torch.tensor([0.5, 0.8, -1.0]), 0.9)
    assert target.tolist() == pytest.approx([0.45, 1.0, -0.4])


def test_max_backup_of_a_hand_made_tree() -> None:
    n2 = TreeNode("t", "n2", [Edge("d", 1.0, True)])
    n1 = TreeNode("t", "n1", [Edge("b", 0.0, False, n2), Edge("c", 0.5, True)])
    root = TreeNode("t", "root", [Edge("a", 0.0, False, n1), Edge("e", 0.2, True),
                                  Edge("f", 0.3, False, TreeNode("t", "unexpanded"))])
    q = {(s, a): v for _, s, a, v in experience.max_backup(root, 0.9)}
    # d = 1; b = 0 + .9·1; c = .5; a = 0 + .9·max(.9, .5); e = .2; f: child never expanded → its reward
    assert q == pytest.approx({("n2", "d"): 1.0, ("n1", "b"): 0.9, ("n1", "c"): 0.5, ("root", "a"): 0.81,
                               ("root", "e"): 0.2, ("root", "f"): 0.3})


def test_tree_grown_in_a_corridor_has_the_hand_computed_q_values() -> None:
    env = Corridor((3,))
    env.reset("n-3")
    env.step("right")  # at position 1 of 3
    tree = experience.grow_tree(env, env.snapshot(), width=2, depth=1, epsilon=0.0, rng=random.Random(0))
    assert sorted(e.action for e in tree.edges) == ["left", "right"]
    q = {(s, a): v for _, s, a, v in experience.max_backup(tree, 0.9)}
    # right: 1 → 2 → 3 (reward 1 on the second step): .9; left: 1 → 0, then three rights: .9³
    assert q[(".@..", "right")] == pytest.approx(0.9)
    assert q[(".@..", "left")] == pytest.approx(0.729)
    assert q[("@...", "right")] == pytest.approx(0.81)


def test_monte_carlo_returns_of_hand_made_trajectories() -> None:
    assert experience.discounted_return([0.0, 0.0, 1.0], 0.9) == pytest.approx(0.81)
    env = Corridor((3,))
    env.reset("n-3")
    start = env.snapshot()
    rng = random.Random(0)
    assert experience.mc_value(env, start, None, samples=3, epsilon=0.0, discount=0.9, rng=rng) == pytest.approx(0.81)
    assert experience.mc_value(env, start, "left", samples=2, epsilon=0.0, discount=0.9, rng=rng) == pytest.approx(0.729)
    # a horizon of 3 leaves no time after a wasted step: returns 0
    short = Corridor((3,), horizon=3)
    short.reset("n-3")
    assert experience.mc_value(short, short.snapshot(), "left", samples=2, epsilon=0.0, discount=0.9,
                               rng=rng) == 0.0
    # ε = 1: every continuation is random; the mean of K returns, each a discounted 0/1 return
    value = experience.mc_value(env, start, None, samples=50, epsilon=1.0, discount=0.9, rng=random.Random(3))
    assert 0.0 < value < 0.81


def test_hashed_features_are_deterministic_normalised_and_cached(tmp_path: Path) -> None:
    f = HashedNgrams(256)
    a, b = f.encode(["SFFF\nF@FH\nFFFG", "move left"]), f.encode(["SFFF\nF@FH\nFFFG", "move left"])
    assert np.array_equal(a, b)
    assert np.linalg.norm(a, axis=1) == pytest.approx([1.0, 1.0])
    assert not np.allclose(f.encode(["SFFF\nF@FH"])[0], f.encode(["SFFF\nFF@H"])[0])
    cache = FeatureCache(f, tmp_path, "fp")
    cache.encode(["x", "y", "x"])
    assert cache.encoded == 2
    again = FeatureCache(f, tmp_path, "fp")
    assert np.array_equal(again.encode(["y"]), f.encode(["y"]))
    assert again.encoded == 0


# -- a toy MDP with a known Q*: each method's targets recover what its paper says they estimate -----
@dataclass(frozen=True)
class ToySnapshot(Snapshot):
    """A toy MDP state: its node (a direct restore, so that a stochastic step is not re-drawn by replay)."""

    node: int


class ToyMDP(Environment):
    """A layered MDP: ``layers`` layers of ``width`` nodes after a start node 0, three actions per node, seeded
    rewards in [0, 1); an action from layer ``l`` leads to a node of layer ``l + 1`` (deterministic: one fixed
    node; stochastic: one of two, with probabilities ``p`` and ``1 - p``); the last layer's actions end the
    episode.  The node's layer is its time step, so the observation ``node i`` is Markov."""

    name, reference_policy = "toy-mdp", "action a0"
    ACTIONS = ("a0", "a1", "a2")

    def __init__(self, *, stochastic: bool, layers: int = 4, width: int = 3, seed: int = 0) -> None:
        super().__init__(horizon=layers + 1)
        rng = random.Random(seed)
        self.stochastic, self.layers = stochastic, layers
        self.nodes = 1 + layers * width
        self.layer = [0] + [1 + (n - 1) // width for n in range(1, self.nodes)]
        self.reward = [[round(rng.random(), 3) for _ in self.ACTIONS] for _ in range(self.nodes)]
        self.succ: list[list[list[tuple[int, float]]]] = []
        for node in range(self.nodes):
            nxt = [n for n in range(self.nodes) if self.layer[n] == self.layer[node] + 1]
            outs = []
            for _ in self.ACTIONS:
                if not nxt:
                    outs.append([])
                elif stochastic:
                    a, b = rng.sample(nxt, 2)
                    p = round(rng.uniform(0.2, 0.8), 2)
                    outs.append([(a, p), (b, 1 - p)])
                else:
                    outs.append([(rng.choice(nxt), 1.0)])
            self.succ.append(outs)
        self.draws = random.Random(seed + 1)
        self.node = 0

    tasks = property(lambda self: ("toy",))

    def config(self):  # type: ignore[no-untyped-def]
        return {"stochastic": self.stochastic}

    def _reset(self, task: str) -> None:
        self.node = 0

    def _step(self, action: str) -> tuple[float, bool]:
        a = self.ACTIONS.index(action)
        reward, outs = self.reward[self.node][a], self.succ[self.node][a]
        if not outs:
            return reward, True
        u, acc = self.draws.random(), 0.0
        for nxt, p in outs:
            acc += p
            if u < acc:
                break
        self.node = nxt
        return reward, False

    def observation(self) -> str:
        return f"node {self.node}"

    def candidates(self) -> list[str]:
        return list(self.ACTIONS)

    def reference_action(self) -> str:
        return "a0"

    def snapshot(self) -> ToySnapshot:
        return ToySnapshot(task="toy", history=self.history, node=self.node)

    def restore(self, snapshot: Snapshot) -> None:
        if not isinstance(snapshot, ToySnapshot):
            super().restore(snapshot)
            return
        self.reset("toy")
        self._history, self.node = list(snapshot.history), snapshot.node

    def at(self, node: int) -> ToySnapshot:
        """A snapshot of ``node`` (its history: a0 moves of the node's length, only the step count matters)."""
        return ToySnapshot(task="toy", history=("a0",) * self.layer[node], node=node)

    def value_iteration(self, discount: float, policy: Callable[[np.ndarray], np.ndarray] | None = None,
                        sweeps: int = 50) -> np.ndarray:
        """``Q[node, action]`` by repeated Bellman backups: of the max (Q*), or of ``policy(Q) -> V`` (Q^π)."""
        q = np.zeros((self.nodes, len(self.ACTIONS)))
        for _ in range(sweeps):
            v = q.max(axis=1) if policy is None else policy(q)
            q = np.array([[self.reward[n][a] + discount * sum(p * v[m] for m, p in self.succ[n][a])
                           for a in range(len(self.ACTIONS))] for n in range(self.nodes)])
        return q


def q_table(env: ToyMDP, rows: list[tuple[str, str, float]]) -> dict[tuple[int, int], float]:
    """``(state text, action, value)`` rows as ``(node, action index) → value`` (one value per pair)."""
    out: dict[tuple[int, int], float] = {}
    for obs, action, value in rows:
        key = (int(obs.split()[1]), env.ACTIONS.index(action))
        assert out.get(key, value) == pytest.approx(value, abs=1e-9)
        out[key] = value
    return out


def test_a_qlass_tree_backs_up_q_star_of_a_deterministic_mdp() -> None:
    """QLASS's target is r + γ·max over the child's tried actions: with every action tried at every level it is Q*."""
    env = ToyMDP(stochastic=False)
    q_star = env.value_iteration(0.9)
    tree = experience.grow_tree(env, env.at(0), width=3, depth=env.layers + 1, epsilon=0.0, rng=random.Random(0))
    table = q_table(env, [(s, a, q) for _, s, a, q in experience.max_backup(tree, 0.9)])
    reachable = {0} | {m for n in range(env.nodes) for outs in env.succ[n] for m, _ in outs}
    assert {n for n, _ in table} == reachable
    for (n, a), q in table.items():
        assert q == pytest.approx(q_star[n, a], abs=1e-6)
    # a tree of depth 1 continues with the actor below its first level: Q of "a then the policy", not Q*
    shallow = experience.grow_tree(env, env.at(0), width=3, depth=1, epsilon=0.0, rng=random.Random(0))
    q_pi = env.value_iteration(0.9, policy=lambda q: q[:, 0])
    root = {a: q for _, s, a, q in experience.max_backup(shallow, 0.9) if s == "node 0"}
    assert len(root) == 3
    for a, q in root.items():
        i = env.ACTIONS.index(a)
        assert q == pytest.approx(q_pi[0, i], abs=1e-6)
    assert not np.allclose(q_pi[0], q_star[0])  # the toy separates the two


@pytest.mark.parametrize("stochastic", [False, True])
def test_amc_monte_carlo_targets_are_q_of_the_actor(stochastic: bool) -> None:
    """AMC regresses on returns of continuations by the actor (its prior): the target is Q^π of that policy —
    exact in a deterministic MDP with ε = 0, within the Monte-Carlo error in a stochastic one."""
    env = ToyMDP(stochastic=stochastic)
    q_pi = env.value_iteration(0.95, policy=lambda q: q[:, 0])  # the actor: always a0
    samples = 1 if not stochastic else 3000
    rng = random.Random(0)
    for node in (0, 1, 5, env.nodes - 1):
        for a, action in enumerate(env.ACTIONS):
            got = experience.mc_value(env, env.at(node), action, samples=samples, epsilon=0.0, discount=0.95, rng=rng)
            tolerance = 1e-6 if not stochastic else 4 * 1.5 / np.sqrt(samples)  # returns span less than 1.5
            assert got == pytest.approx(q_pi[node, a], abs=tolerance), (node, action)
        state_value = experience.mc_value(env, env.at(node), None, samples=samples, epsilon=0.0, discount=0.95, rng=rng)
        assert state_value == pytest.approx(q_pi[node, 0], abs=1e-6 if not stochastic else 4 * 1.5 / np.sqrt(samples))


def tabular_iql(transitions: list[experience.Transition], tau: float, discount: float, sweeps: int = 8
                ) -> dict[tuple[str, str], float]:
    """IQL with a table for Q and V: V(s) minimises Best-of-Q's expectile loss (:func:`expectile_loss`) of
    ``Q(s, a) − V(s)`` over the data's (s, a); Q(s, a) minimises the squared error to :func:`iql_q_target` over
    the data's transitions from (s, a) (their mean).  Bisection on the loss's gradient (autograd), float64;
    ``sweeps`` must exceed the MDP's depth (the toy's values settle one layer per sweep)."""
    by_pair: dict[tuple[str, str], list[experience.Transition]] = {}
    for t in transitions:
        by_pair.setdefault((t.state, t.action), []).append(t)
    actions_of: dict[str, list[str]] = {}
    for t in transitions:
        actions_of.setdefault(t.state, []).append(t.action)  # as often as the data holds them
    q = {pair: 0.0 for pair in by_pair}
    v: dict[str, float] = {}

    def gradient(values: torch.Tensor, guess: float) -> float:
        x = torch.tensor(guess, dtype=torch.float64, requires_grad=True)
        expectile_loss(values - x, tau).backward()
        assert x.grad is not None
        return float(x.grad)

    for _ in range(sweeps):
        for state, acts in actions_of.items():
            values = torch.tensor([q[(state, a)] for a in acts], dtype=torch.float64)
            lo, hi = float(values.min()) - 1, float(values.max()) + 1
            for _ in range(60):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if gradient(values, mid) < 0 else (lo, mid)
            v[state] = (lo + hi) / 2
        for pair, ts in by_pair.items():
            targets = iql_q_target(torch.tensor([t.reward for t in ts], dtype=torch.float64),
                                   torch.tensor([float(t.done) for t in ts], dtype=torch.float64),
                                   torch.tensor([v.get(t.next_state, 0.0) for t in ts], dtype=torch.float64), discount)
            q[pair] = float(targets.mean())
    return q


def toy_states(env: ToyMDP) -> list[schema.State]:
    """Every node as a dataset state offering all three actions (what Best-of-Q's branch transitions step from)."""
    out = []
    for node in range(env.nodes):
        sid = f"n{node}"
        snap = env.at(node)
        cands = tuple(schema.Candidate(id=f"{sid}-a{i}", state_id=sid, index=i, action=a, next_state="", is_actor=i == 0)
                      for i, a in enumerate(env.ACTIONS))
        out.append(schema.State(id=sid, split="train", trajectory=0, step=snap.step, task="toy",
                                observation=f"node {node}", history=snap.history, candidates=cands))
    return out


def test_best_of_q_iql_targets_recover_q_star_and_the_behaviour_q() -> None:
    """Best-of-Q's IQL on the one-step branches of every state: its fixed point tends to Q* as the expectile τ → 1
    (V becomes the max over the data's actions) and is Q of the data's action distribution (uniform) at τ = 0.5."""
    env = ToyMDP(stochastic=False)
    # the branch transitions replay each node's history: the toy's a0 histories reach other nodes, so step directly
    transitions = []
    for node in range(env.nodes):
        for action in env.ACTIONS:
            env.restore(env.at(node))
            result = env.step(action)
            transitions.append(experience.Transition("toy", f"node {node}", action, result.reward, result.observation,
                                                     result.done))
    q_star = env.value_iteration(0.99)
    q_uniform = env.value_iteration(0.99, policy=lambda q: q.mean(axis=1))
    for tau, expected in ((1 - 1e-9, q_star), (0.5, q_uniform)):
        table = q_table(env, [(s, a, q) for (s, a), q in tabular_iql(transitions, tau, 0.99).items()])
        assert len(table) == env.nodes * 3
        for (n, a), q in table.items():
            assert q == pytest.approx(expected[n, a], abs=1e-6), (tau, n, a)
    # τ = 0.7 (the default) lies in between: above the uniform policy's Q, below Q*
    mid = q_table(env, [(s, a, q) for (s, a), q in tabular_iql(transitions, 0.7, 0.99).items()])
    assert all(q_uniform[n, a] - 1e-9 <= q <= q_star[n, a] + 1e-9 for (n, a), q in mid.items())


def test_best_of_q_iql_targets_on_a_stochastic_mdp_recover_q_star_of_the_data() -> None:
    """In a stochastic MDP the TD targets average the sampled next states: IQL (τ → 1) recovers Q* of the MDP whose
    transition probabilities are the data's frequencies, and approaches the true Q* as the samples grow."""
    env = ToyMDP(stochastic=True)
    transitions = []
    for node in range(env.nodes):
        for action in env.ACTIONS:
            for _ in range(200):
                env.restore(env.at(node))
                result = env.step(action)
                transitions.append(experience.Transition("toy", f"node {node}", action, result.reward,
                                                         result.observation, result.done))
    counts: dict[tuple[int, int], dict[int, int]] = {}
    for t in transitions:
        key = (int(t.state.split()[1]), env.ACTIONS.index(t.action))
        nxt = -1 if t.done else int(t.next_state.split()[1])
        counts.setdefault(key, {}).setdefault(nxt, 0)
        counts[key][nxt] += 1
    empirical = ToyMDP(stochastic=True)
    empirical.succ = [[[(m, c / sum(counts[(n, a)].values())) for m, c in sorted(counts[(n, a)].items()) if m >= 0]
                       for a in range(3)] for n in range(env.nodes)]
    q_data = empirical.value_iteration(0.99)
    table = q_table(env, [(s, a, q) for (s, a), q in tabular_iql(transitions, 1 - 1e-9, 0.99).items()])
    for (n, a), q in table.items():
        assert q == pytest.approx(q_data[n, a], abs=1e-6)
    assert np.abs(q_data - env.value_iteration(0.99)).max() < 0.1  # 200 samples per pair: near the true Q*


# -- training on FrozenLake ----------------------------------------------------------------
def small_frozenlake() -> tuple[FrozenLake, build.DatasetSpec]:
    env, spec = registry.BUILDERS["frozenlake"]()
    return env, replace(spec, version="learned-test", num_trajectories=40, modalities=("text",), end_images=False,
                        secret_test=False)  # a public test split: the fixture builds without the secret


@pytest.fixture(scope="module")
def fl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env, spec = small_frozenlake()
    folder = tmp_path_factory.mktemp("fl-small")
    build.build_dataset(env, spec).write(folder)
    return folder


class RecordingLake(FrozenLake):
    """FrozenLake that records every task it is reset to."""

    def __init__(self) -> None:
        env, _ = registry.BUILDERS["frozenlake"]()
        super().__init__(map_seeds=env.map_seeds, size=8, horizon=env.horizon)  # type: ignore[attr-defined]
        self.reset_tasks: set[str] = set()

    def _reset(self, task: str) -> None:
        self.reset_tasks.add(task)
        super()._reset(task)


def hide_labels(folder: Path, target: Path) -> Path:
    """A copy of the dataset in ``folder`` with no readable label of dev or test: labels.jsonl keeps only
    train lines and the dev/test lines are replaced by garbage; ``Dataset.read`` is refused (see the test)."""
    target.mkdir()
    for name in ("manifest.json", "states.jsonl", "candidates.jsonl"):
        (target / name).write_bytes((folder / name).read_bytes())
    split_of = {}
    for line in (folder / "states.jsonl").read_text().splitlines():
        rec = json.loads(line)
        split_of[rec["id"]] = rec["split"]
    kept = []
    for line in (folder / "labels.jsonl").read_text().splitlines():
        rec = json.loads(line)
        state_id = rec["id"] if rec["target"] == "v" else rec["id"].rsplit("-a", 1)[0]
        kept.append(line if split_of[state_id] == "train" else "<<hidden label>>")
    (target / "labels.jsonl").write_text("\n".join(kept) + "\n")
    return target


@pytest.mark.parametrize("method", list(methods.METHODS))
def test_training_reads_no_dev_or_test_label_and_explores_only_train_tasks(
        method: str, fl_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hidden = hide_labels(fl_dir, tmp_path / "hidden")
    with pytest.raises(schema.SchemaError):
        schema.Dataset.read(hidden)  # the poisoned labels really are unreadable

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("training read the dataset with its labels")

    monkeypatch.setattr(schema.Dataset, "read", classmethod(refuse))
    monkeypatch.setattr(schema.Dataset, "labels_for", refuse)
    env = RecordingLake()
    _, spec = small_frozenlake()
    folder, model = methods.train(method, hidden, tmp_path / "models", featuriser=HashedNgrams(512), seed=1,
                                  params=FAST[method], env=env, spec=spec)
    inputs = read_inputs(hidden)
    train_tasks = {s.task for s in inputs.states_in("train")}
    assert env.reset_tasks and env.reset_tasks <= train_tasks
    assert model.data["splits"] == ["train"] and model.data["labels_read"] is False
    feats = FeatureCache(HashedNgrams(512), None, inputs.fingerprint)
    for split in ("dev", "test"):
        scores = methods.score_split(model, inputs, split, "q", feats)
        assert len(scores) == sum(len(s.candidates) for s in inputs.states_in(split))
        assert all(np.isfinite(list(scores.values())))


@pytest.mark.slow
def test_trained_models_are_reproducible_stored_and_q_aligned(fl_dir: Path, tmp_path: Path) -> None:
    env, spec = small_frozenlake()
    ds = schema.Dataset.read(fl_dir)  # labels read by the test only, to check alignment
    inputs = read_inputs(fl_dir)
    f = HashedNgrams(512)
    for method in methods.METHODS:
        folder, model = methods.train(method, fl_dir, tmp_path / "models", featuriser=f, seed=3,
                                      params=FAST[method], env=env, spec=spec, cache_dir=tmp_path / "features")
        again_folder, again = methods.train(method, fl_dir, tmp_path / "models", featuriser=f, seed=3,
                                            params=FAST[method], env=env, spec=spec, cache_dir=tmp_path / "features")
        assert again.version == model.version and again_folder == folder
        other = methods.train(method, fl_dir, tmp_path / "models", featuriser=f, seed=4,
                              params=FAST[method], env=env, spec=spec)[1]
        assert other.version != model.version
        loaded = store.load(folder)
        assert loaded.version == model.version and set(loaded.losses) == set(model.losses)
        assert all(len(curve) > 10 for curve in loaded.losses.values())
        scorer = methods.Scorer.open(folder, f, tmp_path / "features")
        state = inputs.states_in("test")[0]
        points = [Point(state.task, state.observation, c.action) for c in state.candidates]
        assert scorer.score(points) == pytest.approx(list(model.q(points, scorer.feats)))
        for split in ("dev", "test"):
            q = methods.score_split(loaded, inputs, split, "q", scorer.feats)
            actor = [s.actor_candidate.id for s in ds.states_in(split)]
            rho = spearmanr([q[i] for i in q], [ds.q_labels[i] for i in q])[0]
            assert rho > 0.2, (method, split, rho)
            v = methods.score_split(loaded, inputs, split, "v", scorer.feats)
            assert set(v) == {s.id for s in ds.states_in(split)} and len(actor) == len(v)
    # the bad inputs are clear errors
    with pytest.raises(ValueError, match="unknown parameters"):
        methods.train("qlass", fl_dir, tmp_path / "m", featuriser=f, params={"gamma": 1}, env=env, spec=spec)
    with pytest.raises(KeyError, match="unknown learned method"):
        methods.train("q-star", fl_dir, tmp_path / "m", featuriser=f, env=env, spec=spec)


# -- the representation check: exact tabular features on FrozenLake ---------------------------------
def shared_map_lake() -> tuple[FrozenLake, build.DatasetSpec]:
    """Four FrozenLake maps whose trajectories go to train, dev and test within each map (tabular features
    know only the maps they were trained on), text only."""
    _, spec = registry.BUILDERS["frozenlake"]()
    env = FrozenLake(map_seeds=tuple(range(42, 46)), size=8, horizon=30)
    return env, replace(spec, version="tabular-check", num_trajectories=40, modalities=("text",), end_images=False,
                        secret_test=False, split_by="trajectory", split_cycle=("train", "dev", "train", "test", "train"))


@pytest.fixture(scope="module")
def shared_lake_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env, spec = shared_map_lake()
    folder = tmp_path_factory.mktemp("fl-shared")
    build.build_dataset(env, spec).write(folder)
    return folder


TABULAR = {"best-of-q": {"epsilon": 0.0, "discount": 0.95, "tau": 0.9, "steps": 3000, "target_every": 20, "lr": 3e-3,
                         "branch_depth": 1},
           "qlass": {"epsilon": 0.0, "discount": 0.95, "width": 4, "steps": 500},
           "amc-value": {"epsilon": 0.0, "samples": 1, "discount": 0.95, "steps": 1000, "branch_depth": 1}}
"""The labeller's policy (ε = 0) and discount (0.95), so that each method's own target (Q* for QLASS's full-width
tree and IQL's high expectile, Q of the reference policy for AMC) is what the labels hold.  Best-of-Q bootstraps
through V, so its one-hot weights (each updated only when its (state, action) is drawn) need a larger step than the
regressions: at lr 1e-3 its within-state ρ was 0.88 after 3000 steps, at 3e-3 0.95 (seeds 0 and 1).  Best-of-q's
and amc-value's ``branch_depth`` 1 offers every move where their branches lead, as a picker's moves off the actor's
path need."""


def test_tabular_grid_features_are_exact_one_hots() -> None:
    from qval.envs.frozenlake.adapter import ACTIONS
    from qval.learned.features import TabularGrid, featuriser_from_spec

    tab = featuriser_from_spec("tabular")
    assert isinstance(tab, TabularGrid) and tab.dim == 16 * 64 and tab.pair_dim == 16 * 64 * 4
    env, _ = shared_map_lake()
    states = []
    for task in env.tasks:
        env.reset(task)
        states.append(env.observation())
        env.step(env.reference_action())
        states.append(env.observation())
    assert len({tab.map_bucket(s) for s in states}) == 4  # the check's four maps do not share a bucket
    vectors = tab.encode(states + list(ACTIONS))
    assert (vectors.sum(axis=1) == 1).all() and len({int(v.argmax()) for v in vectors[:8]}) == 8
    pairs = tab.encode_pairs([s for s in states for _ in ACTIONS], [a for _ in states for a in ACTIONS])
    assert (pairs.sum(axis=1) == 1).all() and len({int(v.argmax()) for v in pairs}) == len(states) * 4
    with pytest.raises(ValueError, match="not one of the grid's actions"):
        tab.encode_pairs(states[:1], ["jump"])
    with pytest.raises(ValueError, match="whole number"):
        featuriser_from_spec("tabular:many")


def test_crossed_ngrams_give_each_action_its_own_view_of_the_state() -> None:
    crossed, plain = CrossedNgrams(512), HashedNgrams(512)
    env, _ = shared_map_lake()
    env.reset(env.tasks[0])
    here = env.observation()
    env.step("move right")
    there = env.observation()
    assert np.array_equal(crossed.encode([here]), plain.encode([here]))  # single texts: the hashed n-grams
    pairs = crossed.encode_pairs([here, here, there], ["move left", "move right", "move left"])
    assert np.linalg.norm(pairs, axis=1) == pytest.approx([1.0, 1.0, 1.0])
    assert not np.allclose(pairs[0], pairs[1]) and not np.allclose(pairs[0], pairs[2])
    assert np.array_equal(pairs, crossed.encode_pairs([here, here, there], ["move left", "move right", "move left"]))
    with pytest.raises(ValueError, match="no pair features"):
        plain.encode_pairs([here], ["move left"])


def test_branch_depth_offers_every_move_where_the_branches_lead(shared_lake_dir: Path) -> None:
    """The coverage gap: with ``depth = 0`` some states a train candidate's continuation reaches next offer only the
    actor's move; with ``depth = 1`` every such state has a transition for each of its four moves (it was offered
    there, or earlier as a train state or another branch's state)."""
    env, _ = shared_map_lake()
    states = schema.Dataset.read(shared_lake_dir).states_in("train")
    assert states

    def moves(transitions: list[experience.Transition]) -> dict[tuple[str, str], set[str]]:
        out: dict[tuple[str, str], set[str]] = {}
        for t in transitions:
            out.setdefault((t.task, t.state), set()).add(t.action)
        return out

    def reached(transitions: list[experience.Transition]) -> set[tuple[str, str]]:
        """The states one step after a train state's candidate, where the episode goes on."""
        firsts = {(s.task, s.observation, c.action) for s in states for c in s.candidates}
        return {(t.task, t.next_state) for t in transitions if (t.task, t.state, t.action) in firsts and not t.done}

    shallow = experience.branch_transitions(env, states, epsilon=0.0, rng=random.Random(0))
    deep = experience.branch_transitions(env, states, epsilon=0.0, rng=random.Random(0), depth=1)
    assert any(len(moves(shallow).get(key, set())) < 4 for key in reached(shallow))
    assert reached(deep) and all(moves(deep)[key] == set(env.candidates()) for key in reached(deep))
    assert len(deep) > len(shallow)
    with pytest.raises(ValueError):
        experience.branch_transitions(env, states, depth=1)


def test_amc_branch_depth_scores_every_move_where_the_candidates_lead(shared_lake_dir: Path) -> None:
    """AMC's coverage gap, as best-of-q's above: with ``branch_depth`` 0 some states one step after a train state's
    candidate have a value target for the actor's move only; with 1 every such state has one for each of its moves."""
    from qval.learned import defaults, trainers

    env, _ = shared_map_lake()
    states = schema.Dataset.read(shared_lake_dir).states_in("train")
    p = {**defaults.AMC_VALUE, "epsilon": 0.0, "samples": 1, "discount": 0.95}
    firsts = []  # (task, the state after a train candidate, where the episode goes on)
    for s in states:
        for c in s.candidates:
            env.restore(experience.snapshot_of(s))
            if not env.step(c.action).done:
                firsts.append((s.task, env.observation()))

    def moves(rows: list[trainers.AmcRow]) -> dict[tuple[str, str], set[str]]:
        out: dict[tuple[str, str], set[str]] = {}
        for task, observation, action, _ in rows:
            if action is not None:
                out.setdefault((task, observation), set()).add(action)
        return out

    shallow, none = trainers.amc_targets(env, states, {**p, "branch_depth": 0}, seed=0)
    deep, points = trainers.amc_targets(env, states, {**p, "branch_depth": 1}, seed=0)
    assert firsts and none == 0 and points > 0
    assert any(len(moves(shallow).get(key, set())) < 4 for key in firsts)
    assert all(moves(deep)[key] == set(env.candidates()) for key in firsts)
    assert set(shallow) <= set(deep)  # depth 0's targets are all kept (ε = 0: no return depends on the draws)


@pytest.mark.parametrize("method", list(methods.METHODS))
def test_with_exact_tabular_features_each_method_ranks_the_test_candidates(method: str, shared_lake_dir: Path,
                                                                           tmp_path: Path) -> None:
    """Trained on the train split only, with one weight per (map, cell, action): test ρ ≥ 0.95 and within-state
    ρ ≥ 0.9.  Below that, the method's algorithm or targets would be wrong, not its features."""
    from qval.learned.features import featuriser_from_spec
    from qval.metrics import ranking_spearman

    env, spec = shared_map_lake()
    tab = featuriser_from_spec("tabular")
    _, model = methods.train(method, shared_lake_dir, tmp_path, featuriser=tab, seed=0, params=TABULAR[method],
                             env=env, spec=spec)
    ds = schema.Dataset.read(shared_lake_dir)
    q = methods.score_split(model, read_inputs(shared_lake_dir), "test", "q", FeatureCache(tab, None, ds.manifest.fingerprint))
    rho = spearmanr([q[i] for i in q], [ds.q_labels[i] for i in q])[0]
    within = ranking_spearman([([ds.q_labels[c.id] for c in s.candidates], [q[c.id] for c in s.candidates])
                               for s in ds.states_in("test")]).mean
    assert rho >= 0.95 and within is not None and within >= 0.9, (method, rho, within)


def test_a_tampered_stored_model_is_refused(fl_dir: Path, tmp_path: Path) -> None:
    env, spec = small_frozenlake()
    folder, _ = methods.train("amc-value", fl_dir, tmp_path, featuriser=HashedNgrams(128), seed=0,
                              params={"steps": 20, "samples": 1, "max_states": 5}, env=env, spec=spec)
    meta = json.loads((folder / "model.json").read_text())
    meta["seed"] = 99
    (folder / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="do not match"):
        store.load(folder)


def test_the_registry_adapter_scores_the_points_it_is_given(fl_dir: Path, tmp_path: Path) -> None:
    env, spec = small_frozenlake()
    folder, _ = methods.train("qlass", fl_dir, tmp_path / "models", featuriser=HashedNgrams(), seed=0,
                              params={"steps": 30, "max_roots": 5}, env=env, spec=spec)

    class Ctx:
        dataset_dir, split, target, seed, cache_dir = fl_dir, "dev", "v", 0, tmp_path / "cache"
        points = [s.id for s in read_inputs(fl_dir).states_in("dev")[:3]] + ["no-such-state"]
        options = {"model": folder, "featuriser": "hashed"}  # the model's: the default is crossed
        progress = staticmethod(lambda done, total: None)

    out = methods.run("qlass", Ctx())
    assert list(out.scores) == Ctx.points and out.num_nan == 1
    # without a model named, the newest one of the same features is used: none of crossed ones here
    key = read_inputs(fl_dir).manifest.key
    assert methods.latest_model(tmp_path / "models", "qlass", key, HashedNgrams().name) == folder
    assert methods.latest_model(tmp_path / "models", "qlass", key, CrossedNgrams().name) is None
    assert out.meta["version"] == store.load(folder).version
    # the registry's contract: points are the split's states; target q scores every candidate
    states = read_inputs(fl_dir).states_in("dev")[:2]
    Ctx.points, Ctx.target = states, "q"
    out = methods.run("qlass", Ctx())
    assert list(out.scores) == [c.id for s in states for c in s.candidates] and out.num_nan == 0

    # states that are not in the dataset (a Best-of-N turn's) are scored from their own texts
    state = states[0]
    sid = "bon-e000-s00"
    turn = replace(state, id=sid, candidates=tuple(
        replace(c, id=f"{sid}-a{i}", state_id=sid) for i, c in enumerate(state.candidates)))
    Ctx.points, Ctx.split = [turn], "test"
    fresh = methods.run("qlass", Ctx())
    assert fresh.num_nan == 0
    assert [fresh.scores[f"{sid}-a{i}"] for i in range(len(state.candidates))] == pytest.approx(
        [out.scores[c.id] for c in state.candidates], abs=1e-5)  # float32 batches of another size


# -- ALFWorld and MiniWoB: small builds, fast settings --------------------------------------
def train_and_score_everywhere(env_key: str, make_env: Callable[[], Environment], spec: build.DatasetSpec,
                               tmp_path: Path, params: dict[str, dict[str, object]],
                               trained: Sequence[str] = methods.METHODS) -> None:
    """Build ``spec`` (cached between sessions: :func:`tests.conftest.cached_build`), train each learned method
    of ``trained`` (default: all) on it in a fresh ``make_env()``, score dev and test (finite, every point)."""
    folder = cached_build(env_key, make_env, spec)
    inputs = read_inputs(folder)
    env = make_env()
    try:
        for method in trained:
            _, model = methods.train(method, folder, tmp_path / "models", featuriser=HashedNgrams(512), seed=0,
                                     params=params[method], env=env, spec=spec)
            feats = FeatureCache(HashedNgrams(512), None, inputs.fingerprint)
            for split in ("dev", "test"):
                for target in ("q", "v"):
                    scores = methods.score_split(model, inputs, split, target, feats)
                    assert scores and all(np.isfinite(list(scores.values()))), (method, split, target)
    finally:
        env.close()


@pytest.mark.slow
def test_every_learned_method_trains_on_alfworld(tmp_path: Path) -> None:
    from qval.envs.alfworld.adapter import ALFWorld, choose_scenes

    spec = build.DatasetSpec(slug="alfworld-small", name="ALFWorld small", version="0", description="test build",
                             modalities=("text",), num_trajectories=3, max_states_per_trajectory=2, epsilon=0.3,
                             seed=5, discount=0.95, splits=("train", "dev", "test"), split_by="task")
    fast = {"best-of-q": {"steps": 100, "target_every": 10}, "qlass": {"steps": 100, "width": 2, "depth": 1},
            "amc-value": {"steps": 100, "samples": 1}}
    train_and_score_everywhere("ALFWorld(choose_scenes(3, seed=7), horizon=15)",
                               lambda: ALFWorld(choose_scenes(3, seed=7), horizon=15, game_root=tmp_path / "games"),
                               spec, tmp_path, fast)


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.parametrize("method", methods.METHODS)  # one test each: minutes of Chromium steps apiece under load
def test_every_learned_method_trains_on_miniwob(method: str, tmp_path: Path) -> None:
    from qval.envs.miniwob.adapter import MiniWoB

    # tasks login-user:0, enter-password:0, login-user:1, enter-password:1 → train, dev, test, train
    # (both need three actions, so an ε = 0 trajectory has a middle turn to sample)
    spec = build.DatasetSpec(slug="miniwob-small", name="MiniWoB small", version="0", description="test build",
                             modalities=("text",), num_trajectories=4, max_states_per_trajectory=1, epsilon=0.0,
                             seed=42, discount=0.95, splits=("train", "dev", "test"), split_by="task")
    fast = {"best-of-q": {"steps": 60, "target_every": 10, "branches": False},
            "qlass": {"steps": 60, "width": 2, "depth": 1, "epsilon": 0.0},
            "amc-value": {"steps": 60, "samples": 1, "epsilon": 0.0}}
    train_and_score_everywhere("MiniWoB(('login-user', 'enter-password'), range(2), horizon=6)",
                               lambda: MiniWoB(task_names=("login-user", "enter-password"), seeds=range(2), horizon=6),
                               spec, tmp_path, fast, (method,))


# -- the embeddings path: the project's own server with a tiny local model -----------------
def test_embeddings_endpoint_mean_pools_the_last_layer_and_trains_a_method(tiny_model: Path, fl_dir: Path,
                                                                          tmp_path: Path) -> None:
    import transformers

    from qval import backbone as bb
    from qval.learned.features import EmbeddingsEndpoint, featuriser_from_spec

    backend = bb.TransformersBackend(tiny_model, name="tiny-llama", device="cpu")
    with bb.BackboneServer(backend, 10**7, address=("127.0.0.1", 0)) as server:
        url = "http://%s:%d" % server.address
        endpoint = featuriser_from_spec(f"{url}#tiny-llama")
        assert isinstance(endpoint, EmbeddingsEndpoint) and endpoint.dim == 32
        texts = ["move left", "SFFF\nF@FH"]
        got = endpoint.encode(texts)
        tok = transformers.AutoTokenizer.from_pretrained(tiny_model)
        model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model).eval()
        for text, vec in zip(texts, got):
            with torch.no_grad():
                hidden = model(torch.tensor([tok(text)["input_ids"]]), output_hidden_states=True).hidden_states[-1]
            assert vec == pytest.approx(hidden[0].mean(0).numpy(), abs=1e-5)
        assert server.usage.prompt_tokens > 0
        env, spec = small_frozenlake()
        folder, trained = methods.train("qlass", fl_dir, tmp_path / "models", featuriser=endpoint, seed=0,
                                        params={"steps": 40, "max_roots": 6, "width": 2}, env=env, spec=spec,
                                        cache_dir=tmp_path / "features")
        assert trained.featuriser == "embeddings-tiny-llama-32"
        inputs = read_inputs(fl_dir)
        feats = FeatureCache(endpoint, tmp_path / "features", inputs.fingerprint)
        scores = methods.score_split(trained, inputs, "dev", "q", feats)
        assert all(np.isfinite(list(scores.values())))
        refeats = FeatureCache(endpoint, tmp_path / "features", inputs.fingerprint)
        refeats.encode([s.observation for s in inputs.states_in("dev")])
        assert refeats.encoded == 0  # cached per dataset fingerprint
        bad = server.embeddings  # bad input is a clear 400
        with pytest.raises(bb.BackboneError, match="input must be"):
            bad({"input": []})


# -- SmolLM2-135M-Instruct's hidden states (the session's model) --------------------------------
def test_smollm2_features_are_the_models_hidden_states_and_are_cached(smollm2, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from qval import smollm2 as smol
    from qval.learned.features import PAIR_ACTION_PREFIX, SmolLM2Hidden, featuriser_from_spec

    backend, _ = smollm2
    spec_made = featuriser_from_spec("smollm2")
    featuriser = SmolLM2Hidden(backend, batch_size=2)
    assert featuriser.name == spec_made.name and smol.SHA256[:12] in featuriser.name
    body = backend.model.base_model
    state = "FrozenLake: you are @.\n@FHF\nFFFG"
    texts = [state, "You are in a kitchen. You see a fridge 1.", "move left"]
    got = featuriser.encode(texts)
    assert got.shape == (3, smol.HIDDEN_SIZE) and not np.allclose(got[0], got[1], atol=1e-3)
    with torch.inference_mode():
        for text, vec in zip(texts, got):  # the mean final hidden state, scaled to length 1
            hidden = body(input_ids=torch.tensor([backend.tokenizer(text)["input_ids"]])).last_hidden_state[0].mean(0)
            assert vec == pytest.approx((hidden / hidden.norm()).numpy(), abs=1e-4)
    other = "FrozenLake: you are @.\nF@HF\nFFFG"  # shares the legend's tokens with state: run once, continued
    states, actions = [state, state, other, state], ["move left", "move down", "move left", "move right"]
    pairs = featuriser.encode_pairs(states, actions)  # a prefix pass a state, its cache shared by its actions
    assert featuriser._shared is not None and 8 <= len(featuriser._shared[0])
    with torch.inference_mode():
        for state, action, vec in zip(states, actions, pairs):  # the last token's final hidden state of state + action
            ids = backend.tokenizer(state)["input_ids"] + backend.tokenizer(PAIR_ACTION_PREFIX + action,
                                                                          add_special_tokens=False)["input_ids"]
            hidden = body(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
            assert vec == pytest.approx((hidden / hidden.norm()).numpy(), abs=1e-4)
    assert not np.allclose(pairs[0], pairs[1], atol=1e-3) and not np.allclose(pairs[0], pairs[2], atol=1e-3)
    assert featuriser.encode([other])[0] == pytest.approx(featuriser._means[other], abs=0)  # kept from its pair pass
    with torch.inference_mode():
        hidden = body(input_ids=torch.tensor([backend.tokenizer(other)["input_ids"]])).last_hidden_state[0].mean(0)
    assert featuriser._means[other] == pytest.approx((hidden / hidden.norm()).numpy(), abs=1e-4)
    cache = FeatureCache(featuriser, tmp_path, "fp")
    first, first_pairs = cache.encode(texts), cache.encode_pairs(states, actions)
    again = FeatureCache(featuriser, tmp_path, "fp")  # another process: read from disk, nothing encoded
    assert np.array_equal(again.encode(texts), first) and np.array_equal(again.encode_pairs(states, actions), first_pairs)
    assert again.encoded == 0 and np.allclose(first, got, atol=1e-5)


def test_qlass_trains_end_to_end_on_smollm2_features(smollm2, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from qval.learned.features import SmolLM2Hidden

    # a tiny dataset: one 4×4 map (short texts, few states: each is a forward pass of the model on the CPU)
    env = FrozenLake(map_seeds=(42,), size=4, horizon=10)
    _, spec = small_frozenlake()
    spec = replace(spec, version="smollm2-test", num_trajectories=6, max_states_per_trajectory=2, split_by="trajectory")
    build.build_dataset(env, spec).write(tmp_path / "lake")
    featuriser = SmolLM2Hidden(smollm2[0])
    folder, trained = methods.train("qlass", tmp_path / "lake", tmp_path / "models", featuriser=featuriser, seed=0,
                                    params={"steps": 30, "max_roots": 2, "width": 2, "depth": 1}, env=env, spec=spec,
                                    cache_dir=tmp_path / "features")
    assert trained.featuriser == featuriser.name and len(trained.nets["q"].projections) == 4  # with pair features
    scorer = methods.Scorer.open(folder, featuriser, tmp_path / "features")  # what a Best-of-N picker loads
    inputs = read_inputs(tmp_path / "lake")
    state = (inputs.states_in("dev") or inputs.states_in("test"))[0]
    scores = scorer.score_candidates([state])
    assert set(scores) == {c.id for c in state.candidates} and np.all(np.isfinite(list(scores.values())))
    assert len(set(scores.values())) > 1


# -- amc-value with LoRA on a local backbone (the tiny random-weight checkpoint) -------------
LORA_FAST = {"steps": 30, "samples": 1, "max_states": 8, "batch_size": 32, "lora": True, "lora_lr": 1e-3}


def test_a_lora_linear_adds_the_scaled_low_rank_update_to_its_frozen_base() -> None:
    from qval.learned.lora import LoRALinear

    base = torch.nn.Linear(3, 2)
    layer = LoRALinear(base, rank=2, alpha=4.0, generator=torch.Generator().manual_seed(0))
    x = torch.randn(5, 3)
    assert torch.equal(layer(x), base(x))  # B starts at zero: the backbone is unchanged
    with torch.no_grad():
        layer.lora_b.copy_(torch.tensor([[1.0, 0.0], [0.5, -1.0]]))
    by_hand = x @ base.weight.T + base.bias + 2.0 * (x @ layer.lora_a.T @ layer.lora_b.T)  # alpha / rank = 2
    assert torch.allclose(layer(x), by_hand)
    assert [n for n, p in layer.named_parameters() if p.requires_grad] == ["lora_a", "lora_b"]
    with pytest.raises(ValueError, match="rank"):
        LoRALinear(base, rank=0, alpha=4.0, generator=torch.Generator())


def corridor_mc_rows() -> list[tuple[str, str, str | None, float]]:
    """Hand-made Monte-Carlo targets in a corridor of length 4 (γ = 0.9, the ε = 0 actor walks right):
    from position i the goal is 4 − i steps away, V = 0.9^(3 − i); stepping left costs two steps."""
    rows: list[tuple[str, str, str | None, float]] = []
    for i in range(4):
        state = "." * i + "@" + "." * (4 - i)
        rows.append(("walk to the end", state, None, 0.9 ** (3 - i)))
        rows.append(("walk to the end", state, "right", 0.9 ** (3 - i)))
        rows.append(("walk to the end", state, "left", 0.9 ** (3 - i + 2) if i > 0 else 0.9 ** 4))
    return rows


def test_lora_training_moves_only_adapters_and_head_and_fits_monte_carlo_targets(tiny_model: Path) -> None:
    import transformers

    from qval.learned.lora import BackboneEncoder
    from qval.learned.trainers import fit_lora_value

    rows = corridor_mc_rows()
    env = Corridor((4,))
    env.reset("n-4")
    # the hand-made targets are the Monte-Carlo returns of the environment
    assert experience.mc_value(env, env.snapshot(), "left", samples=1, epsilon=0.0, discount=0.9,
                               rng=random.Random(0)) == pytest.approx(rows[2][3])
    params = {"steps": 120, "batch_size": 12, "lr": 3e-3, "lora_lr": 3e-3, "dropout": 0.0}
    _, head, encoder, curve = fit_lora_value(rows, tiny_model, params, seed=0)
    assert np.mean(curve[-10:]) < 0.2 * np.mean(curve[:10]), (curve[:10], curve[-10:])

    fresh = transformers.AutoModel.from_pretrained(tiny_model, local_files_only=True).state_dict()
    trained = {k.replace(".base.", "."): v for k, v in encoder.body.state_dict().items() if ".lora_" not in k}
    assert set(trained) == set(fresh) and all(torch.equal(trained[k], fresh[k]) for k in fresh)  # base: bitwise
    adapters = encoder.adapter_state()
    assert len(adapters) == 2 * len(encoder.adapted) == 2 * 14  # q, k, v, o, gate, up, down of 2 layers
    assert all(p.abs().sum() > 0 for k, p in adapters.items() if k.endswith("lora_b"))  # B left zero
    frozen = BackboneEncoder(tiny_model)
    with torch.no_grad():
        assert not torch.allclose(encoder.encode(["@...."]), frozen.encode(["@...."]), atol=1e-4)
        # frozen, a padded batch gives each text's own mean-pooled last hidden layer (as /v1/embeddings)
        texts = ["@....", "walk to the end of the corridor", ""]
        lm = transformers.AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True).eval()
        tok = transformers.AutoTokenizer.from_pretrained(tiny_model)
        for text, vec in zip(texts, frozen.encode(texts)):
            ids = tok(text)["input_ids"] or [tok.eos_token_id]
            hidden = lm(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1]
            assert torch.allclose(vec, hidden[0].mean(0), atol=1e-5)
    trainable = {n for n, p in encoder.named_parameters() if p.requires_grad}
    assert trainable == {f"body.{k}" for k in adapters}


def test_a_checkpoint_digest_follows_its_files(tmp_path: Path) -> None:
    """The digest is the SHA-256 of the files' names and contents; kept per process, it is still new as soon as
    a file is rewritten, even with the same size."""
    import hashlib
    import os

    from qval.learned.features import checkpoint_digest

    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 8}')
    (folder / "model.safetensors").write_bytes(b"a" * 1000)
    expected = hashlib.sha256(b"config.json\0" + b'{"hidden_size": 8}' + b"model.safetensors\0" + b"a" * 1000)
    assert checkpoint_digest(folder) == checkpoint_digest(str(folder)) == expected.hexdigest()
    before = (folder / "model.safetensors").stat().st_mtime_ns
    (folder / "model.safetensors").write_bytes(b"b" * 1000)
    os.utime(folder / "model.safetensors", ns=(before + 1, before + 1))  # however coarse the clock
    assert checkpoint_digest(folder) != expected.hexdigest()


def test_lora_amc_value_trains_on_frozenlake_stores_reloads_and_scores(tiny_model: Path, fl_dir: Path,
                                                                      tmp_path: Path) -> None:
    import shutil

    from qval.learned.features import LocalBackbone, featuriser_from_spec

    checkpoint = tmp_path / "tiny"
    shutil.copytree(tiny_model, checkpoint)
    env, spec = small_frozenlake()
    local = featuriser_from_spec(f"local:{checkpoint}")
    assert isinstance(local, LocalBackbone) and local.dim == 32
    folder, model = methods.train("amc-value", fl_dir, tmp_path / "models", featuriser=local, seed=5,
                                  params=LORA_FAST, env=env, spec=spec)
    again_folder, again = methods.train("amc-value", fl_dir, tmp_path / "models", featuriser=local, seed=5,
                                        params=LORA_FAST, env=env, spec=spec)
    assert again.version == model.version and again_folder == folder
    assert model.encoder is not None and again.encoder is not None
    assert all(torch.equal(t, again.encoder.adapter_state()[k]) for k, t in model.encoder.adapter_state().items())
    other = methods.train("amc-value", fl_dir, tmp_path / "models", featuriser=local, seed=6,
                          params=LORA_FAST, env=env, spec=spec)[1]
    assert other.version != model.version
    assert model.backbone is not None and model.backbone["lora_rank"] == 8 and model.backbone["lora_alpha"] == 16.0
    assert "LoRA adapters (rank 8, alpha 16)" in model.data["fine_tuned"] and model.data["labels_read"] is False

    inputs = read_inputs(fl_dir)
    loaded = store.load(folder)
    assert loaded.version == model.version and loaded.encoder is not None
    feats = FeatureCache(featuriser_from_spec(f"local:{checkpoint}"), None, inputs.fingerprint)
    for split in ("dev", "test"):
        for target in ("q", "v"):
            scores = methods.score_split(model, inputs, split, target, feats)
            assert scores and all(np.isfinite(list(scores.values())))
            assert methods.score_split(loaded, inputs, split, target, feats) == pytest.approx(scores, abs=1e-6)
    q = methods.score_split(loaded, inputs, "dev", "q", feats)
    assert len(set(np.round(list(q.values()), 6))) > 1  # the states are told apart
    assert feats.encoded == 0  # a fine-tuned model encodes through its own adapters, not frozen features
    scorer = methods.Scorer.open(folder, featuriser_from_spec(f"local:{checkpoint}"))  # a Best-of-N picker's
    state = inputs.states_in("test")[0]
    points = [Point(state.task, state.observation, c.action) for c in state.candidates]
    assert scorer.score(points) == pytest.approx(list(model.q(points, feats)), abs=1e-6)

    # the adapters belong to that checkpoint: a changed one is refused; LoRA needs a local backbone
    (checkpoint / "config.json").write_text((checkpoint / "config.json").read_text() + "\n")
    with pytest.raises(ValueError, match="not the one the adapters were trained on"):
        store.load(folder)
    with pytest.raises(ValueError, match="local:PATH"):
        methods.train("amc-value", fl_dir, tmp_path / "m", featuriser=HashedNgrams(64), params=LORA_FAST,
                      env=env, spec=spec)
    with pytest.raises(ValueError, match="not a local transformers checkpoint"):
        featuriser_from_spec(f"local:{tmp_path / 'nowhere'}")

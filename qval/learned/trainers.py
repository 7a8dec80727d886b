"""The three trainers of the learned family (torch, CPU or GPU, seeded).

Each trainer gathers experience from the train split (:mod:`qval.learned.experience`),
encodes its texts once (unique texts only) through a :class:`~qval.learned.features.FeatureCache`,
fits its networks with AdamW (:func:`_optimiser`: decoupled weight decay, cosine learning-rate
decay, gradient-norm clipping at 1.0) on minibatches drawn by a generator seeded with ``seed``, and returns a
:class:`~qval.learned.store.TrainedModel` with its loss curves.

* :func:`train_best_of_q`: IQL on the re-collected train trajectories and on every train
  candidate continued by the ε-greedy actor to the episode's end (so that each next state has
  transitions of its own: a V never trained on a state makes its Q targets noise; ``branch_depth`` also offers every
  candidate at the first new states those continuations visit).  ``L_V = mean(L2^τ(Q_target(s,a) − V(s)))`` with the expectile
  loss :func:`expectile_loss`, ``L_Q = mean((r + γ(1 − done)·V(s') − Q(s,a))²)``
  (:func:`iql_q_target`); the target Q network is a copy of Q refreshed every
  ``target_every`` steps (100, as Best-of-Q's appendix).
* :func:`train_qlass`: MSE of a QNet on the :func:`~qval.learned.experience.max_backup`
  targets of exploration trees (γ = 0.9), grown from the train states and from the first state
  of every train task (:func:`start_states`; AMC's continuations and Best-of-Q's branches start
  there too).
* :func:`train_amc_value`: MSE of a value head on Monte-Carlo returns of sampled
  continuations: for each train state ``(s, no action) → mean return from s`` and for each
  candidate ``(s, a) → mean return after forcing a``; with ``every_step`` (the default, AMC's
  Eq. 7) also every later step ``s_k`` of those continuations, ``(s_k, a_k)`` and ``(s_k, no
  action)`` → its return-to-go, so that the states a candidate leads to are learned too.  With ``lora`` and a local backbone
  (featuriser ``local:PATH``) the features are not frozen: :func:`fit_lora_value` trains LoRA
  adapters of the backbone jointly with the head, as the paper (§4.1, Table 7: AdamW, cosine
  schedule after a 10 % warm-up, gradient norm clipped at 1, rank 8, alpha 16).
"""

from __future__ import annotations

import copy
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from qval import build, schema
from qval.envs.base import Environment, Snapshot
from qval.learned import defaults, experience
from qval.learned.data import Inputs
from qval.learned.features import FeatureCache, LocalBackbone
from qval.learned.lora import BackboneEncoder
from qval.learned.nets import FieldNet, limit_threads
from qval.learned.store import TrainedModel

Progress = Callable[[int, int, str], None]
"""``progress(done, total, stage)``: stages ``experience`` then ``train``."""

LOSS_POINTS = 200
"""Loss curves are kept as at most this many points (means over equal chunks of steps)."""

WARMUP = 0.1
"""LoRA training: the share of steps whose learning rate ramps up linearly (AMC's warm-up ratio)."""

Row = tuple[str, str, str | None, float]
"""A regression target: ``(task, state, action or None for the state itself, target)``."""

def expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """IQL's ``mean(|τ − 1(u < 0)| · u²)`` of ``diff = Q_target(s, a) − V(s)``."""
    if not 0.0 < tau < 1.0:
        raise ValueError(f"the expectile tau must be in (0, 1), got {tau}")
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    return (weight * diff.pow(2)).mean()


def iql_q_target(reward: torch.Tensor, done: torch.Tensor, next_v: torch.Tensor, discount: float) -> torch.Tensor:
    """``r + γ · (1 − done) · V(s')``."""
    return reward + discount * (1.0 - done) * next_v


@dataclass
class _Texts:
    """Unique texts encoded once; rows refer to them by index."""

    matrix: torch.Tensor
    index: dict[str, int]

    @classmethod
    def encode(cls, feats: FeatureCache, texts: Sequence[str]) -> "_Texts":
        unique = list(dict.fromkeys(texts))
        return cls(torch.from_numpy(feats.encode(unique)), {t: i for i, t in enumerate(unique)})

    def rows(self, texts: Sequence[str]) -> torch.Tensor:
        return torch.tensor([self.index[t] for t in texts], dtype=torch.long)


def _pair_matrix(feats: FeatureCache, states: Sequence[str], actions: Sequence[str | None]) -> torch.Tensor | None:
    """Pair features of each ``(states[i], actions[i])`` row (zeros where the action is None), or None when the
    featuriser has none.  Each distinct pair is encoded once."""
    if not feats.pair_dim:
        return None
    pairs = list(dict.fromkeys((s, a) for s, a in zip(states, actions) if a is not None))
    matrix = torch.from_numpy(feats.encode_pairs([s for s, _ in pairs], [a for _, a in pairs]))
    at = {pair: i for i, pair in enumerate(pairs)}
    out = torch.zeros(len(states), feats.pair_dim)
    rows = [i for i, a in enumerate(actions) if a is not None]
    if rows:
        out[rows] = matrix[[at[(states[i], actions[i])] for i in rows]]
    return out


def _params(defaults: dict[str, Any], given: dict[str, Any] | None) -> dict[str, Any]:
    given = dict(given or {})
    unknown = set(given) - set(defaults)
    if unknown:
        raise ValueError(f"unknown parameters {sorted(unknown)}; this method takes {sorted(defaults)}")
    return defaults | given


def _net_config(field_dims: list[int], params: dict[str, Any]) -> dict[str, Any]:
    return {"field_dims": field_dims, "shared": int(params["shared"]), "hidden": list(params["hidden"]),
            "dropout": float(params["dropout"])}


def _optimiser(net: torch.nn.Module, params: dict[str, Any]) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW with ``weight_decay`` decoupled from the gradient, and a cosine decay of ``lr`` over ``steps``.

    Not Adam's coupled L2 term: Adam divides it, like the loss gradient, by the running gradient scale of each
    weight, so a weight whose input is rarely non-zero (one (state, action) column of a one-hot or hashed
    feature) is pulled to zero between its rare updates at nearly the full learning rate.  Measured with the
    tabular features on FrozenLake (best-of-q, 3000 steps): within-state ρ 0.78 with Adam's L2 (1e-4), 0.88
    with AdamW or with no weight decay.

    Fused: one pass over each weight per step instead of one per arithmetic operation, which matters for the wide
    first layers of one-hot and hashed features (the tabular Best-of-Q test: 85.9 s before, 64.9 s after). The
    same update, up to float rounding."""
    opt = torch.optim.AdamW(net.parameters(), lr=params["lr"], weight_decay=params["weight_decay"], fused=True)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, int(params["steps"])))
    return opt, sched


def _step(loss: torch.Tensor, net: torch.nn.Module, opt: torch.optim.Optimizer, sched: Any) -> None:
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    sched.step()


def _curve(values: list[float]) -> list[float]:
    """``values`` as at most :data:`LOSS_POINTS` chunk means."""
    if len(values) <= LOSS_POINTS:
        return [float(v) for v in values]
    chunks = np.array_split(np.asarray(values), LOSS_POINTS)
    return [float(c.mean()) for c in chunks]


def _report(progress: Progress | None, stage: str) -> Progress | None:
    if progress is None:
        return None
    return lambda done, total, _sub: progress(done, total, stage)


def _seed(seed: int) -> torch.Generator:
    limit_threads()
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _train_indices(inputs: Inputs) -> list[int]:
    return sorted({s.trajectory for s in inputs.states_in("train")})


def _model(method: str, inputs: Inputs, feats: FeatureCache, seed: int, params: dict[str, Any],
           net_config: dict[str, dict[str, Any]], nets: dict[str, FieldNet], data: dict[str, Any],
           losses: dict[str, list[float]], started: float, backbone: dict[str, Any] | None = None,
           encoder: BackboneEncoder | None = None) -> TrainedModel:
    for net in nets.values():
        net.eval()
    if encoder is not None:
        encoder.eval()
    return TrainedModel(method=method, dataset=inputs.manifest.key, fingerprint=inputs.fingerprint,
                        featuriser=feats.featuriser.name, seed=seed, params=params, net_config=net_config, nets=nets,
                        data=data, losses={k: _curve(v) for k, v in losses.items()},
                        seconds=time.monotonic() - started, backbone=backbone, encoder=encoder)


def train_best_of_q(inputs: Inputs, env: Environment, spec: build.DatasetSpec, feats: FeatureCache, *,
                    seed: int = 0, params: dict[str, Any] | None = None,
                    progress: Progress | None = None) -> TrainedModel:
    """IQL on the train split's transitions (see the module docstring)."""
    p = _params(defaults.BEST_OF_Q, params)
    started = time.monotonic()
    train_states = inputs.states_in("train")
    indices = _train_indices(inputs)
    transitions = experience.trajectory_transitions(env, spec, indices, _report(progress, "experience"))
    num_trajectory_steps = len(transitions)
    if p["branches"]:
        starts = start_states(env, sorted({s.task for s in train_states}), seed, "best-of-q")
        transitions += experience.branch_transitions(env, train_states + starts, _report(progress, "experience"),
                                                     epsilon=float(p["epsilon"]), rng=random.Random(f"{seed}/branches"),
                                                     depth=int(p["branch_depth"]))
    if not transitions:
        raise ValueError(f"{inputs.manifest.key}: the train split has no trajectories to learn from")
    # pairs first: a featuriser that runs each state as its pairs' prefix (smollm2) encodes the state in that pass
    pair = _pair_matrix(feats, [t.state for t in transitions], [t.action for t in transitions])
    states = _Texts.encode(feats, [t.state for t in transitions] + [t.next_state for t in transitions])
    actions = _Texts.encode(feats, [t.action for t in transitions])
    tasks = _Texts.encode(feats, [t.task for t in transitions])
    s_idx, s2_idx = states.rows([t.state for t in transitions]), states.rows([t.next_state for t in transitions])
    a_idx, t_idx = actions.rows([t.action for t in transitions]), tasks.rows([t.task for t in transitions])
    reward = torch.tensor([t.reward for t in transitions], dtype=torch.float32)
    done = torch.tensor([float(t.done) for t in transitions], dtype=torch.float32)

    gen = _seed(seed)
    dim_s, dim_a, dim_t = states.matrix.shape[1], actions.matrix.shape[1], tasks.matrix.shape[1]
    q_fields = [dim_s, dim_a, dim_t] + ([pair.shape[1]] if pair is not None else [])
    config = {"q": _net_config(q_fields, p), "v": _net_config([dim_s, dim_t], p)}
    q_net, v_net = FieldNet(**config["q"]), FieldNet(**config["v"])
    q_target = copy.deepcopy(q_net).eval()
    q_opt, q_sched = _optimiser(q_net, p)
    v_opt, v_sched = _optimiser(v_net, p)
    losses: dict[str, list[float]] = {"q": [], "v": []}
    steps, n = int(p["steps"]), len(transitions)
    for step in range(steps):
        q_net.train()
        v_net.train()
        batch = torch.randint(n, (min(p["batch_size"], n),), generator=gen)
        s, s2 = states.matrix[s_idx[batch]], states.matrix[s2_idx[batch]]
        a, t = actions.matrix[a_idx[batch]], tasks.matrix[t_idx[batch]]
        q_in = (s, a, t) if pair is None else (s, a, t, pair[batch])
        with torch.no_grad():
            target_q = q_target(*q_in)
            next_v = v_net(s2, t)
        v_loss = expectile_loss(target_q - v_net(s, t), p["tau"])
        _step(v_loss, v_net, v_opt, v_sched)
        q_loss = (q_net(*q_in) - iql_q_target(reward[batch], done[batch], next_v, p["discount"])).pow(2).mean()
        _step(q_loss, q_net, q_opt, q_sched)
        if (step + 1) % int(p["target_every"]) == 0:
            q_target.load_state_dict(q_net.state_dict())
        losses["q"].append(q_loss.item())
        losses["v"].append(v_loss.item())
        if progress and ((step + 1) % 50 == 0 or step + 1 == steps):
            progress(step + 1, steps, "train")
    data = {"splits": ["train"], "labels_read": False, "train_states": len(train_states),
            "trajectories": len(indices), "trajectory_transitions": num_trajectory_steps,
            "branch_transitions": len(transitions) - num_trajectory_steps,
            "branch_depth": int(p["branch_depth"]) if p["branches"] else None,
            "rewards": "environment rewards of re-collected train trajectories and of every train candidate "
                       "continued by the ε-greedy actor (and, with branch_depth, every candidate of the first "
                       "new states those continuations visit)"}
    return _model("best-of-q", inputs, feats, seed, p, config, {"q": q_net, "v": v_net}, data, losses, started)


def _fit(name: str, rows: list[tuple[str, str, str | None, float]], inputs: Inputs, feats: FeatureCache,
         p: dict[str, Any], seed: int, progress: Progress | None) -> tuple[dict[str, Any], FieldNet, list[float]]:
    """Regress a (state, action, task) ``FieldNet`` on ``(task, state, action or None, target)`` rows by MSE."""
    if not rows:
        raise ValueError(f"{inputs.manifest.key}: no {name} targets from the train split")
    pair = _pair_matrix(feats, [r[1] for r in rows], [r[2] for r in rows])  # first, as in train_best_of_q
    states = _Texts.encode(feats, [r[1] for r in rows])
    actions = _Texts.encode(feats, [r[2] for r in rows if r[2] is not None] or [""])
    tasks = _Texts.encode(feats, [r[0] for r in rows])
    zero = torch.zeros(1, actions.matrix.shape[1])
    action_matrix = torch.cat([actions.matrix, zero])  # the last row: "no action"
    s_idx, t_idx = states.rows([r[1] for r in rows]), tasks.rows([r[0] for r in rows])
    a_idx = torch.tensor([actions.index[r[2]] if r[2] is not None else len(actions.index) for r in rows])
    target = torch.tensor([r[3] for r in rows], dtype=torch.float32)
    gen = _seed(seed)
    config = _net_config([states.matrix.shape[1], actions.matrix.shape[1], tasks.matrix.shape[1]]
                         + ([pair.shape[1]] if pair is not None else []), p)
    net = FieldNet(**config)
    opt, sched = _optimiser(net, p)
    curve: list[float] = []
    steps, n = int(p["steps"]), len(rows)
    for step in range(steps):
        net.train()
        batch = torch.randint(n, (min(p["batch_size"], n),), generator=gen)
        fields = [states.matrix[s_idx[batch]], action_matrix[a_idx[batch]], tasks.matrix[t_idx[batch]]]
        pred = net(*fields, *([pair[batch]] if pair is not None else []))
        loss = (pred - target[batch]).pow(2).mean()
        _step(loss, net, opt, sched)
        curve.append(loss.item())
        if progress and ((step + 1) % 50 == 0 or step + 1 == steps):
            progress(step + 1, steps, "train")
    return config, net, curve


def _warmup_cosine(steps: int) -> Callable[[int], float]:
    """Learning-rate factor of step ``s``: linear warm-up over :data:`WARMUP` of the steps, then cosine to 0."""
    warm = max(1, round(WARMUP * steps))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1.0 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))

    return factor


def fit_lora_value(rows: Sequence[Row], backbone: str | Path, params: dict[str, Any] | None = None, *,
                   seed: int = 0, progress: Progress | None = None
                   ) -> tuple[dict[str, Any], FieldNet, BackboneEncoder, list[float]]:
    """Regress a (state, action, task) value head on ``rows`` by MSE (AMC's Eq. 7), jointly with LoRA adapters
    of the local checkpoint ``backbone``; its mean-pooled last hidden layer of each text feeds the head.

    ``params``: :data:`qval.learned.defaults.AMC_VALUE` overrides (``steps``, ``batch_size``, ``lr`` for the
    head, ``lora_lr`` for the adapters, ``lora_rank``, ``lora_alpha``, ``weight_decay``, the head's shape).
    AdamW, warm-up then cosine (:func:`_warmup_cosine`), gradient norm clipped at 1.  The base weights
    are frozen.  Returns the head's config, the head, the adapted encoder and the loss per step.
    """
    p = _params(defaults.AMC_VALUE, params)
    if not rows:
        raise ValueError("no value targets to fit")
    encoder = BackboneEncoder(backbone, lora=(int(p["lora_rank"]), float(p["lora_alpha"]), seed))
    gen = _seed(seed)
    config = _net_config([encoder.dim] * 3, p)
    head = FieldNet(**config)
    adapters = list(encoder.adapter_state().values())
    opt = torch.optim.AdamW([{"params": list(head.parameters()), "lr": float(p["lr"])},
                             {"params": adapters, "lr": float(p["lora_lr"])}], weight_decay=float(p["weight_decay"]))
    steps, n = int(p["steps"]), len(rows)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _warmup_cosine(steps))
    target = torch.tensor([r[3] for r in rows], dtype=torch.float32)
    zero = torch.zeros(encoder.dim)
    curve: list[float] = []
    for step in range(steps):
        head.train()
        encoder.train()
        batch = torch.randint(n, (min(int(p["batch_size"]), n),), generator=gen)
        picked = [rows[i] for i in batch.tolist()]
        texts = list(dict.fromkeys([r[1] for r in picked] + [r[0] for r in picked]
                                   + [r[2] for r in picked if r[2] is not None]))
        vectors = encoder.encode(texts, batch_size=64)
        at = {t: i for i, t in enumerate(texts)}
        state = vectors[[at[r[1]] for r in picked]]
        task = vectors[[at[r[0]] for r in picked]]
        action = torch.stack([vectors[at[r[2]]] if r[2] is not None else zero for r in picked])
        loss = (head(state, action, task) - target[batch]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(head.parameters()) + adapters, 1.0)
        opt.step()
        sched.step()
        curve.append(loss.item())
        if progress and ((step + 1) % 10 == 0 or step + 1 == steps):
            progress(step + 1, steps, "train")
    head.eval()
    encoder.eval()
    return config, head, encoder, curve


def _roots(inputs: Inputs, env: Environment, limit: int | None, seed: int, what: str) -> list[schema.State]:
    """The train states (``limit`` of them drawn with the seed), then the first state of every train task
    (:func:`start_states`)."""
    states = inputs.states_in("train")
    if limit is not None and limit < len(states):
        states = sorted(random.Random(f"{seed}/{what}").sample(states, limit), key=lambda s: s.id)
    return states + start_states(env, sorted({s.task for s in inputs.states_in("train")}), seed, what)


def start_states(env: Environment, tasks: Sequence[str], seed: int, what: str) -> list[schema.State]:
    """The first state of each task, offering the candidates the environment samples there.

    A dataset never holds an episode's first turn, but a Best-of-N picker scores it first: trained only
    on dataset states, a model meets it unseen and answers with its action prior (the same move in every
    state).  The papers' training data starts at the task's beginning too."""
    out = []
    for task in tasks:
        env.reset(task)
        rng = random.Random(f"{seed}/{what}/start/{task}")
        actions = env.sample_candidates(env.reference_action(), rng)
        sid = f"start-{task}"
        cands = tuple(schema.Candidate(id=f"{sid}-a{i}", state_id=sid, index=i, action=a, next_state="",
                                       is_actor=a == env.reference_action()) for i, a in enumerate(actions))
        out.append(schema.State(id=sid, split="train", trajectory=-1, step=0, task=task,
                                observation=env.observation(), history=(), candidates=cands))
    return out


def train_qlass(inputs: Inputs, env: Environment, feats: FeatureCache, *, seed: int = 0,
                params: dict[str, Any] | None = None, progress: Progress | None = None) -> TrainedModel:
    """QLASS: exploration trees from the train states, max backup, QNet regression."""
    p = _params(defaults.QLASS, params)
    started = time.monotonic()
    roots = _roots(inputs, env, p["max_roots"], seed, "qlass")
    rows: list[tuple[str, str, str | None, float]] = []
    nodes = 0
    for i, state in enumerate(roots):
        rng = random.Random(f"{seed}/qlass/{state.id}")
        tree = experience.grow_tree(env, experience.snapshot_of(state), width=int(p["width"]),
                                    depth=int(p["depth"]), epsilon=float(p["epsilon"]), rng=rng)
        backed = experience.max_backup(tree, float(p["discount"]))
        nodes += len(backed)
        rows += [(task, obs, action, q) for task, obs, action, q in backed]
        if progress:
            progress(i + 1, len(roots), "experience")
    config, net, curve = _fit("Q", rows, inputs, feats, p, seed, progress)
    data = {"splits": ["train"], "labels_read": False, "trees": len(roots), "tree_edges": nodes,
            "targets": "max backup of environment rewards over exploration trees grown from the train states"}
    return _model("qlass", inputs, feats, seed, p, {"q": config}, {"q": net}, data, {"q": curve}, started)


AmcRow = tuple[str, str, str | None, float]
"""An AMC value target: (task, observation, action or ``None`` for the state's own value, mean return)."""


def _amc_rows(task: str, observation: str, action: str | None, runs: list[list[tuple[str, str, float]]],
              every_step: bool) -> list[AmcRow]:
    """AMC's value targets from ``runs`` (:func:`~qval.learned.experience.mc_returns` from one state, ``action``
    forced first): the mean first return for (``observation``, ``action``), and with ``every_step`` each later step
    of each run, for the actor's action there and for the state itself (AMC's Eq. 7)."""
    rows: list[AmcRow] = [
        (task, observation, action, sum(r[0][2] if r else 0.0 for r in runs) / len(runs))]
    if every_step:
        rows += [(task, obs, act, ret) for run in runs for obs, act, ret in run[1:]]
        rows += [(task, obs, None, ret) for run in runs for obs, _, ret in run[1:]]
    return rows


def amc_targets(env: Environment, states: Sequence[schema.State], p: dict[str, Any], seed: int,
                progress: Progress | None = None) -> tuple[list[AmcRow], int]:
    """AMC's value targets from ``states`` (parameters ``p``: ``samples``, ``epsilon``, ``discount``, ``every_step``,
    ``branch_depth``) and the number of branch points ``branch_depth`` added: every candidate of each state, forced
    and continued by the actor (:func:`_amc_rows`), and the same at the first ``branch_depth`` new states (task and
    observation not offered yet) of each candidate's continuations, with the moves a dataset state there would
    offer (:meth:`~qval.envs.base.Environment.sample_candidates` of the actor's move)."""
    rows: list[AmcRow] = []
    depth, every_step = int(p["branch_depth"]), bool(p["every_step"])
    offered = {(s.task, s.observation) for s in states}
    branch_points = 0
    for i, state in enumerate(states):
        rng = random.Random(f"{seed}/amc/{state.id}")
        snap = experience.snapshot_of(state)
        kwargs = dict(samples=int(p["samples"]), epsilon=float(p["epsilon"]), discount=float(p["discount"]), rng=rng)
        for action in [None] + [c.action for c in state.candidates]:
            runs = experience.mc_returns(env, snap, action, **kwargs)
            rows += _amc_rows(state.task, state.observation, action, runs, every_step)
            if action is None:
                continue
            for run in runs:  # branch_depth: the first new states of a candidate's continuations offer their moves
                for k in range(1, min(depth, len(run) - 1) + 1):
                    observation = run[k][0]
                    if (state.task, observation) in offered:
                        continue
                    offered.add((state.task, observation))
                    branch_points += 1
                    branch = Snapshot(task=snap.task, history=snap.history + tuple(a for _, a, _ in run[:k]))
                    env.restore(branch)
                    for move in env.sample_candidates(run[k][1], rng):
                        rows += _amc_rows(state.task, observation, move,
                                          experience.mc_returns(env, branch, move, **kwargs), every_step)
        if progress:
            progress(i + 1, len(states), "experience")
    return rows, branch_points


def train_amc_value(inputs: Inputs, env: Environment, feats: FeatureCache, *, seed: int = 0,
                    params: dict[str, Any] | None = None, progress: Progress | None = None) -> TrainedModel:
    """Agentic Monte Carlo's value model on Monte-Carlo returns of sampled continuations."""
    p = _params(defaults.AMC_VALUE, params)
    started = time.monotonic()
    states = _roots(inputs, env, p["max_states"], seed, "amc")
    rows, branch_points = amc_targets(env, states, p, seed, progress)
    data = {"splits": ["train"], "labels_read": False, "states": len(states), "targets": len(rows),
            "branch_depth": int(p["branch_depth"]), "branch_points": branch_points,
            "rollouts": len(rows) * int(p["samples"]),
            "targets_from": "mean discounted environment return of continuations sampled with the ε-noisy actor"
                            + (", and the return-to-go of every later step of them" if p["every_step"] else "")}
    if not p["lora"]:
        config, net, curve = _fit("value", rows, inputs, feats, p, seed, progress)
        data["fine_tuned"] = f"the value head only, on frozen {feats.featuriser.name} features"
        return _model("amc-value", inputs, feats, seed, p, {"q": config}, {"q": net}, data, {"value": curve}, started)
    local = feats.featuriser
    if not isinstance(local, LocalBackbone):
        raise ValueError(f"amc-value with lora fine-tunes a local backbone: use the featuriser 'local:PATH' "
                         f"(a transformers checkpoint folder), not {local.name}")
    if not rows:
        raise ValueError(f"{inputs.manifest.key}: no value targets from the train split")
    config, net, encoder, curve = fit_lora_value(rows, local.path, p, seed=seed, progress=progress)
    backbone = {"path": str(local.path), "digest": local.digest, "lora_rank": int(p["lora_rank"]),
                "lora_alpha": float(p["lora_alpha"]), "adapted": encoder.adapted}
    data["fine_tuned"] = (f"LoRA adapters (rank {backbone['lora_rank']}, alpha {backbone['lora_alpha']:g}) on the "
                          f"{len(encoder.adapted)} linear projections (attention and MLP) of {local.path.name}, "
                          f"jointly with the value head on its mean-pooled last hidden layer; base weights frozen")
    return _model("amc-value", inputs, feats, seed, p, {"q": config}, {"q": net}, data, {"value": curve}, started,
                  backbone=backbone, encoder=encoder)


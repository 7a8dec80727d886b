"""Benchmark: which features let the learned methods rank a state's candidates, and does it pay off in Best-of-N?

For each dataset below (FrozenLake and ALFWorld), each featuriser and each learned method, the script trains on the
train split only (:func:`qval.learned.methods.train`), scores the test split and plays seeded
Best-of-N episodes (:mod:`qval.best_of_n`, N = 2 and 4) on the test split's tasks with the model as
picker, against the ``base`` picker (the actor's own choice) on the same episodes.  It prints one
line per (dataset, featuriser, method): test ρ (global Spearman of target q), within-state ρ
(:func:`qval.metrics.ranking_spearman`), the same two on the train split (train ρ, train within-state ρ:
whether the model fits the states it was trained on), and per N the success rate and the paired gain over
base with 95% bootstrap CIs; ``--json`` also writes them to a file.

Datasets (text only, public test splits, built in memory):

* ``shared``: four maps (seeds 42–45), trajectories split train/dev/test *within* each map, so the
  test states' maps were seen in training: the setting where exact ``tabular`` features apply.
* ``unseen``: ``frozenlake-8x8@1.1``'s 20 maps split *by map* (test maps never seen in training),
  as the hosted dataset: features must generalise across maps (``tabular`` is not run there).
* ``alfworld``: ``alfworld-pick-place@1.0`` (:data:`qval.envs.alfworld.datasets.PICK_PLACE_V1_0`): the hosted 1.1's
  train and dev splits byte for byte, and 10 public test scenes (1.1's are secret), split by scene, so
  the test scenes are unseen as on ``unseen``; its game generation and labels take minutes.

Training settings: ``--settings labeller`` (default) sets each method's policy to the labeller's
(ε = 0: FrozenLake's optimal policy, ALFWorld's handcoded expert) and its discount to the dataset's
(0.95), as the tabular check in ``tests/test_learned.py``, so that a method's own target is the labels' Q and the features are the only variable;
``--settings defaults`` uses the methods' defaults (:mod:`qval.learned.defaults`).

Usage::

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/learned_features.py --json var/learned-features.json
    python benchmarks/learned_features.py --datasets shared --features tabular --methods qlass --episodes 40
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/learned_features.py --datasets unseen --features crossed,smollm2 \
        --settings defaults --n 2 --audit --cache var/lf-cache   # SmolLM2's hidden states, each decision audited
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/learned_features.py --datasets alfworld --features hashed \
        --settings defaults --episodes 20 --data var/lf-data   # then --features crossed: the same build
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from qval import best_of_n as bon  # noqa: E402
from qval import build, labelling, schema  # noqa: E402
from qval.envs.base import Environment  # noqa: E402
from qval.envs import registry  # noqa: E402
from qval.envs.frozenlake.adapter import FrozenLake  # noqa: E402
from qval.learned import methods  # noqa: E402
from qval.learned.data import read_inputs  # noqa: E402
from qval.learned.features import FeatureCache, featuriser_from_spec  # noqa: E402
from qval.learned.store import TrainedModel  # noqa: E402
from qval.metrics import bootstrap_point_ci, bootstrap_ranking_ci, ranking_spearman, selection_metrics  # noqa: E402
from qval.sampling import Design  # noqa: E402

LABELLER = {"best-of-q": {"epsilon": 0.0, "discount": 0.95, "tau": 0.9, "steps": 3000, "target_every": 20,
                          "lr": 3e-3, "branch_depth": 1},
            "qlass": {"epsilon": 0.0, "discount": 0.95, "width": 4, "steps": 500},
            "amc-value": {"epsilon": 0.0, "samples": 1, "discount": 0.95, "steps": 1000, "branch_depth": 1}}
"""The labeller's policy and discount (``--settings labeller``), the tabular check's settings (best-of-q's and
amc-value's ``branch_depth`` 1 among them; amc-value's 1000 steps, as the test's)."""


ENVIRONMENT = {"shared": "frozenlake", "unseen": "frozenlake", "alfworld": "alfworld"}
"""The environment (:data:`qval.best_of_n.ENVIRONMENTS`) each dataset setting plays."""


def dataset(name: str) -> tuple[Environment, build.DatasetSpec]:
    """The environment and text-only spec of ``shared``, ``unseen`` or ``alfworld`` (module docstring)."""
    if name == "alfworld":
        return registry.VERSIONS["alfworld-pick-place@1.0"]()  # text only, public test split
    env, spec = registry.VERSIONS["frozenlake-8x8@1.1"]()
    spec = replace(spec, modalities=("text",), end_images=False, secret_test=False)
    if name == "shared":
        env = FrozenLake(map_seeds=tuple(range(42, 46)), size=8, horizon=30)
        return env, replace(spec, version="shared-maps", num_trajectories=40, split_by="trajectory")
    if name == "unseen":
        assert isinstance(env, FrozenLake)
        return env, replace(spec, version="unseen-maps")
    raise SystemExit(f"unknown dataset {name!r}; expected shared, unseen or alfworld")


def setting(name: str, env: Environment, spec: build.DatasetSpec, folder: Path, n: int, episodes: int) -> bon.Setting:
    """Best-of-N on the dataset's test tasks (public here: :func:`qval.best_of_n.environment` draws secret ones)."""
    test = {s.task for s in read_inputs(folder).states_in("test")}
    return bon.Setting(environment=ENVIRONMENT[name], tasks=tuple(t for t in env.tasks if t in test), epsilon=spec.epsilon,
                       discount=spec.discount, n=n, seed=0, num_episodes=episodes)


Interval3 = list[float | None]
"""``[value, low, high]``: a number with its 95% interval (``None`` bounds: no interval)."""


def split_rhos(model: TrainedModel, ds: schema.Dataset, folder: Path, split: str, feats: FeatureCache
               ) -> tuple[Interval3, Interval3, float | None]:
    """``model``'s global Spearman ρ against the q labels over ``split``'s candidates, and its mean within-state ρ
    (:func:`qval.metrics.ranking_spearman`) over ``split``'s states, each with the site's 95% bootstrap interval
    (:func:`qval.metrics.bootstrap_point_ci` and :func:`~qval.metrics.bootstrap_ranking_ci`, trajectories resampled
    within tasks, as scoring does), and the pairwise accuracy (:func:`qval.metrics.selection_metrics`: the share of
    a state's candidate pairs with different labels that the scores order rightly, what a Best-of-N pick needs):
    on ``train``, whether the model fits the states it was trained on; on ``test``, whether it generalises."""
    q = methods.score_split(model, read_inputs(folder), split, "q", feats)
    states = ds.states_in(split)
    ranking = ranking_spearman([([ds.q_labels[c.id] for c in s.candidates], [q[c.id] for c in s.candidates])
                                for s in states])
    within_ci = bootstrap_ranking_ci(ranking.per_state, design=Design.of([s.trajectory for s in states],
                                                                         [s.task for s in states]))
    points = [(s, c) for s in states for c in s.candidates]
    labels, scores = [ds.q_labels[c.id] for _, c in points], [q[c.id] for _, c in points]
    rho_ci = bootstrap_point_ci(labels, scores, "spearman",
                                design=Design.of([s.trajectory for s, _ in points], [s.task for s, _ in points]))
    pairs = selection_metrics([([ds.q_labels[c.id] for c in s.candidates], [q[c.id] for c in s.candidates])
                               for s in states]).pairwise_accuracy
    return ([float(spearmanr(scores, labels)[0]), rho_ci.low, rho_ci.high],
            [ranking.mean, within_ci.low, within_ci.high], pairs)


def audited(picker: bon.Picker, decisions: list[dict[str, Any]]) -> bon.Picker:
    """``picker``, and for every turn the reference Q of each candidate (the oracle's rollouts,
    :func:`qval.labelling.q_value`) appended to ``decisions`` with the picker's scores: which turns it got wrong."""

    def pick(turn: bon.Turn) -> list[float]:
        scores = list(picker(turn))
        truth = [labelling.q_value(turn.env, turn.snapshot, a, discount=turn.discount) for a in turn.candidates]
        turn.env.restore(turn.snapshot)
        decisions.append({"scores": scores, "q": truth, "actor": turn.candidates.index(turn.actor_action)})
        return scores

    return pick


def decision_summary(decisions: list[dict[str, Any]]) -> dict[str, Any]:
    """Of the turns whose candidates differ in reference Q: how many, the share where the picker chose a worse one
    (``wrong``; the actor's own choice's share as ``actor_wrong``), and the share of those where the one it chose
    has Q 0 (``fatal``: a hole, or no way to the goal in time)."""
    split = [d for d in decisions if max(d["q"]) - min(d["q"]) > 1e-9]
    wrong = [d for d in split if d["q"][bon.best_index(d["scores"], d["actor"])] < max(d["q"]) - 1e-9]
    fatal = [d for d in wrong if d["q"][bon.best_index(d["scores"], d["actor"])] <= 1e-9]
    actor_wrong = [d for d in split if d["q"][d["actor"]] < max(d["q"]) - 1e-9]
    n = max(1, len(split))
    return {"turns": len(decisions), "differing": len(split), "wrong": len(wrong) / n, "fatal": len(fatal) / n,
            "actor_wrong": len(actor_wrong) / n}


def measure(name: str, env: Environment, spec: build.DatasetSpec, folder: Path, feature: str, method: str,
            settings: str, ns: list[int], episodes: int, base: dict[int, list[bon.Episode]], models: Path,
            cache: Path | None, audit: bool, extra: dict[str, Any]) -> dict[str, Any]:
    """Train, score and play one (dataset ``name`` built from ``env`` and ``spec`` into ``folder``, featuriser,
    method); ``base``: the base picker's episodes per N; ``cache``: the features' disk cache (None: memory only);
    ``audit``: also check every Best-of-N decision against the oracle's Q (:func:`audited`); ``extra``: training
    parameters on top of the settings' (a subsample's ``max_roots``, say)."""
    featuriser = featuriser_from_spec(feature)
    started = time.monotonic()
    params = ((LABELLER[method] if settings == "labeller" else {}) | extra) or None
    _, model = methods.train(method, folder, models, featuriser=featuriser, cache_dir=cache, seed=0, params=params,
                             env=env, spec=spec)
    trained = time.monotonic() - started
    ds = schema.Dataset.read(folder)
    feats = FeatureCache(featuriser, cache, ds.manifest.fingerprint)
    test_rho, within, test_pairs = split_rhos(model, ds, folder, "test", feats)
    train_rho, train_within, _ = split_rhos(model, ds, folder, "train", feats)
    out: dict[str, Any] = {"dataset": name, "features": feature, "method": method, "settings": settings,
                           "test_rho": test_rho, "within_rho": within, "test_pairwise": test_pairs,
                           "train_rho": train_rho, "train_within_rho": train_within, "train_seconds": round(trained, 1)}
    picker = bon.score_picker(lambda states: methods.score_states(model, states, "q", feats))
    started = time.monotonic()
    for n in ns:
        decisions: list[dict[str, Any]] = []
        played = bon.run_episodes(env, setting(name, env, spec, folder, n, episodes),
                                  audited(picker, decisions) if audit else picker)
        success, gain = bon.summarise(played).success, bon.gain(played, base[n])
        out[f"n{n}"] = {"success": [success.value, success.low, success.high], "gain": [gain.value, gain.low, gain.high]}
        if audit:
            out[f"n{n}"]["decisions"] = decision_summary(decisions)
    out["play_seconds"] = round(time.monotonic() - started, 1)
    return out


def ci(value: Interval3) -> str:
    """``0.123 [0.045, 0.201]`` (the bounds left out when there are none)."""
    if value[0] is None:
        return "—"
    if value[1] is None or value[2] is None:
        return f"{value[0]:.3f}"
    return f"{value[0]:.3f} [{value[1]:.3f}, {value[2]:.3f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="shared,unseen")
    parser.add_argument("--features", default="hashed,crossed,tabular")
    parser.add_argument("--methods", default=",".join(methods.METHODS))
    parser.add_argument("--settings", choices=("labeller", "defaults"), default="labeller")
    parser.add_argument("--n", default="2,4", help="the Ns of Best-of-N; '' plays none (test and train ρ only)")
    parser.add_argument("--params", type=json.loads, default={},
                        help="JSON training parameters for every method on top of the settings', e.g. "
                             "'{\"max_roots\": 10}' for a subsample")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--cache", type=Path, help="keep the features in this folder (per dataset fingerprint and "
                                                   "featuriser): a later run or method encodes nothing again")
    parser.add_argument("--audit", action="store_true", help="check each Best-of-N decision against the oracle's Q "
                                                             "(a rollout per candidate: FrozenLake's are cheap)")
    parser.add_argument("--data", type=Path, help="build each dataset into DATA/NAME, or read it from there if built "
                                                  "already (one ALFWorld build for several runs); default: a temporary folder")
    args = parser.parse_args(argv)
    ns = [int(n) for n in args.n.split(",") if n]
    results = []
    with TemporaryDirectory() as tmp:
        for name in args.datasets.split(","):
            env, spec = dataset(name)
            folder = (args.data or Path(tmp)) / name
            if not (folder / "manifest.json").exists():
                started = time.monotonic()
                build.build_dataset(env, spec).write(folder)
                print(f"{name} built in {time.monotonic() - started:.0f} s", flush=True)
            base = {}
            for n in ns:
                base[n] = bon.run_episodes(env, setting(name, env, spec, folder, n, args.episodes),
                                           bon.BUILTIN_PICKERS["base"])
                s = bon.summarise(base[n]).success
                print(f"{name} base N={n}: success {s.value:.2f} [{s.low:.2f}, {s.high:.2f}]", flush=True)
            for feature in args.features.split(","):
                if feature.startswith("tabular") and name != "shared":
                    continue  # one-hot maps say nothing about a map never trained on
                for method in args.methods.split(","):
                    row = measure(name, env, spec, folder, feature, method, args.settings, ns, args.episodes, base,
                                  Path(tmp) / "models", args.cache, args.audit, args.params)
                    results.append(row)
                    cells = "  ".join(f"N={n} {row[f'n{n}']['success'][0]:.2f} gain {row[f'n{n}']['gain'][0]:+.2f} "
                                      f"[{row[f'n{n}']['gain'][1]:+.2f}, {row[f'n{n}']['gain'][2]:+.2f}]"
                                      + (" wrong {wrong:.2f} fatal {fatal:.2f} (actor {actor_wrong:.2f}, {differing} "
                                         "turns)".format(**row[f"n{n}"]["decisions"]) if args.audit else "")
                                      for n in ns)
                    print(f"{name:<8} {feature:<8} {method:<10} rho {ci(row['test_rho'])} within "
                          f"{ci(row['within_rho'])} pairs {row['test_pairwise'] or 0:.3f} train rho {ci(row['train_rho'])} within {ci(row['train_within_rho'])}"
                          f"  {cells}  (train {row['train_seconds']:.0f} s, play {row['play_seconds']:.0f} s)", flush=True)
                    if args.json:
                        args.json.parent.mkdir(parents=True, exist_ok=True)
                        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

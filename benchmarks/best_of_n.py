"""Benchmark: Best-of-N episodes per second with restore-based stepping against replay, in one run.

For FrozenLake and ALFWorld the script plays the same seeded Best-of-N episodes
(:mod:`qval.best_of_n`, its own tasks drawn from ``--secret``) twice per picker:

* ``replay``: every return to a state resets the task and replays its history (plain
  snapshots; ALFWorld with ``restore_mode="replay"``) -- the baseline;
* ``restore``: the adapter's direct restore (FrozenLake: the gymnasium cell; ALFWorld:
  libdownward state id + copied Python state).

Pickers: ``oracle`` (a reference rollout per candidate in every state) and ``scored`` (a
score callable on :func:`qval.best_of_n.turn_states`, i.e. every candidate's next state, as
a method picker needs; random scores so no model is involved).  It prints episodes and steps
per second and ``vs replay`` = replay time / time, and exits non-zero if the two ways play
different episodes.

Usage::

    python benchmarks/best_of_n.py                        # FrozenLake 40 + ALFWorld 4 episodes per picker
    python benchmarks/best_of_n.py --alfworld-episodes 2  # quicker
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from qval import best_of_n as bon  # noqa: E402
from qval import schema  # noqa: E402


def scored_picker() -> bon.Picker:
    """Random scores through :func:`qval.best_of_n.turn_states` (next states of every candidate)."""
    draws = random.Random(0)

    def score(states: list[schema.State]) -> dict[str, float]:
        return {c.id: draws.random() for s in states for c in s.candidates}

    return bon.score_picker(score)


def time_run(name: str, secret: str, stepping: str, picker: bon.Picker, episodes: int, n: int
             ) -> tuple[float, list[bon.Episode]]:
    """Seconds to play ``episodes`` episodes (environment set up outside the timing), and the episodes."""
    env, spec = bon.environment(name, secret)
    if stepping == "replay" and hasattr(env, "restore_mode"):
        env.restore_mode = "replay"  # ALFWorld's own switch: every restore replays
    setting = bon.setting_for(name, env, spec, n=n, seed=0, num_episodes=episodes, stepping=stepping)
    t0 = time.perf_counter()
    played = bon.run_episodes(env, setting, picker)
    return time.perf_counter() - t0, played


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frozenlake-episodes", type=int, default=40)
    parser.add_argument("--alfworld-episodes", type=int, default=4)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--secret", default="best-of-n-benchmark", help="test-split secret the Best-of-N tasks come from")
    args = parser.parse_args(argv)
    print(f"{'env':<11} {'picker':<7} {'mode':<8} {'episodes':>8} {'steps':>6} {'seconds':>9} {'ep/s':>8} "
          f"{'steps/s':>8} {'vs replay':>9}", flush=True)
    failed = False
    for name, episodes in (("frozenlake", args.frozenlake_episodes), ("alfworld", args.alfworld_episodes)):
        if episodes < 1:
            continue
        for picker_name in ("oracle", "scored"):
            results = {}
            for stepping in ("replay", "restore"):
                picker = bon.BUILTIN_PICKERS["oracle"] if picker_name == "oracle" else scored_picker()
                results[stepping] = time_run(name, args.secret, stepping, picker, episodes, args.n)
            base = results["replay"][0]
            for stepping, (seconds, played) in results.items():
                steps = sum(len(e.steps) for e in played)
                print(f"{name:<11} {picker_name:<7} {stepping:<8} {len(played):>8} {steps:>6} {seconds:9.2f} "
                      f"{len(played) / seconds:8.2f} {steps / seconds:8.1f} {base / seconds:8.1f}x", flush=True)
            if [e.to_json() for e in results["replay"][1]] != [e.to_json() for e in results["restore"][1]]:
                print(f"{name} {picker_name}: restore and replay played different episodes", flush=True)
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

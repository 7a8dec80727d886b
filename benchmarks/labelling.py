"""Benchmark: labelling speed with direct restore against restore by replay (MiniWoB: the new path against the old), in one run.

For each environment the script collects trajectories once (the builder's actor, ε-noise),
samples states as :func:`qval.build.sample_turns` does, and then labels the same states
twice with :func:`qval.build.make_state` — the candidates' next states, their Q-values and
the state's V-value:

* ``restore``: the adapter's direct restore (FrozenLake: set the gymnasium env's cell;
  ALFWorld: libdownward state id + copies of the Python-side state, after one replay per
  state);
* ``replay``: every restore resets the task and replays the state's history (the generic
  :meth:`qval.envs.base.Environment.restore`).

It prints points (states) and candidates labelled per second and the speed-up of each mode
over the first (``replay``; MiniWoB: ``old``) measured in the same run, and checks that all
give the same labels (candidates, Q, V and the next states' observations).

Usage::

    python benchmarks/labelling.py                       # FrozenLake + ALFWorld (~2 min)
    python benchmarks/labelling.py --alfworld-scenes 3 --alfworld-trajectories 3   # quick
    python benchmarks/labelling.py --terminal-tasks 6    # and TerminalBench-lite (podman; ~6 min)
    python benchmarks/labelling.py --miniwob-trajectories 3   # and MiniWoB (Chromium; ~5 min)

MiniWoB restores by replay only; it has two modes, on ``miniwob@1.2``'s spec (images and goal
images) and its first trajectories: ``old`` (BrowserGym's chat page and a screenshot at every
reset and step, a rollout per label and a restore per candidate's next state: the path before
lean episodes) and ``new`` (lean episodes and shared rollouts, :mod:`qval.envs.miniwob.adapter`).  Both
must give the same records and labels; their images are not compared (Chromium's hover repaint
makes a few differ between two runs of the old path too, ``tests/test_miniwob.py``).

TerminalBench-lite has three modes: ``replay`` (every restore replays the commands in fresh
containers, no kept steps), ``restore`` (unpack the tar of ``/app``, no kept steps) and ``kept``
(restore, and a step already taken from the same history is unpacked instead of run, as the
builder does).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from qval import build, labelling  # noqa: E402
from qval.envs.alfworld.adapter import ALFWorld, choose_scenes  # noqa: E402
from qval.envs.base import Environment, Snapshot  # noqa: E402
from qval.envs.frozenlake.adapter import FrozenLake  # noqa: E402
from qval.envs import registry  # noqa: E402
from qval.envs.terminalbench.adapter import Terminal, load_tasks  # noqa: E402


def sampled_turns(env: Environment, spec: build.DatasetSpec) -> list[tuple[build.Trajectory, build.Turn]]:
    """Collect ``spec.num_trajectories`` trajectories and sample their states."""
    trajectories = [build.collect(env, i, spec) for i in range(spec.num_trajectories)]
    return [(t, turn) for t in trajectories for turn in build.sample_turns(t, spec)]


def as_replay(turn: build.Turn) -> build.Turn:
    """The same turn with a plain snapshot, which every adapter restores by replay."""
    plain = Snapshot(task=turn.snapshot.task, history=turn.snapshot.history)
    return build.Turn(snapshot=plain, observation=turn.observation, action=turn.action)


def label_all(
    env: Environment, points: list[tuple[build.Trajectory, build.Turn]], spec: build.DatasetSpec
) -> tuple[float, list[labelling.StateLabels]]:
    """Seconds to label every point, and the labels."""
    t0 = time.perf_counter()
    labels = [build.make_state(env, trajectory, turn, spec)[1] for trajectory, turn in points]
    return time.perf_counter() - t0, labels


def report(
    name: str,
    points: list[tuple[build.Trajectory, build.Turn]],
    runs: dict[str, Callable[[], tuple[float, list[labelling.StateLabels]]]],
) -> None:
    """Run each mode (the first is the baseline), print its row, and check that the labels agree."""
    results = {mode: run() for mode, run in runs.items()}
    baseline = next(iter(results))
    candidates = sum(len(labels.candidates) for labels in results[baseline][1])
    base = results[baseline][0]
    for mode, (seconds, _) in results.items():
        print(f"{name:<11} {mode:<8} {len(points):>6} {candidates:>6} {seconds:9.2f} "
              f"{len(points) / seconds:9.2f} {candidates / seconds:9.2f} {base / seconds:8.1f}x", flush=True)
    for mode, (_, labels) in results.items():
        if [_comparable(x) for x in labels] != [_comparable(x) for x in results[baseline][1]]:
            raise SystemExit(f"{name}: {mode} and {baseline} gave different labels")


def _comparable(labels: labelling.StateLabels) -> tuple[object, ...]:
    """Candidates, Q, V and the next states' observations (not images)."""
    return labels.candidates, labels.q, labels.v, tuple(n[0] for n in labels.next)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frozenlake-trajectories", type=int, default=50)
    parser.add_argument("--alfworld-scenes", type=int, default=6)
    parser.add_argument("--alfworld-trajectories", type=int, default=6)
    parser.add_argument("--states-per-trajectory", type=int, default=5)
    parser.add_argument("--terminal-tasks", type=int, default=0,
                        help="TerminalBench-lite tasks (one per kind first; 0: skip, needs podman)")
    parser.add_argument("--terminal-trajectories-per-task", type=int, default=1)
    parser.add_argument("--miniwob-trajectories", type=int, default=0,
                        help="miniwob@1.2's first trajectories (0: skip, needs Chromium)")
    parser.add_argument("--skip-frozenlake-alfworld", action="store_true")
    args = parser.parse_args(argv)

    header = f"{'env':<11} {'mode':<8} {'points':>6} {'cands':>6} {'seconds':>9} {'points/s':>9} {'cands/s':>9} {'vs first':>9}"
    print(header)
    print("-" * len(header))

    if not args.skip_frozenlake_alfworld:
        frozenlake_and_alfworld(args)
    if args.miniwob_trajectories:
        miniwob(args.miniwob_trajectories, args.states_per_trajectory)
    if args.terminal_tasks:
        terminal(args.terminal_tasks, args.terminal_trajectories_per_task, args.states_per_trajectory)
    print("\npoints = dataset states (each: next states and Q of its candidates, and V); "
          "vs = first mode's seconds / seconds, same run")
    return 0


def frozenlake_and_alfworld(args: argparse.Namespace) -> None:
    """FrozenLake and ALFWorld rows: ``replay`` against ``restore``."""
    fl_env, fl_spec = registry.builder("frozenlake")()
    fl_spec = replace(fl_spec, num_trajectories=args.frozenlake_trajectories,
                      max_states_per_trajectory=args.states_per_trajectory, modalities=("text",),
                      end_images=False, secret_test=False)  # labels only, public maps
    fl_points = sampled_turns(fl_env, fl_spec)
    fl_replay = [(t, as_replay(turn)) for t, turn in fl_points]
    fl_maps = fl_env.map_seeds  # type: ignore[attr-defined]
    report("frozenlake", fl_points, {
        "replay": lambda: label_all(FrozenLake(map_seeds=fl_maps), fl_replay, fl_spec),
        "restore": lambda: label_all(FrozenLake(map_seeds=fl_maps), fl_points, fl_spec),
    })

    _, alf_spec = registry.builder("alfworld")()
    alf_spec = replace(alf_spec, num_trajectories=args.alfworld_trajectories,
                       max_states_per_trajectory=args.states_per_trajectory, secret_test=False)
    scenes = choose_scenes(args.alfworld_scenes, seed=0)
    alf_points = sampled_turns(ALFWorld(scenes), alf_spec)
    report("alfworld", alf_points, {
        "replay": lambda: label_all(ALFWorld(scenes, restore_mode="replay"), alf_points, alf_spec),
        "restore": lambda: label_all(ALFWorld(scenes, restore_mode="direct"), alf_points, alf_spec),
    })



def miniwob(trajectories: int, states_per_trajectory: int) -> None:
    """MiniWoB rows on ``miniwob@1.2``'s spec: ``old`` against ``new`` (module docstring)."""
    from qval.envs.miniwob.adapter import MiniWoB  # BrowserGym + Playwright: imported when used

    collector, spec = registry.builder("miniwob")()
    spec = replace(spec, num_trajectories=trajectories, secret_test=False,
                   max_states_per_trajectory=min(states_per_trajectory, spec.max_states_per_trajectory))
    points = sampled_turns(collector, spec)
    collector.close()
    settings = {"task_names": collector.task_names, "seeds": collector.seeds, "horizon": collector.horizon}

    def run(new: bool) -> tuple[float, list[labelling.StateLabels]]:
        env = MiniWoB(**settings, lean=new)
        env.deterministic = new  # old: a rollout per label
        try:
            return label_all(env, points, spec)
        finally:
            env.close()

    report("miniwob", points, {"old": lambda: run(False), "new": lambda: run(True)})


def terminal(num_tasks: int, per_task: int, states_per_trajectory: int) -> None:
    """TerminalBench-lite rows: ``replay``, ``restore`` and ``kept`` (module docstring)."""
    by_kind: dict[str, list[str]] = {}
    for task_id, template in load_tasks().items():
        by_kind.setdefault(template.kind, []).append(task_id)
    ordered = [task for group in zip(*by_kind.values()) for task in group]  # one of each kind, then again
    tasks = ordered[:num_tasks]
    _, tb_spec = registry.builder("terminalbench-lite")()
    tb_spec = replace(tb_spec, num_trajectories=len(tasks) * per_task,
                      secret_test=False, max_states_per_trajectory=min(states_per_trajectory, 3))
    collector = Terminal(tasks)
    tb_points = sampled_turns(collector, tb_spec)
    collector.close()

    def run(mode: str, kept_steps: int) -> tuple[float, list[labelling.StateLabels]]:
        env = Terminal(tasks, restore_mode=mode, kept_steps=kept_steps)
        try:
            return label_all(env, tb_points, tb_spec)
        finally:
            env.close()

    report("terminal", tb_points, {
        "replay": lambda: run("replay", 0),
        "restore": lambda: run("direct", 0),
        "kept": lambda: run("direct", 512),
    })


if __name__ == "__main__":
    sys.exit(main())

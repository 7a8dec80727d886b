"""What Playwright's per-call ``inspect.stack()`` costs a MiniWoB episode, against qval.playwright_stacks.

    .venv/bin/python benchmarks/playwright_stacks.py            # 6 episodes per way (~1.5 min)
    .venv/bin/python benchmarks/playwright_stacks.py --episodes 20

Plays the same lean MiniWoB episodes (login-user, the scripted policy) four ways: with few and with many
modules imported (Django, torch, transformers, pandas, scipy: what a test or Celery worker holds), each from a
plain stack and from under a ``<string>`` frame (pytest-xdist's workers run their tests under one), with
Playwright's own ``inspect.stack()`` (the baseline) and with :func:`qval.playwright_stacks.light_stacks`.
Prints this process's CPU and the wall time per way, and the ratios light / baseline.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time

import playwright._impl._sync_base as sync_base

from qval import playwright_stacks
from qval.envs.miniwob.adapter import MiniWoB


def episodes(env: MiniWoB, count: int) -> tuple[float, float]:
    """(CPU s of this process, wall s) of ``count`` scripted episodes."""
    cpu, wall = time.process_time(), time.perf_counter()
    for seed in range(count):
        env.reset(f"login-user:{seed % 2}")
        while not env.done:
            env.step(env.reference_action())
        env.observation()
    return time.process_time() - cpu, time.perf_counter() - wall


def measure(env: MiniWoB, count: int, light: bool, under_string: bool) -> tuple[float, float]:
    """One way: Playwright's stacks light or not, the episodes run from a plain or a ``<string>`` frame."""
    sync_base.inspect = playwright_stacks._LIGHT if light else inspect  # type: ignore[attr-defined]
    if not under_string:
        return episodes(env, count)
    scope = {"episodes": episodes, "env": env, "count": count}
    exec(compile("result = episodes(env, count)", "<string>", "exec"), scope)
    return scope["result"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=6)
    args = parser.parse_args()
    env = MiniWoB(task_names=("login-user",), seeds=(0, 1), horizon=12, lean=True)
    try:
        episodes(env, 2)  # warm: Chromium started, pages cached
        for label in ("few modules", "many modules"):
            if label == "many modules":
                import django, pandas, scipy.stats, torch, transformers  # noqa: E401,F401
            print(f"{label} ({len(sys.modules)} imported), {args.episodes} episodes:")
            for under_string in (False, True):
                base = measure(env, args.episodes, light=False, under_string=under_string)
                light = measure(env, args.episodes, light=True, under_string=under_string)
                where = "under <string>" if under_string else "plain stack   "
                print(f"  {where}  inspect.stack: cpu {base[0]:6.2f} s wall {base[1]:6.2f} s | light: cpu "
                      f"{light[0]:6.2f} s wall {light[1]:6.2f} s | ratio cpu {light[0] / base[0]:.2f} "
                      f"wall {light[1] / base[1]:.2f}")
    finally:
        env.close()


if __name__ == "__main__":
    main()

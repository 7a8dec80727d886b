"""MiniWoB++ through BrowserGym on the real (Debian) Chromium: policy, labels, restore, images.

Each test drives real MiniWoB pages; the whole file takes a few minutes.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from qval import build, labelling
from qval.envs.base import Snapshot
from qval.envs.miniwob.adapter import TASK_NAMES, MiniWoB
from qval.envs import registry

pytestmark = [pytest.mark.slow, pytest.mark.browser]

GAMMA = 0.95
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def env() -> MiniWoB:
    environment = MiniWoB(task_names=TASK_NAMES, seeds=SEEDS, horizon=12)
    yield environment
    environment.close()


def test_tasks_are_listed_seed_major(env: MiniWoB) -> None:
    assert len(TASK_NAMES) >= 16
    assert list(env.tasks[: len(TASK_NAMES)]) == [f"{name}:0" for name in TASK_NAMES]
    for j, task in enumerate(env.tasks):
        assert task == f"{TASK_NAMES[j % len(TASK_NAMES)]}:{SEEDS[j // len(TASK_NAMES)]}"


def test_miniwob_2_has_every_task_name_in_every_split() -> None:
    """``miniwob@2.0``'s split by task, computed from the environment's task list (nothing is played)."""
    env, spec = registry.BUILDERS["miniwob"]()
    assert (spec.version, spec.split_by, spec.cycle) == ("2.0", "task", ("train", "dev", "test"))
    assert spec.secret_test and spec.sample_first_turn and env.goal_banner and spec.num_trajectories == len(env.tasks)
    names = [task.split(":")[0] for task in env.tasks]
    per_split: dict[str, Counter[str]] = {split: Counter() for split in spec.splits}
    for j, name in enumerate(names):
        per_split[("train", "dev", "test")[j % 3]][name] += 1  # split_by="task": task j → cycle[j % 3]
    assert all(spec.split_of(j) == ("train", "dev", "test")[j % 3] for j in range(len(names)))
    assert len(set(names)) >= 16 and len(set(names)) % 3
    for split, counts in per_split.items():
        assert set(counts) == set(names), split  # every name in every split
        assert min(counts.values()) >= 4, (split, counts)  # at least 4 instances of each name
    assert set(names) <= set(TASK_NAMES)
    hidden = spec.hidden_tasks(env)
    assert len(hidden) == sum(per_split["test"].values()) >= 74  # × about 1.8 states each: over 100 test points
    # every state names its MiniWoB task (the dataset page and the API count states per name); 1.2 names none
    build.hide_test_tasks(env, spec, "a secret")
    assert [env.task_type(t) for t in env.tasks] == names and "task_type" in env.config()
    old, _ = registry.VERSIONS["miniwob@1.2"]()
    assert old.task_type(old.tasks[0]) is None and "task_type" not in old.config()


def test_reference_policy_solves_every_task_in_several_steps(env: MiniWoB) -> None:
    """Every name on seed 0, and on seed 1 where seed 0 took a single step (each name was solved on 20 of
    20 seeds when its policy was written; this keeps the suite's browser time down)."""
    lengths: dict[str, list[int]] = {}
    for task in env.tasks:  # seed-major: every seed-0 task comes first
        if max(lengths.get(task.split(":")[0], [0])) >= 2:
            continue
        env.reset(task)
        total = 0.0
        while not env.done:
            total += env.step(env.reference_action()).reward
        assert total == 1.0, f"{task}: the scripted policy failed after {env.history}"
        lengths.setdefault(task.split(":")[0], []).append(env.steps)
    assert set(lengths) == set(TASK_NAMES)
    assert all(max(steps) >= 2 for steps in lengths.values()), lengths


def test_early_submit_gets_zero_and_the_optimal_action_the_highest_q(env: MiniWoB) -> None:
    env.reset("login-user:1")
    first = env.reference_action()
    assert first.startswith("fill(")
    env.step(first)  # username entered, password still empty
    state = env.snapshot()
    optimal = env.reference_action()
    login = next(a for a in env.candidates() if a.startswith("click(") and a != optimal and "'20'" in a)
    candidates = tuple(env.candidates())
    assert optimal in candidates and login in candidates and len(candidates) >= 4
    labels = labelling.label_state(env, state, candidates, discount=GAMMA)
    q = dict(zip(candidates, labels.q))
    assert q[login] == 0.0  # Login before the form is complete: MiniWoB ends the episode, reward 0
    assert q[optimal] == pytest.approx(GAMMA)  # fill the password now, click Login next: γ¹
    assert q[optimal] == max(labels.q) and labels.v == pytest.approx(q[optimal])
    assert all(value < q[optimal] for action, value in q.items() if action != optimal)


def test_an_action_that_timed_out_is_tried_again_from_a_restore(env: MiniWoB) -> None:
    """A click that times out while Playwright carries it out (a loaded machine) is not a no-op: the step is tried
    again, from a restore of the state before it.  Here the live page's Login button blocks its renderer for 2 s on
    the first mousedown, so the first click times out (BrowserGym gives it 500 ms) whatever the load, and swallows
    that click (the CI failure: a click that had not landed when it timed out); the restored page's button takes
    the second: Login on an empty form ends the episode with reward 0."""
    env.reset("login-user:1")
    login = next(el.bid for el in env.elements if el.role == "button" and el.name == "Login")
    env.evaluate("""bid => {
                      const button = document.querySelector(`[bid='${bid}']`);
                      button.addEventListener('mousedown', () => { const start = Date.now(); while (Date.now() - start < 2000) {} },
                                              {capture: true, once: true});
                      button.addEventListener('click', event => event.stopImmediatePropagation(), {capture: true, once: true});
                    }""", login)
    result = env.step(f"click('{login}')")
    assert result.done and result.reward == 0.0 and env.history == (f"click('{login}')",)


def test_pages_run_in_utc_and_en_us_whatever_the_machine() -> None:
    """enter-time's and enter-date's goals come from the page clock: a build on a machine in another zone or
    language must draw the same goals (a process of its own, started in Tahiti with a German locale)."""
    probe = ("from qval.envs.miniwob.adapter import MiniWoB\n"
             "env = MiniWoB(task_names=('enter-time',), seeds=(0,), horizon=4)\n"
             "env.reset('enter-time:0')\n"
             "print(env.evaluate('() => [Intl.DateTimeFormat().resolvedOptions().timeZone, navigator.language]'))\n"
             "env.close()\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True,
                         env={**os.environ, "TZ": "Pacific/Tahiti", "LANG": "de_DE.UTF-8", "LC_ALL": "de_DE.UTF-8"})
    assert out.stdout.strip().splitlines()[-1] == "['UTC', 'en-US']", out.stdout + out.stderr


def test_restore_reproduces_the_text_and_the_screenshot(env: MiniWoB) -> None:
    rng = random.Random(7)
    for task in ("enter-password:1", "click-checkboxes:1", "login-user-popup:1", "click-tab-2-hard:1"):
        env.reset(task)
        seen: list[tuple[Snapshot, str, np.ndarray]] = []
        while not env.done:
            seen.append((env.snapshot(), env.observation(), env.screenshot().copy()))
            env.step(env.actor_action(rng, epsilon=0.5))
        for snapshot, text, pixels in seen:
            env.restore(snapshot)
            assert env.observation() == text, (task, snapshot.history)
            assert np.array_equal(env.screenshot(), pixels), (task, snapshot.history)


def test_set_of_marks_image(env: MiniWoB) -> None:
    env.reset("login-user:0")
    raw = env.screenshot()
    image = env.observation_image()
    assert image.size == (raw.shape[1], raw.shape[0])
    marked = np.asarray(image)
    boxes = [el for el in env.elements if el.marked and el.visible]
    assert {el.bid for el in boxes} >= {"16", "19", "20"}  # username, password, Login
    for el in boxes:
        x, y, w, h = (int(round(v)) for v in el.bbox)
        inside = (slice(y, y + h), slice(x, x + w))
        assert not np.array_equal(marked[inside], raw[inside]), el  # a box and an id are drawn on it
    untouched = marked[-5:, -40:]  # the bottom-right corner holds no interactive element
    assert np.array_equal(untouched, raw[-5:, -40:])


def test_sampled_candidates_hold_the_actor_action_and_three_others(env: MiniWoB) -> None:
    env.reset("login-user:0")
    everything = env.candidates()
    actor = env.reference_action()
    picked = env.sample_candidates(actor, random.Random(3))
    assert actor in picked and len(picked) == 4 and len(set(picked)) == 4
    assert picked == [a for a in everything if a in picked]  # candidate order
    assert all(a.startswith(("click('", "fill('")) for a in everything)


def test_the_goal_banner_shows_the_goal_above_the_marked_screenshot(env: MiniWoB) -> None:
    """With ``goal_banner`` the image starts with a banner that differs between two goals, above the same
    set-of-marks screenshot as without it (BrowserGym empties MiniWoB's own goal box)."""
    banners = {}
    try:
        for task in ("multi-layouts:0", "multi-layouts:1"):
            env.reset(task)
            env.goal_banner = False
            plain = np.asarray(env.observation_image())
            env.goal_banner = True
            image = np.asarray(env.observation_image())
            top = image.shape[0] - plain.shape[0]
            assert top > 20 and image.shape[1] == plain.shape[1]
            assert np.array_equal(image[top:], plain)
            banner = image[:top]
            assert (banner < 100).any() and (banner == 255).any()  # dark text on white
            banners[env.goal] = banner
    finally:
        env.goal_banner = False
    assert len(banners) == 2
    first, second = banners.values()
    height = min(first.shape[0], second.shape[0])
    assert not np.array_equal(first[:height], second[:height])
    assert "banner" in MiniWoB(task_names=("enter-text",), goal_banner=True).config()["observation_image"]
    assert "banner" not in json.dumps(MiniWoB(task_names=("enter-text",)).config())  # older datasets: unchanged


def test_lean_episodes_and_shared_rollouts_build_the_same_dataset(env: MiniWoB) -> None:
    """A small MiniWoB build (images and goal images) the fast way -- lean episodes (no chat page, screenshots
    only when an image is drawn) and shared rollouts -- against the way before (BrowserGym's chat page, a
    screenshot at every step, a rollout per label and a replay per next state): the same records, next states,
    labels and state images.  Next and goal images are compared for the images whose pixels the old way
    reproduces itself: right after a click Chromium repaints the hover and focus state of the clicked element
    on its own schedule, so two builds the old way may differ there already (benchmarks/README.md)."""
    from dataclasses import replace

    from qval import build

    env.close()  # one live page at a time (BrowserGym's visibility); the fixture's next reset starts again
    _, spec = registry.BUILDERS["miniwob"]()
    spec = replace(spec, slug="miniwob-tiny", num_trajectories=1, max_states_per_trajectory=1, secret_test=False)
    built = {}
    for way in ("old", "fast", "old again"):
        one = MiniWoB(task_names=("login-user",), seeds=(0,), horizon=12, lean=way == "fast")
        one.deterministic = way == "fast"  # the old way: a rollout per label
        try:
            built[way] = build.build_dataset(one, spec)
        finally:
            one.close()
    old, fast, again = built["old"], built["fast"], built["old again"]
    assert len(fast.states) >= 1 and fast.states == old.states  # records: observations, candidates, next states
    assert fast.q_labels == old.q_labels and fast.v_labels == old.v_labels
    assert set(fast.images) == set(old.images)
    state_images = {s.image for s in old.states}
    assert all(fast.images[name] == old.images[name] == again.images[name] for name in state_images)
    reproducible = [name for name in old.images if old.images[name] == again.images[name]]
    assert len(reproducible) >= len(old.images) // 2
    assert [name for name in reproducible if fast.images[name] != old.images[name]] == []

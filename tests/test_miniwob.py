"""MiniWoB++ through BrowserGym on the real (Debian) Chromium: policy, labels, restore, images.

Each test drives real MiniWoB pages; the whole file takes a few minutes.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from qval import labelling
from qval.envs.base import Snapshot
from qval.envs.miniwob import TASK_NAMES, MiniWoB

pytestmark = [pytest.mark.slow, pytest.mark.browser]

GAMMA = 0.95
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def env() -> MiniWoB:
    environment = MiniWoB(task_names=TASK_NAMES, seeds=SEEDS, horizon=12)
    yield environment
    environment.close()


def test_tasks_are_seed_major_so_task_splits_keep_names_apart(env: MiniWoB) -> None:
    assert len(TASK_NAMES) >= 8 and len(TASK_NAMES) % 2 == 0
    assert list(env.tasks[: len(TASK_NAMES)]) == [f"{name}:0" for name in TASK_NAMES]
    for j, task in enumerate(env.tasks):  # builder rule split_by="task": splits[j % 2]
        assert task.split(":")[0] == TASK_NAMES[j % len(TASK_NAMES)]


def test_reference_policy_solves_every_task_in_several_steps(env: MiniWoB) -> None:
    lengths: dict[str, list[int]] = {}
    for task in env.tasks:
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


def test_restore_reproduces_the_text_and_the_screenshot(env: MiniWoB) -> None:
    rng = random.Random(7)
    for task in ("enter-password:1", "click-checkboxes:1", "find-word:0"):
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

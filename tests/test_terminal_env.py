"""The TerminalBench-style environment (``terminalbench-lite``): task files, the podman sandbox, labels checked
by hand one step from success, restore equals replay, every scripted solution solves its task, a small build."""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import os
import subprocess
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from qval import best_of_n as bon
from qval import build, labelling, schema
from qval.paper.qval_v1 import published
from qval.envs.terminalbench.adapter import (
    CONTAINER_LABEL,
    EPISODE_PREFIX,
    KINDS,
    SUBMIT,
    TASK_DIR,
    Ran,
    Sandbox,
    TaskFileError,
    Terminal,
    load_tasks,
    parse_task,
    sweep_leftovers,
)
from qval.envs import registry
from tests.conftest import REPO, cached_build

GAMMA = 0.95
SMALL_TASKS = ["files-csv-prices", "git-feature-branch", "permissions-owner-exec"]
"""One task per split of the small build (train, dev, test in task order)."""
TASK_FILES_DIGEST = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(TASK_DIR.glob("*.toml")))).hexdigest()[:16]
SMALL_KEY = f"Terminal({SMALL_TASKS}, task files {TASK_FILES_DIGEST})"


def small_spec() -> build.DatasetSpec:
    """Two trajectories of each task, up to two states each: every split holds one task."""
    return build.DatasetSpec(
        slug="terminalbench-small", name="TerminalBench small", version="0", description="test build",
        modalities=("text",), num_trajectories=6, max_states_per_trajectory=2, epsilon=0.3, seed=3,
        discount=GAMMA, num_rollouts=1, splits=("train", "dev", "test"), split_by="task",
    )


@pytest.fixture(scope="module")
def terminal_image(engine) -> str:  # type: ignore[no-untyped-def]
    """The image the commands run in (scripts/build-terminal-image.sh; cached by its inputs)."""
    built = subprocess.run([str(REPO / "scripts" / "build-terminal-image.sh")], capture_output=True, text=True,
                           check=False)
    assert built.returncode == 0, built.stderr
    return "localhost/qval-terminal:bookworm"


@pytest.fixture
def env(engine, terminal_image):  # type: ignore[no-untyped-def]
    environment = Terminal(engine=engine)
    yield environment
    environment.close()


def solve(env: Terminal, task: str) -> tuple[bool, float]:
    """Reset ``task``; whether its tests pass on the initial state, and the reward of following the reference."""
    env.reset(task)
    initially = env.run_tests()
    reward = 0.0
    while not env.done:
        reward = env.step(env.reference_action()).reward
    return initially, reward


# -- task files (no container) ---------------------------------------------------------------
def test_task_files_cover_the_easy_tier_kinds() -> None:
    templates = load_tasks()
    assert len(templates) >= 30
    kinds = collections.Counter(t.kind for t in templates.values())
    assert set(kinds) == set(KINDS) and min(kinds.values()) >= 5, kinds
    for template in templates.values():
        task = template.instance()
        assert 1 <= len(task.solution) <= 4 and "{{" not in task.instruction + task.setup + task.tests
        assert task.near_misses and task.harmful, template.id
        drawn = {template.draw(seed, "hidden-0").instruction for seed in range(20)}
        assert len(drawn) > 1, f"{template.id}: every drawn instance is the same"


@pytest.mark.parametrize(("text", "error"), [
    ('kind = "files"\ninstruction = "x"\nsetup = ""\ntests = "true"\nsolution = ["ls"]\ncolour = 1\n', "unknown fields"),
    ('kind = "cooking"\ninstruction = "x"\nsetup = ""\ntests = "true"\nsolution = ["ls"]\n', "kind 'cooking'"),
    ('kind = "files"\ninstruction = "x"\nsetup = ""\ntests = "true"\nsolution = []\n', "at least one command"),
    ('kind = "files"\ninstruction = "x {{f}}"\nsetup = ""\ntests = "true"\nsolution = ["ls"]\n', "without a parameter"),
    ('kind = "files"\ninstruction = "x"\nsetup = ""\ntests = "true"\nsolution = ["rm a"]\nharmful = ["rm a"]\n',
     "both a solution step"),
    ('kind = "files"\ninstruction = "x"\nsetup = ""\ntests = "true"\nsolution = ["submit"]\n', "never 'submit'"),
    ('kind = "files"\ninstruction = "x"\nsetup = ""\ntests = "true"\nsolution = ["ls"]\nparams = {a = ["1"]}\n',
     "must show a parameter"),
    ('kind = "files"\ninstruction = "x\n', "not valid TOML"),
])
def test_a_malformed_task_file_is_refused_with_the_reason(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(TaskFileError, match=error):
        parse_task(path)


def test_hidden_tasks_are_drawn_from_seeds_and_the_config_keeps_them_secret() -> None:
    public = Terminal(SMALL_TASKS)
    drawn, unplayable = Terminal(SMALL_TASKS), Terminal(SMALL_TASKS)
    drawn.hide_tasks({"permissions-owner-exec": 7})
    unplayable.hide_tasks({"permissions-owner-exec": None})
    assert drawn.tasks == ("files-csv-prices", "git-feature-branch", "hidden-2")
    assert drawn.config() == unplayable.config() != public.config()
    assert drawn.task_type("hidden-2") == "permissions"
    assert drawn.task_spec("hidden-2") == public.templates["permissions-owner-exec"].draw(7, "hidden-2")
    assert "hidden-2" not in str(public.config()) and "deploy" not in str(drawn.config()["tasks"][2])
    with pytest.raises(RuntimeError, match="secret"):
        unplayable.reset("hidden-2")
    with pytest.raises(KeyError, match="unknown terminal tasks"):
        Terminal(["no-such-task"])


# -- in the sandbox ---------------------------------------------------------------------------
def test_commands_run_sandboxed_with_their_output_and_status(env: Terminal) -> None:
    env.reset("files-csv-prices")
    probe = ("id -u; (python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 1)' >/dev/null 2>&1 "
             "&& echo online || echo offline); touch /etc/x 2>/dev/null || echo read-only; echo oops >&2; exit 3")
    ran = env.sandbox.run(env.app_dir, probe, 5)  # a probe, not a candidate: run as the environment runs commands
    assert ran.status == 3 and ran.output.split() == ["65534", "offline", "read-only", "oops"]
    env.step("cut -d, -f3 orders.csv > prices.txt")
    env.step("rm orders.csv")
    env.step("head -3 orders.csv")
    observation = env.observation()
    assert observation.startswith("Task: /app/orders.csv has a header row")
    assert "$ head -3 orders.csv\nhead: cannot open 'orders.csv' for reading: No such file or directory\n" \
           "[exit status 1]" in observation
    assert env.filesystem()["prices.txt"][:2] == ("file", 0o644)
    env.reset("services-pidfile")
    started = time.monotonic()
    env.step("python3 worker.py")  # runs forever: killed, and what it printed by then (timing) is not shown
    assert time.monotonic() - started < 15
    assert env.observation().endswith("$ python3 worker.py\n[killed: still running after 3 s]")
    # podman's kill can come a little before the limit (conmon's whole-second timer): every kill reads as one,
    # and a command's own exit status 255 stays a status
    assert [env.sandbox.run(env.app_dir, "sleep 10", 3).status for _ in range(3)] == [None] * 3
    assert env.sandbox.run(env.app_dir, "exit 255", 3) == Ran(255, "")


def test_one_step_from_success_the_solution_step_is_worth_gamma_and_harm_zero(env: Terminal) -> None:
    """By hand, in git-feature-branch before its last solution step (the commit): committing then submitting
    earns γ; looking around first (``ls -A``) γ²; deleting the repository (harmful) or submitting now 0.
    Before the submit, submitting earns 1 at once."""
    env.reset("git-feature-branch")
    solution = env.task_spec().solution
    for command in solution[:-1]:
        env.step(command)
    state = env.snapshot()
    assert env.reference_action() == solution[-1] == "git -C repo commit -qm 'Add notes'"
    assert "rm -rf repo/.git" in env.candidates() and SUBMIT in env.candidates()
    labels = labelling.label_state(env, state, (solution[-1], "ls -A", "rm -rf repo/.git", SUBMIT), discount=GAMMA)
    assert labels.q == pytest.approx((GAMMA, GAMMA**2, 0.0, 0.0)) and labels.v == pytest.approx(GAMMA)
    env.restore(state)
    env.step(solution[-1])
    assert labelling.q_value(env, env.snapshot(), SUBMIT, discount=GAMMA) == 1.0


def test_restore_equals_replay_and_is_faster(engine, terminal_image) -> None:  # type: ignore[no-untyped-def]
    """A detour (near miss, harmful, neutral commands) in a git and a permissions task: every state restored from
    its tar has the files and the observation of a replay in a fresh environment that keeps no steps."""
    direct = Terminal(["git-ignore-files", "permissions-private-tree"], engine=engine)
    replay = Terminal(["git-ignore-files", "permissions-private-tree"], engine=engine, restore_mode="replay",
                      kept_steps=0)
    plays = {
        "git-ignore-files": ["git -C repo rm -q cache.tmp", "printf '*.tmp\\nbuild/\\n' > repo/.gitignore",
                             "git -C repo add -A", "git -C repo status --short"],
        "permissions-private-tree": ["chmod -R 600 secrets", "find secrets -type d -exec chmod 700 {} +",
                                     "rm -rf secrets/ssh"],
    }
    try:
        for task, commands in plays.items():
            direct.reset(task)
            snapshots = [direct.snapshot()]
            for command in commands:
                direct.step(command)
                snapshots.append(direct.snapshot())
            for snapshot in reversed(snapshots):
                t0 = time.perf_counter()
                direct.restore(snapshot)
                restored = time.perf_counter() - t0
                t0 = time.perf_counter()
                replay.restore(snapshot)
                replayed = time.perf_counter() - t0
                assert direct.filesystem() == replay.filesystem(), (task, snapshot.history)
                assert direct.observation() == replay.observation()
                assert direct.candidates() == replay.candidates() and direct.history == replay.history
                if snapshot.history:
                    assert restored < replayed
        # By hand: chmod -R 600 took the search bit off secrets first, so it changed nothing inside; find could
        # then only give secrets itself 700, after which secrets/ssh (still 755) could be removed.
        direct.restore(snapshots[-1])
        fs = direct.filesystem()
        assert fs["secrets"] == ("dir", 0o700, "") and fs["secrets/api"] == ("dir", 0o755, "")
        assert fs["secrets/notes.txt"][:2] == ("file", 0o644) and "secrets/ssh" not in fs
        assert "chmod: cannot access 'secrets/ssh': Permission denied" in direct.observation()
        assert direct.restore_counts["replay"] == 0 and replay.restore_counts["direct"] == 0
        assert replay.step_counts["kept"] == 0
    finally:
        direct.close()
        replay.close()


@pytest.mark.slow
def test_every_scripted_solution_solves_its_task_and_the_initial_state_does_not(engine, terminal_image) -> None:  # type: ignore[no-untyped-def]
    """Two environments in two threads (the time is spent waiting for containers)."""
    tasks = list(load_tasks())

    def solve_all(part: list[str]) -> list[tuple[str, bool, float, str]]:
        env = Terminal(part, engine=engine)
        try:
            return [(task, *solve(env, task), env.observation()) for task in part]
        finally:
            env.close()

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = [r for part in pool.map(solve_all, (tasks[0::2], tasks[1::2])) for r in part]
    assert sorted(task for task, *_ in results) == sorted(tasks)
    for task, initially, reward, observation in results:
        assert not initially, f"{task}: the tests pass before any command"
        assert reward == 1.0 and observation.endswith("$ submit\ntests passed"), (task, observation)


@pytest.mark.slow
def test_the_secret_test_positions_are_solvable_with_drawn_parameters(engine, terminal_image) -> None:  # type: ignore[no-untyped-def]
    """The tasks the full build's secret test split plays (the second copy of every task file), with drawn parameter
    values (two environments in two threads, each solving half of them)."""
    envs = [Terminal(engine=engine, copies=2), Terminal(engine=engine, copies=2)]
    _, spec = registry.BUILDERS["terminalbench-lite"]()
    test_tasks = spec.hidden_tasks(envs[0])
    assert test_tasks == [f"{file}#2" for file in envs[0].templates]
    for env in envs:
        env.hide_tasks({task: 1000 + j for j, task in enumerate(test_tasks)})
    hidden = [t for t in envs[0].tasks if t in envs[0].hidden]
    public = {template.instance().instruction for template in envs[0].templates.values()}
    assert sum(envs[0].task_spec(t).instruction not in public for t in hidden) >= 15  # a draw may repeat the public values

    def solve_part(env: Terminal, part: list[str]) -> list[tuple[str, float, str]]:
        try:
            return [(task, solve(env, task)[1], env.observation()) for task in part]
        finally:
            env.close()

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = [r for part in pool.map(solve_part, envs, (hidden[0::2], hidden[1::2])) for r in part]
    assert len(results) == 30
    for task, reward, observation in results:
        assert reward == 1.0, (task, observation)


@pytest.fixture(scope="module")
def small(engine, terminal_image) -> schema.Dataset:  # type: ignore[no-untyped-def]
    return schema.Dataset.read(cached_build(SMALL_KEY, lambda: Terminal(SMALL_TASKS, engine=engine), small_spec()))


def test_a_small_build_has_the_split_layout_and_labels_that_follow_the_solution(small: schema.Dataset) -> None:
    """Split by task; every state offers the reference step; its Q is γ^(steps left before the submit), by hand."""
    splits = {s.split: s.task for s in small.states}
    assert splits == {"train": "files-csv-prices", "dev": "git-feature-branch", "test": "permissions-owner-exec"}
    assert {s.task_type for s in small.states} == {"files", "git", "permissions"}
    specs = {t: Terminal(SMALL_TASKS).task_spec(t) for t in SMALL_TASKS}
    clean = 0
    for state in small.states:
        assert len(state.candidates) == 4 and sum(c.is_actor for c in state.candidates) == 1
        spec = specs[state.task]
        left = [c for c in spec.solution if c not in state.history]
        reference = left[0] if left else SUBMIT
        by_action = {c.action: small.q_labels[c.id] for c in state.candidates}
        best = GAMMA ** len(left)  # the reference step, the rest of the solution, then the submit that passes
        if set(state.history) <= set(spec.solution) | set(spec.neutral) | {"ls -A"}:  # no detour that can harm
            clean += 1
            assert by_action[reference] == pytest.approx(best), (state.id, state.history)
        assert by_action[reference] in (pytest.approx(best), 0.0)
        assert small.v_labels[state.id] == by_action[reference]
        assert all(q <= best + 1e-12 for q in by_action.values())  # every other path needs at least as many steps
        assert state.observation.startswith("Task: ")
    assert clean >= 3
    assert small.manifest.environment == "terminalbench" and small.manifest.labelling["horizon"] == 9


@pytest.mark.django_db
def test_the_small_build_loads_under_the_published_rows_environment(small: schema.Dataset) -> None:
    from leaderboard.loading import load_dataset
    from leaderboard.models import Label

    dataset, created = load_dataset(small)
    assert created and dataset.environment.slug == published.ENVIRONMENTS["TerminalBench"]
    assert dataset.environment.name == "TerminalBench"
    assert dataset.states.count() == len(small.states)
    assert Label.objects.filter(labelset__dataset=dataset, target="q").count() == len(small.q_labels)
    assert load_dataset(small) == (dataset, False)


@pytest.mark.slow
def test_every_learned_method_trains_on_the_terminal_tasks(engine, small, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The platform trains the learned methods on every hosted dataset (reference rows): on the shell tasks too,
    their continuations and trees stepping the sandbox, and they score dev and test."""
    from tests.test_learned import train_and_score_everywhere

    fast = {"best-of-q": {"steps": 60, "target_every": 10}, "qlass": {"steps": 60, "width": 2, "depth": 1},
            "amc-value": {"steps": 60, "samples": 1}}
    train_and_score_everywhere(SMALL_KEY, lambda: Terminal(SMALL_TASKS, engine=engine), small_spec(), tmp_path, fast)


def test_a_worker_sweep_removes_old_sandboxes_and_episode_folders_and_keeps_young_ones(  # type: ignore[no-untyped-def]
        engine, terminal_image, tmp_path: Path) -> None:
    name = f"qval-term-sweep-{uuid.uuid4().hex[:8]}"
    started = engine.call("run", "-d", "--name", name, "--label", f"{CONTAINER_LABEL}=1", "--pull=never",
                          "--network=none", Sandbox(engine=engine).image_id, "sleep", "120")
    assert started.returncode == 0, started.stderr
    hour_ago = time.time() - 3600
    old, young, unrelated = (tmp_path / f"{EPISODE_PREFIX}old", tmp_path / f"{EPISODE_PREFIX}young", tmp_path / "other")
    for folder in (old, young, unrelated):
        (folder / "app").mkdir(parents=True)
    for path in (old / "app", old, unrelated / "app", unrelated):
        os.utime(path, (hour_ago, hour_ago))

    def alive() -> bool:
        return name in engine.call("ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}").stdout.split()

    try:
        removed = sweep_leftovers(engine, temp_dir=tmp_path)
        assert str(old) in removed and not old.exists()
        assert young.exists() and unrelated.exists() and name not in removed and alive()
        time.sleep(2.5)
        assert name in sweep_leftovers(engine, older_than_s=2, temp_dir=tmp_path)
        assert not alive()
    finally:
        engine.call("rm", "-f", "-t", "0", name)


@pytest.mark.slow
def test_best_of_n_plays_terminal_tasks_that_none_of_the_dataset_shows(  # type: ignore[no-untyped-def]
        engine, terminal_image, test_split_secret: str) -> None:
    """Best-of-N's TerminalBench-lite tasks are the test positions' task files with parameters drawn under its own
    key: none is an instance (instruction) of the dataset's train, dev or secret test tasks; the oracle, which
    rolls every candidate out, plays its episodes there, always choosing a best-scored candidate."""
    from tests.test_best_of_n import played, scored_environment

    def small():  # type: ignore[no-untyped-def]
        """``terminalbench-lite@1.1``'s spec (its secret's key) on six of its files, each played twice."""
        _, spec = registry.BUILDERS["terminalbench-lite"]()
        files = sorted(load_tasks())[::5]
        return Terminal(files, engine=engine, copies=2), replace(spec, split_cycle=("train", "dev") * 3 + ("test",) * 6)

    env, spec = bon.environment("terminalbench-lite", test_split_secret, builder=small)
    scored, _ = scored_environment("terminalbench-lite", test_split_secret, small)
    try:
        tasks = bon.episode_tasks(env)
        assert len(tasks) == 6 and set(tasks) == set(scored.hidden)
        mine = {env.instances[t].instruction for t in tasks}  # type: ignore[union-attr]
        dataset = {scored.instances[t].instruction for t in scored.tasks}  # type: ignore[union-attr]
        assert len(mine) == 6 and not mine & dataset
        episodes = played(env, spec, "terminalbench-lite", 1, ("oracle",))
        assert [e.task for e in episodes] == list(tasks[:1])
        for episode in episodes:
            env.reset(episode.task)
            assert env.instance() in episode.steps[0].observation
            assert all(step.scores[step.chosen] == max(step.scores) for step in episode.steps)
    finally:
        env.close()
        scored.close()

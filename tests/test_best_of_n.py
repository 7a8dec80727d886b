"""The Best-of-N track (qval.best_of_n): oracle and random picks against their baselines, determinism
under seed, resuming, hand-checked statistics, a registered method picking through its ``run``, and
tasks of its own that never show a state of the dataset (FrozenLake, ALFWorld, MiniWoB)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from scipy import stats

from qval import best_of_n as bon
from qval import build, schema
from qval.envs import registry
from qval.envs.miniwob import datasets as miniwob_datasets


@pytest.fixture(scope="module")
def frozen(test_split_secret: str):  # type: ignore[no-untyped-def]
    """FrozenLake with the session's secret test maps."""
    return bon.environment("frozenlake", test_split_secret)


def run(frozen, picker, *, n: int = 4, seed: int = 0, episodes: int = 40, stepping: str = "restore"):  # type: ignore[no-untyped-def]
    env, spec = frozen
    setting = bon.setting_for("frozenlake", env, spec, n=n, seed=seed, num_episodes=episodes, stepping=stepping)
    return bon.run_episodes(env, setting, picker)


def within(a: bon.Interval, b: bon.Interval) -> bool:
    """Whether each estimate lies in the other's 95% interval."""
    return b.low <= a.value <= b.high and a.low <= b.value <= a.high


@pytest.mark.parametrize("n", [3, 4])
def test_oracle_picks_reach_the_reference_policy(frozen, n: int) -> None:  # type: ignore[no-untyped-def]
    oracle = bon.summarise(run(frozen, bon.BUILTIN_PICKERS["oracle"], n=n))
    reference = bon.summarise(run(frozen, None, n=n))
    base = bon.summarise(run(frozen, bon.BUILTIN_PICKERS["base"], n=n))
    assert within(oracle.success, reference.success)
    assert reference.success.value == 1.0  # every test map is solvable by the shortest-path policy
    assert base.success.value < reference.success.value  # the ε-noisy actor falls in holes sometimes
    assert oracle.mean_return.value >= base.mean_return.value


def test_random_scores_reach_the_random_baseline(frozen) -> None:  # type: ignore[no-untyped-def]
    """A score callable giving random scores (through turn_states, restore and ids) plays like random choice."""
    draws = random.Random(7)

    def random_scores(states: list[schema.State]) -> dict[str, float]:
        return {c.id: draws.random() for s in states for c in s.candidates}

    picked = run(frozen, bon.score_picker(random_scores), episodes=60)
    baseline = run(frozen, bon.BUILTIN_PICKERS["random"], episodes=60)
    # Two samples of the same process: neither success counts (Fisher's exact test) nor returns
    # (Mann-Whitney U) may differ at the 0.1% level.  Bootstrap intervals do not do here: a baseline
    # of 0 successes in 60 has the interval [0, 0], which one lucky success falls outside.
    wins = [sum(e.success for e in episodes) for episodes in (picked, baseline)]
    assert stats.fisher_exact([[w, 60 - w] for w in wins]).pvalue > 1e-3, wins
    returns = [[e.discounted_return for e in episodes] for episodes in (picked, baseline)]
    if any(max(r) > 0 for r in returns):
        assert stats.mannwhitneyu(*returns).pvalue > 1e-3, returns


def test_candidates_hold_the_actor_action_and_n_actions(frozen) -> None:  # type: ignore[no-untyped-def]
    for n in (3, 4):
        for episode in run(frozen, bon.BUILTIN_PICKERS["base"], n=n, episodes=8):
            for step in episode.steps:
                assert len(step.candidates) == n and len(set(step.candidates)) == n
                assert step.scores[step.chosen] == 1.0  # base picks the actor's action, which is offered


def test_same_seed_same_episodes_and_resume(frozen) -> None:  # type: ignore[no-untyped-def]
    base = bon.BUILTIN_PICKERS["base"]
    first = [e.to_json() for e in run(frozen, base, seed=3, episodes=12)]
    assert first == [e.to_json() for e in run(frozen, base, seed=3, episodes=12)]
    assert first != [e.to_json() for e in run(frozen, base, seed=4, episodes=12)]
    assert [bon.Episode.from_json(e).to_json() for e in first] == first
    # replay stepping plays the same episodes as restore stepping
    assert first == [e.to_json() for e in run(frozen, base, seed=3, episodes=12, stepping="replay")]
    # resume: skipping finished episodes plays exactly the others, identically
    env, spec = frozen
    setting = bon.setting_for("frozenlake", env, spec, n=4, seed=3, num_episodes=12)
    seen: list[int] = []
    rest = bon.run_episodes(env, setting, base, done={0, 1, 2, 5}, on_episode=lambda e: seen.append(e.index))
    assert seen == [3, 4, 6, 7, 8, 9, 10, 11]
    assert [e.to_json() for e in rest] == [first[i] for i in seen]


def test_oracle_is_the_same_with_replay_stepping(frozen) -> None:  # type: ignore[no-untyped-def]
    oracle = bon.BUILTIN_PICKERS["oracle"]
    assert ([e.to_json() for e in run(frozen, oracle, episodes=6)]
            == [e.to_json() for e in run(frozen, oracle, episodes=6, stepping="replay")])


def test_statistics_by_hand() -> None:
    def episode(index: int, success: bool, ret: float) -> bon.Episode:
        return bon.Episode(index=index, task="t", steps=(), discounted_return=ret, success=success)

    eps = [episode(0, True, 0.5), episode(1, False, 0.0), episode(2, True, 1.0), episode(3, True, 0.5)]
    summary = bon.summarise(eps, resamples=200)
    assert summary.success.value == 0.75 and summary.mean_return.value == 0.5
    assert 0.0 <= summary.success.low <= 0.75 <= summary.success.high <= 1.0
    base = [episode(0, False, 0.0), episode(1, False, 0.0), episode(2, True, 1.0), episode(3, False, 0.0)]
    assert bon.gain(eps, base).value == 0.5  # (1 + 0 + 0 + 1) / 4, paired by index
    assert bon.best_index([math.nan, 0.2, 0.7, 0.7], fallback=0) == 2
    assert bon.best_index([None, math.nan], fallback=1) == 1
    assert bon.rank_correlation([0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]).value == 1.0  # type: ignore[union-attr]
    assert bon.rank_correlation([0.1, 0.2, 0.3, 0.4], [4, 3, 2, 1]).value == -1.0  # type: ignore[union-attr]
    assert bon.rank_correlation([0.1, 0.2], [1, 2]) is None
    # one side the same for every method: ρ is undefined, not NaN on the page and in the JSON
    assert bon.rank_correlation([0.1, 0.2, 0.3], [0.5, 0.5, 0.5]) is None
    assert bon.rank_correlation([0.3, 0.3, 0.3, 0.3], [1, 2, 3, 4]) is None


def test_bad_settings_are_refused(frozen) -> None:  # type: ignore[no-untyped-def]
    env, spec = frozen
    with pytest.raises(bon.BestOfNError, match="n must be at least 2"):
        bon.setting_for("frozenlake", env, spec, n=1, seed=0, num_episodes=1)
    with pytest.raises(bon.BestOfNError, match="stepping must be one of"):
        bon.setting_for("frozenlake", env, spec, n=3, seed=0, num_episodes=1, stepping="teleport")
    with pytest.raises(bon.BestOfNError, match="unknown environment 'pong'"):
        bon.environment("pong", "s")
    with pytest.raises(bon.BestOfNError, match="test-split secret"):
        bon.environment("frozenlake", None)


@pytest.mark.slow
def test_a_registered_method_picks_through_its_run(frozen, frozenlake: schema.Dataset, tiny_model: Path,
                                                  tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``direct-single`` (pointwise) and ``ranking`` (one state) on a tiny local model play whole episodes."""
    for name in ("direct-single", "ranking"):
        picker = bon.method_picker(name, frozenlake, str(tiny_model), cache_dir=tmp_path / name)
        episodes = run(frozen, picker, n=3, episodes=1)
        assert episodes and all(len(s.scores) == 3 for e in episodes for s in e.steps)
        again = run(frozen, bon.method_picker(name, frozenlake, str(tiny_model), cache_dir=tmp_path / name),
                    n=3, episodes=1)
        assert [e.to_json() for e in again] == [e.to_json() for e in episodes]


def test_dataset_slugs_are_the_builders() -> None:
    assert bon.DATASET_SLUGS["frozenlake"] == registry.BUILDERS["frozenlake"]()[1].slug
    assert bon.DATASET_SLUGS["alfworld"] == registry.BUILDERS["alfworld"]()[1].slug


def test_a_recorded_episode_replays(frozen) -> None:  # type: ignore[no-untyped-def]
    env, spec = frozen
    setting = bon.setting_for("frozenlake", env, spec, n=3, seed=5, num_episodes=4)
    for episode in bon.run_episodes(env, setting, bon.BUILTIN_PICKERS["random"]):
        bon.replay_episode(env, setting, episode)
        tampered = bon.Episode.from_json({**episode.to_json(), "steps": episode.to_json()["steps"][:-1]})
        with pytest.raises(bon.BestOfNError, match="the episode goes on"):
            bon.replay_episode(env, setting, tampered)


def played(env, spec, name: str, episodes: int, pickers: tuple[str, ...]) -> list[bon.Episode]:  # type: ignore[no-untyped-def]
    """Episodes of ``pickers`` (N = 3) on Best-of-N's tasks."""
    setting = bon.setting_for(name, env, spec, n=3, seed=0, num_episodes=episodes)
    return [e for picker in pickers for e in bon.run_episodes(env, setting, bon.BUILTIN_PICKERS[picker])]


def scored_environment(name: str, secret: str, builder=None):  # type: ignore[no-untyped-def]
    """The environment the dataset is built from (``builder``'s, by default ``BUILDERS[name]``'s): its test tasks
    drawn from ``secret``."""
    env, spec = (builder or registry.BUILDERS[name])()
    build.hide_test_tasks(env, spec, secret)
    return env, spec


def test_frozenlake_episodes_show_no_state_of_the_dataset(frozen, frozenlake: schema.Dataset,  # type: ignore[no-untyped-def]
                                                         test_split_secret: str) -> None:
    """Best-of-N's maps are none of the dataset's 20 (the 4 secret test maps included), and no observation of
    an episode is a state or a candidate's next state of any split of the built dataset."""
    env, spec = frozen
    scored, _ = scored_environment("frozenlake", test_split_secret)
    mine = {env.maps[t] for t in bon.episode_tasks(env)}
    assert len(mine) == 4 and not mine & set(scored.maps.values())
    assert {s.split for s in frozenlake.states} == {"train", "dev", "test"}
    dataset = {s.observation for s in frozenlake.states} | {c.next_state for s in frozenlake.states
                                                            for c in s.candidates}
    shown = {step.observation for e in played(env, spec, "frozenlake", 8, ("oracle", "random")) for step in e.steps}
    assert len(shown) > 20 and not shown & dataset
    # the draw is the secret's: the same secret the same maps, drawn afresh or hidden again from the worker's memo
    # of the draw; another secret others
    bon._DRAWS.clear()
    fresh, _ = bon.environment("frozenlake", test_split_secret)
    again, _ = bon.environment("frozenlake", test_split_secret)
    other, _ = bon.environment("frozenlake", test_split_secret + "-other")
    for drawn in (fresh, again):
        assert [drawn.maps[t] for t in bon.episode_tasks(drawn)] == [env.maps[t] for t in bon.episode_tasks(env)]
        assert instances(drawn, bon.episode_tasks(drawn)) == instances(env, bon.episode_tasks(env))
    assert not {other.maps[t] for t in bon.episode_tasks(other)} & mine


def collected_observations(env, spec, secret: str) -> set[str]:  # type: ignore[no-untyped-def]
    """Every observation of every trajectory the dataset collects (its states are some of them), all splits."""
    return {turn.observation for i in range(spec.num_trajectories)
            for turn in build.collect(env, i, spec, secret).turns}


@pytest.mark.slow
def test_alfworld_episodes_show_no_state_of_the_dataset(test_split_secret: str) -> None:
    """Best-of-N's ALFWorld scenes are none of the dataset's 30 and no observation of an episode (the base policy: the
    dataset's own actor) is one the dataset's trajectories show."""
    env, spec = bon.environment("alfworld", test_split_secret)
    scored, _ = scored_environment("alfworld", test_split_secret)
    tasks = bon.episode_tasks(env)
    assert len(tasks) == 10
    assert not {(env.scenes[t].floorplan, env.scenes[t].seed) for t in tasks} & {
        (s.floorplan, s.seed) for s in scored.scenes.values()}
    shown = {step.observation for e in played(env, spec, "alfworld", 10, ("base",)) for step in e.steps}
    assert shown and not shown & collected_observations(scored, spec, test_split_secret)


def instances(env, tasks) -> set[str]:  # type: ignore[no-untyped-def]
    """The instance (:meth:`~qval.envs.base.Environment.instance`) each of ``tasks`` plays."""
    shown = set()
    for task in tasks:
        env.reset(task)
        shown.add(env.instance())
    return shown


def small_miniwob():  # type: ignore[no-untyped-def]
    """``miniwob@2.0``'s environment and spec with 1 of its 14 seeds per task: its 16 tasks, the same split by task
    and the same secret test draws at 5 test positions (every instance costs a browser reset)."""
    from qval.envs.miniwob.adapter import MiniWoB

    env, spec = registry.BUILDERS["miniwob"]()
    env.close()
    return MiniWoB(task_names=miniwob_datasets.TASKS_2, seeds=range(1), horizon=12, goal_banner=True), spec


@pytest.mark.slow
@pytest.mark.browser
def test_miniwob_episodes_show_no_state_of_the_dataset(test_split_secret: str) -> None:
    """Best-of-N's MiniWoB instances show no goal of the dataset's secret test tasks (enter-text-2 has only 100
    goals: redrawn until none is a dataset goal), and an observation opens with its goal, so none is one of the
    dataset's.  On ``miniwob@2.0`` with 1 seed per task (:func:`small_miniwob`: the same code path, 5 test
    positions instead of 74; each instance is a browser reset).  Only the secret test positions are read back
    here (the train and dev goals are public, and :func:`qval.best_of_n.environment` itself checks every split);
    episodes are not played (a restore is a reset and a replay per candidate: minutes per episode on 2 cores)."""
    env, spec = bon.environment("miniwob", test_split_secret, builder=small_miniwob)
    try:
        tasks = bon.episode_tasks(env)
        mine = instances(env, tasks)
        env.reset(tasks[0])
        first = env.observation()
    finally:
        env.close()
    scored, _ = scored_environment("miniwob", test_split_secret, small_miniwob)
    try:
        hidden = bon.episode_tasks(scored)  # the dataset's secret test positions
        dataset = instances(scored, hidden)
    finally:
        scored.close()
    assert len(tasks) == len(hidden) == 5 and len(mine) == len(dataset) == 5
    assert not mine & dataset
    assert first.startswith("Goal: ") and first.partition("\n\n")[0][len("Goal: "):] in mine

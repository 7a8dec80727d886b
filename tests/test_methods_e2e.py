"""Every built-in text method end to end on FrozenLake, ALFWorld and MiniWoB dev data with a tiny random-weight
chat model served by our own server: a finite score or a counted NaN for every point, the same under a seed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from qval import build, schema
from tests.conftest import cached_build
from qval.methods.registry import get_method
from qval.methods.run import run_method

pytestmark = pytest.mark.slow

LLM_METHODS = ["direct-single", "direct-batched", "direct-sequential", "direct-16", "gvl", "verifier", "Δbelief",
               "sdpo", "sdpo-gt", "ranking"]
CODE_METHODS = ["codegen", "codegen-avg", "eureka"]
OPTIONS = {"max_tokens": 8, "samples": 2, "iterations": 1, "judge_points": 2, "call_timeout_s": 0.5}
NUM_STATES = 3
"""Dev states per environment: the tiny model on CPU takes about a second a request."""


def small(slug: str, **changes: object) -> build.DatasetSpec:
    fields: dict[str, object] = dict(slug=slug, name=slug, version="0", description="methods test build",
                                     modalities=("text",), num_trajectories=2, max_states_per_trajectory=2,
                                     epsilon=0.3, seed=3, discount=0.95, splits=("dev",))
    fields.update(changes)
    return build.DatasetSpec(**fields)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def datasets(frozenlake: schema.Dataset, tmp_path_factory: pytest.TempPathFactory) -> dict[str, schema.Dataset]:
    """Dev data of the three text environments (FrozenLake: the session's build; ALFWorld, MiniWoB: small builds)."""
    from qval.envs.alfworld.adapter import ALFWorld, choose_scenes
    from qval.envs.miniwob.adapter import MiniWoB

    alfworld_dir = cached_build(
        "ALFWorld(choose_scenes(2, seed=7), horizon=15)",
        lambda: ALFWorld(choose_scenes(2, seed=7), horizon=15, game_root=tmp_path_factory.mktemp("alfworld-games")),
        small("alfworld-tiny"))
    miniwob_dir = cached_build(
        "MiniWoB(('login-user', 'click-button-sequence'), range(1), horizon=12)",
        lambda: MiniWoB(task_names=("login-user", "click-button-sequence"), seeds=range(1), horizon=12),
        small("miniwob-tiny"))
    alfworld, miniwob = schema.Dataset.read(alfworld_dir), schema.Dataset.read(miniwob_dir)
    out = {}
    for name, ds in (("frozenlake", frozenlake), ("alfworld", alfworld), ("miniwob", miniwob)):
        out[name] = schema.Dataset(manifest=ds.manifest, states=ds.states_in("dev")[:NUM_STATES],
                                   q_labels=ds.q_labels, v_labels=ds.v_labels)
    return out


def check(name: str, ds: schema.Dataset, tiny_model: Path, tmp_path: Path) -> None:
    first = run_method(name, ds, "dev", "q", str(tiny_model), seed=1, cache_dir=tmp_path / "a", options=OPTIONS)
    again = run_method(name, ds, "dev", "q", str(tiny_model), seed=1, cache_dir=tmp_path / "b", options=OPTIONS)
    ranking = "ranking" in get_method(name).targets
    ids = {c.id for s in ds.states for c in s.candidates} if ranking else set(ds.point_ids("dev", "q"))
    assert set(first.scores) == ids
    assert all(math.isfinite(v) or math.isnan(v) for v in first.scores.values())
    assert first.num_nan == sum(math.isnan(v) for v in first.scores.values())
    assert json.dumps(first.scores, sort_keys=True) == json.dumps(again.scores, sort_keys=True)
    assert first.meta["prompt_hash"] and first.meta["backbone"].startswith(tiny_model.name + "@")


@pytest.mark.parametrize("env", ["frozenlake", "alfworld", "miniwob"])
@pytest.mark.parametrize("name", LLM_METHODS)
def test_llm_methods_end_to_end(name: str, env: str, datasets: dict[str, schema.Dataset], tiny_model: Path,
                                tmp_path: Path) -> None:
    check(name, datasets[env], tiny_model, tmp_path)


@pytest.mark.container
@pytest.mark.parametrize("env", ["frozenlake", "alfworld", "miniwob"])
@pytest.mark.parametrize("name", CODE_METHODS)
def test_code_methods_end_to_end(name: str, env: str, datasets: dict[str, schema.Dataset], tiny_model: Path,
                                 tmp_path: Path, engine, base_image, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("QVAL_CONTAINER_WORK_ROOT", str(engine.work_root))
    check(name, datasets[env], tiny_model, tmp_path)

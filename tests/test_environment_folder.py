"""An environment is one folder: a toy one written into a temporary folder (adapter, dataset version, method
context, catalogue entry) is registered, built by the site's command, loaded, scored and read by the methods,
with no other file of the project touched.  Also: the registry refuses a folder that would shadow another."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command

from leaderboard.models import Dataset, DatasetBuild, Environment
from qval import schema
from qval.envs import registry
from qval.methods.context import env_text
from qval.methods.reference import methods_for
from qval.methods.run import run_method
from submissions.models import Submission
from workers.tasks import score_submission, validate_upload

ADAPTER = '''
from qval.envs.base import Environment


class Corridor(Environment):
    """Walk right to the end of a corridor (task "n-5": five cells)."""

    name = "corridor"
    reference_policy = "always right"
    deterministic = True

    def __init__(self, lengths=(5, 6, 7), horizon=20):
        super().__init__(horizon)
        self._lengths = {f"n-{n}": n for n in lengths}

    @property
    def tasks(self):
        return tuple(self._lengths)

    def config(self):
        return {"lengths": list(self._lengths.values()), "horizon": self.horizon}

    def _reset(self, task):
        self._pos, self._n = 0, self._lengths[task]

    def _step(self, action):
        self._pos = max(0, self._pos + (1 if action == "right" else -1))
        return (1.0, True) if self._pos == self._n else (0.0, False)

    def observation(self):
        return "." * self._pos + "@" + "." * (self._n - self._pos)

    def candidates(self):
        return ["left", "right"]

    def reference_action(self):
        return "right"
'''

DATASETS = '''
from qval.build import DatasetSpec
from qval.envs.entry import DatasetVersion

V1_0 = DatasetVersion(
    DatasetSpec(slug="corridor", name="Corridor", version="1.0", description="Walk right to the end.",
                modalities=("text",), num_trajectories=90, max_states_per_trajectory=3, epsilon=0.3, seed=7,
                discount=0.9, splits=("train", "dev", "test"), split_by="trajectory"),
    f"{__package__}.adapter:Corridor",
    {"lengths": (5, 6, 7, 8), "horizon": 20},
)
VERSIONS = (V1_0,)
'''

INIT = '''
from pathlib import Path

from qval.envs.entry import EnvironmentEntry

from . import datasets

ENVIRONMENT = EnvironmentEntry(
    name="corridor", title="Corridor", description="A corridor to walk along.", url="https://example.org/corridor",
    folder=Path(__file__).parent, versions=datasets.VERSIONS, builders={"corridor": datasets.V1_0}, open_book=True,
)
'''

CONTEXT = {
    "task_description": "Walk right until the end of the corridor.",
    "reward_description": "1 at the end, 0 otherwise.",
    "observation_space": "Dots, with @ for the walker.",
    "action_space": "left or right.",
    "max_steps": 20,
    "criteria": [{"name": "progress", "description": "It moves right.", "question": "did it move right?"}],
    "action_label": "move",
    "outcome_label": "reached the end",
}


def write_folder(root: Path, name: str, **files: str) -> Path:
    """An environment folder ``root/name`` holding ``files`` (name -> text)."""
    folder = root / name
    for relative, text in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(textwrap.dedent(text))
    return folder


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The registry as it is, restored after the test (with the modules a loaded folder imported)."""
    for table in ("ENVIRONMENTS", "BUILDERS", "VERSIONS"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    modules = set(sys.modules)
    yield registry
    for name in set(sys.modules) - modules:
        if not name.startswith(("qval", "django", "rest_framework")):
            del sys.modules[name]


@pytest.fixture
def corridor(fresh_registry, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The toy environment folder, registered."""
    folder = write_folder(tmp_path, "qval_toy_corridor", **{"__init__.py": INIT, "adapter.py": ADAPTER,
                                                            "datasets.py": DATASETS,
                                                            "prompts/v1.json": json.dumps(CONTEXT)})
    return fresh_registry.load_folder(folder)


@pytest.mark.django_db
def test_a_toy_environment_folder_is_built_loaded_scored_and_read_by_the_methods(
        corridor, api, settings, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    settings.QVAL_DATASETS_DIR = tmp_path / "datasets"
    assert registry.environment("corridor") is corridor and "corridor" in registry.BUILDERS
    assert registry.builder_for("corridor@1.0") is corridor.builders["corridor"]

    call_command("build_dataset", "corridor")  # the site's command: build, write, load
    assert "loaded corridor@1.0" in capsys.readouterr().out
    assert DatasetBuild.objects.get(name="corridor").status == "finished"
    row = Dataset.lookup("corridor@1.0")
    assert row is not None and row.hosted
    env = Environment.objects.get(slug="corridor")  # the catalogue entry of the folder
    assert (env.name, env.url, env.open_book) == ("Corridor", "https://example.org/corridor", True)
    ds = schema.Dataset.read(settings.QVAL_DATASETS_DIR / "corridor-1.0")
    assert ds.manifest.environment == "corridor" and ds.manifest.fingerprint == row.fingerprint
    dev = [s for s in ds.states if s.split == "dev"]
    assert len(dev) >= 50 and {s.task for s in dev} == {"n-5", "n-6", "n-7", "n-8"}

    # Scored: an upload of the labels themselves ranks them perfectly.
    ids = [s.actor_candidate.id for s in dev]
    content = pd.DataFrame({"id": ids, "score": [ds.q_labels[i] for i in ids]}).to_csv(index=False).encode()
    resp = api.post("/api/v1/submissions/", {"dataset": "corridor@1.0", "split": "dev", "target": "q",
                                             "method_name": "oracle", "file": SimpleUploadedFile("p.csv", content)},
                    format="multipart")
    assert resp.status_code == 201, resp.content
    sub_id = resp.json()["id"]
    validate_upload(sub_id)
    assert score_submission(sub_id) == Submission.FINISHED
    results = {r.metric: r for r in Submission.objects.get(pk=sub_id).results.all()}
    assert results["spearman"].num_points == len(dev) and results["spearman"].value == pytest.approx(1.0), results

    # The methods read the folder: its method context, and the reference methods that apply to it.
    assert env_text("corridor").task_description == CONTEXT["task_description"]
    assert "goal-distance" not in methods_for("corridor") and "step-index" in methods_for("corridor")
    steps = run_method("step-index", ds, "dev", "q", backbone="none").scores
    by_state = {s.id: s.step for s in dev}
    assert all(steps[c.id] == by_state[c.state_id] for s in dev for c in s.candidates if c.id in steps)
    assert np.isfinite(list(steps.values())).all()


def test_a_folder_that_clashes_or_declares_nothing_is_refused(fresh_registry, tmp_path: Path) -> None:
    frozen = DATASETS.replace('slug="corridor"', 'slug="frozenlake-8x8"').replace('version="1.0"', 'version="1.2"')
    clash = write_folder(tmp_path, "qval_toy_clash", **{"__init__.py": INIT, "adapter.py": ADAPTER,
                                                        "datasets.py": frozen})
    with pytest.raises(ValueError, match="frozenlake-8x8@1.2 already registered by another environment"):
        fresh_registry.load_folder(clash)
    assert "corridor" not in fresh_registry.ENVIRONMENTS and "qval_toy_clash" not in sys.modules
    empty = write_folder(tmp_path, "qval_toy_empty", **{"__init__.py": "X = 1\n"})
    with pytest.raises(TypeError, match="defines no ENVIRONMENT"):
        fresh_registry.load_folder(empty)
    with pytest.raises(KeyError, match="unknown environment 'nowhere'; registered: alfworld, frozenlake"):
        fresh_registry.environment("nowhere")


PUBLISHED: dict[str, str] = {
    "alfworld-all-types@1.0": "7da59850d2fcb0a9fd355d7ba0da48c2e0b1f2266d0ac0eb1b7d7453924d64dd",
    "alfworld-all-types@1.1": "3a1daf54c3364de17ddf81c941f6ae0dad890c0c9c4b38feb33ac600d134374b",
    "alfworld-pick-place@1.0": "8590147002590d8b12941468128e5b81a78fcc5eaeb1303487443c8ec2b3b917",
    "alfworld-pick-place@1.1": "a88419ca08420e910c7cc7d6da257034ca837de5b0126d306a148911b4fd52a7",
    "frozenlake-8x8@1.0": "09f5fe8a94d4fe96eb5568e6ae461728fa351c44b5d175310c56a54fa221f515",
    "frozenlake-8x8@1.1": "9ef7488f6b0bd57ca1276deab4fdd35c8ea257803a24f2efad61f5bfd1c7d2a7",
    "frozenlake-8x8@1.2": "70a61fc892a231d678de758048739e2eab21d18a5fdee3f07f565af57dbd4df6",
    "miniwob@1.1": "9ce180f463a4654bc520c4e933942e5d4d3d7fba5b65ff4a399babca2347292b",
    "miniwob@1.2": "9c6cd107e3a5f12b7812c9aa6dc5627733389eee48e2a416411dc79feb835468",
    "miniwob@2.0": "c7d5c555e1df3f75b040458d96dce2e14997cb84a3411a9a82eb0dfea690cef8",
    "terminalbench-lite@1.0": "8ebfc480d3c351acb033c7dbe5802f5ee78baaa0086f57d756d7c0f6d717ebb2",
    "terminalbench-lite@1.1": "782be422c31865ffac988eea4a721730d42b8bdad67f3190fd3d65e4e5d69072",
}
"""Every dataset version the registry holds -> the SHA-256 of what its build depends on besides the adapters' code
(:func:`identity`), as the builders in ``qval/build.py`` made them before the environments moved to their folders:
a changed spec, description, task list or environment setting is a new version."""


def identity(key: str) -> str:
    """SHA-256 of dataset version ``key``'s spec, environment name, reference policy, horizon, config and tasks."""
    env, spec = registry.VERSIONS[key]()
    try:
        made = {"spec": dataclasses.asdict(spec), "environment": env.name, "policy": env.reference_policy,
                "horizon": env.horizon, "config": env.config(), "tasks": list(env.tasks)}
    finally:
        env.close()
    return hashlib.sha256(json.dumps(made, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def test_every_published_dataset_version_keeps_what_its_build_depends_on() -> None:
    assert {key: identity(key) for key in registry.VERSIONS} == PUBLISHED
    for entry in registry.ENVIRONMENTS.values():  # each version is made in its own environment's adapter
        assert all(registry.VERSIONS[v.key] is v and v.environment().name == entry.name for v in entry.versions)

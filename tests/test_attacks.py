"""The attack suite: every channel of the hidden-split threat model (README, *Threat model*),
tried as an adversarial user would, and shown to fail.  Each class is one channel."""

from __future__ import annotations

import io
import json
import stat
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from qval import build, containers, export, hidden, schema

KEY = "{0.slug}@{0.version}".format(build.BUILDERS["frozenlake"]()[1])

FROZENLAKE_1_1_FINGERPRINT = "0836d222be3fe890dcea21f87e1eb7d4c32b32de8b48a7e7619897dfd944b6a1"
"""``frozenlake-8x8@1.1`` as published (its test split public-seeded, hence superseded by 1.2)."""

FROZENLAKE_1_1_SPLITS = {
    "train": "30e925b312b52f22cffe81d6d9958d205cd268063155c8216c178d961e66ed75",
    "dev": "dad747c352a1358990ac1210b15adca1491af87532c26b8878180afee3e68667",
    "test": "6871ac06a20d2d5faedc83fe0b68926ba5a6321cf98657c83d9d6747ad6c6b98",
}
""":meth:`qval.schema.Dataset.split_fingerprint` of each split of the published ``1.1`` (the build
with fingerprint :data:`FROZENLAKE_1_1_FINGERPRINT`; ``test_frozenlake_1_1_still_rebuilds`` checks both)."""


def without_goal_images(ds: schema.Dataset) -> schema.Dataset:
    """``ds`` with every ``end_image`` removed (what 1.1, which had none, recorded)."""
    states = [
        replace(s, end_image=None, candidates=tuple(replace(c, end_image=None) for c in s.candidates))
        for s in ds.states
    ]
    return replace(ds, states=states)


def small_build(secret: str | None, trajectories: int = 20) -> schema.Dataset:
    """The current FrozenLake spec on its first ``trajectories`` trajectories (one per map for 20)."""
    env, spec = build.BUILDERS["frozenlake"]()
    return build.build_dataset(env, replace(spec, num_trajectories=trajectories), secret=secret)


def scenes_id(scenes: list[tuple[int, int]], position: int) -> str:
    """The public task id of ALFWorld scene ``position``."""
    floorplan, seed = scenes[position]
    return f"FloorPlan{floorplan}-s{seed}"


def first_trajectories(ds: schema.Dataset, split: str, n: int) -> list[schema.State]:
    return [s for s in ds.states_in(split) if s.trajectory < n]


class TestSecretTestSplit:
    """Rebuilding the hidden split from the public pipeline: the test maps and random draws come
    from the maintainer's secret, train and dev do not depend on it."""

    def test_train_and_dev_are_the_published_ones(self, frozenlake: schema.Dataset) -> None:
        """The new version's train and dev are 1.1's byte for byte (goal images aside, which are new)."""
        public = without_goal_images(frozenlake)
        for split in ("train", "dev"):
            assert public.split_fingerprint(split) == FROZENLAKE_1_1_SPLITS[split]
        # ... and the published fingerprints of those splits are plain SHA-256: anyone can check them.
        for split in ("train", "dev"):
            assert frozenlake.manifest.split_fingerprints[split] == frozenlake.split_fingerprint(split)

    def test_public_pipeline_without_secret_rebuilds_train_and_dev_only(self, frozenlake: schema.Dataset) -> None:
        ds = small_build(secret=None)
        assert ds.states_in("test") == [] and ds.manifest.build_info["test_split"] == "not built: no secret"
        for split in ("train", "dev"):
            expected = first_trajectories(frozenlake, split, 20)
            assert ds.states_in(split) == expected and expected
            ids = [c.id for s in expected for c in s.candidates]
            assert [ds.q_labels[i] for i in ids] == [frozenlake.q_labels[i] for i in ids]
            names = ds.image_names(split)
            assert names and all(ds.images[n] == frozenlake.images[n] for n in names)

    def test_wrong_secret_gives_other_test_maps_and_labels(
        self, frozenlake: schema.Dataset, test_split_secret: str
    ) -> None:
        guess = small_build(secret="a guess at the secret")
        real = first_trajectories(frozenlake, "test", 20)
        guessed = guess.states_in("test")
        assert real and guessed
        real_maps = {s.observation.replace("@", "?") for s in real}
        assert not real_maps & {s.observation.replace("@", "?") for s in guessed}  # no test state on a real map
        real_ids = {s.id for s in real}
        assert real_ids != {s.id for s in guessed} or [frozenlake.v_labels[i] for i in sorted(real_ids)] != [
            guess.v_labels[i] for i in sorted(real_ids)
        ]
        # The same secret does rebuild it (the maintainer's reproducibility).
        again = small_build(secret=test_split_secret)
        assert again.states_in("test") == real

    def test_public_seeds_of_the_old_version_do_not_give_the_test_split(self, frozenlake: schema.Dataset) -> None:
        """1.1's test maps (seeds 45, 50, 55, 60, in the repository) are not 1.2's."""
        env, spec = build.frozenlake_8x8_v1_1()
        old = build.build_dataset(env, replace(spec, num_trajectories=20))
        old_maps = {s.observation.replace("@", "?") for s in old.states_in("test")}
        new_maps = {s.observation.replace("@", "?") for s in frozenlake.states_in("test")}
        assert old_maps and new_maps and not old_maps & new_maps

    def test_published_test_fingerprint_confirms_no_guess(
        self, frozenlake: schema.Dataset, test_split_secret: str
    ) -> None:
        """Even the true test split, hashed the public way or under a guessed secret, does not give
        the published test fingerprint; only the secret's holder can check it."""
        published = frozenlake.manifest.split_fingerprints["test"]
        assert frozenlake.split_fingerprint("test") != published
        guessed_key = hidden.fingerprint_key("a guess at the secret", KEY)
        assert frozenlake.split_fingerprint("test", guessed_key) != published
        assert frozenlake.split_fingerprint("test", hidden.fingerprint_key(test_split_secret, KEY)) == published
        # The dataset fingerprint hashes the split fingerprints, so it confirms nothing more.
        stripped = replace(frozenlake, secret=None)
        with pytest.raises(schema.SchemaError, match="QVAL_TEST_SPLIT_SECRET"):
            stripped.compute_fingerprint()

    def test_reading_the_dataset_needs_the_secret(
        self, frozenlake: schema.Dataset, test_split_secret: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv(hidden.ENV_VAR, raising=False)
        monkeypatch.setenv("QVAL_DATA_DIR", str(tmp_path))  # no local secret file there
        folder = frozenlake.images.directory.parent  # type: ignore[attr-defined]
        with pytest.raises(schema.SchemaError, match="drawn from a secret"):
            schema.Dataset.read(folder)
        with pytest.raises(schema.SchemaError, match="fingerprint mismatch"):
            schema.Dataset.read(folder, secret="a guess at the secret")
        assert schema.Dataset.read(folder, secret=test_split_secret).manifest.fingerprint == frozenlake.manifest.fingerprint

    def test_the_secret_is_not_in_the_manifest_or_exports(
        self, frozenlake: schema.Dataset, test_split_secret: str, tmp_path: Path
    ) -> None:
        folder = frozenlake.images.directory.parent  # type: ignore[attr-defined]
        export.export_dataset(frozenlake, tmp_path / "export")
        seeds = {str(hidden.derive_seed(test_split_secret, KEY, "task", t)) for t in ("map-3", "map-8")}
        texts = [(folder / "manifest.json").read_text(), *(p.read_text() for p in (tmp_path / "export").rglob("*.jsonl")),
                 (tmp_path / "export" / "README.md").read_text()]
        for text in texts:
            assert test_split_secret not in text and not any(seed in text for seed in seeds)
        card = (tmp_path / "export" / "README.md").read_text()
        assert all(f"{split} `{fp}`" in card for split, fp in frozenlake.manifest.split_fingerprints.items())
        config = json.loads((folder / "manifest.json").read_text())["config"]["environment"]
        assert [config["map_seeds"][j] for j in (3, 8, 13, 18)] == [None] * 4
        assert all(config["maps"][f"map-{j}"] is None for j in (3, 8, 13, 18))

    def test_superseded_public_test_split_takes_no_submissions(self, api, loaded) -> None:  # type: ignore[no-untyped-def]
        """1.1's test maps are public seeds: once 1.2 is loaded, 1.1's test split refuses submissions."""
        from django.core.files.uploadedfile import SimpleUploadedFile

        from leaderboard.loading import load_dataset
        from submissions.models import Submission

        env, spec = build.frozenlake_8x8_v1_1()
        old = load_dataset(build.build_dataset(env, replace(spec, num_trajectories=10)))[0]
        assert old.superseded_test_split() == loaded and loaded.superseded_test_split() is None

        def post(split: str):  # type: ignore[no-untyped-def]
            data = {"dataset": old.key, "split": split, "target": "q", "method_name": "m",
                    "file": SimpleUploadedFile("p.csv", b"id,score\nt000-s01-a0,0.5\n")}
            return api.post("/api/v1/submissions/", data, format="multipart")

        resp = post("test")
        assert resp.status_code == 400 and f"submit to {loaded.key}" in json.dumps(resp.json())
        assert not Submission.objects.filter(split="test").exists()
        assert post("dev").status_code == 201

    def test_local_secret_is_generated_once_and_private(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv(hidden.ENV_VAR, raising=False)
        assert hidden.configured_secret(tmp_path) is None  # never generated by a read
        first = hidden.local_secret(tmp_path)
        assert len(first) == 64 and hidden.local_secret(tmp_path) == first
        assert stat.S_IMODE((tmp_path / hidden.SECRET_FILE).stat().st_mode) == 0o600
        assert hidden.configured_secret(tmp_path) == first
        monkeypatch.setenv(hidden.ENV_VAR, "from-the-environment")
        assert hidden.configured_secret(tmp_path) == "from-the-environment"

    @pytest.mark.slow
    def test_alfworld_test_scenes_come_from_the_secret(self, tmp_path: Path) -> None:
        """ALFWorld (text): the hidden scenes' ids (``hidden-{position}``) reveal nothing, train and dev
        do not depend on the secret, and a wrong secret gives other scenes."""
        from qval.envs.alfworld import ALFWorld, choose_scenes

        scenes = choose_scenes(3, seed=0)
        spec = build.DatasetSpec(
            slug="alfworld-small", name="ALFWorld small", version="0", description="test build",
            modalities=("text",), num_trajectories=3, max_states_per_trajectory=1, epsilon=0.3, seed=5,
            discount=0.95, splits=("train", "dev", "test"), split_by="task", secret_test=True,
        )

        def run(secret: str | None) -> schema.Dataset:
            return build.build_dataset(ALFWorld(scenes, horizon=15, game_root=tmp_path), spec, secret=secret)

        public, real, guess = run(None), run("the maintainer's secret"), run("a guess at the secret")
        assert public.states_in("test") == [] and real.states_in("test") and guess.states_in("test")
        for split in ("train", "dev"):
            assert public.states_in(split) == real.states_in(split) == guess.states_in(split)
            assert public.split_fingerprint(split) == real.split_fingerprint(split)
        assert {s.task for s in real.states_in("test")} == {"hidden-2"}
        # The test scene differs: another room or task in the observation.
        assert real.states_in("test")[0].observation != guess.states_in("test")[0].observation
        assert "hidden" in json.dumps(real.manifest.config["environment"]["scenes"][2])
        assert str(hidden.derive_seed("the maintainer's secret", "alfworld-small@0", "task", scenes_id(scenes, 2))) \
            not in json.dumps(real.manifest.config)

    def test_miniwob_test_instances_come_from_the_secret(self) -> None:
        """MiniWoB: the test tasks get ids that name their position, not their seed, and seeds from the
        secret; the manifest lists no secret seed; without the secret they cannot be played."""
        env, spec = build.BUILDERS["miniwob"]()
        assert spec.secret_test and spec.end_images
        public_tasks = list(env.tasks)
        names = spec.hidden_tasks(env)
        assert names and all(n.startswith(("enter-password:", "enter-text-2:")) for n in names)
        build.hide_test_tasks(env, spec, "the maintainer's secret")
        tasks = list(env.tasks)
        assert [t for t in tasks if t not in env.hidden] == [t for t in public_tasks if t not in names]
        assert all(tasks[j].endswith(f":hidden-{j}") for j, t in enumerate(public_tasks) if t in names)
        key = f"{spec.slug}@{spec.version}"
        seeds = {hidden.derive_seed("the maintainer's secret", key, "task", n) % 2**31 for n in names}
        assert len(seeds) == len(names)
        text = json.dumps(env.config())
        assert "hidden_tasks" in text and not any(str(seed) in text for seed in seeds)
        unplayable, _ = build.BUILDERS["miniwob"]()
        build.hide_test_tasks(unplayable, spec, None)
        assert json.dumps(unplayable.config()) == text  # the manifest is the same with or without the secret
        with pytest.raises(RuntimeError, match="secret"):
            unplayable.reset(tasks[1])

    @pytest.mark.slow
    def test_frozenlake_1_1_still_rebuilds(self, tmp_path: Path) -> None:
        """The superseded version keeps its published fingerprint (and the split fingerprints pinned above)."""
        env, spec = build.frozenlake_8x8_v1_1()
        ds = build.build_dataset(env, spec)
        assert ds.compute_fingerprint() == FROZENLAKE_1_1_FINGERPRINT
        assert {s: ds.split_fingerprint(s) for s in schema.SPLITS} == FROZENLAKE_1_1_SPLITS


class TestHiddenGoalImages:
    """Goal images (the end of the reference rollout) correlate with V: never out on a hidden split."""

    def test_every_point_has_a_goal_image(self, frozenlake: schema.Dataset) -> None:
        for s in frozenlake.states:
            assert s.end_image == f"{s.id}-end.png" and s.end_image in frozenlake.images
            assert all(c.end_image == f"{c.id}-end.png" and c.end_image in frozenlake.images for c in s.candidates)

    def test_goal_image_shows_where_the_rollout_ends(self, frozenlake: schema.Dataset) -> None:
        """A candidate whose Q is 0 on FrozenLake fell in a hole or ran out of steps; one with Q > 0
        reached the goal: their goal images differ, and all goal-reaching ends of one map agree."""
        state = next(s for s in frozenlake.states_in("dev")
                     if {frozenlake.q_labels[c.id] > 0 for c in s.candidates} == {True, False})
        reach = {frozenlake.images[c.end_image] for c in state.candidates if frozenlake.q_labels[c.id] > 0}
        fail = {frozenlake.images[c.end_image] for c in state.candidates if frozenlake.q_labels[c.id] == 0}
        assert len(reach) == 1 and not reach & fail

    def test_exports_withhold_test_goal_images(self, frozenlake: schema.Dataset, tmp_path: Path) -> None:
        written = export.export_dataset(frozenlake, tmp_path)
        with zipfile.ZipFile(written["test"]["images.zip"]) as zf:
            test_names = set(zf.namelist())
        with zipfile.ZipFile(written["dev"]["images.zip"]) as zf:
            dev_names = set(zf.namelist())
        assert test_names and not any(n.endswith("-end.png") for n in test_names)
        assert any(n.endswith("-end.png") for n in dev_names)
        rows = [json.loads(line) for line in (tmp_path / "data" / "test" / "candidates.jsonl").read_text().splitlines()]
        assert rows and all(r["end_image"] is None for r in rows)

    def test_container_input_withholds_test_goal_images(self, frozenlake: schema.Dataset, tmp_path: Path) -> None:
        for target in ("q", "v"):
            folder = containers.write_input(frozenlake, "test", target, tmp_path / f"test-{target}")
            points = (folder / "points.jsonl").read_text()
            assert "end_image" not in points and "-end.png" not in points
            assert not list((folder / "images").glob("*-end.png"))
            dev = containers.write_input(frozenlake, "dev", target, tmp_path / f"dev-{target}")
            assert "-end.png" in (dev / "points.jsonl").read_text() and list((dev / "images").glob("*-end.png"))

    def test_site_never_serves_test_goal_images(self, client, loaded, frozenlake: schema.Dataset) -> None:  # type: ignore[no-untyped-def]
        test_state = frozenlake.states_in("test")[0]
        dev_state = frozenlake.states_in("dev")[0]
        base = f"/datasets/{loaded.key}/images/"
        assert client.get(base + test_state.image).status_code == 200  # the input image is public
        for name in (test_state.end_image, test_state.candidates[0].end_image):
            assert client.get(base + name).status_code == 404
        assert client.get(base + dev_state.end_image).status_code == 200
        url = f"/api/v1/datasets/{loaded.key}/download/"
        body = client.get(url, {"split": "test", "format": "images"})
        assert body.status_code == 200
        names = zipfile.ZipFile(io.BytesIO(b"".join(body.streaming_content) if body.streaming else body.content)).namelist()
        assert names and not any(n.endswith("-end.png") for n in names)
        frame = client.get(url, {"split": "test", "format": "jsonl"})
        rows = [json.loads(line) for line in frame.content.decode().splitlines()]
        assert rows and all(r["end_image"] == "" and r["state_end_image"] == "" for r in rows)
        dev_rows = [json.loads(line) for line in client.get(url, {"split": "dev", "format": "jsonl"}).content.decode().splitlines()]
        assert all(r["end_image"].endswith("-end.png") and r["state_end_image"].endswith("-end.png") for r in dev_rows)

    def test_platform_path_names_hidden_goal_images(self, loaded) -> None:  # type: ignore[no-untyped-def]
        from leaderboard.loading import inputs_for

        assert all(s.end_image is None for s in inputs_for(loaded, "test").states)
        platform = inputs_for(loaded, "test", hidden_goal_images=True)
        assert all(s.end_image and all(c.end_image for c in s.candidates) for s in platform.states)

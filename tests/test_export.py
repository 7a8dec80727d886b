"""Exports for download: Parquet/JSONL per split, image zips, the dataset card, read by HF ``datasets``."""

from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

from qval import build, export, schema
from qval.envs import registry

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the network (before `datasets` is imported)
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

LABELS = {"q_label", "v_label"}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, test_split_secret: str) -> tuple[schema.Dataset, Path]:
    """A small FrozenLake build (current spec, fewer trajectories; every split present), written."""
    env, spec = registry.BUILDERS["frozenlake"]()
    ds = build.build_dataset(env, replace(spec, num_trajectories=15, version="export-test"), secret=test_split_secret)
    folder = tmp_path_factory.mktemp("small")
    ds.write(folder)
    return schema.Dataset.read(folder, test_split_secret), folder


@pytest.fixture(scope="module")
def exported(small, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ds, folder = small
    out = tmp_path_factory.mktemp("export")
    export.export_dataset(ds, out, images_from=folder / "images")
    return out


def test_layout_and_rows(small, exported: Path) -> None:
    ds, _ = small
    assert sorted(str(p.relative_to(exported)) for p in exported.rglob("*") if p.is_file()) == sorted(
        ["README.md"]
        + [f"data/{s}/{t}.{ext}" for s in ("train", "dev", "test") for t in ("candidates", "states") for ext in ("parquet", "jsonl")]
        + [f"images/{s}.zip" for s in ("train", "dev", "test")]
    )
    for split in ("train", "dev", "test"):
        states = ds.states_in(split)
        cands = pq.read_table(exported / "data" / split / "candidates.parquet").to_pylist()
        assert [r["candidate_id"] for r in cands] == [c.id for s in states for c in s.candidates]
        jsonl = [json.loads(line) for line in (exported / "data" / split / "candidates.jsonl").read_text().splitlines()]
        assert jsonl == cands
        first = cands[0]
        s0 = states[0]
        assert first["history"] == list(s0.history) and first["observation"] == s0.observation
        assert first["image"] == s0.image and first["next_image"] == s0.candidates[0].next_image
        assert sum(r["is_actor"] for r in cands) == len(states)
        state_rows = pq.read_table(exported / "data" / split / "states.parquet").to_pylist()
        assert [r["state_id"] for r in state_rows] == [s.id for s in states]
        if split == "test":
            assert not LABELS & set(first) and not LABELS & set(state_rows[0])
            assert "label" not in (exported / "data" / split / "candidates.jsonl").read_text()
        else:
            assert [r["q_label"] for r in cands] == [ds.q_labels[c.id] for s in states for c in s.candidates]
            assert [r["v_label"] for r in state_rows] == [ds.v_labels[s.id] for s in states]
        with zipfile.ZipFile(exported / "images" / f"{split}.zip") as zf:
            withheld = set() if schema.goal_images_public(split) else set(ds.end_image_names(split))
            assert sorted(zf.namelist()) == [n for n in ds.image_names(split) if n not in withheld]
            png = Image.open(io.BytesIO(zf.read(s0.image)))
            assert png.size == (512, 512) and zf.read(s0.image) == ds.images[s0.image]


def test_export_is_deterministic_and_refuses_test_labels(small, exported: Path, tmp_path: Path) -> None:
    ds, _ = small
    again = export.export_split(ds, "dev", tmp_path, include_labels=True)  # images from ds.images
    for key, path in again.items():
        name = "images/dev.zip" if key == "images.zip" else f"data/dev/{key}"
        assert path.read_bytes() == (exported / name).read_bytes(), key
    with pytest.raises(schema.SchemaError, match="hidden"):
        export.export_split(ds, "test", tmp_path, include_labels=True)
    text_only = replace(ds, states=[replace(s, image=None, end_image=None, candidates=tuple(
        replace(c, next_image=None, end_image=None) for c in s.candidates)) for s in ds.states])
    files = export.export_split(text_only, "dev", tmp_path / "text", include_labels=False)
    assert "images.zip" not in files and not (tmp_path / "text" / "images").exists()


def test_dataset_card(small, exported: Path) -> None:
    ds, _ = small
    card = (exported / "README.md").read_text()
    assert card.startswith("---\n")
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["license"] == "cc-by-4.0" and "reinforcement-learning" in front["task_categories"]
    configs = {c["config_name"]: {f["split"]: f["path"] for f in c["data_files"]} for c in front["configs"]}
    assert configs == {
        "candidates": {"train": "data/train/candidates.parquet", "dev": "data/dev/candidates.parquet"},
        "candidates_unlabelled": {"test": "data/test/candidates.parquet"},
        "states": {"train": "data/train/states.parquet", "dev": "data/dev/states.parquet"},
        "states_unlabelled": {"test": "data/test/states.parquet"},
    }
    m = ds.manifest
    for needle in (m.fingerprint, m.key, "γ = 0.95", "shortest-path (BFS)", "ε = 0.1", "@misc{qval,", "CC-BY-4.0",
                   "| test |", "hidden", "`q_label`", "`next_image`", "cycle"):
        assert needle in card, needle
    for column in export.CANDIDATE_COLUMNS:
        assert f"| `{column}` |" in card


def test_hugging_face_datasets_reads_the_export(small, exported: Path, tmp_path: Path) -> None:
    import datasets

    ds, _ = small
    cache = str(tmp_path / "hf-cache")
    files = {split: str(exported / "data" / split / "candidates.parquet") for split in ("train", "dev")}
    loaded = datasets.load_dataset("parquet", data_files=files, cache_dir=cache)
    for split in ("train", "dev"):
        assert loaded[split].num_rows == sum(len(s.candidates) for s in ds.states_in(split))
        assert set(loaded[split].column_names) == set(export.CANDIDATE_COLUMNS)
        assert loaded[split].features["history"].feature.dtype == "string"
    test = datasets.load_dataset("parquet", data_files={"test": str(exported / "data" / "test" / "candidates.parquet")},
                                 cache_dir=cache)["test"]
    assert test.num_rows == sum(len(s.candidates) for s in ds.states_in("test"))
    assert not LABELS & set(test.column_names)
    states = datasets.load_dataset("parquet", data_files={"dev": str(exported / "data" / "dev" / "states.parquet")},
                                   cache_dir=cache)["dev"]
    assert states.num_rows == len(ds.states_in("dev")) and "v_label" in states.column_names
    # The card's configs work as a Hugging Face dataset folder too.
    by_card = datasets.load_dataset(str(exported), "candidates_unlabelled", cache_dir=cache)
    assert list(by_card) == ["test"] and by_card["test"].num_rows == test.num_rows

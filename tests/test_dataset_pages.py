"""The dataset page, its images and its downloads, on a small dataset with images whose labels are
all distinct: counts, public-label histograms, examples with images, the dataset card, per-split
image zips, the card, the whole-dataset zip (Hugging Face layout), on-disk caching — and no test
label anywhere a user can reach."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from PIL import Image

from leaderboard.loading import load_dataset
from leaderboard.models import Dataset
from qval import schema
from qval.build import encode_png

SPLITS = {"train": 3, "dev": 3, "test": 3}


def make_image_dataset() -> schema.Dataset:
    """Three splits of three states, three candidates each, a PNG per state and next state,
    labels drawn at random (so a test label can be told from every public one)."""
    rng = np.random.default_rng(7)
    states, images, q, v = [], {}, {}, {}
    t = 0
    for split, n in SPLITS.items():
        for _ in range(n):
            sid = f"t{t:03d}-s01"
            cands = []
            for i in range(3):
                cid = f"{sid}-a{i}"
                cands.append(schema.Candidate(id=cid, state_id=sid, index=i, action=f"move {i} from {sid}",
                                              next_state=f"grid after {cid}", is_actor=i == 1,
                                              next_image=f"{cid}-next.png"))
                images[f"{cid}-next.png"] = encode_png(Image.new("RGB", (8, 8), (t * 20 % 256, i * 60, 99)))
                q[cid] = float(rng.uniform(0.05, 0.95))
            images[f"{sid}.png"] = encode_png(Image.new("RGB", (8, 8), (t * 20 % 256, 200, 7)))
            v[sid] = float(rng.uniform(0.05, 0.95))
            states.append(schema.State(id=sid, split=split, trajectory=t, step=1, task=f"map-{t}",
                                       observation=f"observation of {sid} in {split}", history=("start",),
                                       candidates=tuple(cands), image=f"{sid}.png"))
            t += 1
    manifest = schema.Manifest(
        slug="pictures", name="Pictures", version="0.1", environment="frozenlake",
        description="A small dataset with images.", modalities=["text", "image"],
        labelling={"reference_policy": "oracle", "discount": 0.95, "num_rollouts": 1, "aggregation": "max",
                   "horizon": 10, "horizon_counted_from": "episode start"},
        config={"made": "by hand"},
    )
    return schema.Dataset(manifest=manifest, states=states, q_labels=q, v_labels=v, images=images)


@pytest.fixture
def pictures(db, settings, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The image dataset written under QVAL_DATASETS_DIR and loaded, and its in-memory form."""
    settings.QVAL_DATASETS_DIR = tmp_path / "datasets"
    settings.QVAL_DOWNLOAD_CACHE = tmp_path / "cache"
    ds = make_image_dataset()
    ds.write(settings.QVAL_DATASETS_DIR / "pictures-0.1")
    return load_dataset(schema.Dataset.read(settings.QVAL_DATASETS_DIR / "pictures-0.1"))[0], ds


def hidden_values(ds: schema.Dataset) -> set[float]:
    test = [s for s in ds.states if s.split == "test"]
    return {ds.v_labels[s.id] for s in test} | {ds.q_labels[c.id] for s in test for c in s.candidates}


def leaked(text: str, secrets: set[float]) -> set[float]:
    """The secrets any number in ``text`` (4+ decimals) stands for."""
    numbers = [float(x) for x in re.findall(r"-?\d+\.\d{4,}(?:e-?\d+)?", text)]
    return {s for s in secrets if any(abs(s - n) < 1e-9 for n in numbers)}


def test_the_dataset_page(client, pictures) -> None:
    db_ds, ds = pictures
    page = client.get(f"/datasets/{db_ds.key}/").content.decode()
    rows = re.findall(r"<tr><td>(train|dev|test)</td>(.*?)</tr>", page.split('id="splits"')[1], flags=re.S)
    counts = {split: [int(n) for n in re.findall(r'<td class="num">(\d+)</td>', cells)] for split, cells in rows}
    assert counts == {s: [3, 9, 3, 3, 3] for s in SPLITS}  # states, candidates, Q points, ranking states, V points
    assert 'id="hist-q"' in page and 'id="hist-v"' in page and "vendor/plotly.min.js" in page
    for s in ds.states:  # an example per task (here a state each) of the public splits, with its images
        shown = s.split in schema.PUBLIC_SPLITS
        assert (f"observation of {s.id} in {s.split}" in page) is shown
        assert (f'src="/datasets/{db_ds.key}/images/{s.id}.png"' in page) is shown
        for c in s.candidates:
            assert (c.action in page and f"/images/{c.id}-next.png" in page) is shown
    assert "images (zip)" in page and "?format=zip" in page and "?format=card" in page
    assert "Dataset card" in page and "cc-by-4.0" in page.lower()
    assert not leaked(page, hidden_values(ds))


def test_images_are_served_by_name_only(client, pictures, settings) -> None:
    db_ds, ds = pictures
    test_state = next(s for s in ds.states if s.split == "test")
    for name in (test_state.image, test_state.candidates[0].next_image):  # test inputs may be served
        resp = client.get(f"/datasets/{db_ds.key}/images/{name}")
        assert resp.status_code == 200 and resp["Content-Type"] == "image/png"
        assert b"".join(resp.streaming_content) == ds.images[name]
    folder = settings.QVAL_DATASETS_DIR / "pictures-0.1"
    (folder / "images" / "stray.png").write_bytes(b"not named by the dataset")
    (folder / "secret.png").write_bytes(b"outside the images folder")
    for name in ("stray.png", "nope.png", "..%2Fsecret.png", "%2E%2E%2Fmanifest.json", ".hidden.png",
                 "manifest.json", "t000-s01.PNG.exe"):
        assert client.get(f"/datasets/{db_ds.key}/images/{name}").status_code == 404, name
    assert client.get(f"/datasets/nope@1/images/{test_state.image}").status_code == 404


def _zip_names(body: bytes) -> list[str]:
    return sorted(zipfile.ZipFile(io.BytesIO(body)).namelist())


def test_downloads_images_card_and_whole_dataset(client, pictures, settings, tmp_path) -> None:
    import datasets as hf

    db_ds, ds = pictures
    url = f"/datasets/{db_ds.key}/download/"
    secrets = hidden_values(ds)
    for split in SPLITS:
        resp = client.get(url, {"split": split, "format": "images"})
        assert resp.status_code == 200 and resp["Content-Type"] == "application/zip"
        assert _zip_names(b"".join(resp.streaming_content)) == ds.image_names(split)
    card = client.get(url, {"format": "card"})
    assert card.status_code == 200 and card["Content-Type"].startswith("text/markdown")
    assert card.content.decode().startswith("---\n") and "configs:" in card.content.decode()
    assert not leaked(card.content.decode(), secrets)

    body = b"".join(client.get(url, {"format": "zip"}).streaming_content)
    root = f"{db_ds.slug}-{db_ds.version}/"
    names = _zip_names(body)
    expected = {f"{root}README.md"} | {f"{root}images/{s}.zip" for s in SPLITS} | {
        f"{root}data/{s}/{t}.{ext}" for s in SPLITS for t in ("candidates", "states") for ext in ("parquet", "jsonl")}
    assert set(names) == expected
    out = tmp_path / "unzipped"
    zipfile.ZipFile(io.BytesIO(body)).extractall(out)
    top = out / root
    # No test label in any file: text files by their numbers, Parquet by every column.
    for path in top.rglob("*"):
        if path.suffix in {".jsonl", ".md"}:
            assert not leaked(path.read_text(encoding="utf-8"), secrets), path
        if path.suffix == ".parquet":
            frame = pq.read_table(path).to_pandas()
            values = {float(x) for col in frame.select_dtypes("number") for x in frame[col]}
            assert not values & secrets, path
            if "/test/" in path.as_posix():
                assert not {"q_label", "v_label"} & set(frame.columns)
    dev = pd.read_parquet(top / "data" / "dev" / "candidates.parquet")
    assert dict(zip(dev["candidate_id"], dev["q_label"])) == {
        c.id: ds.q_labels[c.id] for s in ds.states if s.split == "dev" for c in s.candidates}
    # What the card's configs promise: the Parquet files load with Hugging Face datasets.
    loaded = hf.load_dataset("parquet", data_files={s: str(top / "data" / s / "candidates.parquet") for s in ("train", "dev")})
    assert loaded["dev"].num_rows == 9 and "q_label" in loaded["dev"].column_names
    # Built once, then served from the cache (keyed by fingerprint).
    cache = settings.QVAL_DOWNLOAD_CACHE / db_ds.fingerprint
    archive = cache / f"{db_ds.slug}-{db_ds.version}.zip"
    mtime = archive.stat().st_mtime_ns
    assert b"".join(client.get(url, {"format": "zip"}).streaming_content) == body
    assert archive.stat().st_mtime_ns == mtime and (cache / "export" / "README.md").is_file()
    # The API offers the same; bad requests are clear.
    api = client.get(f"/api/v1/datasets/{db_ds.key}/download/", {"split": "test", "format": "images"})
    assert api.status_code == 200 and _zip_names(b"".join(api.streaming_content)) == ds.image_names("test")
    for params, needle in [({"format": "pdf"}, "unknown format"), ({"split": "nope", "format": "images"}, "no split")]:
        resp = client.get(url, params)
        assert resp.status_code == 400 and needle in resp.content.decode()
    # The split table downloads carry no test label either.
    for fmt in ("jsonl", "csv", "parquet"):
        resp = client.get(url, {"split": "test", "format": fmt})
        assert resp.status_code == 200
        if fmt == "parquet":
            frame = pd.read_parquet(io.BytesIO(resp.content))
            assert not {"q_label", "v_label"} & set(frame.columns)
        else:
            assert not leaked(resp.content.decode(), secrets)


def test_a_text_dataset_has_no_image_downloads(client, pictures) -> None:
    db_ds, ds = pictures
    text = make_image_dataset()
    text.manifest = schema.Manifest(**{**vars(text.manifest), "slug": "words", "modalities": ["text"]})
    text.states = [
        schema.State(**{**vars(s), "image": None,
                        "candidates": tuple(schema.Candidate(**{**vars(c), "next_image": None}) for c in s.candidates)})
        for s in text.states
    ]
    text.images = {}
    words = load_dataset(text)[0]
    page = client.get(f"/datasets/{words.key}/").content.decode()
    assert "images (zip)" not in page and "<img" not in page
    resp = client.get(f"/datasets/{words.key}/download/", {"split": "dev", "format": "images"})
    assert resp.status_code == 400 and "has no images" in resp.content.decode()
    assert Dataset.objects.filter(slug__in=("pictures", "words")).count() == 2
    assert json.loads(client.get("/api/v1/datasets/").content)


def test_qval_download_images_card_and_whole_dataset(transactional_db, live_server, pictures, tmp_path,
                                                     capsys, monkeypatch) -> None:
    from qval import cli

    monkeypatch.setenv("QVAL_CONFIG", str(tmp_path / "none.json"))
    db_ds, ds = pictures
    monkeypatch.chdir(tmp_path)
    for fmt, expected in [("images", "pictures-0.1-test-images.zip"), ("card", "pictures-0.1-README.md"),
                          ("zip", "pictures-0.1.zip"), ("csv", "pictures-0.1-test.csv")]:
        code = cli.main(["--server", live_server.url, "download", db_ds.key, "--split", "test", "--format", fmt])
        out = capsys.readouterr().out
        assert code == 0 and f"wrote {expected}" in out, out
    assert _zip_names((tmp_path / "pictures-0.1-test-images.zip").read_bytes()) == ds.image_names("test")
    assert (tmp_path / "pictures-0.1-README.md").read_text(encoding="utf-8").startswith("---\n")
    assert "pictures-0.1/README.md" in _zip_names((tmp_path / "pictures-0.1.zip").read_bytes())


def _task_rows(page: str, split: str) -> dict[str, tuple[int, int]]:
    """``{task: (states, candidates)}`` as the page's table of ``split``'s tasks shows them."""
    table = page.split(f'id="tasks-{split}"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr data-task="([^"]+)">.*?<td class="num">(\d+)</td><td class="num">(\d+)</td></tr>', table)
    return {task: (int(states), int(cands)) for task, states, cands in rows}


def test_frozenlake_page_counts_per_task_and_shows_public_examples_only(client, loaded, settings) -> None:  # type: ignore[no-untyped-def]
    from django.template.defaultfilters import floatformat
    from django.utils.html import escape

    from leaderboard.task_table import EXAMPLE_OBSERVATION_CHARS

    folder = settings.QVAL_DATASETS_DIR / f"{loaded.slug}-{loaded.version}"
    states = list(schema.read_jsonl(folder / "states.jsonl"))
    candidates = list(schema.read_jsonl(folder / "candidates.jsonl"))
    labels = {r["id"]: r["value"] for r in schema.read_jsonl(folder / "labels.jsonl") if r["target"] == "q"}
    split_of = {s["id"]: s["split"] for s in states}
    task_of = {s["id"]: s["task"] for s in states}
    page = client.get(f"/datasets/{loaded.key}/").content.decode()

    for split in ("train", "dev", "test"):  # counts per task, test included (its download has the same)
        expected: dict[str, list[int]] = {}
        for s in states:
            if s["split"] == split:
                expected.setdefault(s["task"], [0, 0])[0] += 1
        for c in candidates:
            if split_of[c["state_id"]] == split:
                expected[task_of[c["state_id"]]][1] += 1
        assert expected and _task_rows(page, split) == {t: tuple(n) for t, n in expected.items()}, split

    for split in ("train", "dev"):  # one example per task: its middle state, observation, candidates and Q labels
        folded = page.split(f'<details class="examples" id="examples-{split}">', 1)[1].split("</details>", 1)[0]
        shown = re.findall(r'<div class="example" id="example-([^"]+)">', folded)
        tasks = list(dict.fromkeys(s["task"] for s in states if s["split"] == split))
        assert sorted(task_of[i] for i in shown) == sorted(tasks)
        for sid in shown:
            of_task = [s for s in states if s["task"] == task_of[sid]]
            assert sid == of_task[len(of_task) // 2]["id"]
            block = folded.split(f'id="example-{sid}"', 1)[1].split('<div class="example"', 1)[0]
            observation = next(s["observation"] for s in states if s["id"] == sid)
            assert escape(observation[:EXAMPLE_OBSERVATION_CHARS]) in block
            mine = [c for c in candidates if c["state_id"] == sid]
            assert mine
            for c in mine:
                assert f"<code>{c['id']}</code>" in block and escape(c["action"]) in block
                assert f'<td class="num">{floatformat(labels[c["id"]], 3)}</td>' in block

    assert 'id="examples-test"' not in page
    for s in states:  # nothing of a test state but its counts: no observation, no example
        if s["split"] == "test":
            assert escape(s["observation"]) not in page and f'id="example-{s["id"]}"' not in page


@pytest.mark.django_db
def test_every_dataset_page_answers(client, loaded) -> None:  # type: ignore[no-untyped-def]
    """Every dataset the site lists — the hosted one and the QVal v1.0 published ones — has a page that renders
    (the published ones answered 500 once: they hold no states), and the list links each."""
    from submissions.importing import import_results

    import_results(resamples=0)
    keys = sorted({d.key for d in Dataset.objects.all()})
    assert len(keys) >= 5  # frozenlake and the four published environments
    listing = client.get("/datasets/").content.decode()
    for key in keys:
        assert f"/datasets/{key}/" in listing, key
        resp = client.get(f"/datasets/{key}/")
        assert resp.status_code == 200, (key, resp.status_code)


@pytest.mark.django_db
def test_the_dataset_list_api_counts_states_tasks_and_task_types_per_split(client, loaded, settings) -> None:  # type: ignore[no-untyped-def]
    """``/api/v1/datasets/`` gives, per split, the states, the distinct tasks and (where states name one) the states
    per task type, as the dataset's own states file counts them."""
    folder = settings.QVAL_DATASETS_DIR / f"{loaded.slug}-{loaded.version}"
    states = list(schema.read_jsonl(folder / "states.jsonl"))
    test_tasks = sorted({s["task"] for s in states if s["split"] == "test"})
    typed = loaded.states.filter(split="test", task=test_tasks[0])
    typed.update(task_type="kind-a")  # a grouped dataset (ALFWorld's task types, TerminalBench-lite's kinds)
    listed = {d["key"]: d for d in client.get("/api/v1/datasets/").json()}[loaded.key]["splits"]
    for split in ("train", "dev", "test"):
        mine = [s for s in states if s["split"] == split]
        assert listed[split]["states"] == len(mine) and listed[split]["tasks"] == len({s["task"] for s in mine})
        assert listed[split]["labels_public"] == (split != "test")
    assert listed["test"]["task_types"] == {"kind-a": typed.count()} and typed.count() > 0
    assert "task_types" not in listed["train"]

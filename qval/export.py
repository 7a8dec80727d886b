"""Export a dataset for download: Parquet + JSON Lines per split, an image zip, a dataset card.

Django-free, so the site's downloads and the command line share it.  Layout under ``out_dir``::

    README.md                         dataset card (Hugging Face YAML front matter + documentation)
    data/<split>/candidates.parquet   one row per candidate action   (+ .jsonl, the same rows)
    data/<split>/states.parquet       one row per state              (+ .jsonl)
    images/<split>.zip                the split's PNGs (only when the dataset has images)

Labels (``q_label``, ``v_label``) are written only for the splits asked for with labels — by
:func:`export_dataset` the public ones (:data:`qval.schema.PUBLIC_SPLITS`), never ``test``.  A
split without labels has no label column at all.  Every file is deterministic: the same dataset
gives the same bytes (zip entries carry a fixed date).

The Parquet files load with ``datasets.load_dataset("parquet", data_files=...)`` or through the
card's ``configs`` (one config per table and label status; see :func:`dataset_card`).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from qval import schema

DATA_LICENSE = "cc-by-4.0"
"""Licence of the exported data (Creative Commons Attribution 4.0); the code is the project's own."""

ZIP_DATE = (2020, 1, 1, 0, 0, 0)
"""Modification time written for every zip entry (fixed, so the archive is reproducible)."""

CANDIDATE_COLUMNS: dict[str, str] = {
    "candidate_id": "Id of the candidate action (`{state_id}-a{index}`); the id a Q prediction is keyed by.",
    "state_id": "Id of the state the candidate belongs to (`t{trajectory}-s{step}`).",
    "split": "The split (train, dev or test); splits hold disjoint tasks or trajectories (see the config).",
    "task": "Environment task id (FrozenLake: the map; ALFWorld: the scene; MiniWoB: `{task}:{seed}`).",
    "task_type": "The kind of task where the environment has several (ALFWorld's task type, e.g. "
                 "`pick_heat_then_place_in_recep`); else null.",
    "trajectory": "Index of the collected trajectory the state comes from.",
    "step": "Actions taken since the start of the episode (the horizon counts from there).",
    "observation": "Text observation of the state.",
    "history": "The actions (text) taken from the start of the episode up to the state.",
    "image": "File name of the state's image in images/<split>.zip (null for a text-only dataset).",
    "candidate_index": "Position of the candidate within its state (0-based).",
    "action": "The candidate action, as text.",
    "next_state": "Text observation after restoring the state and taking the candidate action.",
    "next_image": "File name of the next state's image in images/<split>.zip (null for text only).",
    "end_image": "Goal image: the final state of the reference rollout after the candidate, in images/<split>.zip "
                 "(datasets with goal images, public splits only; else null).",
    "is_actor": "True for the action the collecting actor took: the pointwise evaluation point.",
    "q_label": "Reference Q-value of the candidate (labelled splits only).",
    "v_label": "Reference V-value of the state (labelled splits only).",
}
"""Columns of ``candidates`` and what they mean (``q_label``/``v_label`` only with labels)."""

STATE_COLUMNS: dict[str, str] = {
    key: CANDIDATE_COLUMNS[key]
    for key in ("state_id", "split", "task", "task_type", "trajectory", "step", "observation", "history", "image")
} | {
    "end_image": "Goal image: the final state of the reference rollout from the state, in images/<split>.zip "
                 "(datasets with goal images, public splits only; else null).",
    "num_candidates": "Number of candidate actions of the state.",
    "actor_candidate_id": "Id of the candidate the collecting actor took.",
    "v_label": "Reference V-value of the state (labelled splits only).",
}
"""Columns of ``states`` (``v_label`` only with labels)."""

_TYPES: dict[str, pa.DataType] = {
    "candidate_id": pa.string(), "state_id": pa.string(), "split": pa.string(), "task": pa.string(),
    "task_type": pa.string(),
    "trajectory": pa.int64(), "step": pa.int64(), "observation": pa.string(), "history": pa.list_(pa.string()),
    "image": pa.string(), "candidate_index": pa.int64(), "action": pa.string(), "next_state": pa.string(),
    "next_image": pa.string(), "end_image": pa.string(), "is_actor": pa.bool_(), "q_label": pa.float64(), "v_label": pa.float64(),
    "num_candidates": pa.int64(), "actor_candidate_id": pa.string(),
}


def candidate_rows(ds: schema.Dataset, split: str, *, include_labels: bool) -> list[dict[str, Any]]:
    """One row per candidate of ``split``, in dataset order."""
    rows = []
    goal = schema.goal_images_public(split)
    for s in _states(ds, split):
        for c in s.candidates:
            row: dict[str, Any] = {
                "candidate_id": c.id, "state_id": s.id, "split": s.split, "task": s.task, "task_type": s.task_type,
                "trajectory": s.trajectory, "step": s.step, "observation": s.observation,
                "history": list(s.history), "image": s.image, "candidate_index": c.index, "action": c.action,
                "next_state": c.next_state, "next_image": c.next_image,
                "end_image": c.end_image if goal else None, "is_actor": c.is_actor,
            }
            if include_labels:
                row["q_label"] = ds.q_labels[c.id]
                row["v_label"] = ds.v_labels[s.id]
            rows.append(row)
    return rows


def state_rows(ds: schema.Dataset, split: str, *, include_labels: bool) -> list[dict[str, Any]]:
    """One row per state of ``split``, in dataset order."""
    rows = []
    for s in _states(ds, split):
        row: dict[str, Any] = {
            "state_id": s.id, "split": s.split, "task": s.task, "task_type": s.task_type, "trajectory": s.trajectory,
            "step": s.step,
            "observation": s.observation, "history": list(s.history), "image": s.image,
            "end_image": s.end_image if schema.goal_images_public(split) else None,
            "num_candidates": len(s.candidates), "actor_candidate_id": s.actor_candidate.id,
        }
        if include_labels:
            row["v_label"] = ds.v_labels[s.id]
        rows.append(row)
    return rows


def export_split(
    ds: schema.Dataset,
    split: str,
    out_dir: str | Path,
    *,
    include_labels: bool,
    images_from: str | Path | None = None,
) -> dict[str, Path]:
    """Write one split under ``out_dir``; return ``{"candidates.parquet": path, ...}``.

    Keys: ``candidates.parquet``, ``candidates.jsonl``, ``states.parquet``, ``states.jsonl`` and,
    when the split has images, ``images.zip``.  Images are read from ``images_from`` (a folder)
    or else from ``ds.images``.  ``include_labels=True`` on the test split is refused.
    """
    if include_labels and split not in schema.PUBLIC_SPLITS:
        raise schema.SchemaError(f"the labels of split {split!r} are hidden and never exported")
    out = Path(out_dir)
    folder = out / "data" / split
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for table, rows, columns in (
        ("candidates", candidate_rows(ds, split, include_labels=include_labels), CANDIDATE_COLUMNS),
        ("states", state_rows(ds, split, include_labels=include_labels), STATE_COLUMNS),
    ):
        names = [c for c in columns if include_labels or c not in ("q_label", "v_label")]
        arrow = pa.table({c: pa.array([r[c] for r in rows], type=_TYPES[c]) for c in names})
        path = folder / f"{table}.parquet"
        pq.write_table(arrow, path, compression="zstd")
        written[f"{table}.parquet"] = path
        path = folder / f"{table}.jsonl"
        _write_jsonl(path, ({c: r[c] for c in names} for r in rows))
        written[f"{table}.jsonl"] = path
    images = ds.image_names(split)
    if not schema.goal_images_public(split):
        withheld = set(ds.end_image_names(split))
        images = [name for name in images if name not in withheld]
    if images:
        source = schema.ImageFolder(images_from) if images_from is not None else ds.images
        path = out / "images" / f"{split}.zip"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf:  # PNG is compressed already
            for name in images:
                try:
                    data = source[name]
                except KeyError:
                    raise schema.SchemaError(f"image {name!r} of split {split!r} is missing") from None
                info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
                info.external_attr = 0o644 << 16
                zf.writestr(info, data)
        tmp.replace(path)
        written["images.zip"] = path
    return written


def export_dataset(
    ds: schema.Dataset,
    out_dir: str | Path,
    *,
    public_splits: Iterable[str] = schema.PUBLIC_SPLITS,
    images_from: str | Path | None = None,
) -> dict[str, dict[str, Path]]:
    """Every split of ``ds`` (labels for the public ones, never for test) and ``README.md``.

    Returns ``{split: export_split(...)}`` plus ``{"README.md": {"README.md": path}}``.
    """
    public = set(public_splits) & set(schema.PUBLIC_SPLITS)
    out = Path(out_dir)
    result: dict[str, dict[str, Path]] = {}
    for split in _splits(ds):
        result[split] = export_split(ds, split, out, include_labels=split in public, images_from=images_from)
    readme = out / "README.md"
    readme.write_text(dataset_card(ds, public), encoding="utf-8")
    result["README.md"] = {"README.md": readme}
    return result


def dataset_card(ds: schema.Dataset, public_splits: Iterable[str] = schema.PUBLIC_SPLITS) -> str:
    """The dataset's ``README.md``: Hugging Face YAML front matter and the documentation.

    ``configs``: ``candidates`` and ``states`` hold the labelled splits (the public ones);
    ``candidates_unlabelled`` and ``states_unlabelled`` the others (test), whose files have no
    label columns — so each config has one set of columns across its splits.
    """
    m = ds.manifest
    public = set(public_splits) & set(schema.PUBLIC_SPLITS)
    splits = _splits(ds)
    labelled = [s for s in splits if s in public]
    hidden = [s for s in splits if s not in public]
    has_images = bool(ds.image_names())
    counts = {
        s: (len(ds.states_in(s)), sum(len(st.candidates) for st in ds.states_in(s)),
            len(ds.image_names(s)))
        for s in splits
    }
    total_rows = sum(c[1] for c in counts.values())
    size = "n<1K" if total_rows < 1000 else "1K<n<10K" if total_rows < 10_000 else "10K<n<100K"

    yaml: list[str] = ["---", f"license: {DATA_LICENSE}", "pretty_name: " + _yaml_str(f"QVal: {m.name} ({m.key})")]
    yaml += ["task_categories:", "- reinforcement-learning", "- text-classification"]
    if has_images:
        yaml.append("- image-classification")
    yaml += ["language:", "- en", "tags:", "- q-value", "- reward-modeling", "- llm-agents", "- qval",
             f"- {m.environment}", "size_categories:", f"- {size}", "configs:"]
    for table in ("candidates", "states"):
        for name, group in ((table, labelled), (f"{table}_unlabelled", hidden)):
            if not group:
                continue
            yaml.append(f"- config_name: {name}")
            if name == "candidates":
                yaml.append("  default: true")
            yaml.append("  data_files:")
            for split in group:
                yaml += [f"  - split: {split}", f"    path: data/{split}/{table}.parquet"]
    yaml.append("---")

    labelling = m.labelling
    collection = m.config.get("collection", {})
    environment = m.config.get("environment", {})
    timings = m.build_info.get("timings_s", {})
    lines = yaml + [
        "",
        f"# QVal: {m.name} (`{m.key}`)",
        "",
        m.description,
        "",
        "QVal measures how **Q-aligned** a dense supervision signal for long-horizon LLM agents is: a method "
        "scores each state–action pair, and the scores are compared with reference Q-values (Max-Value Monte "
        "Carlo returns under a strong reference policy) by Spearman ρ, Kendall τ and the per-state ranking "
        "Spearman. Predictions are keyed by `candidate_id` (target Q; the `is_actor` rows are the pointwise "
        "points) or `state_id` (target V).",
        "",
        "## Files",
        "",
        "| path | rows |",
        "|---|---|",
    ]
    for split in splits:
        states, cands, images = counts[split]
        lines.append(f"| `data/{split}/candidates.parquet` (and `.jsonl`) | {cands} candidates |")
        lines.append(f"| `data/{split}/states.parquet` (and `.jsonl`) | {states} states |")
        if images:
            lines.append(f"| `images/{split}.zip` | {images} PNG images |")
    lines += [
        "",
        "```python",
        "from datasets import load_dataset",
        f'ds = load_dataset("parquet", data_files={{"{splits[0]}": "data/{splits[0]}/candidates.parquet"}})',
        "```",
        "",
        "## Splits",
        "",
        "| split | states | candidates | images | labels |",
        "|---|---|---|---|---|",
    ]
    for split in splits:
        states, cands, images = counts[split]
        lines.append(f"| {split} | {states} | {cands} | {images} | {'yes' if split in public else 'hidden'} |")
    lines += [
        "",
        "Labels (`q_label`, `v_label`) are included for " + (", ".join(labelled) or "no split") + ". "
        + ("The labels of " + ", ".join(hidden) + " are hidden: submit predictions to the QVal leaderboard "
           "to be scored on them. Files of a split without labels have no label columns. " if hidden else "")
        + f"Split rule: {collection.get('split_rule', 'see the config')}"
        + (f" (cycle {collection['split_cycle']})" if "split_cycle" in collection else "") + ".",
        "",
        "## Schema",
        "",
        "`candidates` — one row per candidate action:",
        "",
        "| column | meaning |",
        "|---|---|",
    ]
    lines += [f"| `{c}` | {text} |" for c, text in CANDIDATE_COLUMNS.items()]
    lines += ["", "`states` — one row per state:", "", "| column | meaning |", "|---|---|"]
    lines += [f"| `{c}` | {text} |" for c, text in STATE_COLUMNS.items()]
    if has_images:
        lines += ["", "Images: `State.image` is `{state_id}.png` and `next_image` is `{candidate_id}-next.png`, "
                  "PNG files in `images/<split>.zip`; the dataset fingerprint covers their bytes."]
    lines += [
        "",
        "## Provenance",
        "",
        f"* Environment: `{m.environment}`" + _versions(environment) + ".",
        f"* Environment config: `{json.dumps({k: v for k, v in environment.items() if k != 'maps'}, sort_keys=True)}`",
        f"* Collection: {collection.get('num_trajectories')} trajectories, actor: "
        f"{collection.get('actor')} (ε = {collection.get('epsilon')}), seed {collection.get('seed')}, "
        f"up to {collection.get('max_states_per_trajectory')} states per trajectory "
        f"({collection.get('state_sampling')}).",
        f"* Reference policy: {labelling.get('reference_policy')}; γ = {labelling.get('discount')}; "
        f"{labelling.get('num_rollouts')} rollout(s) per label, aggregated by {labelling.get('aggregation')}; "
        f"horizon {labelling.get('horizon')} steps counted from the {labelling.get('horizon_counted_from')}.",
        f"* Modalities: {', '.join(m.modalities)}.",
        "* Build timings (s): " + (", ".join(f"{k} {v}" for k, v in timings.items()) or "not recorded") + ".",
        f"* Fingerprint (SHA-256 of the settings, inputs, labels and images): `{m.fingerprint or ds.compute_fingerprint()}`",
        *(["* Split fingerprints (`Dataset.split_fingerprint`; train and dev: SHA-256 anyone can check; test: "
           "HMAC keyed by the maintainer's secret, from which the test split is drawn): "
           + ", ".join(f"{k} `{v}`" for k, v in sorted(m.split_fingerprints.items()))] if m.split_fingerprints else []),
        f"* Schema version {m.schema_version}.",
        "",
        "## License",
        "",
        "The data (records, labels and images) is released under the Creative Commons Attribution 4.0 "
        "International licence (CC-BY-4.0). The environments keep their own licences (see the environment "
        "config for the packages and versions used).",
        "",
        "## Citation",
        "",
        "```bibtex",
        "@misc{qval,",
        "  title        = {{QVal}: Measuring the {Q}-Alignment of Dense Supervision for Long-Horizon {LLM} Agents},",
        "  author       = {{QVal contributors}},",
        "  howpublished = {QVal benchmark and leaderboard},",
        "  note         = {Benchmark},",
        "}",
        "",
        f"@misc{{qval_{_bibkey(m.slug)}_{_bibkey(m.version)},",
        f"  title        = {{{{QVal}} dataset: {_bibtex_escape(m.name)} ({m.key})}},",
        "  author       = {{QVal contributors}},",
        "  howpublished = {QVal benchmark and leaderboard},",
        f"  note         = {{Version {m.version}, fingerprint {(m.fingerprint or '')[:16]}}},",
        "}",
        "```",
        "",
    ]
    return "\n".join(lines)


# -- helpers -------------------------------------------------------------------------------
def _splits(ds: schema.Dataset) -> list[str]:
    present = {s.split for s in ds.states}
    return [s for s in schema.SPLITS if s in present]


def _states(ds: schema.Dataset, split: str) -> list[schema.State]:
    if split not in schema.SPLITS:
        raise schema.SchemaError(f"unknown split {split!r}; expected one of {', '.join(schema.SPLITS)}")
    states = ds.states_in(split)
    if not states:
        raise schema.SchemaError(f"dataset {ds.manifest.key} has no split {split!r}")
    return states


def _versions(environment: dict[str, Any]) -> str:
    versions = {k: v for k, v in environment.items() if k.endswith("_version")}
    return (" (" + ", ".join(f"{k.removesuffix('_version')} {v}" for k, v in sorted(versions.items())) + ")") if versions else ""


def _yaml_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _bibkey(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text)


def _bibtex_escape(text: str) -> str:
    return text.replace("&", r"\&").replace("%", r"\%").replace("_", r"\_")


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n")
    tmp.replace(path)

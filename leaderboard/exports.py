"""Dataset downloads and leaderboard rows, shared by the pages and the API."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from qval.schema import PUBLIC_SPLITS

from .models import Candidate, Dataset, Label

DOWNLOAD_FORMATS = {
    "jsonl": "application/x-ndjson",
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
}

DOWNLOAD_COLUMNS = [
    ("candidate_id", "Candidate id: the `id` of a target-q prediction row."),
    ("state_id", "State id: the `id` of a target-v prediction row."),
    ("split", "train, dev or test."),
    ("task", "Task / map / scene the trajectory solves; splits never share a task."),
    ("trajectory", "Trajectory number."),
    ("step", "Turn of the trajectory the state was sampled at."),
    ("observation", "Text observation of the state."),
    ("history", "JSON list of the actions taken before this state."),
    ("image", "Image file of the state (image datasets), else empty."),
    ("candidate_index", "Position of the candidate within its state."),
    ("action", "Candidate action text."),
    ("next_state", "Text observation after taking the candidate action."),
    ("is_actor", "True for the action the collecting actor took (the pointwise evaluation point)."),
    ("q_label", "Reference Q of the candidate (public splits only)."),
    ("v_label", "Reference V of the state (public splits only)."),
]


def split_frame(dataset: Dataset, split: str) -> pd.DataFrame:
    """One row per candidate of ``split``; labels are added only for public splits."""
    rows = (
        Candidate.objects.filter(state__dataset=dataset, state__split=split)
        .order_by("state__position", "index")
        .values_list(
            "external_id",
            "state__external_id",
            "state__split",
            "state__task",
            "state__trajectory",
            "state__step",
            "state__observation",
            "state__history",
            "state__image",
            "index",
            "action",
            "next_state",
            "is_actor",
        )
    )
    names = [c for c, _ in DOWNLOAD_COLUMNS[:13]]
    frame = pd.DataFrame.from_records(list(rows), columns=names)
    frame["history"] = frame["history"].map(json.dumps)
    frame["image"] = frame["image"].fillna("")
    if split in PUBLIC_SPLITS:
        labels = Label.objects.filter(labelset__dataset=dataset, split=split)
        q = dict(labels.filter(target="q").values_list("item_id", "value"))
        v = dict(labels.filter(target="v").values_list("item_id", "value"))
        frame["q_label"] = frame["candidate_id"].map(q)
        frame["v_label"] = frame["state_id"].map(v)
    return frame


def render_download(frame: pd.DataFrame, fmt: str) -> bytes:
    """Serialise a split frame as JSON Lines, CSV or Parquet."""
    if fmt == "csv":
        return frame.to_csv(index=False).encode("utf-8")
    if fmt == "jsonl":
        return frame.to_json(orient="records", lines=True, force_ascii=False).encode("utf-8")
    if fmt == "parquet":
        buf = io.BytesIO()
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buf)
        return buf.getvalue()
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(DOWNLOAD_FORMATS)}")


@dataclass(frozen=True)
class BoardRow:
    """One leaderboard line: a finished submission with its headline metrics."""

    submission_id: int
    method: str
    family: str
    environment: str
    dataset: str
    split: str
    target: str
    modality: str
    backbone: str
    spearman: float | None
    spearman_p: float | None
    kendall_tau: float | None
    ranking_spearman: float | None
    num_points: int
    submitted_by: str
    date: Any

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API."""
        d = dict(vars(self))
        d["date"] = self.date.isoformat() if self.date else None
        return d


SORT_KEYS = {"spearman", "kendall_tau", "ranking_spearman", "num_points", "date", "method", "family"}
FILTER_KEYS = ("environment", "dataset", "split", "target", "modality", "family", "backbone")


def leaderboard_rows(filters: dict[str, str], sort: str = "-spearman") -> list[BoardRow]:
    """Finished submissions with their ρ, τ and ranking Spearman, filtered and sorted."""
    from submissions.models import Submission  # leaderboard must not import submissions at load time

    subs = (
        Submission.objects.filter(state=Submission.FINISHED)
        .select_related("method", "backbone", "dataset__environment", "user")
        .prefetch_related("results")
    )
    if filters.get("environment"):
        subs = subs.filter(dataset__environment__slug=filters["environment"])
    if filters.get("dataset"):
        slug, _, version = filters["dataset"].partition("@")
        subs = subs.filter(dataset__slug=slug, **({"dataset__version": version} if version else {}))
    for key in ("split", "target", "modality"):
        if filters.get(key):
            subs = subs.filter(**{key: filters[key]})
    if filters.get("family"):
        subs = subs.filter(method__family=filters["family"])
    if filters.get("backbone"):
        subs = subs.filter(backbone__name=filters["backbone"])
    rows = []
    for s in subs:
        res = {r.metric: r for r in s.results.all()}
        rho = res.get("spearman")
        rows.append(
            BoardRow(
                submission_id=s.pk,
                method=s.method.name,
                family=s.method.get_family_display(),
                environment=s.dataset.environment.name,
                dataset=s.dataset.key,
                split=s.split,
                target=s.target,
                modality=s.modality,
                backbone=s.backbone.name if s.backbone else "",
                spearman=rho.value if rho else None,
                spearman_p=rho.p_value if rho else None,
                kendall_tau=res["kendall_tau"].value if "kendall_tau" in res else None,
                ranking_spearman=res["ranking_spearman"].value if "ranking_spearman" in res else None,
                num_points=rho.num_points if rho else 0,
                submitted_by=s.user.username,
                date=s.finished_at,
            )
        )
    key = sort.lstrip("-")
    if key not in SORT_KEYS:
        key, sort = "spearman", "-spearman"
    descending = sort.startswith("-")
    present = [r for r in rows if getattr(r, key) is not None]
    missing = [r for r in rows if getattr(r, key) is None]
    present.sort(key=lambda r: getattr(r, key), reverse=descending)
    return present + missing

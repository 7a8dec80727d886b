"""The published results of QVal v1.0, converted into data files of the project.

Two kinds, both on the authors' datasets (which we do not host):

* **reported** (``data/qval-v1.0/reported.json``): the paper's numbers as the project
  website lists them -- per environment, backbone, method, target and modality the global
  Spearman ρ (metric ``spearman``) or the state-local ranking Spearman (``ranking_spearman``)
  with its std where given;
* **re-scored** (``data/qval-v1.0/rescored-<env>.json``): the per-point ground truth and
  predictions stored in the four reference summary files, which :func:`score_evaluation`
  scores with our own scorer under the reference rules (``qval-v1.0``).  The same files are
  the labels of a published environment (:func:`truth`) and each evaluation's predictions
  as a predictions file (:func:`predictions_jsonl`), so two re-scored evaluations are
  compared as two of our submissions are.

:func:`convert_reported` and :func:`convert_summary` made the data files once from the
originals (``../shared/reference/qval-v1.0``); the tests check the files still equal them.
Every file carries its ``provenance`` (repository, commit, file).  Nothing here knows about
Django.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from qval import families, metric_registry, metrics, scoring
from qval.paper.base import PublishedDataError

DATA_DIR: Path = Path(__file__).resolve().parents[2] / "data" / "qval-v1.0"
REPORTED_FILE: Path = DATA_DIR / "reported.json"

REFERENCE_REPOSITORY = "bethgelab/qval"
REFERENCE_COMMIT = "3519062a883eaea1004e6a1f473da608fe5268ed"
SITE_REPOSITORY = "serhez/qval-site"
SITE_COMMIT = "24a00cf0031950c8e8488394976ce6564b0c6e29"
SITE_FILE = "shared/data.json"
SUMMARY_PREFIX = "catalogs/qval_benchmark/data/evaluations"

ENVIRONMENTS: dict[str, str] = {
    "FrozenLake": "frozenlake",
    "ALFWorld": "alfworld",
    "OpenApps": "openapps",
    "TerminalBench": "terminalbench",
}
"""The paper's environments and our environment slugs."""

METRIC_TYPES: dict[str, str] = {role: metric_registry.headline(role) for role in metric_registry.HEADLINE_ROLES}
"""The site's ``metric_type`` and our metric name (the metric holding that headline role)."""

PAPER: dict[str, str] = {
    "title": "QVal: Cheaply Evaluating Dense Supervision Signals for Long-Horizon LLM Agents",
    "arxiv": "2606.32034v1",
    "date": "2026-06-30",
    "date_source": "arXiv submission date of version 1 (2606.32034v1); the paper text itself carries no date",
}
"""The paper the reported numbers are from, written into ``reported.json`` by :func:`convert_reported`
(the website's data names no paper date)."""

SUMMARY_ENTRIES: dict[str, str] = {
    "direct": "direct-single",
    "direct-verif16": "direct-16",
    "direct-batch4-packed": "direct-batched",
    "direct-batch8-seq": "direct-sequential",
    "gvl": "gvl",
    "eureka": "eureka",
    "verifier": "verifier",
    "codegen-mean": "codegen-avg",
    "codegen": "codegen",
    "llm_codegen": "codegen",
    "ranking": "ranking",
    "sdpo": "sdpo",
    "sdpo-gt": "sdpo-gt",
    "delta-belief": "Δbelief",
}
"""A summary file's predictor name (without ``_qv``/``_sv`` and ``_optimal``) and the
paper's method name (our reading of the two naming schemes)."""

SUMMARY_BACKBONES: dict[str, str] = {"q35-122": "Qwen3.5 122B-A10B", "g4-31": "Gemma4 31B", "q35-27": "Qwen3.5 27B"}
"""The backbone tag in a summary's experiment directory and the paper's backbone name."""

SUMMARY_ENVIRONMENTS: dict[str, str] = {
    "frozen_lake": "FrozenLake", "alfworld": "ALFWorld", "open_apps": "OpenApps", "terminal_bench": "TerminalBench",
}
GROUND_TRUTH: dict[str, str] = {"qv_mc_max": "q", "sv_mc_max": "v"}
"""Ground-truth estimators imported (Max-Value Monte Carlo, as on our leaderboard) and their target."""
RANKING_GROUND_TRUTH = "ranking_gt_qv_mc_max"


# -- conversion (run once; kept so the tests can check the data files) -----------------


def convert_reported(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The project's reported-results data of the website's ``data.json`` (parsed)."""
    records = []
    for i, r in enumerate(raw["records"]):
        if r["environment"] not in ENVIRONMENTS or r["metric_type"] not in METRIC_TYPES:
            raise PublishedDataError(f"record {i}: unknown environment or metric_type in {r}")
        records.append([
            r["environment"], r["model"], r["method"], families.get(r["family"]).slug, r["signal"], r["modality"],
            METRIC_TYPES[r["metric_type"]], r["spearman"], r["spearman_std"],
        ])
    return {
        "provenance": {"repository": SITE_REPOSITORY, "commit": SITE_COMMIT, "file": SITE_FILE},
        "columns": ["environment", "backbone", "method", "family", "target", "modality", "metric", "value", "std"],
        "paper": dict(PAPER),
        "environments": raw["meta"]["env_stats"],
        "records": records,
    }


def _method_of(entry: str) -> tuple[str, str]:
    """``(paper method name, target)`` of a summary predictor name such as ``direct-batch4-packed_qv``."""
    base = entry.removesuffix("_optimal")
    stem, _, kind = base.rpartition("_")
    if kind not in ("qv", "sv") or stem not in SUMMARY_ENTRIES:
        raise PublishedDataError(f"unknown predictor {entry!r}")
    return SUMMARY_ENTRIES[stem], "q" if kind == "qv" else "v"


def convert_summary(raw: Mapping[str, Any], relative: str) -> dict[str, Any]:
    """The project's re-scoring data of one reference summary file (parsed) found at
    ``relative`` (``<env>/<experiment_dir>/<file>``) under the upstream evaluations folder."""
    env_dir, experiment, _ = relative.split("/")
    backbone = next(name for tag, name in SUMMARY_BACKBONES.items() if f"_{tag}-" in experiment)
    labels: dict[str, list[float | None]] = {}
    evaluations: dict[tuple[str, str], dict[str, Any]] = {}
    for gt, target in GROUND_TRUTH.items():
        if gt not in raw["estimations"]:
            continue
        estimation = raw["estimations"][gt]
        labels[target] = estimation["ground_truth_values"]
        for entry, body in estimation["methods"].items():
            method, _ = _method_of(entry)
            ev = evaluations.setdefault((method, target), {"method": method, "target": target, "entries": []})
            ev["entries"].append(f"estimations.{gt}.methods.{entry}")
            if "per_sample" in body:
                ev["samples"] = [s["predicted_values"] for s in body["per_sample"]]
            else:
                ev["values"] = body["predicted_values"]
    for entry, body in raw["estimations"].get(RANKING_GROUND_TRUTH, {}).get("methods", {}).items():
        method, target = _method_of(entry)
        ev = evaluations.setdefault((method, target), {"method": method, "target": target, "entries": []})
        ev["entries"].append(f"estimations.{RANKING_GROUND_TRUTH}.methods.{entry}")
        ev["per_state"] = body["per_point_correlations"]
    return {
        "provenance": {"repository": REFERENCE_REPOSITORY, "commit": REFERENCE_COMMIT,
                       "file": f"{SUMMARY_PREFIX}/{relative}"},
        "environment": SUMMARY_ENVIRONMENTS[env_dir],
        "backbone": backbone,
        "modality": "text",
        "min_points": int(raw["experiment_info"].get("min_usable_correlation_points", metrics.MIN_USABLE_POINTS)),
        "labels": labels,
        "evaluations": list(evaluations.values()),
    }


# -- reading the data files --------------------------------------------------------------


@dataclass(frozen=True)
class ReportedResult:
    """One number the authors report (one record of ``reported.json``)."""

    environment: str
    backbone: str
    method: str
    family: str
    target: str
    modality: str
    metric: str
    value: float
    std: float | None
    index: int


def digest(path: Path) -> str:
    """SHA-256 of a data file (what an import records, to skip unchanged data)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise PublishedDataError(f"{path}: cannot read ({exc})") from exc


def reported(path: Path = REPORTED_FILE) -> tuple[dict[str, Any], list[ReportedResult]]:
    """The provenance and records of the reported-results file, each checked: a bad record
    raises :class:`PublishedDataError` naming its index, field and what was expected."""
    data = _read(path)
    rows = []
    for i, record in enumerate(data["records"]):
        fields = dict(zip(data["columns"], record))
        where = f"{path.name}: record {i}"
        checks = {
            "environment": fields["environment"] in ENVIRONMENTS,
            "target": fields["target"] in ("q", "v"),
            "modality": fields["modality"] in ("text", "image"),
            "metric": fields["metric"] in METRIC_TYPES.values(),
            "value": isinstance(fields["value"], (int, float)) and math.isfinite(fields["value"]),
            "std": fields["std"] is None or isinstance(fields["std"], (int, float)),
        }
        for name, ok in checks.items():
            if not ok:
                raise PublishedDataError(f"{where}: field {name} = {fields[name]!r} is not allowed")
        try:
            families.get(fields["family"])
        except KeyError as exc:
            raise PublishedDataError(f"{where}: field family: {exc.args[0]}") from None
        rows.append(ReportedResult(index=i, **fields))
    return data["provenance"], rows


ENVIRONMENTS_FILE: Path = DATA_DIR / "environments.json"


@dataclass(frozen=True)
class PaperEnvironment:
    """One column of the paper's environment summary (Appendix A, Table 2), with the point
    and trajectory counts the website's data gives for the same environment."""

    name: str
    source: str
    modalities: tuple[str, ...]
    distinct_tasks: str
    trajectories: int
    eval_points: int
    ranking_points: int
    max_ranking_k: str
    horizon_steps: int
    collection_actor: str
    reference_policy: str
    labelling_backbone: str
    v_labels: bool
    website_points: int | None
    website_trajectories: int | None


def paper_environments() -> tuple[dict[str, Any], dict[str, PaperEnvironment]]:
    """The provenance and, by environment name, the paper's summary of each environment
    (``data/qval-v1.0/environments.json``), joined with the website's counts
    (``reported.json``); a missing environment or field raises :class:`PublishedDataError`."""
    data = _read(ENVIRONMENTS_FILE)
    website = _read(REPORTED_FILE)["environments"]
    out: dict[str, PaperEnvironment] = {}
    for name in ENVIRONMENTS:
        row = data["environments"].get(name)
        if row is None:
            raise PublishedDataError(f"{ENVIRONMENTS_FILE.name}: no environment {name!r}")
        try:
            out[name] = PaperEnvironment(
                name=name, modalities=tuple(row.pop("modalities")), **row,
                website_points=website.get(name, {}).get("num_points"),
                website_trajectories=website.get(name, {}).get("num_trajectories"),
            )
        except TypeError as exc:
            raise PublishedDataError(f"{ENVIRONMENTS_FILE.name}: environment {name!r}: {exc}") from None
    return data["provenance"], out


@dataclass(frozen=True)
class Paper:
    """The paper the reported numbers come from (``paper`` of ``reported.json``)."""

    title: str
    arxiv: str
    date: datetime.date
    date_source: str


def paper(path: Path = REPORTED_FILE) -> Paper:
    """The :class:`Paper` of the reported-results file; :class:`PublishedDataError` when it has none or its
    date is not an ISO date."""
    data = _read(path).get("paper")
    try:
        return Paper(title=data["title"], arxiv=data["arxiv"], date=datetime.date.fromisoformat(data["date"]),
                     date_source=data["date_source"])
    except (TypeError, KeyError, ValueError) as exc:
        raise PublishedDataError(f"{path.name}: no usable paper entry ({exc!r})") from None


def reported_points(environment: str, metric: str) -> tuple[int, str]:
    """How many points a reported number of ``environment`` (the paper's name) was computed over, and
    where that count comes from: for the global ρ the website's per-environment ``num_points``
    (``meta.env_stats``), for the state-local ranking ρ the paper's ranking points (states with ranked
    candidates, Table 2).  The authors report one count per environment, not one per number."""
    env = paper_environments()[1][environment]
    if metric == METRIC_TYPES["state-local"]:
        return env.ranking_points, "paper, Appendix A Table 2: ranking_points"
    if env.website_points is None:
        raise PublishedDataError(f"{REPORTED_FILE.name}: no point count for environment {environment!r}")
    return env.website_points, "website data meta.env_stats: num_points"


def rescored_files() -> list[Path]:
    """The re-scoring data files, in name order."""
    return sorted(DATA_DIR.glob("rescored-*.json"))


@dataclass(frozen=True)
class RescoredEvaluation:
    """One method's stored predictions for one target of one summary file, ready to score."""

    environment: str
    backbone: str
    modality: str
    method: str
    target: str
    provenance: dict[str, Any]
    min_points: int
    labels: tuple[float, ...]
    values: tuple[float | None, ...] | None
    samples: tuple[tuple[float | None, ...], ...] | None
    per_state: tuple[float | None, ...] | None

    @property
    def key(self) -> str:
        """Stable identity (file, method, target), for idempotent imports."""
        return f"rescored:{self.provenance['file']}:{self.method}:{self.target}"


def rescored(path: Path) -> list[RescoredEvaluation]:
    """The evaluations of one re-scoring data file."""
    data = _read(path)
    out = []
    for ev in data["evaluations"]:
        provenance = dict(data["provenance"], entries=ev["entries"])
        samples = tuple(tuple(s) for s in ev["samples"]) if "samples" in ev else None
        out.append(RescoredEvaluation(
            environment=data["environment"], backbone=data["backbone"], modality=data["modality"],
            method=ev["method"], target=ev["target"], provenance=provenance, min_points=data["min_points"],
            labels=tuple(data["labels"].get(ev["target"], ())),
            values=tuple(ev["values"]) if "values" in ev else None, samples=samples,
            per_state=tuple(ev["per_state"]) if "per_state" in ev else None,
        ))
    return out


def _nan(values: tuple[float | None, ...] | list[float | None]) -> np.ndarray:
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


def point_ids(n: int) -> list[str]:
    """The ids of the first ``n`` points of a re-scoring data file: ``p0, p1, …`` in its order."""
    return [f"p{i}" for i in range(n)]


def _truth(labels: tuple[float | None, ...] | list[float | None]) -> scoring.Truth:
    return scoring.Truth(point_ids=point_ids(len(labels)), point_labels=_nan(labels))


def truth(environment: str, target: str) -> scoring.Truth:
    """The labels of a published environment (our slug, e.g. ``frozenlake``) for ``target``:
    the :class:`qval.scoring.Truth` its re-scored evaluations are scored against, read from
    ``rescored-<environment>.json``.  Points only: the summaries store no state grouping
    (their ranking values are per-state correlations).  Raises :class:`PublishedDataError`
    when there is no such file or it has no labels for ``target``."""
    path = DATA_DIR / f"rescored-{environment}.json"
    data = _read(path)
    if ENVIRONMENTS.get(data["environment"]) != environment:
        raise PublishedDataError(f"{path.name}: holds environment {data['environment']!r}, not {environment!r}")
    if target not in data["labels"]:
        raise PublishedDataError(f"{path.name}: no labels for target {target!r}")
    return _truth(data["labels"][target])


def _point_predictions(ev: RescoredEvaluation) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """``(ids, scores, samples)`` of an evaluation's per-point predictions (``samples`` only
    for a sampled predictor); ``None`` when it has only per-state ranking values."""
    if ev.samples is not None:
        ids = np.array([pid for s in ev.samples for pid in point_ids(len(s))], dtype=object)
        scores = np.concatenate([_nan(s) for s in ev.samples])
        samples = np.concatenate([np.full(len(s), k) for k, s in enumerate(ev.samples)])
        return ids, scores, samples
    if ev.values is not None:
        return np.array(point_ids(len(ev.values)), dtype=object), _nan(ev.values), None
    return None


def predictions_jsonl(ev: RescoredEvaluation) -> bytes | None:
    """An evaluation's per-point predictions as a JSON Lines predictions file
    (:mod:`qval.predictions`): ``id``, ``score`` (``null`` where the predictor gave none)
    and, for a sampled predictor, ``sample``; ``None`` when it has only per-state ranking
    values.  Parsed against :func:`truth`, it gives exactly the scores
    :func:`score_evaluation` scores."""
    found = _point_predictions(ev)
    if found is None:
        return None
    ids, scores, samples = found
    lines = []
    for i, (pid, score) in enumerate(zip(ids, scores)):
        record: dict[str, Any] = {"id": pid, "score": None if math.isnan(score) else float(score)}
        if samples is not None:
            record["sample"] = int(samples[i])
        lines.append(json.dumps(record, allow_nan=False))
    return ("\n".join(lines) + "\n").encode("utf-8")


def score_evaluation(ev: RescoredEvaluation, *, bootstrap_resamples: int = 1000, seed: int = 0) -> list[scoring.MetricRow]:
    """Score one re-scored evaluation with our scorer under the reference rules.

    Points are ``p0, p1, …`` in the file's order; a predictor with ``n`` values is scored on
    the first ``n`` labels (the reference's prefix alignment), so the rest count as not
    provided.  Sampled predictors (the paper's ``codegen``) are scored as a file with a ``sample`` column, and
    each metric's value is the mean of the per-sample values (:func:`qval.scoring.mean_of_samples`, the paper's
    ``codegen`` rule); the correlation of their mean prediction is the paper's ``codegen-avg``, whose own row
    comes from the authors' stored mean predictions (so ties fall as in the reference).  The
    ranking row is :func:`qval.metrics.ranking_summary` of the stored per-state values
    (the files hold no per-candidate scores) with a state bootstrap.
    """
    rules = metrics.REFERENCE_RULES
    rows: list[scoring.MetricRow] = []
    found = _point_predictions(ev)
    if found is not None:
        ids, scores, samples = found
        scored = scoring.score(_truth(ev.labels), ids, scores, samples=samples,
                               bootstrap_resamples=bootstrap_resamples, seed=seed, rules=rules)
        rows.extend(scoring.mean_of_samples(scored) if samples is not None else scored)
    if ev.per_state is not None:
        summary = metrics.ranking_summary(list(ev.per_state), rules)
        details: dict[str, Any] = {"std": summary.std, "num_valid": summary.num_valid,
                                   "num_skipped": summary.num_skipped}
        if summary.mean is not None and bootstrap_resamples:
            ci = metrics.bootstrap_ranking_ci(summary.per_state, resamples=bootstrap_resamples, seed=seed)
            details["ci95"] = [ci.low, ci.high]
        rows.append(scoring.MetricRow(
            metric="ranking_spearman", value=summary.mean, p_value=None, num_points=summary.num_valid,
            num_dropped=0, coverage=1.0, insufficient=summary.mean is None, details=details,
        ))
    return rows

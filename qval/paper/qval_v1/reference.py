"""Re-scoring of QVal v1.0 reference summary files, and the reference upload format.

A reference *summary file* (``catalogs/qval_benchmark/data/evaluations/.../summary_*.json``
upstream) stores, per ground-truth estimator, the ground-truth values, every predictor's
predicted values and the correlations computed from them.  :func:`rescore_summary`
recomputes every stored number with :mod:`qval.metrics` and reports where ours differ, so
the reference files serve as an external check of our scoring engine:

* point granularity, single predictor: ``correlations.<metric>`` (correlation, p-value,
  num_points) from ``predicted_values`` and the first ``len(predicted_values)``
  ``ground_truth_values`` (prefix alignment), with ``min_points`` taken from
  ``experiment_info.min_usable_correlation_points``;
* point granularity, sampled predictor (``per_sample``): every sample as above, and each
  ``aggregate_correlations.<metric>`` block by :func:`qval.metrics.aggregate` over our
  recomputed per-sample correlations;
* ranking granularity: ``correlations.ranking_spearman`` by
  :func:`qval.metrics.ranking_summary` over the stored ``per_point_correlations`` (the files
  hold no per-candidate values, so the per-state values themselves cannot be recomputed).

The reference *upload format* for one method's predictions is
``{"method_name": str, "values": [float | null, ...]}``; :func:`parse_reference_values`
reads it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qval import metrics

ABS_TOLERANCE: float = 1e-9
"""Default absolute tolerance of a recomputed float (p-values may instead meet
:data:`REL_TOLERANCE`)."""

REL_TOLERANCE: float = 1e-9
"""Default relative tolerance a recomputed p-value may meet instead of the absolute one."""


@dataclass(frozen=True)
class Mismatch:
    """One stored number our recomputation does not reproduce.

    ``path`` locates it in the summary, e.g.
    ``estimations.qv_mc_max.methods.codegen_qv.per_sample[3].correlations.spearman.p_value``.
    """

    path: str
    stored: Any
    recomputed: Any


@dataclass
class Rescore:
    """Outcome of :func:`rescore_summary`.

    ``num_correlations`` counts recomputed ``{correlation, p_value, num_points}`` entries (one
    per predictor or sample and correlation method), ``num_aggregates`` the
    ``aggregate_correlations`` blocks and ``num_rankings`` the ``ranking_spearman`` blocks.
    """

    mismatches: list[Mismatch] = field(default_factory=list)
    num_correlations: int = 0
    num_aggregates: int = 0
    num_rankings: int = 0

    @property
    def ok(self) -> bool:
        """Whether every stored number was reproduced."""
        return not self.mismatches


class _Checker:
    """Compares stored numbers with recomputed ones, collecting mismatches."""

    def __init__(self, result: Rescore, atol: float, rtol: float) -> None:
        self.result = result
        self.atol = atol
        self.rtol = rtol

    def _differ(self, path: str, stored: Any, recomputed: Any) -> None:
        self.result.mismatches.append(Mismatch(path, stored, recomputed))

    def exact(self, path: str, stored: Any, recomputed: int) -> None:
        """An integer count must match exactly."""
        if stored != recomputed:
            self._differ(path, stored, recomputed)

    def close(self, path: str, stored: Any, recomputed: float | None, *, relative: bool = False) -> None:
        """A float (or ``null``) within the absolute tolerance, or, with ``relative``, the
        relative one."""
        if stored is None or recomputed is None:
            if stored is not recomputed:
                self._differ(path, stored, recomputed)
            return
        diff = abs(float(stored) - recomputed)
        if diff <= self.atol or (relative and diff <= self.rtol * abs(float(stored))):
            return
        self._differ(path, stored, recomputed)


def _check_correlations(
    check: _Checker, path: str, entry: Mapping[str, Any], truth: Sequence[Any], min_points: int
) -> dict[str, float | None]:
    """Recompute a single predictor's ``correlations``; returns our values by metric."""
    predicted = entry["predicted_values"]
    if len(predicted) > len(truth):
        raise ValueError(f"{path}: {len(predicted)} predictions but only {len(truth)} ground-truth values")
    stored = entry["correlations"]
    ours = metrics.point_metrics(
        truth[: len(predicted)], predicted, metrics=list(stored), min_points=min_points, rules=metrics.REFERENCE_RULES
    )
    for metric, corr in ours.items():
        where = f"{path}.correlations.{metric}"
        check.close(f"{where}.correlation", stored[metric]["correlation"], corr.value)
        check.close(f"{where}.p_value", stored[metric]["p_value"], corr.p_value, relative=True)
        check.exact(f"{where}.num_points", stored[metric]["num_points"], corr.num_points)
        check.result.num_correlations += 1
    return {metric: corr.value for metric, corr in ours.items()}


def _check_aggregate(check: _Checker, path: str, stored: Mapping[str, Any], values: list[float | None]) -> None:
    ours = metrics.aggregate(values, metrics.REFERENCE_RULES)
    for name in ("mean", "std", "min", "max", "median"):
        check.close(f"{path}.{name}", stored[name], getattr(ours, name))
    check.exact(f"{path}.num_samples", stored["num_samples"], ours.num_samples)
    check.exact(f"{path}.num_nan", stored["num_nan"], ours.num_nan)
    check.result.num_aggregates += 1


def _check_ranking(check: _Checker, path: str, entry: Mapping[str, Any]) -> None:
    ours = metrics.ranking_summary(entry["per_point_correlations"], metrics.REFERENCE_RULES)
    stored = entry["correlations"]["ranking_spearman"]
    where = f"{path}.correlations.ranking_spearman"
    check.close(f"{where}.mean", stored["mean"], ours.mean)
    check.close(f"{where}.std", stored["std"], ours.std)
    for name in ("num_valid", "num_skipped", "num_points"):
        check.exact(f"{where}.{name}", stored[name], getattr(ours, name))
    check.result.num_rankings += 1


def rescore_summary(
    summary: Mapping[str, Any], *, atol: float = ABS_TOLERANCE, rtol: float = REL_TOLERANCE
) -> Rescore:
    """Recompute every stored correlation, aggregate and ranking summary of a summary file,
    under the reference rules (``qval-v1.0``, :data:`qval.metrics.RULES`).

    ``summary`` is the parsed JSON.  Floats must agree within ``atol`` (p-values: within
    ``atol`` or within ``rtol`` relative), counts exactly, and ``null`` only with ``None``.
    Raises ``ValueError`` for a structure it does not know (an unknown granularity or
    correlation method, more predictions than ground-truth values).
    """
    result = Rescore()
    check = _Checker(result, atol, rtol)
    min_points = int(summary["experiment_info"].get("min_usable_correlation_points", metrics.MIN_USABLE_POINTS))
    for gt, estimation in summary["estimations"].items():
        granularity = estimation["granularity"]
        if granularity not in ("point", "ranking"):
            raise ValueError(f"estimations.{gt}: unknown granularity {granularity!r}")
        for method, entry in estimation["methods"].items():
            path = f"estimations.{gt}.methods.{method}"
            if granularity == "ranking":
                _check_ranking(check, path, entry)
            elif "per_sample" in entry:
                truth = estimation["ground_truth_values"]
                samples = [
                    _check_correlations(check, f"{path}.per_sample[{i}]", sample, truth, min_points)
                    for i, sample in enumerate(entry["per_sample"])
                ]
                for metric, block in entry["aggregate_correlations"].items():
                    values = [sample[metric] for sample in samples]
                    _check_aggregate(check, f"{path}.aggregate_correlations.{metric}", block, values)
            else:
                _check_correlations(check, path, entry, estimation["ground_truth_values"], min_points)
    return result


def parse_reference_values(obj: Any) -> tuple[str, np.ndarray]:
    """``(method_name, values)`` of one method's predictions in the reference upload format.

    ``obj`` is the parsed JSON ``{"method_name": str, "values": [float | null, ...]}``; other
    keys are ignored.  ``null`` (and a float NaN) becomes NaN.  Raises ``ValueError`` naming
    the problem: not an object, a missing or empty ``method_name``, ``values`` not a
    non-empty list, or the index of an entry that is not a finite number or null (booleans
    and numeric strings are not numbers).
    """
    if not isinstance(obj, Mapping):
        raise ValueError(f"expected a JSON object with 'method_name' and 'values', got {type(obj).__name__}")
    missing = [key for key in ("method_name", "values") if key not in obj]
    if missing:
        raise ValueError(f"missing key(s): {', '.join(missing)}")
    name = obj["method_name"]
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"'method_name' must be a non-empty string, got {name!r}")
    values = obj["values"]
    if not isinstance(values, list):
        raise ValueError(f"'values' must be a list, got {type(values).__name__}")
    if not values:
        raise ValueError("'values' is empty")
    out = np.empty(len(values), dtype=np.float64)
    for i, value in enumerate(values):
        if value is None:
            out[i] = math.nan
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"values[{i}] is not a number or null: {value!r}")
        else:
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
            if math.isinf(number):
                raise ValueError(f"values[{i}] is not finite: {value!r}")
            out[i] = number
    return name, out

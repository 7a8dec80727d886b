"""A toy point metric, the mean score gap, registered the way a new metric is added: one
:class:`qval.metric_registry.MetricSpec` and its functions.

Importing this module registers it, so ``QVAL_METRIC_MODULES=tests.toy_metric`` makes the CLI (or
a site or worker started with it) score and show it; :func:`ensure_registered` registers it again
in a process that imported it before and unregistered it (``tests/test_metric_registry.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qval import metric_registry
from qval.metrics import FloatArray, Resamples

NAME = "mean_gap"


def mean_gap(x: FloatArray, y: FloatArray) -> tuple[float, None]:
    """Mean of score minus label over the pairs (no p-value)."""
    return float(np.mean(y - x)), None


def mean_gap_resampler(x: FloatArray, y: FloatArray) -> Callable[[Resamples], FloatArray]:
    """The mean gap of each resample: the gaps weighted by how often each point is drawn (a resample of
    trajectories draws some points several times and varies in size)."""
    gap = y - x
    return lambda draws: gap @ draws.counts().astype(np.float64) / draws.totals


SPEC = metric_registry.MetricSpec(
    NAME, "Mean score gap", "gap", False, 3, "point",
    "Mean of score minus label over all evaluation points.", "trajectories resampled, t interval",
    function=f"{__name__}:mean_gap", resampler=f"{__name__}:mean_gap_resampler", board=True, board_ci=True,
    interval_scale="identity",
)


def ensure_registered() -> None:
    """Register :data:`SPEC` unless it is registered."""
    if NAME not in metric_registry.POINT:
        metric_registry.register(SPEC)


ensure_registered()

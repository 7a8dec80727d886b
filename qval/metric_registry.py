"""The one list of reported metrics: name, label, direction, precision, how each is computed
and how its confidence interval is bootstrapped.

Scoring (:mod:`qval.scoring`), the leaderboard, the aggregates, the plots and the CLI read
this registry, so a new metric is added here once.  Nothing here knows about Django.
"""

from __future__ import annotations

from dataclasses import dataclass

QVAL_RULES: str = "qval"
"""Our scoring rules (the default)."""
REFERENCE_RULES: str = "qval-v1.0"
"""The rules of the QVal v1.0 reference code (the differences are listed on *How we score*)."""
RULES: tuple[str, ...] = (QVAL_RULES, REFERENCE_RULES)
"""Every rule set a score can be computed under (light to import: the CLI reads it at start-up)."""


@dataclass(frozen=True)
class MetricSpec:
    """How one metric is named, shown and computed.

    ``higher_is_better``: the direction; ``precision``: decimals shown; ``kind``:
    ``point`` (over the evaluation points), ``ranking`` (per state, then averaged) or
    ``selection`` (choices among a state's candidates); ``computed``/``bootstrap``: one
    sentence each for the *How we score* page; ``comparable``: whether the aggregates,
    plots and critical difference may summarise it (a correlation in [-1, 1]).
    """

    name: str
    label: str
    short: str
    higher_is_better: bool
    precision: int
    kind: str
    computed: str
    bootstrap: str
    comparable: bool = False

    def format(self, value: float | None) -> str:
        """``value`` with :attr:`precision` decimals, ``"—"`` for ``None``."""
        return "—" if value is None else f"{value:.{self.precision}f}"


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("spearman", "Spearman ρ (global)", "global ρ", True, 3, "point",
               "Spearman rank correlation of the scores with the labels over all evaluation points "
               "(scipy.stats.spearmanr), two-sided p-value.",
               "points resampled with replacement, percentile interval", comparable=True),
    MetricSpec("kendall_tau", "Kendall τ-b", "τ", True, 3, "point",
               "Kendall τ-b over all evaluation points (scipy.stats.kendalltau), two-sided p-value.",
               "points resampled with replacement, percentile interval", comparable=True),
    MetricSpec("pearson", "Pearson r", "r", True, 3, "point",
               "Pearson correlation over all evaluation points (scipy.stats.pearsonr).",
               "points resampled with replacement, percentile interval"),
    MetricSpec("sign_agreement", "Sign agreement", "sign", True, 3, "point",
               "Fraction of points whose score has the label's sign; binomial test against 0.5.",
               "points resampled with replacement, percentile interval"),
    MetricSpec("ranking_spearman", "Spearman ρ (state-local)", "state-local ρ", True, 3, "ranking",
               "Spearman between the candidates' Q labels and scores within each state, "
               "mean and sample std over the valid states.",
               "states resampled with replacement, percentile interval", comparable=True),
    MetricSpec("top1_accuracy", "Top-1 accuracy", "top-1", True, 3, "selection",
               "Fraction of states where the highest-scored candidate has the best label.", "none"),
    MetricSpec("regret_at_1", "Regret@1", "regret", False, 3, "selection",
               "Mean of best label minus the label of the highest-scored candidate.", "none"),
    MetricSpec("pairwise_accuracy", "Pairwise accuracy", "pairwise", True, 3, "selection",
               "Fraction of candidate pairs with different labels that the scores order like the labels.",
               "none"),
)
"""Every metric, in the order they are reported."""

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS}

COMPARABLE: tuple[str, ...] = tuple(m.name for m in METRICS if m.comparable)
"""Metrics the aggregates, plots and critical difference offer (global ρ, τ, state-local ρ)."""

POINT: tuple[str, ...] = tuple(m.name for m in METRICS if m.kind == "point")
"""Pointwise metrics, in report order (what :func:`qval.metrics.point_metrics` computes)."""

SELECTION: tuple[str, ...] = tuple(m.name for m in METRICS if m.kind == "selection")


def get(name: str) -> MetricSpec:
    """The metric ``name``; ``KeyError`` naming the known metrics."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; expected one of {', '.join(BY_NAME)}") from None

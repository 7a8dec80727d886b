"""The one list of reported metrics: name, label, direction, precision, the function that
computes each, its bootstrap, and whether the leaderboard shows it as a column.

Scoring (:mod:`qval.scoring`), the leaderboard (HTML table and CSV/JSON exports), the API, the
aggregates, the figures and the CLI read this registry, so a new metric is one
:class:`MetricSpec` (:func:`register`) and its function.  Functions are named
``"module:attribute"`` and imported on first use, so reading the registry stays light (the CLI
reads it at start-up); nothing here knows about Django.

**Plugins.** ``$QVAL_METRIC_MODULES`` (comma-separated module names) is imported when this
module is first imported: a module there calls :func:`register` for its metrics, so the CLI,
the web site and the workers started with it all score and show them.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

QVAL_RULES: str = "qval"
"""Our scoring rules (the default)."""
REFERENCE_RULES: str = "qval-v1.0"
"""The rules of the QVal v1.0 reference code (the differences are listed on *How we score*)."""
RULES: tuple[str, ...] = (QVAL_RULES, REFERENCE_RULES)
"""Every rule set a score can be computed under (light to import: the CLI reads it at start-up)."""

KINDS: tuple[str, ...] = ("point", "ranking", "selection")
"""What a metric is computed over; each kind's function signature is in :class:`MetricSpec`."""

HEADLINE_ROLES: tuple[str, ...] = ("global", "state-local")
"""The headline roles a metric may hold (:attr:`MetricSpec.headline`), named as the QVal v1.0 paper names its
two kinds of reported ρ (its results' ``metric_type``)."""

DEFAULT_BOOTSTRAP_MAX_WORK: int = 100_000_000
"""Cap on resamples x values of a bootstrap unless a metric sets its own (beyond it fewer resamples
are drawn, see :func:`qval.metrics.capped_resamples`)."""

PLUGINS_ENV: str = "QVAL_METRIC_MODULES"
"""Environment variable naming the modules (comma-separated) that register further metrics."""


def _resolve(ref: str) -> Callable[..., Any]:
    """The attribute named by ``"module:attribute"``."""
    module, _, attribute = ref.partition(":")
    if not module or not attribute:
        raise ValueError(f"a metric function is named 'module:attribute', got {ref!r}")
    return getattr(importlib.import_module(module), attribute)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class MetricSpec:
    """How one metric is named, shown and computed.

    ``higher_is_better``: the direction; ``precision``: decimals shown; ``computed``/
    ``bootstrap``: one sentence each for the *How we score* page; ``comparable``: whether the
    aggregates, plots and critical difference may summarise it (a correlation in [-1, 1]);
    ``board``: whether the leaderboard (page, CSV/JSON export, API) shows it as a column, with
    ``board_ci`` its 95% interval and ``board_p`` its significance marks.  ``needs_both_signs``: the
    metric says nothing unless some labels are positive and some negative (sign agreement: otherwise
    it only counts the scores' signs), so pages do not show it for a dataset without (:func:`shown`).
    ``headline``: its headline role (one of :data:`HEADLINE_ROLES`, held by one built-in metric each, or ``None``):
    ``"global"`` is what a board ranks by unless asked otherwise, what pages, the Ladder and a comparison lead with
    (:data:`HEADLINE`); ``"state-local"`` is the paper's second reported ρ (:data:`LOCAL_HEADLINE`).

    ``unit``: what its interval resamples, the unit the dataset's points were drawn in (:mod:`qval.sampling`):
    ``"trajectory"`` (whole tasks where a dataset has at least 20 of them, trajectories within tasks where
    it has fewer; points only where the trajectories are not known, and the interval says so), or
    ``"none"`` without an interval.  ``interval_scale``: the scale its interval is computed on and mapped
    back from (:data:`qval.metrics.INTERVAL_SCALES`; Fisher's z keeps a correlation's interval in [-1, 1]).

    ``function`` and ``resampler`` name (``"module:attribute"``) what computes it, by ``kind``:

    * ``point`` (over the evaluation points): ``function(x, y) -> (value, p_value)`` on the
      NaN-free pairs (labels ``x``, scores ``y``, at least two; ``None`` where undefined);
      ``resampler(x, y) -> statistic`` where ``statistic(draws)`` gives the metric on each
      resample of a :class:`qval.metrics.Resamples` (NaN where undefined), the bootstrap of its
      interval (``None``: no interval).  ``constant_undefined``: the metric is undefined
      (``None``) when either side is constant, so it is not computed then.
      ``bootstrap_max_work``: cap on resamples x points of its bootstrap.
    * ``ranking`` (per state, then averaged): ``function(groups, rules) ->``
      :class:`qval.metrics.RankingSummary` over ``(labels, scores)`` states; its interval
      resamples states: ``resampler(per_state, resamples=, seed=) ->``
      :class:`qval.metrics.Interval` (``None``: no interval).
    * ``selection`` (choices among a state's candidates): ``function(selection) -> (value,
      num_points)`` reading the :class:`qval.metrics.Selection` computed once per submission.
    """

    name: str
    label: str
    short: str
    higher_is_better: bool
    precision: int
    kind: str
    computed: str
    bootstrap: str
    function: str
    resampler: str | None = None
    comparable: bool = False
    board: bool = False
    board_ci: bool = False
    board_p: bool = False
    constant_undefined: bool = False
    needs_both_signs: bool = False
    bootstrap_max_work: int = DEFAULT_BOOTSTRAP_MAX_WORK
    unit: str = "trajectory"
    interval_scale: str = "fisher_z"
    headline: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"metric {self.name!r}: unknown kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        if self.headline is not None and self.headline not in HEADLINE_ROLES:
            raise ValueError(f"metric {self.name!r}: unknown headline role {self.headline!r}; expected one of "
                             f"{', '.join(HEADLINE_ROLES)}")
        if not self.name.isidentifier():
            raise ValueError(f"metric name {self.name!r} must be an identifier (it names columns and fields)")

    def format(self, value: float | None) -> str:
        """``value`` with :attr:`precision` decimals, ``"—"`` for ``None``."""
        return "—" if value is None else f"{value:.{self.precision}f}"

    def compute(self, *args: Any) -> Any:
        """:attr:`function` called with ``args`` (see the class doc for each kind's signature)."""
        return _resolve(self.function)(*args)

    def resample(self, *args: Any, **kwargs: Any) -> Any:
        """:attr:`resampler` called with ``args`` (``ValueError`` when the metric has none): for a
        point metric the per-resample statistic of ``(x, y)``, for a ranking metric the interval."""
        if self.resampler is None:
            raise ValueError(f"metric {self.name!r} has no bootstrap")
        return _resolve(self.resampler)(*args, **kwargs)


_SCIPY = ("the dataset's trajectories resampled with replacement (whole tasks where it has 20 or more, "
          "trajectories within each task where it has fewer), 95% interval on Fisher's z from the bootstrap's "
          "standard error with Student's t over the resampled units")

BUILTIN: tuple[MetricSpec, ...] = (
    MetricSpec("spearman", "Spearman ρ (global)", "global ρ", True, 3, "point",
               "Spearman rank correlation of the scores with the labels over all evaluation points "
               "(scipy.stats.spearmanr), two-sided p-value.", _SCIPY,
               function="qval.metrics:spearman", resampler="qval.metrics:spearman_resampler",
               comparable=True, board=True, board_ci=True, board_p=True, constant_undefined=True, headline="global"),
    MetricSpec("kendall_tau", "Kendall τ-b", "τ", True, 3, "point",
               "Kendall τ-b over all evaluation points (scipy.stats.kendalltau), two-sided p-value.", _SCIPY,
               function="qval.metrics:kendall_tau", resampler="qval.metrics:kendall_resampler",
               comparable=True, board=True, constant_undefined=True, bootstrap_max_work=10_000_000),
    MetricSpec("pearson", "Pearson r", "r", True, 3, "point",
               "Pearson correlation over all evaluation points (scipy.stats.pearsonr).", _SCIPY,
               function="qval.metrics:pearson", resampler="qval.metrics:pearson_resampler",
               constant_undefined=True),
    MetricSpec("sign_agreement", "Sign agreement", "sign", True, 3, "point",
               "Fraction of points whose score has the label's sign; binomial test against 0.5.", _SCIPY,
               function="qval.metrics:sign_agreement", resampler="qval.metrics:sign_agreement_resampler",
               needs_both_signs=True, interval_scale="logit"),
    MetricSpec("ranking_spearman", "Spearman ρ (state-local)", "state-local ρ", True, 3, "ranking",
               "Spearman between the candidates' Q labels and scores within each state, "
               "mean and sample std over the valid states.",
               "states resampled by the trajectories (or tasks) they were drawn in, as for the global ρ; 95% "
               "interval on Fisher's z of the mean",
               function="qval.metrics:ranking_spearman", resampler="qval.metrics:bootstrap_ranking_ci",
               comparable=True, board=True, headline="state-local"),
    MetricSpec("top1_accuracy", "Top-1 accuracy", "top-1", True, 3, "selection",
               "Fraction of states where the highest-scored candidate has the best label.", "none",
               function="qval.metrics:top1_accuracy", unit="none"),
    MetricSpec("regret_at_1", "Regret@1", "regret", False, 3, "selection",
               "Mean of best label minus the label of the highest-scored candidate.", "none",
               function="qval.metrics:regret_at_1", unit="none"),
    MetricSpec("pairwise_accuracy", "Pairwise accuracy", "pairwise", True, 3, "selection",
               "Fraction of candidate pairs with different labels that the scores order like the labels.",
               "none", function="qval.metrics:pairwise_accuracy", unit="none"),
)
"""The built-in metrics, in the order they are reported."""

_registry: dict[str, MetricSpec] = {m.name: m for m in BUILTIN}


def headline(role: str) -> str:
    """The name of the built-in metric that holds headline ``role`` (one of :data:`HEADLINE_ROLES`)."""
    held = [m.name for m in BUILTIN if m.headline == role]
    if len(held) != 1:
        raise ValueError(f"headline role {role!r} is held by {len(held)} built-in metrics; expected one of "
                         f"{', '.join(HEADLINE_ROLES)}, each held once")
    return held[0]


HEADLINE: str = headline("global")
"""The headline metric (global Spearman ρ): a board's default ranking, the number a page, the Ladder's first step,
a comparison and the budget lead with."""

LOCAL_HEADLINE: str = headline("state-local")
"""The paper's second headline (state-local Spearman ρ)."""

HEADLINES: tuple[str, ...] = tuple(m.name for m in BUILTIN if m.headline)
"""The headline metrics in report order (global first): what the authors report, the Ladder decides on and a
hidden split's row releases."""


ONE_SIGN_NOTE: str = ("Sign agreement is not shown: no label of this dataset is negative (or none is positive), so "
                      "it would only count the scores that have the labels' sign (random scores can reach 1, a "
                      "perfect ranking 0).")
"""Why a page leaves out the metrics :func:`shown` refuses on a dataset whose labels lack one of the signs."""


def shown(name: str, both_signs: bool) -> bool:
    """Whether a page shows metric ``name`` for a dataset whose labels have both signs (``both_signs``,
    :func:`qval.metrics.both_signs`) or not; a name no longer registered (a stored row of a plugin's
    metric) is shown."""
    spec = _registry.get(name)
    return both_signs or spec is None or not spec.needs_both_signs


def register(spec: MetricSpec) -> MetricSpec:
    """Add ``spec`` after the metrics already registered; ``ValueError`` if its name is taken or it claims a headline
    role (those are the built-in metrics': :data:`HEADLINES`)."""
    if spec.name in _registry:
        raise ValueError(f"metric {spec.name!r} is already registered")
    if spec.headline is not None:
        raise ValueError(f"metric {spec.name!r}: the headline role {spec.headline!r} is "
                         f"{headline(spec.headline)!r}'s; a registered metric holds none")
    _registry[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove the metric ``name`` (a built-in one cannot be removed)."""
    if any(m.name == name for m in BUILTIN):
        raise ValueError(f"metric {name!r} is built in and cannot be removed")
    get(name)
    del _registry[name]


def get(name: str) -> MetricSpec:
    """The metric ``name``; ``KeyError`` naming the known metrics."""
    try:
        return _registry[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; expected one of {', '.join(_registry)}") from None


class Names(Sequence[str]):
    """The names of the registered metrics that ``keep`` accepts, in report order, read from the
    registry each time (so a metric registered later is in every such list)."""

    def __init__(self, keep: Callable[[MetricSpec], bool]) -> None:
        self._keep = keep

    def _names(self) -> tuple[str, ...]:
        return tuple(m.name for m in _registry.values() if self._keep(m))

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __repr__(self) -> str:
        return repr(self._names())


class _Specs(Sequence[MetricSpec]):
    """Every registered :class:`MetricSpec`, in report order (read from the registry each time)."""

    @overload
    def __getitem__(self, index: int) -> MetricSpec: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[MetricSpec]: ...
    def __getitem__(self, index: int | slice) -> MetricSpec | Sequence[MetricSpec]:
        return tuple(_registry.values())[index]

    def __len__(self) -> int:
        return len(_registry)

    def __iter__(self) -> Iterator[MetricSpec]:
        return iter(tuple(_registry.values()))


METRICS: Sequence[MetricSpec] = _Specs()
"""Every registered metric, in the order they are reported."""

COMPARABLE: Sequence[str] = Names(lambda m: m.comparable)
"""Metrics the aggregates, plots and critical difference offer (global ρ, τ, state-local ρ)."""

POINT: Sequence[str] = Names(lambda m: m.kind == "point")
"""Pointwise metrics, in report order (what :func:`qval.metrics.point_metrics` computes)."""

SELECTION: Sequence[str] = Names(lambda m: m.kind == "selection")
"""Selection metrics (read from one :class:`qval.metrics.Selection`)."""

RANKING: Sequence[str] = Names(lambda m: m.kind == "ranking")
"""Per-state ranking metrics."""

BOARD: Sequence[str] = Names(lambda m: m.board)
"""The leaderboard's metric columns, in report order."""


def load_plugins(modules: str | None = None) -> list[str]:
    """Import each module named in ``modules`` (default ``$QVAL_METRIC_MODULES``; comma-separated),
    each registering its metrics; the names imported."""
    names = [m.strip() for m in (os.environ.get(PLUGINS_ENV, "") if modules is None else modules).split(",")]
    for name in filter(None, names):
        importlib.import_module(name)
    return [n for n in names if n]


load_plugins()

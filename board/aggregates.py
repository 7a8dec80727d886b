"""Leaderboard aggregates: means over backbones, family distributions, critical difference.

Shared by the pages (:mod:`board.views`) and the API (:mod:`board.apis`).  Every
aggregate starts from the same rows: the leaderboard's finished submissions
(:func:`board.exports.leaderboard_rows`) of one source -- the QVal v1.0 authors' reported numbers
unless the reader picks re-scored, verified, self-reported or *any* (:data:`board.boards.VIEWS`) --
reduced by :func:`best_rows` to the best one per method, dataset, backbone, split and target, so a
method that submitted many times counts once per evaluation.  The statistics are :mod:`qval.compare`'s.

The critical difference (:func:`critical_difference_of`) reads the evaluations itself, for one
:class:`CDChoice`: by default the QVal v1.0 paper's numbers (source *reported*), one evaluation per
environment and backbone, and only the methods that have a value on every chosen evaluation (the others
are named with the evaluations they miss); its blocks are the environments (the mean over backbones), which
are independent, not the evaluations, which are not.

What the pages and the API show of one :class:`Selection` or :class:`CDChoice` (:func:`summary`,
:func:`critical_difference_of`) is kept per results version (:func:`board.evaluations.derived`), as the board is: computed once per
process after a result changes, then read from memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

import numpy as np

from qval import compare, metric_registry

from . import boards, evaluations
from .exports import BoardRow, leaderboard_rows

METRICS = {name: metric_registry.get(name).label for name in metric_registry.COMPARABLE}
"""Metrics the aggregates can use (higher is better), with their labels (:mod:`qval.metric_registry`)."""
SPLITS = ("dev", "test")
TARGETS = ("q", "v")
ALPHA = 0.05
"""Significance level of the Friedman test and the Nemenyi critical difference."""
BLOCKS_ENVIRONMENT, BLOCKS_EVALUATION = "environment", "evaluation"
BLOCKS: tuple[str, ...] = (BLOCKS_ENVIRONMENT, BLOCKS_EVALUATION)
"""The critical difference's blocks: environments (each method's mean over its backbones; the default, as
evaluations that share an environment are not independent) or every evaluation (as if independent)."""


class InvalidSelection(ValueError):
    """A query parameter of an aggregate page or API call that is not allowed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Selection:
    """Which leaderboard rows an aggregate uses: split, target, source (one of :data:`board.boards.VIEWS`,
    by default the authors' reported numbers) and the metric to summarise.  The critical difference keeps
    its own sources (:attr:`CDChoice.sources`) and leaves this one at its default."""

    split: str = "test"
    target: str = "q"
    metric: str = metric_registry.HEADLINE
    source: str = boards.DEFAULT_VIEW

    @property
    def source_caption(self) -> str:
        """Which rows the aggregates show, in words (the page says it)."""
        return boards.view_caption(self.source)

    @property
    def metric_label(self) -> str:
        """Human-readable name of :attr:`metric`."""
        return METRICS[self.metric]


SELECTION_KEYS = ("split", "target", "metric", "source")
"""The query parameters of a :class:`Selection`."""


def read_selection(params: Mapping[str, str], keys: tuple[str, ...] = SELECTION_KEYS) -> Selection:
    """The :class:`Selection` of query parameters ``split``, ``target``, ``metric`` and ``source`` (only
    those of ``keys`` are read).

    Missing or empty parameters take the defaults (test, q, spearman, reported); any other value
    raises :class:`InvalidSelection` naming the allowed ones.
    """
    default = Selection()
    chosen = {key: params.get(key) or getattr(default, key) for key in keys}
    choices = {"split": SPLITS, "target": TARGETS, "metric": tuple(METRICS), "source": tuple(boards.VIEWS)}
    for key, allowed in ((k, choices[k]) for k in keys):
        if chosen[key] not in allowed:
            raise InvalidSelection(key, f"unknown {key} {chosen[key]!r}; choose one of {', '.join(allowed)}")
    return Selection(**chosen)


@dataclass(frozen=True)
class Entry:
    """One evaluation of one method: its best finished submission's value of the metric."""

    method: str
    family: str
    environment: str
    dataset: str
    backbone: str | None
    value: float
    submission_id: int


def best_rows(selection: Selection) -> list[Entry]:
    """The best finished submission per (method, evaluation, backbone) on the selection's split,
    target and source (:func:`board.boards.of_source`), by the selection's metric; submissions without
    a value of it are left out.  The evaluation is :func:`evaluation_label` (dataset, modality, imported
    source).

    Ties go to the newest submission.  Ordered by method, dataset and backbone.
    """
    rows: list[BoardRow] = boards.of_source(
        leaderboard_rows({"split": selection.split, "target": selection.target}, sort=f"-{selection.metric}"),
        selection.source)
    best: dict[tuple[str, str, str], Entry] = {}
    for row in rows:  # sorted by the metric, best first; rows without a value come last
        value = getattr(row, selection.metric)
        key = (row.method, evaluation_label(row), row.backbone)
        if value is None or key in best:
            continue
        best[key] = Entry(row.method, row.family, row.environment, key[1], row.backbone or None, value,
                          row.submission_id)
    return [best[k] for k in sorted(best)]


def evaluation_label(row: BoardRow) -> str:
    """The dataset an aggregate counts a row under: its key, marked ``[image]`` for image
    inputs and with the source of an imported row, so reported, re-scored and our own
    results, or text and image inputs, are never merged into one evaluation."""
    label = row.dataset
    if row.modality != "text":
        label += f" [{row.modality}]"
    if row.source in ("reported", "rescored"):
        label += f" ({row.source})"
    return label


def _backbone_label(backbone: str | None) -> str:
    return backbone or "no backbone"


# -- (a) mean over backbones -------------------------------------------------------------


@dataclass(frozen=True)
class MethodMean:
    """Per method and environment: the mean of the metric over its evaluations (one per
    dataset x backbone) with a Student-t 95% interval (:func:`qval.compare.mean_ci`)."""

    method: str
    family: str
    environment: str
    evaluations: tuple[str, ...]
    values: tuple[float, ...]
    interval: compare.MeanInterval

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API."""
        iv = self.interval
        return {
            "method": self.method,
            "family": self.family,
            "environment": self.environment,
            "n": iv.n,
            "mean": iv.mean,
            "std": iv.std,
            "ci95": [iv.low, iv.high] if iv.low is not None else None,
            "evaluations": [{"evaluation": e, "value": v} for e, v in zip(self.evaluations, self.values)],
        }


def method_means(entries: list[Entry]) -> list[MethodMean]:
    """:class:`MethodMean` of every (method, environment) of ``entries``, best mean first."""
    groups: dict[tuple[str, str], list[Entry]] = {}
    for e in entries:
        groups.setdefault((e.method, e.environment), []).append(e)
    out = [
        MethodMean(
            method=method,
            family=group[0].family,
            environment=environment,
            evaluations=tuple(f"{e.dataset} / {_backbone_label(e.backbone)}" for e in group),
            values=tuple(e.value for e in group),
            interval=compare.mean_ci([e.value for e in group]),
        )
        for (method, environment), group in groups.items()
    ]
    out.sort(key=lambda m: (m.environment, -(m.interval.mean or 0.0), m.method))
    return out


# -- (b) distribution per family -------------------------------------------------------


@dataclass(frozen=True)
class FamilyDistribution:
    """Per method family: the distribution of the metric over all its methods' evaluations."""

    family: str
    points: tuple[str, ...]
    """``method · dataset / backbone`` of each value."""
    values: tuple[float, ...]
    summary: compare.Distribution

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API."""
        return {
            "family": self.family,
            **asdict(self.summary),
            "values": [{"evaluation": p, "value": v} for p, v in zip(self.points, self.values)],
        }


def family_distributions(entries: list[Entry]) -> list[FamilyDistribution]:
    """:class:`FamilyDistribution` of every family of ``entries``, by family name."""
    groups: dict[str, list[Entry]] = {}
    for e in entries:
        groups.setdefault(e.family, []).append(e)
    return [
        FamilyDistribution(
            family=family,
            points=tuple(f"{e.method} · {e.dataset} / {_backbone_label(e.backbone)}" for e in group),
            values=tuple(e.value for e in group),
            summary=compare.distribution([e.value for e in group]),
        )
        for family, group in sorted(groups.items())
    ]


@dataclass(frozen=True)
class Summary:
    """The aggregates of one selection: :func:`method_means` and :func:`family_distributions` of its
    :func:`best_rows`."""

    means: tuple[MethodMean, ...]
    families: tuple[FamilyDistribution, ...]

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API (without the selection)."""
        return {"methods": [m.as_dict() for m in self.means], "families": [f.as_dict() for f in self.families]}


def summary(selection: Selection) -> Summary:
    """The :class:`Summary` of ``selection``, kept until the results version changes: treat it as read-only."""

    def make(_: object) -> Summary:
        entries = best_rows(selection)
        return Summary(tuple(method_means(entries)), tuple(family_distributions(entries)))

    return evaluations.derived(("aggregate", selection), make)


# -- critical difference ---------------------------------------------------------------

CD_SOURCES: tuple[str, ...] = tuple(boards.SOURCES)
"""Sources the critical difference may compare (:data:`board.boards.SOURCES`: verified, self-reported,
reported, re-scored)."""
CD_DEFAULT_SOURCES: tuple[str, ...] = (boards.REPORTED,)
"""The default: the numbers of the QVal v1.0 paper, methods x (environment, backbone) evaluations."""
MODALITIES = ("text", "image")


@dataclass(frozen=True)
class CDChoice:
    """What a critical-difference diagram compares: the :class:`Selection` (split, target, metric), one
    modality, the sources whose rows count, and optionally the methods, environments (slugs) and backbones
    to keep (empty: all).  Tuples are sorted, so one choice has one memo key."""

    selection: Selection = Selection()
    modality: str = "text"
    sources: tuple[str, ...] = CD_DEFAULT_SOURCES
    methods: tuple[str, ...] = ()
    environments: tuple[str, ...] = ()
    backbones: tuple[str, ...] = ()
    blocks: str = "environment"
    """The independent units the test ranks within (:data:`BLOCKS`)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API: the selection's fields, then the filters as lists."""
        return {**vars(self.selection), "modality": self.modality, "source": list(self.sources),
                "method": list(self.methods), "environment": list(self.environments), "backbone": list(self.backbones),
                "blocks": self.blocks}


class QueryParams(Protocol):
    """Query parameters with repeated keys (Django's ``QueryDict``, DRF's ``request.query_params``)."""

    def get(self, key: str, default: Any = None) -> Any:
        """The last value of ``key``, or ``default``."""

    def getlist(self, key: str) -> list[str]:
        """Every value of ``key``."""


def read_cd_choice(params: QueryParams) -> CDChoice:
    """The :class:`CDChoice` of query parameters: ``split``, ``target``, ``metric`` (:func:`read_selection`),
    ``modality`` (default text) and the repeatable ``source`` (default :data:`CD_DEFAULT_SOURCES`),
    ``method``, ``environment`` and ``backbone``.  An unknown split, target, metric, modality or source
    raises :class:`InvalidSelection`; an unknown method, environment or backbone just matches nothing."""
    selection = read_selection(params, ("split", "target", "metric"))
    modality = params.get("modality") or "text"
    if modality not in MODALITIES:
        raise InvalidSelection("modality", f"unknown modality {modality!r}; choose one of {', '.join(MODALITIES)}")

    def many(key: str) -> tuple[str, ...]:
        return tuple(sorted({v for v in params.getlist(key) if v}))

    sources = many("source") or CD_DEFAULT_SOURCES
    for source in sources:
        if source not in CD_SOURCES:
            raise InvalidSelection("source", f"unknown source {source!r}; choose among {', '.join(CD_SOURCES)}")
    blocks = params.get("blocks") or BLOCKS_ENVIRONMENT
    if blocks not in BLOCKS:
        raise InvalidSelection("blocks", f"unknown blocks {blocks!r}; choose one of {', '.join(BLOCKS)}")
    return CDChoice(selection, modality, sources, many("method"), many("environment"), many("backbone"), blocks)


def cd_evaluation(e: evaluations.Evaluation, source: str) -> str:
    """The evaluation a row counts for in the critical difference: an imported row's environment (with
    *re-scored* marked, so reported and re-scored numbers stay apart), else its dataset, then its backbone
    (``ALFWorld / Qwen3.5 9B``, ``frozenlake-8x8@1.2 / b1``)."""
    if source == boards.REPORTED:
        where = e.environment
    elif source == boards.RESCORED:
        where = f"{e.environment} ({boards.SOURCES[source][0]})"
    else:
        where = e.dataset
    return f"{where} / {_backbone_label(e.backbone or None)}"


def cd_entries(choice: CDChoice, rows: list[evaluations.Evaluation]) -> list[Entry]:
    """The best value of ``choice``'s metric per (method, :func:`cd_evaluation`) among ``rows`` of its split,
    target, modality, sources, environments and backbones (ties to the newest).  Every method's entries,
    including those ``choice.methods`` leaves out: :func:`critical_difference` says which were chosen."""
    s = choice.selection
    runs = boards.platform_runs()
    best: dict[tuple[str, str], tuple[float, int, evaluations.Evaluation]] = {}
    for e in rows:
        if (e.split, e.target, e.modality) != (s.split, s.target, choice.modality):
            continue
        if (choice.environments and e.environment_slug not in choice.environments) or (
                choice.backbones and e.backbone not in choice.backbones):
            continue
        source = boards.source_of(e, runs)
        value = e.value(s.metric)
        if source not in choice.sources or value is None:
            continue
        key = (e.method, cd_evaluation(e, source))
        if key not in best or (value, e.submission_id) > best[key][:2]:
            best[key] = (value, e.submission_id, e)
    return [Entry(method, best[(method, ev)][2].family_name, best[(method, ev)][2].environment, ev, None,
                  best[(method, ev)][0], best[(method, ev)][1]) for method, ev in sorted(best)]


@dataclass(frozen=True)
class LeftOut:
    """A chosen method the critical difference leaves out: the chosen evaluations it has no value on."""

    method: str
    missing: tuple[str, ...]
    of: int
    """How many evaluations were chosen."""

    @property
    def reason(self) -> str:
        """``missing on ALFWorld / Qwen3.5 9B (1 of 24 evaluations)``, at most :data:`NAMED_MISSING` named."""
        if len(self.missing) == self.of:
            return f"no value on any of the {self.of} chosen evaluations"
        named = ", ".join(self.missing[:NAMED_MISSING])
        more = f" and {len(self.missing) - NAMED_MISSING} more" if len(self.missing) > NAMED_MISSING else ""
        return f"missing on {named}{more} ({len(self.missing)} of {self.of} evaluations)"

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API."""
        return {"method": self.method, "reason": self.reason, "missing": list(self.missing)}


NAMED_MISSING = 3
"""Missing evaluations a :attr:`LeftOut.reason` names before it counts the rest."""


@dataclass(frozen=True)
class CriticalDifferenceTable:
    """The evaluations x methods matrix of the metric and, when defined, its Friedman test
    and Nemenyi critical difference (:func:`qval.compare.friedman_nemenyi`).

    ``methods`` are the chosen methods with a value on every evaluation, ``matrix[i][j]`` method ``j``'s
    value on evaluation ``i``; ``left_out`` the chosen methods that miss one or more evaluations.
    ``result`` is ``None`` and ``reason`` says why when fewer than 3 methods or fewer than 2
    evaluations are left.
    """

    evaluations: tuple[str, ...]
    methods: tuple[str, ...]
    matrix: tuple[tuple[float, ...], ...]
    result: compare.CriticalDifference | None
    reason: str | None
    left_out: tuple[LeftOut, ...] = ()
    blocks: str = BLOCKS_ENVIRONMENT
    """The independent units the test ranks within (:data:`BLOCKS`)."""
    block_names: tuple[str, ...] = ()
    block_matrix: tuple[tuple[float, ...], ...] = ()
    """Per block, each method's mean over the block's evaluations: what the Friedman test ranks."""

    def rows(self) -> list[tuple[str, tuple[float, ...]]]:
        """``(evaluation, values per method)`` of every row of the matrix."""
        return list(zip(self.evaluations, self.matrix))

    def block_rows(self) -> list[tuple[str, tuple[float, ...]]]:
        """``(block, mean per method)`` of every block the test ranks within."""
        return list(zip(self.block_names, self.block_matrix))

    @property
    def differences_found(self) -> bool:
        """Whether the Friedman test rejects "all methods rank alike" at :data:`ALPHA`: only then are the
        Nemenyi bars drawn (otherwise one bar holds every method: no pair is shown to differ)."""
        r = self.result
        return r is not None and r.p_value is not None and r.p_value < r.alpha

    @property
    def units(self) -> str:
        """What the test's units are, in words: ``4 environments (each the mean of its 6, 6, 6 and 6
        evaluations, one per backbone)`` or ``24 evaluations (environment x backbone, taken as independent)``."""
        if self.blocks == BLOCKS_EVALUATION:
            return (f"{len(self.evaluations)} evaluations (environment × backbone), taken as independent, which "
                    "evaluations sharing an environment are not")
        sizes = [sum(1 for ev in self.evaluations if _block(ev) == b) for b in self.block_names]
        return (f"{len(self.block_names)} environment{'s' if len(self.block_names) != 1 else ''} (each the mean "
                f"of its evaluations over backbones: {', '.join(str(n) for n in sizes)})")

    def ranking(self) -> list[dict[str, Any]]:
        """Methods from best to worst average rank: name, average rank, clique numbers."""
        if self.result is None:
            return []
        r = self.result
        return [
            {
                "method": r.methods[i],
                "average_rank": r.average_ranks[i],
                "cliques": [n for n, (start, end) in enumerate(r.cliques, 1) if start <= pos <= end],
            }
            for pos, i in enumerate(r.order)
        ]

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for the API."""
        r = self.result
        return {
            "methods": list(self.methods),
            "evaluations": list(self.evaluations),
            "matrix": [list(row) for row in self.matrix],
            "blocks": {"unit": self.blocks, "units": self.units, "names": list(self.block_names),
                       "matrix": [list(row) for row in self.block_matrix]},
            "left_out": [m.as_dict() for m in self.left_out],
            "reason": self.reason,
            "critical_difference": None
            if r is None
            else {
                "alpha": r.alpha,
                "cd": r.cd,
                "q_alpha": r.q_alpha,
                "friedman_statistic": r.statistic,
                "friedman_p_value": r.p_value,
                "num_blocks": r.num_evaluations,
                "num_dropped": r.num_dropped,
                "differences_found": self.differences_found,
                "average_ranks": dict(zip(r.methods, r.average_ranks)),
                "ranking": self.ranking(),
                "cliques": r.groups(),
            },
        }


def _block(evaluation: str) -> str:
    """The environment (or hosted dataset) of a :func:`cd_evaluation` label: what precedes its backbone."""
    return evaluation.rsplit(" / ", 1)[0]


def critical_difference(entries: list[Entry], alpha: float = ALPHA, methods: tuple[str, ...] = (),
                        blocks: str = BLOCKS_ENVIRONMENT) -> CriticalDifferenceTable:
    """The critical difference of ``methods`` (all of ``entries``' when empty) over the evaluations
    (``Entry.dataset``) on which any of them has a value.

    Only a method with a value on every one of those evaluations is compared; the others are
    :class:`LeftOut` with the evaluations they miss.  Demšar's test needs independent blocks, and
    evaluations that share an environment are not (in the published results the backbones of one
    environment rank the methods alike, Kendall's W 0.66-0.88), so by default (``blocks`` =
    :data:`BLOCKS_ENVIRONMENT`) each method's values are averaged over the evaluations of each environment
    and the environments are the blocks; :data:`BLOCKS_EVALUATION` ranks within every evaluation, as if
    independent.  The Friedman test and Nemenyi critical difference at ``alpha`` run when at least 3
    methods and 2 blocks are left; the Nemenyi bars are drawn only when the Friedman test rejects (Demšar's
    procedure), otherwise one bar holds every method.
    """
    if blocks not in BLOCKS:
        raise ValueError(f"unknown blocks {blocks!r}; expected one of {', '.join(BLOCKS)}")
    chosen = methods or tuple(sorted({e.method for e in entries}))
    values: dict[str, dict[str, float]] = {m: {} for m in chosen}
    for e in entries:
        if e.method in values:
            values[e.method][e.dataset] = e.value
    names = tuple(sorted({ev for have in values.values() for ev in have}))
    kept = tuple(m for m in chosen if names and len(values[m]) == len(names))
    left_out = tuple(LeftOut(m, tuple(ev for ev in names if ev not in values[m]), len(names))
                     for m in chosen if m not in kept)
    matrix = tuple(tuple(values[m][ev] for m in kept) for ev in names)
    if blocks == BLOCKS_EVALUATION:
        block_names, block_matrix = names, matrix
    else:
        block_names = tuple(sorted({_block(ev) for ev in names}))
        block_matrix = tuple(tuple(float(np.mean([row[j] for ev, row in zip(names, matrix) if _block(ev) == b]))
                                   for j in range(len(kept))) for b in block_names)
    table = CriticalDifferenceTable(names, kept, matrix, None, None, left_out, blocks, block_names, block_matrix)
    reason = None
    unit = "environments" if blocks == BLOCKS_ENVIRONMENT else "evaluations"
    if len(kept) < 3:
        reason = (f"the Friedman test needs at least 3 methods with a value on every chosen evaluation; "
                  f"{len(kept)} found ({', '.join(kept) or 'none'})")
    elif len(block_names) < 2:
        reason = (f"the Friedman test needs at least 2 independent {unit}; {len(block_names)} chosen"
                  + (" (choose blocks=evaluation to rank within each evaluation, as if independent)"
                     if blocks == BLOCKS_ENVIRONMENT and len(names) >= 2 else ""))
    if reason is not None:
        return replace(table, reason=reason)
    result = compare.friedman_nemenyi(np.array(block_matrix, dtype=np.float64), kept, alpha=alpha)
    if result.p_value is None or result.p_value >= alpha:  # no difference shown: no bar may split the methods
        result = replace(result, cliques=((0, len(kept) - 1),))
    return replace(table, result=result)


def critical_difference_of(choice: CDChoice) -> CriticalDifferenceTable:
    """:func:`critical_difference` of ``choice``'s methods over its :func:`cd_entries`, kept until the results
    version changes."""
    return evaluations.derived(("critical-difference", choice),
                               lambda rows: critical_difference(cd_entries(choice, rows), methods=choice.methods,
                                                                blocks=choice.blocks))


@dataclass(frozen=True)
class CDOptions:
    """What the critical-difference form offers for a split, target, modality and sources: the methods,
    environments (slug, name) and backbones that have a value of the metric there."""

    methods: tuple[str, ...]
    environments: tuple[tuple[str, str], ...]
    backbones: tuple[str, ...]


def cd_options(choice: CDChoice) -> CDOptions:
    """The :class:`CDOptions` of ``choice`` (its filters of methods, environments and backbones aside),
    kept until the results version changes."""
    broad = CDChoice(choice.selection, choice.modality, choice.sources)

    def make(rows: list[evaluations.Evaluation]) -> CDOptions:
        s, runs = broad.selection, boards.platform_runs()
        held = [e for e in rows if (e.split, e.target, e.modality) == (s.split, s.target, broad.modality)
                and e.value(s.metric) is not None and boards.source_of(e, runs) in broad.sources]
        return CDOptions(tuple(sorted({e.method for e in held})),
                         tuple(sorted({(e.environment_slug, e.environment) for e in held})),
                         tuple(sorted({e.backbone for e in held if e.backbone})))

    return evaluations.derived(("critical-difference-options", broad), make)

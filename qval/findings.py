"""The headline claims of the QVal v1.0 paper and website, each checked against the published numbers by a test.

The claims are project data (``data/qval-v1.0/claims.json``, :func:`claims`): our paraphrase, where the
paper or the website makes it, and the view that supports it.  The verdicts are computed here, one rule per
claim (:data:`RULES`), from the rows of the paper's figures as the site draws them over the authors'
reported numbers (:data:`VIEWS`; a view is a figure's ``rows``: Fig. 2's per-backbone values, ...), so a
finding changes with the data.

**How a verdict follows from tests.**  A rule splits its claim into parts (one per environment for a claim
about every environment, one per statement for a compound claim) and runs one test per part
(:class:`Test`: which test, its units, how many, the estimate, the one-sided p-value in the claim's
direction and against it).  With :data:`ALPHA` = 0.05 (:func:`verdict_of`):

* *supported*: every part's test rejects its null in the claimed direction (an intersection-union test:
  when every part must hold, no correction for the number of parts is needed);
* *contradicted*: some part's test rejects in the other direction, after Holm's correction over the parts;
* *partly*: some part holds (Holm over the parts), none goes against;
* *inconclusive*: no part's test rejects either way.

The tests are small and named on the page: exact sign tests on paired values, one-sided t-tests on paired
differences, Welch's t, the Brown-Forsythe test of spread, a permutation test of η², Spearman's test,
Fisher's exact test.  Units are what one value of the view is (a method × environment × backbone
evaluation, a method, ...); evaluations of one environment are not independent (backbones rank methods
alike), so a claim about environments is tested environment by environment, never by pooling them.
Claims about "little or no" difference are tested against a margin (:data:`SMALL_GAIN`), not by a
failure to reject.  Nothing here knows about Django.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from qval import families, metric_registry
from qval.paper.qval_v1.published import DATA_DIR, PublishedDataError

CLAIMS_FILE: Path = DATA_DIR / "claims.json"

VERDICTS: dict[str, str] = {
    "supported": "supported",
    "partly": "partly",
    "contradicted": "contradicted by the data",
    "inconclusive": "not shown: no test rejects",
    "no-data": "not checked: the view has no rows",
}
"""Each verdict and how a page says it (*no-data* before the published results are imported)."""

VERDICT_RULE: dict[str, str] = {
    "supported": "every part's test rejects its null in the claimed direction at the 5% level (no correction: "
                 "every part must hold)",
    "contradicted": "some part's test rejects in the other direction at 5% after Holm's correction over the parts",
    "partly": "some part holds at 5% after Holm's correction over the parts, and none goes against",
    "inconclusive": "no part's test rejects at 5% either way",
    "no-data": "the view has no rows",
}
"""How each verdict follows from the tests (:func:`verdict_of`), in words for the page."""

ALPHA: float = 0.05
"""Level of every test."""

Row = Mapping[str, Any]
Views = Mapping[str, Sequence[Row]]
"""A view's rows by view name (:data:`VIEWS`)."""


@dataclass(frozen=True)
class View:
    """Where a claim's numbers come from: a paper figure (``board.paper_figures``) with query parameters, or
    ``None`` for the reported rows themselves (one row per reported number)."""

    figure: str | None
    params: Mapping[str, str] = field(default_factory=dict)
    caption: str = ""


VIEWS: dict[str, View] = {
    "fig2": View("fig2", {}, "Figure 2 (per family), the paper's slice"),
    "fig2-text": View("fig2", {"modality": "text"}, "Figure 2 over text observations"),
    "fig2-image": View("fig2", {"modality": "image"}, "Figure 2 over image observations"),
    "fig3": View("fig3", {}, "Figure 3 (per environment)"),
    "fig4-left": View("fig4-left", {}, "Figure 4, left (text vs image)"),
    "fig4-right": View("fig4-right", {}, "Figure 4, right (Q vs V)"),
    "fig5": View("fig5", {}, "Figure 5 (TerminalBench labelled by two backbones)"),
    "reported": View(None, {}, "the reported rows"),
}
"""Every view a rule reads, all over the authors' reported numbers."""

PROMPTING: tuple[str, ...] = ("direct", "ranking")
"""The two simple prompting families."""

NON_LLM: tuple[str, ...] = ("pre-trained", "embedding")
"""Families whose methods run without an LLM backbone (one value per environment and encoder)."""

PAPER_ENVIRONMENTS: tuple[str, ...] = ("FrozenLake", "ALFWorld", "OpenApps", "TerminalBench")
"""The paper's environments from simpler closed-action to open-ended (its Figure 3 order)."""

SMALL_GAIN: float = 0.1
"""The margin of "little or no gain" and "nearly the same" (a tenth of the correlation scale; the paper calls
codegen-avg's gain over codegen, about 0.05, slight): such a claim holds where the difference is shown to be
below it."""

COMPLEX_PAIRS: tuple[tuple[str, str], ...] = (
    ("direct-16", "direct-single"), ("direct-batched", "direct-single"), ("direct-sequential", "direct-single"),
    ("sdpo-gt", "sdpo"), ("codegen-avg", "codegen"),
)
"""(elaborate variant, simplest member of its family) as §4.1 names them."""

PERMUTATIONS: int = 20000
"""Permutations of the family labels in the test of η² (seeded: the same data give the same p)."""

PAPER_SCALE: dict[str, int] = {"methods": 21, "families": 7, "environments": 4, "backbones": 6, "experiments": 1200}
"""The abstract's counts (experiments: "over 1.2K")."""


@dataclass(frozen=True)
class Claim:
    """One claim: its id (its rule's name), ``paper`` or ``website``, where it is made, our paraphrase and
    the view (:data:`VIEWS`) that supports it."""

    id: str
    source: str
    where: str
    text: str
    view: str


@dataclass(frozen=True)
class Test:
    """One part of a claim and the test of it: ``part`` in words, the ``test`` (one-sided in the claim's
    direction), its ``units`` (what one observation is) and their number ``n``, the ``estimate`` in words,
    ``p_value`` (one-sided, the claimed direction), ``p_against`` (one-sided, the other direction) and the
    p-values the part's outcome is read from, with the ``correction`` that gave them (:func:`verdict_of`
    fills them: none when every part holds, Holm's over the claim's parts otherwise)."""

    part: str
    test: str
    units: str
    n: int
    estimate: str
    p_value: float
    p_against: float
    p_adjusted: float = math.nan
    p_adjusted_against: float = math.nan
    correction: str = ""

    @property
    def outcome(self) -> str:
        """``holds`` (the adjusted p below :data:`ALPHA` in the claimed direction), ``against`` (the same in
        the other direction) or ``open``."""
        if self.p_adjusted < ALPHA:
            return "holds"
        if self.p_adjusted_against < ALPHA:
            return "against"
        return "open"

    @property
    def shown_p(self) -> str:
        """:attr:`p_value` as a page shows it."""
        return _fmt_p(self.p_value)

    @property
    def shown_read(self) -> str:
        """The p-value the outcome is read from (the other direction's for *against*), with its correction."""
        p = self.p_adjusted_against if self.outcome == "against" else self.p_adjusted
        return f"{_fmt_p(p)}{' (other way)' if self.outcome == 'against' else ''}; {self.correction}"


@dataclass(frozen=True)
class Finding:
    """A claim's verdict (:data:`VERDICTS`), the sentence that gives the numbers, the numbers as
    ``(label, value)`` rows (a value is a float, an int or text), and the tests the verdict follows from."""

    claim: Claim
    verdict: str
    summary: str
    numbers: tuple[tuple[str, float | int | str], ...] = ()
    tests: tuple[Test, ...] = ()

    @property
    def shown_numbers(self) -> list[tuple[str, str]]:
        """:attr:`numbers` as text: a float to three decimals, anything else as it is."""
        return [(label, f"{value:.3f}" if isinstance(value, float) else str(value)) for label, value in self.numbers]

    @property
    def verdict_label(self) -> str:
        """How the page says the verdict."""
        return VERDICTS[self.verdict]

    @property
    def verdict_rule(self) -> str:
        """Why the tests give this verdict, in words."""
        if not self.tests and self.verdict != "no-data":
            return "a count, not a test: the published data's counts against the paper's"
        return VERDICT_RULE[self.verdict]


def claims(path: Path = CLAIMS_FILE) -> tuple[dict[str, Any], list[Claim]]:
    """The provenance and the claims of ``claims.json``; a claim without a rule or view raises
    :class:`~qval.paper.qval_v1.published.PublishedDataError`."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        out = [Claim(**entry) for entry in data["claims"]]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise PublishedDataError(f"{path}: cannot read ({exc!r})") from exc
    for c in out:
        if c.id not in RULES or c.view not in VIEWS or c.source not in ("paper", "website"):
            raise PublishedDataError(f"{path}: claim {c.id!r} has no rule, an unknown view or source")
    return data["provenance"], out


# -- tests -------------------------------------------------------------------------------------


def _fmt_p(p: float) -> str:
    return "n/a" if math.isnan(p) else "< 0.001" if p < 0.001 else f"{p:.3f}"



def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (NaN stays NaN and counts as 1)."""
    order = sorted(range(len(p_values)), key=lambda i: 1.0 if math.isnan(p_values[i]) else p_values[i])
    out = [math.nan] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        if math.isnan(p_values[i]):
            continue
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        out[i] = running
    return out


def verdict_of(tests: Sequence[Test]) -> tuple[str, list[Test]]:
    """The verdict of a claim whose parts are ``tests`` (the module doc's rule), and the tests with the
    p-values their outcomes are read from; no test at all is *inconclusive*."""
    if tests and all(t.p_value < ALPHA for t in tests):
        return "supported", [Test(**{**vars(t), "p_adjusted": t.p_value, "p_adjusted_against": t.p_against,
                                     "correction": "none: every part must hold"}) for t in tests]
    correction = f"Holm over {len(tests)} parts" if len(tests) > 1 else "none: one part"
    adjusted = [Test(**{**vars(t), "p_adjusted": h, "p_adjusted_against": a, "correction": correction})
                for t, h, a in zip(tests, holm([t.p_value for t in tests]), holm([t.p_against for t in tests]))]
    if not adjusted:
        return "inconclusive", adjusted
    if any(t.outcome == "against" for t in adjusted):
        return "contradicted", adjusted
    if any(t.outcome == "holds" for t in adjusted):
        return "partly", adjusted
    return "inconclusive", adjusted


def sign_test(part: str, units: str, diffs: Sequence[float], claimed: str) -> Test:
    """Exact sign test that the ``diffs`` are above zero more often than below (``claimed`` names the side
    in words, e.g. "favour text"); zeros are dropped."""
    above = sum(1 for d in diffs if d > 0)
    below = sum(1 for d in diffs if d < 0)
    n = above + below
    if n == 0:
        return Test(part, "sign test", units, 0, "no pair differs", math.nan, math.nan)
    return Test(part, "sign test (exact, one-sided)", units, n, f"{above} of {n} {claimed}",
                float(stats.binomtest(above, n, 0.5, alternative="greater").pvalue),
                float(stats.binomtest(above, n, 0.5, alternative="less").pvalue))


def mean_test(part: str, units: str, values: Sequence[float], *, above: float = 0.0, greater: bool = True,
              test: str = "t-test of the mean") -> Test:
    """One-sample (or paired, on differences) t-test that the mean of ``values`` is above ``above``
    (``greater``) or below it; fewer than two values, or values without spread, give no p-value."""
    n = len(values)
    mean = sum(values) / n if n else math.nan
    side = ">" if greater else "<"
    estimate = f"mean {mean:.3f} ({side} {above:g} claimed)" if n else "no values"
    if n < 2 or len(set(values)) < 2:
        return Test(part, f"{test} (one-sided)", units, n, estimate, math.nan, math.nan)
    shifted = [v - above for v in values]
    up = float(stats.ttest_1samp(shifted, 0.0, alternative="greater").pvalue)
    down = float(stats.ttest_1samp(shifted, 0.0, alternative="less").pvalue)
    return Test(part, f"{test} (one-sided)", units, n, estimate, up if greater else down, down if greater else up)


def welch_test(part: str, units: str, a: Sequence[float], b: Sequence[float], names: tuple[str, str]) -> Test:
    """Welch's t-test that ``a``'s mean is above ``b``'s (one-sided)."""
    n = len(a) + len(b)
    estimate = (f"{names[0]} {_mean(a):.3f} vs {names[1]} {_mean(b):.3f}" if a and b else "a group has no values")
    if len(a) < 2 or len(b) < 2:
        return Test(part, "Welch's t-test (one-sided)", units, n, estimate, math.nan, math.nan)
    return Test(part, "Welch's t-test (one-sided)", units, n, estimate,
                float(stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue),
                float(stats.ttest_ind(a, b, equal_var=False, alternative="less").pvalue))


def spread_test(part: str, units: str, a: Sequence[float], b: Sequence[float], names: tuple[str, str]) -> Test:
    """Brown-Forsythe test (Levene's, centred on medians) that ``a`` spreads more than ``b``; the two-sided
    p-value halved on the side the standard deviations fall."""
    estimate = f"std {names[0]} {_std(a):.3f} vs {names[1]} {_std(b):.3f}"
    if len(a) < 2 or len(b) < 2:
        return Test(part, "Brown-Forsythe test (one-sided)", units, len(a) + len(b), estimate, math.nan, math.nan)
    p = float(stats.levene(a, b, center="median").pvalue)
    wider = _std(a) > _std(b)
    return Test(part, "Brown-Forsythe test (one-sided)", units, len(a) + len(b), estimate,
                p / 2 if wider else 1 - p / 2, 1 - p / 2 if wider else p / 2)


def spearman_test(part: str, units: str, x: Sequence[float], y: Sequence[float]) -> Test:
    """Spearman's test that ``x`` and ``y`` are positively associated."""
    rho = spearman(x, y) if len(x) >= 3 else math.nan
    if len(x) < 3 or math.isnan(rho):
        return Test(part, "Spearman's test (one-sided)", units, len(x), "too few values", math.nan, math.nan)
    return Test(part, "Spearman's test (one-sided)", units, len(x), f"Spearman {rho:.3f}",
                float(stats.spearmanr(x, y, alternative="greater").pvalue),
                float(stats.spearmanr(x, y, alternative="less").pvalue))


def eta_squared(values: Sequence[float], groups: Sequence[str]) -> float:
    """The share of the variance of ``values`` that lies between ``groups`` (η²)."""
    grand = _mean(values)
    total = sum((v - grand) ** 2 for v in values)
    by: dict[str, list[float]] = {}
    for v, g in zip(values, groups):
        by.setdefault(g, []).append(v)
    between = sum(len(vs) * (_mean(vs) - grand) ** 2 for vs in by.values())
    return between / total if total else 0.0


def permutation_eta_test(part: str, units: str, values: Sequence[float], groups: Sequence[str]) -> Test:
    """Permutation test of η² (:func:`eta_squared`): how often shuffled group labels explain as much
    (:data:`PERMUTATIONS` shuffles, seeded)."""
    observed = eta_squared(values, groups)
    x = np.asarray(values, dtype=float)
    codes = np.unique(np.asarray(groups), return_inverse=True)[1]
    rng = np.random.default_rng(20260630)
    perms = np.argsort(rng.random((PERMUTATIONS, len(x))), axis=1)
    labels = codes[perms]
    k = int(codes.max()) + 1
    counts = np.stack([(labels == g).sum(axis=1) for g in range(k)], axis=1)
    sums = np.stack([np.where(labels == g, x, 0.0).sum(axis=1) for g in range(k)], axis=1)
    grand = x.mean()
    total = float(((x - grand) ** 2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        between = np.nansum(np.where(counts > 0, sums ** 2 / counts, 0.0), axis=1) - len(x) * grand ** 2
    as_large = int((between / total >= observed - 1e-12).sum()) if total else PERMUTATIONS
    p = (1 + as_large) / (1 + PERMUTATIONS)
    return Test(part, f"permutation test of η² ({PERMUTATIONS:,} shuffles of the family labels)", units, len(x),
                f"η² {observed:.3f}", p, 1.0)


def fisher_sign_test(part: str, units: str, x: Sequence[float], y: Sequence[float]) -> Test:
    """Fisher's exact test that the signs of ``x`` and ``y`` agree more often than their margins make
    likely (one-sided, positive association)."""
    table = [[sum(1 for a, b in zip(x, y) if (a > 0) == s1 and (b > 0) == s2) for s2 in (True, False)]
             for s1 in (True, False)]
    same = table[0][0] + table[1][1]
    return Test(part, "Fisher's exact test (one-sided)", units, len(x), f"{same} of {len(x)} keep their sign",
                float(stats.fisher_exact(table, alternative="greater").pvalue),
                float(stats.fisher_exact(table, alternative="less").pvalue))


# -- helpers -----------------------------------------------------------------------------------


def _family(row: Row) -> str:
    return families.get(str(row["family"])).slug


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _std(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    m = _mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _pearson(x: Sequence[float], y: Sequence[float]) -> float:
    mx, my = _mean(x), _mean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sx = math.sqrt(sum((a - mx) ** 2 for a in x))
    sy = math.sqrt(sum((b - my) ** 2 for b in y))
    return sxy / (sx * sy) if sx and sy else math.nan


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's ρ of two equally long sequences (average ranks for ties; NaN when either is constant)."""
    return _pearson(_ranks(x), _ranks(y))


def method_means(rows: Sequence[Row], key: str = "value") -> dict[str, tuple[str, float]]:
    """``method -> (family slug, mean of its rows' key)``."""
    values: dict[str, list[float]] = {}
    family: dict[str, str] = {}
    for r in rows:
        values.setdefault(r["method"], []).append(float(r[key]))
        family[r["method"]] = _family(r)
    return {m: (family[m], _mean(v)) for m, v in values.items()}


def _environments(rows: Sequence[Row]) -> list[str]:
    names = {str(r["environment"]) for r in rows}
    return sorted(names, key=lambda e: (PAPER_ENVIRONMENTS.index(e) if e in PAPER_ENVIRONMENTS else 99, e))


Cell = tuple[str, str]
"""An evaluation: (environment, LLM backbone)."""


def _cells(rows: Sequence[Row], metric: str | None = metric_registry.HEADLINE) -> dict[Cell, dict[str, float]]:
    """Fig. 2-style rows (one value per method, environment and backbone) as evaluations: per environment ×
    LLM backbone the value of each method on its points; a method without an LLM (:data:`NON_LLM`) has one value
    per environment and encoder, and enters every evaluation of its environment with its best encoder's.
    ``metric``: only rows of that metric (``None``: all)."""
    chosen = [r for r in rows if metric is None or r.get("metric", metric) == metric]
    cells: dict[Cell, dict[str, float]] = {}
    shared: dict[str, dict[str, float]] = {}
    for r in chosen:
        value = float(r["value"])
        if _family(r) in NON_LLM:
            env = shared.setdefault(str(r["environment"]), {})
            env[r["method"]] = max(value, env.get(r["method"], -math.inf))
        else:
            cells.setdefault((str(r["environment"]), str(r["backbone"])), {})[r["method"]] = value
    for (env, _), values in cells.items():
        values.update(shared.get(env, {}))
    return cells


def _lead(cell: Mapping[str, float], ahead: Callable[[str], bool], behind: Callable[[str], bool]) -> float | None:
    """The best value among the methods ``ahead`` minus the best among those ``behind`` in one evaluation
    (``None`` when either group has none there)."""
    a = [v for m, v in cell.items() if ahead(m)]
    b = [v for m, v in cell.items() if behind(m)]
    return max(a) - max(b) if a and b else None


def _baseline_prompt(method: str) -> bool:
    """A Direct method the paper's Table 1 lists as its own baseline (not gvl, which adapts Ma et al., 2024)."""
    return families.of_method(method).slug == "direct" and families.origin(method) == "baseline"


def _literature(method: str) -> bool:
    """A method the paper's Table 1 takes from the literature (not a baseline, not one of its extensions)."""
    return families.origin(method) == "literature"


def _prompting(method: str) -> bool:
    return families.of_method(method).slug in PROMPTING


def _not_prompting(method: str) -> bool:
    return not _prompting(method)


def _lead_tests(cells: Mapping[Cell, Mapping[str, float]], slices: Sequence[tuple[str, Callable[[Cell], bool]]],
                ahead: Callable[[str], bool], behind: Callable[[str], bool], units: str) -> list[Test]:
    """Per slice (a name and which evaluations it holds), a paired t-test over its evaluations that the best
    method ``ahead`` leads the best ``behind`` (one-sided: the mean lead is above zero)."""
    out = []
    for name, chosen in slices:
        leads = [d for c, values in cells.items() if chosen(c) and (d := _lead(values, ahead, behind)) is not None]
        out.append(mean_test(name, units, leads, test="paired t-test of the lead"))
    return out


def _environment_slices(cells: Mapping[Cell, Any]) -> list[tuple[str, Callable[[Cell], bool]]]:
    return [(f"environment {env}", lambda c, env=env: c[0] == env) for env in _environments(
        [{"environment": c[0]} for c in cells])]


def _tests_sentence(tests: Sequence[Test]) -> str:
    """The parts that hold and those that go against, in words."""
    held = [t.part for t in tests if t.outcome == "holds"]
    against = [t.part for t in tests if t.outcome == "against"]
    if len(held) == len(tests):
        return f"Every part holds at 5% ({len(tests)} of {len(tests)})."
    out = f"{len(held)} of {len(tests)} parts hold at 5%" + (" after Holm's correction" if len(tests) > 1 else "")
    return out + (f"; against the claim: {', '.join(against)}" if against else "") + "."


Outcome = tuple[str, str, list[tuple[str, Any]], list[Test]]
"""What a rule returns: verdict, summary, numbers and the tests (with Holm's adjustment)."""


def _decide(summary: str, numbers: list[tuple[str, Any]], tests: Sequence[Test]) -> Outcome:
    verdict, adjusted = verdict_of(tests)
    return verdict, f"{summary} {_tests_sentence(adjusted)}", numbers, adjusted


# -- one rule per claim ------------------------------------------------------------------------

_LEAD_UNITS = "evaluations (environment × LLM backbone) of the view, global Spearman"


def prompting_beats_literature(views: Views) -> Outcome:
    """Per environment, a paired t-test over its evaluations of the best Direct baseline (Table 1: Baseline)
    minus the best method Table 1 takes from the literature (its extensions sdpo-gt and codegen-avg are neither),
    both on the global Spearman of Fig. 2's paper slice."""
    cells = _cells(views["fig2"])
    tests = _lead_tests(cells, _environment_slices(cells), _baseline_prompt, _literature, _LEAD_UNITS)
    numbers: list[tuple[str, Any]] = [
        ("Direct baselines (Table 1)", ", ".join(m for m, s in families.TABLE1_SOURCES.items() if _baseline_prompt(m))),
        ("not counted as literature (Table 1: Extension)",
         ", ".join(m for m, s in families.TABLE1_SOURCES.items() if s == "Extension"))]
    summary = ("In each evaluation the best Direct baseline is compared with the best literature method on the same "
               "points; per environment a paired t-test asks whether the mean lead is above zero.")
    return _decide(summary, numbers, tests)


def holds_across_slices(views: Views) -> Outcome:
    """The test of :func:`prompting_beats_literature` in every slice: each environment, each LLM backbone
    (its evaluations over environments) and each modality (Fig. 2 over text, over images)."""
    cells = _cells(views["fig2"])
    slices = _environment_slices(cells)
    for backbone in sorted({c[1] for c in cells}):
        slices.append((f"backbone {backbone}", lambda c, b=backbone: c[1] == b))
    tests = _lead_tests(cells, slices, _baseline_prompt, _literature, _LEAD_UNITS)
    for modality in ("text", "image"):
        tests += _lead_tests(_cells(views[f"fig2-{modality}"]), [(f"modality {modality}", lambda c: True)],
                             _baseline_prompt, _literature, _LEAD_UNITS)
    summary = ("The lead of the best Direct baseline over the best literature method, tested in every environment, "
               "every LLM backbone and each modality (paired t-tests over the slice's evaluations).")
    return _decide(summary, [], tests)


def clusters_by_family(views: Views) -> Outcome:
    """η² of Fig. 2's method means by family, and a permutation test of it."""
    means = method_means(views["fig2"])
    values = [v for _, v in means.values()]
    groups = [fam for fam, _ in means.values()]
    test = permutation_eta_test("the family explains the spread of the method means", "methods (Figure 2 means)",
                                values, groups)
    by_family: dict[str, list[float]] = {}
    for fam, v in means.values():
        by_family.setdefault(fam, []).append(v)
    numbers: list[tuple[str, Any]] = [("share of variance between families (η²)", eta_squared(values, groups)),
                                      ("methods", len(values)), ("families", len(by_family))]
    for fam, vs in sorted(by_family.items(), key=lambda kv: -_mean(kv[1])):
        numbers.append((f"{families.get(fam).name}: range of method means", f"{min(vs):.3f} … {max(vs):.3f}"))
    summary = (f"The family explains {numbers[0][1]:.0%} of the variance of the {len(values)} method means of "
               "Figure 2; a permutation test asks how often shuffled family labels explain as much.")
    return _decide(summary, numbers, [test])


def _fig2_points_by_family(views: Views) -> dict[str, list[float]]:
    """Figure 2's points (environment × backbone values of each family's methods) by family slug."""
    by_family: dict[str, list[float]] = {}
    for r in views["fig2"]:
        by_family.setdefault(_family(r), []).append(float(r["value"]))
    return by_family


def code_widest_spread(views: Views) -> Outcome:
    """Brown-Forsythe tests of Code's Fig. 2 points against every other family's: wider than each."""
    by_family = _fig2_points_by_family(views)
    numbers: list[tuple[str, Any]] = [(f"{families.get(fam).name}: std of points", _std(vs))
                                      for fam, vs in sorted(by_family.items(), key=lambda kv: -_std(kv[1]))]
    code = by_family.get("code", [])
    tests = [spread_test(f"Code spreads more than {families.get(fam).name}",
                         "Figure 2 points (method × environment × backbone)", code, vs,
                         ("Code", families.get(fam).name))
             for fam, vs in by_family.items() if fam != "code"]
    summary = "Code's points against each other family's, by the spread around their medians."
    return _decide(summary, numbers, tests)


def direct_ranking_best_overall(views: Views) -> Outcome:
    """Welch's t-tests: Direct's and Ranking's Fig. 2 points above every other family's."""
    by_family = _fig2_points_by_family(views)
    order = sorted(by_family, key=lambda fam: -_mean(by_family[fam]))
    numbers: list[tuple[str, Any]] = [(f"{families.get(fam).name}: mean of points", _mean(by_family[fam]))
                                      for fam in order]
    tests = [welch_test(f"{families.get(top).name} above {families.get(fam).name}",
                        "Figure 2 points (method × environment × backbone)", by_family[top], by_family[fam],
                        (families.get(top).name, families.get(fam).name))
             for top in PROMPTING if top in by_family for fam in order if fam not in PROMPTING]
    summary = ("The two highest family means of Figure 2 are "
               + " and ".join(f"{families.get(f).name} ({_mean(by_family[f]):.3f})" for f in order[:2])
               + "; each prompting family is tested against every other.")
    return _decide(summary, numbers, tests)


def top_in_every_environment(views: Views) -> Outcome:
    """Per environment and per LLM backbone, a paired t-test over the evaluations of the best Direct or
    Ranking method minus the best other method (any of the paper's 21, either metric as Fig. 2 draws it)."""
    cells = _cells(views["fig2"], metric=None)
    slices = _environment_slices(cells)
    for backbone in sorted({c[1] for c in cells}):
        slices.append((f"backbone {backbone}", lambda c, b=backbone: c[1] == b))
    tests = _lead_tests(cells, slices, _prompting, _not_prompting,
                        "evaluations (environment × LLM backbone) of Figure 2, either metric")
    summary = ("In each evaluation the best Direct or Ranking method is compared with the best other method; per "
               "environment and per backbone a paired t-test asks whether the mean lead is above zero.")
    return _decide(summary, [], tests)


def complexity_does_not_help(views: Views) -> Outcome:
    """Per elaborate variant (:data:`COMPLEX_PAIRS`), a paired t-test over the evaluations both have that
    its gain over its family's simplest member is below :data:`SMALL_GAIN`."""
    cells = _cells(views["fig2"], metric=None)
    tests, numbers = [], []
    for variant, simple in COMPLEX_PAIRS:
        gains = [v[variant] - v[simple] for v in cells.values() if variant in v and simple in v]
        if not gains:
            continue
        numbers.append((f"{variant} − {simple}", _mean(gains)))
        tests.append(mean_test(f"{variant} gains less than {SMALL_GAIN} over {simple}",
                               "evaluations (environment × LLM backbone) both were run in", gains,
                               above=SMALL_GAIN, greater=False, test="paired t-test of the gain"))
    summary = (f"Each elaborate variant's gain over the simplest member of its family, tested against a margin of "
               f"{SMALL_GAIN}: 'little or no gain' holds where the gain is shown to be below it.")
    return _decide(summary, numbers, tests)


def difficulty_not_monotone(views: Views) -> Outcome:
    """The claim's three statements, each tested on Fig. 2's evaluations: Direct above zero in every
    environment, each Code method below zero on TerminalBench, self-distillation higher on TerminalBench than
    in FrozenLake and in ALFWorld.  The means over methods per environment are shown, not tested."""
    rows = views["fig2"]
    envs = _environments(rows)
    units = "method × LLM backbone values of Figure 2"
    tests = [mean_test(f"Direct above zero in {env}", units,
                       [float(r["value"]) for r in rows if r["environment"] == env and _family(r) == "direct"])
             for env in envs]
    for method in ("eureka", "codegen", "codegen-avg"):
        values = [float(r["value"]) for r in rows if r["environment"] == "TerminalBench" and r["method"] == method]
        if values:
            tests.append(mean_test(f"{method} below zero on TerminalBench", "LLM backbones", values, greater=False))
    sd = {env: [float(r["value"]) for r in rows if r["environment"] == env and _family(r) == "self-distillation"]
          for env in envs}
    for env in ("FrozenLake", "ALFWorld"):
        if sd.get(env) and sd.get("TerminalBench"):
            tests.append(welch_test(f"self-distillation higher on TerminalBench than in {env}", units,
                                    sd["TerminalBench"], sd[env], ("TerminalBench", env)))
    overall = {env: _mean([v for _, v in method_means([r for r in rows if r["environment"] == env]).values()])
               for env in envs}
    numbers: list[tuple[str, Any]] = [("mean over methods per environment",
                                       ", ".join(f"{e} {v:.3f}" for e, v in overall.items()))]
    summary = "Each statement of the claim tested on Figure 2's evaluations."
    return _decide(summary, numbers, tests)


def text_beats_image(views: Views) -> Outcome:
    """Per environment, an exact sign test over Fig. 4 (left)'s pairs (the same method and backbone on text and
    on images) that text is higher; all pairs pooled are shown, not used (pairs of one environment are not
    independent, and the claim is about every environment offering both)."""
    points = views["fig4-left"]
    tests = [sign_test(f"text above image in {env}", "method × backbone pairs (Figure 4, left)",
                       [float(r["text"]) - float(r["image"]) for r in points if r["environment"] == env],
                       "favour text") for env in _environments(points)]
    pooled = sign_test("all environments pooled", "method × environment × backbone pairs",
                       [float(r["text"]) - float(r["image"]) for r in points], "favour text")
    gap = _mean([float(r["text"]) - float(r["image"]) for r in points])
    numbers: list[tuple[str, Any]] = [
        ("points with text above image", pooled.estimate.replace(" favour text", "")),
        ("all pairs pooled: sign test, two-sided p (not used: pairs of one environment are not independent)",
         _fmt_p(min(1.0, 2 * min(pooled.p_value, pooled.p_against)))),
        ("mean of text − image", gap)]
    summary = (f"Text is higher than image in {pooled.estimate.replace(' favour text', '')} pairs (mean gap "
               f"{gap:.3f}); each environment is tested on its own.")
    return _decide(summary, numbers, tests)


FIG4_RIGHT_SHIFTS: tuple[tuple[str, bool], ...] = (("code", True), ("pre-trained", True), ("direct", False))
"""The families whose level the claim says moves, and whether up (V above Q)."""


def target_ordering_preserved(views: Views) -> Outcome:
    """Spearman's test of the methods' Q means against their V means (Fig. 4 right), and per family an exact
    sign test over its evaluations scored against both targets that V − Q moves the stated way."""
    rows = views["fig4-right"]
    by: dict[str, dict[str, float]] = {}
    for r in rows:
        by.setdefault(r["method"], {})[r["target"]] = float(r["mean"])
    both = sorted(m for m, t in by.items() if {"q", "v"} <= t.keys())
    tests = [spearman_test("the order of the methods is kept", "methods (Figure 4 right means)",
                           [by[m]["q"] for m in both], [by[m]["v"] for m in both])]
    envs = {str(r["environment"]) for r in views["reported"] if r["target"] == "v"}
    pairs: dict[tuple[str, str, str, str], dict[str, float]] = {}
    for r in views["reported"]:
        fam = _family(r)
        wanted = "image" if fam == "pre-trained" else "text"
        if r["environment"] in envs and r["method"] in both and r["modality"] == wanted and r["metric"] == metric_registry.HEADLINE:
            pairs.setdefault((r["method"], r["environment"], r["backbone"], fam), {})[r["target"]] = float(r["value"])
    numbers: list[tuple[str, Any]] = [("methods with Q and V", len(both))]
    for fam, up in FIG4_RIGHT_SHIFTS:
        diffs = [(t["v"] - t["q"]) * (1 if up else -1) for k, t in pairs.items() if k[3] == fam and {"q", "v"} <= t.keys()]
        if not diffs:
            continue
        name = families.get(fam).name
        tests.append(sign_test(f"{name}: V {'above' if up else 'below'} Q", "method × environment × backbone "
                               "evaluations scored against both targets", diffs,
                               f"move {'up' if up else 'down'} from Q to V"))
        numbers.append((f"{name}: mean of V − Q", _mean(diffs) * (1 if up else -1)))
        per_method = {}
        for k, t in pairs.items():
            if k[3] == fam and {"q", "v"} <= t.keys():
                per_method.setdefault(k[0], []).append(t["v"] - t["q"])
        numbers.append((f"{name}: mean of V − Q per method",
                        ", ".join(f"{m} {_mean(v):+.3f}" for m, v in sorted(per_method.items()))))
    summary = "The order of the methods under Q and V, and the direction each family's level moves."
    return _decide(summary, numbers, tests)


def labels_robust(views: Views) -> Outcome:
    """Fig. 5: the same method × backbone under the first and the second labels: signs kept (Fisher's exact
    test), order kept (Spearman's test), values nearly the same (a sign test that the absolute difference is
    below :data:`SMALL_GAIN` more often than not)."""
    rows = views["fig5"]
    x = [float(r["first_labels"]) for r in rows]
    y = [float(r["opus_labels"]) for r in rows]
    units = "method × backbone values on TerminalBench (Figure 5)"
    tests = [fisher_sign_test("the signs are kept", units, x, y), spearman_test("the order is kept", units, x, y),
             sign_test(f"the values differ by less than {SMALL_GAIN}", units,
                       [SMALL_GAIN - abs(a - b) for a, b in zip(x, y)], f"differ by less than {SMALL_GAIN}")]
    gap = _mean([abs(a - b) for a, b in zip(x, y)])
    summary = "The two labellings of TerminalBench compared value by value."
    return _decide(summary, [("mean absolute difference", gap)], tests)


def scale(views: Views) -> Outcome:
    """The reported rows' counts against the abstract's (:data:`PAPER_SCALE`): a count, no test."""
    rows = views["reported"]
    llm = {str(r["backbone"]) for r in rows if _family(r) not in NON_LLM}
    have = {"methods": len({r["method"] for r in rows}), "families": len({_family(r) for r in rows}),
            "environments": len({r["environment"] for r in rows}), "backbones": len(llm), "experiments": len(rows)}
    numbers: list[tuple[str, Any]] = [(f"{k}: paper · published data", f"{PAPER_SCALE[k]} · {have[k]}")
                                      for k in PAPER_SCALE]
    structure = all(have[k] == PAPER_SCALE[k] for k in PAPER_SCALE if k != "experiments")
    enough = have["experiments"] >= PAPER_SCALE["experiments"]
    verdict = "supported" if structure and enough else "partly" if structure else "contradicted"
    summary = (f"The published data has {have['methods']} methods, {have['families']} families, "
               f"{have['environments']} environments and {have['backbones']} LLM backbones, and "
               f"{have['experiments']} reported numbers" + ("." if enough else
                                                            f", not the over {PAPER_SCALE['experiments']:,} "
                                                            "experiments the paper counts."))
    return verdict, summary, numbers, []


Rule = Callable[[Views], Outcome]

RULES: dict[str, Rule] = {
    "prompting-beats-literature": prompting_beats_literature,
    "holds-across-slices": holds_across_slices,
    "clusters-by-family": clusters_by_family,
    "code-widest-spread": code_widest_spread,
    "direct-ranking-best-overall": direct_ranking_best_overall,
    "top-in-every-environment": top_in_every_environment,
    "complexity-does-not-help": complexity_does_not_help,
    "difficulty-not-monotone": difficulty_not_monotone,
    "text-beats-image": text_beats_image,
    "target-ordering-preserved": target_ordering_preserved,
    "labels-robust": labels_robust,
    "scale": scale,
}
"""The rule of each claim: views in, ``(verdict, summary, numbers, tests)`` out."""


def findings(views: Views, chosen: Sequence[Claim] | None = None) -> list[Finding]:
    """Every claim (``chosen``, default :func:`claims`) with its verdict computed from ``views``; a claim
    whose own view is empty is *no-data*."""
    if chosen is None:
        chosen = claims()[1]
    out = []
    for c in chosen:
        if not views.get(c.view):
            out.append(Finding(c, "no-data", f"{VIEWS[c.view].caption} has no rows yet."))
            continue
        verdict, summary, numbers, tests = RULES[c.id](views)
        out.append(Finding(c, verdict, summary, tuple(numbers), tuple(tests)))
    return out

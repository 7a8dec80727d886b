"""The headline claims of the QVal v1.0 paper and website, each checked against the published numbers.

The claims are project data (``data/qval-v1.0/claims.json``, :func:`claims`): our paraphrase, where the
paper or the website makes it, and the view that supports it.  The verdicts are computed here, one rule per
claim (:data:`RULES`), from the rows of the paper's figures as the site draws them over the authors'
reported numbers (:data:`VIEWS`; a view is a figure's ``rows``: Fig. 2's per-backbone values, Fig. 3's
means over backbones, ...), so a finding changes with the data.  Each rule returns a
:class:`Finding`: *supported*, *partly* or *contradicted* (:data:`VERDICTS`), a sentence with the numbers
it rests on, and those numbers as a small table.

How strict a rule is, is written next to it (the thresholds below).  A claim about "every" slice is
checked slice by slice: all of them hold is *supported*, at least half is *partly*, fewer is
*contradicted* (:func:`share_verdict`).  Nothing here knows about Django.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qval import families
from qval.paper.qval_v1.published import DATA_DIR, PublishedDataError

CLAIMS_FILE: Path = DATA_DIR / "claims.json"

VERDICTS: dict[str, str] = {
    "supported": "supported",
    "partly": "partly",
    "contradicted": "contradicted by the data",
    "no-data": "not checked: the view has no rows",
}
"""Each verdict and how a page says it (*no-data* before the published results are imported)."""

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

LITERATURE: tuple[str, ...] = ("code", "intrinsic", "self-distillation", "pre-trained", "embedding")
"""The families of methods taken from the literature (the paper's §3.2 cites a source for each); Direct is
the prompting baseline and Ranking the paper's own ranking baseline."""

PROMPTING: tuple[str, ...] = ("direct", "ranking")
"""The two simple prompting families."""

PAPER_ENVIRONMENTS: tuple[str, ...] = ("FrozenLake", "ALFWorld", "OpenApps", "TerminalBench")
"""The paper's environments from simpler closed-action to open-ended (its Figure 3 order)."""

CLUSTER_SUPPORTED: float = 0.6
CLUSTER_PARTLY: float = 0.3
"""Share of the variance of the method means (Fig. 2's bars) that the family explains (η²): from
:data:`CLUSTER_SUPPORTED` the clustering claim is supported, from :data:`CLUSTER_PARTLY` partly."""

WIDEST_BY_FAR: float = 1.5
""""By far the widest spread": the code family's standard deviation at least this many times the next."""

SMALL_GAIN: float = 0.1
"""A gain of an elaborate variant over its family's simplest member below this (a tenth of the correlation
scale) is small: the paper calls codegen-avg's gain over codegen (about 0.05) slight."""

COMPLEX_PAIRS: tuple[tuple[str, str], ...] = (
    ("direct-16", "direct-single"), ("direct-batched", "direct-single"), ("direct-sequential", "direct-single"),
    ("sdpo-gt", "sdpo"), ("codegen-avg", "codegen"),
)
"""(elaborate variant, simplest member of its family) as §4.1 names them."""

TEXT_SUPPORTED: float = 0.75
"""Share of Fig. 4 (left) points with text above image from which "text beats image" is supported (above
half: partly)."""

ORDER_SUPPORTED: float = 0.7
ORDER_PARTLY: float = 0.4
"""Spearman correlation of the methods' Q means with their V means (Fig. 4 right) from which the order
counts as preserved (partly)."""

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
class Finding:
    """A claim's verdict (:data:`VERDICTS`), the sentence that gives the numbers, and the numbers as
    ``(label, value)`` rows (a value is a float, an int or text)."""

    claim: Claim
    verdict: str
    summary: str
    numbers: tuple[tuple[str, float | int | str], ...] = ()

    @property
    def shown_numbers(self) -> list[tuple[str, str]]:
        """:attr:`numbers` as text: a float to three decimals, anything else as it is."""
        return [(label, f"{value:.3f}" if isinstance(value, float) else str(value)) for label, value in self.numbers]

    @property
    def verdict_label(self) -> str:
        """How the page says the verdict."""
        return VERDICTS[self.verdict]


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


# -- helpers -----------------------------------------------------------------------------------


def share_verdict(held: int, total: int) -> str:
    """Verdict of a claim about every one of ``total`` slices, ``held`` of which agree: all of them
    *supported*, at least half *partly*, fewer (or no slice at all) *contradicted*."""
    if total and held == total:
        return "supported"
    if total and 2 * held >= total:
        return "partly"
    return "contradicted"


def _family(row: Row) -> str:
    return families.get(str(row["family"])).slug


def _fig2_points_by_family(views: Views) -> dict[str, list[float]]:
    """Figure 2's points (environment × backbone values of each family's methods) by family slug."""
    by_family: dict[str, list[float]] = {}
    for r in views["fig2"]:
        by_family.setdefault(_family(r), []).append(float(r["value"]))
    return by_family


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


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


def _best(means: Mapping[str, tuple[str, float]], wanted: Sequence[str]) -> tuple[str, float] | None:
    """The method with the highest mean among the families ``wanted``, with its mean."""
    chosen = [(v, m) for m, (fam, v) in means.items() if fam in wanted]
    if not chosen:
        return None
    value, method = max(chosen)
    return method, value


def _direct_vs_literature(means: Mapping[str, tuple[str, float]]) -> tuple[tuple[str, float], tuple[str, float]] | None:
    direct, literature = _best(means, ("direct",)), _best(means, LITERATURE)
    return None if direct is None or literature is None else (direct, literature)


def _environments(rows: Sequence[Row]) -> list[str]:
    names = {str(r["environment"]) for r in rows}
    return sorted(names, key=lambda e: (PAPER_ENVIRONMENTS.index(e) if e in PAPER_ENVIRONMENTS else 99, e))


def _per_environment(fig3: Sequence[Row]) -> dict[str, dict[str, tuple[str, float]]]:
    """Fig. 3's means, ``environment -> method -> (family, mean over backbones)``."""
    return {env: method_means([r for r in fig3 if r["environment"] == env], "mean") for env in _environments(fig3)}


def _fmt(method_value: tuple[str, float]) -> str:
    return f"{method_value[0]} {method_value[1]:.3f}"


# -- one rule per claim ------------------------------------------------------------------------


def prompting_beats_literature(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """Per environment (Fig. 3), the best Direct method against the best method of the literature families."""
    numbers: list[tuple[str, Any]] = []
    wins, lost = 0, []
    slices = 0
    for env, means in _per_environment(views["fig3"]).items():
        pair = _direct_vs_literature(means)
        if pair is None:
            continue
        slices += 1
        (direct, literature) = pair
        numbers.append((f"{env}: best Direct", _fmt(direct)))
        numbers.append((f"{env}: best from the literature", _fmt(literature)))
        if direct[1] > literature[1]:
            wins += 1
        else:
            lost.append(f"{env} ({_fmt(literature)} against {_fmt(direct)})")
    summary = (f"The best Direct method leads the best literature method in {wins} of {slices} environments "
               f"(means over backbones, Figure 3)" + (f"; it does not in {', '.join(lost)}." if lost else "."))
    return share_verdict(wins, slices), summary, numbers


def holds_across_slices(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """The Direct-against-literature comparison in every environment (Fig. 3), every LLM backbone (Fig. 2's
    values averaged over environments) and each modality (Fig. 2 over text, over images)."""
    slices: list[tuple[str, tuple[tuple[str, float], tuple[str, float]] | None]] = []
    for env, means in _per_environment(views["fig3"]).items():
        slices.append((f"environment {env}", _direct_vs_literature(means)))
    fig2 = views["fig2"]
    llm = sorted({str(r["backbone"]) for r in fig2 if _family(r) == "direct"})
    for backbone in llm:
        slices.append((f"backbone {backbone}", _direct_vs_literature(
            method_means([r for r in fig2 if r["backbone"] == backbone]))))
    for modality in ("text", "image"):
        slices.append((f"modality {modality}", _direct_vs_literature(method_means(views[f"fig2-{modality}"]))))
    numbers: list[tuple[str, Any]] = []
    held, failed = 0, []
    compared = [(name, pair) for name, pair in slices if pair is not None]
    for name, (direct, literature) in compared:
        numbers.append((name, f"Direct {_fmt(direct)} · literature {_fmt(literature)}"))
        if direct[1] > literature[1]:
            held += 1
        else:
            failed.append(name)
    summary = (f"Direct leads the literature methods in {held} of {len(compared)} slices (each environment, each "
               f"LLM backbone, each modality)" + (f"; not in: {', '.join(failed)}." if failed else "."))
    return share_verdict(held, len(compared)), summary, numbers


def clusters_by_family(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """η²: the share of the variance of Fig. 2's method means that lies between families."""
    means = method_means(views["fig2"])
    values = [v for _, v in means.values()]
    grand = _mean(values)
    total = sum((v - grand) ** 2 for v in values)
    by_family: dict[str, list[float]] = {}
    for fam, v in means.values():
        by_family.setdefault(fam, []).append(v)
    between = sum(len(vs) * (_mean(vs) - grand) ** 2 for vs in by_family.values())
    eta2 = between / total if total else 0.0
    verdict = "supported" if eta2 >= CLUSTER_SUPPORTED else "partly" if eta2 >= CLUSTER_PARTLY else "contradicted"
    numbers: list[tuple[str, Any]] = [("share of variance between families (η²)", eta2),
                                      ("methods", len(values)), ("families", len(by_family))]
    for fam, vs in sorted(by_family.items(), key=lambda kv: -_mean(kv[1])):
        numbers.append((f"{families.get(fam).name}: range of method means",
                        f"{min(vs):.3f} … {max(vs):.3f}"))
    summary = (f"The family explains {eta2:.0%} of the variance of the {len(values)} method means of Figure 2 "
               f"(supported from {CLUSTER_SUPPORTED:.0%}, partly from {CLUSTER_PARTLY:.0%}).")
    return verdict, summary, numbers


def code_widest_spread(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """Standard deviation of every family's Fig. 2 points (environment × backbone values of its methods)."""
    by_family = _fig2_points_by_family(views)
    spread = sorted(((_std(vs), fam) for fam, vs in by_family.items()), reverse=True)
    numbers: list[tuple[str, Any]] = [(f"{families.get(fam).name}: std of points", s) for s, fam in spread]
    code = dict((fam, s) for s, fam in spread).get("code")
    if code is None or len(spread) < 2:
        return "contradicted", "No code results to compare.", numbers
    rival = next((s, fam) for s, fam in spread if fam != "code")
    ratio = code / rival[0] if rival[0] else math.inf
    verdict = ("supported" if spread[0][1] == "code" and ratio >= WIDEST_BY_FAR
               else "partly" if spread[0][1] == "code" else "contradicted")
    summary = (f"Code's points have a standard deviation of {code:.3f}, {ratio:.2f}× the next family's "
               f"({families.get(rival[1]).name}, {rival[0]:.3f}); 'by far' is read as at least {WIDEST_BY_FAR}×.")
    return verdict, summary, numbers


def direct_ranking_best_overall(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """Family means over every Fig. 2 point: are Direct and Ranking the two highest?"""
    by_family = _fig2_points_by_family(views)
    order = sorted(by_family, key=lambda fam: -_mean(by_family[fam]))
    numbers: list[tuple[str, Any]] = [(f"{families.get(fam).name}: mean of points", _mean(by_family[fam]))
                                      for fam in order]
    top = set(order[:2])
    verdict = "supported" if top == set(PROMPTING) else "partly" if top & set(PROMPTING) else "contradicted"
    summary = ("The two highest family means of Figure 2 are "
               + " and ".join(f"{families.get(f).name} ({_mean(by_family[f]):.3f})" for f in order[:2])
               + (f"; the next is {families.get(order[2]).name} ({_mean(by_family[order[2]]):.3f})."
                  if len(order) > 2 else "."))
    return verdict, summary, numbers


def top_in_every_environment(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """The best method per environment (Fig. 3) and per environment × backbone (Fig. 2): Direct or Ranking?"""
    numbers: list[tuple[str, Any]] = []
    env_failures = []
    per_env = _per_environment(views["fig3"])
    for env, means in per_env.items():
        top = _best(means, tuple(means[m][0] for m in means))
        assert top is not None
        best_direct = _best(means, ("direct",))
        best_ranking = _best(means, ("ranking",))
        numbers.append((f"{env}: best method", f"{_fmt(top)} ({families.get(means[top[0]][0]).name})"))
        if means[top[0]][0] not in PROMPTING:
            env_failures.append(f"{env}: {_fmt(top)} against the best Direct "
                                + (_fmt(best_direct) if best_direct else "none")
                                + (f" and Ranking {best_ranking[1]:.3f}" if best_ranking else ""))
    cells: dict[tuple[str, str], dict[str, tuple[str, float]]] = {}
    for r in views["fig2"]:
        cells.setdefault((str(r["environment"]), str(r["backbone"])), {})[r["method"]] = (_family(r), float(r["value"]))
    compared = {k: v for k, v in cells.items() if any(fam in PROMPTING for fam, _ in v.values())}
    led = sum(1 for v in compared.values() if max(v.values(), key=lambda fv: fv[1])[0] in PROMPTING)
    numbers.append(("environment × backbone cells led by Direct or Ranking", f"{led} of {len(compared)}"))
    if env_failures:
        verdict = "contradicted"
    else:
        verdict = "supported" if led == len(compared) else "partly"
    summary = (f"Direct or Ranking has the best mean in {len(per_env) - len(env_failures)} of {len(per_env)} "
               f"environments and the best value in {led} of {len(compared)} environment × backbone cells"
               + (f"; not in {'; '.join(env_failures)}." if env_failures else "."))
    return verdict, summary, numbers


def complexity_does_not_help(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """Each elaborate variant's Fig. 2 mean against its family's simplest member (:data:`COMPLEX_PAIRS`)."""
    means = method_means(views["fig2"])
    numbers: list[tuple[str, Any]] = []
    small, big, pairs = 0, [], 0
    for variant, simple in COMPLEX_PAIRS:
        if variant not in means or simple not in means:
            continue
        pairs += 1
        gain = means[variant][1] - means[simple][1]
        numbers.append((f"{variant} − {simple}", gain))
        if gain < SMALL_GAIN:
            small += 1
        else:
            big.append(f"{variant} (+{gain:.3f})")
    summary = (f"{small} of {pairs} elaborate variants gain less than {SMALL_GAIN} over the simplest member of their "
               f"family (Figure 2 means)" + (f"; larger gains: {', '.join(big)}." if big else "."))
    return share_verdict(small, pairs), summary, numbers


def difficulty_not_monotone(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """Four checks on Fig. 3: the mean over methods does not fall steadily with difficulty, Direct is positive
    everywhere, Code is negative on TerminalBench, self-distillation is higher on TerminalBench than in
    FrozenLake and ALFWorld."""
    per_env = _per_environment(views["fig3"])
    envs = list(per_env)

    def family_means(fam: str) -> dict[str, float]:
        out = {}
        for env in envs:
            vs = [v for f, v in per_env[env].values() if f == fam]
            if vs:
                out[env] = _mean(vs)
        return out

    checks: list[tuple[str, bool, str]] = []
    overall = [_mean([v for _, v in per_env[e].values()]) for e in envs]
    steady = []
    for fam in families.FAMILIES:
        series = list(family_means(fam.slug).values())
        if len(series) >= 3 and all(a >= b for a, b in zip(series, series[1:])):
            steady.append(fam.name)
    checks.append(("the mean over methods does not fall steadily from FrozenLake to TerminalBench",
                   len(overall) >= 3 and not all(a >= b for a, b in zip(overall, overall[1:])),
                   ", ".join(f"{e} {v:.3f}" for e, v in zip(envs, overall))
                   + " · families that do fall steadily: " + (", ".join(steady) or "none")))
    direct = [(env, m, v) for env in envs for m, (f, v) in per_env[env].items() if f == "direct"]
    lowest = min(direct, key=lambda t: t[2]) if direct else None
    checks.append(("every Direct method is above zero in every environment", lowest is not None and lowest[2] > 0,
                   f"lowest: {lowest[1]} in {lowest[0]} {lowest[2]:.3f}" if lowest else "no Direct results"))
    code_tb = {m: v for m, (f, v) in per_env.get("TerminalBench", {}).items() if f == "code"}
    checks.append(("every Code method is below zero on TerminalBench", bool(code_tb) and max(code_tb.values()) < 0,
                   ", ".join(f"{m} {v:.3f}" for m, v in code_tb.items()) or "no Code results on TerminalBench"))
    sd = family_means("self-distillation")
    simple = [sd[e] for e in ("FrozenLake", "ALFWorld") if e in sd]
    checks.append(("self-distillation is higher on TerminalBench than in FrozenLake and ALFWorld",
                   "TerminalBench" in sd and bool(simple) and sd["TerminalBench"] > max(simple),
                   ", ".join(f"{e} {v:.3f}" for e, v in sd.items()) or "no self-distillation results"))
    held = sum(ok for _, ok, _ in checks)
    numbers = [(name, f"{'yes' if ok else 'no'} ({detail})") for name, ok, detail in checks]
    summary = f"{held} of {len(checks)} parts of the claim hold on Figure 3's means over backbones."
    return share_verdict(held, len(checks)), summary, numbers


def text_beats_image(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """Share of Fig. 4 (left) points (method × environment × backbone on both modalities) where text is higher."""
    points = views["fig4-left"]
    text_higher = sum(1 for r in points if float(r["text"]) > float(r["image"]))
    share = text_higher / len(points) if points else 0.0
    gap = _mean([float(r["text"]) - float(r["image"]) for r in points]) if points else 0.0
    verdict = "supported" if share >= TEXT_SUPPORTED else "partly" if share > 0.5 else "contradicted"
    summary = (f"Text is higher than image in {text_higher} of {len(points)} points ({share:.0%}; supported from "
               f"{TEXT_SUPPORTED:.0%}), by {gap:.3f} on average.")
    return verdict, summary, [("points with text above image", f"{text_higher} of {len(points)}"),
                              ("mean of text − image", gap)]


def target_ordering_preserved(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """Spearman of the methods' Q and V means (Fig. 4 right), and the direction of the shift per family."""
    rows = views["fig4-right"]
    by: dict[str, dict[str, float]] = {}
    fam_of: dict[str, str] = {}
    for r in rows:
        by.setdefault(r["method"], {})[r["target"]] = float(r["mean"])
        fam_of[r["method"]] = _family(r)
    both = sorted(m for m, t in by.items() if {"q", "v"} <= t.keys())
    rho = spearman([by[m]["q"] for m in both], [by[m]["v"] for m in both]) if len(both) >= 3 else math.nan
    numbers: list[tuple[str, Any]] = [("methods with Q and V", len(both)), ("Spearman of Q means with V means", rho)]
    shifts = []
    for fam, up in (("code", True), ("pre-trained", True), ("direct", False)):
        diffs = [by[m]["v"] - by[m]["q"] for m in both if fam_of[m] == fam]
        if diffs:
            ok = (_mean(diffs) > 0) == up
            shifts.append(ok)
            numbers.append((f"{families.get(fam).name}: mean of V − Q", _mean(diffs)))
    verdict = ("contradicted" if math.isnan(rho) or rho < ORDER_PARTLY
               else "supported" if rho >= ORDER_SUPPORTED and all(shifts) else "partly")
    summary = (f"Over {len(both)} methods the Q means and V means correlate with Spearman {rho:.2f} (the order "
               f"counts as kept from {ORDER_SUPPORTED}); the shifts go the stated way in {sum(shifts)} of "
               f"{len(shifts)} families.")
    return verdict, summary, numbers


def labels_robust(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """Fig. 5: the same method × backbone under the first and the second labels, same sign and correlation."""
    rows = views["fig5"]
    x = [float(r["first_labels"]) for r in rows]
    y = [float(r["opus_labels"]) for r in rows]
    same = sum(1 for a, b in zip(x, y) if (a > 0) == (b > 0))
    rho = spearman(x, y) if len(rows) >= 3 else math.nan
    gap = _mean([abs(a - b) for a, b in zip(x, y)]) if rows else math.nan
    share = same / len(rows) if rows else 0.0
    verdict = ("supported" if share >= TEXT_SUPPORTED and rho >= ORDER_SUPPORTED
               else "partly" if share > 0.5 and rho >= ORDER_PARTLY else "contradicted")
    summary = (f"{same} of {len(rows)} method × backbone values keep their sign under the second labels; the two "
               f"sets correlate with Spearman {rho:.2f}, and differ by {gap:.3f} on average.")
    return verdict, summary, [("same sign", f"{same} of {len(rows)}"), ("Spearman between the two labellings", rho),
                              ("mean absolute difference", gap)]


def scale(views: Views) -> tuple[str, str, list[tuple[str, Any]]]:
    """The reported rows' counts against the abstract's (:data:`PAPER_SCALE`)."""
    rows = views["reported"]
    llm = {str(r["backbone"]) for r in rows if _family(r) not in ("pre-trained", "embedding")}
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
    return verdict, summary, numbers


Rule = Callable[[Views], tuple[str, str, list[tuple[str, Any]]]]

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
"""The rule of each claim: views in, ``(verdict, summary, numbers)`` out."""


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
        verdict, summary, numbers = RULES[c.id](views)
        out.append(Finding(c, verdict, summary, tuple(numbers)))
    return out

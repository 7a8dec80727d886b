"""The findings page: each headline claim of the QVal paper and website, paraphrased as project data with
where it is made, and a verdict that follows from tests of the imported reported rows (qval.findings,
board.findings), with Table 1's categories of methods."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from qval import findings
from tests.test_published import REFERENCE_DIR, _import

SEEDS = REFERENCE_DIR.parents[1] / "seeds"

EXPECTED = {
    "prompting-beats-literature": "contradicted",
    "holds-across-slices": "contradicted",
    "clusters-by-family": "supported",
    "code-widest-spread": "supported",
    "direct-ranking-best-overall": "supported",
    "top-in-every-environment": "partly",
    "complexity-does-not-help": "supported",
    "difficulty-not-monotone": "supported",
    "text-beats-image": "partly",
    "target-ordering-preserved": "partly",
    "labels-robust": "partly",
    "scale": "partly",
}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def test_every_claim_has_a_rule_a_view_a_place_and_our_own_words() -> None:
    provenance, claims = findings.claims()
    assert {c.id for c in claims} == set(findings.RULES) == set(EXPECTED)
    assert all(c.view in findings.VIEWS and c.where and c.text for c in claims)
    assert {c.source for c in claims} == {"paper", "website"} and provenance["paper"]
    sources = [SEEDS / "qval-paper.txt", SEEDS / "qval-website.txt"]
    if not all(p.is_file() for p in sources):
        pytest.skip(f"the paper and website texts are not at {SEEDS}")
    original = " ".join(" ".join(_words(p.read_text(encoding="utf-8"))) for p in sources)
    for c in claims:  # paraphrased: no run of six words is the paper's or the website's
        words = _words(c.text)
        runs = [" ".join(words[i:i + 6]) for i in range(len(words) - 5)]
        assert not [r for r in runs if f" {r} " in f" {original} "], c.id


def _test(p: float, against: float, part: str = "x") -> findings.Test:
    return findings.Test(part, "t", "units", 10, "est", p, against)


def test_the_verdict_follows_from_the_tests_of_the_parts() -> None:
    verdict = lambda *tests: findings.verdict_of(tests)[0]  # noqa: E731
    # Every part below 5%: supported with no correction (an intersection-union test).
    assert verdict(_test(0.04, 0.96), _test(0.03, 0.97), _test(0.045, 0.955)) == "supported"
    # One part open: Holm decides which parts hold; 0.04 x 3 is not below 5%.
    assert verdict(_test(0.001, 0.999), _test(0.5, 0.5)) == "partly"
    assert verdict(_test(0.04, 0.96), _test(0.03, 0.97), _test(0.5, 0.5)) == "inconclusive"
    # A part significantly the other way (after Holm) contradicts the claim, even when others hold.
    assert verdict(_test(0.001, 0.999), _test(0.9999, 0.0001)) == "contradicted"
    assert verdict(_test(0.001, 0.999), _test(0.97, 0.03), _test(0.9, 0.1)) == "partly"  # 0.03 x 2 > 5%
    assert verdict() == "inconclusive"
    _, adjusted = findings.verdict_of([_test(0.01, 0.99), _test(0.02, 0.98), _test(0.6, 0.4)])
    assert [round(t.p_adjusted, 6) for t in adjusted] == [0.03, 0.04, 0.6]
    assert [t.outcome for t in adjusted] == ["holds", "holds", "open"]
    assert "Holm over 3 parts" in adjusted[0].shown_read


def test_the_sign_test_is_the_exact_binomial() -> None:
    t = findings.sign_test("p", "pairs", [1.0] * 59 + [-1.0] * 29 + [0.0] * 3, "favour text")
    assert (t.n, t.estimate) == (88, "59 of 88 favour text")
    assert round(2 * t.p_value, 4) == 0.0018  # the two-sided p of 59 of 88
    assert sum(math.comb(88, k) for k in range(59, 89)) / 2 ** 88 == pytest.approx(t.p_value, rel=1e-9)


def _pairs(envs: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """Figure 4 (left) rows: per environment, how many pairs favour text and how many favour image."""
    rows = []
    for env, (text, image) in envs.items():
        for i in range(text + image):
            rows.append({"method": "direct-single", "family": "Direct", "environment": env, "backbone": f"b{i}",
                         "text": 0.5 if i < text else 0.1, "image": 0.3})
    return rows


def test_text_beats_image_is_tested_environment_by_environment() -> None:
    supported = findings.text_beats_image({"fig4-left": _pairs({"FrozenLake": (9, 1), "ALFWorld": (10, 0)})})
    assert supported[0] == "supported"
    # Pooled, 30 of 40 favour text (p < .01), but the pairs of one environment are not independent: the
    # environment that favours images, 0 of 10, goes against the claim.
    verdict, summary, numbers, tests = findings.text_beats_image(
        {"fig4-left": _pairs({"FrozenLake": (15, 0), "ALFWorld": (15, 0), "OpenApps": (0, 10)})})
    assert verdict == "contradicted" and "30 of 40" in summary
    assert [t.outcome for t in tests] == ["holds", "holds", "against"]
    assert [t.units for t in tests] == ["method × backbone pairs (Figure 4, left)"] * 3


def test_table_1_says_which_methods_are_baselines_extensions_or_from_the_literature() -> None:
    from qval import families

    paper = SEEDS / "qval-paper.txt"
    if not paper.is_file():
        pytest.skip(f"the paper text is not at {SEEDS}")
    text = paper.read_text(encoding="utf-8")
    table = text[text.index("\nTable 1:"):text.index("\n\n", text.index("Method group"))]
    printed = dict(re.findall(r"<code>([^<]+)</code> \(([^)]+)\)", table))
    printed["liv-l2"] = printed.pop("liv-12")  # the PDF extraction reads l2 as 12
    assert printed == families.TABLE1_SOURCES and len(printed) == 21
    assert {m for m in printed if families.origin(m) == "extension"} == {"sdpo-gt", "codegen-avg"}
    assert {m for m in printed if families.origin(m) == "baseline"} == {
        "ranking", "direct-16", "direct-batched", "direct-sequential", "direct-single"}
    assert families.origin("gvl") == "literature" and families.origin("best-of-q") == "other"


def _fig2(values: dict[tuple[str, str, str], float]) -> list[dict[str, Any]]:
    from qval import families

    return [{"method": m, "family": families.of_method(m).name, "environment": env, "backbone": b, "value": v,
             "metric": "spearman"} for (env, m, b), v in values.items()]


def test_an_extension_is_not_a_literature_method() -> None:
    backbones = [f"b{i}" for i in range(6)]
    rows = {("FrozenLake", "direct-single", b): 0.5 + 0.01 * i for i, b in enumerate(backbones)}
    rows.update({("FrozenLake", "codegen-avg", b): 0.9 for b in backbones})  # an extension: not counted
    rows.update({("FrozenLake", "codegen", b): 0.2 + 0.02 * i for i, b in enumerate(backbones)})
    verdict, _, _, tests = findings.prompting_beats_literature({"fig2": _fig2(rows)})
    assert verdict == "supported" and tests[0].estimate.startswith("mean 0.2")
    rows.update({("FrozenLake", "eureka", b): 0.9 - 0.01 * i for i, b in enumerate(backbones)})  # literature
    verdict, summary, _, tests = findings.prompting_beats_literature({"fig2": _fig2(rows)})
    assert verdict == "contradicted" and "against the claim: environment FrozenLake" in summary
    empty = findings.findings({name: [] for name in findings.VIEWS})
    assert {f.verdict for f in empty} == {"no-data"}
    assert abs(findings.spearman([1, 2, 3, 4], [10, 30, 20, 40]) - 0.8) < 1e-12


def _by_id(found: list[findings.Finding]) -> dict[str, findings.Finding]:
    return {f.claim.id: f for f in found}


def _number(f: findings.Finding, label: str) -> Any:
    return dict(f.numbers)[label]


def _part(f: findings.Finding, part: str) -> findings.Test:
    return next(t for t in f.tests if t.part == part)


@pytest.mark.django_db
def test_verdicts_and_numbers_come_from_the_imported_rows() -> None:
    from board.findings import current_findings

    assert {f.verdict for f in current_findings()} == {"no-data"}
    _import()
    found = _by_id(current_findings())
    assert {k: f.verdict for k, f in found.items()} == EXPECTED
    assert all(t.n > 0 and t.units and t.test for f in found.values() for t in f.tests)
    assert [k for k, f in found.items() if not f.tests] == ["scale"]  # a count, not a test

    # Text beats image: 59 of 88 pairs (sign test p = 0.002 pooled), but all of it is ALFWorld's.
    text = found["text-beats-image"]
    assert _number(text, "points with text above image") == "59 of 88"
    assert dict(text.shown_numbers)["all pairs pooled: sign test, two-sided p (not used: pairs of one environment "
                                    "are not independent)"] == "0.002"
    assert [(t.part, t.estimate, t.outcome) for t in text.tests] == [
        ("text above image in FrozenLake", "11 of 24 favour text", "open"),
        ("text above image in ALFWorld", "31 of 31 favour text", "holds"),
        ("text above image in OpenApps", "17 of 33 favour text", "open")]

    # Table 1: codegen-avg is the paper's extension, so FrozenLake's literature best is codegen or eureka, and
    # there the Direct baselines trail it on every backbone.
    lit = found["prompting-beats-literature"]
    assert [t.outcome for t in lit.tests] == ["against", "holds", "holds", "holds"]
    assert _part(lit, "environment FrozenLake").n == 6
    assert "against the claim: environment FrozenLake" in lit.summary
    top = found["top-in-every-environment"]  # codegen-avg leads FrozenLake, but not significantly over 10 parts
    assert _part(top, "environment FrozenLake").p_against < 0.05 < _part(top, "environment FrozenLake").p_adjusted_against
    assert "Holm over 10 parts" in _part(top, "environment FrozenLake").correction

    # The pre-trained shift is not counted: vip moves down by 0.181 while the three liv methods move up.
    order = found["target-ordering-preserved"]
    pre = _part(order, "Pre-trained: V above Q")
    assert (pre.estimate, pre.outcome) == ("6 of 11 move up from Q to V", "open")
    assert "vip -0.181" in _number(order, "Pre-trained: mean of V − Q per method")
    assert [_part(order, p).outcome for p in ("Code: V above Q", "Direct: V below Q")] == ["holds", "holds"]
    assert round(float(_part(order, "the order of the methods is kept").estimate.split()[-1]), 3) == 0.629

    assert round(_number(found["clusters-by-family"], "share of variance between families (η²)"), 3) == 0.920
    assert _part(found["clusters-by-family"], "the family explains the spread of the method means").p_value < 0.001
    assert round(_number(found["code-widest-spread"], "Code: std of points"), 3) == 0.437
    best = found["direct-ranking-best-overall"]
    assert (round(_number(best, "Ranking: mean of points"), 3), round(_number(best, "Direct: mean of points"), 3)) \
        == (0.437, 0.363)
    gains = found["complexity-does-not-help"]
    assert round(_number(gains, "codegen-avg − codegen"), 3) == 0.043  # paired over the 23 evaluations both have
    assert _part(gains, "codegen-avg gains less than 0.1 over codegen").n == 23
    robust = found["labels-robust"]
    assert _part(robust, "the signs are kept").estimate == "52 of 54 keep their sign"
    assert _part(robust, "the values differ by less than 0.1").outcome == "open"
    assert _number(found["scale"], "experiments: paper · published data") == "1200 · 578"


@pytest.mark.django_db
def test_a_verdict_follows_a_change_of_the_data() -> None:
    from board.findings import current_findings
    from submissions.models import Result

    _import()
    code = Result.objects.filter(submission__source="reported", submission__dataset__environment__slug="frozenlake",
                                 submission__method_name__in=["codegen", "codegen-avg", "eureka"])
    assert code.count() > 0
    code.update(value=-0.5)
    found = _by_id(current_findings())
    assert found["prompting-beats-literature"].verdict == "partly"
    assert _part(found["prompting-beats-literature"], "environment FrozenLake").outcome == "open"
    assert _part(found["top-in-every-environment"], "environment FrozenLake").outcome == "holds"


@pytest.mark.django_db
def test_the_page_shows_every_claim_with_its_verdict_and_tests_and_is_linked(client) -> None:  # type: ignore[no-untyped-def]
    _import()
    page = client.get("/published/findings/")
    assert page.status_code == 200
    text = page.content.decode()
    _, claims = findings.claims()
    for c in claims:
        section = re.search(rf'<section class="finding" id="claim-{c.id}"[^>]*data-verdict="([a-z-]+)">(.*?)</section>',
                            text, re.S)
        assert section, c.id
        assert section.group(1) == EXPECTED[c.id]
        body = section.group(2)
        assert findings.VERDICTS[EXPECTED[c.id]] in body and c.where in body.replace("&#x27;", "'")
        assert "finding-rule" in body and (c.id == "scale") == ('class="finding-tests"' not in body), c.id
    image = re.search(r'id="claim-text-beats-image".*?</section>', text, re.S).group(0)
    assert re.search(r'<tr data-outcome="holds"><td>text above image in ALFWorld</td><td>sign test \(exact, '
                     r'one-sided\)</td><td>method × backbone pairs \(Figure 4, left\)</td>\s*<td class="num">31</td>',
                     image)
    assert 'id="verdict-rule"' in text
    for code, rule in findings.VERDICT_RULE.items():
        if code != "no-data":
            assert rule.replace("'", "&#x27;") in text, code
    assert 'href="/figures/paper/fig3/"' in text and 'href="/figures/paper/fig4-left/"' in text
    assert 'href="/leaderboard/?source=reported"' in text
    for url in ("/figures/paper/fig2/", "/how-we-score/", "/datasets/qval-v1.0-frozenlake@1.0/"):
        assert 'href="/published/findings/"' in client.get(url).content.decode(), url


def test_claims_file_is_checked(tmp_path: Path) -> None:
    bad = tmp_path / "claims.json"
    bad.write_text('{"provenance": {}, "claims": [{"id": "nope", "source": "paper", "where": "x", "text": "y", '
                   '"view": "fig2"}]}')
    with pytest.raises(findings.PublishedDataError, match="nope"):
        findings.claims(bad)

"""The findings page: each headline claim of the QVal paper and website, paraphrased as project data with
where it is made, and a verdict computed from the imported reported rows (qval.findings, board.findings)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from qval import findings
from tests.test_published import REFERENCE_DIR, _import

SEEDS = REFERENCE_DIR.parents[1] / "seeds"

EXPECTED = {
    "prompting-beats-literature": "partly",
    "holds-across-slices": "partly",
    "clusters-by-family": "supported",
    "code-widest-spread": "supported",
    "direct-ranking-best-overall": "supported",
    "top-in-every-environment": "contradicted",
    "complexity-does-not-help": "supported",
    "difficulty-not-monotone": "supported",
    "text-beats-image": "partly",
    "target-ordering-preserved": "partly",
    "labels-robust": "supported",
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


def _fig3(values: dict[tuple[str, str], float]) -> list[dict[str, Any]]:
    from qval import families

    return [{"method": m, "family": families.of_method(m).name, "environment": env, "mean": v}
            for (env, m), v in values.items()]


def test_rules_follow_their_numbers() -> None:
    assert [findings.share_verdict(h, 4) for h in (4, 3, 2, 1)] == ["supported", "partly", "partly", "contradicted"]
    assert findings.share_verdict(0, 0) == "contradicted"
    leads = _fig3({("FrozenLake", "direct-single"): 0.5, ("FrozenLake", "codegen"): 0.4,
                   ("ALFWorld", "direct-16"): 0.3, ("ALFWorld", "sdpo"): -0.1, ("ALFWorld", "ranking"): 0.2})
    assert findings.prompting_beats_literature({"fig3": leads})[0] == "supported"
    behind = _fig3({("FrozenLake", "direct-single"): 0.1, ("FrozenLake", "vip"): 0.4,
                    ("ALFWorld", "direct-16"): 0.3, ("ALFWorld", "verifier"): 0.35})
    verdict, summary, _ = findings.prompting_beats_literature({"fig3": behind})
    assert verdict == "contradicted" and "0 of 2" in summary
    assert abs(findings.spearman([1, 2, 3, 4], [10, 30, 20, 40]) - 0.8) < 1e-12
    empty = findings.findings({name: [] for name in findings.VIEWS})
    assert {f.verdict for f in empty} == {"no-data"}


def _by_id(found: list[findings.Finding]) -> dict[str, findings.Finding]:
    return {f.claim.id: f for f in found}


def _number(f: findings.Finding, label: str) -> Any:
    return dict(f.numbers)[label]


@pytest.mark.django_db
def test_verdicts_and_numbers_come_from_the_imported_rows() -> None:
    from board.findings import current_findings

    assert {f.verdict for f in current_findings()} == {"no-data"}
    _import()
    found = _by_id(current_findings())
    assert {k: f.verdict for k, f in found.items()} == EXPECTED

    # The website's "best in every environment": FrozenLake's best is codegen-avg, far above every Direct method.
    top = found["top-in-every-environment"]
    assert _number(top, "FrozenLake: best method") == "codegen-avg 0.938 (Code)"
    assert "codegen-avg 0.938 against the best Direct direct-batched 0.344 and Ranking 0.808" in top.summary
    assert _number(top, "environment × backbone cells led by Direct or Ranking") == "18 of 24"
    assert [_number(top, f"{env}: best method").split()[0] for env in ("ALFWorld", "OpenApps", "TerminalBench")] \
        == ["direct-single", "direct-16", "direct-single"]

    lit = found["prompting-beats-literature"]
    assert "3 of 4 environments" in lit.summary
    assert _number(lit, "FrozenLake: best from the literature") == "codegen-avg 0.938"
    assert _number(lit, "TerminalBench: best Direct") == "direct-single 0.361"
    assert "11 of 12 slices" in found["holds-across-slices"].summary
    assert round(_number(found["clusters-by-family"], "share of variance between families (η²)"), 3) == 0.920
    assert round(_number(found["code-widest-spread"], "Code: std of points"), 3) == 0.437
    best = found["direct-ranking-best-overall"]
    assert (round(_number(best, "Ranking: mean of points"), 3), round(_number(best, "Direct: mean of points"), 3)) \
        == (0.437, 0.363)
    gains = found["complexity-does-not-help"]
    assert round(_number(gains, "codegen-avg − codegen"), 3) == 0.050  # Fig. 2: 0.172 − 0.123
    assert round(_number(gains, "direct-16 − direct-single"), 3) == 0.017
    steps = dict(found["difficulty-not-monotone"].shown_numbers)
    assert steps["every Code method is below zero on TerminalBench"] == \
        "yes (eureka -0.144, codegen -0.284, codegen-avg -0.328)"
    assert _number(found["text-beats-image"], "points with text above image") == "59 of 88"
    assert round(_number(found["target-ordering-preserved"], "Spearman of Q means with V means"), 3) == 0.629
    assert _number(found["labels-robust"], "same sign") == "52 of 54"
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
    assert found["prompting-beats-literature"].verdict == "supported"
    assert _number(found["prompting-beats-literature"], "FrozenLake: best from the literature") == "Δbelief 0.301"
    assert _number(found["top-in-every-environment"], "FrozenLake: best method") == "ranking 0.808 (Ranking)"


@pytest.mark.django_db
def test_the_page_shows_every_claim_with_its_verdict_and_is_linked(client) -> None:  # type: ignore[no-untyped-def]
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
    assert "codegen-avg 0.938" in text and "direct-batched 0.344" in text
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

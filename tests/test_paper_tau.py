"""The Kendall τ of the paper's appendix tables (:mod:`qval.paper.qval_v1.tau`): the data file is the conversion of
the paper's text, each τ belongs to exactly one reported row, the import puts it on the row (API and pages),
and the count of published numbers the site states is the count of its data files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from qval import errata
from qval.paper.qval_v1 import tau as paper_tau
from qval.paper.qval_v1 import published
from qval.paper.qval_v1 import relabelled

PAPER_TEXT = Path(__file__).resolve().parents[1].parent / "shared" / "seeds" / "qval-paper.txt"


@pytest.fixture(scope="module")
def paper_text() -> str:
    if not PAPER_TEXT.is_file():
        pytest.skip(f"paper text not found at {PAPER_TEXT}")
    return PAPER_TEXT.read_text(encoding="utf-8")


def _key(c: Any) -> tuple[str, ...]:
    return (c.environment, c.target, c.modality, c.method, c.backbone)


def test_tau_file_is_the_conversion_of_the_paper_text(paper_text: str) -> None:
    _, records = published.reported()
    assert json.loads(paper_tau.TAU_FILE.read_text(encoding="utf-8")) == paper_tau.convert_tau(paper_text, records)
    provenance, cells = paper_tau.tau_cells()
    assert provenance["reading"] and provenance["not_read"]
    # Every parsed cell matches exactly one reported row (of its metric), and no row gets two.
    by_key: dict[tuple[str, ...], list[published.ReportedResult]] = {}
    for r in records:
        by_key.setdefault(_key(r), []).append(r)
    assert all(len(by_key[_key(c)]) == 1 and by_key[_key(c)][0].metric == c.metric for c in cells)
    assert len({_key(c) for c in cells}) == len(cells) == 467
    assert {t.number for t in paper_tau.TABLES} == set(range(5, 19)) - {6}
    global_rows = [r for r in records if r.metric == "spearman"]
    assert (len(global_rows), sum(c.metric == "spearman" for c in cells)) == (472, 467)
    assert sum(c.metric == "ranking_spearman" for c in cells) == 0  # the paper prints no state-local τ
    # The reading is right: every printed ρ next to a τ equals the authors' number, but for the errata's cells.
    wrong = {(c.table, c.method, c.backbone) for c in paper_tau.rho_disagreements(cells, records)}
    assert wrong == {(e.table, e.method, e.backbone) for e in errata.errata()[1]}
    assert sum(c.rho is not None for c in cells) == 467 - sum(c.low is not None for c in cells)
    # The same reading as the errata's for the ρ lines of Tables 7 and 13.
    for table in errata.TABLES:
        theirs = errata.paper_cells(paper_text, table)
        ours = {(c.method, c.backbone): c.rho for c in cells if c.table == table.number and c.rho is not None}
        assert ours and all(theirs[k] == v for k, v in ours.items())


@pytest.mark.parametrize(("table", "method", "backbone", "printed"), [
    (5, "gvl", "Gemma4 26B-A4B", "0.166*"),
    (5, "codegen", "Gemma4 26B-A4B", "-0.268 \\pm 0.051"),
    (5, "codegen-avg", "Qwen3.5 122B-A10B", "-0.246"),
    (9, "codegen-avg", "Gemma4 26B-A4B", "0.380***"),
    (12, "codegen-avg", "Gemma4 26B-A4B", "-0.192^*"),
    (13, "eureka", "Qwen3.5 9B", "0.875***"),
    (14, "vip", "Self", "0.015"),
    (18, "vlm-rm", "SigLIP", "-0.297***"),
])
def test_spot_values_are_the_printed_ones(paper_text: str, table: int, method: str, backbone: str,
                                          printed: str) -> None:
    _, cells = paper_tau.tau_cells()
    (cell,) = [c for c in cells if (c.table, c.method, c.backbone) == (table, method, backbone)]
    line = paper_text.splitlines()[cell.line - 1]
    assert printed in line.split("\t")
    assert cell.value == float(re.match(r"-?\d+\.\d+", printed).group())  # type: ignore[union-attr]
    assert cell.stars == printed.count("*") * "*"
    if method == "codegen":
        assert (cell.std, cell.low, cell.high) == (0.051, -0.345, -0.184)


def test_lines_the_reading_refuses(paper_text: str) -> None:
    """A table whose printed lines are not the expected ones is refused, not read into wrong rows."""
    _, records = published.reported()
    broken = paper_text.replace("\nsdpo-gt\tρ\t0.072", "\nsdpo\tρ\t0.072", 1)
    with pytest.raises(published.PublishedDataError, match="Table 5"):
        paper_tau.paper_tau(broken, records)
    with pytest.raises(published.PublishedDataError, match="reported rows"):
        paper_tau.paper_tau(paper_text, [r for r in records if r.method != "vip"])


def test_published_numbers_are_the_count_of_the_data_files() -> None:
    reported = json.loads(published.REPORTED_FILE.read_text(encoding="utf-8"))["records"]
    tau = json.loads(paper_tau.TAU_FILE.read_text(encoding="utf-8"))
    table6 = json.loads(relabelled.TABLE6_FILE.read_text(encoding="utf-8"))["records"]
    errata_cells = json.loads(errata.ERRATA_FILE.read_text(encoding="utf-8"))["errata"]
    col = {name: i for i, name in enumerate(tau["columns"])}
    want = (len(reported) + sum(r[-1] is not None for r in reported)
            + len(tau["cells"]) + sum((c[col["std"]] is not None) + (c[col["low"]] is not None)
                                      + (c[col["high"]] is not None) for c in tau["cells"])
            + sum(sum(v is not None for k, v in r.items() if k not in ("method", "backbone") and not k.endswith("stars"))
                  for r in table6)
            + len(errata_cells))
    assert sum(n.count for n in paper_tau.published_numbers()) == want == 1473


def _import() -> Any:
    from submissions.importing import import_results

    return import_results(resamples=0)


@pytest.mark.django_db
def test_the_import_puts_the_papers_tau_on_the_reported_rows(client) -> None:  # type: ignore[no-untyped-def]
    from submissions.models import Result

    _import()
    _, cells = paper_tau.tau_cells()
    taus = Result.objects.filter(submission__source="reported", metric="kendall_tau")
    assert taus.count() == 457 and all(r.p_value is None and r.details["paper"]["table"] for r in taus)  # 10 errata
    local = Result.objects.filter(submission__source="reported", metric="ranking_spearman",
                                  details__has_key="kendall_tau")
    assert local.count() == 0
    by_key = {(c.environment, c.target, c.modality, c.method, c.backbone): c.value for c in cells
              if c.metric == "spearman"}
    rows = json.loads(client.get("/leaderboard/?source=reported&format=json").getvalue())["rows"]
    assert len(rows) == 578
    assert all(r["kendall_tau"] is None for r in rows if r["spearman"] is None)  # state-local rows
    with_tau = [r for r in rows if r["kendall_tau"] is not None]
    assert len(with_tau) == 457 and {r["kendall_tau"] for r in with_tau} <= set(by_key.values())
    api = client.get("/api/v1/leaderboard/", {"source": "reported", "method": "eureka", "page_size": 50}).json()
    got = [r for r in api["results"] if r.get("kendall_tau") is not None]
    assert got and len(got) == len(api["results"])
    assert 0.875 in {r["kendall_tau"] for r in got}  # Table 13, FrozenLake Q text, Qwen3.5 9B
    # A reported row's own page shows its τ.
    row = taus.get(submission__method_name="eureka", submission__backbone_name="Qwen3.5 9B",
                   submission__target="q", submission__modality="text", submission__dataset__slug="qval-v1.0-frozenlake")
    assert row.value == 0.875 and row.details["paper"]["table"] == 13
    assert "0.875" in client.get(f"/results/{row.submission_id}/").content.decode()
    # Importing again keeps the rows (the τ file is part of the digest), and the pages say how many numbers.
    assert _import().results == 0
    # A database imported under the previous layout (ρ alone) gets the τ on its next import.
    from qval.paper.qval_v1.importer import REPORTED_LAYOUT
    from submissions.models import Submission

    reported = Submission.objects.filter(source="reported")
    for sub in reported:
        sub.provenance["data_sha256"] = f"{published.digest(published.REPORTED_FILE)}:{REPORTED_LAYOUT - 1}"
        sub.save(update_fields=["provenance"])
    taus.delete()
    assert _import().results == 578 + 457 and taus.count() == 457
    total = str(sum(n.count for n in paper_tau.published_numbers()))
    for url in ("/how-we-score/", "/datasets/qval-v1.0-frozenlake@1.0/"):
        page = client.get(url).content.decode()
        assert f'<strong id="published-numbers-total">{total}</strong>' in page, url


def test_the_line_marked_tau_under_a_ranking_style_method_is_the_next_method_s_rho(paper_text: str) -> None:
    """The paper prints no τ of a ranking-style method ("mean ± std over per-trajectory Spearman"): in Tables 5, 7,
    10 and 13 the line marked τ under sdpo holds sdpo-gt's ρ ± std and the one under Δ belief ranking's, cell for
    cell equal to the authors' numbers and stds, so neither is read as a τ."""
    assert "Ranking-style methods (ranking, sdpo, sdpo-gt, Δ belief) show mean \\pm std over per-trajectory" \
        in paper_text
    records = {_key(r): r for r in published.reported()[1]}
    lines = paper_text.splitlines()
    matched = 0
    for table in (5, 7, 10, 13):
        start = next(i for i, line in enumerate(lines) if line.startswith(f"Table {table}:"))
        end = next(i for i, line in enumerate(lines) if line.startswith(f"Table {table + 1}:"))
        env = next(t.environment for t in paper_tau.TABLES if t.number == table)
        # The line holding sdpo's ρ is labelled sdpo in Table 7, sdpo-gt where the labels slip (Tables 5, 10, 13).
        follows = {"Δ belief": "ranking", ("sdpo" if table == 7 else "sdpo-gt"): "sdpo-gt"}
        for i in range(start, end):
            label, kind = (lines[i].split("\t") + ["", ""])[:2]
            if kind != "ρ" or label not in follows or lines[i + 1].split("\t")[1] != "τ":
                continue
            nxt = follows[label]
            cells = [c.strip() for c in lines[i + 1].split("\t")[2:] if c.strip()][:len(errata.BACKBONES)]
            for backbone, cell in zip(errata.BACKBONES, cells):
                found = re.match(r"^\$?(-?\d+\.\d+) (?:\\pm|±) (\d+\.\d+)", cell)
                if found is None:
                    continue
                r = records[(env, "q", "text", nxt, backbone)]
                assert abs(float(found.group(1)) - r.value) <= errata.ROUNDING + 1e-9, (table, label, backbone)
                assert abs(float(found.group(2)) - r.std) <= errata.ROUNDING + 1e-9, (table, label, backbone)
                matched += 1
    assert matched == 44  # 38 once read as state-local τ, and Table 13's Δ belief line
    assert not [c for c in paper_tau.tau_cells()[1] if c.metric != "spearman"]


@pytest.mark.django_db
def test_a_state_local_row_shows_no_tau(client) -> None:  # type: ignore[no-untyped-def]
    _import()
    rows = json.loads(client.get("/leaderboard/?source=reported&format=json").getvalue())["rows"]
    local = [r for r in rows if r["ranking_spearman"] is not None]
    assert len(local) == 106 and all(r["kendall_tau"] is None and "ranking_kendall_tau" not in r for r in local)
    board = client.get("/leaderboard/", {"source": "reported", "method": "Δbelief", "environment": "terminalbench"})
    tau_cells = re.findall(r'<td class="num" data-metric="kendall_tau">(.*?)</td>', board.content.decode(), re.S)
    assert tau_cells and all("not reported" in c for c in tau_cells), tau_cells


def test_the_marks_beside_each_rho_are_the_printed_ones(paper_text: str) -> None:
    """The paper prints no p-value, only significance marks (its Appendix E legend); those beside each ρ are read
    from the ρ line above the τ, in the τ's column."""
    assert "Significance markers: * $p < .10$, ** $p < .01$, *** $p < .001$" in paper_text
    # Every "p = …" or "p < …" of the text is a decoding setting (top-p) or that legend: no p-value is printed.
    found = [paper_text[m.start() - 12:m.end()] for m in re.finditer(r"\bp\s*[=<≤]\s*0?\.\d+", paper_text)]
    assert len(found) == 5 and all(any(k in f for k in ("top-}p=", "with $p = ", "* $p < .")) for f in found), found
    lines = paper_text.splitlines()
    _, cells = paper_tau.tau_cells()
    read = [c for c in cells if c.rho is not None]
    assert all(c.rho_stars is not None for c in read) and all(c.rho_stars is None for c in cells if c.rho is None)
    assert sum(bool(c.rho_stars) for c in read) > 250
    for c in read:
        rho_line = lines[c.line - 2].split("\t")
        assert rho_line[1] == "ρ" and lines[c.line - 1].split("\t")[1] == "τ", c
        printed = {"".join(m.groups()) for x in rho_line[2:] if (m := re.match(r"\$?(-?\d+\.\d+)\^?(\**)", x.strip()))}
        assert f"{c.rho:.3f}{c.rho_stars}" in printed, c


@pytest.mark.django_db
def test_the_printed_marks_are_shown_beside_reported_numbers(client) -> None:  # type: ignore[no-untyped-def]
    from submissions.models import Result

    _import()
    _, cells = paper_tau.tau_cells()
    cell = next(c for c in cells if (c.table, c.method, c.backbone) == (13, "eureka", "Qwen3.5 9B"))
    assert cell.rho_stars and cell.stars == "***"
    rho = Result.objects.get(submission__source="reported", metric="spearman", submission__method_name="eureka",
                             submission__backbone_name="Qwen3.5 9B", submission__target="q",
                             submission__modality="text", submission__dataset__slug="qval-v1.0-frozenlake")
    assert rho.p_value is None and rho.details["paper"] == {"table": 13, "line": cell.line - 1, "stars": cell.rho_stars}
    # The errata's cells keep none of the paper's marks, nor the τ printed under them (both belong to its other
    # number), and show marks computed from the authors' number and its point count instead.
    for e in errata.errata()[1]:
        wrong = Result.objects.get(submission__source="reported", metric="spearman", submission__method_name=e.method,
                                   submission__backbone_name=e.backbone, submission__target=e.target,
                                   submission__modality=e.modality,
                                   submission__dataset__environment__name=e.environment)
        assert "paper" not in wrong.details, e
        assert wrong.details["computed_marks"]["stars"] == errata.computed_marks(e).stars, e
        assert not Result.objects.filter(submission=wrong.submission, metric="kendall_tau").exists(), e
    shown = Result.objects.get(submission__source="reported", metric="spearman", submission__method_name="verifier",
                               submission__backbone_name="Gemma4 31B", submission__target="q",
                               submission__modality="text", submission__dataset__environment__name="FrozenLake")
    assert (round(shown.value, 4), shown.details["computed_marks"]["stars"]) == (0.4947, "***")
    board = client.get("/leaderboard/", {"source": "reported", "method": "verifier", "environment": "frozenlake",
                                         "backbone": "Gemma4 31B", "target": "q", "modality": "text"}).content.decode()
    assert re.search(r'data-metric="spearman">0\.495<span class="computed-marks" title="[^"]+">\*\*\*</span></td>', board)
    assert "computed from the authors' number and its point count" in board
    page = client.get(f"/results/{shown.submission_id}/").content.decode()
    assert "0.495***" in page and 'id="computed-marks"' in page and "p = 1.68e-07 at 100 points" in page
    erratum_api = client.get("/api/v1/leaderboard/", {"source": "reported", "method": "verifier",
                                                      "environment": "frozenlake", "backbone": "Gemma4 31B",
                                                      "target": "q", "modality": "text"}).json()["results"]
    assert [(r["spearman_marks"], r["kendall_tau"]) for r in erratum_api] == [("***", None)]
    api = client.get("/api/v1/leaderboard/", {"source": "reported", "method": "eureka", "environment": "frozenlake",
                                              "backbone": "Qwen3.5 9B", "target": "q", "modality": "text"}).json()
    (row,) = api["results"]
    assert (row["spearman_p"], row["spearman_marks"], row["kendall_tau_marks"]) == (None, cell.rho_stars, cell.stars)
    board = client.get("/leaderboard/", {"source": "reported", "method": "eureka", "environment": "frozenlake",
                                         "backbone": "Qwen3.5 9B", "target": "q", "modality": "text"}).content.decode()
    assert re.search(rf'data-metric="spearman">{rho.value:.3f}{re.escape(cell.rho_stars)}</td>', board)
    assert re.search(rf'data-metric="kendall_tau">{cell.value:.3f}\*\*\*</td>', board)
    page = client.get(f"/results/{rho.submission_id}/").content.decode()
    assert f"{rho.value:.3f}{cell.rho_stars}" in page and 'id="printed-marks"' in page

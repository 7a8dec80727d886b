"""Method × environment tables (``board/tables.py``): a cell per method and environment read off the test
boards, the average only over complete rows, server-side sort, CSV/JSON equal to the page, no dev row."""

from __future__ import annotations

import csv
import html
import io
import re

import pytest

from leaderboard.models import Dataset, Environment
from submissions.models import Submission
from tests.test_boards import run

pytestmark = pytest.mark.django_db


def hosted(slug: str, name: str) -> Dataset:
    """A hosted dataset of an environment of its own (its board needs no states: the rows are stored results)."""
    env = Environment.objects.create(slug=slug, name=name.split()[0])
    return Dataset.objects.create(environment=env, slug=slug, version="1.0", name=name, fingerprint=slug,
                                  modalities=["text"], hosted=True)


@pytest.fixture
def two_envs(staff, user):  # type: ignore[no-untyped-def]
    """Two hosted datasets with three methods of the platform (one missing a column), a second backbone,
    a worse repeat, dev results and a self-reported file."""
    alpha, beta = hosted("alpha", "Alpha maze"), hosted("beta", "Beta house")
    run(alpha, staff, "m1", 0.80, (0.75, 0.85))
    run(alpha, staff, "m1", 0.50, (0.45, 0.55))  # a worse repeat: not the cell
    run(alpha, staff, "m1", 0.85, (0.80, 0.90), backbone="other")  # best on any backbone
    run(beta, staff, "m1", 0.60, (0.55, 0.65))
    run(alpha, staff, "m2", 0.90, (0.85, 0.95))
    run(beta, staff, "m2", 0.30, (0.25, 0.35))
    run(alpha, staff, "m3", 0.95, (0.90, 1.00))  # no Beta: no average
    run(beta, staff, "m1", 0.99, (0.98, 1.00), split="dev")  # dev: in no table
    run(alpha, staff, "devonly", 0.99, (0.98, 1.00), split="dev")
    run(beta, staff, "devonly", 0.99, (0.98, 1.00), split="dev")
    run(beta, user, "upl", 0.70, (0.65, 0.75), kind=Submission.KIND_FILE)  # self-reported
    return alpha, beta


def page_table(client, path: str, **params: str) -> tuple[list[str], list[list[str]]]:  # type: ignore[no-untyped-def]
    """The page's table as text: the headings and each row's cells (``—`` for a missing one)."""
    response = client.get(path, params)
    assert response.status_code == 200, response.content
    page = response.content.decode()
    table = page.split('id="method-table"')[1].split("</table>")[0]
    headings = [html.unescape(h) for h in re.findall(r'data-heading="([^"]*)"', table)]
    body = table.split("<tbody>")[1]
    rows = [[html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
            for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]
    return headings, rows


def download(client, path: str, fmt: str, **params: str):  # type: ignore[no-untyped-def]
    response = client.get(path, {**params, "format": fmt})
    assert response.status_code == 200, response.content
    assert response["Content-Disposition"].startswith("attachment;")
    return response


def test_cells_are_the_best_test_row_and_the_average_needs_every_column(client, two_envs) -> None:  # type: ignore[no-untyped-def]
    headings, rows = page_table(client, "/tables/hosted/")
    assert headings == ["Method", "Submitter", "Alpha maze", "Beta house", "Average"]
    # Best first by the average; m3 has no Beta cell, so no average: it comes last, shown as —.
    assert rows == [["m1", "grace", "0.850", "0.600", "0.725"],
                    ["m2", "grace", "0.900", "0.300", "0.600"],
                    ["m3", "grace", "0.950", "—", "—"]]
    # One backbone chosen: m1's Alpha cell is its row on that backbone.
    _, on_b = page_table(client, "/tables/hosted/", backbone="b")
    assert on_b[0] == ["m1", "grace", "0.800", "0.600", "0.700"]
    _, on_other = page_table(client, "/tables/hosted/", backbone="other")
    assert on_other == [["m1", "grace", "0.850", "—", "—"]]
    # The rule is on the page and in the JSON, with the average of an incomplete row absent.
    page = client.get("/tables/hosted/").content.decode()
    assert 'id="average-rule"' in page and "missing any column has no average" in page
    data = download(client, "/tables/hosted/", "json").json()
    assert "missing any column has no average" in data["average_rule"]
    averages = {r["method"]: r["average"] for r in data["rows"]}
    assert averages["m1"] == pytest.approx(0.725) and averages["m2"] == pytest.approx(0.6) and averages["m3"] is None
    assert data["rows"][2]["cells"]["beta"] is None and data["rows"][0]["cells"]["alpha"]["backbone"] == "other"
    assert data["metric_label"] == "Spearman ρ (global)" and data["split"] == "test"


def test_dev_and_self_reported_rows(client, two_envs) -> None:  # type: ignore[no-untyped-def]
    for params in ({}, {"self_reported": "1"}, {"metric": "kendall_tau"}, {"target": "v"}, {"sort": "-beta"}):
        headings, rows = page_table(client, "/tables/hosted/", **params)
        assert "devonly" not in {r[0] for r in rows}
        assert "0.990" not in {c for r in rows for c in r}  # m1's dev 0.99 on Beta is no cell
        for fmt in ("csv", "json"):
            assert b"devonly" not in download(client, "/tables/hosted/", fmt, **params).content
    _, default = page_table(client, "/tables/hosted/")
    assert "upl" not in {r[0] for r in default}
    _, with_uploads = page_table(client, "/tables/hosted/", self_reported="1")
    assert ["upl", "ada", "—", "0.700", "—"] in with_uploads


@pytest.mark.parametrize("sort, order", [
    ("-avg", ["m1", "m2", "m3"]), ("avg", ["m2", "m1", "m3"]),  # a missing average last either way
    ("-alpha", ["m3", "m2", "m1"]), ("alpha", ["m1", "m2", "m3"]),
    ("beta", ["m2", "m1", "m3"]), ("-beta", ["m1", "m2", "m3"]),
    ("method", ["m1", "m2", "m3"]), ("-method", ["m3", "m2", "m1"]),
])
def test_sort_is_server_side_and_the_downloads_are_the_page(client, two_envs, sort: str, order: list[str]) -> None:  # type: ignore[no-untyped-def]
    headings, rows = page_table(client, "/tables/hosted/", sort=sort)
    assert [r[0] for r in rows] == order
    # The CSV is the page's table: same headings, rows, order and printed values (a missing cell empty).
    got = list(csv.reader(io.StringIO(download(client, "/tables/hosted/", "csv", sort=sort).content.decode())))
    assert got[0] == headings
    assert got[1:] == [["" if c == "—" else c for c in r] for r in rows]
    data = download(client, "/tables/hosted/", "json", sort=sort).json()
    assert [r["method"] for r in data["rows"]] == order and data["sort"] == sort
    # The sorted column's heading carries the arrow and aria-sort; its link flips the order.
    page = client.get("/tables/hosted/", {"sort": sort}).content.decode()
    key = sort.lstrip("-")
    th = re.search(r'<th[^>]*aria-sort="(ascending|descending)"[^>]*>.*?</th>', page, re.S)
    assert th is not None and th.group(1) == ("descending" if sort.startswith("-") else "ascending")
    flipped = key if sort.startswith("-") else f"-{key}"
    assert f"sort={flipped}" in th.group(0).replace("%2D", "-") and ("▼" if sort.startswith("-") else "▲") in th.group(0)


def test_bad_choices_are_400_and_unknown_tables_404(client, two_envs) -> None:  # type: ignore[no-untyped-def]
    bad = client.get("/tables/hosted/", {"sort": "nosuch"})
    assert bad.status_code == 400 and b"alpha" in bad.content and b"avg" in bad.content
    bad_metric = client.get("/tables/hosted/", {"metric": "regret_at_1"})
    assert bad_metric.status_code == 400 and b"spearman" in bad_metric.content
    assert client.get("/tables/hosted/", {"target": "x"}).status_code == 400
    assert client.get("/tables/nosuch/").status_code == 404
    assert client.get("/tables/").url == "/tables/published/"


def test_published_table_has_a_column_per_environment(client) -> None:  # type: ignore[no-untyped-def]
    from submissions.importing import import_results

    import_results(resamples=2)
    headings, rows = page_table(client, "/tables/published/")
    assert headings == ["Method", "Submitter", "ALFWorld", "FrozenLake", "OpenApps", "TerminalBench", "Average"]
    assert rows and {r[1] for r in rows} == {"QVal v1.0 authors"}
    assert len({r[0] for r in rows}) == len(rows)  # one row per method
    for r in rows:  # the average is the mean of the printed cells' values when all four are there
        cells = r[2:6]
        if "—" in cells:
            assert r[6] == "—"
        else:
            assert r[6] != "—"
    data = download(client, "/tables/published/", "json").json()
    for r in data["rows"]:
        values = [c["value"] for c in r["cells"].values() if c]
        if len(values) == 4:
            assert r["average"] == pytest.approx(sum(values) / 4)
    assert {c["source"] for r in data["rows"] for c in r["cells"].values() if c} <= {"reported", "rescored"}
    # The nav and the boards page lead here.
    assert 'href="/tables/"' in client.get("/boards/").content.decode()

"""Metric labels and printed precision (issue 22): pages name metrics by the registry's labels, never by
their field names, and print a hidden split's values at the precision they were disclosed with (3
decimals), a public split's with 4.  Submissions are uploaded and scored by the real tasks (as in
``tests/test_site.py``); the pages are read as a visitor reads them, tags stripped."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
from django.template import Context, Template

from qval import metric_registry
from tests.test_site import csv_bytes, finish, upload

pytestmark = pytest.mark.django_db

RAW = re.compile(r"\b(" + "|".join(m.name for m in metric_registry.METRICS) + r")\b")
"""A metric's field name as a word (``kendall_tau``; ``Spearman`` in a label does not match)."""


def visible(resp) -> str:  # type: ignore[no-untyped-def]
    """The text a visitor reads: scripts and styles dropped, tags stripped, entities decoded."""
    text = re.sub(r"(?s)<(script|style)\b.*?</\1>", " ", resp.content.decode())
    return html.unescape(re.sub(r"(?s)<[^>]*>", " ", text))


def raw_names(resp) -> list[str]:  # type: ignore[no-untyped-def]
    """Each metric field name in the visible text, with what is around it."""
    text = visible(resp)
    return [" ".join(text[max(m.start() - 40, 0):m.end() + 20].split()) for m in RAW.finditer(text)]


def table_rows(resp, table_id: str) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """The cells (tags stripped) of each ``data-metric`` row of table ``table_id``, by metric name."""
    body = resp.content.decode()
    body = body[body.index(f'id="{table_id}"'):]
    body = body[:body.index("</table>")]
    return {m.group(1): [html.unescape(re.sub(r"<[^>]*>", "", c)).strip()
                         for c in re.findall(r"(?s)<td[^>]*>(.*?)</td>", m.group(2))]
            for m in re.finditer(r'(?s)<tr data-metric="([^"]+)">(.*?)</tr>', body)}


def numbers(cell: str) -> list[str]:
    """The decimal numbers printed in ``cell``, as printed."""
    return re.findall(r"-?\d+\.\d+", cell)


@pytest.fixture
def scored(api, client, user, loaded, frozenlake, settings):  # type: ignore[no-untyped-def]
    """Two ranking files (every candidate of every state) per split, scored; ``client`` signed in as their
    owner.  Returns the submission ids by split."""
    settings.QVAL_BOOTSTRAP_RESAMPLES = 100
    client.force_login(user)
    rng = np.random.default_rng(5)
    ids_by_split: dict[str, tuple[int, int]] = {}
    for split in ("dev", "test"):
        ids = [c.id for s in frozenlake.states if s.split == split for c in s.candidates]
        q = np.array([frozenlake.q_labels[c] for c in ids])
        subs = []
        for name, noise in (("alpha", 0.3), ("beta", 0.6)):
            sub = upload(api, csv_bytes(ids, q + rng.normal(0, noise, len(ids))), split=split, method_name=name)
            finish(sub["id"])
            subs.append(sub["id"])
        ids_by_split[split] = (subs[0], subs[1])
    return ids_by_split


@pytest.mark.parametrize(("split", "digits"), [("test", 3), ("dev", 4)])
def test_the_submission_page_labels_metrics_and_prints_the_disclosed_precision(client, scored, split, digits) -> None:  # type: ignore[no-untyped-def]
    resp = client.get(f"/submissions/{scored[split][0]}/")
    assert resp.status_code == 200
    rows = table_rows(resp, "results")
    assert {"spearman", "kendall_tau", "ranking_spearman", "regret_at_1"} <= set(rows)
    for metric, cells in rows.items():
        assert cells[0] == metric_registry.get(metric).label, metric
        printed = numbers(cells[1]) + numbers(cells[2])  # the value and its 95% interval
        assert printed, (metric, cells)
        assert all(len(n.split(".")[1]) == digits for n in printed), (metric, cells)
    assert raw_names(resp) == []


def test_the_compare_page_labels_metrics_and_prints_the_disclosed_precision(client, scored) -> None:  # type: ignore[no-untyped-def]
    for split, digits in (("test", 3), ("dev", 4)):
        a, b = scored[split]
        resp = client.get("/compare/", {"a": a, "b": b})
        assert resp.status_code == 200, resp.content.decode()[:500]
        rows = table_rows(resp, "comparison")
        assert "spearman" in rows and "kendall_tau" in rows
        for metric, cells in rows.items():
            assert cells[0] == metric_registry.get(metric).label
            printed = [n for c in cells[1:5] for n in numbers(c)]  # A, B, A − B and its interval
            assert printed and all(len(n.split(".")[1]) == digits for n in printed), (split, metric, cells)
        assert raw_names(resp) == [], split


def test_board_pages_show_no_metric_field_name(client, scored, loaded) -> None:  # type: ignore[no-untyped-def]
    urls = ["/leaderboard/", "/leaderboard/?split=dev", "/leaderboard/?sort=-kendall_tau", "/methods/alpha/",
            f"/environments/{loaded.environment.slug}/", "/boards/", f"/boards/{loaded.key}:q:text/",
            "/leaderboard/aggregate/?split=dev&source=self-reported&metric=kendall_tau",
            "/leaderboard/critical-difference/?split=dev&metric=ranking_spearman",
            "/figures/per-family/", "/figures/heatmap/?metric=kendall_tau"]
    for url in urls:
        resp = client.get(url)
        assert resp.status_code == 200, url
        assert raw_names(resp) == [], url
    # The forms still send the field names: only what a visitor reads changed.
    page = client.get("/leaderboard/aggregate/", {"metric": "kendall_tau"}).content.decode()
    assert '<option value="kendall_tau" selected>Kendall τ-b</option>' in page


def test_the_label_filter_reads_the_registry() -> None:
    template = Template("{% for n in names %}{{ n|metric_label }};{% endfor %}")
    names = [m.name for m in metric_registry.METRICS] + ["a_removed_plugin_metric"]
    shown = template.render(Context({"names": names})).split(";")[:-1]
    assert shown == [html.escape(m.label) for m in metric_registry.METRICS] + ["a_removed_plugin_metric"]

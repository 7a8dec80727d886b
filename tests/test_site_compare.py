"""A vs B comparisons, leaderboard aggregates, the critical difference, and the submission
page's full results, on Postgres.

Expected numbers are computed here from the dataset's labels with scipy and numpy,
independently of the site's code.  Submissions are scored by the real Celery task function,
called in-process (as in ``tests/test_site.py``).
"""

from __future__ import annotations

import html
import math
import re

import numpy as np
import pandas as pd
import pytest
from django.core.cache import cache
from scipy import stats

from leaderboard.models import Dataset, Method
from qval import sampling
from qval.compare import paired_bootstrap
from submissions.models import Submission

from .test_browser import page, shot  # noqa: F401 - the browser fixture
from .test_site import KEY, actor_points, csv_bytes, finish, upload

pytestmark = pytest.mark.django_db

RESAMPLES = 200
METRICS = {"spearman": stats.spearmanr, "kendall_tau": stats.kendalltau, "pearson": stats.pearsonr}


@pytest.fixture(autouse=True)
def _fast_and_fresh(settings) -> None:  # type: ignore[no-untyped-def]
    """Fewer bootstrap resamples, and no comparison cached by an earlier test."""
    settings.QVAL_BOOTSTRAP_RESAMPLES = RESAMPLES
    cache.clear()


def submit(api, ids: list[str], scores, **fields) -> int:  # type: ignore[no-untyped-def]
    """Upload ``id,score`` rows (split dev unless given) and score them; return the id."""
    fields.setdefault("split", "dev")
    sub = upload(api, csv_bytes(ids, scores), **fields)
    finish(sub["id"])
    return sub["id"]


def page_text(resp) -> str:  # type: ignore[no-untyped-def]
    return html.unescape(resp.content.decode())


# -- A vs B ---------------------------------------------------------------------------------


@pytest.fixture
def pair(api, client, user, loaded, frozenlake):  # type: ignore[no-untyped-def]
    """Two dev submissions: A scores every point (rows shuffled), B leaves 12 out and one NaN;
    ``client`` is signed in as their owner (only the owner may compare a user's submissions).

    Returns their ids and, for the points both score, the labels and both scores in dataset
    order (computed here from the dataset, not by the site).
    """
    client.force_login(user)
    ids, labels = actor_points(frozenlake, "dev")
    rng = np.random.default_rng(11)
    a_scores = labels + rng.normal(0, 0.3, len(ids))
    b_scores = labels + rng.normal(0, 0.6, len(ids))
    order = rng.permutation(len(ids))
    a = submit(api, [ids[i] for i in order], a_scores[order], method_name="alpha", backbone="b1")
    b_scores_file = b_scores.copy()
    b_scores_file[20] = np.nan
    b = submit(api, ids[12:], b_scores_file[12:], method_name="beta", backbone="b1")
    common = np.array([i >= 12 and i != 20 for i in range(len(ids))])
    states = [s for s in frozenlake.states if s.split == "dev"]
    design = sampling.Design.of([s.trajectory for s in states], [s.task for s in states]).subset(common)
    return {"a": a, "b": b, "labels": labels[common], "a_scores": a_scores[common], "b_scores": b_scores[common],
            "num_points": len(ids), "design": design}


def test_difference_matches_scipy_on_the_common_points(client, pair) -> None:
    resp = client.get("/api/v1/compare/", {"a": pair["a"], "b": pair["b"]})
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert (body["a"]["id"], body["b"]["id"]) == (pair["a"], pair["b"])
    assert (body["a"]["method"], body["b"]["method"]) == ("alpha", "beta")
    assert (body["dataset"], body["split"], body["target"]) == (KEY, "dev", "q")
    assert (body["resamples"], body["seed"], body["level"]) == (RESAMPLES, 0, 0.95)
    rows = {m["metric"]: m for m in body["metrics"]}
    assert set(METRICS) <= set(rows)
    x, a, b = pair["labels"], pair["a_scores"], pair["b_scores"]
    for metric, fn in METRICS.items():
        row = rows[metric]
        rho_a, rho_b = float(fn(x, a)[0]), float(fn(x, b)[0])
        assert row["rho_a"] == pytest.approx(rho_a, abs=1e-9)
        assert row["rho_b"] == pytest.approx(rho_b, abs=1e-9)
        assert row["difference"] == pytest.approx(rho_a - rho_b, abs=1e-9)
        assert row["num_points"] == x.size and row["num_dropped"] == pair["num_points"] - x.size
        assert row["resamples"] == RESAMPLES and not row["insufficient"]
        low, high = row["ci95"]
        assert low < row["difference"] < high
        assert 0 < row["p_value"] <= 1
        # The bootstrap sees exactly the common points in dataset order, resampling their trajectories within
        # the split's maps (the dataset's states, read here from the dataset): same interval.
        expected = paired_bootstrap(x, a, b, metric=metric, resamples=RESAMPLES, seed=0, design=pair["design"])
        assert row["resampled"] == {"unit": "trajectory", "clusters": pair["design"].clusters, "strata": 4}
        assert (low, high, row["p_value"]) == pytest.approx((expected.low, expected.high, expected.p_value), abs=1e-12)
        assert row["significance"] == expected.significance()


def test_swapping_a_and_b_negates_the_difference_and_mirrors_the_interval(client, pair) -> None:
    ab = {m["metric"]: m for m in client.get("/api/v1/compare/", {"a": pair["a"], "b": pair["b"]}).json()["metrics"]}
    ba = {m["metric"]: m for m in client.get("/api/v1/compare/", {"a": pair["b"], "b": pair["a"]}).json()["metrics"]}
    for metric in METRICS:
        assert ba[metric]["difference"] == pytest.approx(-ab[metric]["difference"], abs=1e-12)
        assert (ba[metric]["rho_a"], ba[metric]["rho_b"]) == (ab[metric]["rho_b"], ab[metric]["rho_a"])
        assert ba[metric]["ci95"] == pytest.approx([-ab[metric]["ci95"][1], -ab[metric]["ci95"][0]], abs=1e-12)
        assert ba[metric]["p_value"] == pytest.approx(ab[metric]["p_value"], abs=1e-12)


def test_comparisons_are_cached_and_shown_on_the_page(client, pair) -> None:
    first = client.get("/api/v1/compare/", {"a": pair["a"], "b": pair["b"]}).json()
    # Finished submissions never change: a cached comparison no longer needs the files.
    Submission.objects.get(pk=pair["a"]).file.delete(save=False)
    assert client.get("/api/v1/compare/", {"a": pair["a"], "b": pair["b"]}).json() == first
    page = client.get("/compare/", {"a": pair["a"], "b": pair["b"]})
    assert page.status_code == 200
    text = page_text(page)
    spearman = next(m for m in first["metrics"] if m["metric"] == "spearman")
    row = re.search(r'data-metric="spearman">(.*?)</tr>', text, re.S)
    assert row is not None
    assert f"{spearman['difference']:.4f}{spearman['significance']}" in row.group(1)
    assert f"[{spearman['ci95'][0]:.4f}, {spearman['ci95'][1]:.4f}]" in row.group(1)
    assert f"{RESAMPLES} resamples" in text and "seed 0" in text and "swap A and B" in text


def test_compare_errors_are_specific(client, api, user, loaded, frozenlake) -> None:
    ids, labels = actor_points(frozenlake, "dev")
    dev = submit(api, ids, labels, method_name="dev-q")
    dev2 = submit(api, ids, -labels, method_name="dev-q2")
    test_ids, test_labels = actor_points(frozenlake, "test")
    test = submit(api, test_ids, test_labels, split="test", method_name="test-q")
    states = [s.id for s in frozenlake.states if s.split == "dev"]
    v = submit(api, states, [frozenlake.v_labels[s] for s in states], target="v", method_name="dev-v")
    queued = upload(api, csv_bytes(ids, labels), split="dev")["id"]
    other = Dataset.objects.create(environment=loaded.environment, slug=loaded.slug, version="2.0", name="later",
                                   fingerprint="0" * 64)
    elsewhere = Submission.objects.create(user=user, dataset=other, split="dev", target="q", method_name="m",
                                          filename="p.csv", state=Submission.FINISHED)
    cases = [
        ({"b": dev}, "a", "parameter a is missing"),
        ({"a": dev}, "b", "parameter b is missing"),
        ({"a": "seven", "b": dev}, "a", "a must be an integer submission id, got 'seven'"),
        ({"a": dev, "b": "1.5"}, "b", "b must be an integer submission id, got '1.5'"),
        ({"a": dev, "b": 999999}, "b", "there is no submission 999999"),
        ({"a": queued, "b": dev}, "a", f"submission {queued} is not finished (it is queued)"),
        ({"a": dev, "b": dev}, "b", f"a and b are the same submission ({dev})"),
        ({"a": dev, "b": test}, "b", f"submissions {dev} and {test} differ in split (dev vs test)"),
        ({"a": dev, "b": v}, "b", f"submissions {dev} and {v} differ in target (Q vs V)"),
        ({"a": dev, "b": elsewhere.pk}, "b", f"differ in dataset ({KEY} vs {loaded.slug}@2.0)"),
    ]
    client.force_login(user)  # the owner of every submission here
    for params, field, message in cases:
        resp = api.get("/api/v1/compare/", params)
        assert resp.status_code == 400, params
        assert any(message in m for m in resp.json()["errors"][field]), (params, resp.json())
        page = client.get("/compare/", params)
        assert page.status_code == 400 and message in page_text(page), params
    # Another caller learns nothing about a user's submission, not even its state: it is refused.
    client.logout()
    anonymous = client.get("/api/v1/compare/", {"a": queued, "b": dev})
    assert anonymous.status_code == 403
    assert "sign in as its owner" in anonymous.json()["errors"]["a"][0] and "queued" not in anonymous.content.decode()
    # Both parameters wrong: both reported.
    assert set(api.get("/api/v1/compare/", {"a": "x"}).json()["errors"]) == {"a", "b"}
    assert api.get("/api/v1/compare/", {"a": dev, "b": dev2}).status_code == 200


def test_test_split_comparisons_never_reveal_test_labels(client, api, user, loaded, frozenlake) -> None:
    test_only = {
        frozenlake.q_labels[c.id] for s in frozenlake.states if s.split == "test" for c in s.candidates
    } | {frozenlake.v_labels[s.id] for s in frozenlake.states if s.split == "test"}
    dev = set(frozenlake.q_labels.values()) - test_only
    secrets = {v for v in test_only if v not in (0.0, 1.0)}
    assert secrets
    ids, labels = actor_points(frozenlake, "test")
    rng = np.random.default_rng(5)
    # Each better than the last, so each climbs the account's ladder (one that does not is never compared).
    c = submit(api, ids, labels + rng.normal(0, 0.5, len(ids)), split="test", method_name="noisier", backbone="b1")
    b = submit(api, ids, labels + rng.normal(0, 0.2, len(ids)), split="test", method_name="noisy", backbone="b1")
    a = submit(api, ids, labels, split="test", method_name="oracle", backbone="b1")
    client.force_login(user)  # their owner: the only one who may compare them
    bodies = []
    for url, params in [("/api/v1/compare/", {"a": a, "b": b}), ("/compare/", {"a": a, "b": b}),
                        ("/compare/", {"a": c, "b": a}), ("/compare/", {"a": a}),
                        ("/leaderboard/aggregate/", {"source": "self-reported"}),
                        ("/api/v1/leaderboard/aggregate/", {"source": "self-reported"}),
                        ("/leaderboard/critical-difference/", {}), ("/api/v1/leaderboard/critical-difference/", {}),
                        ("/leaderboard/", {})]:
        resp = client.get(url, params)
        assert resp.status_code in (200, 400), url
        bodies.append(resp.content.decode())
    text = "\n".join(bodies)
    assert "oracle" in text and "noisier" in text
    numbers = {float(x) for x in re.findall(r"-?\d+\.\d{4,}(?:e-?\d+)?", text)}
    leaked = {v for v in secrets if any(abs(v - n) < 1e-9 for n in numbers)} - dev
    assert not leaked, f"test labels appear in user-visible output: {sorted(leaked)[:5]}"


# -- aggregates and critical difference -----------------------------------------------------

BACKBONES = ("b1", "b2", "b3")
NOISE = {"m-direct": (0.2, 0.6, 0.4), "m-rank": (0.4, 0.3, 1.0), "m-code": (1.5, 0.9, 2.0)}
FAMILIES = {"m-direct": "direct", "m-rank": "ranking", "m-code": "code"}
FAMILY_LABELS = dict(Method.FAMILIES)  # aggregates name families as the leaderboard does


@pytest.fixture
def board(api, loaded, frozenlake) -> dict[tuple[str, str], float]:  # type: ignore[no-untyped-def]
    """Three methods (three families) x three backbones on dev/Q, plus a worse second
    submission of m-direct on b1 that no aggregate may use; returns the expected best
    Spearman per (method, backbone), computed with scipy."""
    ids, labels = actor_points(frozenlake, "dev")
    rng = np.random.default_rng(2024)
    best: dict[tuple[str, str], float] = {}
    for method, noise in NOISE.items():
        for backbone, sd in zip(BACKBONES, noise):
            scores = labels + rng.normal(0, sd, len(ids))
            submit(api, ids, scores, method_name=method, backbone=backbone)
            best[(method, backbone)] = float(stats.spearmanr(labels, scores)[0])
    worse = labels + rng.normal(0, 5.0, len(ids))
    assert stats.spearmanr(labels, worse)[0] < best[("m-direct", "b1")]
    submit(api, ids, worse, method_name="m-direct", backbone="b1")
    for method, family in FAMILIES.items():
        Method.objects.filter(name=method).update(family=family)
    return best


def test_aggregate_means_are_t_intervals_over_backbones(client, board) -> None:
    own = {"split": "dev", "target": "q", "metric": "spearman", "source": "self-reported"}  # default: the paper's
    body = client.get("/api/v1/leaderboard/aggregate/", own).json()
    assert (body["split"], body["target"], body["metric"], body["source"]) == ("dev", "q", "spearman", "self-reported")
    rows = {m["method"]: m for m in body["methods"]}
    assert set(rows) == set(NOISE)
    for method in NOISE:
        values = np.array([board[(method, b)] for b in BACKBONES])
        low, high = stats.t.interval(0.95, len(values) - 1, loc=values.mean(), scale=stats.sem(values))
        row = rows[method]
        assert row["environment"] == "FrozenLake" and row["family"] == FAMILY_LABELS[FAMILIES[method]] and row["n"] == 3
        assert row["mean"] == pytest.approx(values.mean(), abs=1e-9)
        assert row["std"] == pytest.approx(values.std(ddof=1), abs=1e-9)
        assert row["ci95"] == pytest.approx([low, high], abs=1e-9)
        assert sorted(e["value"] for e in row["evaluations"]) == pytest.approx(sorted(values), abs=1e-9)
    families = {f["family"]: f for f in body["families"]}
    for method, family in FAMILIES.items():
        values = np.array([board[(method, b)] for b in BACKBONES])
        q = np.quantile(values, [0, 0.25, 0.5, 0.75, 1])
        got = families[FAMILY_LABELS[family]]
        assert got["n"] == 3 and got["num_missing"] == 0
        assert [got[k] for k in ("min", "q1", "median", "q3", "max")] == pytest.approx(list(q), abs=1e-9)
        assert got["mean"] == pytest.approx(values.mean(), abs=1e-9)


def test_critical_difference_matches_scipy_ranks(client, board) -> None:
    # uploaded files (the default is the paper's numbers); one dataset: its backbones as the blocks, on request
    own = {"split": "dev", "source": "self-reported", "blocks": "evaluation"}
    body = client.get("/api/v1/leaderboard/critical-difference/", {**own, "metric": "spearman"}).json()
    methods = sorted(NOISE)
    assert body["methods"] == methods and body["reason"] is None
    assert body["evaluations"] == [f"{KEY} / {b}" for b in BACKBONES]
    matrix = np.array([[board[(m, b)] for m in methods] for b in BACKBONES])
    assert np.array(body["matrix"]) == pytest.approx(matrix, abs=1e-9)
    ranks = stats.rankdata(-matrix, axis=1).mean(axis=0)
    cd = body["critical_difference"]
    assert [cd["average_ranks"][m] for m in methods] == pytest.approx(list(ranks), abs=1e-12)
    friedman = stats.friedmanchisquare(*matrix.T)
    assert cd["friedman_statistic"] == pytest.approx(friedman.statistic, abs=1e-9)
    assert cd["friedman_p_value"] == pytest.approx(friedman.pvalue, abs=1e-9)
    k, n = len(methods), len(BACKBONES)
    q = stats.studentized_range.ppf(0.95, k, np.inf) / math.sqrt(2)
    assert cd["alpha"] == 0.05 and cd["num_blocks"] == n and body["blocks"]["unit"] == "evaluation"
    assert cd["cd"] == pytest.approx(q * math.sqrt(k * (k + 1) / (6 * n)), abs=1e-9)
    assert [r["method"] for r in cd["ranking"]] == [methods[i] for i in np.argsort(ranks, kind="stable")]
    page = client.get("/leaderboard/critical-difference/", own)
    text = page_text(page)
    assert page.status_code == 200 and 'id="cd-diagram"' in text and f"CD = {cd['cd']:.4f}" in text
    assert "vendor/plotly.min.js" in text and "cdn.plot.ly" not in text
    for m in methods:
        assert f'data-method="{m}"' in text


def test_critical_difference_says_why_it_cannot_be_computed(client, api, loaded, frozenlake) -> None:
    ids, labels = actor_points(frozenlake, "dev")
    rng = np.random.default_rng(1)
    for method in ("one", "two"):
        submit(api, ids, labels + rng.normal(0, 0.5, len(ids)), method_name=method, backbone="b1")
    own = {"split": "dev", "source": "self-reported"}
    body = client.get("/api/v1/leaderboard/critical-difference/", own).json()
    assert body["critical_difference"] is None
    assert body["reason"] == ("the Friedman test needs at least 3 methods with a value on every chosen evaluation; "
                              "2 found (one, two)")
    submit(api, ids, labels + rng.normal(0, 0.5, len(ids)), method_name="three", backbone="b1")
    submit(api, ids, labels, method_name="one", backbone="b2")
    body = client.get("/api/v1/leaderboard/critical-difference/", own).json()
    assert body["reason"] == "the Friedman test needs at least 3 methods with a value on every chosen evaluation; 1 found (one)"
    assert body["methods"] == ["one"] and body["evaluations"] == [f"{KEY} / b1", f"{KEY} / b2"]
    assert [(m["method"], m["reason"]) for m in body["left_out"]] == [
        (m, f"missing on {KEY} / b2 (1 of 2 evaluations)") for m in ("three", "two")]
    page = client.get("/leaderboard/critical-difference/", own)
    assert page.status_code == 200 and f"missing on {KEY} / b2 (1 of 2 evaluations)" in page_text(page)
    empty = client.get("/leaderboard/critical-difference/", {"split": "test", "source": "self-reported"})
    assert empty.status_code == 200 and "0 found (none)" in page_text(empty)


def test_aggregate_selection_errors(client, api) -> None:
    for params, field, message in [({"split": "train"}, "split", "unknown split 'train'; choose one of dev, test"),
                                   ({"target": "x"}, "target", "unknown target 'x'"),
                                   ({"metric": "pearson"}, "metric", "choose one of spearman, kendall_tau, ranking_spearman")]:
        for url in ("/api/v1/leaderboard/aggregate/", "/api/v1/leaderboard/critical-difference/"):
            resp = client.get(url, params)
            assert resp.status_code == 400 and message in resp.json()["errors"][field][0], (url, params)
        for url in ("/leaderboard/aggregate/", "/leaderboard/critical-difference/"):
            resp = client.get(url, params)
            assert resp.status_code == 400 and message in page_text(resp), (url, params)


def _finished(user, dataset, method: str, backbone: str, value: float) -> Submission:  # type: ignore[no-untyped-def]
    """A finished dev/Q submission with Spearman ``value`` (written as the scoring task writes its rows)."""
    from django.utils import timezone

    from leaderboard.models import Backbone
    from submissions.models import Result

    m, _ = Method.objects.get_or_create(name=method)
    b, _ = Backbone.objects.get_or_create(name=backbone)
    sub = Submission.objects.create(user=user, dataset=dataset, split="dev", target="q", method=m, method_name=method,
                                    backbone=b, backbone_name=backbone, filename="x.csv", state=Submission.FINISHED,
                                    finished_at=timezone.now())
    Result.objects.create(submission=sub, metric="spearman", value=value, num_points=50)
    return sub


def test_aggregates_are_kept_per_results_version(client, user) -> None:  # type: ignore[no-untyped-def]
    """The aggregate and critical-difference pages and APIs are computed once per results version (the
    page fragment in the shared cache, the values in the process's memo) and show a new or changed result
    at once."""
    from django.core.cache.utils import make_template_fragment_key

    from board import aggregates, evaluations
    from submissions.importing import published_dataset
    from submissions.models import Result

    dataset = published_dataset("FrozenLake")
    for i, method in enumerate(("m-a", "m-b", "m-c")):
        for j, backbone in enumerate(("b1", "b2")):
            _finished(user, dataset, method, backbone, 0.1 * i + 0.01 * j)
    urls = {"aggregate": "/leaderboard/aggregate/", "cd": "/leaderboard/critical-difference/",
            "api-aggregate": "/api/v1/leaderboard/aggregate/", "api-cd": "/api/v1/leaderboard/critical-difference/",
            "export": "/leaderboard/?split=dev&format=csv"}  # the board's download, kept as a file per version

    def get() -> dict[str, str]:
        out = {}
        for name, url in urls.items():
            resp = client.get(url if "?" in url else f"{url}?split=dev&source=self-reported&blocks=evaluation")
            body = resp.getvalue()  # an export is a file (a streamed answer)
            assert resp.status_code == 200, (url, body[:300])
            out[name] = html.unescape(body.decode())
        return out

    first = get()
    selection = aggregates.Selection(split="dev", source="self-reported")
    choice = aggregates.CDChoice(aggregates.Selection(split="dev"), sources=("self-reported",), blocks="evaluation")
    kept = aggregates.summary(selection), aggregates.critical_difference_of(choice)
    version = evaluations.version()
    assert cache.get(make_template_fragment_key("aggregate", [version, "dev", "q", "spearman", "self-reported"])) is not None
    assert cache.get(make_template_fragment_key("critical-difference", [version, choice])) is not None
    assert get() == first  # served from the memo ...
    assert (aggregates.summary(selection), aggregates.critical_difference_of(choice)) == kept
    assert aggregates.summary(selection) is kept[0]  # ... not recomputed
    assert 'data-method="m-new"' not in first["aggregate"] + first["cd"]

    # A new method's results: on every page and API at once.
    for backbone in ("b1", "b2"):
        _finished(user, dataset, "m-new", backbone, 0.9)
    second = get()
    assert 'data-method="m-new"' in second["aggregate"] and 'data-method="m-new"' in second["cd"]
    assert second["export"].count(",m-new,") == 2 and "m-new" not in first["export"]
    api_aggregate = client.get(urls["api-aggregate"], {"split": "dev", "source": "self-reported"}).json()
    assert {m["method"] for m in api_aggregate["methods"]} == {"m-a", "m-b", "m-c", "m-new"}
    api_cd = client.get(urls["api-cd"], {"split": "dev", "source": "self-reported", "blocks": "evaluation"}).json()
    assert api_cd["critical_difference"]["ranking"][0]["method"] == "m-new"

    # A changed result: its new value replaces the old one.
    Result.objects.filter(submission__method_name="m-new", metric="spearman").update(value=-0.4321)
    third = get()
    assert "-0.4321" in third["cd"] and "0.9000" not in third["cd"].split('id="matrix"')[1]
    assert third["export"].count(",-0.4321,") == 2 and ",0.9," not in third["export"]
    means = {m["method"]: m for m in client.get(urls["api-aggregate"],
                                                 {"split": "dev", "source": "self-reported"}).json()["methods"]}
    assert means["m-new"]["mean"] == pytest.approx(-0.4321)
    assert evaluations.version() != version


def test_pages_render_and_link_to_each_other(client, user, api, board) -> None:
    page = client.get("/leaderboard/aggregate/", {"split": "dev", "source": "self-reported"})
    text = page_text(page)
    assert page.status_code == 200 and 'id="family-plot"' in text and "vendor/plotly.min.js" in text
    for method in NOISE:
        assert f'data-method="{method}"' in text
    for family in FAMILIES.values():
        assert f'data-family="{FAMILY_LABELS[family]}"' in text
    assert client.get("/leaderboard/aggregate/").status_code == 200  # test split: nothing yet
    js = client.get("/static/vendor/plotly.min.js")
    assert js.status_code == 200 and b"plotly" in b"".join(js.streaming_content)[:2000].lower()
    # Leaderboard: pick A and B per row, without JavaScript.
    board_page = page_text(client.get("/leaderboard/", {"split": "dev"}))
    subs = list(Submission.objects.filter(state=Submission.FINISHED).values_list("pk", flat=True))
    for pk in subs:
        assert f'name="a" value="{pk}"' in board_page and f'name="b" value="{pk}"' in board_page
    assert 'action="/compare/"' in board_page and "Compare A vs B" in board_page
    # Submission page: "Compare with" lists every other finished submission on the same split/target.
    client.force_login(user)
    detail = page_text(client.get(f"/submissions/{subs[0]}/"))
    form = re.search(r'<form[^>]*id="compare-with".*?</form>', detail, re.S)
    assert form is not None
    assert sorted(int(v) for v in re.findall(r'<option value="(\d+)"', form.group(0))) == sorted(subs[1:])
    # The compare page without parameters is just its form; with only A it offers B's.
    assert "Compare two submissions" in page_text(client.get("/compare/"))
    only_a = page_text(client.get("/compare/", {"a": subs[0]}))
    assert "parameter b is missing" in only_a and len(re.findall(r'<option value="\d+"', only_a)) == len(subs) - 1
    scoring = page_text(client.get("/how-we-score/"))
    for link in ('href="/compare/"', 'href="/leaderboard/aggregate/"', 'href="/leaderboard/critical-difference/"'):
        assert link in scoring


# -- the submission page shows every stored row ----------------------------------------------


def _numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+\.\d+", cell)]


def test_submission_page_and_api_show_every_result_row(client, user, api, loaded, frozenlake) -> None:
    rng = np.random.default_rng(9)
    states = [s for s in frozenlake.states if s.split == "dev"]
    ids = [c.id for s in states for c in s.candidates]
    q = np.array([frozenlake.q_labels[c] for c in ids])
    sub = submit(api, ids, q + rng.normal(0, 0.3, len(ids)), method_name="ranker")
    client.force_login(user)
    stored = {r.metric: r for r in Submission.objects.get(pk=sub).results.all()}
    assert set(stored) == {"spearman", "kendall_tau", "pearson", "sign_agreement", "ranking_spearman",
                           "top1_accuracy", "regret_at_1", "pairwise_accuracy"}
    api_rows = {r["metric"]: r for r in api.get(f"/api/v1/submissions/{sub}/").json()["results"]}
    text = page_text(client.get(f"/submissions/{sub}/"))
    for metric, r in stored.items():
        assert api_rows[metric] == {"metric": metric, "value": r.value, "p_value": r.p_value, "num_points": r.num_points,
                                    "num_dropped": r.num_dropped, "coverage": r.coverage,
                                    "insufficient": r.insufficient, "details": r.details,
                                    "shown": metric != "sign_agreement"}  # what the page shows, for the CLI
        row = re.search(rf'<tr data-metric="{metric}">(.*?)</tr>', text, re.S)
        if metric == "sign_agreement":  # FrozenLake has no negative label: the page leaves it out, saying why
            assert row is None and 'id="one-sign-note"' in text
            continue
        assert row is not None, metric
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
        value, ci, p_value, points, dropped, coverage, details = cells[1:]
        assert _numbers(value)[0] == pytest.approx(r.value, abs=5e-5)
        assert re.sub(r"[-\d.]", "", value.strip()) == r.details.get("significance", "")  # the marks
        if "ci95" in r.details:
            assert _numbers(ci) == pytest.approx(r.details["ci95"], abs=5e-5)
        if r.p_value is not None:
            assert float(p_value) == pytest.approx(r.p_value, rel=1e-2)
        assert (int(points), int(dropped)) == (r.num_points, r.num_dropped)
        assert float(coverage) == pytest.approx(r.coverage, abs=5e-4)
        if metric == "ranking_spearman":
            assert "ci95" in r.details
            assert _numbers(details)[0] == pytest.approx(r.details["std"], abs=5e-5)
            assert f"{r.details['num_valid']} valid, {r.details['num_skipped']} skipped states" in details
        if metric == "pairwise_accuracy":
            assert f"over {r.num_points} candidate pairs" in details
    for metric in ("spearman", "kendall_tau", "pearson"):
        assert set(stored[metric].details) >= {"significance", "ci95"}


def test_submission_page_shows_each_sample(client, user, api, loaded, frozenlake) -> None:
    ids, labels = actor_points(frozenlake, "dev")
    rng = np.random.default_rng(4)
    table = labels[:, None] + rng.normal(0, [0.2, 0.5, 1.0], (len(ids), 3))
    frame = pd.DataFrame({"id": np.repeat(ids, 3), "sample": np.tile([1, 2, 3], len(ids)), "score": table.ravel()})
    sub = upload(api, frame.to_csv(index=False).encode(), split="dev", method_name="sampler")
    finish(sub["id"])
    per_sample = [float(stats.spearmanr(labels, table[:, s])[0]) for s in range(3)]
    got = {r["metric"]: r for r in api.get(f"/api/v1/submissions/{sub['id']}/").json()["results"]}["spearman"]
    samples = got["details"]["samples"]
    assert samples["values"] == pytest.approx(per_sample, abs=1e-9)
    assert got["value"] == pytest.approx(stats.spearmanr(labels, table.mean(axis=1))[0], abs=1e-9)
    client.force_login(user)
    text = page_text(client.get(f"/submissions/{sub['id']}/"))
    section = text[text.index('id="samples"'):]
    row = re.search(r'<tr data-metric="spearman">(.*?)</tr>', section, re.S)
    assert row is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)
    agg = np.array(per_sample)
    assert (int(cells[1]), int(cells[2])) == (3, 0)
    assert [float(c) for c in cells[3:8]] == pytest.approx(
        [agg.mean(), agg.std(ddof=1), agg.min(), agg.max(), np.median(agg)], abs=5e-5)
    shown = dict((int(n), float(v)) for n, v in re.findall(r"(\d+): (-?\d+\.\d+)", cells[8]))
    assert shown == pytest.approx({1: per_sample[0], 2: per_sample[1], 3: per_sample[2]}, abs=5e-5)
    assert "mean prediction of 3 samples" in text
    # Compared with another submission, a sampled one contributes its mean prediction.
    other = submit(api, ids, labels + rng.normal(0, 0.5, len(ids)), method_name="plain")
    compared = {m["metric"]: m for m in api.get("/api/v1/compare/", {"a": sub["id"], "b": other}).json()["metrics"]}
    assert compared["spearman"]["rho_a"] == pytest.approx(got["value"], abs=1e-9)
    assert compared["spearman"]["num_points"] == len(ids)


# -- in a real browser ----------------------------------------------------------------------


@pytest.fixture
def session_cookie(client, user) -> str:  # type: ignore[no-untyped-def]
    """A signed-in session of ``user`` (set up before Playwright's event loop starts)."""
    client.force_login(user)
    return client.cookies["sessionid"].value


@pytest.mark.slow
@pytest.mark.browser
def test_charts_draw_and_the_leaderboard_picks_a_pair(live_server, board, session_cookie, page) -> None:  # type: ignore[no-untyped-def]
    # ``page`` comes last: Playwright's event loop must start after the database fixtures ran.
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    base = live_server.url
    # The board's rows are the user's own: only they may compare them.
    page.context.add_cookies([{"name": "sessionid", "value": session_cookie, "url": base}])
    page.goto(base + "/leaderboard/critical-difference/?split=dev&source=self-reported&blocks=evaluation")
    page.wait_for_selector("#cd-diagram .main-svg")
    assert page.locator("#cd-diagram .shapelayer path").count() > 2 * len(NOISE)  # elbows, cliques, CD bar
    shot(page, "20-critical-difference")
    page.goto(base + "/leaderboard/aggregate/?split=dev&source=self-reported")
    page.wait_for_selector("#family-plot .main-svg")
    assert page.locator("#family-plot .boxlayer .trace").count() == len(FAMILIES)
    shot(page, "21-aggregate")
    page.goto(base + "/leaderboard/?split=dev")
    page.locator("#leaderboard tbody tr").nth(0).locator("input[name=a]").check()
    page.locator("#leaderboard tbody tr").nth(1).locator("input[name=b]").check()
    page.click("#compare-pick button[type=submit]")
    page.wait_for_selector("#comparison")
    # ρ, τ and r: sign agreement is left out on FrozenLake, whose labels have no negative sign
    assert page.locator("#comparison tbody tr").count() == 3
    shot(page, "22-compare")
    assert not errors, errors

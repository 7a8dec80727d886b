"""The page details of issue 22's item 7, on Postgres: the dataset card rendered from Markdown (raw HTML
escaped) and the provenance as a table, the datasets page without the build queue or a reload, the
submit form (hosted datasets only, the test quota left), the self-serve API token page, the API docs
served from our own template, timestamps without microseconds, and sign agreement left out on a
dataset without negative labels (FrozenLake)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from allauth.account.models import EmailAddress
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from leaderboard import markdown
from leaderboard.loading import load_dataset
from leaderboard.models import Dataset, DatasetBuild, Environment
from qval import metric_registry, metrics, schema
from submissions.models import Submission
from tests.test_dataset_pages import make_image_dataset
from tests.test_site import actor_points, csv_bytes, finish, upload

DESCRIPTION = 'A card with <script>alert("card")</script>, **bold** text and [a link](javascript:alert(1)).'
CONFIG = {"environment": {"map": "8x8", "slippery": False}, "collection": {"seeds": [1, 2, 3], "episodes": 4}}


def load_pictures(root: Path, version: str = "0.1", shift: float = 0.0) -> Dataset:
    """The small image dataset of ``tests/test_dataset_pages.py`` with our description and build settings,
    its labels moved by ``shift``, written under ``root`` and loaded."""
    ds = make_image_dataset()
    manifest = dataclasses.replace(ds.manifest, version=version, description=DESCRIPTION, config=CONFIG)
    ds = dataclasses.replace(ds, manifest=manifest, q_labels={k: v + shift for k, v in ds.q_labels.items()},
                             v_labels={k: v + shift for k, v in ds.v_labels.items()})
    ds.write(root / f"pictures-{version}")
    return load_dataset(schema.Dataset.read(root / f"pictures-{version}"))[0]


@pytest.fixture
def pictures(db, settings, tmp_path: Path) -> Dataset:  # type: ignore[no-untyped-def]
    settings.QVAL_DATASETS_DIR = tmp_path / "datasets"
    settings.QVAL_DOWNLOAD_CACHE = tmp_path / "cache"
    return load_pictures(settings.QVAL_DATASETS_DIR)


def test_markdown_escapes_raw_html_and_script_links() -> None:
    html = markdown.render('# Title\n\n<img src=x onerror="alert(1)"> [x](javascript:alert(1)) `code`\n')
    assert "<h1>Title</h1>" in html and "<code>code</code>" in html
    assert "<img" not in html and "&lt;img" in html and 'href="javascript' not in html


def test_the_card_is_html_and_the_provenance_a_table(client, pictures) -> None:
    page = client.get(f"/datasets/{pictures.key}/").content.decode()
    card = page.split('<div class="markdown">')[1].split("</div>")[0]
    assert "<h1>" in card and "<h2>Files</h2>" in card and "<strong>bold</strong>" in card
    assert "&lt;script&gt;alert(&quot;card&quot;)&lt;/script&gt;" in card  # printed, not run
    assert "<script>alert" not in page and 'href="javascript' not in page and "## " not in card
    provenance = page.split('id="provenance"')[1].split("</table>")[0]
    rows = re.findall(r"<tr><td><code>(.*?)</code></td><td>(.*?)</td></tr>", provenance)
    assert sorted(rows) == [("collection.episodes", "4"), ("collection.seeds", "1, 2, 3"), ("environment.map", "8x8"),
                            ("environment.slippery", "false")]
    assert "{'" not in page and "{&#x27;" not in page  # no Python dict printed
    for split in ("train", "dev"):  # the examples fold away; the test split has none
        folded = page.split(f'<details class="examples" id="examples-{split}">')[1].split("</details>")[0]
        assert "observation of" in folded and f"in {split}" in folded
    assert 'id="examples-test"' not in page and not re.search(r"observation of \S+ in test", page)


def test_the_datasets_page_has_no_build_queue_and_no_reload(client, pictures) -> None:
    DatasetBuild.objects.create(name="frozenlake")  # queued
    DatasetBuild.objects.create(name="alfworld", status="running", stage="label", done=3, total=10)
    page = client.get("/datasets/").content.decode()
    assert pictures.key in page and 'href="/status/#builds"' in page
    assert "location.reload" not in page and "http-equiv" not in page and "data-status" not in page
    status = client.get("/status/").content.decode()
    builds = status.split('id="dataset-builds"')[1].split("</table>")[0]
    assert 'data-status="queued"' in builds and 'data-status="running"' in builds and "3/10" in builds
    assert "location.reload" not in status
    assert {b["name"] for b in client.get("/api/v1/status/").json()["builds"]} == {"frozenlake", "alfworld"}


def test_the_submit_form_offers_hosted_datasets_and_shows_the_quota(client, settings, pictures, user,
                                                                  django_user_model) -> None:
    newer = load_pictures(settings.QVAL_DATASETS_DIR, version="0.2")
    Dataset.objects.create(environment=Environment.objects.get(slug="frozenlake"), slug="qval-v1.0-frozenlake",
                           version="1.0", name="QVal v1.0 FrozenLake", hosted=False)
    settings.QVAL_TEST_QUOTA_PER_DAY = 5
    for _ in range(2):
        Submission.objects.create(user=user, dataset=newer, split="test", target="q", method_name="m")
    client.force_login(user)
    page = client.get("/submit/").content.decode()
    select = re.search(r'<select name="dataset"[^>]*>(.*?)</select>', page, re.S).group(1)
    offered = re.findall(r'<option value="([^"]*)"', select)
    assert newer.key in offered and pictures.key not in offered  # the newest version only
    assert "qval-v1.0-frozenlake@1.0" not in offered  # not the published one
    assert "<strong>3 of 5</strong> test submissions left today" in page
    assert "`" not in page and "<code>docker save</code>" in page
    refused = client.post("/submit/", {"dataset": pictures.key, "split": "dev", "target": "q", "method_name": "m"})
    assert "Select a valid choice" in refused.content.decode()
    # An account without a verified address is told why it has no test quota.
    client.force_login(django_user_model.objects.create_user(username="bob", password="correct-horse-battery"))
    page = client.get("/submit/").content.decode()
    assert "need a verified" in page and "left today" not in page


def _token_on_page(client: Client) -> str:
    return re.search(r'<pre class="obs" id="api-token">(\w+)</pre>', client.get("/accounts/token/").content.decode()
                     ).group(1)


def test_the_api_token_page(user, django_user_model) -> None:
    assert Client().get("/accounts/token/").status_code == 302  # to the login page
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    page = browser.get("/accounts/token/")
    assert page.status_code == 200 and 'id="no-token"' in page.content.decode()
    assert browser.post("/accounts/token/").status_code == 403  # no CSRF token: refused
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    assert browser.post("/accounts/token/", {"csrfmiddlewaretoken": csrf}).status_code == 302
    first = _token_on_page(browser)
    assert f"export QVAL_TOKEN={first}\ncurl -H \"Authorization: Token $QVAL_TOKEN\"" in browser.get(
        "/accounts/token/").content.decode()

    def api_status(key: str) -> int:  # authenticated: a 400 for the missing fields; a bad token: 401
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        return api.post("/api/v1/submissions/", {}, format="multipart").status_code

    assert api_status(first) == 400
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', browser.get("/accounts/token/").content.decode())
    assert browser.post("/accounts/token/", {"csrfmiddlewaretoken": csrf.group(1)}).status_code == 302
    second = _token_on_page(browser)
    assert second != first and api_status(second) == 400 and api_status(first) == 401
    # Without a verified email address: refused, and nothing is made.
    bob = django_user_model.objects.create_user(username="bob", password="correct-horse-battery")
    EmailAddress.objects.create(user=bob, email="bob@example.org", verified=False, primary=True)
    other = Client()
    other.force_login(bob)
    refused = other.get("/accounts/token/")
    assert refused.status_code == 403 and "verified email address" in refused.content.decode()
    assert other.post("/accounts/token/").status_code == 403 and not Token.objects.filter(user=bob).exists()
    assert 'href="/accounts/token/"' in other.get("/submissions/").content.decode()  # linked from My submissions


def test_the_api_docs_page_is_ours_and_offline(client, db) -> None:
    page = client.get("/api/docs/").content.decode()
    assert '<code>POST /api/v1/submissions/</code>' in page and '<code>GET /api/v1/leaderboard/</code>' in page
    submit = page.split('id="post-api-v1-submissions"')[1].split("</section>")[0]
    assert "<code>method_name</code>" in submit and "one of q, v" in submit and "API token" in submit
    assert "<code>kind=container</code>" in submit and "`" not in page  # the docstrings' literals as code
    assert "<script" not in page and not re.search(r'(?:src|href)="(?:https?:)?//', page)  # nothing from elsewhere
    assert 'href="/api/docs/"' in client.get("/").content.decode()  # the site links the docs, not the YAML
    assert client.get(re.search(r'href="([^"]+)" id="schema-json"', page).group(1)).json()["paths"][
        "/api/v1/submissions/"]
    assert client.get("/api/v1/schema/")["Content-Type"].startswith("application/vnd.oai.openapi")


def test_the_api_docs_are_for_people(client, db) -> None:
    """The researchers' calls first, the workers' apart; no Sphinx references; every call has a curl example and
    each JSON answer its fields."""
    page = client.get("/api/docs/").content.decode()
    public, workers = page.split('id="public-calls"')[1].split('id="worker-calls"')
    assert "/api/v1/jobs/" not in public and "/api/v1/workers/" not in public
    assert "<code>POST /api/v1/jobs/{id}/start</code>" in workers and "<code>GET /api/v1/datasets/</code>" in public
    assert not re.search(r":(func|class|mod|data|meth|attr):", page)
    sections = re.findall(r'<section class="api-op" id="([^"]+)">(.*?)</section>', page, re.S)
    assert sections and all('<pre class="curl"><code>curl ' in body for _, body in sections)
    submit = dict(sections)["post-api-v1-submissions"]
    assert "-H &#x27;Authorization: Token $QVAL_TOKEN&#x27;" in submit and "file=@predictions.csv" in submit
    detail = dict(sections)["get-api-v1-submissions--id"]
    for name in ("<code>state</code>", "<code>results[].metric</code>", "<code>results[].shown</code>",
                 "<code>card.description</code>"):
        assert name in detail.split("<h3>Answer</h3>")[1], name


def _documented(client, path: str, method: str = "get") -> set[str]:  # type: ignore[no-untyped-def]
    """The fields the schema says ``method path`` answers with (list items as ``[].name``, nested ``a.b``)."""
    from qval_site import api_docs

    op = next(o for o in api_docs.operations(api_docs.schema()) if (o.path, o.method) == (path, method))
    return {f.name for f in op.answer}


def _fields(value, documented: set[str], prefix: str = "") -> set[str]:  # type: ignore[no-untyped-def]
    """The field names of a JSON answer as :func:`_documented` writes them, looking inside an object (a list's first
    item) where the documentation describes its fields, as it does not for a free-form one (``details``)."""
    if isinstance(value, list):
        return _fields(value[0], documented, f"{prefix}[]") if value and isinstance(value[0], dict) else set()
    out: set[str] = set()
    for name, inner in value.items():
        path = f"{prefix}.{name}" if prefix else name
        out.add(path)
        if isinstance(inner, (dict, list)) and any(d.startswith((f"{path}.", f"{path}[].")) for d in documented):
            out |= _fields(inner, documented, path)
    return out


def test_the_documented_answers_are_the_answers(client, api, user, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
    """Each documented answer (the apps' apis.py, submissions/serializers.py) has the fields the call answers with, no more, no less."""
    ids, labels = actor_points(frozenlake, "dev")
    a = upload(api, csv_bytes(ids, labels), split="dev", method_name="docs-a")
    b = upload(api, csv_bytes(ids, labels[::-1]), split="dev", method_name="docs-b")
    finish(a["id"])
    finish(b["id"])
    answers = {
        "/api/v1/datasets/": client.get("/api/v1/datasets/").json(),
        "/api/v1/leaderboard/": client.get("/api/v1/leaderboard/").json(),
        "/api/v1/submissions/{id}/": api.get(f"/api/v1/submissions/{a['id']}/").json(),
        "/api/v1/compare/": api.get("/api/v1/compare/", {"a": a["id"], "b": b["id"]}).json(),
    }
    for path, answer in answers.items():
        documented = _documented(client, path)
        assert _fields(answer, documented) == documented, path


MICROSECONDS = re.compile(r"\d{2}:\d{2}:\d{2}\.\d+")


def test_submission_pages_show_no_microseconds_and_no_sign_agreement_on_frozenlake(client, user, api, loaded,
                                                                                    frozenlake) -> None:
    ids, labels = actor_points(frozenlake, "dev")
    assert not metrics.both_signs(labels) and not loaded.labels_have_both_signs("q")  # no negative label
    rng = np.random.default_rng(3)
    a = upload(api, csv_bytes(ids, rng.random(len(ids))), split="dev", method_name="random")
    b = upload(api, csv_bytes(ids, labels), split="dev", method_name="oracle")
    finish(a["id"])
    finish(b["id"])
    stored = {r["metric"] for r in api.get(f"/api/v1/submissions/{a['id']}/").json()["results"]}
    assert "sign_agreement" in stored  # the data keeps it; the pages leave it out
    client.force_login(user)
    for url in (f"/submissions/{a['id']}/", "/submissions/"):
        page = client.get(url).content.decode()
        assert not MICROSECONDS.search(page), url
    page = client.get(f"/submissions/{a['id']}/").content.decode()
    assert 'data-metric="spearman"' in page and 'data-metric="sign_agreement"' not in page
    assert metric_registry.ONE_SIGN_NOTE in page.replace("&#x27;", "'")
    compared = client.get("/compare/", {"a": a["id"], "b": b["id"]}).content.decode()
    assert 'data-metric="spearman"' in compared and 'data-metric="sign_agreement"' not in compared
    assert 'id="one-sign-note"' in compared


def test_sign_agreement_is_shown_where_labels_have_both_signs(settings, pictures) -> None:
    mixed = load_pictures(settings.QVAL_DATASETS_DIR, version="0.3", shift=-0.5)  # labels in (-0.45, 0.45)
    assert mixed.labels_have_both_signs("q") and not pictures.labels_have_both_signs("q")
    assert metric_registry.shown("sign_agreement", True) and not metric_registry.shown("sign_agreement", False)
    assert metric_registry.shown("spearman", False) and metric_registry.shown("a_removed_plugin_metric", False)
    assert metrics.both_signs([-1.0, 0.0, 2.0]) and not metrics.both_signs([0.0, 1.0, np.nan])

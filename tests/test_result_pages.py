"""Public result pages and the method card (issue 22): a public test result on a board has a permalink that
anyone can read; a private one is its owner's only (no board, no permalink); a dev result has none; the card's
fields are stored from the form and the API, and a bad one is refused naming the field."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from leaderboard.models import Backbone, Method
from submissions.models import Result, Submission
from tests.test_site import KEY, actor_points, csv_bytes

pytestmark = pytest.mark.django_db


def container_row(ds, user, method: str, value: float, *, public: bool = True, split: str = "test",  # type: ignore[no-untyped-def]
                  description: str = "") -> Submission:
    """A finished method-container submission (run by the platform, so rankable on any dataset) with a stored ρ."""
    sub = Submission.objects.create(
        user=user, dataset=ds, split=split, target="q", method_name=method,
        method=Method.objects.get_or_create(name=method)[0], backbone_name="b",
        backbone=Backbone.objects.get_or_create(name="b")[0], modality="text", kind=Submission.KIND_CONTAINER,
        source=Submission.SOURCE_USER, filename="image.tar", state=Submission.FINISHED, finished_at=timezone.now(),
        public=public, description=description, paper_url="https://example.org/paper", open_weights=True)
    Result.objects.create(submission=sub, metric="spearman", value=value, p_value=0.001, num_points=120,
                          coverage=1.0, details={"ci95": [value - 0.05, value + 0.05]})
    return sub


def baseline_row(ds, method: str, backbone: str) -> Submission:  # type: ignore[no-untyped-def]
    """A finished reference row (a baseline the platform ran) on ``ds``'s test split, target Q, text."""
    return Submission.objects.create(
        dataset=ds, split="test", target="q", method_name=method, backbone_name=backbone, modality="text",
        kind=Submission.KIND_BASELINE, source=Submission.SOURCE_BASELINE, filename="predictions.jsonl",
        state=Submission.FINISHED, finished_at=timezone.now(), public=True)


def offered(client, pk: int) -> set[int]:  # type: ignore[no-untyped-def]
    """The reference rows result ``pk``'s page offers to compare with."""
    page = client.get(f"/results/{pk}/")
    assert page.status_code == 200
    return {int(b) for b in re.findall(r'class="compare-ref" href="/compare/\?a=\d+&amp;b=(\d+)"', page.content.decode())}


def test_a_result_page_offers_the_newest_reference_row_per_method_and_backbone(client, loaded, user) -> None:  # type: ignore[no-untyped-def]
    """One click to compare with each reference row of the slice: the newest baseline per method and backbone, never
    the result itself; kept per results version, so a newer baseline replaces the older at once."""
    sub = container_row(loaded, user, "scorer-x", 0.731)
    old, new, other = baseline_row(loaded, "random", "none"), baseline_row(loaded, "random", "none"), \
        baseline_row(loaded, "zero", "b")
    client.force_login(user)  # an uploaded row is compared by its owner
    assert offered(client, sub.pk) == {new.pk, other.pk}
    assert offered(Client(), new.pk) == {old.pk, other.pk}  # a baseline's page, for anyone: never itself
    newest = baseline_row(loaded, "random", "none")
    assert offered(client, sub.pk) == {newest.pk, other.pk}


def test_a_public_test_result_has_a_permalink_anyone_reads(client, loaded, user) -> None:  # type: ignore[no-untyped-def]
    sub = container_row(loaded, user, "scorer-x", 0.731, description="Scores each action by <b>look-ahead</b>.")
    page = client.get(f"/results/{sub.pk}/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "scorer-x" in text and "ada" in text and "0.731" in text and "[0.681, 0.781]" in text
    assert "Scores each action by &lt;b&gt;look-ahead&lt;/b&gt;." in text  # escaped, never markup
    assert 'href="https://example.org/paper"' in text and "<dd>yes</dd>" in text
    assert "your submission's page" not in text  # an anonymous reader is not its owner
    assert 'badge-src-verified" title="run by the platform' in text  # a container the platform ran: the boards' badge
    # The board links each row to its permalink.
    board = client.get(f"/boards/{loaded.key}:q:text/").content.decode()
    assert f'href="/results/{sub.pk}/"' in board
    # Its owner gets a link to the private page too.
    owner = Client()
    owner.force_login(user)
    assert "your submission's page" in owner.get(f"/results/{sub.pk}/").content.decode()


def test_a_private_result_is_on_no_board_and_has_no_permalink(client, loaded, user, staff) -> None:  # type: ignore[no-untyped-def]
    public = container_row(loaded, staff, "shown", 0.5)
    private = container_row(loaded, user, "hidden-one", 0.9, public=False)
    rows = client.get(f"/boards/{loaded.key}:q:text/", {"format": "json", "all": "1"}).json()["rows"]
    assert [r["submission_id"] for r in rows] == [public.pk]
    assert "hidden-one" not in client.get("/leaderboard/").content.decode()
    for who in (client, Client()):
        assert who.get(f"/results/{private.pk}/").status_code == 404
    owner = Client()
    owner.force_login(user)
    assert owner.get(f"/results/{private.pk}/").status_code == 404  # not public: the owner's page is elsewhere
    mine = owner.get(f"/submissions/{private.pk}/")
    assert mine.status_code == 200 and "hidden-one" in mine.content.decode()


def test_the_owners_pages_show_where_a_result_stands_and_why_one_is_unranked(loaded, user) -> None:  # type: ignore[no-untyped-def]
    """A submission's page and *My submissions* (app ``submissions``, below ``board``) ask board's ``standing_of`` tag:
    the ranked row's rank, board and permalink; the private row's reason (``submissions.selectors.why_unranked``)."""
    ranked = container_row(loaded, user, "ranked-one", 0.8)
    private = container_row(loaded, user, "kept-private", 0.7, public=False)
    owner = Client()
    owner.force_login(user)
    page = owner.get(f"/submissions/{ranked.pk}/").content.decode()
    assert 'id="standing-rank"' in page and f'href="/boards/{loaded.key}:q:text/' in page
    assert f'id="permalink">Permalink: <a href="http://testserver/results/{ranked.pk}/"' in page
    page = owner.get(f"/submissions/{private.pk}/").content.decode()
    assert 'id="not-ranked"' in page and "It is private" in page and 'id="permalink"' not in page
    mine = owner.get("/submissions/").content.decode()
    assert f'href="/boards/{loaded.key}:q:text/#row-{ranked.pk}" title="on the verified board">1</a>' in mine
    assert mine.count("not ranked") == 1  # the private row


def test_a_dev_result_has_no_permalink(client, loaded, user) -> None:  # type: ignore[no-untyped-def]
    dev = container_row(loaded, user, "self-check", 0.99, split="dev")
    assert client.get(f"/results/{dev.pk}/").status_code == 404
    assert client.get("/results/999999/").status_code == 404


def test_the_method_card_is_stored_from_the_api_and_a_bad_one_is_refused(api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
    ids, labels = actor_points(frozenlake, "dev")

    def post(**fields: object):  # type: ignore[no-untyped-def]
        data = {"dataset": KEY, "split": "dev", "target": "q", "method_name": "carded",
                "file": SimpleUploadedFile("p.csv", csv_bytes(ids, labels)), **fields}
        return api.post("/api/v1/submissions/", data, format="multipart")

    for field, value, says in [("paper_url", "javascript:alert(1)", "is not an http(s) address"),
                               ("code_url", "ftp://example.org/x", "is not an http(s) address"),
                               ("description", "x" * 5001, "the limit is 5000")]:
        resp = post(**{field: value})
        assert resp.status_code == 400 and says in resp.json()["errors"][field][0], resp.content
    assert Submission.objects.count() == 0
    resp = post(public="false", description="Look-ahead scorer.", code_url="https://example.org/code",
                open_weights="false")
    assert resp.status_code == 201, resp.content
    sub = Submission.objects.get(pk=resp.json()["id"])
    assert (sub.public, sub.description, sub.code_url, sub.paper_url, sub.open_weights) == (
        False, "Look-ahead scorer.", "https://example.org/code", "", False)


def test_the_upload_form_offers_the_card_and_stores_the_choice(client, user, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
    client.force_login(user)
    form = client.get("/submit/").content.decode()
    assert re.search(r'name="visibility" value="private"', form) and 'name="description"' in form
    ids, labels = actor_points(frozenlake, "dev")
    resp = client.post("/submit/", {
        "kind": "file", "dataset": KEY, "split": "dev", "target": "q", "method_name": "formed", "modality": "text",
        "visibility": "private", "description": "From the form.", "paper_url": "https://example.org/p",
        "open_weights": "unknown", "file": SimpleUploadedFile("p.csv", csv_bytes(ids, labels))})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    sub = Submission.objects.get(method_name="formed")
    assert (sub.public, sub.description, sub.paper_url, sub.open_weights) == (
        False, "From the form.", "https://example.org/p", None)


def test_a_dev_result_is_its_owners_until_published(client, api, user, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
    """A dev file says nothing of its visibility: private (from the form and the API), so the full table lists none
    of it; published on its page, it is listed (as a self-check). A test file is public unless said otherwise."""
    ids, labels = actor_points(frozenlake, "dev")
    form = {"kind": "file", "dataset": KEY, "split": "dev", "target": "q", "modality": "text", "open_weights": "unknown"}
    client.force_login(user)
    assert client.post("/submit/", {**form, "method_name": "probe-form",
                                    "file": SimpleUploadedFile("p.csv", csv_bytes(ids, labels))}).status_code == 302
    resp = api.post("/api/v1/submissions/", {"dataset": KEY, "split": "dev", "target": "q", "method_name": "probe-api",
                                             "file": SimpleUploadedFile("p.csv", csv_bytes(ids, labels))},
                    format="multipart")
    assert resp.status_code == 201 and resp.json()["public"] is False
    assert dict(Submission.objects.values_list("method_name", "public")) == {"probe-form": False, "probe-api": False}
    test_ids, test_labels = actor_points(frozenlake, "test")
    resp = api.post("/api/v1/submissions/", {"dataset": KEY, "split": "test", "target": "q", "method_name": "ranked",
                                             "description": "Labels.", "file": SimpleUploadedFile(
                                                 "t.csv", csv_bytes(test_ids, test_labels))}, format="multipart")
    assert resp.status_code == 201 and resp.json()["public"] is True
    # Finished, a private dev row is on no public list; published by its owner, the full table lists it.
    Submission.objects.filter(method_name="probe-form").update(  # as the scoring worker leaves it
        state=Submission.FINISHED, finished_at=timezone.now(), method=Method.objects.get_or_create(name="probe-form")[0])
    sub = Submission.objects.get(method_name="probe-form")
    Result.objects.create(submission=sub, metric="spearman", value=0.5, p_value=0.01, num_points=len(ids))
    assert "probe-form" not in Client().get("/leaderboard/").content.decode()
    assert client.post(f"/submissions/{sub.pk}/card/", {"visibility": "public", "open_weights": "unknown"}).status_code == 302
    assert "probe-form" in Client().get("/leaderboard/").content.decode()


def test_the_migration_makes_stored_dev_uploads_private(loaded, user) -> None:  # type: ignore[no-untyped-def]
    import importlib

    from django.apps import apps

    container_row(loaded, user, "stored-dev", 0.4, split="dev")
    container_row(loaded, user, "stored-test", 0.4)
    baseline = container_row(loaded, None, "stored-baseline", 0.4, split="dev")
    Submission.objects.filter(pk=baseline.pk).update(source=Submission.SOURCE_BASELINE)
    importlib.import_module("submissions.migrations.0018_dev_results_private").dev_results_private(apps, None)
    assert dict(Submission.objects.values_list("method_name", "public")) == {
        "stored-dev": False, "stored-test": True, "stored-baseline": True}


def test_a_permalink_discloses_no_more_than_the_board(client, loaded, user) -> None:  # type: ignore[no-untyped-def]
    """The permalink is a new channel on hidden-split results: a submission whose score the Ladder withholds (it
    did not climb) has none, one a later climb replaced has none, and a page shows the stored (disclosed) numbers
    only -- no label-dependent counts, no per-sample or per-state values."""
    best = container_row(loaded, user, "laddered", 0.7)
    withheld = container_row(loaded, user, "laddered", 0.2)
    Submission.objects.filter(pk=withheld.pk).update(ladder_climbed=False)
    replaced = container_row(loaded, user, "laddered", 0.5)
    Submission.objects.filter(pk=best.pk).update(ladder_climbed=True, ladder_against=replaced)
    Submission.objects.filter(pk=replaced.pk).update(ladder_climbed=True)
    assert client.get(f"/results/{withheld.pk}/").status_code == 404
    assert client.get(f"/results/{replaced.pk}/").status_code == 404
    text = client.get(f"/results/{best.pk}/").content.decode()
    assert "0.700" in text and "[0.650, 0.750]" in text and "0.2" not in text.split("Results", 1)[1].split("</table>")[0]
    for leak in ("valid states", "skipped", "sample_values", "per_state", "num_pairs"):
        assert leak not in text, leak


def test_a_public_test_result_needs_a_description_and_says_so_from_the_form_and_the_api(  # type: ignore[no-untyped-def]
        client, api, user, loaded, frozenlake) -> None:
    """The card rule (submissions.services.check_card): one error, on the description field, whichever way the
    upload comes; a private test result, or a dev one, needs none."""
    ids, labels = actor_points(frozenlake, "test")

    def post(**fields: object):  # type: ignore[no-untyped-def]
        data = {"dataset": KEY, "split": "test", "target": "q", "method_name": "bare",
                "file": SimpleUploadedFile("p.csv", csv_bytes(ids, labels)), **fields}
        return api.post("/api/v1/submissions/", data, format="multipart")

    for blank in ("", "   \n "):
        refused = post(description=blank)
        assert refused.status_code == 400, refused.content
        assert list(refused.json()["errors"]) == ["description"]
        assert "required for a public test-split result" in refused.json()["errors"]["description"][0]
    client.force_login(user)
    form = client.post("/submit/", {"kind": "file", "dataset": KEY, "split": "test", "target": "q",
                                    "method_name": "bare", "modality": "text", "visibility": "public",
                                    "open_weights": "unknown", "file": SimpleUploadedFile("p.csv", csv_bytes(ids, labels))})
    assert form.status_code == 200
    assert list(form.context["form"].errors) == ["description"]
    assert "required for a public test-split result" in form.context["form"].errors["description"][0]
    assert Submission.objects.count() == 0
    private = post(public="false")
    assert private.status_code == 201, private.content
    dev_ids, dev_labels = actor_points(frozenlake, "dev")
    dev = post(split="dev", file=SimpleUploadedFile("p.csv", csv_bytes(dev_ids, dev_labels)))
    assert dev.status_code == 201, dev.content
    carded = post(description="Its labels.", backbone="none")
    assert carded.status_code == 201, carded.content
    assert carded.json()["public"] is True and carded.json()["card"]["description"] == "Its labels."


def board_ids(client, ds) -> list[int]:  # type: ignore[no-untyped-def]
    """The submission ids on the board of ``ds`` (target Q, text), every submission shown."""
    rows = client.get(f"/boards/{ds.key}:q:text/", {"format": "json", "all": "1"}).json()["rows"]
    return [r["submission_id"] for r in rows]


def shown_elsewhere(client, method: str) -> dict[str, bool]:  # type: ignore[no-untyped-def]
    """Whether ``method`` is in the figures' and the aggregates' numbers (every source pooled) and the
    leaderboard API's test rows."""
    figure = client.get("/figures/per-environment/", {"format": "json", "source": "any", "split": "test"}).json()
    means = client.get("/api/v1/leaderboard/aggregate/", {"split": "test", "source": "any"}).json()
    rows = client.get("/api/v1/leaderboard/", {"split": "test"}).json()["results"]
    return {"figure": method in {r["method"] for r in figure["rows"]},
            "aggregate": method in {m["method"] for m in means["methods"]},
            "leaderboard": method in {r["method"] for r in rows}}


def test_the_owner_switches_a_result_between_public_and_private_on_its_page(  # type: ignore[no-untyped-def]
        client, loaded, user, staff) -> None:
    sub = container_row(loaded, user, "switched", 0.6, public=False, description="")
    owner = Client(enforce_csrf_checks=True)
    owner.force_login(user)
    page = owner.get(f"/submissions/{sub.pk}/").content.decode()
    assert 'id="card-form"' in page and "<strong>Private</strong>" in page
    assert "badge-private" in owner.get("/submissions/").content.decode()  # My submissions says so
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    url = f"/submissions/{sub.pk}/card/"
    assert owner.post(url, {"visibility": "public", "description": "Looks ahead."}).status_code == 403  # no CSRF token
    # Public without a description: refused on the field, nothing changes.
    refused = owner.post(url, {"csrfmiddlewaretoken": token.group(1), "visibility": "public", "description": " ",
                               "open_weights": "unknown"})
    assert refused.status_code == 400
    assert "required for a public test-split result" in refused.context["card_form"].errors["description"][0]
    sub.refresh_from_db()
    assert not sub.public and client.get(f"/results/{sub.pk}/").status_code == 404
    assert sub.pk not in board_ids(client, loaded)  # read before the switch: the board's caches hold this
    assert shown_elsewhere(client, "switched") == {"figure": False, "aggregate": False, "leaderboard": False}
    # With one: public at once, on the board (its cached export too) and with an anonymous permalink.
    saved = owner.post(url, {"csrfmiddlewaretoken": token.group(1), "visibility": "public",
                             "description": "Looks one step ahead.", "code_url": "https://example.org/code",
                             "open_weights": "false"})
    assert saved.status_code == 302 and saved["Location"] == f"/submissions/{sub.pk}/"
    sub.refresh_from_db()
    assert (sub.public, sub.description, sub.code_url, sub.open_weights) == (
        True, "Looks one step ahead.", "https://example.org/code", False)
    assert sub.pk in board_ids(client, loaded)
    assert shown_elsewhere(client, "switched") == {"figure": True, "aggregate": True, "leaderboard": True}
    permalink = client.get(f"/results/{sub.pk}/").content.decode()
    assert "Looks one step ahead." in permalink and 'href="https://example.org/code"' in permalink
    assert "its public page" in owner.get(f"/submissions/{sub.pk}/").content.decode()
    assert "badge-private" not in owner.get("/submissions/").content.decode()
    # Another account, or nobody, cannot change it: 404 as for the page, a login for an anonymous visitor.
    other = Client()
    other.force_login(staff)
    assert other.post(url, {"visibility": "private", "description": "x"}).status_code == 404
    assert Client().post(url, {"visibility": "private"}).status_code == 302
    sub.refresh_from_db()
    assert sub.public
    # Private again: off the board, the leaderboard API and the permalink.
    owner.post(url, {"csrfmiddlewaretoken": token.group(1), "visibility": "private", "description": "Looks one step ahead."})
    assert sub.pk not in board_ids(client, loaded)
    assert client.get(f"/results/{sub.pk}/").status_code == 404
    assert shown_elsewhere(client, "switched") == {"figure": False, "aggregate": False, "leaderboard": False}
    assert owner.get(f"/submissions/{sub.pk}/").status_code == 200  # still its owner's
    # A submission still running has no card form; a post to it is told why on its page.
    running = container_row(loaded, user, "still-running", 0.1)
    Submission.objects.filter(pk=running.pk).update(state=Submission.SCORING)
    assert 'id="card-form"' not in owner.get(f"/submissions/{running.pk}/").content.decode()
    busy = owner.post(f"/submissions/{running.pk}/card/", {"csrfmiddlewaretoken": token.group(1),
                                                           "visibility": "private"}, follow=True)
    assert "its card can be changed once it has finished or failed" in busy.content.decode()
    assert Submission.objects.get(pk=running.pk).public


def test_the_owner_changes_the_card_through_the_api(api, client, loaded, user, staff) -> None:  # type: ignore[no-untyped-def]
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    sub = container_row(loaded, user, "patched", 0.4, description="First words.")
    url = f"/api/v1/submissions/{sub.pk}/"
    resp = api.patch(url, {"paper_url": "https://example.org/paper-2", "open_weights": None}, format="json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["card"] == {"description": "First words.", "paper_url": "https://example.org/paper-2",
                                   "code_url": None, "open_weights": None}
    for change, field in [({"description": ""}, "description"), ({"paper_url": "javascript:x"}, "paper_url"),
                          ({"backbone": "other"}, "backbone")]:
        refused = api.patch(url, change, format="json")
        assert refused.status_code == 400 and field in refused.json()["errors"], refused.content
    assert api.patch(url, {"public": False}, format="json").json()["public"] is False
    assert sub.pk not in board_ids(client, loaded) and client.get(f"/results/{sub.pk}/").status_code == 404
    assert api.patch(url, {"public": True}, format="json").json()["public"] is True
    assert sub.pk in board_ids(client, loaded) and client.get(f"/results/{sub.pk}/").status_code == 200
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=staff).key}")
    assert other.patch(url, {"public": False}, format="json").status_code == 404
    assert APIClient().patch(url, {"public": False}, format="json").status_code in (401, 403)
    sub.refresh_from_db()
    assert sub.public
    running = container_row(loaded, user, "running", 0.1)
    Submission.objects.filter(pk=running.pk).update(state=Submission.SCORING)
    busy = api.patch(f"/api/v1/submissions/{running.pk}/", {"public": False}, format="json")
    assert busy.status_code == 409 and "once it has finished" in busy.json()["errors"]["id"][0]

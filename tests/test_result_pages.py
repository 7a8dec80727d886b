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

"""The upload → validate → score flow, pages, API, quota and label secrecy, on Postgres.

Expected correlations are computed here with scipy from the dataset's labels, independently
of :mod:`qval.scoring`. The scoring task is the real Celery task function, called in-process
(``tests/test_worker_process.py`` runs it in a real worker process).
"""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pandas as pd
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from scipy import stats

from leaderboard.models import Backbone, Candidate, Dataset, Label, Method, State
from qval.envs import registry
from submissions.models import Result, Submission
from workers.tasks import score_submission, validate_upload

pytestmark = pytest.mark.django_db

KEY = "{0.slug}@{0.version}".format(registry.BUILDERS["frozenlake"]()[1])


def csv_bytes(ids: list[str], scores: list[float] | np.ndarray) -> bytes:
    return pd.DataFrame({"id": ids, "score": scores}).to_csv(index=False).encode()


def upload(api, content: bytes, name: str = "preds.csv", **fields) -> dict:  # type: ignore[no-untyped-def]
    """POST a predictions file (answered ``received``), run the real validation task on it in-process
    (as ``finish`` runs the scoring task) and return the submission as the API then shows it."""
    data = {"dataset": KEY, "split": "test", "target": "q", "method_name": "oracle", "public": "true",
            "description": "A method of the tests.", **fields}  # a public test result needs its card's description;
    # published: a dev result is its owner's alone unless published (tests/test_result_pages.py checks the default)
    data["file"] = SimpleUploadedFile(name, content)
    resp = api.post("/api/v1/submissions/", data, format="multipart")
    assert resp.status_code == 201, resp.content
    sub = resp.json()
    if sub["state"] == Submission.RECEIVED:
        validate_upload(sub["id"])
    return api.get(f"/api/v1/submissions/{sub['id']}/").json()


def finish(sub_id: int) -> dict:
    assert score_submission(sub_id) == Submission.FINISHED
    sub = Submission.objects.get(pk=sub_id)
    return {r.metric: r for r in sub.results.all()}


def actor_points(ds, split: str) -> tuple[list[str], np.ndarray]:  # type: ignore[no-untyped-def]
    ids = [s.actor_candidate.id for s in ds.states if s.split == split]
    return ids, np.array([ds.q_labels[i] for i in ids])


@pytest.mark.parametrize("kind", ["random", "oracle"])
@pytest.mark.parametrize("split", ["dev", "test"])
def test_pointwise_scores_match_scipy(api, loaded, frozenlake, kind: str, split: str) -> None:
    """Exact on a public split; on the hidden test split rounded as disclosed (3 decimals, p 2 digits)."""
    ids, labels = actor_points(frozenlake, split)
    rng = np.random.default_rng(7)
    scores = rng.random(len(ids)) if kind == "random" else labels + rng.normal(0, 0.05, len(ids))
    sub = upload(api, csv_bytes(ids, scores), method_name=kind, split=split)
    assert sub["state"] == "queued"
    res = finish(sub["id"])
    for metric, fn in [("spearman", stats.spearmanr), ("kendall_tau", stats.kendalltau), ("pearson", stats.pearsonr)]:
        value, p_value = (float(x) for x in fn(labels, scores)[:2])
        if split == "test":
            value, p_value = round(value, 3), float(f"{p_value:.2g}")
        assert res[metric].num_points == len(ids)
        assert res[metric].value == pytest.approx(value, abs=1e-9)
        assert res[metric].p_value == pytest.approx(p_value, abs=1e-9, rel=1e-9)
    if kind == "oracle":
        assert res["spearman"].value > 0.8
    assert res["spearman"].coverage == 1.0


def test_ranking_submission_gets_per_state_mean_and_std(api, loaded, frozenlake) -> None:
    rng = np.random.default_rng(3)
    states = [s for s in frozenlake.states if s.split == "dev"]
    ids, scores, per_state = [], [], []
    for s in states:
        q = np.array([frozenlake.q_labels[c.id] for c in s.candidates])
        sc = q + rng.normal(0, 0.2, len(q))
        ids += [c.id for c in s.candidates]
        scores += list(sc)
        if len(set(q)) > 1:
            per_state.append(stats.spearmanr(q, sc)[0])
    sub = upload(api, csv_bytes(ids, scores), split="dev", method_name="ranker")
    res = finish(sub["id"])
    rank = res["ranking_spearman"]
    assert rank.value == pytest.approx(np.mean(per_state), abs=1e-12)
    assert rank.details["std"] == pytest.approx(np.std(per_state, ddof=1), abs=1e-12)
    assert rank.details["num_valid"] == len(per_state)
    assert rank.details["num_skipped"] == len(states) - len(per_state)
    # The global correlation uses only the actor candidates.
    aid, alab = actor_points(frozenlake, "dev")
    by_id = dict(zip(ids, scores))
    assert res["spearman"].value == pytest.approx(stats.spearmanr(alab, [by_id[i] for i in aid])[0], abs=1e-9)


def test_v_target_and_reference_json(api, loaded, frozenlake) -> None:
    states = [s for s in frozenlake.states if s.split == "dev"]
    v = np.array([frozenlake.v_labels[s.id] for s in states])
    values = list(v + np.linspace(0, 0.01, len(v)))
    values[0] = None  # null is NaN: dropped and counted
    body = json.dumps({"method_name": "ref-format", "values": values}).encode()
    sub = upload(api, body, name="summary.json", target="v", method_name="ref-format", split="dev")
    res = finish(sub["id"])
    kept = np.array(values[1:], dtype=float)
    assert res["spearman"].num_points == len(states) - 1
    assert res["spearman"].num_dropped == 1
    assert res["spearman"].value == pytest.approx(stats.spearmanr(v[1:], kept)[0], abs=1e-9)


def test_rescoring_is_idempotent(api, loaded, frozenlake) -> None:
    ids, labels = actor_points(frozenlake, "dev")
    sub = upload(api, csv_bytes(ids, labels[::-1]), split="dev")
    first = {m: (r.value, r.p_value, r.details) for m, r in finish(sub["id"]).items()}
    second = {m: (r.value, r.p_value, r.details) for m, r in finish(sub["id"]).items()}
    assert first == second
    assert Result.objects.filter(submission_id=sub["id"]).count() == len(first)


def test_missing_ids_are_coverage_and_few_points_are_insufficient(api, loaded, frozenlake) -> None:
    ids, labels = actor_points(frozenlake, "test")
    sub = upload(api, csv_bytes(ids[:40], labels[:40]))
    assert sub["coverage"]["missing"] == len(ids) - 40
    res = finish(sub["id"])
    assert res["spearman"].insufficient and res["spearman"].value is None
    assert res["spearman"].coverage == pytest.approx(40 / len(ids))


def _db_snapshot() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in (Dataset, State, Candidate, Label, Method, Backbone, Result)}


MALFORMED = {
    "bad-csv": (b'id,score\n"unclosed,0.5\nx,1\n', "preds.csv", "parse"),
    "unknown-ids": (b"id,score\nnot-an-id,0.5\nalso-bad,0.1\n", "preds.csv", "unknown"),
    "duplicates": (None, "preds.csv", "duplicate"),
    "text-score": (None, "preds.csv", "not a number"),
    "empty": (b"", "preds.csv", "empty"),
    "non-utf8": ("id,score\ncaf\xe9,0.5\n".encode("latin-1"), "preds.csv", "UTF-8"),
    "too-large": (None, "big.csv", "limit"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_files_fail_precisely_and_change_nothing(api, loaded, frozenlake, settings, case: str) -> None:
    content, name, needle = MALFORMED[case]
    ids, _ = actor_points(frozenlake, "test")
    if case == "duplicates":
        content = csv_bytes([ids[0], ids[1], ids[0]], [0.1, 0.2, 0.3])
    elif case == "text-score":
        content = csv_bytes(ids[:3], [0.1, 0.2, 0.3]).replace(b"0.2", b"abc")
    elif case == "too-large":
        settings.QVAL_MAX_UPLOAD_BYTES = 1024 * 1024
        content = b"id,score\n" + b"x" * (2 * 1024 * 1024)
    before = _db_snapshot()
    sub = upload(api, content, name=name)
    assert sub["state"] == "failed" and sub["final"]
    assert needle.lower() in (sub["error"] + json.dumps(sub["problems"])).lower()
    assert sub["fault"] == "user"
    assert _db_snapshot() == before
    if case == "text-score":
        assert "row 2" in sub["error"] or "line 3" in sub["error"]
    if case == "duplicates":
        assert ids[0] in sub["error"]


@pytest.mark.slow
def test_a_200_mb_file_is_refused_without_being_stored(api, loaded, data_dir) -> None:
    content = b"id,score\n" + b"a,0.5\n" * (200 * 1024 * 1024 // 6)
    sub = upload(api, content, name="huge.csv")
    assert sub["state"] == "failed"
    assert "limit is 100 MiB" in sub["error"]
    assert Submission.objects.get(pk=sub["id"]).file.name == ""


def test_request_errors_create_nothing(api, loaded) -> None:
    cases = [({"dataset": "nope"}, 404, "dataset"), ({"split": "validation"}, 400, "split"), ({"target": "x"}, 400, "target")]
    for override, status, field in cases:
        data = {"dataset": KEY, "split": "test", "target": "q", "method_name": "m",
                "file": SimpleUploadedFile("p.csv", b"id,score\n"), **override}
        resp = api.post("/api/v1/submissions/", data, format="multipart")
        assert resp.status_code == status, resp.content
        assert field in resp.json()["errors"]
    assert Submission.objects.count() == 0


def test_test_split_quota(api, loaded, frozenlake, settings) -> None:
    settings.QVAL_TEST_QUOTA_PER_DAY = 2
    ids, labels = actor_points(frozenlake, "test")
    good = csv_bytes(ids, labels)
    upload(api, good)
    upload(api, b"", name="bad.csv")  # a user-caused failure counts
    data = {"dataset": KEY, "split": "test", "target": "q", "method_name": "m", "description": "Its labels.",
            "file": SimpleUploadedFile("p.csv", good)}
    resp = api.post("/api/v1/submissions/", data, format="multipart")
    assert resp.status_code == 429 and "quota" in json.dumps(resp.json())
    # A failure through our fault does not count; the dev split is unlimited.
    Submission.objects.filter(state="failed").update(fault=Submission.FAULT_SYSTEM)
    upload(api, good)
    for _ in range(3):
        upload(api, csv_bytes(*actor_points(frozenlake, "dev")), split="dev")


def test_hidden_labels_never_reach_a_user(client, api, user, loaded, frozenlake) -> None:
    test_only = {
        frozenlake.q_labels[c.id] for s in frozenlake.states if s.split == "test" for c in s.candidates
    } | {frozenlake.v_labels[s.id] for s in frozenlake.states if s.split == "test"}
    dev = set(frozenlake.q_labels.values()) - test_only
    secrets = {v for v in test_only if v not in (0.0, 1.0)}
    assert secrets, "the test split should have non-trivial labels"
    ids, labels = actor_points(frozenlake, "test")
    ok = upload(api, csv_bytes(ids, labels))
    finish(ok["id"])
    bad = upload(api, json.dumps({"method_name": "x", "values": [0.1] * (len(ids) + 3)}).encode(), name="r.json")
    client.force_login(user)
    bodies = []
    for fmt in ("jsonl", "csv", "parquet"):
        resp = client.get(f"/api/v1/datasets/{KEY}/download/", {"split": "test", "format": fmt})
        assert resp.status_code == 200
        frame = {"jsonl": lambda b: pd.read_json(io.BytesIO(b), lines=True), "csv": lambda b: pd.read_csv(io.BytesIO(b)),
                 "parquet": lambda b: pd.read_parquet(io.BytesIO(b))}[fmt](resp.content)
        assert not {"q_label", "v_label"} & set(frame.columns)
        assert len(frame) == sum(len(s.candidates) for s in frozenlake.states if s.split == "test")
        bodies.append(resp.content.decode("utf-8", "replace"))
    for url in ["/", "/leaderboard/", "/datasets/", f"/datasets/{KEY}/", f"/submissions/{ok['id']}/",
                f"/submissions/{bad['id']}/", f"/submissions/{ok['id']}/status/", "/submissions/",
                "/api/v1/datasets/", "/api/v1/leaderboard/", f"/api/v1/submissions/{ok['id']}/",
                f"/api/v1/submissions/{bad['id']}/", "/leaderboard/aggregate/", "/leaderboard/critical-difference/",
                "/api/v1/leaderboard/aggregate/", "/api/v1/leaderboard/critical-difference/",
                "/leaderboard/aggregate/?source=self-reported", "/api/v1/leaderboard/aggregate/?source=any"]:
        resp = client.get(url)
        assert resp.status_code == 200, url
        bodies.append(resp.content.decode())
    text = "\n".join(bodies)
    numbers = {float(x) for x in re.findall(r"-?\d+\.\d{4,}(?:e-?\d+)?", text)}
    leaked = {v for v in secrets if any(abs(v - n) < 1e-9 for n in numbers)} - dev
    assert not leaked, f"test labels appear in user-visible output: {sorted(leaked)[:5]}"
    # The dev download does carry labels, and they are the dataset's.
    dev_csv = pd.read_csv(io.BytesIO(client.get(f"/datasets/{KEY}/download/", {"split": "dev", "format": "csv"}).content),
                          float_precision="round_trip")
    assert dev_csv["q_label"].tolist() == [frozenlake.q_labels[c] for c in dev_csv["candidate_id"]]


def test_pages_walk(client, user, api, loaded, frozenlake) -> None:
    ids, labels = actor_points(frozenlake, "dev")
    sub = upload(api, csv_bytes(ids, labels), split="dev", method_name="walker", backbone="tiny")
    finish(sub["id"])
    for url, needle in [("/", "Q-aligned"), ("/datasets/", KEY), (f"/datasets/{KEY}/", "Reference policy"),
                        ("/leaderboard/", "walker"), ("/leaderboard/?split=test", "No finished submission"),
                        ("/leaderboard/?sort=-kendall_tau&family=other", "walker"),
                        ("/how-we-score/", "Per-state ranking Spearman"),
                        ("/leaderboard/aggregate/?split=dev&source=self-reported", "walker"),
                        ("/leaderboard/critical-difference/?split=dev", "at least 3 methods"),
                        ("/compare/", "Compare two submissions")]:
        resp = client.get(url)
        assert resp.status_code == 200 and needle in resp.content.decode(), url
    assert client.get("/submit/").status_code == 302  # login required
    client.force_login(user)
    assert "Submit predictions" in client.get("/submit/").content.decode()
    page = client.get(f"/submissions/{sub['id']}/").content.decode()
    assert 'data-metric="spearman"' in page and "1.0000***" in page
    resp = client.post("/submit/", {"dataset": KEY, "split": "dev", "target": "q", "method_name": "form", "modality": "text",
                                    "file": SimpleUploadedFile("f.csv", csv_bytes(ids, labels))})
    assert resp.status_code == 302 and re.match(r"/submissions/\d+/", resp["Location"])


def test_signup_login_logout(client, db, mailoutbox) -> None:
    assert "Sign up" in client.get("/accounts/signup/").content.decode()
    resp = client.post("/accounts/signup/", {"username": "grace", "email": "grace@example.org",
                                             "password1": "q-aligned-2026", "password2": "q-aligned-2026"})
    assert resp.status_code == 302
    assert mailoutbox and "/accounts/confirm-email/" in mailoutbox[0].body
    assert "Log out (grace)" in client.get("/").content.decode()
    client.post("/accounts/logout/")
    assert "Log in" in client.get("/").content.decode()
    assert client.login(username="grace", password="q-aligned-2026")


def test_leaderboard_api_pages(client, loaded) -> None:  # type: ignore[no-untyped-def]
    """``/api/v1/leaderboard/`` in pages (default 100, ``page_size`` at most 1000) with their links;
    a page out of range is a 404 saying why; the board's export still has every row."""
    from django.utils import timezone

    method = Method.objects.create(name="m", family="direct")
    subs = Submission.objects.bulk_create(
        Submission(dataset=loaded, split="test", target="q", method_name="m", method=method, filename="p.csv",
                   state=Submission.FINISHED, finished_at=timezone.now(), source=Submission.SOURCE_BASELINE)
        for i in range(1005))
    Result.objects.bulk_create(Result(submission=s, metric="spearman", value=1 - i / 2000, num_points=60, coverage=1.0)
                               for i, s in enumerate(subs))
    first = client.get("/api/v1/leaderboard/", {"dataset": loaded.key}).json()
    assert first["count"] == 1005 and first["previous"] is None and len(first["results"]) == 100
    ids = [s.pk for s in subs]  # sorted by ρ, best first
    assert [r["submission_id"] for r in first["results"]] == ids[:100]
    assert first["next"] == f"http://testserver/api/v1/leaderboard/?dataset={loaded.key.replace('@', '%40')}&page=2"
    second = client.get(first["next"]).json()
    assert [r["submission_id"] for r in second["results"]] == ids[100:200]
    assert second["previous"] == f"http://testserver/api/v1/leaderboard/?dataset={loaded.key.replace('@', '%40')}"
    capped = client.get("/api/v1/leaderboard/", {"page_size": 5000}).json()
    assert len(capped["results"]) == 1000 and capped["next"].endswith("page=2&page_size=5000")
    last = client.get(capped["next"]).json()
    assert [r["submission_id"] for r in last["results"]] == ids[1000:] and last["next"] is None
    small = client.get("/api/v1/leaderboard/", {"page_size": 2, "page": 3}).json()
    assert [r["submission_id"] for r in small["results"]] == ids[4:6]
    for page, why in [("999", "That page contains no results"), ("0", "That page number is less than 1"),
                      ("x", "That page number is not an integer")]:
        resp = client.get("/api/v1/leaderboard/", {"page": page})
        assert resp.status_code == 404 and resp.json() == {"detail": f"invalid page {page!r}: {why}"}
    export = json.loads(client.get("/leaderboard/", {"format": "json"}).getvalue())["rows"]
    assert len(export) == 1005
    assert len(client.get("/leaderboard/", {"format": "csv"}).getvalue().decode().strip().splitlines()) == 1006


def test_api_schema_and_leaderboard(client, api, loaded, frozenlake) -> None:
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    text = schema.content.decode()
    for path in ["/api/v1/datasets/", "/api/v1/submissions/", "/api/v1/leaderboard/"]:
        assert path in text
    ids, labels = actor_points(frozenlake, "dev")  # FrozenLake's test split ranks no uploaded file (open book)
    finish(upload(api, csv_bytes(ids, labels), split="dev", method_name="best")["id"])
    finish(upload(api, csv_bytes(ids, -labels), split="dev", method_name="worst")["id"])
    rows = client.get("/api/v1/leaderboard/", {"dataset": KEY}).json()["results"]
    assert [r["method"] for r in rows] == ["best", "worst"]
    assert rows[0]["spearman"] == pytest.approx(1.0) and rows[1]["spearman"] == pytest.approx(-1.0)
    datasets = client.get("/api/v1/datasets/").json()
    assert datasets[0]["key"] == KEY and datasets[0]["splits"]["test"]["labels_public"] is False
    assert api.get("/api/v1/submissions/999999/").status_code == 404
    assert client.post("/api/v1/submissions/", {}).status_code in (401, 403)


def test_management_commands(loaded, frozenlake, capsys) -> None:
    call_command("issue_token", "--username", "bot")
    token = capsys.readouterr().out.strip()
    assert re.fullmatch(r"[0-9a-f]{40}", token)
    call_command("issue_token", "--username", "bot", "--verified-email", "bot@example.org")
    assert capsys.readouterr().out.strip() == token
    from allauth.account.models import EmailAddress
    assert EmailAddress.objects.filter(user__username="bot", email="bot@example.org", verified=True).exists()
    call_command("export_labels", "--dataset", "frozenlake-8x8", "--split", "test", "--target", "q")
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out), dtype={"id": str}, float_precision="round_trip")
    expected = {c.id: frozenlake.q_labels[c.id] for s in frozenlake.states if s.split == "test" for c in s.candidates}
    assert dict(zip(frame["id"], frame["label"])) == expected


@pytest.mark.django_db
@pytest.mark.parametrize("split", ["train", "dev", "test"])
@pytest.mark.parametrize("modality", ["text", "image"])
def test_uploads_score_on_every_split_and_modality(api, loaded, frozenlake, split: str, modality: str) -> None:
    """FrozenLake 1.1 has text and 512x512 images: a method of either modality is scored on every split,
    its pointwise numbers equal scipy's and the leaderboard files it under its modality (FrozenLake is open
    book: an uploaded file is ranked on its public splits only)."""
    ids, labels = actor_points(frozenlake, split)
    scores = labels + np.random.default_rng(1).normal(0, 0.3, len(labels))
    sub = upload(api, csv_bytes(ids, scores), split=split, modality=modality, method_name=f"m-{modality}")
    rows = finish(sub["id"])
    expected = float(stats.spearmanr(labels, scores)[0])
    assert rows["spearman"].value == pytest.approx(round(expected, 3) if split == "test" else expected, abs=1e-12)
    board = api.get("/api/v1/leaderboard/", {"dataset": "frozenlake-8x8", "split": split}).json()["results"]
    ranked = [(f"m-{modality}", modality)] if split != "test" else []
    assert [(r["method"], r["modality"]) for r in board] == ranked

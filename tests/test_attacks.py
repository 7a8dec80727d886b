"""The attack suite: every channel of the threat model (README, *Threat model: hidden splits*)
tried as an adversarial user would, against the real site on PostgreSQL. Each class is one
channel; where it makes the attack's power visible, the same attack is first shown to work
on a public split, so the test can fail.

Other classes of this suite (hostile prediction files, secret test splits) live beside these.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import stat
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import threading
import uuid
import zipfile
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.utils import timezone

from board import charts
from qval import build, containers, export, hidden, metrics, safejson, sampling, schema
from qval import containers as qc
from qval import predictions as qpred
from qval.compare import friedman_nemenyi
from qval.scoring import (DISCLOSED_DETAILS, DISCLOSED_DIGITS, Truth, disclose, disclose_value, score,
                          truth_from_dataset)
from qval.envs import registry
from submissions import lifecycle, services
from submissions.models import Submission
from tests.test_containers import image_archive
from tests.test_site import KEY, actor_points, csv_bytes, finish, upload

FROZENLAKE_1_1_FINGERPRINT = "0836d222be3fe890dcea21f87e1eb7d4c32b32de8b48a7e7619897dfd944b6a1"
"""``frozenlake-8x8@1.1`` as published (its test split public-seeded, hence superseded by 1.2)."""

FROZENLAKE_1_1_SPLITS = {
    "train": "30e925b312b52f22cffe81d6d9958d205cd268063155c8216c178d961e66ed75",
    "dev": "dad747c352a1358990ac1210b15adca1491af87532c26b8878180afee3e68667",
    "test": "6871ac06a20d2d5faedc83fe0b68926ba5a6321cf98657c83d9d6747ad6c6b98",
}
""":meth:`qval.schema.Dataset.split_fingerprint` of each split of the published ``1.1`` (the build
with fingerprint :data:`FROZENLAKE_1_1_FINGERPRINT`; ``test_frozenlake_1_1_still_rebuilds`` checks both)."""


def one_hot_samples(ids: list[str]) -> bytes:
    """The probe's file: sample ``i`` scores 1 on point ``i`` and 0 on every other point."""
    n = len(ids)
    frame = pd.DataFrame({"id": np.tile(ids, n), "sample": np.repeat(np.arange(n), n),
                          "score": np.eye(n).ravel()})
    return frame.to_csv(index=False).encode()


def recover(result: dict) -> np.ndarray | None:  # type: ignore[type-arg]
    """The attacker's step: the per-sample Pearson r of the one-hot file, if the site shows them."""
    pearson = {r["metric"]: r for r in result["results"]}.get("pearson")
    values = ((pearson or {}).get("details") or {}).get("samples", {}).get("values")
    return None if values is None else np.array([np.nan if v is None else v for v in values], dtype=float)


@pytest.mark.django_db
class TestSampleColumnChannel:
    """Channel: per-sample values of a multi-sample upload (issue 11, finding 1)."""

    def _attack(self, api, frozenlake, split: str) -> tuple[dict, np.ndarray]:  # type: ignore[no-untyped-def,type-arg]
        ids, labels = actor_points(frozenlake, split)
        sub = upload(api, one_hot_samples(ids), split=split, method_name="one-hot")
        finish(sub["id"])
        return api.get(f"/api/v1/submissions/{sub['id']}/").json(), labels

    def test_the_attack_works_where_labels_are_public(self, api, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_BOOTSTRAP_RESAMPLES = 0
        result, labels = self._attack(api, frozenlake, "dev")
        recovered = recover(result)
        assert recovered is not None and len(recovered) == len(labels)
        ok = np.isfinite(recovered)
        # Sample i's r is an affine function of label i: the labels come back up to scale and offset.
        assert abs(np.corrcoef(recovered[ok], labels[ok])[0, 1]) > 0.999

    def test_the_attack_recovers_nothing_on_test(self, api, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_BOOTSTRAP_RESAMPLES = 0
        result, labels = self._attack(api, frozenlake, "test")
        assert result["state"] == "finished"
        assert recover(result) is None
        numbers = [v for r in result["results"] for v in (r["value"], r["p_value"]) if v is not None]
        assert len(numbers) < 10 < len(labels)  # far fewer numbers than labels, whatever they are
        for row in result["results"]:
            assert set(row["details"]) <= DISCLOSED_DETAILS
            assert row["details"].get("samples", {}) in ({}, {"aggregation": "mean_prediction",
                                                              "num_samples": len(labels)})

    def test_per_state_ranking_variant_recovers_nothing_on_test(self, api, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        """Sample i ranks state i's candidates (0, 1, 2, 3) and scores everything else 0."""
        settings.QVAL_BOOTSTRAP_RESAMPLES = 0
        states = [s for s in frozenlake.states if s.split == "test"]
        cids = [c.id for s in states for c in s.candidates]
        rows = []
        for i, s in enumerate(states):
            ranked = {c.id: float(k) for k, c in enumerate(s.candidates)}
            rows += [(cid, i, ranked.get(cid, 0.0)) for cid in cids]
        frame = pd.DataFrame(rows, columns=["id", "sample", "score"])
        sub = upload(api, frame.to_csv(index=False).encode(), method_name="per-state")
        finish(sub["id"])
        result = api.get(f"/api/v1/submissions/{sub['id']}/").json()
        shown = json.dumps(result["results"])
        for row in result["results"]:
            assert set(row["details"]) <= DISCLOSED_DETAILS
            for value in row["details"].values():
                assert not isinstance(value, list) or len(value) == 2  # a ci95 at most, never per state/sample
        assert '"values"' not in shown and "per_state" not in shown

    def test_hidden_numbers_are_rounded_to_the_leaderboard_precision(self, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        ids, labels = actor_points(frozenlake, "test")
        scores = labels + np.random.default_rng(5).normal(0, 0.4, len(ids))
        sub = upload(api, csv_bytes(ids, scores), method_name="noisy")
        finish(sub["id"])
        for row in api.get(f"/api/v1/submissions/{sub['id']}/").json()["results"]:
            for v in [row["value"], *(row["details"].get("ci95") or [])]:
                assert v is None or round(v, DISCLOSED_DIGITS) == v

    def test_the_migration_discloses_results_stored_before(self, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        """Results stored before the rule (per-sample values on test) are cut by the data migration."""
        import importlib

        from django.apps import apps

        ids, labels = actor_points(frozenlake, "test")
        sub = upload(api, one_hot_samples(ids), method_name="old")
        sub_obj = Submission.objects.get(pk=sub["id"])
        sub_obj.transition(Submission.SCORING)
        from leaderboard.loading import truth_for
        truth = truth_for(sub_obj.dataset, "test", "q")
        table = np.eye(len(ids))
        rows = score(truth, np.tile(ids, len(ids)), table.ravel(), samples=np.repeat(np.arange(len(ids)), len(ids)),
                     bootstrap_resamples=0)
        sub_obj.results.create(metric="pearson", value=rows[2].value, details=rows[2].details)
        sub_obj.transition(Submission.FINISHED)
        assert "values" in sub_obj.results.get(metric="pearson").details["samples"]
        folder = Path(__file__).resolve().parents[1] / "submissions" / "migrations"
        name = next(folder.glob("*_disclose_hidden_results.py")).stem  # whatever number it has
        migration = importlib.import_module(f"submissions.migrations.{name}")
        migration.disclose_hidden_results(apps, None)
        assert sub_obj.results.get(metric="pearson").details["samples"] == {
            "aggregation": "mean_prediction", "num_samples": len(ids)}


def _container_submission(user, dataset, split: str, ids: list[str], scores: np.ndarray) -> Submission:  # type: ignore[no-untyped-def]
    """A container submission finished as the gpu worker finishes one: its archive stored, its
    container's predictions.jsonl kept and its scored rows stored by :func:`submissions.lifecycle.finish`."""
    from leaderboard.loading import truth_for

    sub = Submission.objects.create(user=user, dataset=dataset, split=split, target="q", method_name="boxed",
                                    kind=Submission.KIND_CONTAINER, file_format=services.CONTAINER_FORMAT,
                                    filename="method.tar")
    sub.file.save("method.tar", ContentFile(b"not predictions: an image archive\x00\x01"), save=False)
    for state in (Submission.VALIDATING, Submission.QUEUED, Submission.SCORING):
        sub.transition(state)
    lines = "".join(json.dumps({"id": i, "score": float(s)}) + "\n" for i, s in zip(ids, scores)).encode()
    truth = truth_for(dataset, split, "q")
    rows = score(truth, np.array(ids, dtype=object), np.asarray(scores, dtype=float), bootstrap_resamples=50)
    name = default_storage.save(f"predictions/{sub.pk}-predictions.jsonl", ContentFile(lines))
    assert lifecycle.finish(sub.pk, rows, predictions=name) == Submission.FINISHED
    return sub


@pytest.mark.django_db
class TestCompareChannel:
    """Compare: works for container submissions (finding 4); on a hidden split it is one more
    number per pair, so only full-coverage submissions, rounded."""

    def test_two_container_submissions_compare_like_files(self, client, api, user, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_BOOTSTRAP_RESAMPLES = 50
        ids, labels = actor_points(frozenlake, "dev")
        rng = np.random.default_rng(2)
        sa, sb = labels + rng.normal(0, 0.3, len(ids)), labels + rng.normal(0, 0.6, len(ids))
        a = _container_submission(user, loaded, "dev", ids, sa)
        b = _container_submission(user, loaded, "dev", ids, sb)
        fa = upload(api, csv_bytes(ids, sa), split="dev", method_name="file-a")["id"]
        fb = upload(api, csv_bytes(ids, sb), split="dev", method_name="file-b")["id"]
        finish(fa), finish(fb)
        client.force_login(user)  # their owner
        boxed = client.get("/api/v1/compare/", {"a": a.pk, "b": b.pk})
        assert boxed.status_code == 200, boxed.content
        files = client.get("/api/v1/compare/", {"a": fa, "b": fb}).json()
        assert [m["difference"] for m in boxed.json()["metrics"]] == pytest.approx(
            [m["difference"] for m in files["metrics"]], abs=1e-12)
        assert client.get("/compare/", {"a": a.pk, "b": b.pk}).status_code == 200

    def test_a_container_run_before_predictions_were_kept_is_a_clear_400(self, client, user, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        ids, labels = actor_points(frozenlake, "dev")
        a = _container_submission(user, loaded, "dev", ids, labels)
        b = _container_submission(user, loaded, "dev", ids, labels[::-1])
        Submission.objects.filter(pk=b.pk).update(predictions="")
        client.force_login(user)
        resp = client.get("/api/v1/compare/", {"a": a.pk, "b": b.pk})
        assert resp.status_code == 400 and "kept a container's predictions" in json.dumps(resp.json())

    def test_on_test_partial_files_cannot_be_compared_and_numbers_are_rounded(self, client, api, user, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_BOOTSTRAP_RESAMPLES = 50
        ids, labels = actor_points(frozenlake, "test")
        rng = np.random.default_rng(3)
        # The second is much better: it climbs the account's ladder, so both are on the board.
        full = [upload(api, csv_bytes(ids, labels + rng.normal(0, sd, len(ids))), method_name=f"m{i}")["id"]
                for i, sd in enumerate((0.5, 0.1))]
        partial = upload(api, csv_bytes(ids[:60], labels[:60]), method_name="subset")["id"]
        for pk in (*full, partial):
            finish(pk)
        client.force_login(user)  # their owner
        refused = client.get("/api/v1/compare/", {"a": partial, "b": full[0]})
        assert refused.status_code == 400 and "only submissions that score every point" in json.dumps(refused.json())
        ok = client.get("/api/v1/compare/", {"a": full[0], "b": full[1]}).json()
        for m in ok["metrics"]:
            for v in [m["rho_a"], m["rho_b"], m["difference"], *(m["ci95"] or [])]:
                assert v is None or round(v, DISCLOSED_DIGITS) == v


@pytest.mark.django_db(transaction=True)
class TestQuotaRace:
    """Twelve concurrent test-split uploads of one account (finding 5): exactly the quota passes."""

    def test_twelve_concurrent_uploads_accept_exactly_the_quota(self, loaded, frozenlake, user, settings) -> None:  # type: ignore[no-untyped-def]
        from rest_framework.authtoken.models import Token
        from rest_framework.test import APIClient

        settings.QVAL_TEST_QUOTA_PER_DAY = 5
        token = Token.objects.create(user=user).key
        ids, labels = actor_points(frozenlake, "test")
        body = csv_bytes(ids, labels)
        barrier, statuses = threading.Barrier(12), []

        def post() -> None:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
            data = {"dataset": KEY, "split": "test", "target": "q", "method_name": "racer", "description": "Races.",
                    "file": SimpleUploadedFile("p.csv", body)}
            barrier.wait()
            try:
                statuses.append(client.post("/api/v1/submissions/", data, format="multipart").status_code)
            finally:
                connection.close()

        threads = [threading.Thread(target=post) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert sorted(statuses) == [201] * 5 + [429] * 7
        assert Submission.objects.filter(user=user, split="test").count() == 5


@pytest.mark.django_db
class TestRateLimits:
    """Throttles on expensive endpoints (finding 6): anonymous compare and sign-ups answer 429."""

    def test_anonymous_compare_is_throttled(self, client, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_THROTTLE_RATES = {**settings.QVAL_THROTTLE_RATES, "compare_anon": "3/min"}
        codes = [client.get("/api/v1/compare/", {"a": 1, "b": 2}).status_code for _ in range(4)]
        assert codes == [400, 400, 400, 429]
        assert client.get("/compare/", {"a": 1, "b": 2}).status_code == 429  # the page shares the count
        assert client.get("/compare/").status_code == 200  # the empty form costs nothing

    def test_signups_per_address_are_limited(self, client, settings) -> None:  # type: ignore[no-untyped-def]
        settings.ACCOUNT_RATE_LIMITS = {"signup": "2/h/ip"}
        codes = []
        for n in range(3):
            client.logout()
            codes.append(client.post("/accounts/signup/", {
                "username": f"u{n}", "email": f"u{n}@example.org",
                "password1": "correct-horse-9x", "password2": "correct-horse-9x"}).status_code)
        assert codes == [302, 302, 429]

    def test_an_upload_past_the_largest_accepted_size_is_dropped_unstored(self, api, client, user, loaded, settings,
                                                                           data_dir) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_MAX_UPLOAD_BYTES = settings.QVAL_MAX_CONTAINER_BYTES = 1024 * 1024
        body = b"id,score\n" + b"x,0.5\n" * 400_000  # 2.4 MB
        before = sorted(p.name for p in (data_dir / "media").rglob("*") if p.is_file()) if (data_dir / "media").exists() else []
        for kind in ("file", "container"):
            data = {"kind": kind, "dataset": KEY, "split": "dev", "target": "q", "method_name": "m",
                    "file": SimpleUploadedFile("huge.csv", body)}
            resp = api.post("/api/v1/submissions/", data, format="multipart")
            assert resp.status_code == 413, resp.content
            assert "larger than 1 MiB, the most this site accepts" in resp.json()["errors"]["file"][0]
        client.force_login(user)
        page = client.post("/submit/", {"kind": "file", "dataset": KEY, "split": "dev", "target": "q", "method_name": "m",
                                        "modality": "text", "file": SimpleUploadedFile("huge.csv", body)})
        assert page.status_code == 200 and "the most this site accepts" in page.content.decode()
        assert Submission.objects.count() == 0
        after = sorted(p.name for p in (data_dir / "media").rglob("*") if p.is_file()) if (data_dir / "media").exists() else []
        assert after == before

    def test_the_web_form_has_the_apis_throttles(self, client, api, user, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        """Round three, finding 5: ``POST /submit/`` had no rate limit (40 uploads in 3 s, all accepted) where
        the API stops at 30/min, and a quota refusal was a 200 page where the API answers 429."""
        settings.QVAL_THROTTLE_RATES = {**settings.QVAL_THROTTLE_RATES, "upload_user": "3/min"}
        client.force_login(user)

        def form(split: str = "dev", **fields: str) -> object:
            ids, labels = actor_points(frozenlake, split)
            return client.post("/submit/", {"kind": "file", "dataset": KEY, "split": split, "target": "q",
                                            "method_name": "m", "modality": "text", "description": "Its labels.",
                                            "visibility": "public", "open_weights": "unknown",
                                            "file": SimpleUploadedFile("p.csv", csv_bytes(ids, labels)), **fields})

        settings.QVAL_TEST_QUOTA_PER_DAY = 1
        assert [form("test").status_code, form("test").status_code] == [302, 429]  # the quota, as the API
        assert form().status_code == 302
        throttled = form()
        assert throttled.status_code == 429 and int(throttled["Retry-After"]) >= 1
        assert "Too many uploads" in throttled.content.decode()
        assert Submission.objects.count() == 2
        data = {"dataset": KEY, "split": "dev", "target": "q", "method_name": "m",
                "file": SimpleUploadedFile("p.csv", b"id,score\n")}
        assert api.post("/api/v1/submissions/", data, format="multipart").status_code == 429  # one count for both

    def test_uploads_are_capped_per_account(self, api, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        ids, labels = actor_points(frozenlake, "dev")
        body = csv_bytes(ids, labels)
        settings.QVAL_USER_STORAGE_BYTES = int(len(body) * 1.5)
        upload(api, body, split="dev")
        data = {"dataset": KEY, "split": "dev", "target": "q", "method_name": "m", "file": SimpleUploadedFile("p.csv", body)}
        resp = api.post("/api/v1/submissions/", data, format="multipart")
        assert resp.status_code == 413 and "storage limit" in json.dumps(resp.json())


@pytest.mark.django_db
class TestUnverifiedAccounts:
    """Accounts multiply the test quota (finding 7): a hidden split needs a verified email address."""

    def test_a_new_account_submits_to_test_only_after_confirming_its_email(self, client, loaded, frozenlake, mailoutbox) -> None:  # type: ignore[no-untyped-def]
        resp = client.post("/accounts/signup/", {"username": "mallory", "email": "mallory@example.org",
                                                 "password1": "correct-horse-9x", "password2": "correct-horse-9x"})
        assert resp.status_code == 302
        ids, labels = actor_points(frozenlake, "test")
        data = {"dataset": KEY, "split": "test", "target": "q", "method_name": "m", "description": "Mallory's."}
        refused = client.post("/api/v1/submissions/", {**data, "file": SimpleUploadedFile("p.csv", csv_bytes(ids, labels))})
        assert refused.status_code == 403 and "verify your email address" in json.dumps(refused.json())
        dev_ids, dev_labels = actor_points(frozenlake, "dev")
        assert client.post("/api/v1/submissions/", {**data, "split": "dev",
                                                    "file": SimpleUploadedFile("p.csv", csv_bytes(dev_ids, dev_labels))}).status_code == 201
        link = next(w for w in mailoutbox[0].body.split() if "/accounts/confirm-email/" in w)
        assert client.get(link[link.index("/accounts/"):]).status_code == 302
        accepted = client.post("/api/v1/submissions/", {**data, "file": SimpleUploadedFile("p.csv", csv_bytes(ids, labels))})
        assert accepted.status_code == 201, accepted.content


@pytest.mark.django_db
class TestInvalidParameters:
    """NUL bytes in a query or path parameter (finding 7): 400 with the reason, never a 500."""

    @pytest.mark.parametrize("url", ["/api/v1/compare/?a=1%00&b=2", "/api/v1/leaderboard/?dataset=x%00",
                                     "/compare/?a=%00", "/datasets/x%00/", "/api/v1/datasets/a%00b/download/"])
    def test_nul_bytes_are_a_400(self, client, url: str) -> None:  # type: ignore[no-untyped-def]
        resp = client.get(url)
        assert resp.status_code == 400
        assert "NUL byte" in resp.content.decode()


class TestChartMarkup:
    """User-chosen names drawn by Plotly (finding 7): never a live link or markup."""

    def test_a_method_name_with_a_link_is_drawn_as_text(self) -> None:
        evil = '<a href="https://evil.example/">click</a>'
        cd = friedman_nemenyi(np.array([[0.1, 0.5, 0.3], [0.2, 0.6, 0.1], [0.3, 0.4, 0.2]]), [evil, "<b>bold</b>", "plain"])
        # Plotly's JSON writes "/" as \u002f and "<" as \u003c; undo that to read the strings it draws.
        drawn = charts.critical_difference_diagram(cd).replace("\\u002f", "/").replace("\\u003c", "<").replace(
            "\\u003e", ">")
        assert '&lt;a href=\\"https://evil.example/\\"&gt;click&lt;/a&gt;' in drawn  # a JSON string: \" is "
        assert "&lt;b&gt;bold&lt;/b&gt;" in drawn
        assert "<a href" not in drawn and "<b>bold" not in drawn


@pytest.mark.django_db
class TestStuckStates:
    """Every non-final state has a deadline (finding 3: submissions left ``validating`` forever)."""

    @pytest.mark.parametrize("state,reason", [
        (Submission.RECEIVED, lifecycle.VALIDATION_DEADLINE_REASON),
        (Submission.VALIDATING, lifecycle.VALIDATION_DEADLINE_REASON),
        (Submission.QUEUED, lifecycle.queue_deadline_reason("scoring")),
        (Submission.SCORING, lifecycle.WORKER_DEADLINE_REASON),
    ])
    def test_the_reaper_ends_every_stuck_state(self, api, loaded, frozenlake, state: str, reason: str) -> None:  # type: ignore[no-untyped-def]
        ids, labels = actor_points(frozenlake, "test")
        sub = upload(api, csv_bytes(ids, labels))
        Submission.objects.filter(pk=sub["id"]).update(state=state)
        assert lifecycle.JOB.reap_overdue() == []  # not overdue yet
        assert lifecycle.JOB.reap_overdue(timezone.now() + timedelta(days=2)) == [sub["id"]]
        reaped = Submission.objects.get(pk=sub["id"])
        assert (reaped.state, reaped.error, reaped.fault) == ("failed", reason, Submission.FAULT_SYSTEM)
        assert services.quota_used(reaped.user) == 0  # the platform's fault: not counted

    def test_a_redelivered_scoring_task_past_its_deadline_stops(self, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        from workers.tasks import score_submission

        ids, labels = actor_points(frozenlake, "dev")
        sub = upload(api, csv_bytes(ids, labels), split="dev")
        Submission.objects.filter(pk=sub["id"]).update(state=Submission.SCORING,
                                                       deadline=timezone.now() - timedelta(seconds=1))
        assert score_submission(sub["id"]) == Submission.FAILED
        failed = Submission.objects.get(pk=sub["id"])
        assert (failed.error, failed.fault) == (lifecycle.WORKER_DEADLINE_REASON, Submission.FAULT_SYSTEM)
        assert not failed.results.exists()

    def test_every_new_submission_has_a_deadline(self, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        ids, labels = actor_points(frozenlake, "dev")
        sub = Submission.objects.get(pk=upload(api, csv_bytes(ids, labels), split="dev")["id"])
        assert sub.state == Submission.QUEUED and sub.deadline is not None and sub.deadline > timezone.now()


def without_goal_images(ds: schema.Dataset) -> schema.Dataset:
    """``ds`` with every ``end_image`` removed (what 1.1, which had none, recorded)."""
    states = [
        replace(s, end_image=None, candidates=tuple(replace(c, end_image=None) for c in s.candidates))
        for s in ds.states
    ]
    return replace(ds, states=states)


def small_build(secret: str | None, trajectories: int = 20) -> schema.Dataset:
    """The current FrozenLake spec on its first ``trajectories`` trajectories (one per map for 20)."""
    env, spec = registry.BUILDERS["frozenlake"]()
    return build.build_dataset(env, replace(spec, num_trajectories=trajectories), secret=secret)


def scenes_id(scenes: list[tuple[int, int]], position: int) -> str:
    """The public task id of ALFWorld scene ``position``."""
    floorplan, seed = scenes[position]
    return f"FloorPlan{floorplan}-s{seed}"


def first_trajectories(ds: schema.Dataset, split: str, n: int) -> list[schema.State]:
    return [s for s in ds.states_in(split) if s.trajectory < n]


class TestSecretTestSplit:
    """Rebuilding the hidden split from the public pipeline: the test maps and random draws come
    from the maintainer's secret, train and dev do not depend on it."""

    def test_train_and_dev_are_the_published_ones(self, frozenlake: schema.Dataset) -> None:
        """The new version's train and dev are 1.1's byte for byte (goal images aside, which are new)."""
        public = without_goal_images(frozenlake)
        for split in ("train", "dev"):
            assert public.split_fingerprint(split) == FROZENLAKE_1_1_SPLITS[split]
        # ... and the published fingerprints of those splits are plain SHA-256: anyone can check them.
        for split in ("train", "dev"):
            assert frozenlake.manifest.split_fingerprints[split] == frozenlake.split_fingerprint(split)

    def test_public_pipeline_without_secret_rebuilds_train_and_dev_only(self, frozenlake: schema.Dataset) -> None:
        ds = small_build(secret=None)
        assert ds.states_in("test") == [] and ds.manifest.build_info["test_split"] == "not built: no secret"
        for split in ("train", "dev"):
            expected = first_trajectories(frozenlake, split, 20)
            assert ds.states_in(split) == expected and expected
            ids = [c.id for s in expected for c in s.candidates]
            assert [ds.q_labels[i] for i in ids] == [frozenlake.q_labels[i] for i in ids]
            names = ds.image_names(split)
            assert names and all(ds.images[n] == frozenlake.images[n] for n in names)

    def test_wrong_secret_gives_other_test_maps_and_labels(
        self, frozenlake: schema.Dataset, test_split_secret: str
    ) -> None:
        guess = small_build(secret="a guess at the secret")
        real = first_trajectories(frozenlake, "test", 20)
        guessed = guess.states_in("test")
        assert real and guessed
        real_maps = {s.observation.replace("@", "?") for s in real}
        assert not real_maps & {s.observation.replace("@", "?") for s in guessed}  # no test state on a real map
        real_ids = {s.id for s in real}
        assert real_ids != {s.id for s in guessed} or [frozenlake.v_labels[i] for i in sorted(real_ids)] != [
            guess.v_labels[i] for i in sorted(real_ids)
        ]
        # The same secret does rebuild it (the maintainer's reproducibility).
        again = small_build(secret=test_split_secret)
        assert again.states_in("test") == real

    def test_public_seeds_of_the_old_version_do_not_give_the_test_split(self, frozenlake: schema.Dataset) -> None:
        """1.1's test maps (seeds 45, 50, 55, 60, in the repository) are not 1.2's."""
        env, spec = registry.VERSIONS["frozenlake-8x8@1.1"]()
        old = build.build_dataset(env, replace(spec, num_trajectories=20))
        old_maps = {s.observation.replace("@", "?") for s in old.states_in("test")}
        new_maps = {s.observation.replace("@", "?") for s in frozenlake.states_in("test")}
        assert old_maps and new_maps and not old_maps & new_maps

    def test_published_test_fingerprint_confirms_no_guess(
        self, frozenlake: schema.Dataset, test_split_secret: str
    ) -> None:
        """Even the true test split, hashed the public way or under a guessed secret, does not give
        the published test fingerprint; only the secret's holder can check it."""
        published = frozenlake.manifest.split_fingerprints["test"]
        assert frozenlake.split_fingerprint("test") != published
        guessed_key = hidden.fingerprint_key("a guess at the secret", KEY)
        assert frozenlake.split_fingerprint("test", guessed_key) != published
        assert frozenlake.split_fingerprint("test", hidden.fingerprint_key(test_split_secret, KEY)) == published
        # The dataset fingerprint hashes the split fingerprints, so it confirms nothing more.
        stripped = replace(frozenlake, secret=None)
        with pytest.raises(schema.SchemaError, match="QVAL_TEST_SPLIT_SECRET"):
            stripped.compute_fingerprint()

    def test_reading_the_dataset_needs_the_secret(
        self, frozenlake: schema.Dataset, test_split_secret: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv(hidden.ENV_VAR, raising=False)
        monkeypatch.setenv("QVAL_DATA_DIR", str(tmp_path))  # no local secret file there
        folder = frozenlake.images.directory.parent  # type: ignore[attr-defined]
        with pytest.raises(schema.SchemaError, match="drawn from a secret"):
            schema.Dataset.read(folder)
        with pytest.raises(schema.SchemaError, match="fingerprint mismatch"):
            schema.Dataset.read(folder, secret="a guess at the secret")
        assert schema.Dataset.read(folder, secret=test_split_secret).manifest.fingerprint == frozenlake.manifest.fingerprint

    def test_the_secret_is_not_in_the_manifest_or_exports(
        self, frozenlake: schema.Dataset, test_split_secret: str, tmp_path: Path
    ) -> None:
        folder = frozenlake.images.directory.parent  # type: ignore[attr-defined]
        export.export_dataset(frozenlake, tmp_path / "export")
        seeds = {str(hidden.derive_seed(test_split_secret, KEY, "task", t)) for t in ("map-3", "map-8")}
        texts = [(folder / "manifest.json").read_text(), *(p.read_text() for p in (tmp_path / "export").rglob("*.jsonl")),
                 (tmp_path / "export" / "README.md").read_text()]
        for text in texts:
            assert test_split_secret not in text and not any(seed in text for seed in seeds)
        card = (tmp_path / "export" / "README.md").read_text()
        assert all(f"{split} `{fp}`" in card for split, fp in frozenlake.manifest.split_fingerprints.items())
        config = json.loads((folder / "manifest.json").read_text())["config"]["environment"]
        assert [config["map_seeds"][j] for j in (3, 8, 13, 18)] == [None] * 4
        assert all(config["maps"][f"map-{j}"] is None for j in (3, 8, 13, 18))

    def test_superseded_public_test_split_takes_no_submissions(self, api, loaded) -> None:  # type: ignore[no-untyped-def]
        """1.1's test maps are public seeds: once 1.2 is loaded, 1.1's test split refuses submissions."""
        from django.core.files.uploadedfile import SimpleUploadedFile

        from leaderboard.loading import load_dataset
        from submissions.models import Submission

        env, spec = registry.VERSIONS["frozenlake-8x8@1.1"]()
        old = load_dataset(build.build_dataset(env, replace(spec, num_trajectories=10)))[0]
        assert old.superseded_test_split() == loaded and loaded.superseded_test_split() is None

        def post(split: str):  # type: ignore[no-untyped-def]
            data = {"dataset": old.key, "split": split, "target": "q", "method_name": "m",
                    "file": SimpleUploadedFile("p.csv", b"id,score\nt000-s01-a0,0.5\n")}
            return api.post("/api/v1/submissions/", data, format="multipart")

        resp = post("test")
        assert resp.status_code == 400 and f"submit to {loaded.key}" in json.dumps(resp.json())
        assert not Submission.objects.filter(split="test").exists()
        assert post("dev").status_code == 201

    def test_local_secret_is_generated_once_and_private(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv(hidden.ENV_VAR, raising=False)
        assert hidden.configured_secret(tmp_path) is None  # never generated by a read
        first = hidden.local_secret(tmp_path)
        assert len(first) == 64 and hidden.local_secret(tmp_path) == first
        assert stat.S_IMODE((tmp_path / hidden.SECRET_FILE).stat().st_mode) == 0o600
        assert hidden.configured_secret(tmp_path) == first
        monkeypatch.setenv(hidden.ENV_VAR, "from-the-environment")
        assert hidden.configured_secret(tmp_path) == "from-the-environment"

    @pytest.mark.slow
    def test_alfworld_test_scenes_come_from_the_secret(self, tmp_path: Path) -> None:
        """ALFWorld (text): the hidden scenes' ids (``hidden-{position}``) reveal nothing, train and dev
        do not depend on the secret, and a wrong secret gives other scenes."""
        from qval.envs.alfworld.adapter import ALFWorld, choose_scenes

        scenes = choose_scenes(3, seed=0)
        spec = build.DatasetSpec(
            slug="alfworld-small", name="ALFWorld small", version="0", description="test build",
            modalities=("text",), num_trajectories=3, max_states_per_trajectory=1, epsilon=0.3, seed=5,
            discount=0.95, splits=("train", "dev", "test"), split_by="task", secret_test=True,
        )

        def run(secret: str | None) -> schema.Dataset:
            return build.build_dataset(ALFWorld(scenes, horizon=15, game_root=tmp_path), spec, secret=secret)

        public, real, guess = run(None), run("the maintainer's secret"), run("a guess at the secret")
        assert public.states_in("test") == [] and real.states_in("test") and guess.states_in("test")
        for split in ("train", "dev"):
            assert public.states_in(split) == real.states_in(split) == guess.states_in(split)
            assert public.split_fingerprint(split) == real.split_fingerprint(split)
        assert {s.task for s in real.states_in("test")} == {"hidden-2"}
        # The test scene differs: another room or task in the observation.
        assert real.states_in("test")[0].observation != guess.states_in("test")[0].observation
        assert "hidden" in json.dumps(real.manifest.config["environment"]["scenes"][2])
        assert str(hidden.derive_seed("the maintainer's secret", "alfworld-small@0", "task", scenes_id(scenes, 2))) \
            not in json.dumps(real.manifest.config)

    def test_miniwob_test_instances_come_from_the_secret(self) -> None:
        """MiniWoB: the test tasks get ids that name their position, not their seed, and seeds from the
        secret; the manifest lists no secret seed; without the secret they cannot be played."""
        env, spec = registry.BUILDERS["miniwob"]()
        assert spec.secret_test and spec.end_images
        public_tasks = list(env.tasks)
        names = spec.hidden_tasks(env)
        assert names == [t for j, t in enumerate(public_tasks) if j % 3 == 2]  # (train, dev, test)[j % 3]
        build.hide_test_tasks(env, spec, "the maintainer's secret")
        tasks = list(env.tasks)
        assert [t for t in tasks if t not in env.hidden] == [t for t in public_tasks if t not in names]
        assert all(tasks[j].endswith(f":hidden-{j}") for j, t in enumerate(public_tasks) if t in names)
        key = f"{spec.slug}@{spec.version}"
        seeds = {hidden.derive_seed("the maintainer's secret", key, "task", n) % 2**31 for n in names}
        assert len(seeds) == len(names)
        text = json.dumps(env.config())
        assert "hidden_tasks" in text and not any(str(seed) in text for seed in seeds)
        unplayable, _ = registry.BUILDERS["miniwob"]()
        build.hide_test_tasks(unplayable, spec, None)
        assert json.dumps(unplayable.config()) == text  # the manifest is the same with or without the secret
        with pytest.raises(RuntimeError, match="secret"):
            unplayable.reset(tasks[2])

    @pytest.mark.slow
    def test_frozenlake_1_1_still_rebuilds(self, tmp_path: Path) -> None:
        """The superseded version keeps its published fingerprint (and the split fingerprints pinned above)."""
        env, spec = registry.VERSIONS["frozenlake-8x8@1.1"]()
        ds = build.build_dataset(env, spec)
        assert ds.compute_fingerprint() == FROZENLAKE_1_1_FINGERPRINT
        assert {s: ds.split_fingerprint(s) for s in schema.SPLITS} == FROZENLAKE_1_1_SPLITS


class TestHiddenGoalImages:
    """Goal images (the end of the reference rollout) correlate with V: never out on a hidden split."""

    def test_every_point_has_a_goal_image(self, frozenlake: schema.Dataset) -> None:
        for s in frozenlake.states:
            assert s.end_image == f"{s.id}-end.png" and s.end_image in frozenlake.images
            assert all(c.end_image == f"{c.id}-end.png" and c.end_image in frozenlake.images for c in s.candidates)

    def test_goal_image_shows_where_the_rollout_ends(self, frozenlake: schema.Dataset) -> None:
        """A candidate whose Q is 0 on FrozenLake fell in a hole or ran out of steps; one with Q > 0
        reached the goal: their goal images differ, and all goal-reaching ends of one map agree."""
        state = next(s for s in frozenlake.states_in("dev")
                     if {frozenlake.q_labels[c.id] > 0 for c in s.candidates} == {True, False})
        reach = {frozenlake.images[c.end_image] for c in state.candidates if frozenlake.q_labels[c.id] > 0}
        fail = {frozenlake.images[c.end_image] for c in state.candidates if frozenlake.q_labels[c.id] == 0}
        assert len(reach) == 1 and not reach & fail

    def test_exports_withhold_test_goal_images(self, frozenlake: schema.Dataset, tmp_path: Path) -> None:
        written = export.export_dataset(frozenlake, tmp_path)
        with zipfile.ZipFile(written["test"]["images.zip"]) as zf:
            test_names = set(zf.namelist())
        with zipfile.ZipFile(written["dev"]["images.zip"]) as zf:
            dev_names = set(zf.namelist())
        assert test_names and not any(n.endswith("-end.png") for n in test_names)
        assert any(n.endswith("-end.png") for n in dev_names)
        rows = [json.loads(line) for line in (tmp_path / "data" / "test" / "candidates.jsonl").read_text().splitlines()]
        assert rows and all(r["end_image"] is None for r in rows)

    def test_container_input_withholds_test_goal_images(self, frozenlake: schema.Dataset, tmp_path: Path) -> None:
        for target in ("q", "v"):
            folder = containers.write_input(frozenlake, "test", target, tmp_path / f"test-{target}")
            points = (folder / "points.jsonl").read_text()
            assert "end_image" not in points and "-end.png" not in points
            assert not list((folder / "images").glob("*-end.png"))
            dev = containers.write_input(frozenlake, "dev", target, tmp_path / f"dev-{target}")
            assert "-end.png" in (dev / "points.jsonl").read_text() and list((dev / "images").glob("*-end.png"))

    def test_site_never_serves_test_goal_images(self, client, loaded, frozenlake: schema.Dataset) -> None:  # type: ignore[no-untyped-def]
        test_state = frozenlake.states_in("test")[0]
        dev_state = frozenlake.states_in("dev")[0]
        base = f"/datasets/{loaded.key}/images/"
        assert client.get(base + test_state.image).status_code == 200  # the input image is public
        for name in (test_state.end_image, test_state.candidates[0].end_image):
            assert client.get(base + name).status_code == 404
        assert client.get(base + dev_state.end_image).status_code == 200
        url = f"/api/v1/datasets/{loaded.key}/download/"
        body = client.get(url, {"split": "test", "format": "images"})
        assert body.status_code == 200
        names = zipfile.ZipFile(io.BytesIO(b"".join(body.streaming_content) if body.streaming else body.content)).namelist()
        assert names and not any(n.endswith("-end.png") for n in names)
        frame = client.get(url, {"split": "test", "format": "jsonl"})
        rows = [json.loads(line) for line in frame.content.decode().splitlines()]
        assert rows and all(r["end_image"] == "" and r["state_end_image"] == "" for r in rows)
        dev_rows = [json.loads(line) for line in client.get(url, {"split": "dev", "format": "jsonl"}).content.decode().splitlines()]
        assert all(r["end_image"].endswith("-end.png") and r["state_end_image"].endswith("-end.png") for r in dev_rows)

    def test_platform_path_names_hidden_goal_images(self, loaded) -> None:  # type: ignore[no-untyped-def]
        from leaderboard.loading import inputs_for

        assert all(s.end_image is None for s in inputs_for(loaded, "test").states)
        platform = inputs_for(loaded, "test", hidden_goal_images=True)
        assert all(s.end_image and all(c.end_image for c in s.candidates) for s in platform.states)


DEEP = 100_000  # levels of nesting that crashed a web worker (SIGSEGV in pyarrow's JSON reader)
IDS = ["a", "b", "c"]


def deep_jsonl(levels: int = DEEP) -> bytes:
    """Two good lines around a line nested ``levels`` deep."""
    return (
        b'{"id": "a", "score": 1}\n'
        + b'{"id": "b", "score": ' + b"[" * levels + b"]" * levels + b"}\n"
        + b'{"id": "c", "score": 3}\n'
    )


def deep_reference(levels: int = DEEP) -> bytes:
    return b'{"method_name": "m", "values": [1, 2, ' + b"[" * levels + b"]" * levels + b"]}"


def problems(data: bytes, filename: str, ids: list[str] = IDS) -> dict[str, qpred.Problem]:
    """The problems of a file that must be refused, by code."""
    with pytest.raises(qpred.ValidationFailed) as failed:
        qpred.parse_and_validate(data, filename, qpred.SplitIndex(ids))
    return {p.code: p for p in failed.value.problems}


def parse_in_child(data: bytes, filename: str) -> list[dict[str, object]]:
    """The problems of a file as a fresh interpreter reports them, or fail: a crash (segfault,
    uncaught exception) there cannot take the test session down with it."""
    script = textwrap.dedent(
        """
        import json, sys
        from qval import predictions as qpred
        data = sys.stdin.buffer.read()
        try:
            qpred.parse_and_validate(data, sys.argv[1], qpred.SplitIndex(["a", "b", "c"]))
            print("[]")
        except qpred.ValidationFailed as exc:
            print(json.dumps([{"code": p.code, "message": p.message, "rows": p.rows} for p in exc.problems]))
        """
    )
    done = subprocess.run([sys.executable, "-c", script, filename], input=data, capture_output=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, (done.returncode, done.stderr.decode()[-2000:])
    return json.loads(done.stdout)


class TestHostilePredictionFiles:
    """Issue 11.3: hostile JSON, CSV and Parquet files end in a specific, listed problem; the
    process reading them stays up (no RecursionError, no segfault, no runaway time)."""

    @pytest.mark.parametrize("data", [b"null", b" null", b"\n\nnull", b'null\n{"id": "a", "score": 1}', b"null null"])
    def test_a_leading_null_is_reported_and_the_reader_survives(self, data: bytes) -> None:
        # pyarrow 26's JSON reader segfaults on these (found by tests/test_parser_fuzz.py)
        found = parse_in_child(data, "p.jsonl")
        assert found and all(p["code"] in {"parse", "missing_columns", "no_rows"} for p in found), found

    def test_100k_deep_jsonl_line_is_reported_and_the_reader_survives(self) -> None:
        found = parse_in_child(deep_jsonl(), "p.jsonl")
        assert [(p["code"], p["rows"]) for p in found] == [("parse", [2])]
        assert found[0]["message"].startswith("line 2: nesting deeper than 64 levels (at column 85).")

    def test_100k_deep_reference_json_is_reported_and_the_reader_survives(self) -> None:
        found = parse_in_child(deep_reference(), "p.json")
        assert [p["code"] for p in found] == ["parse"]
        assert found[0]["message"] == "the file could not be read: line 1, column 101: nesting deeper than 64 levels"

    @pytest.mark.parametrize("levels", [64, 65, 1_000, 3_000])
    def test_the_depth_limit_is_exact(self, levels: int) -> None:
        data = b'{"id": "a", "score": 1, "extra": ' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}\n"
        if levels <= safejson.MAX_DEPTH:
            preds, _ = qpred.parse_and_validate(data, "p.jsonl", qpred.SplitIndex(IDS))
            assert preds.ids.tolist() == ["a"]
        else:
            assert problems(data, "p.jsonl")["parse"].message.startswith("line 1: nesting deeper than 64 levels")

    def test_nesting_split_by_lone_carriage_returns_is_not_handed_to_pyarrow(self) -> None:
        # a CR ends a line for the scan but is whitespace inside one JSON document to pyarrow
        data = b'{"id": "a", "score": 1}\n{"id": "b", "score": 1, "x": ' + (b"[" * 60 + b"\r") * 2_000 + b"}\n"
        found = parse_in_child(data, "p.jsonl")
        assert [p["code"] for p in found] == ["parse"] and found[0]["rows"][:2] == [2, 3]

    def test_brackets_inside_strings_do_not_count(self) -> None:
        data = b'{"id": "a", "score": 1, "note": "' + b'[\\"{' * 10_000 + b'"}\n'
        preds, _ = qpred.parse_and_validate(data, "p.jsonl", qpred.SplitIndex(IDS))
        assert preds.scores.tolist() == [1.0]

    def test_deep_nesting_in_several_lines_lists_each_line(self) -> None:
        line = b'{"id": "a", "score": ' + b"{" * 5_000 + b"\n"
        found = problems(b'{"id": "b", "score": 2}\n' + line * 3 + b'{"id": "zz", "score": 1}\n', "p.jsonl")
        assert found["parse"].rows == (2, 3, 4)
        assert found["parse"].message.startswith("3 records could not be read: line 2: nesting deeper than 64 levels")
        assert found["unknown_id"].rows == (5,)  # the other lines are still checked

    def test_huge_line_is_refused_by_size(self) -> None:
        big = b'{"id": "a", "score": 1, "pad": "' + b"x" * (2 * qpred.MAX_JSONL_LINE_BYTES) + b'"}\n'
        found = problems(big + b'{"id": "b", "score": 2}\n', "p.jsonl")
        assert found["parse"].rows == (1,)
        assert "line 1: the line is 2.0 MiB; lines may be at most 1.0 MiB" in found["parse"].message

    @pytest.mark.timeout(120)
    def test_many_distinct_keys_are_read_in_linear_time(self) -> None:
        # pyarrow's schema inference made a column per distinct key: 20,000 lines took ~45 s
        data = b"".join(b'{"id": "a", "score": 1, "k%d": 1}\n' % i for i in range(20_000))
        found = problems(data, "p.jsonl")
        assert list(found) == ["duplicate_id"]
        # 70,000 keys on one line: 0.85 MiB, within the 1 MiB line limit
        one_line = b'{"id": "a", "score": 1' + b"".join(b', "k%d": 1' % i for i in range(70_000)) + b"}\n"
        preds, _ = qpred.parse_and_validate(one_line, "p.jsonl", qpred.SplitIndex(IDS))
        assert preds.ids.tolist() == ["a"]

    @pytest.mark.timeout(120)
    def test_many_columns_in_csv_and_parquet(self) -> None:
        header = ",".join(["id", "score"] + [f"c{i}" for i in range(50_000)])
        row = ",".join(["a", "1"] + ["0"] * 50_000)
        preds, _ = qpred.parse_and_validate(f"{header}\n{row}\n".encode(), "p.csv", qpred.SplitIndex(IDS))
        assert preds.scores.tolist() == [1.0]
        table = pa.table({"id": ["b"], "score": [2.0], **{f"c{i}": [0] for i in range(5_000)}})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        preds, _ = qpred.parse_and_validate(sink.getvalue().to_pybytes(), "p.parquet", qpred.SplitIndex(IDS))
        assert preds.ids.tolist() == ["b"]

    @pytest.mark.parametrize("data, filename, rows", [
        (b"id,score\n" + b"a,x\n" * 1000, "p.csv", 1000),  # refused row by row: every row read
        (b"id,score\n" + b"a,1,2\n" * 1000, "p.csv", 1002),  # refused whole: its lines
        (b'{"id": "a", "score": 1}\n' * 999 + b"{", "p.jsonl", 999),  # the rows read; the broken line is none
        (b'{"method_name": "m", "values": [' + b"1, " * 99 + b'"x"]}', "p.json", 101),  # by commas: a bound
        (b"PAR1 not really", "p.parquet", 0),
        (b"\x00\x01", "p.bin", 0),  # no known format: not read
    ])
    def test_a_refused_file_reports_the_rows_it_cost(self, data: bytes, filename: str, rows: int) -> None:
        """What a refused file cost to read (round three, finding 5: the scoring work bound counts it)."""
        with pytest.raises(qpred.ValidationFailed) as failed:
            qpred.parse_and_validate(data, filename, qpred.SplitIndex(IDS))
        assert failed.value.rows == rows

    def test_nan_and_infinity_literals(self) -> None:
        preds, _ = qpred.parse_and_validate(b'{"id": "a", "score": NaN}\n', "p.jsonl", qpred.SplitIndex(IDS))
        assert np.isnan(preds.scores[0])  # NaN is a missing score, as documented
        for data, name in [(b'{"id": "a", "score": -Infinity}\n', "p.jsonl"),
                           (b'{"id": "a", "score": 1e999}\n', "p.jsonl"),
                           (b'{"values": [Infinity, 1]}', "p.json")]:
            assert list(problems(data, name)) == ["non_finite"], data
        huge_int = b'{"id": "a", "score": 1' + b"0" * 5_000 + b"}\n"
        assert problems(huge_int + b'{"id": "b", "score": 2}\n', "p.jsonl")["non_finite"].rows == (1,)
        found = problems(huge_int + b'{"id": "b", "score": "2"}\n', "p.jsonl")  # a text score: read line by line
        assert found["parse"].rows == (1,) and "a number is too long" in found["parse"].message

    def test_duplicate_keys_are_refused(self) -> None:
        found = problems(b'{"id": "a", "score": 1}\n{"id": "b", "score": 0.1, "score": 0.9}\n', "p.jsonl")
        assert found["parse"].message.startswith("line 2: invalid JSON: key 'score' appears more than once")
        found = problems(b'{"values": [1], "values": [2, 3]}', "p.json")
        assert found["parse"].message == (
            "the file could not be read: key 'values' appears more than once in one object"
        )

    def test_byte_order_marks(self) -> None:
        bom = "\ufeff".encode()
        for data, name in [(bom + b'{"id": "a", "score": 1}\n', "p.jsonl"), (bom + b"id,score\na,1\n", "p.csv"),
                           (bom + b'{"values": [1]}', "p.json")]:
            preds, _ = qpred.parse_and_validate(data, name, qpred.SplitIndex(IDS))
            assert preds.ids.tolist() == ["a"], name
        found = problems(b'{"id": "a", "score": 1}\n' + bom + b'{"id": "b", "score": 2}\n', "p.jsonl")
        assert found["parse"].rows == (2,) and "invalid JSON" in found["parse"].message
        utf16 = '{"id": "a", "score": 1}\n'.encode("utf-16")
        assert list(problems(utf16, "p.jsonl")) == ["encoding"]

    def test_invalid_utf8(self) -> None:
        for data, name in [(b'{"id": "a", "score": 1}\n{"id": "\xff", "score": 2}\n', "p.jsonl"),
                           (b'{"values": [1, "\xc3"]}', "p.json"), (b"id,score\na,1\n\xe9,2\n", "p.csv")]:
            found = problems(data, name)
            assert list(found) == ["encoding"] and "is not valid UTF-8" in found["encoding"].message, name
        table = pa.table({"id": pa.array([b"a", b"\xff"], pa.binary()).cast(pa.string(), safe=False), "score": [1.0, 2.0]})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        assert list(problems(sink.getvalue().to_pybytes(), "p.parquet")) == ["encoding"]

    def test_nul_and_huge_key_names_are_shown_escaped(self) -> None:
        data = b'{"i\\u0000d": "a", "' + b"k" * 100_000 + b'": 1}\n'
        found = problems(data, "p.jsonl")
        message = found["missing_column"].message
        assert "\x00" not in message and "'i\\x00d'" in message and len(message) < 1_000

    def test_all_problems_are_listed_at_once(self) -> None:
        # a non-numeric score on one line used to hide an unknown id on another
        found = problems(b"id,score\nno-such-id,0.5\na,abc\n", "p.csv")
        assert list(found) == ["non_numeric", "unknown_id"]
        assert found["non_numeric"].rows == (3,) and found["unknown_id"].rows == (2,)

    @pytest.mark.django_db
    @pytest.mark.parametrize("name,content", [("deep.jsonl", deep_jsonl()), ("deep.json", deep_reference())])
    def test_a_100k_deep_upload_fails_as_the_users_fault(self, api, loaded, name: str, content: bytes) -> None:
        data = {"dataset": KEY, "split": "dev", "target": "q", "method_name": "deep",
                "file": SimpleUploadedFile(name, content)}
        resp = api.post("/api/v1/submissions/", data, format="multipart")
        assert resp.status_code == 201, resp.content
        assert resp.json()["state"] == Submission.RECEIVED  # stored; parsing is the worker's job
        services.validate_submission(resp.json()["id"])  # what workers.tasks.validate_upload calls
        sub = Submission.objects.get(pk=resp.json()["id"])
        assert (sub.state, sub.fault) == (Submission.FAILED, Submission.FAULT_USER)
        assert "nesting deeper than 64 levels" in sub.error
        assert api.get("/api/v1/datasets/").status_code == 200  # the web process is still up

    def test_a_100k_deep_json_request_body_is_a_parse_error(self) -> None:
        from rest_framework.exceptions import ParseError

        from qval_site.parsers import SafeJSONParser

        with pytest.raises(ParseError, match="line 1, column 65: nesting deeper than 64 levels"):
            SafeJSONParser().parse(io.BytesIO(b"[" * DEEP + b"]" * DEEP), "application/json")
        assert SafeJSONParser().parse(io.BytesIO(b'{"a": [1]}'), "application/json") == {"a": [1]}

    def test_container_output_nested_100k_deep_is_a_failed_evaluation(self, frozenlake) -> None:
        truth = truth_from_dataset(frozenlake, "dev", "q")
        run = qc.RunResult(error=None, exit_code=0, wall_s=1.0, stdout="", stderr="", predictions=deep_jsonl())
        evaluation = qc.evaluate(run, truth, bootstrap_resamples=0)
        assert evaluation.outcome == "failed"
        assert evaluation.error.startswith("predictions invalid: ")
        assert "line 2: nesting deeper than 64 levels" in evaluation.error

    @pytest.mark.container
    def test_a_container_writing_100k_deep_output_fails_as_the_users_fault(self, engine, deep_tar, frozenlake) -> None:
        results = {}
        with qc.Job(engine) as job:
            image_id = job.load(deep_tar)
            for split in ("dev", "test"):
                qc.write_input(frozenlake, split, "q", job.input_dir)
                results[split] = job.run(image_id, qc.Limits(timeout_s=60, memory_mb=256))
        assert results["test"].error == (
            "metadata invalid: /output/metadata.json is not JSON (line 1, column 70: nesting deeper than 64 levels)"
        )
        evaluation = qc.evaluate(results["dev"], truth_from_dataset(frozenlake, "dev", "q"), bootstrap_resamples=0)
        assert evaluation.outcome == "failed"
        assert evaluation.error.startswith("predictions invalid: line 1: nesting deeper than 64 levels (at column 85)")

    @pytest.mark.container
    @pytest.mark.django_db
    def test_a_submitted_container_writing_100k_deep_output_fails_as_the_users_fault(
        self, api, settings, engine, deep_tar, loaded
    ) -> None:
        from submissions.models import Submission
        from workers.tasks import inspect_container_upload, run_container_submission

        settings.QVAL_CONTAINER_WORK_ROOT = engine.work_root
        settings.QVAL_CONTAINER_LIMITS = {**settings.QVAL_CONTAINER_LIMITS, "timeout_s": 60.0, "memory_mb": 256}
        data = {"kind": "container", "dataset": "frozenlake-8x8", "split": "dev", "target": "q",
                "method_name": "deep", "backbone": "none", "file": SimpleUploadedFile("deep.tar", deep_tar.read_bytes())}
        resp = api.post("/api/v1/submissions/", data, format="multipart")
        assert resp.status_code == 201, resp.content
        sub_id = resp.json()["submissions"][0]["id"]
        inspect_container_upload([sub_id])  # the gpu worker's archive check, before the run
        assert run_container_submission(sub_id) == Submission.FAILED  # in-process: a crash would end this test
        sub = Submission.objects.get(pk=sub_id)
        assert sub.fault == Submission.FAULT_USER
        assert sub.error.startswith("predictions invalid: line 1: nesting deeper than 64 levels")
        assert list(engine.work_root.iterdir()) == []


@pytest.fixture(scope="module")
def deep_tar(engine, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    """A method container writing a predictions line nested 10^5 deep (and, on the test split,
    a metadata.json as deep), saved as the archive a submitter uploads."""
    context = tmp_path_factory.mktemp("deep-method")
    method = textwrap.dedent(
        f"""
        import json
        split = json.load(open("/input/context.json"))["split"]
        deep = "[" * {DEEP} + "]" * {DEEP}
        with open("/output/predictions.jsonl", "w") as out:
            out.write('{{"id": "x", "score": ' + deep + '}}\\n')
        if split == "test":
            open("/output/metadata.json", "w").write('{{"m": ' + deep + '}}')
        """
    )
    return saved_method_image(engine, base_image, context, method, "deep")


def saved_method_image(engine, base_image: str, context: Path, method: str, name: str) -> Path:  # type: ignore[no-untyped-def]
    """``method`` (Python source) built on the base image in ``context`` and saved as ``<name>.tar``
    there, the archive a submitter uploads; the image itself is removed from the engine."""
    (context / "method.py").write_text(method)
    (context / "Containerfile").write_text(f'FROM {base_image}\nCOPY method.py /method.py\nCMD ["python3", "/method.py"]\n')
    tag = f"localhost/qval-test-{name}:{uuid.uuid4().hex[:8]}"
    built = engine.call("build", "-q", "-t", tag, str(context))
    assert built.returncode == 0, built.stderr
    saved = engine.call("save", "-o", str(context / f"{name}.tar"), tag)
    engine.call("rmi", tag)
    assert saved.returncode == 0, saved.stderr
    return context / f"{name}.tar"


def sign_up(client, username: str, email: str, **extra: str):  # type: ignore[no-untyped-def]
    """POST the sign-up form as a new visitor (``extra``: request headers, e.g. ``HTTP_X_FORWARDED_FOR``)."""
    client.logout()
    return client.post("/accounts/signup/", {"username": username, "email": email, "password1": "correct-horse-9x",
                                             "password2": "correct-horse-9x"}, **extra)


SIGNUP_IN_CHILD = """
import django, sys
django.setup()
from django.test import Client
print(Client().post("/accounts/signup/", {"username": "u-child", "email": "child@example.org",
      "password1": "correct-horse-9x", "password2": "correct-horse-9x"}).status_code)
"""


@pytest.mark.django_db
class TestSybilsAndForwardedFor:
    """Sybils are cheap (round two, finding 4): plus-addresses and dotted Gmail addresses of one
    mailbox made separate accounts, the sign-up limit counted per web process, and the anonymous
    throttles keyed on a client-chosen ``X-Forwarded-For``."""

    @pytest.mark.parametrize("first, sibling", [
        ("mallory@example.org", "Mallory+2@Example.org"),
        ("mal.lory@gmail.com", "m.a.l.l.o.r.y+x@googlemail.com"),
    ])
    def test_a_sibling_address_of_a_mailbox_cannot_sign_up(self, client, django_user_model, first: str,
                                                            sibling: str) -> None:  # type: ignore[no-untyped-def]
        assert sign_up(client, "mallory", first).status_code == 302
        resp = sign_up(client, "mallory2", sibling)
        assert resp.status_code == 200
        assert "An account already exists for this mailbox" in resp.content.decode()
        assert list(django_user_model.objects.values_list("username", flat=True)) == ["mallory"]

    @pytest.mark.parametrize("email, box", [
        ("Ada+Lab@Example.ORG", "ada@example.org"),
        ("a.d.a+x@GoogleMail.com", "ada@gmail.com"),
        ("a.da@example.org", "a.da@example.org"),  # dots matter outside Gmail
        ("+only@example.org", "+only@example.org"),  # no name before the tag: kept whole
        ("r3w@\uff45xample.org", "r3w@example.org"),  # full-width e (round three, finding 3)
        ('"r3w"@example.org', "r3w@example.org"),  # a quoted local part is its content
        ('"r\\3w"@example.org', "r3w@example.org"),
        ("r3w@exa\u200dmple.org", "r3w@example.org"),  # mail sending (IDNA 2003) drops the joiner
        ("x@M\u00dcnchen.DE", "x@xn--mnchen-3ya.de"),  # the domain mail is sent to
    ])
    def test_the_mailbox_rule(self, email: str, box: str) -> None:
        from accounts.mailboxes import mailbox

        assert mailbox(email) == box

    @pytest.mark.parametrize("variant, message", [  # folded, the same address (allauth's message)
        ("r3w@\uff45xample.org", "A user is already registered with this email"),  # full-width e
        ("\uff52\uff13\uff57@example.org", "A user is already registered with this email"),  # full-width name
        ("r3w@\U0001d41example.org", "A user is already registered with this email"),  # mathematical bold e
        ("r3w@\u212fxample.org", "A user is already registered with this email"),  # script e
        ("R3W+x@EXAMPLE.org.", "An account already exists for this mailbox"),
        ('"r3w"@example.org', "quoted local parts"),
        ('"r3w+x"@example.org', "quoted local parts"),
        ("r3w(work)@example.org", "comments in an address"),
    ])
    def test_a_folded_or_quoted_variant_of_a_mailbox_cannot_sign_up(self, client, django_user_model, variant: str,
                                                                     message: str) -> None:  # type: ignore[no-untyped-def]
        """Round three, finding 3: after ``r3w@example.org``, sign-up took ``r3w@ｅxample.org`` (whose
        confirmation reached ``r3w@example.org``) and ``"r3w"@example.org``, each an account of its own."""
        assert sign_up(client, "r3w", "r3w@example.org").status_code == 302
        resp = sign_up(client, "r3w2", variant)
        assert resp.status_code == 200 and message in resp.content.decode()
        assert list(django_user_model.objects.values_list("username", flat=True)) == ["r3w"]

    @pytest.mark.parametrize("variant, message", [
        ("r3w@\u0435xample.org", "mixes Cyrillic and Latin letters"),  # Cyrillic ie among Latin letters
        ("r3w@\u0435\u0445\u0430mple.org", "mixes Cyrillic and Latin letters"),
        ("r3w@ex\u03b1mple.org", "mixes Greek and Latin letters"),  # Greek alpha
        ("r\u0417w@example.org", "U+0417 (CYRILLIC CAPITAL LETTER ZE) at character 2"),  # a 3 look-alike
        ("r3w\u200b@example.org", "U+200B (ZERO WIDTH SPACE)"),  # invisible
        ("r3w@exam\u00adple.org", "U+00AD (SOFT HYPHEN)"),
    ])
    def test_a_confusable_address_is_refused_with_its_character(self, client, django_user_model, variant: str,
                                                                message: str) -> None:  # type: ignore[no-untyped-def]
        assert sign_up(client, "r3w", "r3w@example.org").status_code == 302
        resp = sign_up(client, "r3w2", variant)
        assert resp.status_code == 200 and message in resp.content.decode()
        assert django_user_model.objects.count() == 1

    def test_an_internationalised_domain_signs_up_under_its_ascii_name(self, client, django_user_model) -> None:  # type: ignore[no-untyped-def]
        from allauth.account.models import EmailAddress

        assert sign_up(client, "jo", "jo@m\u00fcnchen.de").status_code == 302  # a real IDN, one script
        assert EmailAddress.objects.get(user__username="jo").email == "jo@xn--mnchen-3ya.de"  # stored as sent to
        assert "already registered with this email" in sign_up(client, "jo2", "jo@M\u00dcNCHEN.de").content.decode()
        assert sign_up(client, "hana", "hana@\u65e5\u672c\u8a9e.jp").status_code == 302  # Han label

    def test_the_migration_gives_each_mailbox_to_one_account(self, django_user_model, capsys) -> None:  # type: ignore[no-untyped-def]
        import importlib

        from allauth.account.models import EmailAddress
        from django.apps import apps

        from accounts.models import Mailbox

        first = django_user_model.objects.create_user(username="r3w", password="correct-horse-battery")
        sybils = [django_user_model.objects.create_user(username=f"s{n}", password="correct-horse-battery")
                  for n in range(2)]
        # as stored before the rule (bulk_create sends no signal): each sybil held a mailbox of its own
        EmailAddress.objects.bulk_create([
            EmailAddress(user=first, email="r3w@example.org", verified=True, primary=True),
            EmailAddress(user=sybils[0], email="r3w@\uff45xample.org", verified=True, primary=True),
            EmailAddress(user=sybils[1], email='"r3w"@example.org', verified=True, primary=True)])
        Mailbox.objects.bulk_create([Mailbox(address="r3w@example.org", user=first),
                                     Mailbox(address="r3w@\uff45xample.org", user=sybils[0]),
                                     Mailbox(address='"r3w"@example.org', user=sybils[1])])
        importlib.import_module("accounts.migrations.0002_mailboxes_nfkc_idna").recompute(apps, None)
        assert list(Mailbox.objects.values_list("address", "user_id")) == [("r3w@example.org", first.pk)]
        assert f"[{sybils[0].pk}, {sybils[1].pk}]" in capsys.readouterr().out

    def test_an_account_cannot_add_another_accounts_mailbox(self, client, user, django_user_model) -> None:  # type: ignore[no-untyped-def]
        from allauth.account.models import EmailAddress

        other = django_user_model.objects.create_user(username="eve", password="correct-horse-battery")
        client.force_login(other)
        resp = client.post("/accounts/email/", {"email": "ada+eve@example.org", "action_add": ""})
        assert resp.status_code == 200 and "An account already exists for this mailbox" in resp.content.decode()
        assert not EmailAddress.objects.filter(user=other).exists()
        # the account's own aliases are its own mailbox
        client.force_login(user)
        assert client.post("/accounts/email/", {"email": "ada+lab@example.org", "action_add": ""}).status_code == 302

    def test_the_database_holds_one_account_per_mailbox(self, user, django_user_model) -> None:  # type: ignore[no-untyped-def]
        from allauth.account.models import EmailAddress
        from django.db import transaction

        from accounts.mailboxes import MailboxTaken

        other = django_user_model.objects.create_user(username="eve", password="correct-horse-battery")
        with pytest.raises(MailboxTaken), transaction.atomic():  # a racing sign-up past the form's check
            EmailAddress.objects.create(user=other, email="ADA+1@example.org", verified=True, primary=True)
        assert not EmailAddress.objects.filter(user=other).exists()
        EmailAddress.objects.filter(user=user).delete()  # a mailbox its account gives up is free again
        EmailAddress.objects.create(user=other, email="ada@example.org", verified=True, primary=True)

    def test_a_token_for_another_accounts_mailbox_is_refused(self, user, django_user_model) -> None:  # type: ignore[no-untyped-def]
        from django.core.management import CommandError, call_command

        with pytest.raises(CommandError, match="An account already exists for this mailbox"):
            call_command("issue_token", username="eve", verified_email="Ada+bot@example.org")
        assert not django_user_model.objects.filter(username="eve").exists()

    def test_a_signup_that_loses_the_race_for_its_mailbox_stores_nothing(self, rf, user, django_user_model) -> None:  # type: ignore[no-untyped-def]
        from allauth.account.models import EmailAddress
        from django.contrib.auth.models import AnonymousUser
        from django.contrib.sessions.middleware import SessionMiddleware

        from accounts.forms import SignupForm

        EmailAddress.objects.filter(user=user).delete()  # the mailbox is free when the form is checked...
        form = SignupForm({"username": "mallory", "email": "ada+m@example.org", "password1": "correct-horse-9x",
                           "password2": "correct-horse-9x"})
        assert form.is_valid(), form.errors
        EmailAddress.objects.create(user=user, email="ada@example.org")  # ...and taken before it is saved
        request = rf.post("/accounts/signup/")
        SessionMiddleware(lambda r: None).process_request(request)
        request.user = AnonymousUser()
        new_user, resp = form.try_save(request)
        assert new_user is None and "An account already exists for this mailbox" in resp.render().content.decode()
        assert list(django_user_model.objects.values_list("username", flat=True)) == ["ada"]

    def test_rotating_x_forwarded_for_is_throttled(self, client, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_THROTTLE_RATES = {**settings.QVAL_THROTTLE_RATES, "compare_anon": "3/min"}
        codes = [client.get("/api/v1/compare/", {"a": 1, "b": 2}, HTTP_X_FORWARDED_FOR=f"198.51.100.{n}").status_code
                 for n in range(6)]
        assert codes == [400] * 3 + [429] * 3
        codes = [client.get("/api/v1/compare/", {"a": 1, "b": 2}, REMOTE_ADDR=f"2001:db8:0:7::{n:x}").status_code
                 for n in range(4)]  # nor do the addresses of one IPv6 subscriber's /64
        assert codes == [400] * 3 + [429]
        settings.ACCOUNT_RATE_LIMITS = {"signup": "2/h/ip"}
        codes = [sign_up(client, f"u{n}", f"u{n}@example.org", HTTP_X_FORWARDED_FOR=f"198.51.100.{n}").status_code
                 for n in range(3)]
        assert codes == [302, 302, 429]

    def test_behind_a_trusted_proxy_the_client_is_the_hop_it_saw(self, client, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_TRUSTED_PROXIES = ["10.0.0.0/8"]
        settings.QVAL_THROTTLE_RATES = {**settings.QVAL_THROTTLE_RATES, "compare_anon": "2/min"}

        def compare(forwarded: str) -> int:
            return client.get("/api/v1/compare/", {"a": 1, "b": 2}, REMOTE_ADDR="10.0.0.5",
                              HTTP_X_FORWARDED_FOR=forwarded).status_code

        # the client's own hops (left of the one the proxies saw) change nothing
        assert [compare(f"198.51.100.{n}, 203.0.113.7, 10.0.0.9") for n in range(3)] == [400, 400, 429]
        assert compare("203.0.113.8, 10.0.0.9") == 400  # another client behind the same proxy
        assert client.get("/api/v1/compare/", {"a": 1, "b": 2}, REMOTE_ADDR="198.51.100.1",
                          HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 400  # not a proxy: not believed
        assert client.get("/api/v1/compare/", {"a": 1, "b": 2}, REMOTE_ADDR="198.51.100.1",
                          HTTP_X_FORWARDED_FOR="203.0.113.10").status_code == 400
        assert client.get("/api/v1/compare/", {"a": 1, "b": 2}, REMOTE_ADDR="198.51.100.1").status_code == 429

    @pytest.mark.django_db(transaction=True)
    def test_the_signup_count_is_shared_with_another_process(self, client, settings) -> None:  # type: ignore[no-untyped-def]
        settings.ACCOUNT_RATE_LIMITS = {"signup": "2/h/ip"}
        assert [sign_up(client, f"u{n}", f"u{n}@example.org").status_code for n in range(2)] == [302, 302]
        db = connection.settings_dict
        env = {**os.environ, "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
               "QVAL_SIGNUP_RATE": "2/h/ip", "DJANGO_SETTINGS_MODULE": "qval_site.settings"}
        child = subprocess.run([sys.executable, "-c", SIGNUP_IN_CHILD], cwd=Path(__file__).parents[1], env=env,
                               capture_output=True, text=True, timeout=120)
        assert child.returncode == 0, child.stderr
        assert child.stdout.split()[-1] == "429"  # a third sign-up from the same address, in a second web process

    def test_the_default_cache_is_shared(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "QVAL_CACHE_URL"}
        code = ("from django.core.cache.backends.redis import RedisCache; from django.utils.module_loading import "
                "import_string; from qval_site import settings; "
                "print(issubclass(import_string(settings.CACHES['default']['BACKEND']), RedisCache))")
        child = subprocess.run([sys.executable, "-c", code],
                               cwd=Path(__file__).parents[1], env=env, capture_output=True, text=True, timeout=120)
        assert child.stdout.strip() == "True", child.stderr  # Redis (qval_site/cache.py: memory only while it is down)


EVIL_NAME = "<a href=//evil.example>x</a>"
"""A method name that is a link: drawn live by a browser or Plotly if it ever reaches either as markup."""

FORMULA = '=HYPERLINK("http://evil.example","x")'
"""A method name a spreadsheet would run as a formula."""


def _strings(node: object) -> list[str]:
    """Every string in a decoded JSON document (a Plotly figure's labels, names and hover texts)."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in _strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in _strings(value)]
    return []


def _csv_cells(body: bytes) -> list[str]:
    """Every cell of a CSV download below its header."""
    import csv

    return [cell for row in list(csv.reader(io.StringIO(body.decode())))[1:] for cell in row]


@pytest.mark.django_db
class TestVisibilityChannels:
    """Round three, finding 5: switching visibility revived a replaced ladder row (with the newer row private, the
    older one was back on the board and its permalink answered 200), and ``/methods/<name>/`` answered 200 for a
    name whose rows were all private and 404 for one never used: an oracle on other accounts' private names."""

    def test_a_replaced_ladder_row_stays_replaced_when_the_newer_is_made_private(self, client, api, user, loaded,  # type: ignore[no-untyped-def]
                                                                                frozenlake, settings) -> None:
        settings.QVAL_BOOTSTRAP_RESAMPLES = 50
        loaded.environment.open_book = False  # a board that ranks uploaded files, so they climb ladders
        loaded.environment.save(update_fields=["open_book"])
        ids, labels = actor_points(frozenlake, "test")
        rng = np.random.default_rng(32)
        first = upload(api, csv_bytes(ids, labels + rng.normal(0, 2 * labels.std(), len(ids))), method_name="m1")["id"]
        finish(first)
        better = upload(api, csv_bytes(ids, labels + rng.normal(0, 0.05 * labels.std(), len(ids))),
                        method_name="m2")["id"]
        finish(better)
        assert Submission.objects.get(pk=better).ladder_against_id == first

        def board() -> list[int]:  # uploaded files: the board's self-reported tab
            rows = client.get(f"/boards/{loaded.key}:q:text/", {"format": "json", "all": "1",
                                                               "source": "self-reported"}).json()["rows"]
            return [r["submission_id"] for r in rows]

        assert board() == [better] and client.get(f"/results/{first}/").status_code == 404
        assert api.patch(f"/api/v1/submissions/{better}/", {"public": False}, format="json").status_code == 200
        assert board() == []  # the account's best is private: the board shows none of its scores
        assert client.get(f"/results/{first}/").status_code == 404 and client.get(f"/results/{better}/").status_code == 404
        assert "m1" not in client.get("/leaderboard/", {"dataset": loaded.key, "split": "test"}).content.decode()
        assert api.patch(f"/api/v1/submissions/{better}/", {"public": True}, format="json").status_code == 200
        assert board() == [better]

    def test_a_method_page_exists_only_for_a_public_row(self, client, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        ids, labels = actor_points(frozenlake, "dev")
        private = upload(api, csv_bytes(ids, labels), split="dev", method_name="secret-sauce", public="false")["id"]
        finish(private)
        shown = upload(api, csv_bytes(ids, labels), split="dev", method_name="shown-sauce")["id"]
        finish(shown)
        assert client.get("/methods/shown-sauce/").status_code == 200
        never = client.get("/methods/never-used/")
        hidden = client.get("/methods/secret-sauce/")
        assert hidden.status_code == never.status_code == 404
        assert hidden.content.decode().replace("secret-sauce", "X") == never.content.decode().replace("never-used", "X")


@pytest.mark.django_db
class TestNamesAndInjection:
    """Issue 20, findings 7-10: a user-chosen name breaks no page and becomes no markup or formula; the
    job result endpoint and the JSON Lines line limit hold; an open-book dataset ranks no uploaded file."""

    @pytest.mark.parametrize("name", ["a/b", EVIL_NAME, "..", "50% \"quoted\" 'é' ü/", "x" * 100])
    def test_any_method_name_is_safe_on_every_page(self, client, user, api, loaded, frozenlake, name: str) -> None:  # type: ignore[no-untyped-def]
        from html import escape
        from urllib.parse import urlencode

        from django.urls import reverse

        ids, labels = actor_points(frozenlake, "dev")
        noisy = labels + np.random.default_rng(0).normal(0, 0.3, len(ids))
        mine = upload(api, csv_bytes(ids, noisy), split="dev", method_name=name, backbone=EVIL_NAME)
        finish(mine["id"])
        other = upload(api, csv_bytes(ids, labels), split="dev", method_name="plain")
        finish(other["id"])
        client.force_login(user)  # their owner: the only one who may compare them
        method_url = reverse("method", args=[name])
        shown = escape(name)  # as a template writes it
        lists = [f"/leaderboard/?{q}" for q in ("", "sort=date", "sort=-date", "sort=method", "sort=-method",
                                                  "split=dev", urlencode({"q": name}), urlencode({"method": name}))]
        pages = [*lists, method_url, method_url + "?figure=heatmap&split=dev", "/environments/frozenlake/?split=dev",
                 f"/compare/?a={mine['id']}&b={other['id']}", "/leaderboard/aggregate/?split=dev&source=self-reported",
                 "/leaderboard/critical-difference/?split=dev&source=self-reported"]
        for url in pages:
            resp = client.get(url)
            assert resp.status_code == 200, (url, resp.status_code)
            body = resp.content.decode()
            assert "<a href=//evil.example>" not in body, url
            assert shown in body, url
        for url in lists + [method_url]:
            assert f'href="{escape(method_url)}"' in client.get(url).content.decode(), url
        assert f"<h1>Method {shown}</h1>" in client.get(method_url).content.decode()

        drawn = escape(name, quote=False)  # as Plotly must receive it: it reads &, < and > as markup
        own = "split=dev&source=self-reported"  # uploaded files: the figures default to the paper's numbers
        figures_ = [f"/figures/{f}/?{own}&format=plotly" for f in ("per-family", "per-environment", "heatmap")]
        figures_ += [f"/figures/heatmap/?{own}&by=backbone&format=plotly",
                     method_url + "?split=dev&format=plotly", method_url + "?figure=per-family&split=dev&format=plotly"]
        for url in figures_:
            resp = client.get(url)
            assert resp.status_code == 200, (url, resp.status_code)
            strings = _strings(resp.json())
            assert not any("<a" in s or "evil.example>" in s for s in strings), url
            assert any(drawn in s for s in strings), url
            assert any(escape(EVIL_NAME, quote=False) in s for s in strings) or "by=backbone" not in url

        api_rows = client.get("/api/v1/leaderboard/", {"method": name}).json()["results"]
        assert [r["submission_id"] for r in api_rows] == [mine["id"]] and api_rows[0]["method"] == name
        exported = json.loads(client.get("/leaderboard/", {"split": "dev", "format": "json"}).getvalue())["rows"]
        assert name in {r["method"] for r in exported}
        for url in ("/leaderboard/?split=dev&format=csv", f"/figures/per-family/?{own}&format=csv"):
            assert name in _csv_cells(client.get(url).getvalue()), url

    @pytest.mark.parametrize("name,where", [("a\u202eb", "U+202E (RIGHT-TO-LEFT OVERRIDE) at character 2"),
                                            ("two\nlines", "U+000A (a control character) at character 4"),
                                            ("zero\u200bwidth", "U+200B (ZERO WIDTH SPACE) at character 5")])
    def test_an_unprinted_character_in_a_method_name_is_refused(self, api, loaded, name: str, where: str) -> None:  # type: ignore[no-untyped-def]
        data = {"dataset": KEY, "split": "dev", "target": "q", "method_name": name,
                "file": SimpleUploadedFile("p.csv", b"id,score\n")}
        resp = api.post("/api/v1/submissions/", data, format="multipart")
        assert resp.status_code == 400
        assert resp.json()["errors"]["method_name"] == [
            f"method_name holds {where}, which is not printed; use letters, digits, spaces and punctuation"]
        assert not Submission.objects.exists()

    def test_formula_cells_are_neutralised_in_every_csv_and_numbers_stay_numbers(self, client, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        from django.urls import reverse

        ids, labels = actor_points(frozenlake, "dev")
        sub = upload(api, csv_bytes(ids, -labels), split="dev", method_name=FORMULA, backbone="@SUM(A1)")
        finish(sub["id"])
        downloads = ["/leaderboard/?format=csv", "/leaderboard/?split=dev&format=csv",
                     "/figures/per-family/?split=dev&source=self-reported&format=csv",
                     "/figures/per-environment/?split=dev&source=self-reported&format=csv",
                     "/figures/heatmap/?split=dev&source=self-reported&by=backbone&format=csv",
                     reverse("method", args=[FORMULA]) + "?split=dev&format=csv"]
        for url in downloads:
            resp = client.get(url)
            assert resp.status_code == 200, (url, resp.status_code)
            cells = _csv_cells(resp.getvalue())
            assert cells, url
            assert not any(c.startswith(("=", "+", "@", "\t", "\r")) for c in cells), url
            assert not any(c.startswith("-") and not c.lstrip("-").replace(".", "", 1).isdigit() for c in cells), url
            assert "'" + FORMULA in cells, url
            assert any(c.startswith("-") and float(c) < 0 for c in cells), url  # ρ = -1: a negative number, kept
        assert "'@SUM(A1)" in _csv_cells(client.get("/leaderboard/?format=csv").getvalue())

    @pytest.mark.parametrize("text", ["\uff1dHYPERLINK(\"http://evil.example\",\"x\")",  # full-width =
                                      "\ufe66cmd|' /C calc'!A0", "\uff0b1+1", "\uff0dSUM(A1)", "\uff20SUM(A1)",
                                      " =1+1", "\u3000=1+1"])  # leading (ideographic) space
    def test_a_look_alike_formula_prefix_is_neutralised(self, text: str) -> None:
        """Round three, finding 5: a full-width ``＝HYPERLINK(…)`` reached the CSV exports unprefixed."""
        from board.exports import csv_text

        body = csv_text(["method"], [{"method": text}, {"method": "plain"}, {"method": -0.5}])
        assert _csv_cells(body.encode()) == ["'" + text, "plain", "-0.5"]

    def test_a_full_width_formula_name_is_neutralised_in_the_board_export(self, client, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        ids, labels = actor_points(frozenlake, "dev")
        name = "\uff1dHYPERLINK(\"http://evil.example\",\"x\")"
        finish(upload(api, csv_bytes(ids, labels), split="dev", method_name=name)["id"])
        cells = _csv_cells(client.get("/leaderboard/?split=dev&format=csv").getvalue())
        assert "'" + name in cells and name not in cells

    def test_a_nested_job_result_is_a_400_after_the_token_check(self, user, loaded) -> None:  # type: ignore[no-untyped-def]
        from rest_framework.test import APIClient

        from workers.models import JobToken

        sub = Submission.objects.create(user=user, dataset=loaded, split="dev", target="q", method_name="boxed",
                                        kind=Submission.KIND_CONTAINER, filename="m.tar", attempt=1)
        for state in (Submission.VALIDATING, Submission.QUEUED, Submission.SCORING):
            sub.transition(state)
        token = lifecycle.issue_token(sub)
        deep = '{"exit_code": 0, "stdout": ' + "[" * 10_000 + "]" * 10_000 + "}"

        def post(raw: str):  # type: ignore[no-untyped-def]
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Job {raw}", HTTP_X_QVAL_WORKER="box-1")
            return client.post(f"/api/v1/jobs/{sub.pk}/result", {"run": deep}, format="multipart")

        forged = post("forged-" + token[7:])
        assert forged.status_code == 403 and forged.json()["detail"] == "unknown job token for this submission"
        resp = post(token)
        assert resp.status_code == 400
        assert resp.json()["detail"] == "run: not a JSON object (line 1, column 91: nesting deeper than 64 levels)"
        assert JobToken.objects.get(submission=sub).used_at is None  # refused: the token is not spent
        assert Submission.objects.get(pk=sub.pk).state == Submission.SCORING

    @pytest.mark.parametrize("pad", ["x" * (3 * 2**19), "é" * (2**19 + 2**17)])  # 1.5 MiB; 655,360 characters, 1.25 MiB
    def test_a_jsonl_line_over_1_mib_is_refused_with_its_line(self, pad: str) -> None:
        data = ('{"id": "a", "score": 1}\n{"id": "b", "score": 2, "pad": "' + pad + '"}\n{"id": "c", "score": 3}\n')
        found = problems(data.encode(), "p.jsonl")
        assert found["parse"].rows == (2,)
        assert found["parse"].message.startswith("line 2: the line is 1.")
        assert "lines may be at most 1.0 MiB" in found["parse"].message

    def test_frozenlake_ranks_no_uploaded_file_on_its_test_split(self, client, api, user, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        ids, labels = actor_points(frozenlake, "test")
        labelled = upload(api, csv_bytes(ids, labels), method_name="public-labeller")  # ρ = 1 from the test inputs
        finish(labelled["id"])
        dev_ids, dev_labels = actor_points(frozenlake, "dev")
        dev = upload(api, csv_bytes(dev_ids, dev_labels), split="dev", method_name="public-labeller")
        finish(dev["id"])
        boxed = _container_submission(user, loaded, "test", ids, labels)

        on_board = {r["submission_id"] for r in client.get("/api/v1/leaderboard/", {"dataset": KEY}).json()["results"]}
        assert labelled["id"] not in on_board
        assert {dev["id"], boxed.pk} <= on_board  # the dev split, and a platform-run row of the test split, stay
        page = client.get("/leaderboard/", {"split": "test"}).content.decode()
        assert f'data-submission="{labelled["id"]}"' not in page and f'data-submission="{boxed.pk}"' in page
        assert 'id="open-book"' in page and "labels follow from the observations" in page
        exported = json.loads(client.get("/leaderboard/", {"split": "test", "format": "json"}).getvalue())["rows"]
        assert [r["submission_id"] for r in exported] == [boxed.pk]
        figure = client.get("/figures/per-family/", {"split": "test", "source": "any", "format": "json"}).json()["rows"]
        assert {r["submission_id"] for r in figure} == {boxed.pk}
        dataset_page = client.get(f"/datasets/{KEY}/").content.decode()
        assert 'id="open-book"' in dataset_page and "labels follow from the observations" in dataset_page
        client.force_login(user)
        unranked = client.get(f"/submissions/{labelled['id']}/").content.decode()
        assert 'id="not-ranked"' in unranked and "is open book" in unranked
        assert "is open book" not in client.get(f"/submissions/{dev['id']}/").content.decode()  # a self-check


# -- per-state ranking values and label-dependent counts (issue 20, findings 2 and 3) ----------------------


SPREAD = ("std", "ci95", "num_valid", "num_skipped")
"""What the ranking row showed besides its mean: each one more equation on the per-state values."""


def possible_values(scores: list[float]) -> list[float | None]:
    """Every per-state ranking value ``scores`` can get, whatever the state's labels (ties included);
    ``None``: the state is skipped (all labels equal)."""
    found = {metrics.state_ranking_spearman(np.array(labels, dtype=float), np.array(scores))
             for labels in itertools.product(range(len(scores)), repeat=len(scores))}
    return sorted(found, key=lambda v: (v is not None, v or 0.0))


def replayed(per_state: list[float | None], resamples: int, design: sampling.Design | None = None) -> dict:  # type: ignore[type-arg]
    """What the scorer computes for the ranking row from per-state values (public code, seed 0; the states'
    trajectories and tasks, ``design``, are public too)."""
    summary = metrics.ranking_summary(per_state)
    shown = {"value": summary.mean, "std": summary.std, "num_valid": summary.num_valid,
             "num_skipped": summary.num_skipped}
    if summary.mean is not None and resamples:
        ci = metrics.bootstrap_ranking_ci(per_state, resamples=resamples, seed=0, design=design)
        shown["ci95"] = [ci.low, ci.high]
    return shown


def consistent(row: dict, replay: dict, hidden_split: bool) -> bool:  # type: ignore[type-arg]
    """Whether a replay gives every number the ranking row shows (rounded as shown on a hidden split)."""
    if row["details"].get("withheld"):
        return True  # nothing shown, nothing to match
    shown = {"value": row["value"], **{k: row["details"][k] for k in SPREAD if k in row["details"]}}

    def same(a, b) -> bool:  # type: ignore[no-untyped-def]
        if isinstance(a, list) or isinstance(b, list):
            return a is not None and b is not None and all(same(x, y) for x, y in zip(a, b))
        if a is None or b is None:
            return a is b
        return disclose_value(b) == a if hidden_split else abs(a - b) < 1e-9

    return all(same(value, replay.get(key)) for key, value in shown.items())


def decode(row: dict, template: list[float | None], slots: list[int], options: list[list[float | None]],  # type: ignore[type-arg]
           resamples: int, hidden_split: bool, design: sampling.Design | None = None) -> list[set[float | None]]:
    """The attacker's step: replay the seeded bootstrap for every assignment of possible values to the
    unknown ``slots`` of the per-state list; per slot, the values of the assignments that match."""
    matches = []
    for combo in itertools.product(*options):
        per_state = list(template)
        for slot, value in zip(slots, combo):
            per_state[slot] = value
        if consistent(row, replayed(per_state, resamples, design), hidden_split):
            matches.append(combo)
    return [{m[i] for m in matches} for i in range(len(slots))]


PATTERNS = ((0.0, 1.0, 2.0, 3.0), (0.0, 0.0, 1.0, 1.0), (0.0, 0.0, 0.0, 1.0))
"""The attacker's scores of a state's four candidates: a different pattern per decoded state, so that
the states' possible values differ and the decode can tell them apart."""


def ranking_file(states: list[schema.State], ranked: dict[int, tuple[float, ...]]) -> tuple[list[str], list[float]]:
    """The candidates of state ``i`` in ``ranked`` score ``ranked[i]``; every other candidate of ``states`` 0."""
    ids, scores = [], []
    for i, s in enumerate(states):
        ids += [c.id for c in s.candidates]
        scores += list(ranked[i]) if i in ranked else [0.0] * len(s.candidates)
    return ids, scores


def true_values(ds: schema.Dataset, states: list[schema.State], scores: dict[str, float]) -> list[float | None]:
    """Each state's ranking value under ``scores`` (what the attacker wants)."""
    return [metrics.state_ranking_spearman(np.array([ds.q_labels[c.id] for c in s.candidates]),
                                           np.array([scores[c.id] for c in s.candidates])) for s in states]


@pytest.mark.django_db
class TestRankingDecodeAndCounts:
    """Channels: per-state ranking values read from a partial file's mean, std and seeded bootstrap
    interval (issue 20, finding 2), and counts that depend on the labels (finding 3)."""

    K = 3
    RESAMPLES = 200

    def _partial(self, api, frozenlake, split: str) -> tuple[list[set[float | None]], list[float | None], list[list[float | None]]]:  # type: ignore[no-untyped-def]
        """Score every candidate of the first K states only, then decode their values from the row."""
        states = [s for s in frozenlake.states if s.split == split][: self.K]
        ids, scores = ranking_file(states, dict(enumerate(PATTERNS[: self.K])))
        sub = upload(api, csv_bytes(ids, scores), split=split, method_name="k-states")
        finish(sub["id"])
        rows = {r["metric"]: r for r in api.get(f"/api/v1/submissions/{sub['id']}/").json()["results"]}
        options = [possible_values(list(pattern)) for pattern in PATTERNS[: self.K]]
        design = sampling.Design.of([s.trajectory for s in states], [s.task for s in states])
        found = decode(rows["ranking_spearman"], [None] * self.K, list(range(self.K)), options, self.RESAMPLES,
                       split not in schema.PUBLIC_SPLITS, design)
        return found, true_values(frozenlake, states, dict(zip(ids, scores))), options

    def test_the_decode_reads_each_state_where_labels_are_public(self, api, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_BOOTSTRAP_RESAMPLES = self.RESAMPLES
        found, truth, _ = self._partial(api, frozenlake, "dev")
        assert found == [{v} for v in truth]  # every state's value, exactly

    def test_a_partial_file_discloses_no_per_state_value_on_test(self, api, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_BOOTSTRAP_RESAMPLES = self.RESAMPLES
        found, _, options = self._partial(api, frozenlake, "test")
        assert found == [set(o) for o in options]  # every value it could have is still possible
        sub = Submission.objects.filter(method_name="k-states").get()
        for row in sub.results.exclude(metric__in=metrics.POINT_METRICS):  # ranking and selection: withheld
            assert (row.value, set(row.details), row.num_points) == (None, {"withheld", "num_states"}, self.K), row.metric

    def test_a_full_file_padded_with_known_zeros_gives_one_sum(self, api, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        """Every candidate scored, but all states except two get one constant score (each counts 0): the
        mean is the only ranking number, so the two values are seen only as a sum, even by an attacker
        who knows which padded states are skipped."""
        settings.QVAL_BOOTSTRAP_RESAMPLES = self.RESAMPLES
        states = [s for s in frozenlake.states if s.split == "test"]
        values = true_values(frozenlake, states, {c.id: PATTERNS[0][k] for s in states for k, c in enumerate(s.candidates)})
        # two states the ranking scores give different values: only the order of the bootstrap could tell them apart
        first = next(i for i, v in enumerate(values) if v is not None)
        second = next(i for i, v in enumerate(values) if v is not None and v != values[first])
        ids, scores = ranking_file(states, {first: PATTERNS[0], second: PATTERNS[0]})
        sub = upload(api, csv_bytes(ids, scores), method_name="padded")
        finish(sub["id"])
        rank = {r["metric"]: r for r in api.get(f"/api/v1/submissions/{sub['id']}/").json()["results"]}["ranking_spearman"]
        assert rank["value"] is not None and not set(SPREAD) & set(rank["details"])
        assert rank["num_points"] == len(states) and rank["coverage"] == 1.0
        template = true_values(frozenlake, states, dict(zip(ids, scores)))  # the known zeros and skips
        option = possible_values(list(PATTERNS[0]))
        found = decode(rank, template, [first, second], [option, option], self.RESAMPLES, True)
        assert values[first] in found[1] and values[second] in found[0]  # the swap matches as well
        assert all(len(v) > 1 for v in found)

    def test_no_label_dependent_count_is_disclosed_on_test(self, client, user, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        """A complete file's shown rows, against what the same file shows under other labels: every count
        is the same (it depends on the file only); sign agreement, a count of label signs, is withheld."""
        states = [s for s in frozenlake.states if s.split == "test"]
        ids = [c.id for s in states for c in s.candidates]
        scores = np.random.default_rng(20).normal(size=len(ids))
        sub = upload(api, csv_bytes(ids, scores), method_name="counts")
        finish(sub["id"])
        shown = {r["metric"]: r for r in api.get(f"/api/v1/submissions/{sub['id']}/").json()["results"]}
        truth = truth_from_dataset(frozenlake, "test", "q")
        flat = lambda labels: np.where(np.arange(len(labels)) % 2 == 0, 0.0, labels)  # noqa: E731
        other = Truth(truth.point_ids, flat(truth.point_labels), truth.group_ids,
                      [g if i % 2 else np.zeros_like(g) for i, g in enumerate(truth.group_labels)])
        elsewhere = {r.metric: r for r in disclose(score(other, np.array(ids, dtype=object), scores,
                                                         bootstrap_resamples=0), hidden=True)}
        for metric, row in shown.items():
            counts = lambda r: (r["num_points"], r["num_dropped"], r["coverage"],  # noqa: E731
                                {k: v for k, v in r["details"].items() if isinstance(v, int) and not isinstance(v, bool)})
            assert counts(row) == counts(vars(elsewhere[metric])), metric
        assert shown["sign_agreement"]["value"] is None and shown["sign_agreement"]["details"]["withheld"]
        client.force_login(user)
        page = client.get(f"/submissions/{sub['id']}/").content.decode()
        assert "skipped states" not in page and "candidate pairs" not in page
        # FrozenLake has no negative label: the page leaves sign agreement out and says why.
        assert 'data-metric="sign_agreement"' not in page and 'id="one-sign-note"' in page

    def test_a_constant_file_reads_no_label_sign_count(self, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        """All scores 0: sign agreement is the share of labels that are exactly 0 (shown on dev, never on
        test, and never in A vs B on test)."""
        for split in ("dev", "test"):
            ids, labels = actor_points(frozenlake, split)
            sub = upload(api, csv_bytes(ids, np.zeros(len(ids))), split=split, method_name="zeros")
            finish(sub["id"])
            sign = {r["metric"]: r for r in api.get(f"/api/v1/submissions/{sub['id']}/").json()["results"]}["sign_agreement"]
            if split == "dev":
                assert round(sign["value"] * len(ids)) == int((labels == 0).sum())
            else:
                assert sign["value"] is None and sign["p_value"] is None and "ci95" not in sign["details"]
        other = upload(api, csv_bytes(ids, labels + 1.0), method_name="shifted")
        finish(other["id"])
        compared = api.get(f"/api/v1/compare/?a={sub['id']}&b={other['id']}").json()
        assert "sign_agreement" not in {m["metric"] for m in compared["metrics"]}

    def test_disclosing_twice_changes_nothing(self, frozenlake) -> None:  # type: ignore[no-untyped-def]
        truth = truth_from_dataset(frozenlake, "test", "q")
        states = [s for s in frozenlake.states if s.split == "test"]
        for ranked in ({0: PATTERNS[0]}, {i: PATTERNS[0] for i in range(len(states))}):
            ids, scores = ranking_file(states, ranked)
            once = disclose(score(truth, np.array(ids, dtype=object), np.array(scores), bootstrap_resamples=50),
                            hidden=True)
            assert disclose(once, hidden=True) == once

    def test_the_migration_cuts_what_was_stored_before(self, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        """Rows stored under the old rule are cut by data migration ``disclose_hidden_counts``: a partial
        file's ranking and selection withheld, a complete file's ranking its rounded mean over its states,
        sign agreement withheld; a dev submission keeps everything."""
        import importlib

        from django.apps import apps

        ids, _ = actor_points(frozenlake, "test")
        old = {"std": 0.2, "ci95": [0.1, 0.9], "num_valid": 3, "num_skipped": 1}
        stored = {}
        for name, split, coverage in (("partial", "test", 0.04), ("complete", "test", 1.0), ("public", "dev", 0.04)):
            sub = Submission.objects.get(pk=upload(api, csv_bytes(*actor_points(frozenlake, split)), split=split,
                                                   method_name=name)["id"])
            sub.transition(Submission.SCORING)
            sub.results.create(metric="ranking_spearman", value=0.51234, num_points=3, coverage=coverage, details=old)
            sub.results.create(metric="top1_accuracy", value=0.75, num_points=4, coverage=coverage)
            sub.results.create(metric="sign_agreement", value=0.9, p_value=1e-5, num_points=len(ids), coverage=1.0,
                               details={"ci95": [0.8, 0.95], "significance": "***"})
            sub.transition(Submission.FINISHED)
            stored[name] = sub
        folder = Path(__file__).resolve().parents[1] / "submissions" / "migrations"
        name = next(folder.glob("*_disclose_hidden_counts.py")).stem  # whatever number it has
        importlib.import_module(f"submissions.migrations.{name}").disclose_hidden_counts(apps, None)
        rows = {(n, r.metric): r for n, sub in stored.items() for r in sub.results.all()}
        for metric in ("ranking_spearman", "top1_accuracy", "sign_agreement"):
            assert rows["partial", metric].value is None and rows["partial", metric].details["withheld"]
        complete = rows["complete", "ranking_spearman"]
        assert (complete.value, complete.num_points, complete.details) == (0.512, 4, {"num_states": 4})
        assert rows["complete", "sign_agreement"].value is None
        assert rows["public", "ranking_spearman"].details == old and rows["public", "sign_agreement"].value == 0.9


def _baseline_row(staff, dataset, split: str, ids: list[str], scores: np.ndarray, name: str) -> Submission:  # type: ignore[no-untyped-def]
    """A finished baseline run of the platform (a public row) scored on ``scores``, its
    predictions kept as a gpu worker keeps them."""
    from leaderboard.loading import truth_for

    sub = Submission.objects.create(user=staff, source=Submission.SOURCE_BASELINE, kind=Submission.KIND_BASELINE,
                                    dataset=dataset, split=split, target="q", method_name=name, filename="")
    for state in (Submission.VALIDATING, Submission.QUEUED, Submission.SCORING):
        sub.transition(state)
    lines = "".join(json.dumps({"id": i, "score": float(s)}) + "\n" for i, s in zip(ids, scores)).encode()
    rows = score(truth_for(dataset, split, "q"), np.array(ids, dtype=object), np.asarray(scores, dtype=float),
                 bootstrap_resamples=50)
    stored = default_storage.save(f"predictions/{sub.pk}-predictions.jsonl", ContentFile(lines))
    assert lifecycle.finish(sub.pk, rows, predictions=stored) == Submission.FINISHED
    return sub


def samples_csv(ids: list[str], labels: np.ndarray, samples: int, seed: int) -> bytes:
    """A predictions file with ``samples`` sampled scores per id (``len(ids) * samples`` rows)."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"id": np.repeat(ids, samples), "sample": np.tile(np.arange(samples), len(ids)),
                          "score": np.repeat(labels, samples) + rng.normal(0, 0.5, len(ids) * samples)})
    return frame.to_csv(index=False).encode()


@pytest.mark.django_db
class TestCompareChannelAndWork:
    """Compare as a free channel on anyone's test submissions, compare's cost, and scoring work
    per account (issue 20, item 5 and item 9's third point): a user's submissions are compared
    by their owner only, a comparison not cached is computed once at a time per client address
    and per pair (429 otherwise), and an account's files are bounded by prediction rows read
    per hour (``QVAL_SCORING_WORK_PER_HOUR``), not only by requests."""

    def test_anonymous_compare_of_private_rows_is_refused(self, client, api, user, staff, django_user_model,  # type: ignore[no-untyped-def]
                                                          loaded, frozenlake, settings) -> None:
        settings.QVAL_BOOTSTRAP_RESAMPLES = 50
        ids, labels = actor_points(frozenlake, "test")
        rng = np.random.default_rng(20)
        full = [upload(api, csv_bytes(ids, labels + rng.normal(0, s, len(ids))), method_name=f"m{s}")["id"]
                for s in (0.3, 0.6)]
        dev_ids, dev_labels = actor_points(frozenlake, "dev")
        dev = [upload(api, csv_bytes(dev_ids, dev_labels + rng.normal(0, s, len(dev_ids))), split="dev",
                      method_name=f"d{s}")["id"] for s in (0.3, 0.6)]
        for pk in (*full, *dev):
            finish(pk)
        # The attack of the probe: 16 numbers per pair of anyone's full-coverage test submissions.
        for url in ("/api/v1/compare/", "/compare/"):
            for pair in (full, dev):
                resp = client.get(url, {"a": pair[0], "b": pair[1]})
                assert resp.status_code == 403, (url, resp.status_code)
                text = resp.content.decode()
                assert "sign in as its owner" in text and "rho_a" not in text and 'id="comparison"' not in text
        # Another account is refused too, and is offered none of them to compare with.
        mallory = django_user_model.objects.create_user(username="mallory", email="m@example.org", password="x" * 12)
        client.force_login(mallory)
        refused = client.get("/api/v1/compare/", {"a": full[0], "b": full[1]})
        assert refused.status_code == 403 and "only its owner can compare it" in json.dumps(refused.json())
        # Public rows (the platform's baselines) stay comparable by anyone; the owner compares their own.
        base = [_baseline_row(staff, loaded, "dev", dev_ids, dev_labels + rng.normal(0, s, len(dev_ids)), f"b{s}")
                for s in (0.4, 0.8)]
        client.logout()
        public = client.get("/api/v1/compare/", {"a": base[0].pk, "b": base[1].pk})
        # every metric but sign agreement, which FrozenLake's labels (none negative) make meaningless (its note says so)
        assert public.status_code == 200 and [m["metric"] for m in public.json()["metrics"]] == [
            "spearman", "kendall_tau", "pearson"] and public.json()["note"]
        assert f'value="{dev[0]}"' not in client.get("/compare/", {"a": base[0].pk}).content.decode()
        client.force_login(user)
        assert client.get("/api/v1/compare/", {"a": full[0], "b": full[1]}).status_code == 200
        assert client.get("/api/v1/compare/", {"a": dev[0], "b": base[0].pk}).status_code == 200

    @pytest.mark.django_db(transaction=True)
    def test_concurrent_compares_keep_healthz_fast(self, live_server, staff, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        import time
        import urllib.error
        import urllib.request

        settings.QVAL_BOOTSTRAP_RESAMPLES = 5000  # each comparison costs seconds of CPU on the old code
        ids, labels = actor_points(frozenlake, "dev")
        rng = np.random.default_rng(21)
        rows = [_baseline_row(staff, loaded, "dev", ids, labels + rng.normal(0, 0.2 * (k + 1), len(ids)), f"b{k}").pk
                for k in range(5)]
        pairs = [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:]][:8]

        def get(path: str) -> int:
            try:
                with urllib.request.urlopen(live_server.url + path, timeout=120) as resp:
                    return resp.status
            except urllib.error.HTTPError as exc:
                return exc.code

        barrier, codes = threading.Barrier(len(pairs) + 1), []

        def compare(a: int, b: int) -> None:
            barrier.wait()
            try:
                codes.append(get(f"/api/v1/compare/?a={a}&b={b}"))
            finally:
                connection.close()

        threads = [threading.Thread(target=compare, args=pair) for pair in pairs]
        for t in threads:
            t.start()
        barrier.wait()
        latencies = []
        while any(t.is_alive() for t in threads) or len(latencies) < 10:
            start = time.perf_counter()
            assert get("/healthz") == 200
            latencies.append(time.perf_counter() - start)
            time.sleep(0.02)
        for t in threads:
            t.join(120)
        assert sorted(set(codes)) == [200, 429] and codes.count(200) <= 2, codes
        # The old code: median 0.17 s, 90th percentile 0.4 s. The median tells the two apart; the 90th percentile
        # (of a dozen or so requests) only has to stay clear of the old code's, since on a shared two-core machine
        # running other test processes the scheduler alone stalls a request now and then (0.14 s seen on a run where
        # the median was 0.012 s).
        p50, p90 = np.quantile(latencies, [0.5, 0.9])
        assert p50 < 0.05 and p90 < 0.25, f"/healthz took {p50:.3f} s (median), {p90:.3f} s (90%) during the compares"

    def test_a_burst_of_heavy_sample_uploads_is_refused_past_the_work_bound(self, api, loaded, frozenlake,  # type: ignore[no-untyped-def]
                                                                             settings) -> None:
        from workers.tasks import validate_upload

        ids, labels = actor_points(frozenlake, "dev")
        samples = 40
        rows = len(ids) * samples
        settings.QVAL_SCORING_WORK_PER_HOUR = int(2.5 * rows)

        def post(seed: int) -> tuple[int, dict]:  # type: ignore[type-arg]
            data = {"dataset": KEY, "split": "dev", "target": "q", "method_name": "sampler",
                    "file": SimpleUploadedFile("p.csv", samples_csv(ids, labels, samples, seed))}
            resp = api.post("/api/v1/submissions/", data, format="multipart")
            if resp.status_code == 201:
                validate_upload(resp.json()["id"])
            return resp.status_code, resp.json()

        burst = [post(seed) for seed in range(5)]
        assert [code for code, _ in burst] == [201, 201, 201, 429, 429]
        states = [Submission.objects.get(pk=body["id"]) for _, body in burst[:3]]
        assert [s.state for s in states] == [Submission.QUEUED, Submission.QUEUED, Submission.FAILED]
        assert states[2].fault == Submission.FAULT_USER and "scoring work limit reached" in states[2].error
        refusal = burst[3][1]["errors"]["file"][0]
        assert f"{3 * rows:,} prediction rows" in refusal and f"the limit is {int(2.5 * rows):,} rows" in refusal
        assert "QVAL_SCORING_WORK_PER_HOUR" in refusal and "frees up at" in refusal and "UTC" in refusal
        # A failure caused by the platform gives its work back.
        states[0].transition(Submission.FAILED, error="internal error", fault=Submission.FAULT_SYSTEM)
        assert post(9)[0] == 201

    def test_a_failing_dictionary_parquet_file_counts_against_the_work_bound(self, api, loaded, frozenlake,  # type: ignore[no-untyped-def]
                                                                              settings) -> None:
        """Round three, finding 5: a 77 KB Parquet file of 10^7 dictionary rows of one id held the worker
        4-5 s and failed, and failed files were not counted (6 uploads: 28 s of worker time)."""
        from workers.tasks import validate_upload

        settings.QVAL_SCORING_WORK_PER_HOUR = 10**7
        rows = 10**7
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"id": pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)),
                                                                      pa.array(["x"])),
                                 "score": pa.array(np.zeros(rows))}), sink, compression="zstd")
        data = sink.getvalue().to_pybytes()
        assert len(data) < 100_000

        def post(name: str, content: bytes):  # type: ignore[no-untyped-def]
            return api.post("/api/v1/submissions/", {"dataset": KEY, "split": "dev", "target": "q", "method_name": "d",
                                                     "file": SimpleUploadedFile(name, content)}, format="multipart")

        first = post("p.parquet", data)
        assert first.status_code == 201
        validate_upload(first.json()["id"])
        failed = Submission.objects.get(pk=first.json()["id"])
        assert failed.state == Submission.FAILED and failed.fault == Submission.FAULT_USER
        assert "repeat an id" in failed.error
        ids, labels = actor_points(frozenlake, "dev")
        refused = post("p.csv", csv_bytes(ids, labels))  # even a small, valid file waits for the window
        assert refused.status_code == 429
        assert f"{rows:,} prediction rows" in refused.json()["errors"]["file"][0]

    def test_a_comparison_is_computed_once_and_served_to_everyone_from_the_cache(self, client, staff, loaded,  # type: ignore[no-untyped-def]
                                                                                 frozenlake, settings) -> None:
        from django.core.cache import cache

        from submissions import comparison

        settings.QVAL_BOOTSTRAP_RESAMPLES = 50
        ids, labels = actor_points(frozenlake, "dev")
        rng = np.random.default_rng(22)
        a, b, c = (_baseline_row(staff, loaded, "dev", ids, labels + rng.normal(0, s, len(ids)), f"b{s}")
                   for s in (0.3, 0.6, 0.9))
        fresh = Submission.objects.select_related("dataset").in_bulk([a.pk, b.pk])  # as stored when finished
        computing = f"{comparison._cache_key(fresh[a.pk], fresh[b.pk])}:computing"
        assert cache.add(computing, 1)  # another process is computing this pair
        busy = client.get("/api/v1/compare/", {"a": a.pk, "b": b.pk})
        assert busy.status_code == 429 and "being computed" in busy.json()["detail"] and busy["Retry-After"]
        cache.delete(computing)
        first = client.get("/api/v1/compare/", {"a": a.pk, "b": b.pk}, REMOTE_ADDR="10.0.0.1")
        assert first.status_code == 200
        # Served from the cache to another address: the predictions are no longer read.
        default_storage.delete(fresh[a.pk].predictions.name)
        again = client.get("/api/v1/compare/", {"a": a.pk, "b": b.pk}, REMOTE_ADDR="10.0.0.2")
        assert again.status_code == 200 and again.json() == first.json()
        # The whole site computes at most QVAL_COMPARE_CONCURRENCY pairs at once.
        settings.QVAL_COMPARE_CONCURRENCY = 1
        assert cache.add("qval:compare:computing", 1)
        full = client.get("/api/v1/compare/", {"a": b.pk, "b": c.pk}, REMOTE_ADDR="10.0.0.3")
        assert full.status_code == 429 and "as many comparisons as it may at once" in full.json()["detail"]


@pytest.fixture(scope="module")
def victim_tar(engine, base_image: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    """Another account's method container, saved as the archive it uploaded, and the secret it prints."""
    context = tmp_path_factory.mktemp("victim-method")
    secret = uuid.uuid4().hex
    return saved_method_image(engine, base_image, context, f"print('the victim method, secret {secret}')\n",
                              "victim"), secret


def _small_layer(content: bytes) -> bytes:
    """An uncompressed layer tar holding one file."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


class TestSpoofedImageId:
    """Issue 20, item 6: the image cache took the *name* of the archive's configuration file as the
    image ID.  A 20 KB archive naming another account's image ID ran that account's cached image
    under the attacker's account; and a failed load left podman's mount of the store behind, after
    which every load of that ID -- the genuine archive's included -- failed as the platform's fault.
    The ID is now the configuration's SHA-256 with every layer's digest checked
    (:func:`qval.containers.sanitize_archive`), and a failed load leaves nothing behind.
    """

    @pytest.mark.container
    def test_a_spoofed_image_id_never_runs_another_accounts_image(self, engine, victim_tar, tmp_path) -> None:  # type: ignore[no-untyped-def]
        tar, secret = victim_tar
        limits = qc.Limits(timeout_s=60, memory_mb=256)
        with qc.Job(engine) as job:  # the victim's run: its image is in the cache from now on
            victim_id = job.load(tar)
            assert secret in job.run(victim_id, limits).stdout
        with tarfile.open(tar) as src:
            victim_config = src.extractfile(f"{victim_id}.json").read()  # type: ignore[union-attr]
        count = len(json.loads(victim_config)["rootfs"]["diff_ids"])
        layers = [_small_layer(f"attacker {i}".encode()) for i in range(count)]  # as many as the victim's
        spoofs = {
            "an archive naming the victim's image ID": image_archive(tmp_path / "named.tar", layers[:1],
                                                                     config_id=victim_id),
            "the victim's configuration over other layers": image_archive(tmp_path / "layers.tar", layers,
                                                                          config=victim_config),
        }
        assert (tmp_path / "named.tar").stat().st_size <= 20 * 1024
        for what, archive in spoofs.items():
            with qc.Job(engine) as job:
                try:
                    image_id = job.load(archive)
                except qc.ArchiveRejected as exc:
                    assert "SHA-256" in str(exc), (what, exc)
                    continue
                result = job.run(image_id, limits)
            assert secret not in result.stdout, f"{what} ran the victim's image ({image_id[:12]})"
        assert list(engine.work_root.iterdir()) == []

    @pytest.mark.container
    def test_a_failed_load_leaves_no_mount_and_the_genuine_archive_still_runs(self, engine, victim_tar,
                                                                              tmp_path) -> None:  # type: ignore[no-untyped-def]
        tar, secret = victim_tar
        victim_id = qc.sanitize_archive(tar, Path(os.devnull))
        # An image cache of its own, so the victim's image is not in it yet (the path stays short).
        cache = Path(tempfile.mkdtemp(prefix="qvt-cache-", dir="/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"))
        own = qc.Engine(work_root=engine.work_root, image_cache=cache)
        first = image_archive(tmp_path / "first.tar", [_small_layer(b"x")], config=b"not json", config_id=victim_id)
        broken = image_archive(tmp_path / "broken.tar", [b"this layer is not a tar archive\n" * 64])  # digests right
        try:
            for archive in (first, broken, broken):  # the attacker's first; a broken one, twice
                with qc.Job(own) as job, pytest.raises(qc.ArchiveRejected):
                    job.load(archive)
                assert qc._mounts_under(cache) == []
                assert sorted(p.name for p in cache.iterdir() if p.is_dir()) in ([], ["archives"])
            with qc.Job(own) as job:  # then the victim uploads the genuine archive
                image_id = job.load(tar)
                result = job.run(image_id, qc.Limits(timeout_s=60, memory_mb=256))
            assert image_id == victim_id and secret in result.stdout
            assert qc._mounts_under(cache) == []
        finally:
            qc._remove_tree(cache)

    @pytest.mark.django_db
    def test_a_spoofed_upload_fails_as_the_users_fault_before_it_runs(self, api, loaded, tmp_path) -> None:  # type: ignore[no-untyped-def]
        from workers.tasks import inspect_container_upload

        spoof = image_archive(tmp_path / "spoof.tar", [_small_layer(b"x")], config_id="c" * 64)
        data = {"kind": "container", "dataset": "frozenlake-8x8", "split": "dev", "target": "q",
                "method_name": "spoof", "backbone": "none",
                "file": SimpleUploadedFile("spoof.tar", spoof.read_bytes())}
        resp = api.post("/api/v1/submissions/", data, format="multipart")
        assert resp.status_code == 201, resp.content
        sub_id = resp.json()["submissions"][0]["id"]
        assert inspect_container_upload([sub_id]) == [Submission.FAILED]  # never queued for a run
        sub = Submission.objects.get(pk=sub_id)
        assert sub.fault == Submission.FAULT_USER and sub.image_id == ""
        assert sub.error.startswith("invalid container archive: the image configuration is named cccccccccccc but")


def _scraped_texts(resp) -> list[str]:  # type: ignore[no-untyped-def]
    """What a scraper reads in a response: the unescaped HTML, or every string of a JSON body."""
    import html

    if resp["Content-Type"].startswith("application/json"):
        found: list[str] = []
        stack = [resp.json()]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack.extend([*item.keys(), *item.values()])
            elif isinstance(item, list):
                stack.extend(item)
            elif item is not None:
                found.append(str(item))
        return found
    return [html.unescape(resp.content.decode())]


@pytest.mark.django_db
class TestBestOfNScrape:
    """Best-of-N episode records: an oracle run's episode pages showed, to anyone, every step's observation and
    each candidate's reference Q-value, on the hidden test tasks. Now the track plays secret tasks of its own
    (never an instance of the dataset) and shows others aggregates only; a scrape of every public Best-of-N page
    and API answer, anonymous and signed in, finds no test state."""

    def test_public_pages_show_no_test_state(self, user, frozenlake: schema.Dataset) -> None:  # type: ignore[no-untyped-def]
        from django.test import Client

        from tests.test_best_of_n_site import play

        episodes = 8
        runs = [play("frozenlake", picker, n=4, episodes=episodes) for picker in ("base", "oracle")]
        test = [s for s in frozenlake.states if s.split == "test"]
        assert len(test) > 50
        needles = ({s.observation for s in test} | {s.id for s in test}
                   | {c.id for s in test for c in s.candidates} | {c.next_state for s in test for c in s.candidates})
        schema_paths = json.loads(Client().get("/api/v1/schema/", HTTP_ACCEPT="application/json").content)["paths"]
        api_urls = [p for p in schema_paths if "best" in p.lower()]  # none today: the scrape covers any added later
        urls = ["/best-of-n/", "/best-of-n/?format=json", "/best-of-n/?metric=ranking_spearman",
                "/best-of-n/?metric=ranking_spearman&format=json", *api_urls]
        for run in runs:
            urls += [f"/best-of-n/runs/{run.pk}/", f"/best-of-n/runs/{run.pk}/?format=json"]
            urls += [f"/best-of-n/runs/{run.pk}/episodes/{i}/" for i in range(episodes)]
        signed_in = Client()
        signed_in.force_login(user)
        for who, scraper in (("anonymous", Client()), ("user", signed_in)):
            for url in urls:
                resp = scraper.get(url)
                if resp.status_code == 200:
                    for text in _scraped_texts(resp):
                        leaked = [n for n in needles if n in text]
                        assert not leaked, f"{who} read {len(leaked)} test states/candidates at {url}"
                # the episode records are staff-only; every other page answers (so it was read)
                assert resp.status_code == (403 if "/episodes/" in url else 200), (who, url, resp.status_code)

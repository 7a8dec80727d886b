"""The attack suite: every channel of the threat model (README, *Threat model: hidden splits*)
tried as an adversarial user would, against the real site on PostgreSQL. Each class is one
channel; where it makes the attack's power visible, the same attack is first shown to work
on a public split, so the test can fail.

Other classes of this suite (hostile prediction files, secret test splits) live beside these.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.utils import timezone

from leaderboard import charts
from qval.compare import friedman_nemenyi
from qval.scoring import DISCLOSED_DETAILS, DISCLOSED_DIGITS, score
from submissions import services
from submissions.models import Submission
from tests.test_site import KEY, actor_points, csv_bytes, finish, upload
from workers.tasks import store_results


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
    container's predictions.jsonl kept and its scored rows stored by :func:`store_results`."""
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
    assert store_results(sub.pk, rows, predictions=name) == Submission.FINISHED
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
        resp = client.get("/api/v1/compare/", {"a": a.pk, "b": b.pk})
        assert resp.status_code == 400 and "kept a container's predictions" in json.dumps(resp.json())

    def test_on_test_partial_files_cannot_be_compared_and_numbers_are_rounded(self, client, api, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_BOOTSTRAP_RESAMPLES = 50
        ids, labels = actor_points(frozenlake, "test")
        rng = np.random.default_rng(3)
        full = [upload(api, csv_bytes(ids, labels + rng.normal(0, 0.5, len(ids))), method_name=f"m{i}")["id"]
                for i in range(2)]
        partial = upload(api, csv_bytes(ids[:60], labels[:60]), method_name="subset")["id"]
        for pk in (*full, partial):
            finish(pk)
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
            data = {"dataset": KEY, "split": "test", "target": "q", "method_name": "racer",
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
        data = {"dataset": KEY, "split": "test", "target": "q", "method_name": "m"}
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
        assert "&lt;a href=&quot;https://evil.example/&quot;&gt;click&lt;/a&gt;" in drawn
        assert "&lt;b&gt;bold&lt;/b&gt;" in drawn
        assert "<a href" not in drawn and "<b>bold" not in drawn


@pytest.mark.django_db
class TestStuckStates:
    """Every non-final state has a deadline (finding 3: submissions left ``validating`` forever)."""

    @pytest.mark.parametrize("state,reason", [
        (Submission.RECEIVED, services.VALIDATION_DEADLINE_REASON),
        (Submission.VALIDATING, services.VALIDATION_DEADLINE_REASON),
        (Submission.QUEUED, services.SCORING_QUEUE_DEADLINE_REASON),
        (Submission.SCORING, services.WORKER_DEADLINE_REASON),
    ])
    def test_the_reaper_ends_every_stuck_state(self, api, loaded, frozenlake, state: str, reason: str) -> None:  # type: ignore[no-untyped-def]
        ids, labels = actor_points(frozenlake, "test")
        sub = upload(api, csv_bytes(ids, labels))
        Submission.objects.filter(pk=sub["id"]).update(state=state)
        assert services.reap_overdue() == []  # not overdue yet
        assert services.reap_overdue(timezone.now() + timedelta(days=2)) == [sub["id"]]
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
        assert (failed.error, failed.fault) == (services.WORKER_DEADLINE_REASON, Submission.FAULT_SYSTEM)
        assert not failed.results.exists()

    def test_every_new_submission_has_a_deadline(self, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        ids, labels = actor_points(frozenlake, "dev")
        sub = Submission.objects.get(pk=upload(api, csv_bytes(ids, labels), split="dev")["id"])
        assert sub.state == Submission.QUEUED and sub.deadline is not None and sub.deadline > timezone.now()

"""One information budget per hidden split, shared by every account (issue 32): the arithmetic of
:mod:`qval.budget`, and the site's budget on real PostgreSQL (:mod:`budgets`): every account's releases
spend one ledger under its row lock, a spent split holds what finishes and refuses uploads and compares, and
a user's hidden row shows only what it paid for."""

from __future__ import annotations

import math

import numpy as np
import pytest

from budgets.models import Refresh, Release, SplitBudget
from qval import budget, build, scoring
from qval.envs import registry
from submissions.models import Submission
from tests.test_attacks import _baseline_row
from tests.test_ladder import _noisy, closed_book  # noqa: F401 - the fixture
from tests.test_site import KEY, actor_points, csv_bytes, finish, upload


class TestArithmetic:
    def test_the_budget_follows_the_points(self) -> None:
        assert budget.budget_size(60) == 2 and budget.budget_size(200) == 8 and budget.budget_size(24) == 0
        assert budget.budget_size(200, scale=0.2) == 1 and budget.budget_size(200, scale=2.0) == 16
        for n in (60, 200, 1000):  # both targets of a split pooled stay below the 0.3
            assert budget.reconstruction_rho(2 * budget.budget_size(n), n) < 0.3
        with pytest.raises(ValueError):
            budget.budget_size(-1)

    def test_a_ledger_spends_until_nothing_is_left(self) -> None:
        ledger = budget.Ledger(size=3)
        assert budget.affordable({"spearman": 0.1, "ranking_spearman": 0.2}, ledger.remaining) == (
            "spearman", "ranking_spearman")
        ledger.spend(2)
        assert budget.affordable({"spearman": 0.1, "ranking_spearman": 0.2}, ledger.remaining) == ("spearman",)
        ledger.spend(1)
        assert ledger.state == budget.SPENT
        with pytest.raises(budget.BudgetSpent):
            ledger.spend(1)
        assert budget.Ledger(size=5, retired=True).state == budget.RETIRED

    def test_the_transcript_bound(self) -> None:
        bits = budget.transcript_bits(8, 300)
        assert bits == pytest.approx(8 * (math.log2(300) + math.log2(2001)))
        assert bits < sum(math.log2(k) for k in range(1, 201))  # far from the ranking of 200 points

    def test_a_released_interval_follows_from_the_value_and_points_alone(self) -> None:
        low, high = budget.correlation_interval(0.5, 103)
        se = math.sqrt((1 + 0.125) / 100)
        assert (low, high) == pytest.approx((math.tanh(math.atanh(0.5) - 1.959964 * se),
                                             math.tanh(math.atanh(0.5) + 1.959964 * se)), abs=1e-6)
        assert budget.correlation_p_value(0.0, 100) == pytest.approx(1.0)
        assert budget.correlation_interval(None, 100) is None and budget.correlation_interval(0.3, 3) is None

    def test_released_rows_carry_no_other_number_on_the_labels(self) -> None:
        rng = np.random.default_rng(0)
        labels = rng.normal(size=120)
        truth = scoring.Truth([f"p{i}" for i in range(120)], labels)
        ids = np.array(truth.point_ids, dtype=object)
        rows = budget.released_rows(scoring.disclose(scoring.score(truth, ids, labels + rng.normal(size=120),
                                                                    bootstrap_resamples=200), hidden=True))
        shown = {r.metric: r for r in rows if r.value is not None}
        assert set(shown) == {"spearman"}
        rho = shown["spearman"]
        # the same value on other labels gives the same interval and p-value: they read nothing else
        other = budget.released_rows([scoring.MetricRow("spearman", rho.value, 0.5, 120, 0, 1.0,
                                                        details={"ci95": [-1.0, 1.0]})])[0]
        assert other.details["ci95"] == rho.details["ci95"] and other.p_value == rho.p_value
        assert all(r.details["withheld"] in (budget.NOT_RELEASED, scoring.WITHHELD_COUNT) for r in rows
                   if r.metric != "spearman")

    def test_a_fresh_split_is_a_new_version_with_the_same_public_splits(self) -> None:
        env, spec = registry.BUILDERS["frozenlake"]()
        env.close()
        fresh = build.refreshed(spec, 2)
        assert fresh.version == f"{spec.version}-r2" and build.split_version(fresh.version) == (spec.version, 2)
        assert registry.builder_name(f"{spec.slug}@{fresh.version}") == "frozenlake"
        assert registry.builder_for(f"{spec.slug}@{fresh.version}") is not None
        assert build.split_version("1.0") == ("1.0", 0) and build.split_version("1.0-r0") == ("1.0-r0", 0)
        _, old = registry.VERSIONS["frozenlake-8x8@1.1"]()
        with pytest.raises(ValueError):
            build.refreshed(old, 1)  # a test split rebuilt from public seeds has nothing to refresh


def _scale_for(dataset, size: int) -> float:  # type: ignore[no-untyped-def]
    """The ``QVAL_BUDGET_SCALE`` that gives ``dataset``'s test split a budget of ``size`` numbers."""
    n = dataset.states.filter(split="test").count()
    scale = (size + 0.5) * budget.POINTS_PER_NUMBER / n
    assert budget.budget_size(n, scale) == size
    return scale


def _second_account(django_user_model, name: str):  # type: ignore[no-untyped-def]
    from allauth.account.models import EmailAddress
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    other = django_user_model.objects.create_user(username=name, email=f"{name}@example.org", password="x" * 12)
    EmailAddress.objects.create(user=other, email=other.email, verified=True, primary=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=other).key}")
    return other, client


@pytest.mark.django_db
@pytest.mark.usefixtures("closed_book")
class TestSharedBudget:
    def test_accounts_share_one_budget_and_a_spent_split_holds_refuses_and_asks_for_a_fresh_one(
            self, client, api, user, loaded, frozenlake, django_user_model, settings,
            django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_BOOTSTRAP_RESAMPLES = 0
        settings.QVAL_BUDGET_SCALE = _scale_for(loaded, 2)
        bob, bobs = _second_account(django_user_model, "bob")
        carol, carols = _second_account(django_user_model, "carol")
        mine = upload(api, _noisy(frozenlake, 1.0, 1), method_name="ada")["id"]
        late = upload(carols, _noisy(frozenlake, 0.5, 3), method_name="carol")["id"]  # in flight while it is spent
        finish(mine)
        row = SplitBudget.objects.get(dataset=loaded, split="test", target="q")
        assert (row.size, row.spent, row.state) == (2, 1, budget.OPEN)
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            finish(upload(bobs, _noisy(frozenlake, 2.0, 2), method_name="bob")["id"])  # another account's first
        row.refresh_from_db()
        assert (row.spent, row.state) == (2, budget.SPENT) and row.spent_at is not None
        assert [r.kind for r in Release.objects.filter(budget=row)] == [Release.LADDER, Release.LADDER]
        assert callbacks, "a spent budget asks for a fresh split once the transaction commits"
        # Carol's file was accepted before: it finishes held, undecided, its score shown to nobody.
        results = finish(late)
        assert results  # scored and stored ...
        held = Submission.objects.get(pk=late)
        assert held.ladder_climbed is False and held.score_withheld
        assert Release.objects.filter(submission_id=late, kind=Release.HELD, cost=0).exists()
        payload = carols.get(f"/api/v1/submissions/{late}/").json()
        assert payload["results"] == [] and payload["ladder"]["held"] is True
        assert "information budget" in payload["ladder"]["message"] and "is spent" in payload["ladder"]["message"]
        # A new upload to the spent split is refused on its split field, naming why; dev stays open.
        ids, labels = actor_points(frozenlake, "test")
        refused = api.post("/api/v1/submissions/", {"dataset": KEY, "split": "test", "target": "q",
                                                    "method_name": "again", "description": "d",
                                                    "file": _file(csv_bytes(ids, labels))}, format="multipart")
        assert refused.status_code == 409 and "information budget" in refused.json()["errors"]["split"][0]
        dev_ids, dev_labels = actor_points(frozenlake, "dev")
        assert upload(api, csv_bytes(dev_ids, dev_labels), split="dev", method_name="dev")["state"] == "queued"
        # Compare with a user's row on the spent split: refused, nothing computed.
        client.force_login(user)
        base = _baseline_row(django_user_model.objects.create_user(username="staffer", is_staff=True), loaded,
                             "test", ids, labels + np.random.default_rng(5).normal(0, 1.0, len(ids)), "base")
        answer = client.get("/api/v1/compare/", {"a": mine, "b": base.pk})
        assert answer.status_code == 409 and "information budget" in str(answer.json())

    def test_a_compare_with_a_users_row_spends_one_number_and_the_cache_spends_none(
            self, client, api, user, staff, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_BOOTSTRAP_RESAMPLES = 200
        settings.QVAL_BUDGET_SCALE = _scale_for(loaded, 5)
        ids, labels = actor_points(frozenlake, "test")
        mine = upload(api, _noisy(frozenlake, 0.5, 4), method_name="mine")["id"]
        shown = finish(mine)
        # a user's hidden row: the global ρ only, its interval from value and points
        assert shown["spearman"].value is not None and shown["spearman"].details["interval"] == "fisher-z"
        assert shown["kendall_tau"].value is None and shown["kendall_tau"].details["withheld"] == budget.NOT_RELEASED
        base = _baseline_row(staff, loaded, "test", ids, labels + np.random.default_rng(6).normal(0, 1.0, len(ids)),
                             "base")
        assert base.results.get(metric="kendall_tau").value is not None  # the platform's rows keep every metric
        client.force_login(user)
        first = client.get("/api/v1/compare/", {"a": mine, "b": base.pk})
        assert first.status_code == 200, first.content
        body = first.json()
        (row,) = body["metrics"]
        assert row["metric"] == "spearman" and row["std_error"] > 0 and "budget" in body["note"]
        assert row["rho_a"] == shown["spearman"].value
        assert row["difference"] == pytest.approx(round(row["rho_a"] - row["rho_b"], 3))
        spent = SplitBudget.objects.get(dataset=loaded, split="test", target="q")
        assert spent.spent == 2  # one for the climb, one for the comparison
        assert client.get("/api/v1/compare/", {"a": mine, "b": base.pk}).json() == body
        spent.refresh_from_db()
        assert spent.spent == 2
        # two platform rows on the test split spend nothing
        other = _baseline_row(staff, loaded, "test", ids, labels + np.random.default_rng(7).normal(0, 2.0, len(ids)),
                              "other")
        assert len(client.get("/api/v1/compare/", {"a": base.pk, "b": other.pk}).json()["metrics"]) > 1
        spent.refresh_from_db()
        assert spent.spent == 2

    def test_a_climb_shows_only_what_the_budget_affords_also_when_scored_again(
            self, api, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_BOOTSTRAP_RESAMPLES = 0
        settings.QVAL_BUDGET_SCALE = _scale_for(loaded, 1)
        test = [s for s in frozenlake.states if s.split == "test"]
        ids = [c.id for s in test for c in s.candidates]  # a complete file: state-local ρ too
        scores = np.array([frozenlake.q_labels[i] for i in ids]) + np.random.default_rng(8).normal(0, 0.3, len(ids))
        pk = upload(api, csv_bytes(ids, scores), method_name="complete")["id"]
        for _ in range(2):  # finished, then scored again
            shown = finish(pk)
            assert shown["spearman"].value is not None
            assert shown["ranking_spearman"].value is None and shown["ranking_spearman"].details["withheld"] == budget.NO_ROOM
        assert list(Release.objects.filter(submission_id=pk).values_list("metrics", "cost")) == [(["spearman"], 1)]

    def test_a_containers_best_is_re_run_on_the_fresh_split_as_its_accounts_submission(
            self, user, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        from leaderboard.models import Dataset
        from submissions import reruns
        from submissions.services import quota_used
        from tests.test_attacks import _container_submission

        settings.QVAL_BOOTSTRAP_RESAMPLES = 0
        ids, labels = actor_points(frozenlake, "test")
        boxed = Submission.objects.get(pk=_container_submission(
            user, loaded, "test", ids, labels + np.random.default_rng(9).normal(0, 1, len(ids))).pk)
        assert boxed.ladder_climbed  # the account's best on the old board
        fresh = Dataset.objects.create(environment=loaded.environment, slug=loaded.slug,
                                       version=f"{loaded.version}-r1", name=loaded.name, fingerprint="f" * 64)
        used = quota_used(user)
        (again,) = reruns.rerun_containers(loaded, fresh)
        assert (again.user_id, again.kind, again.dataset_id, again.file.name, again.state) == (
            user.pk, Submission.KIND_CONTAINER, fresh.pk, boxed.file.name, Submission.RECEIVED)
        assert again.provenance == {reruns.RERUN_OF: boxed.pk} and quota_used(user) == used  # no quota

    def test_a_retired_split_refuses_uploads_and_its_board_says_so(self, client, api, loaded, frozenlake) -> None:  # type: ignore[no-untyped-def]
        from django.utils import timezone

        from leaderboard.models import Dataset
        from qval_site.fresh_splits import retire

        fresh = Dataset.objects.create(environment=loaded.environment, slug=loaded.slug,
                                       version=f"{loaded.version}-r1", name=loaded.name, fingerprint="f" * 64)
        refresh = Refresh.objects.create(dataset=loaded, reason=Refresh.SPENT, number=1, replacement=fresh,
                                         state=Refresh.DONE, done_at=timezone.now())
        retire(loaded, fresh, refresh.get_reason_display())
        ids, labels = actor_points(frozenlake, "test")
        refused = api.post("/api/v1/submissions/", {"dataset": KEY, "split": "test", "target": "q",
                                                    "method_name": "late", "description": "d",
                                                    "file": _file(csv_bytes(ids, labels))}, format="multipart")
        message = refused.json()["errors"]["split"][0]
        assert refused.status_code == 409 and "retired" in message and fresh.key in message
        page = client.get(f"/boards/{KEY}:q:text/").content.decode()
        assert 'id="retired-board"' in page and fresh.key in page and "frozen since" in page
        assert "its information budget was spent" in page
        assert SplitBudget.objects.filter(dataset=loaded, split="test", state=budget.RETIRED).count() == 2


def _file(content: bytes):  # type: ignore[no-untyped-def]
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile("p.csv", content)


@pytest.mark.django_db
class TestRefreshRequests:
    def test_a_refresh_is_asked_once_not_again_too_soon_and_after_a_failed_build(self, loaded, settings) -> None:  # type: ignore[no-untyped-def]
        from datetime import timedelta

        from django.utils import timezone

        from budgets.services import request_refresh
        from leaderboard.models import DatasetBuild

        settings.QVAL_REFRESH_MIN_INTERVAL_S = 3600
        first = request_refresh(loaded, Refresh.SPENT)
        assert first is not None and first.number == 1
        assert (first.build.name, first.build.refresh, first.build.status) == ("frozenlake", 1, DatasetBuild.QUEUED)
        assert request_refresh(loaded, Refresh.MAINTAINER) is None  # one is being built
        DatasetBuild.objects.filter(pk=first.build_id).update(status=DatasetBuild.FAILED, error="boom")
        assert request_refresh(loaded, Refresh.SPENT) is None  # the previous one is younger than the interval
        first.refresh_from_db()
        assert first.state == Refresh.FAILED
        Refresh.objects.filter(pk=first.pk).update(created_at=timezone.now() - timedelta(hours=2))
        second = request_refresh(loaded, Refresh.SPENT)
        assert second is not None and second.number == 2 and second.build.refresh == 2

    def test_the_maintainers_schedule(self, loaded, settings) -> None:  # type: ignore[no-untyped-def]
        from datetime import timedelta

        from django.utils import timezone

        from leaderboard.models import Dataset
        from qval_site.fresh_splits import refresh_due

        settings.QVAL_SPLIT_REFRESH_DAYS = 0
        Dataset.objects.filter(pk=loaded.pk).update(created_at=timezone.now() - timedelta(days=40))
        assert refresh_due() == []  # off by default
        settings.QVAL_SPLIT_REFRESH_DAYS = 30
        (due,) = refresh_due()
        assert due.dataset_id == loaded.pk and due.reason == Refresh.SCHEDULE
        assert refresh_due() == []  # being built

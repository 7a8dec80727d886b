"""The Ladder of the hidden test board (issue 20): the rule in :mod:`qval.ladder` on synthetic
data, and the site's ladder per account (:mod:`submissions.ladder`) on real PostgreSQL: a
resubmission that is not significantly better leaves the board score unchanged and its page
says so; one that is, updates it."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from django.db import connection
from scipy import stats

from board.exports import leaderboard_rows
from qval import ladder, scoring
from qval.compare import paired_bootstrap
from submissions import lifecycle
from submissions.models import Submission
from tests.test_site import KEY, actor_points, csv_bytes, finish, upload

N = 400


def _entry(labels: np.ndarray, scores: np.ndarray, states: np.ndarray | None = None) -> ladder.Entry:
    rho = round(float(stats.spearmanr(labels, scores).statistic), 3)
    board: dict[str, float | None] = {"spearman": rho, "ranking_spearman": None}
    if states is not None:
        board["ranking_spearman"] = round(float(np.nanmean(states)), 3)
    return ladder.Entry(points=scores, states=np.full(0, np.nan) if states is None else states, board=board)


class TestRule:
    """:func:`qval.ladder.decide` on synthetic labels."""

    def test_the_first_submission_is_released(self) -> None:
        labels = np.random.default_rng(0).normal(size=N)
        decision = ladder.decide(labels, _entry(labels, labels + 5.0 * np.random.default_rng(1).normal(size=N)), None)
        assert decision.climbs and decision.first

    def test_a_clearly_better_predictor_climbs(self) -> None:
        for seed in range(10):
            rng = np.random.default_rng(seed)
            labels = rng.normal(size=N)
            best = _entry(labels, labels + rng.normal(0, 1.0, N))
            better = _entry(labels, labels + rng.normal(0, 0.4, N))
            decision = ladder.decide(labels, better, best)
            assert decision.climbs and not decision.first, decision
            (step,) = decision.steps
            assert step.significant and step.difference > step.margin > 0

    def test_noise_level_changes_do_not_climb(self) -> None:
        rng = np.random.default_rng(3)
        labels = rng.normal(size=N)
        scores = labels + rng.normal(0, 1.0, N)
        same = ladder.decide(labels, _entry(labels, scores.copy()), _entry(labels, scores))
        assert not same.climbs and same.steps[0].difference == 0.0
        climbs = 0
        for seed in range(40):
            noise = np.random.default_rng(100 + seed)
            jiggled = _entry(labels, scores + noise.normal(0, 0.05, N))  # the best, a little perturbed
            redrawn = _entry(labels, labels + noise.normal(0, 1.0, N))  # as good, other noise
            climbs += ladder.decide(labels, jiggled, _entry(labels, scores)).climbs
            climbs += ladder.decide(labels, redrawn, _entry(labels, scores)).climbs
        # At the second attempt's level (z = 2.4) and at least the fixed step, hardly any does.
        assert climbs <= 2

    def test_the_margin_does_not_shrink_with_the_perturbation(self) -> None:
        """A tiny perturbation of the best has a tiny paired standard error; the fixed step still asks for
        one label-free spread (1 / sqrt(n - 1)) of improvement, so a perturbation that gains less never climbs."""
        rng = np.random.default_rng(11)
        labels = rng.normal(size=N)
        best = rng.normal(size=N)
        for scale in (1e-3, 1e-2, 1e-1):
            step = ladder.global_step(labels, best + scale * rng.normal(size=N), best)
            assert step.std_error < 0.5 / np.sqrt(N - 1)  # the old margin shrank with the perturbation ...
            assert step.margin >= 1 / np.sqrt(N - 1)  # ... this one does not
        nudged = best.copy()
        order = np.argsort(labels)
        nudged[order[-5:]] += 3.0  # knows five labels: ρ up by about 0.02, more than a standard error
        step = ladder.global_step(labels, nudged, best)
        assert step.difference > step.std_error and not step.significant  # the old margin let it climb

    def test_the_level_is_spent_over_the_attempts(self) -> None:
        levels = [ladder.alpha_for(j) for j in range(1, 100_000)]
        assert sum(levels) <= ladder.ALPHA and sum(levels) > 0.9999 * ladder.ALPHA
        assert ladder.z_for(2) < ladder.z_for(10) < ladder.z_for(100)
        assert ladder.z_for(10, tests=2) > ladder.z_for(10)  # two metrics tested: Bonferroni
        with pytest.raises(ValueError):
            ladder.alpha_for(0)

    def test_showing_a_metric_the_best_lacks_is_no_climb(self) -> None:
        """Issue 32: an actor-only file then a complete file climbed with no test ("adds the metric the
        best lacks"); now a climb needs a significant step on a metric both show."""
        rng = np.random.default_rng(12)
        labels = rng.normal(size=N)
        pointwise = _entry(labels, rng.normal(size=N))
        complete = _entry(labels, pointwise.points + 0.05 * rng.normal(size=N), rng.uniform(-0.2, 0.2, 50))
        if complete.board["spearman"] < pointwise.board["spearman"]:
            complete = ladder.Entry(complete.points, complete.states, {**complete.board, "spearman": pointwise.board["spearman"]})
        decision = ladder.decide(labels, complete, pointwise, attempt=2)
        assert not decision.climbs and [s.metric for s in decision.steps] == ["spearman"]

    def test_the_margin_is_the_bootstrap_standard_error(self) -> None:
        rng = np.random.default_rng(4)
        labels = rng.normal(size=N)
        a, b = labels + rng.normal(0, 1.0, N), labels + rng.normal(0, 0.9, N)
        pc = paired_bootstrap(labels, a, b, resamples=2000, seed=0)
        assert pc.std_error == pytest.approx((pc.high - pc.low) / (2 * 1.96), rel=0.15)
        step = ladder.global_step(labels, a, b)
        assert step.std_error == pytest.approx(pc.std_error, rel=0.1) and step.difference == pytest.approx(pc.difference)

    def test_state_local_rho_climbs_on_paired_state_differences(self) -> None:
        rng = np.random.default_rng(5)
        best = rng.uniform(0.0, 0.6, 60)
        noisy = best + rng.normal(0, 0.3, 60)
        step = ladder.state_step(noisy - noisy.mean() + best.mean(), best)  # same mean, noise per state
        assert not step.significant and step.num_paired == 60
        better = best + 0.1 + rng.normal(0, 0.1, 60)
        step = ladder.state_step(better, best)
        assert step.significant
        assert step.std_error == pytest.approx(np.std(better - best, ddof=1) / np.sqrt(60))
        with_nan = better.copy()
        with_nan[:10] = np.nan
        assert ladder.state_step(with_nan, best).num_paired == 50

    def test_the_state_local_standard_error_counts_trajectories_not_states(self) -> None:
        """Differences shared by the states of a trajectory carry one trajectory's worth of evidence: with
        the states' design the standard error is the cluster-robust one over 12 trajectories, not over 60
        states (the states of one trajectory are the same draw)."""
        from qval.sampling import Design

        rng = np.random.default_rng(8)
        per_trajectory = rng.normal(0.05, 0.2, 12)
        best = rng.uniform(0.2, 0.4, 60)
        better = best + np.repeat(per_trajectory, 5)
        design = Design.of(np.repeat(np.arange(12), 5))
        naive, clustered = ladder.state_step(better, best), ladder.state_step(better, best, design)
        d = better - best
        assert naive.std_error == pytest.approx(np.std(d, ddof=1) / np.sqrt(60))
        assert clustered.std_error == pytest.approx(np.std(per_trajectory, ddof=1) / np.sqrt(12))
        assert clustered.std_error > 2 * naive.std_error

    def test_a_board_metric_is_never_lost_or_lowered(self) -> None:
        rng = np.random.default_rng(6)
        labels = rng.normal(size=N)
        states = rng.uniform(0.2, 0.4, 50)
        best = _entry(labels, labels + rng.normal(0, 1.0, N), states)
        better_pointwise = _entry(labels, labels + rng.normal(0, 0.3, N))  # no ranking ρ
        decision = ladder.decide(labels, better_pointwise, best)
        assert not decision.climbs and "lose" in decision.reason
        worse_states = ladder.Entry(better_pointwise.points, states - 0.2,
                                    {**better_pointwise.board, "ranking_spearman": round(float((states - 0.2).mean()), 3)})
        assert not ladder.decide(labels, worse_states, best).climbs
        adds = ladder.decide(labels, best, better_pointwise)  # lower global ρ: blocked although it adds one
        assert not adds.climbs


class TestRelease:
    """:func:`qval.ladder.release`: a climb spends from the split's ledger; a spent ledger holds every
    submission undecided."""

    def test_a_climb_spends_what_it_shows_and_a_spent_ledger_holds(self) -> None:
        from qval.budget import Ledger

        rng = np.random.default_rng(13)
        labels = rng.normal(size=N)
        ledger = Ledger(size=3)
        first = _entry(labels, labels + rng.normal(0, 2.0, N), rng.uniform(0.0, 0.2, 40))
        released = ladder.release(labels, first, None, ledger)
        assert released.climbs and released.released == ("spearman", "ranking_spearman") and ledger.spent == 2
        worse = _entry(labels, labels + rng.normal(0, 3.0, N), rng.uniform(0.0, 0.2, 40))
        assert not ladder.release(labels, worse, first, ledger, attempt=2).climbs and ledger.spent == 2
        better = _entry(labels, labels + rng.normal(0, 0.2, N), first.states + 0.3)
        climbed = ladder.release(labels, better, first, ledger, attempt=3)
        assert climbed.climbs and climbed.released == ("spearman",) and ledger.spent == 3  # one number was left
        assert ledger.state == "spent"
        best_of_all = _entry(labels, labels.copy(), first.states + 0.6)
        held = ladder.release(labels, best_of_all, better, ledger, attempt=4)
        assert held.held and not held.climbs and held.steps == () and "spent" in held.reason


@pytest.mark.slow
class TestAttacks:
    """Issue 32's Done-when simulations, with the site's release code (``benchmarks/hidden_budget.py``:
    :func:`qval.scoring.score`, :func:`qval.scoring.disclose`, :func:`qval.budget.released_rows`,
    :func:`qval.ladder.release` on the split's ledger)."""

    @pytest.mark.parametrize("n", [60, 200])
    def test_sixty_sybil_accounts_reconstruct_no_useful_file(self, n: int) -> None:
        from benchmarks.hidden_budget import UNLIMITED, reconstruction

        rhos = [reconstruction(n, seed)[0] for seed in range(10)]
        assert np.mean(rhos) < 0.3 and np.quantile(rhos, 0.9) < 0.3, rhos
        # The same attack with no shared budget (a ladder per account only) is what issue 32 showed.
        assert reconstruction(n, 0, size=UNLIMITED)[0] > 0.5

    def test_label_free_adaptive_submissions_climb_nowhere(self) -> None:
        from benchmarks.hidden_budget import label_free_climb

        public = [label_free_climb(200, seed, submissions=100, noise=0.2) for seed in range(20)]
        assert np.mean(public) < 0.1, public


def test_state_values_are_what_the_ranking_row_averages() -> None:
    rng = np.random.default_rng(7)
    group_ids = [[f"s{k}c{j}" for j in range(4)] for k in range(30)]
    group_labels = [rng.normal(size=4) for _ in group_ids]
    group_labels[3][:] = 1.0  # constant labels: a skipped state
    truth = scoring.Truth([g[0] for g in group_ids], np.array([g[0] for g in group_labels]), group_ids, group_labels)
    ids = np.array([c for g in group_ids[:25] for c in g], dtype=object)  # five states unscored
    scores = rng.normal(size=ids.size)
    values = scoring.state_ranking_values(truth, ids, scores)
    row = {r.metric: r for r in scoring.score(truth, ids, scores, bootstrap_resamples=0)}["ranking_spearman"]
    assert np.isnan(values[3]) and np.isnan(values[25:]).all() and np.isfinite(values[:3]).all()
    assert float(np.nanmean(values)) == pytest.approx(row.value)
    assert np.isnan(scoring.state_ranking_values(truth, ids[::4], scores[::4])).all()  # actors only: no ranking


# -- the site ------------------------------------------------------------------------------


def _board(split: str = "test") -> dict[int, float | None]:
    """Submission id -> global ρ of the board's lines of the loaded dataset on ``split``."""
    return {r.submission_id: r.spearman for r in leaderboard_rows({"dataset": KEY, "split": split})}


def _noisy_scores(frozenlake, sd: float, seed: int) -> tuple[list[str], np.ndarray]:  # type: ignore[no-untyped-def]
    """The test split's actor points and their labels plus noise of ``sd`` label standard deviations."""
    ids, labels = actor_points(frozenlake, "test")
    return ids, labels + np.random.default_rng(seed).normal(0, sd * labels.std(), len(ids))


def _noisy(frozenlake, sd: float, seed: int) -> bytes:  # type: ignore[no-untyped-def]
    return csv_bytes(*_noisy_scores(frozenlake, sd, seed))


@pytest.fixture
def closed_book(loaded):  # type: ignore[no-untyped-def]
    """The loaded FrozenLake as a dataset whose labels do not follow from its inputs: its test board
    ranks uploaded files, so they climb ladders (FrozenLake itself is open book)."""
    env = loaded.environment
    env.open_book = False
    env.save(update_fields=["open_book"])
    return loaded


@pytest.mark.django_db
@pytest.mark.usefixtures("closed_book")
class TestSiteLadder:
    def test_resubmissions_move_the_board_only_when_significantly_better(self, client, user, api, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        settings.QVAL_BOOTSTRAP_RESAMPLES = 50
        first = upload(api, _noisy(frozenlake, 2.0, 1), method_name="m1")["id"]
        finish(first)
        board = _board()
        assert list(board) == [first] and board[first] is not None  # the first is released as scored

        worse = upload(api, _noisy(frozenlake, 3.0, 2), method_name="m2")["id"]
        board_before = board
        raw = finish(worse)["spearman"].value  # stored for the record ...
        assert _board() == board  # ... but the board keeps the first's score
        shown = api.get(f"/api/v1/submissions/{first}/").json()
        assert shown["ladder"]["climbed"] and shown["ladder"]["best"] is None and shown["results"]
        payload = api.get(f"/api/v1/submissions/{worse}/").json()
        assert payload["results"] == [] and payload["ladder"]["climbed"] is False
        assert payload["ladder"]["best"] == first and payload["ladder"]["best_spearman"] == board[first]
        client.force_login(user)
        page = client.get(f"/submissions/{worse}/").content.decode()
        assert f"Not better than your best (#{first}, ρ={board[first]:.3f}) by the Ladder margin; the board keeps that score" in page
        assert f"{raw:.4f}" not in page and 'id="results"' not in page
        assert client.get("/api/v1/compare/", {"a": worse, "b": first}).status_code == 400

        better = upload(api, _noisy(frozenlake, 0.2, 3), method_name="m3")["id"]
        finish(better)
        board = _board()
        assert list(board) == [better] and board[better] > board_before[first]
        assert board[better] == Submission.objects.get(pk=better).results.get(metric="spearman").value
        page = client.get(f"/submissions/{better}/").content.decode()
        assert f"Better than your best (#{first}, " in page and 'id="results"' in page
        assert finish(better) and Submission.objects.get(pk=better).ladder_climbed  # re-scoring keeps the step

    def test_the_ladder_is_per_account_and_hidden_splits_only(self, api, loaded, frozenlake, django_user_model, settings) -> None:  # type: ignore[no-untyped-def]
        from allauth.account.models import EmailAddress
        from rest_framework.authtoken.models import Token
        from rest_framework.test import APIClient

        settings.QVAL_BOOTSTRAP_RESAMPLES = 0
        mine = upload(api, _noisy(frozenlake, 1.0, 4), method_name="ada")["id"]
        finish(mine)
        bob = django_user_model.objects.create_user(username="bob", email="bob@example.org", password="x" * 12)
        EmailAddress.objects.create(user=bob, email=bob.email, verified=True, primary=True)
        other = APIClient()
        other.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=bob).key}")
        theirs = upload(other, _noisy(frozenlake, 3.0, 5), method_name="bob")["id"]
        finish(theirs)
        assert set(_board()) == {mine, theirs}  # bob's worse file is his first: released
        ids, labels = actor_points(frozenlake, "dev")
        devs = [upload(api, csv_bytes(ids, labels + k), split="dev", method_name=f"d{k}")["id"] for k in range(3)]
        for pk in devs:
            finish(pk)
        assert set(_board("dev")) == set(devs)  # no ladder on a public split
        assert all(s.ladder_climbed is None for s in Submission.objects.filter(split="dev"))

    def test_a_container_run_shares_the_account_ladder(self, api, user, loaded, frozenlake, settings) -> None:  # type: ignore[no-untyped-def]
        from tests.test_attacks import _container_submission

        settings.QVAL_BOOTSTRAP_RESAMPLES = 0
        file = upload(api, _noisy(frozenlake, 1.0, 8), method_name="file")["id"]  # far enough below `better`'s 0.05
        finish(file)
        boxed = Submission.objects.get(pk=_container_submission(user, loaded, "test", *_noisy_scores(frozenlake, 2.0, 9)).pk)
        assert boxed.ladder_climbed is False and boxed.ladder_against_id == file  # paired on its predictions.jsonl
        assert list(_board()) == [file]
        better = Submission.objects.get(pk=_container_submission(user, loaded, "test", *_noisy_scores(frozenlake, 0.05, 10)).pk)
        assert better.ladder_climbed and list(_board()) == [better.pk]


@pytest.mark.django_db(transaction=True)
def test_concurrent_finishes_cannot_both_climb_on_the_same_best(closed_book, loaded, frozenlake, user, settings) -> None:  # type: ignore[no-untyped-def]
    """Two better submissions of one account finishing at once are compared one after the other."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from leaderboard.loading import truth_for

    settings.QVAL_BOOTSTRAP_RESAMPLES = 0
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    first = upload(api, _noisy(frozenlake, 3.0, 6), method_name="base")["id"]
    finish(first)
    subs = [upload(api, _noisy(frozenlake, 0.3, 7 + k), method_name=f"racer{k}")["id"] for k in range(2)]
    truth = truth_for(loaded, "test", "q")
    rows = {}
    for k, pk in enumerate(subs):
        Submission.objects.get(pk=pk).transition(Submission.SCORING)
        ids, scores = _noisy_scores(frozenlake, 0.3, 7 + k)
        rows[pk] = scoring.score(truth, np.array(ids, dtype=object), scores, bootstrap_resamples=0)
    barrier = threading.Barrier(2)

    def run(pk: int) -> None:
        barrier.wait()
        try:
            lifecycle.finish(pk, rows[pk])
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(pk,)) for pk in subs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    a, b = (Submission.objects.get(pk=pk) for pk in subs)
    assert a.state == b.state == Submission.FINISHED
    # The one decided second was compared with the first's outcome, never both with the old best.
    assert {a.ladder_against_id, b.ladder_against_id} != {first}
    assert len(_board()) == 1

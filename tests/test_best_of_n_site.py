"""The Best-of-N track on the site: runs played by the service, their pages, the alignment page's
numbers (and, in a real Chromium, its points), and a real gpu worker killed mid-run that resumes."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import broker_messages, clear_queue, wait_for, worker_process


def play(environment: str, picker: str, *, n: int = 3, episodes: int = 20, backbone: str = ""):  # type: ignore[no-untyped-def]
    from best_of_n import services as best_of_n

    run = best_of_n.create_run(environment, picker, n=n, num_episodes=episodes, backbone=backbone)
    started = best_of_n.start(run.pk, "inline@test")
    assert started is not None
    return best_of_n.play(started)


def mean_success(run) -> float:  # type: ignore[no-untyped-def]
    values = list(run.episodes.values_list("success", flat=True))
    return sum(values) / len(values)


@pytest.mark.django_db
def test_runs_pages_and_alignment(client, staff) -> None:  # type: ignore[no-untyped-def]
    from best_of_n import services as best_of_n

    runs = {p: play("frozenlake", p) for p in ("base", "oracle", "random", "reference")}
    for picker, run in runs.items():
        assert run.status == "finished" and run.done == 20 and run.episodes.count() == 20, picker
        assert run.summary["success"]["value"] == pytest.approx(mean_success(run))
    assert within(runs["oracle"].summary["success"], runs["reference"].summary["success"])

    data = client.get("/best-of-n/?format=json").json()["alignments"]
    assert [(a["environment"], a["n"]) for a in data] == [("frozenlake", 3)]
    points = {p["method"]: p for p in data[0]["points"]}
    assert set(points) == {"oracle", "random"}  # base and reference are the baselines, not points
    for picker in ("oracle", "random"):
        assert points[picker]["rho"] == best_of_n.DEFINED_RHO[picker]
        assert points[picker]["gain"]["value"] == pytest.approx(mean_success(runs[picker]) - mean_success(runs["base"]))

    page = client.get("/best-of-n/")
    assert page.status_code == 200 and b'id="alignment-frozenlake-3"' in page.content
    # The results first: every finished picker's success with its CI, and its gain over the base policy's episodes.
    text = page.content.decode()
    assert text.index('id="results"') < text.index('id="alignment"') and 'id="results-frozenlake-3"' in text
    for picker, run in runs.items():
        row = re.search(rf'<tr data-picker="{picker}">(.*?)</tr>', text, re.S)
        assert row is not None and f"{mean_success(run):.3f}" in row.group(1), picker
        assert ("—" in row.group(1)) == (picker == "base")  # the base policy has no gain over itself
    # The study notes are a page of the manual, linked from here.
    assert 'id="representation-check"' not in text and 'id="study-notes"' in text
    assert "Global ρ is not what a pick uses" in (Path(__file__).parents[1] / "docs" / "best-of-n.md").read_text()
    local = client.get("/best-of-n/?metric=ranking_spearman")
    assert local.status_code == 200 and "<strong>Spearman ρ (state-local)</strong>" in local.content.decode()
    assert "(state-local) (Q-alignment)" in local.content.decode()  # the plot's x axis title
    assert client.get("/best-of-n/?metric=ranking_spearman&format=json").json()["alignments"][0]["points"] == \
        data[0]["points"]  # the oracle and random are 1 and 0 under both
    bad = client.get("/best-of-n/?metric=kendall_tau")
    assert bad.status_code == 400 and "unknown metric 'kendall_tau'" in bad.json()["error"]
    # anonymous: the run's aggregates, no episode (its tasks are secret)
    run_page = client.get(f"/best-of-n/runs/{runs['oracle'].pk}/").content.decode()
    assert "Success gain over the base policy" in run_page and "/episodes/" not in run_page
    assert 'id="episodes-staff-only"' in run_page
    assert client.get(f"/best-of-n/runs/{runs['oracle'].pk}/episodes/0/").status_code == 403
    client.force_login(staff)
    run_page = client.get(f"/best-of-n/runs/{runs['oracle'].pk}/").content.decode()
    assert run_page.count("/episodes/") == 20
    episode = runs["oracle"].episodes.get(index=0)
    shown = client.get(f"/best-of-n/runs/{runs['oracle'].pk}/episodes/0/").content.decode()
    for step in episode.steps:
        assert step["candidates"][step["chosen"]] in shown
    assert shown.count('class="chosen"') == len(episode.steps)
    assert client.get(f"/best-of-n/runs/{runs['oracle'].pk}/episodes/99/").status_code == 404


def within(a: dict[str, float], b: dict[str, float]) -> bool:
    return b["low"] <= a["value"] <= b["high"] and a["low"] <= b["value"] <= a["high"]


@pytest.mark.django_db
def test_bad_runs_are_refused() -> None:
    from best_of_n import services as best_of_n

    for args, field, message in [
        (("pong", "oracle"), "environment", "unknown environment 'pong'"),
        (("frozenlake", "nope"), "picker", "unknown method 'nope'"),
        (("frozenlake", "direct-single"), "backbone", "needs a backbone"),
        (("frozenlake", "qlass"), "picker", "no finished training run of qlass on frozenlake-8x8: train one first"),
        (("frozenlake", "oracle", 1), "training_run", "only a learned picker"),
    ]:
        with pytest.raises(best_of_n.InvalidRun, match=message) as refused:
            best_of_n.create_run(*args[:2], n=3, num_episodes=1, training_run=args[2] if len(args) > 2 else None)
        assert refused.value.field == field
    with pytest.raises(best_of_n.InvalidRun, match="n must be at least 2") as refused:
        best_of_n.create_run("frozenlake", "oracle", n=1, num_episodes=1)
    assert refused.value.field == "n"


GOOD = {"environment": "frozenlake", "picker": "oracle", "backbone": "", "n": "4", "episodes": "5", "seed": "3"}


@pytest.mark.django_db
def test_staff_queue_a_run_from_the_page(client, staff, django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    from best_of_n.models import BestOfNRun

    clear_queue("gpu")
    client.force_login(staff)
    page = client.get("/best-of-n/").content.decode()
    assert 'id="play-form"' in page and '<option value="reference">' in page and "direct-single (needs a backbone)" in page
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post("/best-of-n/", {**GOOD, "picker": "direct-single", "backbone": " http://127.0.0.1:9 "})
    run = BestOfNRun.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/best-of-n/runs/{run.pk}/"
    assert (run.environment, run.dataset_slug, run.picker, run.backbone, run.n, run.num_episodes, run.seed,
            run.status) == ("frozenlake", "frozenlake-8x8", "direct-single", "http://127.0.0.1:9", 4, 5, 3, "queued")
    sent = broker_messages("gpu")
    assert [(m["headers"]["task"], m["headers"]["argsrepr"]) for m in sent] == [
        ("workers.best_of_n.play_best_of_n", f"({run.pk},)")]


@pytest.mark.django_db
def test_only_staff_play(client, user) -> None:  # type: ignore[no-untyped-def]
    from best_of_n.models import BestOfNRun

    assert client.post("/best-of-n/", GOOD).status_code == 403  # anonymous
    client.force_login(user)
    page = client.get("/best-of-n/")
    assert page.status_code == 200 and b"play-form" not in page.content
    assert client.post("/best-of-n/", GOOD).status_code == 403
    assert not BestOfNRun.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("change, field, expected", [
    ({"environment": "pong"}, "environment", "Select a valid choice"),
    ({"picker": "nope"}, "picker", "Select a valid choice"),
    ({"picker": "direct-single"}, "backbone", "method direct-single needs a backbone"),
    ({"n": "1"}, "n", "n must be at least 2 and at most 1000 (candidates per step), got 1"),
    ({"n": "four"}, "n", "Enter a whole number"),
    ({"episodes": "0"}, "episodes", "the number of episodes must be from 1 to 100000, got 0"),
    ({"seed": "-1"}, "seed", "the seed must be from 0 to 2147483647, got -1"),
])
def test_invalid_run_input_names_the_field(client, staff, django_capture_on_commit_callbacks,  # type: ignore[no-untyped-def]
                                           change, field, expected) -> None:
    from best_of_n.models import BestOfNRun

    clear_queue("gpu")
    client.force_login(staff)
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post("/best-of-n/", {**GOOD, **change})
    assert resp.status_code == 400
    errors = resp.context["form"].errors
    assert list(errors) == [field] and expected in errors[field][0], errors
    assert not BestOfNRun.objects.exists() and broker_messages("gpu") == []


@pytest.mark.slow
@pytest.mark.worker
def test_a_killed_worker_resumes_its_run(transactional_db, data_dir: Path, test_split_secret: str) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL the gpu worker mid-run; the restarted worker (same name) resumes at the next episode."""
    from best_of_n import services as best_of_n
    from best_of_n.models import BestOfNRun
    from best_of_n.tasks import play_best_of_n

    name = f"test-gpu-{os.getpid()}@%h"
    log = data_dir / "best-of-n-worker.log"
    total = 400
    run = best_of_n.create_run("frozenlake", "oracle", n=4, num_episodes=total)
    with worker_process("gpu", name, data_dir, log, 20) as proc:
        play_best_of_n.delay(run.pk)
        wait_for(lambda: BestOfNRun.objects.get(pk=run.pk).done >= 10, timeout=120, interval=0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = dict(BestOfNRun.objects.get(pk=run.pk).episodes.values_list("index", "pk"))
    interrupted = BestOfNRun.objects.get(pk=run.pk)
    assert interrupted.status == "running" and 10 <= len(before) < total, "killed too late to test a resume"
    with worker_process("gpu", name, data_dir, data_dir / "best-of-n-worker-2.log", 20):
        wait_for(lambda: BestOfNRun.objects.get(pk=run.pk).status == "finished", timeout=300)
    finished = BestOfNRun.objects.get(pk=run.pk)
    after = dict(finished.episodes.values_list("index", "pk"))
    assert sorted(after) == list(range(total)) and finished.done == total
    assert all(after[i] == pk for i, pk in before.items())  # the episodes played before the kill were kept
    assert "interrupted best-of-n runs queued again" in (data_dir / "best-of-n-worker-2.log").read_text()
    # the resumed run equals an uninterrupted one
    from qval import best_of_n as bon

    env, spec = bon.environment("frozenlake", test_split_secret)
    setting = bon.setting_for("frozenlake", env, spec, n=4, seed=0, num_episodes=total)
    fresh = bon.run_episodes(env, setting, bon.BUILTIN_PICKERS["oracle"])
    assert [e.to_json() for e in best_of_n.episodes_of(finished)] == [e.to_json() for e in fresh]


def _points(page: Any, div: str) -> dict[str, tuple[float, float]]:
    data = page.evaluate(f"() => document.getElementById('{div}').data.map(t => ({{text: t.text, x: t.x, y: t.y}}))")
    return {name: (x, y) for t in data for name, x, y in zip(t["text"], t["x"], t["y"])}


def small_alfworld(data_dir: Path, secret: str) -> Any:
    """``alfworld-pick-place@1.1`` as its builder makes it, cut to 6 trajectories of at most 2 states (two scenes a
    split; the test scenes drawn from ``secret``), written where the site keeps a loaded dataset's files and loaded:
    the training service finds its environment by slug and version."""
    from dataclasses import replace

    from leaderboard.loading import load_dataset
    from qval import build
    from qval.envs import registry

    env, spec = registry.BUILDERS["alfworld"]()
    spec = replace(spec, num_trajectories=6, max_states_per_trajectory=2)
    dataset = build.build_dataset(env, spec, secret=secret)
    dataset.write(data_dir / "datasets" / f"{spec.slug}-{spec.version}")
    return load_dataset(dataset)[0]


def published(dataset: Any, method: str, metric: str) -> float | None:
    """The test-split, target-q ``metric`` of ``method``'s latest finished submission on ``dataset``
    (``None`` when it has none: an insufficient correlation)."""
    from submissions.models import Result

    row = Result.objects.filter(submission__dataset=dataset, submission__method_name=method,
                                submission__split="test", submission__target="q", submission__state="finished",
                                metric=metric).order_by("-submission__finished_at", "-pk").first()
    return row.value if row is not None and not row.insufficient else None


def baseline_evaluation(dataset: Any, method: Any, *, rho: float, local_rho: float) -> None:
    """A finished test-split, target-q baseline submission of ``method`` on ``dataset`` with its global and
    state-local ρ: what a platform run of a built-in method stores on the leaderboard."""
    from django.utils import timezone

    from submissions.models import Result, Submission

    sub = Submission.objects.create(dataset=dataset, split="test", target="q", method_name=method.name,
                                    method=method, filename="p.csv", state=Submission.FINISHED,
                                    finished_at=timezone.now(), source=Submission.SOURCE_BASELINE)
    Result.objects.create(submission=sub, metric="spearman", value=rho, num_points=60, coverage=1.0)
    Result.objects.create(submission=sub, metric="ranking_spearman", value=local_rho, num_points=20, coverage=1.0)


TEXT_METHOD = "direct-batched"
"""The built-in text method of the alignment page's browser test: one prompt per step holds every candidate (up to
four), so a step costs one generation where ``direct-single`` costs one per candidate (256 tokens each, about a second
on the tiny model here).  On the tiny model its replies do not parse (every score NaN: the actor's action is taken),
so its episodes are as short as the base policy's; a method whose random picks wander to ALFWorld's 40-step horizon
would take minutes.  :func:`test_a_text_method_is_a_point` plays ``direct-single``."""
BROWSER_EPISODES = {"frozenlake": 4, "alfworld": 1}
"""Episodes per picker in the browser test: a text method on the tiny model takes a second a step."""


@pytest.mark.slow
@pytest.mark.browser
def test_alignment_page_in_chromium(live_server, transactional_db, loaded, data_dir: Path, settings,  # type: ignore[no-untyped-def]
                                    tiny_model: Path, test_split_secret: str) -> None:
    """What Plotly draws on the alignment page (global and state-local ρ) equals what the database gives, on
    FrozenLake and ALFWorld, for the oracle, random, Best-of-Q trained by the training service and a built-in
    text method on a tiny local model: x the test-split ρ (the training run's published evaluation, the text
    method's leaderboard result), y the paired success difference to the base policy."""
    from playwright.sync_api import sync_playwright

    from leaderboard.models import Method
    from learning import services
    from qval import backbone as bb
    from tests.test_browser import CHROMIUM

    settings.QVAL_DATA_DIR = data_dir
    datasets = {"frozenlake": loaded, "alfworld": small_alfworld(data_dir, test_split_secret)}
    n, learned = 2, "best-of-q"  # N = 2: a third fewer of the oracle's ALFWorld rollouts, the test's largest cost, than 3
    for dataset in datasets.values():
        trained = services.run_training(services.create_run(learned, dataset, seed=1, params=LEARNED[learned]).pk, "t")
        assert trained.status == "finished", trained.error
    # the text method's test-split evaluations on the leaderboard (what a platform run of it stores)
    method = Method.objects.create(name=TEXT_METHOD, family="direct")
    for i, dataset in enumerate(datasets.values()):
        baseline_evaluation(dataset, method, rho=0.1 + i / 10, local_rho=-0.2 - i / 10)
    backend = bb.TransformersBackend(tiny_model, name="tiny-llama", device="cpu")
    with bb.BackboneServer(backend, 10**9, address=("127.0.0.1", 0)) as server:
        url = "http://%s:%d" % server.address
        runs = {(env, p): play(env, p, n=n, episodes=count, backbone=url if p == TEXT_METHOD else "")
                for env, count in BROWSER_EPISODES.items() for p in ("base", "oracle", "random", learned, TEXT_METHOD)}
    metrics = ("spearman", "ranking_spearman")
    expected: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
    for metric in metrics:
        for env, dataset in datasets.items():
            rhos = {"oracle": 1.0, "random": 0.0, learned: published(dataset, learned, metric),
                    TEXT_METHOD: published(dataset, TEXT_METHOD, metric)}
            expected[metric, env] = {p: (rho, mean_success(runs[env, p]) - mean_success(runs[env, "base"]))
                                     for p, rho in rhos.items() if rho is not None}
    # every kind of point on both environments under the state-local ρ (ALFWorld's 4 test states are too few for a
    # global ρ of the learned model: insufficient, so no point there)
    assert all(set(expected["ranking_spearman", env]) == {"oracle", "random", learned, TEXT_METHOD}
               for env in datasets), expected
    assert set(expected["spearman", "frozenlake"]) == {"oracle", "random", learned, TEXT_METHOD}
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed; `make test` installs it (scripts/install.sh)")
    drawn, rows = {}, {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        for metric in metrics:
            page.goto(f"{live_server.url}/best-of-n/?metric={metric}")
            for env in datasets:
                page.wait_for_function(f"() => document.getElementById('alignment-{env}-{n}')?.data")
                drawn[metric, env] = _points(page, f"alignment-{env}-{n}")
                rows[metric, env] = page.evaluate(f"() => [...document.querySelectorAll('section[data-environment={env}] "
                                                  "tr[data-method]')].map(r => r.dataset.method)")
        page.click(f"a[href='/best-of-n/runs/{runs['frozenlake', 'oracle'].pk}/']")
        page.wait_for_selector("#summary")
        episodes = page.locator("#episodes").count()  # anonymous: aggregates only, the tasks are secret
        browser.close()
    for key, points in expected.items():
        assert set(drawn[key]) == set(points) and sorted(rows[key]) == sorted(points), key
        for picker, (rho, gain) in points.items():
            assert drawn[key][picker] == pytest.approx((rho, gain)), (key, picker)
    assert episodes == 0


@pytest.mark.slow
def test_a_text_method_is_a_point(loaded, tiny_model: Path, client) -> None:  # type: ignore[no-untyped-def]
    """A built-in text method on a tiny local model plays a run through the service (its picker runs the
    method's ``run``) and appears on the alignment page at its test-split ρ from the leaderboard."""
    from best_of_n import services as best_of_n
    from leaderboard.models import Method

    for picker in ("base", "random"):
        play("frozenlake", picker, n=3, episodes=2)
    run = best_of_n.create_run("frozenlake", "direct-single", n=3, num_episodes=2, backbone=str(tiny_model))
    run = best_of_n.play(best_of_n.start(run.pk, "inline@test"))
    assert run.status == "finished" and run.episodes.count() == 2
    assert all(s["scores"] and len(s["candidates"]) == 3 for e in run.episodes.all() for s in e.steps)
    # its leaderboard evaluation on the test split (what a platform run of the method stores)
    baseline_evaluation(loaded, Method.objects.create(name="direct-single", family="direct"), rho=0.25, local_rho=0.6)
    points = {p["method"]: p for a in client.get("/best-of-n/?format=json").json()["alignments"] for p in a["points"]}
    assert points["direct-single"]["rho"] == 0.25 and points["direct-single"]["group"] == "Direct"
    # the same point under the state-local ρ: what a pick among one state's candidates uses
    local = client.get("/best-of-n/?metric=ranking_spearman&format=json").json()
    assert local["metric"] == "ranking_spearman"
    assert {p["method"]: p["rho"] for a in local["alignments"] for p in a["points"]} == {
        "direct-single": 0.6, "random": 0.0}
    base = run.__class__.objects.get(picker="base")
    assert points["direct-single"]["gain"]["value"] == pytest.approx(mean_success(run) - mean_success(base))


LEARNED = {"best-of-q": {"steps": 200, "target_every": 20}, "amc-value": {"steps": 200, "samples": 2, "max_states": 120}}
"""Small but real training settings (the full train split's experience, fewer steps and samples)."""


@pytest.mark.slow
def test_learned_pickers_are_points(client, staff, loaded, data_dir: Path, settings,  # type: ignore[no-untyped-def]
                                    django_capture_on_commit_callbacks) -> None:
    """Best-of-Q and AMC trained by the training service pick through the staff form (then the gpu task) and
    the command with their training run's model; the alignment page shows them at the test ρ their training
    run published, with their gain over the base policy on the same episodes."""
    from django.core.management import call_command

    from best_of_n import services as best_of_n
    from best_of_n.models import BestOfNRun
    from learning import services
    from qval.learned import methods as lm
    from qval.learned.features import featuriser_from_spec
    from qval.learned.data import Point
    from best_of_n.tasks import play_best_of_n

    settings.QVAL_DATA_DIR = data_dir
    n, episodes = 3, 12
    with pytest.raises(best_of_n.InvalidRun, match="no finished training run of best-of-q on frozenlake-8x8") as refused:
        best_of_n.create_run("frozenlake", "best-of-q", n=n, num_episodes=episodes)
    assert refused.value.field == "picker"
    trained = {}
    for method, params in LEARNED.items():
        run = services.run_training(services.create_run(method, loaded, seed=1, params=params).pk, "test")
        assert run.status == "finished", run.error
        trained[method] = run
    with pytest.raises(best_of_n.InvalidRun, match=f"#{trained['amc-value'].pk} is not a finished run of best-of-q"):
        best_of_n.create_run("frozenlake", "best-of-q", n=n, num_episodes=episodes, training_run=trained["amc-value"].pk)
    runs = {p: play("frozenlake", p, n=n, episodes=episodes) for p in ("base", "random", "oracle")}

    # best-of-q through the staff form and the gpu task; amc-value through the command
    clear_queue("gpu")
    client.force_login(staff)
    form = client.get("/best-of-n/").content.decode()
    assert "best-of-q (a finished training run&#x27;s model)" in form
    assert f'<option value="{trained["best-of-q"].pk}">#{trained["best-of-q"].pk} best-of-q on {loaded.key}' in form
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post("/best-of-n/", {**GOOD, "picker": "best-of-q", "training_run": str(trained["best-of-q"].pk),
                                           "n": str(n), "episodes": str(episodes), "seed": "0"})
    assert resp.status_code == 302, resp.context["form"].errors
    queued = BestOfNRun.objects.get(picker="best-of-q")
    assert len(broker_messages("gpu")) == 1
    clear_queue("gpu")
    assert play_best_of_n.apply(args=[queued.pk]).get() == "finished"
    call_command("best_of_n", "frozenlake", "amc-value", "--n", str(n), "--episodes", str(episodes))
    for method, run in trained.items():
        picked = BestOfNRun.objects.get(picker=method)
        assert picked.status == "finished" and picked.training_run == run and picked.episodes.count() == episodes
        runs[method] = picked
        # every choice is the best candidate by the training run's model
        scorer = lm.Scorer.open(run.model_dir, featuriser_from_spec(run.featuriser))
        for episode in picked.episodes.all():
            for step in episode.steps:
                q = scorer.score([Point(episode.task, step["observation"], a) for a in step["candidates"]])
                assert step["scores"] == pytest.approx(q, abs=1e-5)
                assert q[step["chosen"]] >= max(q) - 1e-5
        assert f"training run #{run.pk}" in client.get(f"/best-of-n/runs/{picked.pk}/").content.decode()

    data = client.get("/best-of-n/?format=json").json()["alignments"]
    assert [(a["environment"], a["n"]) for a in data] == [("frozenlake", n)]
    points = {p["method"]: p for p in data[0]["points"]}
    assert set(points) == {"oracle", "random", "best-of-q", "amc-value"}
    for method, run in trained.items():
        published = run.submissions.get(split="test", target="q").results.get(metric="spearman").value
        assert points[method]["rho"] == pytest.approx(published) and points[method]["group"] == "Learned"
    for picker, point in points.items():
        assert point["gain"]["value"] == pytest.approx(mean_success(runs[picker]) - mean_success(runs["base"]))
    assert points["oracle"]["gain"]["value"] >= points["random"]["gain"]["value"]
    assert data[0]["rank_correlation"] is not None  # four points
    page = client.get("/best-of-n/").content.decode()
    assert 'data-method="best-of-q"' in page and 'data-method="amc-value"' in page


def test_an_undefined_rank_correlation_reads_so_on_the_page_and_in_strict_json(rf) -> None:  # type: ignore[no-untyped-def]
    """Every method with the same gain (or the same ρ), or no resample with a defined ρ: the page says so in words
    and the JSON holds null, never NaN (which strict JSON parsers, a browser's included, refuse)."""
    import json
    import math

    from django.template.loader import render_to_string

    from best_of_n.services import Alignment, AlignmentPoint, alignment_json
    from qval import best_of_n as bon

    points = [AlignmentPoint(i, m, "Baselines", "#000", rho, bon.Interval(0.1, 0.0, 0.2))
              for i, (m, rho) in enumerate((("oracle", 1.0), ("random", 0.0), ("qlass", 0.4)))]
    correlation = bon.rank_correlation([p.rho for p in points], [p.gain.value for p in points])
    same_gain = Alignment("frozenlake", 3, points, correlation)
    no_bounds = Alignment("alfworld", 3, points, bon.Interval(0.5, math.nan, math.nan))
    data = json.loads(json.dumps(alignment_json([same_gain, no_bounds]), allow_nan=False))
    assert data[0]["rank_correlation"] is None
    assert data[1]["rank_correlation"] == {"value": 0.5, "low": None, "high": None}
    page = render_to_string("best_of_n/alignment.html", {
        "panels": [{"alignment": a, "plot": ""} for a in (same_gain, no_bounds)], "results": [], "runs": [],
        "form": None, "baselines": bon.BASELINES, "metric": "spearman", "metric_label": "ρ", "metrics": []},
        request=rf.get("/best-of-n/"))
    assert "their rank correlation is undefined" in page and "no interval: every resample" in page
    assert "CI nan" not in page and "Fewer than three" not in page

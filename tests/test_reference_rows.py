"""Reference rows: the reference methods (``qval/methods/reference.py``) on FrozenLake, ``manage.py
seed_reference_rows`` (idempotent), their runs on the board with the *baseline* badge and source *verified*,
the learned methods' training runs and the built-in pickers' Best-of-N runs it queues too, and a dataset build
that seeds its own."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command
from scipy.stats import spearmanr

from .conftest import broker_messages, clear_queue

from qval import schema
from qval.methods.reference import NAMES, goal_distance, methods_for, uniform
from qval.methods.registry import MethodError, get_method
from qval.methods.run import run_method
from qval.scoring import Truth, score
from qval.envs import registry

LEGEND = "FrozenLake: you are @. Reach the goal G without falling into a hole H (S start, F frozen ice)."


def spearman_on(ds: schema.Dataset, split: str, target: str, scores: dict[str, float]) -> float:
    labels = ds.labels_for(target)
    ids = ds.point_ids(split, target)
    return float(spearmanr([scores[i] for i in ids], [labels[i] for i in ids])[0])


def test_the_reference_methods_are_registered_without_a_model_in_family_other() -> None:
    for name in NAMES:
        spec = get_method(name)
        assert (spec.family, spec.needs, spec.modality) == ("other", "none", "text")
        assert spec.supports("q") and spec.supports("v")
    assert methods_for("frozenlake") == ("random", "constant", "step-index", "goal-distance")
    assert methods_for("alfworld") == methods_for("miniwob") == ("random", "constant", "step-index")
    assert "distance heuristic" in get_method("goal-distance").description
    assert "not negated" in get_method("step-index").description


def test_the_best_of_n_pickers_name_random_once() -> None:
    from best_of_n.services import picker_choices

    values = [value for value, _ in picker_choices()]
    assert len(values) == len(set(values)) and {"random", "goal-distance", "step-index"} <= set(values)


def test_goal_distance_reads_the_map_and_the_cell_under_the_agent() -> None:
    def obs(*rows: str) -> str:
        return "\n".join([LEGEND, *rows])

    state = obs("S@FF", "FHFH", "FFFH", "HFFG")
    assert goal_distance(state) == -5.0  # (0,1) → (3,3): 3 down, 2 right, around the hole at (1,1)
    assert goal_distance(obs("SF@F", "FHFH", "FFFH", "HFFG"), before=state) == -4.0
    assert goal_distance(obs("SFFF", "F@FH", "FFFH", "HFFG"), before=state) == -16.0  # into the hole: below all
    assert goal_distance(state, before=state) == -5.0  # a move into the edge: the agent stays on ice
    near = obs("SFFF", "FHFH", "FFFH", "HF@G")
    assert goal_distance(obs("SFFF", "FHFH", "FFFH", "HFF@"), before=near) == 0.0  # onto the goal
    assert goal_distance(obs("SFFF", "FHFH", "FFFH", "HFF@")) == 0.0  # no G left: the agent stands on it
    with pytest.raises(MethodError, match="not a FrozenLake observation"):
        goal_distance("You are in the middle of a room.")


def test_reference_methods_on_frozenlake(frozenlake: schema.Dataset) -> None:
    dev = frozenlake.states_in("dev")
    for target in ("q", "v"):
        distance = run_method("goal-distance", frozenlake, "dev", target, "")
        assert distance.num_nan == 0 and spearman_on(frozenlake, "dev", target, distance.scores) > 0.9
        steps = run_method("step-index", frozenlake, "dev", target, "")
        assert spearman_on(frozenlake, "dev", target, steps.scores) > 0.5
        assert sorted(set(steps.scores.values())) == sorted({float(s.step) for s in dev})
    # Target Q scores every candidate of goal-distance and random (their ranking metrics), one point otherwise.
    candidates = sum(len(s.candidates) for s in dev)
    assert len(run_method("goal-distance", frozenlake, "dev", "q", "").scores) == candidates
    assert len(run_method("step-index", frozenlake, "dev", "q", "").scores) == len(dev)

    first = run_method("random", frozenlake, "dev", "q", "", seed=3).scores
    assert run_method("random", frozenlake, "dev", "q", "", seed=3).scores == first  # seeded
    assert run_method("random", frozenlake, "dev", "q", "", seed=4).scores != first
    assert all(0.0 <= v < 1.0 for v in first.values()) and len(set(first.values())) == len(first)
    some = next(iter(first))
    assert first[some] == uniform(3, some)  # a point's score depends on the seed and its id only

    constant = run_method("constant", frozenlake, "dev", "v", "").scores
    assert set(constant.values()) == {0.0}
    ids = frozenlake.point_ids("dev", "v")
    labels = frozenlake.labels_for("v")
    truth = Truth(point_ids=ids, point_labels=np.array([labels[i] for i in ids]))
    rho = next(r for r in score(truth, ids, np.array([constant[i] for i in ids])) if r.metric == "spearman")
    assert rho.value is None  # undefined, not a failure

    elsewhere = dataclasses.replace(frozenlake, manifest=dataclasses.replace(frozenlake.manifest, environment="alfworld"))
    with pytest.raises(MethodError, match="reads FrozenLake maps"):
        run_method("goal-distance", elsewhere, "dev", "q", "")


# -- on the site ---------------------------------------------------------------------------------
def reference_runs(ds):  # type: ignore[no-untyped-def]
    """The reference methods' runs on ``ds`` (no backbone; the LLM rows: :func:`llm_runs`)."""
    from submissions.models import Submission

    return Submission.objects.filter(kind=Submission.KIND_BASELINE, dataset=ds, backbone_name="")


def llm_runs(ds):  # type: ignore[no-untyped-def]
    """The LLM reference rows on ``ds``: the chat methods with SmolLM2."""
    from submissions.models import Submission

    return Submission.objects.filter(kind=Submission.KIND_BASELINE, dataset=ds, backbone_name="smollm2-135m")


def test_seeding_is_idempotent_and_the_rows_reach_the_board(loaded, client) -> None:  # type: ignore[no-untyped-def]
    from submissions.baselines import run_baseline
    from submissions.models import Submission

    call_command("seed_reference_rows")
    seeded = reference_runs(loaded).count()
    runs = list(reference_runs(loaded).filter(modality="text"))  # the image boards': the next test
    pairs = sorted((s.method_name, s.target) for s in runs)
    assert pairs == sorted((m, t) for m in methods_for("frozenlake") for t in ("q", "v"))
    assert {(s.split, s.source, s.state, s.user) for s in runs} == {("test", "baseline", "queued", None)}
    call_command("seed_reference_rows")
    call_command("seed_reference_rows", loaded.key)
    assert reference_runs(loaded).count() == seeded == 2 * len(runs)  # one run per method × target × modality

    for sub in runs:
        assert run_baseline(sub.pk, None, "here@vm", vllm=None) == Submission.FINISHED, sub.method_name
    const = reference_runs(loaded).get(method_name="constant", target="q", modality="text")
    assert const.results.get(metric="spearman").value is None and const.config["backbone_kind"] == "none"
    assert const.method.family == "other"

    for target in ("q", "v"):
        board = client.get(f"/boards/{loaded.key}:{target}:text/", {"format": "json"}).json()
        rows = {r["method"]: r for r in board["rows"]}
        assert set(rows) == {"random", "step-index", "goal-distance"}  # constant: no ρ, counted unranked
        assert board["unranked"] == 1
        # and named under the board, with why: a method that ran is never missing without a word
        assert board["not_ranked"] == [{"submission_id": reference_runs(loaded).get(
            method_name="constant", target=target, modality="text").pk, "method": "constant", "backbone": "",
            "source": "verified", "usable_points": const.results.get(metric="spearman").num_points,
            "reason": "constant predictions, or a value not disclosed"}]
        assert all(r["source"] == "verified" and r["baseline"] is True for r in rows.values())
        assert board["rows"][0]["method"] == "goal-distance" and rows["goal-distance"]["value"] > 0.9
        assert not math.isnan(rows["random"]["value"]) and abs(rows["random"]["value"]) < 0.5
    page = client.get(f"/boards/{loaded.key}:q:text/").content.decode()
    assert 'id="not-ranked-runs"' in page
    assert "<td>constant predictions, or a value not disclosed</td><td>verified</td>" in page  # with its source
    assert page.count('title="run by the platform: a built-in method, a method container or a training run">'
                      "verified</span>") == len(rows)  # each ranked row's badge
    page = client.get("/methods/goal-distance/").content.decode()
    assert 'id="builtin"' in page and "distance heuristic" in page and "open book" in page

    # A failed run is queued again; the others are left alone.
    reference_runs(loaded).filter(method_name="random", target="v", modality="text").update(state=Submission.FAILED)
    call_command("seed_reference_rows")
    assert reference_runs(loaded).count() == seeded + 1
    assert reference_runs(loaded).filter(method_name="random", target="v", state=Submission.QUEUED).count() == 2


@pytest.fixture
def tiny_lake(monkeypatch):  # type: ignore[no-untyped-def]
    """Builder ``tiny-lake``: a few FrozenLake trajectories split between dev and a public test split."""
    def tiny():  # type: ignore[no-untyped-def]
        env, spec = registry.BUILDERS["frozenlake"]()
        return env, dataclasses.replace(spec, slug="frozenlake-tiny", version="0", num_trajectories=6,
                                        max_states_per_trajectory=2, splits=("dev", "test"), split_by="task",
                                        split_cycle=None, secret_test=False, end_images=False)

    monkeypatch.setitem(registry.BUILDERS, "tiny-lake", tiny)


def test_a_finished_dataset_build_seeds_its_reference_rows(db, tiny_lake, settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from leaderboard.models import Dataset, DatasetBuild
    from learning.models import TrainingRun
    from qval_site.tasks import seed_reference_rows_of
    from workers.builds import SEED_TASK, build_dataset

    settings.QVAL_DATASETS_DIR = tmp_path / "datasets"
    clear_queue("scoring")
    record = DatasetBuild.objects.create(name="tiny-lake")
    assert build_dataset.apply(args=[record.pk]).get() == "finished"
    ds = Dataset.objects.get(slug="frozenlake-tiny")
    assert ds.states.filter(split="test").exists()
    sent = broker_messages("scoring")
    assert [(m["headers"]["task"], m["headers"]["argsrepr"]) for m in sent] == [(SEED_TASK, f"([{ds.pk}],)")]

    modalities = ds.modalities
    assert seed_reference_rows_of.apply(args=[[ds.pk]]).get() == (2 * len(methods_for("frozenlake")) * len(modalities)
                                                                  + llm_runs(ds).count())
    assert llm_runs(ds).count() == 13
    assert sorted(reference_runs(ds).values_list("method_name", "target", "modality")) == sorted(
        (m, t, modality) for m in methods_for("frozenlake") for t in ("q", "v") for modality in modalities)
    assert not TrainingRun.objects.exists()  # no train split: nothing to train on


# -- learned methods and Best-of-N ---------------------------------------------------------------
def seeded_state(ds):  # type: ignore[no-untyped-def]
    """Every reference run on ``ds`` and the Best-of-N runs, as comparable tuples."""
    from best_of_n.models import BestOfNRun
    from learning.models import TrainingRun

    training = sorted((r.method, r.dataset_id, r.featuriser, r.seed, r.params, r.status)
                      for r in TrainingRun.objects.all())
    best_of_n = sorted((r.environment, r.dataset_slug, r.picker, r.n, r.num_episodes, r.seed, r.backbone,
                        r.training_run_id, r.status) for r in BestOfNRun.objects.all())
    return sorted(reference_runs(ds).values_list("pk", flat=True)), training, best_of_n


def test_seeding_queues_a_training_run_per_learned_method_and_best_of_n_runs_once(  # type: ignore[no-untyped-def]
        loaded, settings, caplog, django_capture_on_commit_callbacks) -> None:
    from best_of_n.models import BestOfNRun
    from best_of_n.services import REFERENCE_EPISODES, REFERENCE_N
    from learning.models import TrainingRun
    from qval import best_of_n as bon
    from qval.learned.defaults import DEFAULT_FEATURISER
    from qval.learned.methods import METHODS

    secret = settings.QVAL_TEST_SPLIT_SECRET
    settings.QVAL_TEST_SPLIT_SECRET = ""
    clear_queue("gpu")
    clear_queue("scoring")
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_reference_rows")
    assert not BestOfNRun.objects.exists()
    assert "no Best-of-N reference runs queued on frozenlake-8x8" in caplog.text
    assert "QVAL_TEST_SPLIT_SECRET is not set" in caplog.text

    settings.QVAL_TEST_SPLIT_SECRET = secret
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_reference_rows")
    baselines, training, best_of_n = seeded_state(loaded)
    assert len(baselines) == 2 * len(methods_for("frozenlake")) * len(loaded.modalities)
    assert set(METHODS) == {"best-of-q", "qlass", "amc-value"}
    assert training == sorted((m, loaded.pk, DEFAULT_FEATURISER, 0, {}, "queued") for m in METHODS)  # create_run's defaults
    assert loaded.slug == bon.DATASET_SLUGS["frozenlake"] and (REFERENCE_N, REFERENCE_EPISODES) == (2, 20)
    assert best_of_n == sorted(("frozenlake", loaded.slug, p, 2, 20, 0, "", None, "queued")
                               for p in ("base", "oracle", "random"))
    sent = {queue: sorted((m["headers"]["task"], m["headers"]["argsrepr"]) for m in broker_messages(queue))
            for queue in ("gpu", "scoring")}
    # The reference methods need no model: seconds of work each, so they run beside the uploads, not behind training.
    assert sent["scoring"] == sorted(("workers.tasks.run_baseline_submission", f"[{pk}, 1]") for pk in baselines)
    assert sent["gpu"] == sorted([("learning.tasks.train_learned", f"({r.pk},)") for r in TrainingRun.objects.all()]
                                 + [("workers.best_of_n.play_best_of_n", f"({r.pk},)") for r in BestOfNRun.objects.all()]
                                 + [("workers.tasks.run_baseline_submission", f"[{s.pk}, 1]") for s in llm_runs(loaded)])

    before = seeded_state(loaded)
    call_command("seed_reference_rows")
    call_command("seed_reference_rows", loaded.key)
    assert seeded_state(loaded) == before  # nothing new

    # A failed run is queued again; a run with other settings does not stand in for the reference one.
    TrainingRun.objects.filter(method="qlass").update(status=TrainingRun.FAILED)
    BestOfNRun.objects.filter(picker="oracle").update(status=BestOfNRun.FAILED)
    BestOfNRun.objects.create(environment="frozenlake", dataset_slug=loaded.slug, picker="random", n=3,
                              num_episodes=20)
    call_command("seed_reference_rows")
    assert TrainingRun.objects.filter(method="qlass", status=TrainingRun.QUEUED).count() == 1
    assert BestOfNRun.objects.filter(picker="oracle", status=BestOfNRun.QUEUED).count() == 1
    assert BestOfNRun.objects.filter(picker="random").count() == 2
    assert TrainingRun.objects.count() == len(METHODS) + 1 and BestOfNRun.objects.count() == 3 + 1 + 1


def test_a_seeded_training_run_finishes_and_its_rows_are_verified_on_the_board(  # type: ignore[no-untyped-def]
        loaded, client, data_dir: Path, settings) -> None:
    from learning.models import TrainingRun
    from learning.services import run_training
    from qval.learned.defaults import DEFAULT_FEATURISER
    from qval_site.reference_rows import seed_reference_rows

    settings.QVAL_DATA_DIR = data_dir
    seeded = seed_reference_rows()
    run = next(r for r in seeded.training_runs if r.method == "best-of-q")
    run = run_training(run.pk, "in-process")
    assert run.status == TrainingRun.FINISHED, run.error
    assert run.params == {} and run.featuriser == DEFAULT_FEATURISER
    for target in ("q", "v"):
        board = client.get(f"/boards/{loaded.key}:{target}:text/", {"format": "json"}).json()
        rows = [r for r in board["rows"] if r["method"] == "best-of-q"]
        assert len(rows) == 1 and rows[0]["source"] == "verified", rows
        assert rows[0]["submission_id"] in set(run.submissions.filter(split="test").values_list("pk", flat=True))
    assert "best-of-q" in client.get("/learned/").content.decode()


def test_a_dataset_with_images_gets_reference_rows_on_its_image_boards(loaded, client) -> None:  # type: ignore[no-untyped-def]
    """FrozenLake offers text and image: the reference methods score the state, not how it is shown, so each
    has a run on both modalities' boards (the same scores); the learned methods read the text and stay there."""
    from submissions.baselines import BaselineRequest, launch_baseline, run_baseline
    from submissions.models import Submission
    from submissions.services import SubmissionRejected

    assert loaded.modalities == ["text", "image"]
    call_command("seed_reference_rows")
    runs = list(reference_runs(loaded))
    assert sorted((s.method_name, s.target, s.modality) for s in runs) == sorted(
        (m, t, modality) for m in methods_for("frozenlake") for t in ("q", "v") for modality in ("text", "image"))
    call_command("seed_reference_rows")
    assert reference_runs(loaded).count() == len(runs)  # idempotent per modality too
    for sub in runs:
        if sub.target == "q":
            assert run_baseline(sub.pk, None, "here@vm", vllm=None) == Submission.FINISHED, sub.method_name
    boards = {}
    for modality in ("text", "image"):
        board = client.get(f"/boards/{loaded.key}:q:{modality}/", {"format": "json"}).json()
        boards[modality] = {r["method"]: r["value"] for r in board["rows"]}
        assert board["unranked"] == 1  # constant
        assert all(r["source"] == "verified" and r["baseline"] is True for r in board["rows"])
    assert set(boards["image"]) == {"random", "step-index", "goal-distance"}
    assert boards["image"] == pytest.approx(boards["text"])  # the same state, the same scores
    # Only a reference method may enter a board of another modality than its own, and only one the dataset offers.
    with pytest.raises(SubmissionRejected, match="reads text inputs, not image") as exc:
        launch_baseline(BaselineRequest("direct-single", "b", loaded.key, "test", "q", modality="image"))
    assert exc.value.field == "modality"
    loaded.modalities = ["text"]
    loaded.save(update_fields=["modalities"])
    with pytest.raises(SubmissionRejected, match="offers text, not image"):
        launch_baseline(BaselineRequest("random", "", loaded.key, "test", "q", modality="image"))


def test_seeding_queues_every_chat_method_with_smollm2_behind_the_users(  # type: ignore[no-untyped-def]
        loaded, settings, django_capture_on_commit_callbacks) -> None:
    """Every text method that needs a chat model, with backbone SmolLM2-135M on the test split's Q text board,
    queued once, on ``gpu`` behind every user's job; none where
    ``QVAL_BACKBONES`` lacks the backbone."""
    import redis

    from qval.methods.registry import all_methods
    from submissions.baselines import chat_reference_methods
    from submissions.models import Submission
    from submissions.queue_order import COSTLY_METHODS, cpu_seconds
    from .conftest import TEST_BROKER_URL  # noqa: I001

    backbones = settings.QVAL_BACKBONES
    settings.QVAL_BACKBONES = {}
    call_command("seed_reference_rows")
    assert not llm_runs(loaded).exists()

    settings.QVAL_BACKBONES = {**backbones, "smollm2-135m": {"kind": "transformers", "path": "/nowhere"}}
    redis.Redis.from_url(TEST_BROKER_URL).flushdb()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_reference_rows")
    chat = [s.name for s in all_methods() if s.modality == "text" and s.needs in ("chat-llm", "chat-llm-logprobs")]
    assert len(chat) == 13
    runs = list(llm_runs(loaded))
    states = loaded.states.filter(split="test").count()
    assert sorted((s.method_name, s.target) for s in runs) == sorted(chat_reference_methods("frozenlake", states))
    assert {s.method_name for s in runs} == set(chat)
    # cheapest first on this board, so it shows most of its rows soonest; codegen-avg, which reads codegen's
    # answers from the response cache, right after it
    order = [s.method_name for s in sorted(runs, key=lambda s: s.pk)]
    costs = [cpu_seconds(m, "frozenlake") for m in order if m != "codegen-avg"]
    assert all(c is not None for c in costs)
    totals = [once + per_state * states for once, per_state in costs]  # type: ignore[misc]
    assert totals == sorted(totals) and order[order.index("codegen") + 1] == "codegen-avg"
    # on ALFWorld's 60 test states codegen's one request batch costs least, and verifier, FrozenLake's cheapest,
    # more than ranking
    alfworld = [m for m, _ in chat_reference_methods("alfworld", 60)]
    assert alfworld[:4] == ["codegen", "codegen-avg", "direct-batched", "direct-single"]
    assert alfworld.index("verifier") > alfworld.index("ranking") > alfworld.index("gvl")
    assert {(s.split, s.modality, s.source, s.state, s.user) for s in runs} == {
        ("test", "text", "baseline", "queued", None)}
    assert {s.target for s in runs} == {"q"}  # the ranking methods too: their rows are on the Q board
    # On gpu, in the lists a worker reads only once every user's job is taken (kombu's priority 3 and 9 lists):
    # eureka and direct-16 in the last, behind every dataset's cheaper rows.
    broker = redis.Redis.from_url(TEST_BROKER_URL)
    assert broker.llen("gpu") == 0

    def runs_in(key: str) -> list[int]:
        return sorted(json.loads(base64.b64decode(json.loads(m)["body"]))[0][0] for m in broker.lrange(key, 0, -1)
                      if json.loads(m)["headers"]["task"] == "workers.tasks.run_baseline_submission")

    assert COSTLY_METHODS == {"eureka", "direct-16"}
    assert runs_in("gpu\x06\x163") == sorted(s.pk for s in runs if s.method_name not in COSTLY_METHODS)
    assert runs_in("gpu\x06\x169") == sorted(s.pk for s in runs if s.method_name in COSTLY_METHODS)

    call_command("seed_reference_rows")
    assert llm_runs(loaded).count() == len(runs)  # nothing new
    Submission.objects.filter(pk=runs[0].pk).update(state=Submission.FAILED)
    call_command("seed_reference_rows")
    assert llm_runs(loaded).count() == len(runs) + 1  # a failed one is queued again

"""Training runs of the Learned family on the site: inline and on a real gpu worker, pages, leaderboard."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from learning import services
from learning.models import TrainingRun
from leaderboard.models import Method
from submissions.models import Submission

from .conftest import broker_messages, clear_queue, wait_for, worker_process

FAST = {"steps": 60, "target_every": 10}


def test_a_run_trains_publishes_and_shows_its_curves(client, loaded, data_dir: Path, settings) -> None:  # type: ignore[no-untyped-def]
    settings.QVAL_DATA_DIR = data_dir
    run = services.create_run("best-of-q", loaded, seed=2, params=FAST)
    run = services.run_training(run.pk, "test")
    assert run.status == TrainingRun.FINISHED, run.error
    assert run.data["splits"] == ["train"] and run.data["labels_read"] is False
    assert set(run.losses) == {"q", "v"} and len(run.losses["q"]) == 60
    assert Path(run.model_dir, "weights.pt").is_file() and len(run.version) == 64
    subs = list(run.submissions.order_by("split", "target"))
    assert [(s.split, s.target, s.state) for s in subs] == [
        ("dev", "q", "finished"), ("dev", "v", "finished"), ("test", "q", "finished"), ("test", "v", "finished")]
    assert Method.objects.get(name="best-of-q").family == "learned"
    test_q = next(s for s in subs if s.split == "test" and s.target == "q")
    assert test_q.results.get(metric="spearman").value is not None
    assert test_q.results.filter(metric="ranking_spearman").exists()  # every candidate scored
    rows = client.get("/api/v1/leaderboard/", {"dataset": loaded.key, "split": "test"}).json()["results"]
    assert "best-of-q" in {r["method"] for r in rows}
    page = client.get(f"/learned/{run.pk}/").content.decode()
    assert 'id="loss-curves"' in page and "finished" in page and "trajectory_transitions" in page
    assert "best-of-q" in client.get("/learned/").content.decode()
    assert client.get("/learned/999999/").status_code == 404


def test_bad_runs_are_refused_or_fail_with_a_reason(loaded, data_dir: Path, settings) -> None:  # type: ignore[no-untyped-def]
    settings.QVAL_DATA_DIR = data_dir
    with pytest.raises(ValueError, match="unknown learned method"):
        services.create_run("q-star", loaded)
    with pytest.raises(ValueError, match="params: unknown parameters"):
        services.create_run("qlass", loaded, params={"gamma": 0.5})
    with pytest.raises(CommandError, match="--params: not JSON"):
        call_command("train_learned", "--method", "qlass", "--dataset", loaded.slug, "--params", "{oops")
    assert services.create_run("qlass", loaded, featuriser="smollm2").featuriser == "smollm2"  # SmolLM2's hidden states
    run = services.create_run("qlass", loaded, featuriser="http://127.0.0.1:9#none")
    run = services.run_training(run.pk, "test")
    assert run.status == TrainingRun.FAILED and "unreachable" in run.error
    assert not Submission.objects.filter(method_name="qlass").exists()


def test_staff_queue_a_training_run_from_the_page(client, staff, loaded, django_capture_on_commit_callbacks) -> None:  # type: ignore[no-untyped-def]
    clear_queue("gpu")
    client.force_login(staff)
    page = client.get("/learned/").content.decode()
    assert 'id="train-form"' in page and f'<option value="{loaded.key}">' in page
    assert 'name="best-of-q-tau"' in page and 'value="0.7"' in page and 'name="qlass-width"' in page
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post("/learned/", {"method": "qlass", "dataset": loaded.key, "seed": "7", "qlass-steps": "30",
                                         "qlass-epsilon": "0.5", "qlass-depth": "",  # blank: the default
                                         "best-of-q-steps": "not read"})  # another method's: ignored
    run = TrainingRun.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"/learned/{run.pk}/"
    assert (run.method, run.dataset, run.seed, run.status) == ("qlass", loaded, 7, TrainingRun.QUEUED)
    assert run.params == {"steps": 30, "epsilon": 0.5}
    sent = broker_messages("gpu")
    assert [(m["headers"]["task"], m["headers"]["argsrepr"]) for m in sent] == [
        ("learning.tasks.train_learned", f"({run.pk},)")]


def test_only_staff_train(client, user, loaded) -> None:  # type: ignore[no-untyped-def]
    post = {"method": "qlass", "dataset": loaded.key, "seed": "0"}
    assert client.post("/learned/", post).status_code == 403  # anonymous
    client.force_login(user)
    page = client.get("/learned/")
    assert page.status_code == 200 and b"train-form" not in page.content
    assert client.post("/learned/", post).status_code == 403
    assert not TrainingRun.objects.exists()


@pytest.mark.parametrize("change, field, expected", [
    ({"method": "q-star"}, "method", "Select a valid choice"),
    ({"dataset": "nope@1"}, "dataset", "Select a valid choice"),
    ({"seed": "x"}, "seed", "Enter a whole number"),
    ({"seed": "-1"}, "seed", "expected an integer from 0 to 2147483647, got -1"),
    ({"amc-value-steps": "0"}, "amc-value-steps", "expected an integer of at least 1, got 0"),
    ({"amc-value-samples": "2.5"}, "amc-value-samples", "Enter a whole number"),
    ({"amc-value-epsilon": "1.5"}, "amc-value-epsilon", "expected a number from 0 to 1, got 1.5"),
    ({"amc-value-lr": "0"}, "amc-value-lr", "expected a positive number, got 0.0"),
    ({"amc-value-lr": "fast"}, "amc-value-lr", "Enter a number"),
])
def test_invalid_training_input_names_the_field(client, staff, loaded, django_capture_on_commit_callbacks,  # type: ignore[no-untyped-def]
                                                change, field, expected) -> None:
    clear_queue("gpu")
    client.force_login(staff)
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post("/learned/", {"method": "amc-value", "dataset": loaded.key, "seed": "0", **change})
    assert resp.status_code == 400
    errors = resp.context["form"].errors
    assert list(errors) == [field] and expected in errors[field][0], errors
    assert expected in resp.content.decode().replace("&quot;", '"')
    assert not TrainingRun.objects.exists() and broker_messages("gpu") == []


def test_bad_hyperparameters_are_refused_by_the_service(loaded) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(services.InvalidRun, match=r"params.tau: expected a number strictly between 0 and 1, got 1"):
        services.create_run("best-of-q", loaded, params={"tau": 1})
    with pytest.raises(CommandError, match="params.branches: expected true or false"):
        call_command("train_learned", "--method", "best-of-q", "--dataset", loaded.slug, "--params", '{"branches": 1}')
    assert services.create_run("qlass", loaded, params={"max_roots": None, "lr": 1}).params == {"max_roots": None, "lr": 1.0}
    with pytest.raises(services.InvalidRun, match=r"params.branch_depth: expected an integer of at least 0, got -1"):
        services.create_run("best-of-q", loaded, params={"branch_depth": -1})
    assert services.create_run("best-of-q", loaded, params={"branch_depth": 0}).params == {"branch_depth": 0}


@pytest.mark.slow
@pytest.mark.worker
def test_a_lora_amc_value_run_fine_tunes_a_local_backbone_and_says_so(  # type: ignore[no-untyped-def]
        client, staff, loaded, tiny_model: Path, data_dir: Path, settings, django_capture_on_commit_callbacks) -> None:
    settings.QVAL_DATA_DIR = data_dir
    with pytest.raises(services.InvalidRun, match="featuriser: LoRA fine-tunes a local backbone"):
        services.create_run("amc-value", loaded, params={"lora": True})
    with pytest.raises(services.InvalidRun, match="featuriser: expected hashed"):
        services.create_run("amc-value", loaded, featuriser="bert")
    with pytest.raises(services.InvalidRun, match="params.lora_alpha: expected a positive number"):
        services.create_run("amc-value", loaded, featuriser=f"local:{tiny_model}", params={"lora": True, "lora_alpha": 0})
    # the staff form: featuriser and the LoRA switch; without a local backbone it names the featuriser field
    clear_queue("gpu")
    client.force_login(staff)
    page = client.get("/learned/").content.decode()
    assert 'name="featuriser"' in page and 'name="amc-value-lora"' in page and 'name="amc-value-lora_rank"' in page
    resp = client.post("/learned/", {"method": "amc-value", "dataset": loaded.key, "seed": "0", "amc-value-lora": "on"})
    assert resp.status_code == 400 and list(resp.context["form"].errors) == ["featuriser"]
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post("/learned/", {"method": "amc-value", "dataset": loaded.key, "seed": "0",
                                         "featuriser": f"local:{tiny_model}", "amc-value-lora": "on",
                                         "amc-value-lora_rank": "4"})
    queued = TrainingRun.objects.get()
    assert resp.status_code == 302 and queued.featuriser == f"local:{tiny_model}"
    assert queued.params == {"lora": True, "lora_rank": 4}
    clear_queue("gpu")
    # inline through manage.py: trained, stored, published; the page says what was fine-tuned
    params = '{"lora": true, "steps": 20, "samples": 1, "max_states": 6, "batch_size": 16, "lora_lr": 0.001}'
    call_command("train_learned", "--method", "amc-value", "--dataset", loaded.slug,
                 "--featuriser", f"local:{tiny_model}", "--params", params)
    run = TrainingRun.objects.exclude(pk=queued.pk).get()
    assert run.status == TrainingRun.FINISHED, run.error
    assert sorted((s.split, s.target, s.state) for s in run.submissions.all()) == [
        ("dev", "q", "finished"), ("dev", "v", "finished"), ("test", "q", "finished"), ("test", "v", "finished")]
    assert Path(run.model_dir, "weights.pt").is_file()
    page = client.get(f"/learned/{run.pk}/").content.decode()
    assert 'id="run-fine-tuned"' in page and "LoRA adapters (rank 8, alpha 16) on the 14 linear projections" in page


def test_a_queued_run_finishes_on_a_real_gpu_worker(transactional_db, frozenlake, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from leaderboard.loading import load_dataset

    dataset = load_dataset(frozenlake)[0]
    with worker_process("gpu", f"test-learned-{os.getpid()}@%h", data_dir, data_dir / "learned-worker.log", 20):
        run = services.enqueue(services.create_run("amc-value", dataset, params={"steps": 40, "samples": 1}))
        done = wait_for(lambda: TrainingRun.objects.filter(pk=run.pk, status__in=["finished", "failed"]).first(),
                        timeout=600, interval=1.0)
    assert done.status == TrainingRun.FINISHED, done.error
    assert done.worker.startswith("test-learned-") and done.submissions.count() == 4
    assert all(s.state == Submission.FINISHED for s in done.submissions.all())

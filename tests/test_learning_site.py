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

from .conftest import wait_for, worker_process

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
    rows = client.get("/api/v1/leaderboard/", {"dataset": loaded.key, "split": "test"}).json()["rows"]
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
    run = services.create_run("qlass", loaded, featuriser="http://127.0.0.1:9#none")
    run = services.run_training(run.pk, "test")
    assert run.status == TrainingRun.FAILED and "unreachable" in run.error
    assert not Submission.objects.filter(method_name="qlass").exists()


@pytest.mark.slow
@pytest.mark.worker
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

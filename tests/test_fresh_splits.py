"""A spent hidden split replaced end to end on a running site (issue 32): a real Celery worker process on the
``scoring`` and ``datasets`` queues, real Redis and PostgreSQL, and a tiny budget (one number).

One user's file spends the budget of FrozenLake's test split (made closed book for the test); the worker asks
for a fresh split, builds ``frozenlake-8x8@1.2-r1`` (same train and dev, a test split drawn anew from the
secret), loads it, retires the old version and re-runs its verified rows (the built-in baselines) there, where
they are ranked; the old board is frozen and marked, and takes no upload.  Each step is printed."""

from __future__ import annotations

import os

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from budgets.models import Refresh, Release, SplitBudget
from leaderboard.models import Dataset, DatasetBuild, State
from qval import budget
from submissions.baselines import queue_reference_rows
from submissions.lifecycle import job_queue
from submissions.models import Submission
from tests.conftest import wait_for, worker_process
from tests.test_site import KEY, actor_points, csv_bytes

pytestmark = [pytest.mark.slow, pytest.mark.worker]


def _step(text: str) -> None:
    print(f"[fresh split] {text}")


def _states(ds: Dataset, split: str) -> set[tuple[str, str]]:
    return set(State.objects.filter(dataset=ds, split=split).values_list("external_id", "observation"))


@pytest.mark.django_db(transaction=True)
def test_a_spent_split_is_replaced_end_to_end(client, api, loaded, frozenlake, data_dir, settings) -> None:  # type: ignore[no-untyped-def]
    env = loaded.environment
    env.open_book = False  # FrozenLake's labels follow from its maps; here it stands for a closed-book dataset
    env.save(update_fields=["open_book"])
    points = loaded.states.filter(split="test").count()
    scale = 1.5 * budget.POINTS_PER_NUMBER / points  # a budget of one number
    settings.QVAL_BUDGET_SCALE = scale
    worker_env = {"QVAL_BUDGET_SCALE": str(scale), "QVAL_REFRESH_MIN_INTERVAL_S": "0",
                  "QVAL_BOOTSTRAP_RESAMPLES": "50"}
    with worker_process("scoring,datasets", f"test-fresh-{os.getpid()}@%h", data_dir, data_dir / "fresh-worker.log",
                        60, **worker_env):
        # the reference rows that need no model (this worker's scoring queue); the SmolLM2 rows wait on gpu
        platform = [s for s in queue_reference_rows([loaded]) if job_queue(s) == "scoring"]
        assert platform, "FrozenLake has reference methods to run"
        wait_for(lambda: not Submission.objects.filter(pk__in=[s.pk for s in platform])
                 .exclude(state__in=Submission.FINAL_STATES).exists(), timeout=180)
        verified = {(s.method_name, s.target, s.modality) for s in Submission.objects.filter(
            pk__in=[s.pk for s in platform], state=Submission.FINISHED)}
        _step(f"{len(verified)} verified rows on {KEY}'s test split")

        ids, labels = actor_points(frozenlake, "test")
        scores = labels + np.random.default_rng(1).normal(0, labels.std(), len(ids))
        resp = api.post("/api/v1/submissions/", {
            "file": SimpleUploadedFile("p.csv", csv_bytes(ids, scores)), "dataset": KEY, "split": "test",
            "target": "q", "method_name": "spender", "description": "A file that spends the budget."},
            format="multipart")
        assert resp.status_code == 201, resp.content
        mine = resp.json()["id"]
        wait_for(lambda: Submission.objects.get(pk=mine).is_final, timeout=120)
        sub = Submission.objects.get(pk=mine)
        assert sub.state == Submission.FINISHED and sub.ladder_climbed
        row = SplitBudget.objects.get(dataset=loaded, split="test", target="q")
        assert (row.size, row.spent, row.state) == (1, 1, budget.SPENT)
        assert list(Release.objects.filter(budget=row).values_list("kind", "submission_id")) == [(Release.LADDER, mine)]
        _step(f"submission {mine} climbed and spent the budget ({row.spent} of {row.size}): {row.state}")

        refresh = wait_for(lambda: Refresh.objects.filter(dataset=loaded).first(), timeout=60)
        assert refresh.reason == Refresh.SPENT and refresh.number == 1 and refresh.build is not None
        _step(f"fresh split {refresh.number} asked for: dataset build #{refresh.build_id}")
        refused = api.post("/api/v1/submissions/", {
            "file": SimpleUploadedFile("p.csv", csv_bytes(ids, labels)), "dataset": KEY, "split": "test",
            "target": "q", "method_name": "late", "description": "d"}, format="multipart")
        assert refused.status_code == 409 and "spent" in refused.json()["errors"]["split"][0]
        _step(f"an upload to the spent split: {refused.status_code} {refused.json()['errors']['split'][0][:80]}...")

        done = wait_for(lambda: Refresh.objects.filter(pk=refresh.pk, state=Refresh.DONE).first(), timeout=300)
        build = DatasetBuild.objects.get(pk=refresh.build_id)
        fresh = done.replacement
        assert build.status == DatasetBuild.FINISHED and fresh.key == f"{KEY}-r1" == build.dataset_key
        assert _states(fresh, "train") == _states(loaded, "train") and _states(fresh, "dev") == _states(loaded, "dev")
        assert not _states(fresh, "test") & _states(loaded, "test")  # drawn anew from the secret
        _step(f"{fresh.key} built and loaded: train and dev identical, {len(_states(fresh, 'test'))} new test states")

        retired = SplitBudget.objects.filter(dataset=loaded, split="test")
        assert {(r.target, r.state, r.replaced_by_id) for r in retired} == {
            ("q", budget.RETIRED, fresh.pk), ("v", budget.RETIRED, fresh.pk)}
        _step(f"{KEY}'s test budgets retired, replaced by {fresh.key}")

        reruns = done.reruns["baselines"]
        assert len(reruns) == len(verified)
        wait_for(lambda: not Submission.objects.filter(pk__in=reruns).exclude(
            state__in=Submission.FINAL_STATES).exists(), timeout=180)
        rerun = Submission.objects.filter(pk__in=reruns)
        assert {(s.method_name, s.target, s.modality) for s in rerun} == verified
        assert set(rerun.values_list("state", flat=True)) == {Submission.FINISHED}
        _step(f"{len(reruns)} verified rows re-run on {fresh.key}")

    board = client.get(f"/boards/{fresh.key}:q:text/", {"format": "json", "all": "1"}).json()
    ranked = {r["submission_id"] for r in board["rows"]}
    with_value = rerun.filter(target="q", modality="text", results__metric="spearman", results__value__isnull=False)
    assert with_value.exists() and set(with_value.values_list("pk", flat=True)) <= ranked  # (a constant method has none)
    assert all(r["rank"] for r in board["rows"])
    _step(f"the fresh board ranks {len(board['rows'])} rows")
    old = client.get(f"/boards/{KEY}:q:text/").content.decode()
    assert 'id="retired-board"' in old and "frozen since" in old and fresh.key in old
    self_reported = client.get(f"/boards/{KEY}:q:text/", {"source": "self-reported"}).content.decode()
    assert f'data-submission="{mine}"' in self_reported  # the uploaded file stays with the split it was scored on
    _step(f"{KEY}'s board is frozen and marked retired")
    late = api.post("/api/v1/submissions/", {
        "file": SimpleUploadedFile("p.csv", csv_bytes(ids, labels)), "dataset": KEY, "split": "test", "target": "q",
        "method_name": "late", "description": "d"}, format="multipart")
    assert late.status_code == 409 and "retired" in late.json()["errors"]["split"][0] and fresh.key in late.content.decode()
    _step(f"an upload to the retired split: {late.status_code}, pointed to {fresh.key}")

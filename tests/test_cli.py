"""The ``qval`` command line, run against a dataset directory and a live site with a real worker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from qval import cli, metric_registry, schema
from qval.envs import registry

KEY = "{0.slug}@{0.version}".format(registry.BUILDERS["frozenlake"]()[1])


@pytest.fixture
def dataset_dir(frozenlake: schema.Dataset, tmp_path: Path) -> Path:
    return frozenlake.write(tmp_path / "frozenlake")


@pytest.fixture
def no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No token, server or config file from the machine running the tests."""
    for var in ("QVAL_TOKEN", "QVAL_SERVER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("QVAL_CONFIG", str(tmp_path / "absent.json"))


def _points(ds: schema.Dataset, split: str) -> tuple[list[str], np.ndarray]:
    ids = ds.point_ids(split, "q")
    return ids, np.array([ds.q_labels[i] for i in ids])


def _write(path: Path, ids: list[str], scores: np.ndarray) -> Path:
    pd.DataFrame({"id": ids, "score": scores}).to_csv(path, index=False)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_evaluate_against_a_dataset_directory_matches_scipy(dataset_dir, frozenlake, tmp_path, capsys, no_config) -> None:
    ids, labels = _points(frozenlake, "dev")
    scores = labels + np.random.default_rng(3).normal(0, 0.2, len(labels))
    preds = _write(tmp_path / "p.csv", ids, scores)
    code, out, _ = _run(capsys, "evaluate", str(preds), "--dataset", str(dataset_dir), "--split", "dev",
                        "--bootstrap", "0", "--json")
    assert code == 0
    rows = {r["metric"]: r for r in json.loads(out)}
    assert rows["spearman"]["value"] == pytest.approx(stats.spearmanr(labels, scores).statistic, abs=1e-9)
    assert rows["kendall_tau"]["value"] == pytest.approx(stats.kendalltau(labels, scores).statistic, abs=1e-9)
    code, out, _ = _run(capsys, "evaluate", str(preds), "--dataset", str(dataset_dir), "--bootstrap", "0")
    assert code == 0 and f"{len(ids)} of {len(ids)} evaluation points provided" in out
    assert out.splitlines()[2].startswith("spearman")
    # What the site shows of FrozenLake (no negative label): no sign agreement, and the same note why.
    assert rows["sign_agreement"]["shown"] is False and rows["spearman"]["shown"] is True
    assert "sign_agreement" not in out and metric_registry.ONE_SIGN_NOTE in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--split", "test"], "split 'test' has hidden labels"),
        (["--dataset", "/nonexistent/dir"], "cannot reach the QVal server"),
    ],
)
def test_evaluate_refuses_hidden_labels_and_unreachable_servers(argv, message, dataset_dir, frozenlake, tmp_path,
                                                                capsys, no_config, monkeypatch) -> None:
    monkeypatch.setenv("QVAL_SERVER", "http://127.0.0.1:9")  # nothing listens on the discard port
    ids, labels = _points(frozenlake, "dev")
    preds = _write(tmp_path / "p.csv", ids, labels)
    code, _, err = _run(capsys, "evaluate", str(preds), "--dataset", str(dataset_dir), *argv)
    assert code == 1 and message in err and "Traceback" not in err


def test_evaluate_reports_every_problem_of_a_bad_file(dataset_dir, frozenlake, tmp_path, capsys, no_config) -> None:
    ids, _ = _points(frozenlake, "dev")
    bad = tmp_path / "bad.csv"
    bad.write_text(f"id,score\n{ids[0]},0.5\n{ids[0]},0.7\nnope,0.1\n")
    code, _, err = _run(capsys, "evaluate", str(bad), "--dataset", str(dataset_dir))
    assert code == 1
    assert "invalid predictions file" in err and ids[0] in err and "nope" in err
    bad.write_text(f"id,score\n{ids[0]},0.5\n{ids[1]},abc\n")
    code, _, err = _run(capsys, "evaluate", str(bad), "--dataset", str(dataset_dir))
    assert code == 1 and "line 3: score 'abc' is not a number" in err
    code, _, err = _run(capsys, "evaluate", str(tmp_path / "missing.csv"), "--dataset", str(dataset_dir))
    assert code == 1 and "missing.csv" in err


def test_submit_needs_a_token(tmp_path, capsys, no_config) -> None:
    code, _, err = _run(capsys, "submit", str(tmp_path / "x.csv"), "--dataset", KEY, "--split", "test",
                        "--target", "q", "--method", "m")
    assert code == 1 and "no API token" in err and "http://127.0.0.1:8000/accounts/token/" in err  # the self-serve page


def test_argument_errors_are_reported_by_argparse(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["submit", "f.csv", "--dataset", KEY, "--split", "holdout", "--target", "q", "--method", "m"])
    assert exc.value.code == 2
    assert "invalid choice: 'holdout'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.worker
def test_cli_against_a_live_site(live_server, celery_worker_process, loaded, frozenlake, user, tmp_path, capsys,
                                 no_config, monkeypatch, settings) -> None:
    from rest_framework.authtoken.models import Token

    settings.QVAL_TEST_QUOTA_PER_DAY = 1
    monkeypatch.setenv("QVAL_SERVER", live_server.url)

    # download, then evaluate by slug: the same numbers as from the dataset files.
    code, out, _ = _run(capsys, "download", "frozenlake-8x8", "--split", "dev", "--out", str(tmp_path / "dev.parquet"))
    assert code == 0 and "dev.parquet" in out
    dev = pd.read_parquet(tmp_path / "dev.parquet")
    assert len(dev) == sum(len(s.candidates) for s in frozenlake.states_in("dev"))
    ids, labels = _points(frozenlake, "dev")
    scores = labels + np.random.default_rng(0).normal(0, 0.3, len(labels))
    preds = _write(tmp_path / "dev.csv", ids, scores)
    code, out, _ = _run(capsys, "evaluate", str(preds), "--dataset", "frozenlake-8x8", "--bootstrap", "0", "--json")
    assert code == 0
    assert {r["metric"]: r["value"] for r in json.loads(out)}["spearman"] == pytest.approx(
        stats.spearmanr(labels, scores).statistic, abs=1e-9)
    code, _, err = _run(capsys, "download", "no-such-dataset", "--split", "dev")
    assert code == 1 and "404" in err

    # A bad token is refused with a clear message.
    monkeypatch.setenv("QVAL_TOKEN", "0" * 40)
    code, _, err = _run(capsys, "status", "1")
    assert code == 1 and "refused the token" in err

    # Submit through the API, follow it to the end, print the table.
    monkeypatch.setenv("QVAL_TOKEN", Token.objects.create(user=user).key)
    test_ids, test_labels = _points(frozenlake, "test")
    noisy = test_labels + np.random.default_rng(1).normal(0, 0.1, len(test_labels))
    code, out, err = _run(capsys, "submit", str(_write(tmp_path / "t.csv", test_ids, noisy)), "--dataset", KEY,
                          "--split", "test", "--target", "q", "--method", "cli-noisy", "--timeout", "120",
                          "--description", "Noisy labels, for the CLI test.", "--open-weights", "yes")
    assert code == 0, err
    assert "received" in err and "finished" in err
    line = next(x for x in out.splitlines() if x.startswith("spearman"))
    assert f"{round(stats.spearmanr(test_labels, noisy).statistic, 3):.4f}" in line  # hidden split: 3 decimals
    sub_id = int(out.split()[1])
    code, out, _ = _run(capsys, "status", str(sub_id))
    assert code == 0 and "finished" in out

    # The quota (1 a day here) is spent: the next test-split upload is refused.
    code, _, err = _run(capsys, "submit", str(tmp_path / "t.csv"), "--dataset", KEY, "--split", "test",
                        "--target", "q", "--method", "again", "--private")
    assert code == 1 and "429" in err and "quota" in err

    # A file that fails validation ends failed, with its problems printed; exit status 1.
    bad = tmp_path / "bad.csv"
    bad.write_text("id,score\nnot-an-id,0.5\n")
    code, out, _ = _run(capsys, "submit", str(bad), "--dataset", KEY, "--split", "dev", "--target", "q",
                        "--method", "bad")
    assert code == 1 and "failed" in out and "not-an-id" in out


def test_the_installed_entry_point_runs() -> None:
    qval = Path(sys.executable).with_name("qval")
    result = subprocess.run([str(qval), "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "evaluate" in result.stdout and "submit" in result.stdout


def test_evaluate_with_the_reference_rules_keeps_infinite_scores(dataset_dir, frozenlake, tmp_path, capsys,
                                                                 no_config) -> None:
    ids, labels = _points(frozenlake, "dev")
    scores = labels.copy()
    scores[int(np.argmax(labels))] = np.inf  # kept and ranked, as scipy ranks it
    preds = _write(tmp_path / "inf.csv", ids, scores)
    code, _, err = _run(capsys, "evaluate", str(preds), "--dataset", str(dataset_dir), "--bootstrap", "0")
    assert code != 0 and "infinite" in err
    code, out, _ = _run(capsys, "evaluate", str(preds), "--dataset", str(dataset_dir), "--bootstrap", "0",
                        "--rules", "qval-v1.0", "--json")
    assert code == 0
    rows = {r["metric"]: r for r in json.loads(out)}
    assert rows["spearman"]["value"] == pytest.approx(stats.spearmanr(labels, scores).statistic, abs=1e-9)
    assert rows["spearman"]["value"] > 0.99 and rows["pearson"]["value"] is None

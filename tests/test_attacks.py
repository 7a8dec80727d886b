"""Attacks on the site, each reproduced as an adversarial user would try it, and shown to fail.

Every class covers one channel or weakness of the threat model (README, "Threat model"); a new
channel gets a new class here.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from qval import build, safejson
from qval import containers as qc
from qval import predictions as qpred
from qval.scoring import truth_from_dataset

KEY = "{0.slug}@{0.version}".format(build.BUILDERS["frozenlake"]()[1])
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
        one_line = b'{"id": "a", "score": 1' + b"".join(b', "k%d": 1' % i for i in range(100_000)) + b"}\n"
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
        from submissions.models import Submission

        data = {"dataset": KEY, "split": "dev", "target": "q", "method_name": "deep",
                "file": SimpleUploadedFile(name, content)}
        resp = api.post("/api/v1/submissions/", data, format="multipart")
        assert resp.status_code == 201, resp.content
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
        from workers.tasks import run_container_submission

        settings.QVAL_CONTAINER_WORK_ROOT = engine.work_root
        settings.QVAL_CONTAINER_LIMITS = {**settings.QVAL_CONTAINER_LIMITS, "timeout_s": 60.0, "memory_mb": 256}
        data = {"kind": "container", "dataset": "frozenlake-8x8", "split": "dev", "target": "q",
                "method_name": "deep", "backbone": "none", "file": SimpleUploadedFile("deep.tar", deep_tar.read_bytes())}
        resp = api.post("/api/v1/submissions/", data, format="multipart")
        assert resp.status_code == 201, resp.content
        sub_id = resp.json()["submissions"][0]["id"]
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
    (context / "method.py").write_text(method)
    (context / "Containerfile").write_text(f'FROM {base_image}\nCOPY method.py /method.py\nCMD ["python3", "/method.py"]\n')
    tag = f"localhost/qval-test-deep:{uuid.uuid4().hex[:8]}"
    built = engine.call("build", "-q", "-t", tag, str(context))
    assert built.returncode == 0, built.stderr
    saved = engine.call("save", "-o", str(context / "deep.tar"), tag)
    engine.call("rmi", tag)
    assert saved.returncode == 0, saved.stderr
    return context / "deep.tar"

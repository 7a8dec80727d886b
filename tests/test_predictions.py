"""Tests for :mod:`qval.predictions`: parsing and validating uploaded prediction files."""

from __future__ import annotations

import io
import json
import math
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from qval.predictions import (
    EXAMPLE_LIMIT,
    FORMATS,
    MAX_UPLOAD_BYTES,
    Coverage,
    Predictions,
    Problem,
    SplitIndex,
    ValidationFailed,
    detect_format,
    parse,
    validate,
)

SCORE_HINT = (
    "Scores must be numbers such as 0.25 or -1e-3; leave a score empty "
    "(or write nan or null) to give no prediction for that row."
)


def problems_of(data: bytes, filename: str, **kwargs: object) -> list[Problem]:
    """The problems :func:`parse` reports for ``data``."""
    with pytest.raises(ValidationFailed) as caught:
        parse(data, filename, **kwargs)  # type: ignore[arg-type]
    return caught.value.problems


def only_problem(data: bytes, filename: str, **kwargs: object) -> Problem:
    found = problems_of(data, filename, **kwargs)
    assert len(found) == 1, found
    return found[0]


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def as_list(values: np.ndarray) -> list[object]:
    """Floats with NaN turned into None, so lists compare with ``==``."""
    return [None if isinstance(v, float) and math.isnan(v) else v for v in values.tolist()]


# -- format detection ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("preds.csv", "csv"),
        ("PREDS.CSV", "csv"),
        ("dir/preds.jsonl", "jsonl"),
        ("preds.ndjson", "jsonl"),
        ("preds.parquet", "parquet"),
        ("preds.pq", "parquet"),
        ("preds.json", "reference-json"),
    ],
)
def test_detect_format_by_extension(filename: str, expected: str) -> None:
    assert detect_format(filename, b"id,score") == expected
    assert expected in FORMATS


def test_detect_format_parquet_magic_wins_over_name() -> None:
    assert detect_format("upload.bin", b"PAR1\x15\x04") == "parquet"
    assert detect_format("upload.csv", b"PAR1\x15\x04") == "parquet"


def test_detect_format_unknown_extension() -> None:
    with pytest.raises(ValidationFailed) as caught:
        detect_format("preds.txt", b"id,score")
    (problem,) = caught.value.problems
    assert problem.code == "unknown_format"
    assert "'preds.txt'" in problem.message
    assert ".csv, .jsonl (or .ndjson), .parquet (or .pq), or .json" in problem.message


# -- CSV -------------------------------------------------------------------------------------
def test_csv_happy_path_keeps_ids_as_text() -> None:
    data = b"id,score,comment\n007,0.5,x\n1e3, -2.5e-1 ,y\n42,3,z\n"
    preds = parse(data, "preds.csv")
    assert preds.format == "csv"
    assert preds.num_rows == 3
    assert preds.ids.tolist() == ["007", "1e3", "42"]
    assert preds.scores.dtype == np.float64
    assert preds.scores.tolist() == [0.5, -0.25, 3.0]
    assert preds.samples is None
    assert preds.positions.tolist() == [2, 3, 4]
    assert preds.by_id() == {"007": 0.5, "1e3": -0.25, "42": 3.0}


@pytest.mark.parametrize("missing", ["", "nan", "NaN", "NAN", "null", "NULL", "  nan  "])
def test_csv_missing_scores_are_nan(missing: str) -> None:
    preds = parse(f"id,score\na,{missing}\nb,1\n".encode(), "p.csv")
    assert as_list(preds.scores) == [None, 1.0]


def test_csv_line_numbers_skip_blank_lines_and_handle_crlf() -> None:
    data = b"\r\nid,score\r\na,1\r\n\r\n\r\nb,x\r\nc,2\r\n"
    problem = only_problem(data, "p.csv")
    assert problem.code == "non_numeric"
    assert problem.rows == (6,)
    assert problem.message == f"line 6: score 'x' is not a number. {SCORE_HINT}"


def test_csv_quoted_fields_with_line_breaks_keep_line_numbers() -> None:
    data = b'id,score,note\na,1,"two\nlines"\nb,oops,"three\nlines\nhere"\nc,2,x\n'
    problem = only_problem(data, "p.csv")
    assert problem.rows == (4,)
    assert problem.message.startswith("line 4: score 'oops' is not a number")
    preds = parse(data.replace(b"oops", b"0.5"), "p.csv")
    assert preds.positions.tolist() == [2, 4, 7]
    assert preds.ids.tolist() == ["a", "b", "c"]


def test_csv_huge_quoted_field_falls_back_to_data_row_numbers() -> None:
    long_note = "x\n" * 70_000  # longer than the csv module's field limit
    data = f'id,score,note\na,1,"{long_note}"\nb,zz,y\n'.encode()
    problem = only_problem(data, "p.csv")
    assert problem.rows == (2,)
    assert problem.message.startswith("data row 2: score 'zz' is not a number")


def test_csv_all_row_problems_are_reported_together() -> None:
    data = b"id,score\na,abc\nb,inf\n,1\nc,-Infinity\nd,1..2\n"
    found = {p.code: p for p in problems_of(data, "p.csv")}
    assert list(found) == ["bad_id", "non_numeric", "non_finite"]
    assert found["bad_id"].rows == (4,)
    assert found["bad_id"].message.startswith("line 4: id is empty.")
    assert found["non_numeric"].rows == (2, 6)
    assert found["non_numeric"].message == (
        "2 scores are not numbers: line 2: score 'abc' is not a number; "
        f"line 6: score '1..2' is not a number. {SCORE_HINT}"
    )
    assert found["non_finite"].rows == (3, 5)
    assert found["non_finite"].message.startswith(
        "2 scores are infinite: line 3: score 'inf' is infinite; line 5: score '-Infinity' is infinite."
    )


def test_many_bad_rows_show_ten_examples_and_the_total() -> None:
    rows = "".join(f"id{i},bad{i}\n" for i in range(25))
    problem = only_problem(f"id,score\n{rows}".encode(), "p.csv")
    assert problem.code == "non_numeric"
    assert problem.rows == tuple(range(2, 2 + EXAMPLE_LIMIT))
    assert problem.message.startswith("25 scores are not numbers: line 2: score 'bad0' is not a number;")
    assert "line 11: score 'bad9' is not a number; and 15 more." in problem.message
    assert "bad10" not in problem.message


def test_csv_long_values_are_shortened_in_messages() -> None:
    problem = only_problem(b"id,score\na," + b"z" * 100 + b"\n", "p.csv")
    assert f"score '{'z' * 37}...' is not a number" in problem.message


def test_csv_missing_column_lists_found_columns() -> None:
    problem = only_problem(b"a,b\n1,2\n", "p.csv")
    assert problem.code == "missing_column"
    assert problem.message == (
        "missing columns 'id' and 'score'; found columns: a, b. "
        "The first line must be the header, for example: id,score"
    )
    problem = only_problem(b"id,Score\nx,1\n", "p.csv")
    assert problem.message.startswith(
        "missing column 'score'; found columns: id, Score "
        "(column names are case-sensitive: write 'score', not 'Score')"
    )


def test_csv_header_names_may_have_surrounding_spaces() -> None:
    preds = parse(b"id , score\nx,1\n", "p.csv")
    assert preds.ids.tolist() == ["x"]
    assert preds.scores.tolist() == [1.0]


def test_csv_duplicate_header_column() -> None:
    problem = only_problem(b"id,score,id\n1,2,3\n", "p.csv")
    assert problem.code == "bad_header"
    assert problem.message == "column 'id' appears more than once; found columns: id, score, id"


def test_csv_ragged_rows_name_their_lines() -> None:
    problem = only_problem(b"id,score\na,1\nb,2,3\n\nc\nd,4\n", "p.csv")
    assert problem.code == "parse"
    assert problem.rows == (3, 5)
    assert problem.message.startswith(
        "2 records could not be read: line 3: expected 2 fields like the header, found 3; "
        "line 5: expected 2 fields like the header, found 1. Every line must have"
    )


def test_csv_many_ragged_rows_keep_the_first_ten() -> None:
    rows = "".join(f"id{i},1,extra\n" for i in range(12))
    problem = only_problem(f"id,score\n{rows}".encode(), "p.csv")
    assert problem.code == "parse"
    assert problem.rows == tuple(range(2, 12))
    assert problem.message.startswith("12 records could not be read: line 2: expected 2 fields")
    assert "; and 2 more. Every line" in problem.message


def test_csv_unclosed_quote() -> None:
    problem = only_problem(b'id,score\na,1\n"b,2\nc,3\n', "p.csv")
    assert problem.code == "parse"
    assert problem.rows == (3,)
    assert problem.message.startswith(
        "line 3: expected 2 fields like the header, found 1 in a record running on to line 4 "
        "(a quote may not be closed)."
    )


def test_csv_sample_column() -> None:
    data = b"id,score,sample\na,1,0\nb,2,0\na,3,1\nb,4, 1 \n"
    preds = parse(data, "p.csv")
    assert preds.samples is not None
    assert preds.samples.dtype == np.int64
    assert preds.samples.tolist() == [0, 0, 1, 1]
    assert preds.ids.tolist() == ["a", "b", "a", "b"]
    with pytest.raises(ValueError, match="sample column"):
        preds.by_id()


def test_csv_bad_samples() -> None:
    data = b"id,score,sample\na,1,0\nb,2,x\nc,3,-1\nd,4,1.5\ne,5,\nf,6,2.0\n"
    problem = only_problem(data, "p.csv")
    assert problem.code == "bad_sample"
    assert problem.rows == (3, 4, 5, 6)
    assert problem.message == (
        "4 rows have an invalid sample: line 3: sample 'x' is not a whole number >= 0; "
        "line 4: sample '-1' is not a whole number >= 0; line 5: sample '1.5' is not a whole number >= 0; "
        "line 6: sample is missing. The sample column must hold whole numbers >= 0."
    )


# -- encoding, emptiness, size -----------------------------------------------------------
def test_non_utf8_names_the_byte_offset() -> None:
    data = "id,score\ncafé,1\n".encode("latin-1")
    problem = only_problem(data, "p.csv")
    assert problem.code == "encoding"
    assert problem.message.startswith(
        "the file is not valid UTF-8: byte 0xE9 at byte offset 12 (line 2) cannot be decoded"
    )


def test_non_utf8_offset_across_decoding_chunks() -> None:
    prefix = b"id,score\n" + b"a,1\n" * 300_000  # 1.2 MB: the bad byte is in the second chunk
    problem = only_problem(prefix + b"\xc3(,1\n", "p.csv")
    assert problem.code == "encoding"
    assert f"byte 0xC3 at byte offset {len(prefix):,} (line 300002)" in problem.message


def test_non_utf8_offset_after_a_character_split_between_chunks() -> None:
    prefix = b"id,score\n" + b"a" * (1024 * 1024 - 10)  # "é" straddles the 1 MiB chunk boundary
    problem = only_problem(prefix + "é".encode() + b"\xff,1\n", "p.csv")
    assert f"byte 0xFF at byte offset {len(prefix) + 2:,} (line 2)" in problem.message


def test_utf8_bom_is_stripped() -> None:
    preds = parse("\ufeffid,score\nünï,1\n".encode(), "p.csv")
    assert preds.ids.tolist() == ["ünï"]
    preds = parse(b'\xef\xbb\xbf{"id": "a", "score": 1}\n', "p.jsonl")
    assert preds.ids.tolist() == ["a"]


@pytest.mark.parametrize("filename", ["p.csv", "p.jsonl", "p.json"])
@pytest.mark.parametrize("data", [b"", b"\xef\xbb\xbf", b" \n\r\n\t"])
def test_empty_file(filename: str, data: bytes) -> None:
    problem = only_problem(data, filename, reference_ids=["a"])
    assert problem == Problem("empty", "the file is empty")


def test_header_only_csv_is_empty() -> None:
    problem = only_problem(b"id,score\n\n", "p.csv")
    assert problem == Problem("empty", "the file has a header line but no data rows")


def test_too_large_bytes() -> None:
    problem = only_problem(b"id,score\na,1\n", "p.csv", max_bytes=10)
    assert problem == Problem("too_large", "the file is 13 bytes; the upload limit is 10 bytes")
    assert parse(b"id,score\na,1\n", "p.csv", max_bytes=13).num_rows == 1


def test_too_large_path_is_refused_from_its_size(tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    path.write_bytes(b"id,score\n" + b"a,1\n" * 1000)
    with pytest.raises(ValidationFailed) as caught:
        parse(path, "big.csv", max_bytes=2048)
    assert caught.value.problems == [Problem("too_large", "the file is 3.9 KiB; the upload limit is 2.0 KiB")]
    assert parse(str(path), "big.csv").num_rows == 1000
    assert MAX_UPLOAD_BYTES == 100 * 1024 * 1024


def test_file_objects_are_read_up_to_the_limit() -> None:
    assert parse(io.BytesIO(b"id,score\na,1\n"), "p.csv").ids.tolist() == ["a"]
    with pytest.raises(ValidationFailed) as caught:
        parse(io.BytesIO(b"x" * (3 * 1024 * 1024)), "p.csv", max_bytes=1024 * 1024)
    assert caught.value.problems == [
        Problem("too_large", "the file is larger than 1.0 MiB; the upload limit is 1.0 MiB")
    ]


# -- JSON Lines ------------------------------------------------------------------------------
def test_jsonl_happy_path() -> None:
    data = (
        b'{"id": "s1", "score": 0.5, "extra": {"nested": [1]}}\n'
        b"\n"
        b'{"id": "2020-01-01", "score": 2}\n'
        b"   \n"
        b'{"id": "s3", "score": null}\n'
        b'{"id": "s4"}\n'
    )
    preds = parse(data, "p.jsonl")
    assert preds.format == "jsonl"
    assert preds.ids.tolist() == ["s1", "2020-01-01", "s3", "s4"]
    assert as_list(preds.scores) == [0.5, 2.0, None, None]
    assert preds.positions.tolist() == [1, 3, 5, 6]
    assert preds.samples is None


def test_jsonl_lenient_values_pyarrow_rejects() -> None:
    data = (
        b'{"id": 7, "score": NaN, "sample": 0}\n'
        b'{"id": "007", "score": "0.25", "sample": 0}\n'
        b'{"id": 7, "score": 1e2, "sample": 1}\n'
    )
    preds = parse(data, "p.ndjson")
    assert preds.ids.tolist() == ["7", "007", "7"]
    assert as_list(preds.scores) == [None, 0.25, 100.0]
    assert preds.samples is not None and preds.samples.tolist() == [0, 0, 1]


def test_jsonl_problems_name_their_lines() -> None:
    data = (
        b'{"id": "a", "score": 1}\n'
        b'{"id": "b", "score": "high"}\n'
        b"[1, 2]\n"
        b"not json\n"
        b'{"id": 1.5, "score": Infinity}\n'
        b'{"id": null, "score": true}\n'
        b'{"id": "c", "score": 1} {"id": "d", "score": 2}\n'
    )
    found = {p.code: p for p in problems_of(data, "p.jsonl")}
    assert list(found) == ["parse", "bad_id", "non_numeric", "non_finite"]
    assert found["parse"].rows == (3, 4, 7)
    assert found["parse"].message == (
        "3 records could not be read: line 3: expected a JSON object, found an array; "
        "line 4: invalid JSON (Expecting value at column 1); "
        "line 7: invalid JSON (Extra data at column 25). "
        'Every line must be one JSON object such as {"id": "s1", "score": 0.5}.'
    )
    assert found["bad_id"].rows == (5, 6)
    assert "line 5: id must be a string, got 1.5; line 6: id is missing." in found["bad_id"].message
    assert found["non_numeric"].rows == (2, 6)
    assert "line 2: score 'high' is not a number; line 6: score 'true' is not a number" in (
        found["non_numeric"].message
    )
    assert found["non_finite"].rows == (5,)
    assert found["non_finite"].message.startswith("line 5: score 'inf' is infinite.")


def test_jsonl_fast_path_problems_name_their_lines() -> None:
    data = b'{"id": "a", "score": 1}\n\n{"id": "", "score": 2}\n{"id": "c", "score": Infinity, "sample": -1}\n'
    found = {p.code: p for p in problems_of(data, "p.jsonl")}
    assert list(found) == ["bad_id", "non_finite", "bad_sample"]
    assert found["bad_id"].rows == (3,)
    assert found["bad_id"].message.startswith("line 3: id is empty.")
    assert found["non_finite"].rows == (4,)
    assert found["non_finite"].message.startswith("line 4: score Infinity is infinite.")
    assert found["bad_sample"].rows == (1, 3, 4)
    assert found["bad_sample"].message.startswith(
        "3 rows have an invalid sample: line 1: sample is missing; line 3: sample is missing; "
        "line 4: sample -1 is not a whole number >= 0."
    )


def test_jsonl_two_objects_on_one_line() -> None:
    data = b'{"id": "a", "score": 1}\n{"id": "b", "score": 2} {"id": "c", "score": 3}\n{"id": "d", "score": 4}\n'
    problem = only_problem(data, "p.jsonl")
    assert problem.code == "parse"
    assert problem.rows == (2,)
    assert problem.message.startswith("line 2: invalid JSON (Extra data at column 25).")


def test_jsonl_missing_key() -> None:
    problem = only_problem(b'{"ident": "a", "score": 1}\n{"ident": "b", "value": 2}\n', "p.jsonl")
    assert problem.code == "missing_column"
    assert problem.message.startswith("missing key 'id'; found keys: ident, score, value.")


# -- Parquet ---------------------------------------------------------------------------------
def test_parquet_happy_path() -> None:
    table = pa.table({"id": ["007", "b"], "score": pa.array([0.5, None]), "other": [1, 2]})
    preds = parse(parquet_bytes(table), "p.parquet")
    assert preds.format == "parquet"
    assert preds.ids.tolist() == ["007", "b"]
    assert as_list(preds.scores) == [0.5, None]
    assert preds.positions.tolist() == [1, 2]


def test_parquet_from_pandas_with_integer_ids_and_categorical_samples() -> None:
    frame = pd.DataFrame(
        {"id": [10, 11, 10], "score": np.array([1, 2, 3], dtype=np.int32), "sample": pd.Categorical([0, 0, 1])}
    )
    buf = io.BytesIO()
    frame.to_parquet(buf)
    preds = parse(buf.getvalue(), "upload")  # recognised by its magic bytes
    assert preds.ids.tolist() == ["10", "11", "10"]
    assert preds.scores.tolist() == [1.0, 2.0, 3.0]
    assert preds.samples is not None and preds.samples.tolist() == [0, 0, 1]


def test_parquet_problems_name_rows() -> None:
    table = pa.table({"id": ["a", None, "c"], "score": [True, False, None]})
    found = {p.code: p for p in problems_of(parquet_bytes(table), "p.parquet")}
    assert found["bad_id"].rows == (2,)
    assert found["bad_id"].message.startswith("row 2: id is missing.")
    assert found["non_numeric"].rows == (1, 2)
    assert found["non_numeric"].message.startswith(
        "2 scores are not numbers: row 1: score true is not a number; row 2: score false is not a number."
    )


def test_parquet_float_ids_are_rejected() -> None:
    problem = only_problem(parquet_bytes(pa.table({"id": [1.5], "score": [1.0]})), "p.parquet")
    assert problem.code == "bad_id"
    assert problem.message.startswith("row 1: id must be a string, got 1.5.")


def test_parquet_structure_problems() -> None:
    problem = only_problem(parquet_bytes(pa.table({"id": ["a"], "value": [1.0]})), "p.parquet")
    assert problem == Problem("missing_column", "missing column 'score'; found columns: id, value")
    no_rows = pa.table({"id": pa.array([], pa.string()), "score": pa.array([], pa.float64())})
    problem = only_problem(parquet_bytes(no_rows), "p.pq")
    assert problem == Problem("empty", "the Parquet file has no rows")
    problem = only_problem(b"id,score\na,1\n", "p.parquet")
    assert problem == Problem("parse", "not a Parquet file: it does not start with the Parquet magic bytes PAR1")
    problem = only_problem(b"PAR1 this is not really parquet", "p.parquet")
    assert problem.code == "parse"
    assert problem.message.startswith("the Parquet file could not be read: ")


def test_parquet_invalid_utf8_text() -> None:
    ids = pa.array([b"caf\xe9"], pa.binary()).view(pa.string())
    problem = only_problem(parquet_bytes(pa.table({"id": ids, "score": [1.0]})), "p.parquet")
    assert problem.code == "encoding"
    assert problem.message.startswith("the Parquet file holds text that is not valid UTF-8")


# -- reference JSON ----------------------------------------------------------------------------
POINTS = ["q0", "q1", "q2", "q3"]


def test_reference_json_prefix() -> None:
    data = json.dumps({"method_name": "mc-return", "values": [0.5, None, 2]}).encode()
    preds = parse(data, "ref.json", reference_ids=POINTS)
    assert preds.format == "reference-json"
    assert preds.method_name == "mc-return"
    assert preds.ids.tolist() == ["q0", "q1", "q2"]
    assert as_list(preds.scores) == [0.5, None, 2.0]
    assert preds.positions.tolist() == [0, 1, 2]


def test_reference_json_too_long() -> None:
    data = json.dumps({"method_name": "m", "values": [1, 2, 3, 4, 5]}).encode()
    problem = only_problem(data, "ref.json", reference_ids=POINTS)
    assert problem == Problem("wrong_length", "values has 5 entries but the split has 4 points")


def test_reference_json_non_numeric_entries_give_their_index() -> None:
    data = b'{"method_name": "m", "values": [1, "abc", 2, true, NaN]}'
    problem = only_problem(data + b"", "ref.json", reference_ids=POINTS + ["q4"])
    assert problem.code == "non_numeric"
    assert problem.rows == (1, 3)
    assert problem.message == (
        "2 scores are not numbers: values[1]: score 'abc' is not a number; "
        f"values[3]: score 'true' is not a number. {SCORE_HINT}"
    )


def test_reference_json_structure_problems() -> None:
    cases = {
        b"[1, 2]": ("parse", 'expected {"method_name": "...", "values": [number or null, ...]}, found an array'),
        b'{"method_name": "m"}': ("missing_column", "missing key 'values'; found keys: method_name;"),
        b'{"values": {"a": 1}}': ("parse", "'values' must be a list, found an object;"),
        b'{"values": [1], "method_name": 3}': ("parse", "'method_name' must be a string, found a number;"),
        b'{"values": []}': ("empty", "values is empty"),
        b'{"id": "a"}\n{"id": "b"}\n': ("parse", "the file is not valid JSON: Extra data at line 2, column 1 "
                                        "(one object per line is the JSON Lines format: name the file .jsonl)"),
    }
    for data, (code, start) in cases.items():
        problem = only_problem(data, "ref.json", reference_ids=POINTS)
        assert problem.code == code, data
        assert problem.message.startswith(start), problem.message


def test_reference_json_needs_reference_ids() -> None:
    with pytest.raises(ValueError, match="reference_ids"):
        parse(b'{"values": [1]}', "ref.json")


# -- validate ----------------------------------------------------------------------------------
def test_validate_coverage() -> None:
    preds = parse(b"id,score\na,1\nc,\n", "p.csv")
    coverage = validate(preds, SplitIndex(["a", "b", "c", "d"], {"a", "b", "c", "d"}))
    assert coverage == Coverage(expected=4, provided=2, missing=2, missing_examples=("b", "d"))


def test_validate_reports_unknown_and_duplicate_ids_together() -> None:
    rows = ["a,1", "x1,1", "b,1", "a,2", "x1,1", "x2,1", "x3,1", "x4,1", "x5,1", "x6,1", "b,3"]
    preds = parse(("id,score\n" + "\n".join(rows) + "\n").encode(), "p.csv")
    with pytest.raises(ValidationFailed) as caught:
        validate(preds, SplitIndex(["a", "b"], ["a", "b"]))
    unknown, duplicate = caught.value.problems
    assert unknown.code == "unknown_id"
    assert unknown.rows == (3, 7, 8, 9, 10)  # first line of each of the first five distinct ids
    assert unknown.message == (
        "7 rows have an id that is not in this split: line 3: id 'x1' is not an id of this split; "
        "line 7: id 'x2' is not an id of this split; line 8: id 'x3' is not an id of this split; "
        "line 9: id 'x4' is not an id of this split; line 10: id 'x5' is not an id of this split; "
        "and 2 more. Ids must be the evaluation ids of the split the file is submitted to."
    )
    assert duplicate.code == "duplicate_id"
    assert duplicate.rows == (5, 6, 12)
    assert duplicate.message.startswith(
        "3 rows repeat an id given earlier: line 5: id 'a' was already given on line 2; "
        "line 6: id 'x1' was already given on line 3; line 12: id 'b' was already given on line 4."
    )
    assert str(caught.value) == f"{unknown.message}\n{duplicate.message}"


def test_validate_multi_sample() -> None:
    data = b"id,score,sample\na,1,0\nb,2,0\na,3,1\nc,4,1\n"
    preds = parse(data, "p.csv")
    coverage = validate(preds, SplitIndex(["a", "b", "c"], {"a", "b", "c"}))
    # only "a" appears in every sample
    assert coverage == Coverage(expected=3, provided=1, missing=2, missing_examples=("b", "c"))

    preds = parse(data + b"a,5,1\n", "p.csv")
    with pytest.raises(ValidationFailed) as caught:
        validate(preds, SplitIndex(["a"], {"a", "b", "c"}))
    (problem,) = caught.value.problems
    assert problem.code == "duplicate_id"
    assert problem.rows == (6,)
    assert problem.message.startswith("line 6: id 'a' was already given in sample 1 on line 4.")


def test_validate_predictions_built_by_hand_use_row_numbers() -> None:
    preds = Predictions(
        ids=np.array(["a", "zz"], dtype=object),
        scores=np.array([1.0, 2.0]),
        samples=None,
        format="csv",
        num_rows=2,
    )
    with pytest.raises(ValidationFailed) as caught:
        validate(preds, SplitIndex(["a"], frozenset({"a"})))
    assert caught.value.problems[0].rows == (2,)
    assert caught.value.problems[0].message.startswith("row 2: id 'zz' is not an id of this split.")


def test_validation_failed_pickles() -> None:
    error = ValidationFailed([Problem("empty", "the file is empty")])
    clone = pickle.loads(pickle.dumps(error))
    assert clone.problems == error.problems
    assert str(clone) == "the file is empty"


# -- size ----------------------------------------------------------------------------------------
N_LARGE = 100_000


@pytest.fixture(scope="module")
def large_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"id": [f"{i:06d}" for i in range(N_LARGE)], "score": rng.random(N_LARGE)})


@pytest.mark.parametrize("filename", ["p.csv", "p.jsonl", "p.parquet", "p.json"])
def test_large_files_parse_and_validate(large_frame: pd.DataFrame, filename: str) -> None:
    ids = large_frame["id"].tolist()
    if filename == "p.csv":
        data = large_frame.to_csv(index=False).encode()
    elif filename == "p.jsonl":
        records = large_frame.to_dict(orient="records")
        data = "".join(json.dumps(record) + "\n" for record in records).encode()
    elif filename == "p.parquet":
        data = parquet_bytes(pa.Table.from_pandas(large_frame, preserve_index=False))
    else:
        data = json.dumps({"method_name": "m", "values": large_frame["score"].tolist()}).encode()
    preds = parse(data, filename, reference_ids=ids)
    assert preds.num_rows == N_LARGE
    assert preds.ids[:3].tolist() == ["000000", "000001", "000002"]
    np.testing.assert_array_equal(preds.ids, large_frame["id"].to_numpy())
    np.testing.assert_array_equal(preds.scores, large_frame["score"].to_numpy())
    coverage = validate(preds, SplitIndex(ids, set(ids)))
    assert coverage == Coverage(expected=N_LARGE, provided=N_LARGE, missing=0, missing_examples=())


def test_large_file_error_lines_are_exact(large_frame: pd.DataFrame) -> None:
    data = large_frame.to_json(orient="records", lines=True).encode() + b'{"id": "z", "score": "bad"}\n'
    problem = only_problem(data, "p.jsonl")
    assert problem.rows == (N_LARGE + 1,)
    assert problem.message.startswith(f"line {N_LARGE + 1}: score 'bad' is not a number")

"""qval.safejson: the vectorised nesting scan agrees with a byte-by-byte reference, across
chunk boundaries, and load_json refuses what it must with the line and column."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qval import safejson


def reference_scan(data: bytes, max_depth: int, per_line: bool) -> list[int]:
    """The same measure one byte at a time: a quote after an odd run of backslashes does not
    open or close a string (outside strings too, where JSON has no backslash), brackets in
    strings do not count."""
    found: list[int] = []
    depth, in_string, escaped, reported = 0, False, False, False
    for i, b in enumerate(data):
        if per_line and b in b"\n\r":
            depth, in_string, escaped, reported = 0, False, False, False
            continue
        if b == ord('"') and not escaped:
            in_string = not in_string
        elif not in_string:
            depth += (b in b"[{") - (b in b"]}")
        escaped = b == ord("\\") and not escaped
        if depth > max_depth and not reported:
            found.append(i)
            reported = True
            if not per_line:
                break
    return found


@settings(max_examples=400, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b"\n", b"\r", b"a", b","]), max_size=80).map(b"".join),
    max_depth=st.integers(0, 4),
    per_line=st.booleans(),
    chunk=st.sampled_from([1, 2, 3, 7, 64]),
)
def test_scan_matches_the_reference(data: bytes, max_depth: int, per_line: bool, chunk: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(safejson, "_CHUNK_BYTES", chunk)  # small chunks: state carried across many boundaries
        found = safejson.too_deep(data, max_depth=max_depth, per_line=per_line).tolist()
    assert found == reference_scan(data, max_depth, per_line)


def test_load_json_refusals_name_the_place() -> None:
    cases = {
        b"[" * 100_000: "line 1, column 65: nesting deeper than 64 levels",
        b'{"a": 1,\n "a": 2}': "key 'a' appears more than once in one object",
        b"[1, NaN]": "NaN is not a JSON number (write null for a missing value)",
        b"[1" + b"0" * 5_000 + b"]": "a number is too long",
        b"[1,\n\xff]": "line 2, column 1: byte 0xFF is not valid UTF-8",
        b"[1,\n 2": "line 2, column 3: Expecting ',' delimiter",
    }
    for data, message in cases.items():
        with pytest.raises(safejson.JSONError) as refused:
            safejson.load_json(data)
        assert str(refused.value).startswith(message), (data[:20], str(refused.value))
    with pytest.raises(safejson.JSONError, match="at most 10 are accepted"):
        safejson.load_json(b"[1, 2, 3, 4]", max_bytes=10)
    assert safejson.load_json("\ufeff[NaN]".encode(), allow_nan=True)[0] != 0  # NaN != 0; BOM skipped
    assert safejson.load_json(b"[" * 64 + b"]" * 64) == eval("[" * 64 + "]" * 64)  # exactly the limit
    error = pickle.loads(pickle.dumps(safejson.JSONError("x", 1, 2)))  # crosses Celery as it is
    assert (error.message, error.line, error.column) == ("x", 1, 2)

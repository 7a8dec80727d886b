"""Parse and validate uploaded prediction files.

A prediction file gives one score per evaluation id.  Four formats are accepted:

* ``csv`` -- a header line with the columns ``id`` and ``score`` (and optionally
  ``sample``), then one record per line; other columns are ignored;
* ``jsonl`` -- one JSON object per line with the keys ``id`` and ``score`` (and optionally
  ``sample``); other keys are ignored;
* ``parquet`` -- a table with the columns ``id`` and ``score`` (and optionally ``sample``);
* ``reference-json`` -- the QVal reference format ``{"method_name": str, "values": [...]}``
  whose ``values`` follow the split's point ids in dataset order (a shorter list covers a
  prefix of the split).

Ids are always strings (a CSV id ``007`` stays ``"007"``; integer ids in JSON Lines and
Parquet are turned into their decimal text).  A score may be missing -- empty, ``nan`` or
``null`` -- and is then NaN; non-numeric scores are errors, and so are infinite ones unless
:func:`parse` is given ``allow_infinite`` (the ``qval-v1.0`` rules keep them).  The optional
``sample`` column holds a whole number >= 0 for files with several samples per id.

:func:`parse` reads a file and :func:`validate` checks its ids against a split; both
raise :class:`ValidationFailed` listing *every* problem found, each with a
machine-readable code and a message that names the offending lines (line numbers as an
editor shows them, the CSV header being line 1), the field and what was expected.
Reading and checking are vectorised with pyarrow, numpy and pandas, and ids are matched
to the split through a :class:`SplitIndex` (one vectorised hash lookup; a million rows
take well under a second); only the rows that failed are looked at one by one.  The exception is a
JSON Lines file pyarrow cannot read (mixed value types, ``NaN`` literals, syntax errors):
it is re-read line by line, which takes a few seconds for a million lines.

This module is Django-free.
"""

from __future__ import annotations

import codecs
import contextvars
import csv
import io
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import Any, BinaryIO, Callable, Iterable, Iterator, NoReturn, Sequence, Union

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from qval import safejson

MAX_UPLOAD_BYTES = 100 * 1024 * 1024
"""Default upload limit in bytes; :func:`parse` takes another one per call."""

MAX_JSONL_LINE_BYTES = 1024 * 1024
"""Longest line a JSON Lines file may have (a record is some tens of bytes)."""

MAX_PARQUET_UNCOMPRESSED_BYTES = 1024**3
"""Largest uncompressed size of the columns read from a Parquet file (a compression bomb stops here)."""

MAX_SAMPLE = 2**31 - 1
"""Largest sample number."""

MAX_DEPTH = safejson.MAX_DEPTH
"""How deeply JSON arrays and objects may nest in a JSON Lines or reference file."""

FORMATS: tuple[str, ...] = ("csv", "jsonl", "parquet", "reference-json")

EXAMPLE_LIMIT = 10
"""How many example rows a problem message names (and :attr:`Problem.rows` holds)."""

ID_EXAMPLE_LIMIT = 5
"""How many example ids an unknown-id problem and :attr:`Coverage.missing_examples` name."""

Source = Union[str, os.PathLike[str], bytes, bytearray, memoryview, BinaryIO]
"""What :func:`parse` reads: a path (``str`` is a path, never content), bytes, or a binary file."""

_EXTENSIONS: dict[str, str] = {
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".json": "reference-json",
}
_PARQUET_MAGIC = b"PAR1"
_REQUIRED = ("id", "score")
_OPTIONAL = ("sample",)
_MISSING_SCORES = ("", "nan", "null")  # after trimming whitespace and lower-casing
_HEADER_SCAN_BYTES = 64 * 1024
_DECODE_CHUNK_BYTES = 1024 * 1024
_SHOW_CHARS = 40
_COLUMN_LIST_LIMIT = 20
_ASCII_WHITESPACE = np.frombuffer(b" \t\n\r\x0b\x0c", dtype=np.uint8)  # what bytes.strip() removes

# Row-level problem codes: summary (formatted with the number of rows), hint, example limit.
_ROW_PROBLEMS: dict[str, tuple[str, str, int]] = {
    "parse": ("{n} records could not be read", "", EXAMPLE_LIMIT),
    "bad_id": (
        "{n} rows have an invalid id",
        "Every row needs a non-empty id, written as a string.",
        EXAMPLE_LIMIT,
    ),
    "non_numeric": (
        "{n} scores are not numbers",
        "Scores must be numbers such as 0.25 or -1e-3; leave a score empty "
        "(or write nan or null) to give no prediction for that row.",
        EXAMPLE_LIMIT,
    ),
    "non_finite": (
        "{n} scores are infinite",
        "Scores must be finite; leave a score empty (or write nan or null) "
        "to give no prediction for that row.",
        EXAMPLE_LIMIT,
    ),
    "bad_sample": (
        "{n} rows have an invalid sample",
        "The sample column must hold whole numbers >= 0.",
        EXAMPLE_LIMIT,
    ),
    "unknown_id": (
        "{n} rows have an id that is not in this split",
        "Ids must be the evaluation ids of the split the file is submitted to.",
        ID_EXAMPLE_LIMIT,
    ),
    "duplicate_id": (
        "{n} rows repeat an id given earlier",
        "Each id may appear once (once per sample when there is a sample column).",
        EXAMPLE_LIMIT,
    ),
}
_CSV_PARSE_HINT = (
    "Every line must have as many comma-separated fields as the header; "
    'quote fields that contain commas, quotes or line breaks ("a,b").'
)
_JSONL_PARSE_HINT = 'Every line must be one JSON object such as {"id": "s1", "score": 0.5}.'


# -- public types ------------------------------------------------------------------------
@dataclass(frozen=True)
class Problem:
    """One thing wrong with an uploaded file.

    ``code`` is machine-readable: ``too_large``, ``unknown_format``, ``encoding``,
    ``empty``, ``bad_header``, ``missing_column``, ``parse``, ``wrong_length``,
    ``bad_id``, ``non_numeric``, ``non_finite``, ``bad_sample``, ``unknown_id`` or
    ``duplicate_id``.  ``message`` is meant for the person who uploaded the file.
    ``rows`` holds up to :data:`EXAMPLE_LIMIT` example positions, the numbers the message
    shows: line numbers for CSV (header = line 1) and JSON Lines, 1-based row numbers
    for Parquet and 0-based ``values`` indices for the reference format.
    """

    code: str
    message: str
    rows: tuple[int, ...] = ()


class ValidationFailed(Exception):
    """A file was rejected; :attr:`problems` lists every problem found, :attr:`rows` the rows the
    file had cost to read when it was refused (its work: see :func:`parse`)."""

    def __init__(self, problems: Sequence[Problem], rows: int = 0) -> None:
        # a NUL from the file would make the message unstorable (PostgreSQL text holds none)
        self.problems: list[Problem] = [
            replace(p, message=p.message.replace("\x00", "\\x00")) if "\x00" in p.message else p for p in problems
        ]
        self.rows = rows
        super().__init__(self.problems, rows)  # picklable: unpickling calls cls(problems, rows)

    def __str__(self) -> str:
        return "\n".join(p.message for p in self.problems)


class SplitIndex:
    """The ids a prediction file for one split may name, each with an integer code.

    Codes ``0 .. num_expected - 1`` are the *expected* ids (the split's evaluation points,
    in dataset order); the other allowed ids (candidates scored only for ranking) follow.
    :meth:`encode` matches a file's ids to codes in one vectorised hash lookup (pyarrow),
    shared by :func:`validate` and :mod:`qval.scoring` through :meth:`Predictions.codes`.
    """

    def __init__(self, expected_ids: Iterable[str], other_ids: Iterable[str] = ()) -> None:
        self.expected_ids: list[str] = list(expected_ids)
        """The expected ids in order (codes ``0 .. num_expected - 1``)."""
        self.num_expected = len(self.expected_ids)
        codes = dict.fromkeys(self.expected_ids)
        if len(codes) != self.num_expected:
            raise ValueError("the expected ids of a split must be distinct")
        codes.update(dict.fromkeys(other_ids))
        self._values = pa.array(list(codes), type=pa.large_string())

    def __len__(self) -> int:
        return len(self._values)

    def encode(self, ids: Iterable[str]) -> np.ndarray:
        """Each id's code (int64), ``-1`` for an id this split does not have."""
        values = ids if isinstance(ids, np.ndarray) else list(ids)
        found = pc.index_in(pa.array(values, type=pa.large_string()), value_set=self._values)
        return pc.fill_null(found, -1).to_numpy().astype(np.int64)


@dataclass(frozen=True, eq=False)
class Predictions:
    """The parsed content of a prediction file.

    ``ids`` (object array of ``str``) and ``scores`` (float64, NaN where no score was
    given) are in file order; with a ``sample`` column ``samples`` holds each row's sample
    number (int64), else it is ``None``.  ``positions[i]`` is where row ``i`` is in the
    file, written by ``position_format.format(positions[i])`` (``"line 8"``, ``"row 7"``,
    ``"values[6]"``); without positions row ``i`` is shown as ``"row {i + 1}"``.
    ``method_name`` is the reference format's ``method_name``.
    """

    ids: np.ndarray
    scores: np.ndarray
    samples: np.ndarray | None
    format: str
    num_rows: int
    positions: np.ndarray | None = None
    position_format: str = "row {}"
    method_name: str | None = None
    _matched: list[tuple[SplitIndex, np.ndarray]] = field(default_factory=list, init=False, repr=False)

    def codes(self, index: SplitIndex) -> np.ndarray:
        """Each row's code in ``index`` (``-1`` where the split has no such id).

        The ids are matched once per index; :func:`validate` and :func:`qval.scoring.score`
        share the result.
        """
        for known, codes in self._matched:
            if known is index:
                return codes
        codes = index.encode(self.ids)
        self._matched[:] = [(index, codes)]
        return codes

    def by_id(self) -> dict[str, float]:
        """``{id: score}``; only for files without a sample column (ids unique after :func:`validate`)."""
        if self.samples is not None:
            raise ValueError("by_id() needs a file without a sample column")
        return dict(zip(self.ids.tolist(), self.scores.tolist()))


@dataclass(frozen=True)
class Coverage:
    """How many of the expected ids a file gives a row for.

    With a ``sample`` column an id counts as provided only when every sample has it.
    Rows whose score is NaN count as provided.
    """

    expected: int
    provided: int
    missing: int
    missing_examples: tuple[str, ...]


# -- public functions --------------------------------------------------------------------
def detect_format(filename: str, head: bytes) -> str:
    """The format of a file (one of :data:`FORMATS`) from its name and first bytes.

    Parquet is recognised by its magic bytes ``PAR1`` whatever the name; otherwise the
    extension decides: ``.csv``, ``.jsonl``/``.ndjson``, ``.parquet``/``.pq``, ``.json``
    (reference format).  Raises :class:`ValidationFailed` (``unknown_format``) otherwise.
    """
    if head.startswith(_PARQUET_MAGIC):
        return "parquet"
    suffix = PurePath(filename).suffix.lower()
    if suffix in _EXTENSIONS:
        return _EXTENSIONS[suffix]
    raise ValidationFailed(
        [
            Problem(
                "unknown_format",
                f"cannot tell the format of {filename!r} from its name; name the file "
                ".csv, .jsonl (or .ndjson), .parquet (or .pq), or .json for the "
                'reference format {"method_name": ..., "values": [...]}',
            )
        ]
    )


_ALLOW_INFINITE: contextvars.ContextVar[bool] = contextvars.ContextVar("allow_infinite", default=False)
"""Whether the :func:`parse` running in this context keeps infinite scores."""


def parse(
    path_or_bytes: Source,
    filename: str,
    *,
    max_bytes: int = MAX_UPLOAD_BYTES,
    reference_ids: Sequence[str] | None = None,
    allow_infinite: bool = False,
) -> Predictions:
    """Read a prediction file; raise :class:`ValidationFailed` listing all its problems.

    ``filename`` (the name the user uploaded) picks the format, see :func:`detect_format`.
    A file over ``max_bytes`` is refused before it is read.  The reference format needs
    ``reference_ids``, the split's point ids in dataset order
    (:meth:`qval.schema.Dataset.point_ids`); entry ``i`` of ``values`` scores
    ``reference_ids[i]``.  ``allow_infinite`` keeps ±inf scores (the ``qval-v1.0`` rules)
    instead of reporting them.

    A refused file's :attr:`ValidationFailed.rows` is the work it cost: every row read when a
    row is refused; for a file refused whole, the rows it declares (a Parquet file's metadata, a
    text file's lines, a reference file's values), as its reading went that far; 0 for one refused
    before it was read (too large, of no known format).
    """
    token = _ALLOW_INFINITE.set(allow_infinite)
    try:
        parsed = _read(path_or_bytes, filename, max_bytes, reference_ids)
    finally:
        _ALLOW_INFINITE.reset(token)
    parsed.issues.raise_if_any(parsed.preds.num_rows)
    return parsed.preds


def parse_and_validate(
    path_or_bytes: Source,
    filename: str,
    index: SplitIndex,
    *,
    max_bytes: int = MAX_UPLOAD_BYTES,
    allow_infinite: bool = False,
) -> tuple[Predictions, Coverage]:
    """:func:`parse` and :func:`validate` in one go, reporting the problems of both at once.

    A file with a score that is not a number on one line and an id the split does not
    have on another is refused with both problems listed (and every other problem
    found), where :func:`parse` would stop before the ids are checked.  The reference
    format's ``values`` follow ``index.expected_ids``; ``allow_infinite`` as in :func:`parse`.
    """
    token = _ALLOW_INFINITE.set(allow_infinite)
    try:
        parsed = _read(path_or_bytes, filename, max_bytes, index.expected_ids)
    finally:
        _ALLOW_INFINITE.reset(token)
    coverage = _check(parsed.preds, index, parsed.issues, parsed.unusable)
    parsed.issues.raise_if_any(parsed.preds.num_rows)
    return parsed.preds, coverage


def _read(
    path_or_bytes: Source, filename: str, max_bytes: int, reference_ids: Sequence[str] | None
) -> _Parsed:
    """Read a file; file-level problems raise, row-level ones are collected in the result."""
    data = _read_limited(path_or_bytes, max_bytes)
    fmt = detect_format(filename, data[: len(_PARQUET_MAGIC)])
    if fmt == "reference-json" and reference_ids is None:
        raise ValueError("parsing a reference-json file needs reference_ids (the split's point ids)")
    try:
        return _read_format(data, fmt, reference_ids)
    except ValidationFailed as exc:
        raise ValidationFailed(exc.problems, max(exc.rows, _declared_rows(data, fmt))) from None


def _declared_rows(data: bytes, fmt: str) -> int:
    """The rows a file refused whole declares (the work its reading cost, :func:`parse`): a Parquet
    file's metadata row count, a reference file's values (commas + 1), a text file's lines."""
    if fmt == "parquet":
        try:
            return int(pq.ParquetFile(pa.py_buffer(data)).metadata.num_rows)
        except (pa.ArrowException, OSError):
            return 0
    if fmt == "reference-json":
        return data.count(b",") + 1
    return data.count(b"\n") + 1


def _read_format(data: bytes, fmt: str, reference_ids: Sequence[str] | None) -> _Parsed:
    """:func:`_read` once the file's bytes and format are known."""
    if fmt == "parquet":
        return _parse_parquet(data)
    _check_utf8(data)
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    if not data or data.isspace():
        _fail("empty", "the file is empty")
    if fmt == "csv":
        return _parse_csv(data)
    if fmt == "jsonl":
        return _parse_jsonl(data)
    assert reference_ids is not None
    return _parse_reference(data, reference_ids)


def validate(preds: Predictions, index: SplitIndex) -> Coverage:
    """Check ``preds`` against a split and report its coverage of the expected ids.

    Raises :class:`ValidationFailed` with every problem: ids the split does not have
    (``unknown_id``) and ids given twice within the same sample (``duplicate_id``).
    Expected ids the file leaves out are not an error; :class:`Coverage` counts them.
    """
    issues = _Issues(preds.position_format)
    coverage = _check(preds, index, issues, np.zeros(preds.num_rows, dtype=bool))
    issues.raise_if_any(preds.num_rows)
    return coverage


def _check(preds: Predictions, index: SplitIndex, issues: _Issues, unusable: np.ndarray) -> Coverage:
    """Add the unknown and repeated ids of ``preds`` to ``issues``; the coverage is only
    meaningful when no problem was found.  Rows marked ``unusable`` (their id or sample
    could not be read) are left out of the checks."""
    positions = np.arange(1, preds.num_rows + 1) if preds.positions is None else preds.positions
    ids, samples = preds.ids, preds.samples
    if unusable.any():
        kept = np.flatnonzero(~unusable)
        ids, positions = ids[kept], positions[kept]
        samples = None if samples is None else samples[kept]
        codes = index.encode(ids) if kept.size else np.empty(0, dtype=np.int64)
    else:
        codes = preds.codes(index)
    unknown = np.flatnonzero(codes < 0)
    if unknown.size:
        first_each = unknown[~pd.Series(ids[unknown]).duplicated().to_numpy()][:ID_EXAMPLE_LIMIT]
        issues.add(
            "unknown_id",
            positions[first_each],
            [f"id {_show(ids[i])} is not an id of this split" for i in first_each],
            total=unknown.size,
        )
    keys = codes.copy()  # one number per distinct id, unknown ids included
    if unknown.size:
        keys[unknown] = len(index) + pd.factorize(ids[unknown])[0]
    num_samples = 1
    if samples is not None and samples.size:
        sample_numbers, inverse = np.unique(samples, return_inverse=True)
        num_samples = sample_numbers.size
        keys = keys * num_samples + inverse.reshape(-1)
    repeated = np.flatnonzero(pd.Series(keys).duplicated(keep="first").to_numpy())
    if repeated.size:
        issues.add(
            "duplicate_id",
            positions[repeated[:EXAMPLE_LIMIT]],
            [_describe_repeat(ids, samples, positions, preds.position_format, int(i)) for i in repeated[:EXAMPLE_LIMIT]],
            total=repeated.size,
        )

    # (id, sample) pairs are unique when no problem was found: an expected id is provided when every sample has it
    per_id = np.bincount(codes[(codes >= 0) & (codes < index.num_expected)], minlength=index.num_expected)
    missing = np.flatnonzero(per_id < num_samples)
    return Coverage(
        expected=index.num_expected,
        provided=index.num_expected - missing.size,
        missing=int(missing.size),
        missing_examples=tuple(index.expected_ids[i] for i in missing[:ID_EXAMPLE_LIMIT]),
    )


def _describe_repeat(
    ids: np.ndarray, samples: np.ndarray | None, positions: np.ndarray, position_format: str, i: int
) -> str:
    """Where the id of row ``i`` was first given (in the same sample)."""
    same = ids == ids[i]
    where = ""
    if samples is not None:
        same &= samples == samples[i]
        where = f" in sample {samples[i]}"
    first = positions[np.flatnonzero(same)[0]]
    return f"id {_show(ids[i])} was already given{where} on {position_format.format(first)}"


# -- problem collection ------------------------------------------------------------------
@dataclass(frozen=True)
class _Parsed:
    """A file read so far: its rows, the row-level problems found, and which rows' id or sample is unusable."""

    preds: Predictions
    issues: _Issues
    unusable: np.ndarray

def _fail(code: str, message: str) -> NoReturn:
    """Stop with a single file-level problem."""
    raise ValidationFailed([Problem(code, message)])


@dataclass
class _Issue:
    total: int = 0
    hint: str = ""
    examples: list[tuple[int, str]] = field(default_factory=list)


class _Issues:
    """Row-level problems collected per code: a total and the first few examples."""

    def __init__(self, position_format: str) -> None:
        self.position_format = position_format
        self._by_code: dict[str, _Issue] = {}

    def add(
        self,
        code: str,
        positions: Sequence[int] | np.ndarray,
        details: Sequence[str],
        *,
        total: int | None = None,
        hint: str | None = None,
    ) -> None:
        """Record ``total`` (default: ``len(details)``) rows, with the given examples."""
        issue = self._by_code.setdefault(code, _Issue(hint=_ROW_PROBLEMS[code][1]))
        if hint is not None:
            issue.hint = hint
        issue.total += len(details) if total is None else total
        issue.examples.extend(zip((int(p) for p in positions), details))
        issue.examples.sort(key=lambda example: example[0])
        del issue.examples[_ROW_PROBLEMS[code][2] :]

    def problems(self) -> list[Problem]:
        problems = []
        for code, issue in self._by_code.items():
            listed = "; ".join(f"{self.position_format.format(p)}: {d}" for p, d in issue.examples)
            if issue.total == 1:
                message = listed
            else:
                more = issue.total - len(issue.examples)
                message = _ROW_PROBLEMS[code][0].format(n=f"{issue.total:,}") + ": " + listed
                message += f"; and {more:,} more" if more else ""
            message += f". {issue.hint}" if issue.hint else ""
            problems.append(Problem(code, message, tuple(p for p, _ in issue.examples)))
        return problems

    def raise_if_any(self, rows: int = 0) -> None:
        """Raise :class:`ValidationFailed` with every problem (``rows``: the rows read) if there is one."""
        if self._by_code:
            raise ValidationFailed(self.problems(), rows)


def _report(
    issues: _Issues, code: str, bad: np.ndarray, positions: np.ndarray, describe: Callable[[int], str]
) -> None:
    """Record the rows where the boolean mask ``bad`` is set, describing the first few."""
    rows = np.flatnonzero(bad)
    if rows.size:
        shown = rows[: _ROW_PROBLEMS[code][2]]
        issues.add(code, positions[shown], [describe(int(i)) for i in shown], total=rows.size)


def _describe_with(column: pa.Array, template: str) -> Callable[[int], str]:
    """A row describer filling ``template`` with the row's value from ``column``."""
    return lambda i: template.format(_show(column[i].as_py()))


def _show(value: Any) -> str:
    """A short printable form of a value from the file."""
    if isinstance(value, str):
        return repr(value if len(value) <= _SHOW_CHARS else value[: _SHOW_CHARS - 3] + "...")
    return json.dumps(value, default=str)


def _show_name(name: str) -> str:
    """A column or key name as a message shows it: shortened, quoted when not plainly printable."""
    if len(name) <= _SHOW_CHARS and name.isprintable():
        return name
    return _show(name)


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n:,} bytes"
    if n < 1024**2:
        return f"{n / 1024:,.1f} KiB"
    return f"{n / 1024**2:,.1f} MiB"


def _column_list(names: Sequence[str]) -> str:
    shown = ", ".join(_show_name(name) for name in names[:_COLUMN_LIST_LIMIT]) or "(none)"
    rest = len(names) - _COLUMN_LIST_LIMIT
    return shown + (f" and {rest} more" if rest > 0 else "")


# -- reading bytes -----------------------------------------------------------------------
def _read_limited(source: Source, max_bytes: int) -> bytes:
    """The file's bytes, refusing one over ``max_bytes`` without reading it whole."""
    limit = f"the upload limit is {_human_bytes(max_bytes)}"
    if isinstance(source, (bytes, bytearray, memoryview)):
        size = memoryview(source).nbytes
        if size > max_bytes:
            _fail("too_large", f"the file is {_human_bytes(size)}; {limit}")
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        size = os.stat(source).st_size
        if size > max_bytes:
            _fail("too_large", f"the file is {_human_bytes(size)}; {limit}")
        with open(source, "rb") as fh:
            return fh.read()
    data = source.read(max_bytes + 1)
    if len(data) > max_bytes:
        _fail("too_large", f"the file is larger than {_human_bytes(max_bytes)}; {limit}")
    return data


def _check_utf8(data: bytes) -> None:
    """Raise an ``encoding`` problem at the first byte that is not valid UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    for start in range(0, len(data), _DECODE_CHUNK_BYTES):
        pending = len(decoder.getstate()[0])
        stop = start + _DECODE_CHUNK_BYTES
        try:
            decoder.decode(view[start:stop], final=stop >= len(data))
        except UnicodeDecodeError as exc:
            offset = start - pending + exc.start
            line = data.count(b"\n", 0, offset) + 1
            _fail(
                "encoding",
                f"the file is not valid UTF-8: byte 0x{data[offset]:02X} at byte offset {offset:,} "
                f"(line {line}) cannot be decoded; save the file as UTF-8 "
                '(in Excel: "CSV UTF-8"), not Latin-1 or Windows-1252',
            )


def _nonblank_lines(data: bytes, *, whitespace_is_blank: bool) -> np.ndarray:
    """1-based numbers of the lines that hold a record (line breaks: LF, CRLF or CR).

    Lines are those of ``data.splitlines()``; a line is blank when it is empty (or, with
    ``whitespace_is_blank``, when ``bytes.strip`` leaves nothing).  Vectorised over the
    bytes: no Python object per line.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    if b"\r" in data:
        is_lf = buf == 10
        breaks = is_lf | (buf == 13)
        breaks[:-1] &= ~((buf[:-1] == 13) & is_lf[1:])  # CRLF: one break, at the LF
        del is_lf
        ends = np.flatnonzero(breaks)  # the last byte of each line break
        del breaks
        crlf = (buf[ends] == 10) & (ends > 0)
        crlf[crlf] = buf[ends[crlf] - 1] == 13
        stops = ends - crlf.astype(np.int64)  # where each line's content stops
    else:
        ends = stops = np.flatnonzero(buf == 10)
    starts = np.empty(len(ends) + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends + 1
    if starts[-1] < len(buf):  # a last line without a line break
        stops = np.append(stops, len(buf))
    else:
        starts = starts[:-1]
    filled = stops > starts
    if whitespace_is_blank and filled.any():
        # A line whose first byte is not whitespace holds something; the others are checked one by one.
        first_is_space = np.zeros(len(starts), dtype=bool)
        first_is_space[filled] = np.isin(buf[starts[filled]], _ASCII_WHITESPACE)
        for i in np.flatnonzero(first_is_space):
            filled[i] = bool(data[starts[i] : stops[i]].strip())
    return np.flatnonzero(filled) + 1


# -- columns -----------------------------------------------------------------------------
def _match_columns(names: Sequence[str], *, what: str, hint: str = "") -> dict[str, str]:
    """Map ``id``/``score``/``sample`` to the file's column names (surrounding spaces ignored)."""
    found: dict[str, str] = {}
    for name in names:
        key = name.strip()
        if key in _REQUIRED + _OPTIONAL:
            if key in found:
                found_names = _column_list(names)
                _fail("bad_header", f"{what} {key!r} appears more than once; found {what}s: {found_names}")
            found[key] = name
    missing = [c for c in _REQUIRED if c not in found]
    if missing:
        _fail("missing_column", _missing_message(missing, names, what=what, hint=hint))
    return found


def _missing_message(missing: Sequence[str], names: Sequence[str], *, what: str, hint: str) -> str:
    listed = " and ".join(repr(c) for c in missing)
    plural = "s" if len(missing) > 1 else ""
    message = f"missing {what}{plural} {listed}; found {what}s: {_column_list(names)}"
    lower = {n.strip().lower(): n for n in names}
    for column in missing:
        if column in lower:
            message += f" ({what} names are case-sensitive: write {column!r}, not {lower[column]!r})"
    return message + (f". {hint}" if hint else "")


def _plain(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous, non-dictionary array."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _mask(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean arrow column as numpy, null counting as False."""
    return pc.fill_null(column, False).to_numpy(zero_copy_only=False)


def _convert_ids(column: pa.Array, positions: np.ndarray, issues: _Issues) -> tuple[np.ndarray, np.ndarray]:
    """Ids as an object array of ``str`` (text and integer columns are accepted) and the mask of bad ones."""
    column = _plain(column)
    if pa.types.is_integer(column.type):
        column = pc.cast(column, pa.string())
    missing = _mask(column.is_null())
    _report(issues, "bad_id", missing, positions, lambda i: "id is missing")
    if _is_text(column.type):
        empty = _mask(pc.equal(pc.utf8_length(column), 0))
        _report(issues, "bad_id", empty, positions, lambda i: "id is empty")
        bad = missing | empty
    else:
        describe = _describe_with(column, "id must be a string, got {}")
        _report(issues, "bad_id", ~missing, positions, describe)
        bad = np.ones(len(column), dtype=bool)
    return column.to_numpy(zero_copy_only=False), bad


def _convert_scores(column: pa.Array, positions: np.ndarray, issues: _Issues) -> np.ndarray:
    """Scores as float64 (NaN where missing); reports non-numeric and infinite scores."""
    column = _plain(column)
    if pa.types.is_null(column.type):
        return np.full(len(column), np.nan)
    if _is_number(column.type):
        values = pc.cast(column, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    elif _is_text(column.type):
        values = _text_to_floats(column, positions, issues)
    else:
        describe = _describe_with(column, "score {} is not a number")
        _report(issues, "non_numeric", _mask(column.is_valid()), positions, describe)
        return np.full(len(column), np.nan)
    if not _ALLOW_INFINITE.get():
        _report(issues, "non_finite", np.isinf(values), positions, _describe_with(column, "score {} is infinite"))
    return values


def _text_to_floats(column: pa.Array, positions: np.ndarray, issues: _Issues) -> np.ndarray:
    """Parse text scores; empty, ``nan`` and ``null`` (any case, spaces around) are NaN."""
    try:  # the usual case: each score is empty, null or a number arrow reads as it stands
        empty = pc.equal(pc.binary_length(column), 0)
        present = pc.if_else(empty, pa.scalar(None, column.type), column)
        return pc.cast(present, pa.float64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass  # padded, ``null``, not a number, ...: the full treatment below
    text = pc.utf8_trim_whitespace(column)
    missing_words = pc.is_in(pc.utf8_lower(text), value_set=pa.array(_MISSING_SCORES))
    missing = _mask(pc.or_kleene(column.is_null(), missing_words))
    present = pc.if_else(pa.array(missing), pa.scalar(None, pa.string()), pc.cast(text, pa.string()))
    try:
        return pc.cast(present, pa.float64()).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        pass  # some score is not a number: find which, vectorised
    parsed = pd.to_numeric(present.to_numpy(zero_copy_only=False), errors="coerce")
    values = np.asarray(parsed, dtype=np.float64)
    describe = _describe_with(column, "score {} is not a number")
    _report(issues, "non_numeric", np.isnan(values) & ~missing, positions, describe)
    return values


def _convert_samples(column: pa.Array, positions: np.ndarray, issues: _Issues) -> tuple[np.ndarray, np.ndarray]:
    """Sample numbers as int64 (each must be a whole number >= 0) and the mask of bad ones."""
    column = _plain(column)
    if _is_number(column.type):
        values = pc.cast(column, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    elif _is_text(column.type):
        text = pc.utf8_trim_whitespace(column).to_numpy(zero_copy_only=False)
        values = np.asarray(pd.to_numeric(text, errors="coerce"), dtype=np.float64)
    else:
        values = np.full(len(column), np.nan)
    with np.errstate(invalid="ignore"):
        good = np.isfinite(values) & (values >= 0) & (np.floor(values) == values) & (values <= MAX_SAMPLE)

    def describe(i: int) -> str:
        raw = column[i].as_py()
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return "sample is missing"
        if values[i] > MAX_SAMPLE and np.floor(values[i]) == values[i]:
            return f"sample {_show(raw)} is larger than {MAX_SAMPLE:,}"
        return f"sample {_show(raw)} is not a whole number >= 0"

    _report(issues, "bad_sample", ~good, positions, describe)
    return np.where(good, values, 0).astype(np.int64), ~good


def _build(
    fmt: str,
    ids: pa.Array,
    scores: pa.Array,
    samples: pa.Array | None,
    positions: np.ndarray,
    issues: _Issues,
    method_name: str | None = None,
) -> _Parsed:
    """Convert the three columns, collecting their problems in ``issues``."""
    id_values, unusable = _convert_ids(ids, positions, issues)
    score_values = _convert_scores(scores, positions, issues)
    sample_values = None
    if samples is not None:
        sample_values, bad_samples = _convert_samples(samples, positions, issues)
        unusable |= bad_samples
    preds = Predictions(
        ids=id_values,
        scores=score_values,
        samples=sample_values,
        format=fmt,
        num_rows=len(id_values),
        positions=positions,
        position_format=issues.position_format,
        method_name=method_name,
    )
    return _Parsed(preds, issues, unusable)


# -- CSV ---------------------------------------------------------------------------------
def _parse_csv(data: bytes) -> _Parsed:
    header = _csv_header(data)
    columns = _match_columns(
        header, what="column", hint="The first line must be the header, for example: id,score"
    )
    names = list(columns.values())
    try:
        table = pa_csv.read_csv(
            pa.py_buffer(data),
            parse_options=pa_csv.ParseOptions(newlines_in_values=True),
            convert_options=pa_csv.ConvertOptions(
                include_columns=names, column_types={name: pa.string() for name in names}
            ),
        )
    except pa.ArrowInvalid as exc:
        raise ValidationFailed(_csv_structure_problems(data, len(header), str(exc))) from None
    if table.num_rows == 0:
        _fail("empty", "the file has a header line but no data rows")
    positions, position_format = _csv_positions(data, table.num_rows)
    return _build(
        "csv",
        table[columns["id"]],
        table[columns["score"]],
        table[columns["sample"]] if "sample" in columns else None,
        positions,
        _Issues(position_format),
    )


def _csv_header(data: bytes) -> list[str]:
    """The fields of the first non-empty record (read from the first 64 KiB)."""
    head = data[:_HEADER_SCAN_BYTES].decode("utf-8", errors="ignore")
    return next((row for row in csv.reader(io.StringIO(head, newline="")) if row), [])


def _csv_positions(data: bytes, num_rows: int) -> tuple[np.ndarray, str]:
    """The line number of every data record, and how to write a position.

    Normally each non-empty line after the header is a record.  When quoted fields hold
    line breaks the csv module finds where records start; should it disagree with
    pyarrow (or fail on a huge field) records are numbered as data rows instead.
    """
    lines = _nonblank_lines(data, whitespace_is_blank=False)
    if len(lines) == num_rows + 1:
        return lines[1:], "line {}"
    try:
        starts = np.array([start for start, _, _ in _csv_records(data)], dtype=np.int64)[1:]
    except csv.Error:
        starts = np.empty(0, dtype=np.int64)
    if len(starts) == num_rows:
        return starts, "line {}"
    return np.arange(1, num_rows + 1, dtype=np.int64), "data row {}"


def _csv_records(data: bytes) -> Iterator[tuple[int, int, int]]:
    """``(first line, last line, number of fields)`` of each non-empty record, header included.

    Pure Python (the csv module), so only used to locate records, never to read values.
    """
    reader = csv.reader(io.StringIO(data.decode("utf-8"), newline=""))
    end = 0
    for row in reader:
        start, end = end + 1, reader.line_num
        if row:
            yield start, end, len(row)


def _csv_structure_problems(data: bytes, expected_fields: int, arrow_message: str) -> list[Problem]:
    """Problems naming the lines of a CSV file pyarrow could not split into records."""
    issues = _Issues("line {}")
    end = 0
    records = _csv_records(data)
    try:
        next(records)  # the header
        for start, end, fields in records:
            if fields != expected_fields:
                detail = f"expected {expected_fields} fields like the header, found {fields}"
                if end > start:
                    detail += f" in a record running on to line {end} (a quote may not be closed)"
                issues.add("parse", [start], [detail], hint=_CSV_PARSE_HINT)
    except csv.Error as exc:
        issues.add("parse", [end + 1], [f"{exc} (a quote may not be closed)"], hint=_CSV_PARSE_HINT)
    return issues.problems() or [
        Problem("parse", f"the CSV file could not be read: {arrow_message}. {_CSV_PARSE_HINT}")
    ]


# -- JSON Lines --------------------------------------------------------------------------
def _parse_jsonl(data: bytes) -> _Parsed:
    deep = safejson.too_deep(data, per_line=True)
    if (deep.size or data.count(b"\r") != data.count(b"\r\n") or not _lines_open_objects(data)
            or _longest_line(data) > MAX_JSONL_LINE_BYTES):
        # pyarrow's reader must never see a deep line, nor a file whose first value is not an
        # object (pyarrow 26 segfaults on a leading ``null``); a lone CR ends a line for the scan
        # (as for splitlines) but JSON allows it as whitespace: such files are read line by line,
        # as are files with a line over the limit (pyarrow reads any length), which that reader names
        return _parse_jsonl_rows(data, deep)
    lines = _nonblank_lines(data, whitespace_is_blank=True)
    columns = [("id", pa.string()), ("score", pa.float64())]
    if b'"sample"' in data:
        columns.append(("sample", pa.int64()))
    try:
        table = pa_json.read_json(
            pa.py_buffer(data),
            parse_options=pa_json.ParseOptions(
                explicit_schema=pa.schema(columns), unexpected_field_behavior="ignore"
            ),
        )
    except pa.ArrowInvalid:
        return _parse_jsonl_rows(data, deep)  # text scores, NaN literals, long lines, syntax errors, ...
    has_sample = "sample" in table.column_names and table["sample"].null_count < table.num_rows
    fast = (
        table.num_rows == len(lines)  # else several objects share a line or one spans lines
        and table["id"].null_count == 0
        and table["score"].null_count < table.num_rows  # else maybe no score key at all
        and (has_sample or "sample" not in table.column_names)  # else maybe "sample" only in an id
    )
    if not fast:
        return _parse_jsonl_rows(data, deep)
    return _build(
        "jsonl",
        table["id"],
        table["score"],
        table["sample"] if has_sample else None,
        lines,
        _Issues("line {}"),
    )


def _longest_line(data: bytes) -> int:
    """Bytes of the longest line of ``data``, its line break included (as :func:`_parse_jsonl_rows` counts)."""
    breaks = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))
    return int(np.diff(breaks, prepend=-1, append=len(data) - 1).max()) if data else 0


def _lines_open_objects(data: bytes) -> bool:
    """Whether every line starts with ``{`` or is empty (the only files pyarrow's reader gets)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(raw == ord("\n")) + 1))
    firsts = raw[starts[starts < raw.size]]
    return bool(np.isin(firsts, np.frombuffer(b"{\r\n", dtype=np.uint8)).all())


def _parse_jsonl_rows(data: bytes, deep: np.ndarray) -> _Parsed:
    """Line-by-line JSON Lines reader: accepts what pyarrow does not and names bad lines.

    ``deep`` holds the byte offsets found by :func:`qval.safejson.too_deep`; the lines
    they fall in are reported, never decoded.
    """
    issues = _Issues("line {}")
    records: list[dict[str, Any]] = []
    positions: list[int] = []
    deep_offsets = iter(deep.tolist())
    next_deep = next(deep_offsets, len(data))
    offset = 0
    for number, line in enumerate(data.splitlines(keepends=True), 1):
        start, offset = offset, offset + len(line)
        if next_deep < offset:
            column = next_deep - start + 1
            detail = f"{safejson.depth_message()} (at column {column:,})"
            issues.add("parse", [number], [detail], hint=_JSONL_PARSE_HINT)
            next_deep = next(deep_offsets, len(data))
            continue
        if len(line) > MAX_JSONL_LINE_BYTES:
            detail = f"the line is {_human_bytes(len(line))}; lines may be at most {_human_bytes(MAX_JSONL_LINE_BYTES)}"
            issues.add("parse", [number], [detail], hint=_JSONL_PARSE_HINT)
            continue
        if not line.strip():
            continue
        try:
            record = safejson.decode(line.decode("utf-8"), allow_nan=True)
        except safejson.JSONError as exc:
            if exc.syntax:
                detail = f"invalid JSON ({exc.message} at column {exc.column})"
            else:
                detail = f"invalid JSON: {exc.message}"
            issues.add("parse", [number], [detail], hint=_JSONL_PARSE_HINT)
            continue
        if not isinstance(record, dict):
            detail = f"expected a JSON object, found {_json_kind(record)}"
            issues.add("parse", [number], [detail], hint=_JSONL_PARSE_HINT)
            continue
        records.append(record)
        positions.append(number)
    present = {key: any(key in record for record in records) for key in _REQUIRED + _OPTIONAL}
    missing = [key for key in _REQUIRED if not present[key]]
    if missing and records:
        keys = list(dict.fromkeys(key for record in records for key in record))
        message = _missing_message(missing, keys, what="key", hint=_JSONL_PARSE_HINT)
        problem = Problem("missing_column", message)
        raise ValidationFailed([problem, *issues.problems()])
    if not records:
        raise ValidationFailed(issues.problems())
    return _build(
        "jsonl",
        _json_ids([record.get("id") for record in records], positions, issues),
        _json_values([record.get("score") for record in records]),
        _json_values([record.get("sample") for record in records]) if present["sample"] else None,
        np.array(positions, dtype=np.int64),
        issues,
    )


def _json_ids(values: list[Any], positions: list[int], issues: _Issues) -> pa.Array:
    """JSON ids as a text column: strings as they are, integers in decimal, null as null.

    Other values are reported here and stand in as their JSON text, which the id checks
    accept, so that each bad id is reported once.
    """
    if set(map(type, values)) <= {str, type(None)}:
        return pa.array(values, pa.string())
    texts: list[str | None] = []
    for value, number in zip(values, positions):
        if isinstance(value, str) or value is None:
            texts.append(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            texts.append(str(value))
        else:
            issues.add("bad_id", [number], [f"id must be a string, got {_show(value)}"])
            texts.append(json.dumps(value))
    return pa.array(texts, pa.string())


def _json_values(values: list[Any]) -> pa.Array:
    """JSON scores or samples as a float column, or else as text for the text parsers."""
    kinds = set(map(type, values))
    if kinds <= {int, float, type(None)}:
        try:
            return pa.array(values, pa.float64())
        except (pa.ArrowInvalid, OverflowError):
            pass  # an integer too large for int64: go through text
    if kinds <= {str, type(None)}:
        return pa.array(values, pa.string())
    return pa.array([_json_text(value) for value in values], pa.string())


def _json_text(value: Any) -> str | None:
    """A JSON value as the text the score and sample parsers read (null stays None)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return json.dumps(value)  # true, [1], {...}: reported as not a number
    return repr(value)  # exact: repr round-trips floats; NaN -> 'nan', Infinity -> 'inf'


def _json_kind(value: Any) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


# -- reference JSON ----------------------------------------------------------------------
def _parse_reference(data: bytes, reference_ids: Sequence[str]) -> _Parsed:
    try:
        doc = safejson.load_json(data, allow_nan=True)
    except safejson.JSONError as exc:
        if not exc.syntax:
            _fail("parse", f"the file could not be read: {exc}")
        where = f"{exc.message} at line {exc.line}, column {exc.column}"
        jsonl = " (one object per line is the JSON Lines format: name the file .jsonl)"
        hint = jsonl if exc.message == "Extra data" else ""
        _fail("parse", f"the file is not valid JSON: {where}{hint}")
    shape = 'expected {"method_name": "...", "values": [number or null, ...]}'
    if not isinstance(doc, dict):
        _fail("parse", f"{shape}, found {_json_kind(doc)}")
    if "values" not in doc:
        _fail("missing_column", f"missing key 'values'; found keys: {_column_list(list(doc))}; {shape}")
    values = doc["values"]
    method_name = doc.get("method_name")
    if not isinstance(values, list):
        _fail("parse", f"'values' must be a list, found {_json_kind(values)}; {shape}")
    if method_name is not None and not isinstance(method_name, str):
        _fail("parse", f"'method_name' must be a string, found {_json_kind(method_name)}; {shape}")
    if len(values) > len(reference_ids):
        counts = f"values has {len(values):,} entries but the split has {len(reference_ids):,} points"
        _fail("wrong_length", counts)
    if not values:
        _fail("empty", "values is empty")
    return _build(
        "reference-json",
        pa.array(list(reference_ids[: len(values)]), pa.string()),
        _json_values(values),
        None,
        np.arange(len(values), dtype=np.int64),
        _Issues("values[{}]"),
        method_name,
    )


# -- Parquet -----------------------------------------------------------------------------
def _check_parquet_size(parquet: pq.ParquetFile, names: list[str]) -> None:
    """Refuse a file whose columns would inflate past :data:`MAX_PARQUET_UNCOMPRESSED_BYTES`."""
    meta = parquet.metadata
    wanted = {i for i in range(meta.num_columns) if meta.schema.column(i).path.split(".")[0] in names}
    size = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        if group.num_columns != meta.num_columns:  # damaged metadata: pyarrow may abort the process on it
            _fail("parse", f"the Parquet file could not be read: row group {g} has {group.num_columns} columns, "
                           f"its schema {meta.num_columns}")
        size += sum(group.column(c).total_uncompressed_size for c in wanted)
    if size > MAX_PARQUET_UNCOMPRESSED_BYTES:
        _fail(
            "too_large",
            f"the Parquet file's id, score and sample columns take {_human_bytes(size)} uncompressed; "
            f"at most {_human_bytes(MAX_PARQUET_UNCOMPRESSED_BYTES)} are accepted",
        )


def _parse_parquet(data: bytes) -> _Parsed:
    if not data.startswith(_PARQUET_MAGIC):
        _fail("parse", "not a Parquet file: it does not start with the Parquet magic bytes PAR1")
    try:
        parquet = pq.ParquetFile(pa.py_buffer(data))
        columns = _match_columns(parquet.schema_arrow.names, what="column")
        _check_parquet_size(parquet, list(columns.values()))
        table = parquet.read(columns=list(columns.values()))
    except (pa.ArrowException, OSError) as exc:  # damaged pages raise a plain OSError
        _fail("parse", f"the Parquet file could not be read: {exc}")
    try:
        table.validate(full=True)
    except pa.ArrowInvalid as exc:
        _fail("encoding", f"the Parquet file holds text that is not valid UTF-8: {exc}")
    if table.num_rows == 0:
        _fail("empty", "the Parquet file has no rows")
    return _build(
        "parquet",
        table[columns["id"]],
        table[columns["score"]],
        table[columns["sample"]] if "sample" in columns else None,
        np.arange(1, table.num_rows + 1, dtype=np.int64),
        _Issues("row {}"),
    )

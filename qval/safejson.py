"""Bounded reading of untrusted JSON: nesting depth and size limits, never a crash.

Every JSON document that comes from a user -- an uploaded predictions file (JSON Lines or
the reference format), a method container's ``/output`` and its image archive's manifest --
is read through this module.  Python's :mod:`json` decoder and pyarrow's JSON reader both
recurse once per nesting level: the first raises ``RecursionError`` a thousand levels down,
the second overflows the C stack (a segfault) at about a hundred thousand.  Here the nesting
is measured first by a **non-recursive scanner** (:func:`too_deep`: vectorised over the bytes
in fixed-size chunks, linear time and constant memory, stopping at the first excess) and
only documents within :data:`MAX_DEPTH` levels reach a decoder, whose recursion is then
bounded by that depth.

:func:`load_json` reads one document and raises :class:`JSONError` -- a ``ValueError`` with
the line and column, such as ``line 12, column 65: nesting deeper than 64 levels`` -- for
anything it refuses: too large, not UTF-8, not JSON, too deep, a key given twice in one
object, an integer with more digits than Python converts, and (unless allowed) the
``NaN``/``Infinity`` literals.  JSON Lines files are scanned with ``per_line=True`` and
each line is then decoded on its own (:mod:`qval.predictions`).

This module is Django-free.
"""

from __future__ import annotations

import codecs
import gc
import json
import re
from typing import Any

import numpy as np

MAX_DEPTH = 64
"""How many arrays/objects may be nested in one another (``[[1]]`` is 2 levels)."""

_CHUNK_BYTES = 1024 * 1024
_QUOTE, _BACKSLASH, _LF, _CR = 34, 92, 10, 13
_DELTA = np.zeros(256, dtype=np.int32)  # what each byte does to the nesting outside strings
_DELTA[[ord("["), ord("{")]] = 1
_DELTA[[ord("]"), ord("}")]] = -1
_NOT_OPEN_OR_BREAK = bytes(b for b in range(256) if b not in b"[{\n\r")


class JSONError(ValueError):
    """A JSON document was refused; ``line`` and ``column`` (1-based) say where, when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None, syntax: bool = False) -> None:
        self.message, self.line, self.column = message, line, column
        self.syntax = syntax
        """True for a syntax error (``message`` is then the decoder's, such as ``Expecting value``)."""
        super().__init__(message, line, column, syntax)  # picklable: unpickling calls cls(*args)

    def __str__(self) -> str:
        if self.line is None:
            return self.message
        where = f"line {self.line}" + (f", column {self.column}" if self.column is not None else "")
        return f"{where}: {self.message}"


def depth_message(max_depth: int = MAX_DEPTH) -> str:
    """The problem text for a document nested too deeply."""
    return f"nesting deeper than {max_depth} levels"


def line_and_column(data: bytes, offset: int) -> tuple[int, int]:
    """1-based line and column (in bytes) of ``data[offset]``; LF, CRLF and CR end a line."""
    head = data[:offset]
    line = head.count(b"\n") + head.count(b"\r") - head.count(b"\r\n") + 1
    start = max(head.rfind(b"\n"), head.rfind(b"\r")) + 1
    return line, offset - start + 1


def too_deep(data: bytes, *, max_depth: int = MAX_DEPTH, per_line: bool = False) -> np.ndarray:
    """Byte offsets where the nesting of ``data`` first goes past ``max_depth`` levels.

    Without ``per_line`` ``data`` is one document and at most one offset (the first
    excess) is returned.  With ``per_line`` every line is a document of its own (JSON
    Lines): the offsets of the first excess of each offending line, in order.

    Brackets inside strings do not count.  On malformed input the measure may be off,
    but never for a prefix a JSON decoder accepts: a decoder stops at the first error,
    so it never nests deeper than this scanner allows.
    """
    if per_line:
        if _opens_per_line_at_most(data, max_depth):
            return np.empty(0, dtype=np.int64)  # the common case: no line has enough brackets to go deep
    elif data.count(b"[") + data.count(b"{") <= max_depth:
        return np.empty(0, dtype=np.int64)  # the common case: too few brackets to go deep
    scan = _DepthScan(max_depth, per_line)
    found: list[np.ndarray] = []
    for start in range(0, len(data), _CHUNK_BYTES):
        hits = scan.feed(_chunk(data, start))
        if hits.size:
            found.append(hits + start)
            if not per_line:
                return found[0][:1]
    return np.concatenate(found) if found else np.empty(0, dtype=np.int64)


def _chunk(data: bytes, start: int) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8, count=min(_CHUNK_BYTES, len(data) - start), offset=start)


def _opens_per_line_at_most(data: bytes, limit: int) -> bool:
    """Whether no line of ``data`` holds more than ``limit`` of ``[`` and ``{`` (a cheap bound on its depth).

    ``bytes.translate`` keeps only the brackets and line breaks (C speed, no array per byte);
    a run of ``limit + 1`` brackets between two breaks is then looked for.
    """
    marks = data.translate(None, _NOT_OPEN_OR_BREAK).replace(b"\r", b"\n")
    return re.search(rb"[^\n]{%d}" % (limit + 1), marks) is None


class _DepthScan:
    """The state :func:`too_deep` carries from one chunk to the next."""

    def __init__(self, max_depth: int, per_line: bool) -> None:
        self.max_depth, self.per_line = max_depth, per_line
        self.depth = 0  # nesting after the bytes seen so far
        self.in_string = False  # inside a string after the bytes seen so far
        self.backslashes = 0  # how many backslashes the bytes seen so far end with
        self.line_reported = False  # the current line already has an excess returned

    def feed(self, buf: np.ndarray) -> np.ndarray:
        """Offsets (in ``buf``) of the excesses it holds; updates the carried state.

        Per line, the running counts are reset at each line break by writing, at the break,
        minus what its line added (one ``np.add.reduceat``), so one cumulative sum serves all lines.
        """
        n = buf.size
        backslash = buf == _BACKSLASH
        if backslash.any() or self.backslashes:
            # run of backslashes ending at each byte; a byte after an odd run is escaped
            idx = np.arange(n, dtype=np.int32)
            last_other = np.maximum.accumulate(np.where(backslash, -1, idx))
            run = idx - last_other + np.where(last_other < 0, self.backslashes, 0)
            escaped = np.empty(n, dtype=bool)
            escaped[0] = self.backslashes % 2 == 1
            escaped[1:] = run[:-1] % 2 == 1
            self.backslashes = int(run[-1])
            quote = ((buf == _QUOTE) & ~escaped).astype(np.int32)
        else:
            quote = (buf == _QUOTE).astype(np.int32)
        breaks = np.flatnonzero((buf == _LF) | (buf == _CR)) if self.per_line else np.empty(0, dtype=np.int64)
        carried_quote, carried_depth = int(self.in_string), self.depth
        _reset_at(quote, breaks, carried_quote)
        toggles = np.cumsum(quote, dtype=np.int32) + carried_quote  # quotes so far in the line
        in_string = ((toggles - quote) & 1).astype(bool)  # inside a string before this byte
        delta = _DELTA[buf]
        delta[in_string] = 0
        delta[breaks] = 0
        _reset_at(delta, breaks, carried_depth)
        depth = np.cumsum(delta, dtype=np.int32) + carried_depth
        over = np.flatnonzero(depth > self.max_depth)
        if self.per_line:
            if over.size:
                line_of = np.searchsorted(breaks, over)  # 0: the line that began before this chunk
                first = np.empty(over.size, dtype=bool)
                first[0] = not (self.line_reported and line_of[0] == 0)
                first[1:] = line_of[1:] != line_of[:-1]
                over = over[first]
            last_line = breaks.size
            if breaks.size:  # the chunk's last line began in it
                self.line_reported = bool(over.size) and int(np.searchsorted(breaks, over[-1])) == last_line
            else:  # the whole chunk continues one line
                self.line_reported = self.line_reported or bool(over.size)
        self.depth = int(depth[-1])
        self.in_string = bool(toggles[-1] & 1)
        return over


def _reset_at(values: np.ndarray, breaks: np.ndarray, carried: int) -> None:
    """Write at each line break minus the sum of its line so far (the first line starts at ``carried``)."""
    if not breaks.size:
        return
    starts = np.empty(breaks.size, dtype=np.int64)
    starts[0] = 0
    starts[1:] = breaks[:-1] + 1
    sums = np.add.reduceat(values[: breaks[-1] + 1], starts)
    sums[0] += carried
    values[breaks] -= sums


def load_json(
    data: bytes | str,
    *,
    max_bytes: int | None = None,
    max_depth: int = MAX_DEPTH,
    allow_nan: bool = False,
) -> Any:
    """Decode one untrusted JSON document; raise :class:`JSONError` for anything refused.

    ``data`` is UTF-8 bytes (a leading byte-order mark is skipped) or text.  Refused:
    more than ``max_bytes`` bytes, invalid UTF-8, invalid JSON, nesting deeper than
    ``max_depth``, a key repeated within one object, integers too long for Python's
    ``int`` and -- unless ``allow_nan`` -- the ``NaN``, ``Infinity`` and ``-Infinity``
    literals (JSON has none; with ``allow_nan`` they become floats).
    """
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if max_bytes is not None and len(raw) > max_bytes:
        raise JSONError(f"the document is {len(raw):,} bytes; at most {max_bytes:,} are accepted")
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = line_and_column(raw, exc.start)
        raise JSONError(f"byte 0x{raw[exc.start]:02X} is not valid UTF-8", line, column) from None
    deep = too_deep(raw, max_depth=max_depth)
    if deep.size:
        raise JSONError(depth_message(max_depth), *line_and_column(raw, int(deep[0])))
    return decode(text, allow_nan=allow_nan)


def decode(text: str, *, allow_nan: bool = False) -> Any:
    """Decode JSON text whose nesting :func:`too_deep` has already bounded.

    Raises :class:`JSONError` as :func:`load_json` does (but checks neither size nor depth).
    The cyclic garbage collector is paused meanwhile: a document of many small arrays or objects
    would otherwise trigger full collections whose cost grows with everything the process holds
    (a worker's heap), making decoding superlinear.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _DECODERS[allow_nan].decode(text)
    except json.JSONDecodeError as exc:
        raise JSONError(exc.msg, exc.lineno, exc.colno, syntax=True) from None
    except _DuplicateKey as exc:
        raise JSONError(f"key {exc.args[0]!r} appears more than once in one object") from None
    except _Constant as exc:
        raise JSONError(f"{exc.args[0]} is not a JSON number (write null for a missing value)") from None
    except ValueError as exc:  # int(): more digits than sys.get_int_max_str_digits()
        raise JSONError(f"a number is too long ({exc})") from None
    except RecursionError:  # unreachable after too_deep; kept so no input ever escapes as one
        raise JSONError("nesting too deep") from None
    finally:
        if collecting:
            gc.enable()


class _DuplicateKey(Exception):
    pass


class _Constant(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def _refuse_constant(name: str) -> Any:
    raise _Constant(name)


_DECODERS = {
    True: json.JSONDecoder(object_pairs_hook=_unique_keys),
    False: json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_refuse_constant),
}


"""What parsing a predictions file gives (:class:`qval.predictions.Predictions`), kept as an Arrow IPC file, so that a
file checked once is scored without being parsed again.

:func:`dumps` writes the ids, the scores and the sample numbers (no positions: those only name rows in a refusal,
and a kept parse is of a file that passed); :func:`loads` reads them back, equal to what the parse gave. A kept
parse of another layout (:data:`LAYOUT`) is refused with :class:`ValueError`: read the file again then.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from .predictions import Predictions

LAYOUT = "1"
"""The layout of a kept parse; another one is not read (:func:`loads`)."""
_META = {b"qval.layout": LAYOUT.encode()}


def dumps(preds: Predictions) -> bytes:
    """``preds`` as the bytes of an Arrow IPC file: columns ``id``, ``score`` and (with samples) ``sample``; the
    format, the row count and the reference format's method name in its metadata."""
    columns: dict[str, pa.Array] = {
        "id": pa.array(preds.ids, type=pa.large_string()),
        "score": pa.array(preds.scores, type=pa.float64()),
    }
    if preds.samples is not None:
        columns["sample"] = pa.array(preds.samples, type=pa.int64())
    meta = {**_META, b"qval.format": preds.format.encode(), b"qval.num_rows": str(preds.num_rows).encode()}
    if preds.method_name is not None:
        meta[b"qval.method_name"] = preds.method_name.encode()
    table = pa.table(columns).replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def loads(data: bytes) -> Predictions:
    """The :class:`~qval.predictions.Predictions` :func:`dumps` kept; :class:`ValueError` for bytes that are not
    a kept parse of this :data:`LAYOUT`."""
    try:
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    except pa.ArrowInvalid as exc:
        raise ValueError(f"not a kept parse of a predictions file: {exc}") from None
    meta = table.schema.metadata or {}
    if meta.get(b"qval.layout") != LAYOUT.encode():
        raise ValueError(f"a kept parse of layout {meta.get(b'qval.layout')!r}, not {LAYOUT!r}")
    method = meta.get(b"qval.method_name")
    return Predictions(
        ids=table.column("id").to_numpy(zero_copy_only=False),
        scores=table.column("score").to_numpy(zero_copy_only=False),
        samples=table.column("sample").to_numpy() if "sample" in table.column_names else None,
        format=meta[b"qval.format"].decode(),
        num_rows=int(meta[b"qval.num_rows"]),
        method_name=method.decode() if method is not None else None,
    )


def read(path: str | Path) -> Predictions:
    """:func:`loads` of the file at ``path``."""
    return loads(Path(path).read_bytes())

"""Benchmark: the nesting scan of :mod:`qval.safejson` against reading the same bytes.

Every untrusted JSON is scanned for its nesting depth before any decoder sees it; this prints
what that scan costs, in CPU seconds (best of ``--repeat``) and as a ratio against a baseline
measured in the same run on the same bytes:

* ``jsonl typical``: a predictions file of ``--lines`` records, against pyarrow's JSON reader
  (what the upload parser uses for such a file); the scan is the bracket-per-line bound;
* ``jsonl brackets``: the same records with 70 brackets inside a string on each line, which
  passes that bound and takes the exact, vectorised scan; against pyarrow on the same bytes;
* ``json document``: one reference-format document of nested lists (the exact scan, whole
  document mode), against ``json.loads``.

Target: the typical JSON Lines scan costs at most 25% of the read (``PASS``/``FAIL`` line).

Usage::

    python benchmarks/json_depth.py                # 10^6 lines
    python benchmarks/json_depth.py --lines 100000 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable

import pyarrow as pa
import pyarrow.json as pa_json

from qval import safejson


def cpu(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return best


def arrow_read(data: bytes) -> Callable[[], object]:
    schema = pa.schema([("id", pa.string()), ("score", pa.float64())])
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    return lambda: pa_json.read_json(pa.py_buffer(data), parse_options=options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.lines
    typical = b"".join(b'{"id": "c%07d", "score": 0.%06d}\n' % (i, i % 999_983) for i in range(n))
    brackets = b"".join(b'{"id": "c%07d", "score": 0.5, "p": "%s"}\n' % (i, b"[" * 70) for i in range(n))
    document = json.dumps({"values": [[i] for i in range(n)]}).encode()
    cases = [
        ("jsonl typical", typical, lambda: safejson.too_deep(typical, per_line=True), arrow_read(typical)),
        ("jsonl brackets", brackets, lambda: safejson.too_deep(brackets, per_line=True), arrow_read(brackets)),
        ("json document", document, lambda: safejson.too_deep(document), lambda: json.loads(document)),
    ]
    print(f"{'case':16} {'MiB':>7} {'scan s':>8} {'read s':>8} {'scan/read':>9} {'scan MiB/s':>10}")
    ratios = {}
    for name, data, scan, read in cases:
        t_scan, t_read = cpu(scan, args.repeat), cpu(read, args.repeat)
        mib = len(data) / 2**20
        ratios[name] = t_scan / t_read
        print(f"{name:16} {mib:7.1f} {t_scan:8.3f} {t_read:8.3f} {ratios[name]:9.2f} {mib / max(t_scan, 1e-9):10.0f}")
    verdict = "PASS" if ratios["jsonl typical"] <= 0.25 else "FAIL"
    print(f"target: typical JSON Lines scan / read = {ratios['jsonl typical']:.2f} <= 0.25: {verdict}")


if __name__ == "__main__":
    main()

"""One pass per upload (issue 34 item 6): what an uploaded predictions file costs the workers, before and after.

Before, the file was parsed three times (the check, the scoring, the Ladder) and the split's labels loaded twice;
the Ladder's statistics (a paired bootstrap against the account's best) ran inside the transaction that finishes
the submission, so the account's and the split budget's locks were held for as long as they took. Now the check
keeps what it parsed (:mod:`qval.parsed_predictions`), the scoring reads that and hands it to the Ladder, and the
statistics run before the locks (:func:`qval.ladder.decide`), leaving :func:`qval.ladder.charge` under them.

Measured here, on synthetic hidden splits of ``n`` points (target V, one row per point), with the site's own code:

* ``reads``: the seconds the workers spend reading the file after its check: before, two more parses
  (:func:`qval.predictions.parse`, CSV); now, one read of the kept parse (:func:`qval.parsed_predictions.read`).
* ``locked``: the seconds the Ladder step holds the locks: before, :func:`qval.ladder.release` (decide and charge);
  now, :func:`qval.ladder.charge` alone.

Printed with the ratio before/now (each the median of ``--repeat`` runs, both measured in this run)::

    python benchmarks/upload_pass.py            # n = 10^3, 10^4, 10^5
    python benchmarks/upload_pass.py --quick    # n = 10^3, one repeat

The labels (PostgreSQL, :func:`leaderboard.loading.truth_for`) were loaded twice and are now loaded once: one
load saved, not timed here (it needs the site's database).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qval import budget, ladder, parsed_predictions, scoring  # noqa: E402
from qval import predictions as qpred  # noqa: E402


def _timed(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """The median seconds of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _entry(truth: scoring.Truth, preds: qpred.Predictions) -> ladder.Entry:
    rows = budget.released_rows(scoring.disclose(
        scoring.score(truth, preds.ids, preds.scores, codes=preds.codes(truth.index), bootstrap_resamples=0),
        hidden=True))
    return ladder.Entry(points=scoring.point_scores(truth, preds.ids, preds.scores, codes=preds.codes(truth.index)),
                        states=np.full(0, np.nan), board={r.metric: r.value for r in rows
                                                          if r.metric in ladder.LADDER_METRICS})


def measure(n: int, repeat: int, folder: Path) -> dict[str, float]:
    """The four timings for a split of ``n`` points."""
    rng = np.random.default_rng(n)
    labels = rng.normal(size=n)
    truth = scoring.Truth(point_ids=[f"state-{i:07d}" for i in range(n)], point_labels=labels)
    upload = folder / f"upload-{n}.csv"
    best_scores = labels + rng.normal(scale=2.0, size=n)
    new_scores = labels + rng.normal(scale=1.0, size=n)
    upload.write_text("id,score\n" + "".join(f"{i},{s!r}\n" for i, s in zip(truth.point_ids, new_scores.tolist())))
    preds = qpred.parse(upload, upload.name, reference_ids=truth.point_ids)
    kept = folder / f"upload-{n}.arrow"
    kept.write_bytes(parsed_predictions.dumps(preds))
    ids = np.asarray(truth.point_ids, dtype=object)
    best = _entry(truth, qpred.Predictions(ids=ids, scores=best_scores, samples=None, format="csv", num_rows=n))
    new = _entry(truth, preds)

    def parse_twice() -> None:
        for _ in range(2):
            qpred.parse(upload, upload.name, reference_ids=truth.point_ids)

    def release() -> None:
        ladder.release(labels, new, best, budget.Ledger(size=10**6, spent=0), attempt=2)

    decided = ladder.decide(labels, new, best, attempt=2)
    return {
        "reads_before": _timed(parse_twice, repeat),
        "reads_now": _timed(lambda: parsed_predictions.read(kept), repeat),
        "locked_before": _timed(release, repeat),
        "locked_now": _timed(lambda: ladder.charge(decided, new.board, budget.Ledger(size=10**6, spent=0)), repeat),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="n = 1000, one repeat")
    args = parser.parse_args(argv)
    sizes, repeat = ([1_000], 1) if args.quick else (args.sizes, args.repeat)
    print(f"{'n':>8} {'reads before':>13} {'now':>9} {'ratio':>8} {'locked before':>14} {'now':>9} {'ratio':>9}")
    with tempfile.TemporaryDirectory(prefix="qval-upload-pass-") as tmp:
        for n in sizes:
            t = measure(n, repeat, Path(tmp))
            print(f"{n:>8} {t['reads_before']:>12.4f}s {t['reads_now']:>8.4f}s {t['reads_before'] / t['reads_now']:>7.1f}x "
                  f"{t['locked_before']:>13.4f}s {t['locked_now']:>8.6f}s {t['locked_before'] / t['locked_now']:>8.0f}x")


if __name__ == "__main__":
    main()

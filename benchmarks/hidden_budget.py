"""Attacks on a hidden split's release protocol, run with the site's own release code.

Every release goes through what the site runs when a user's submission on a hidden split finishes:
:func:`qval.scoring.score`, :func:`qval.scoring.disclose`, :func:`qval.budget.released_rows` and
:func:`qval.ladder.release` against the split's :class:`qval.budget.Ledger` (the database row of
:mod:`budgets` holds the same two numbers).  Synthetic hidden splits: ``n`` labels drawn from a normal.

* **Reconstruction by sybils** (:func:`reconstruction`, issue 32 item 1): ``accounts`` accounts each make
  ``per_account`` submissions as the rules allow -- a random file first, then perturbations of the account's
  best -- and the attacker fits, by least squares on every released global ρ (Spearman ρ is linear in the
  hidden ranks), the file that best explains them; printed: its hidden ρ.
* **Label-free climbing** (:func:`label_free_climb`, issue 32 item 2): one account, ``submissions``
  submissions that know nothing of the labels; each perturbs the account's best and keeps what climbs;
  printed: the public score the board ends on (true ρ 0).

Each is run with the site's budget (:func:`qval.budget.budget_size`) and, for contrast, with an unlimited
ledger (the per-account Ladder alone).  ``python benchmarks/hidden_budget.py`` prints the means over seeds;
``tests/test_ladder.py`` asserts the issue's targets with the same functions.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qval import budget, ladder, scoring  # noqa: E402

UNLIMITED = 10**9
"""A ledger size no attack spends: the Ladder without the shared budget."""


def synthetic_split(n: int, seed: int) -> scoring.Truth:
    """A hidden split of ``n`` points with normal labels (target V: no candidates)."""
    labels = np.random.default_rng(seed).normal(size=n)
    return scoring.Truth(point_ids=[f"p{i:04d}" for i in range(n)], point_labels=labels)


def entry(truth: scoring.Truth, scores: np.ndarray) -> ladder.Entry:
    """A file of ``scores`` (one per point, in order) as the site's Ladder sees it: scored, disclosed and
    reduced to what a user's row releases."""
    ids = np.asarray(truth.point_ids, dtype=object)
    rows = budget.released_rows(scoring.disclose(scoring.score(truth, ids, scores, bootstrap_resamples=0),
                                                 hidden=True))
    board = {r.metric: r.value for r in rows if r.metric in ladder.LADDER_METRICS}
    return ladder.Entry(points=np.asarray(scores, dtype=np.float64), states=np.full(0, np.nan), board=board)


def _centred_ranks(scores: np.ndarray) -> np.ndarray:
    from scipy import stats

    r = stats.rankdata(scores)
    r = r - r.mean()
    return r / np.linalg.norm(r)


def least_squares_file(released: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """The attacker's fit: the minimum-norm ranks ``r`` with ``corr(rank(x_i), r) = rho_i`` for every
    released ``(x_i, rho_i)`` (each released Spearman ρ is one linear equation in the hidden ranks)."""
    design = np.stack([_centred_ranks(x) for x, _ in released])
    values = np.array([rho for _, rho in released])
    return np.linalg.pinv(design) @ values


def reconstruction(n: int, seed: int, *, accounts: int = 60, per_account: int = 5, size: int | None = None,
                   noise: float = 0.3) -> tuple[float, int]:
    """Run the sybil attack on a synthetic split of ``n`` points; return the hidden ρ of the reconstructed
    file and how many numbers were released.  ``size``: the ledger (default the site's
    :func:`qval.budget.budget_size`)."""
    truth = synthetic_split(n, seed)
    rng = np.random.default_rng(10_000 + seed)
    ledger = budget.Ledger(size=budget.budget_size(n) if size is None else size)
    released: list[tuple[np.ndarray, float]] = []
    bests: list[ladder.Entry | None] = [None] * accounts
    for attempt in range(1, per_account + 1):
        for account in range(accounts):
            best = bests[account]
            scores = rng.normal(size=n) if best is None else best.points + noise * rng.normal(size=n)
            new = entry(truth, scores)
            decision = ladder.release(truth.point_labels, new, best, ledger, attempt=attempt)
            if decision.climbs:
                bests[account] = new
                if "spearman" in decision.released:
                    released.append((scores, float(new.board["spearman"])))  # type: ignore[arg-type]
    if not released:
        return 0.0, 0
    fitted = least_squares_file(released)
    rho = scoring.score(truth, np.asarray(truth.point_ids, dtype=object), fitted, bootstrap_resamples=0)[0]
    assert rho.metric == "spearman"
    return float(rho.value or 0.0), ledger.spent


def label_free_climb(n: int, seed: int, *, submissions: int = 100, noise: float = 0.2,
                     size: int | None = UNLIMITED) -> float:
    """One account's ``submissions`` label-free files on a synthetic split of ``n`` points, each the best
    plus noise of ``noise`` times its spread, keeping what climbs; return the public (board) score it ends
    on.  ``size``: the ledger (default unlimited: the Ladder alone; ``None``: the site's budget)."""
    truth = synthetic_split(n, seed)
    rng = np.random.default_rng(20_000 + seed)
    ledger = budget.Ledger(size=budget.budget_size(n) if size is None else size)
    best: ladder.Entry | None = None
    for attempt in range(1, submissions + 1):
        scores = rng.normal(size=n) if best is None else best.points + noise * best.points.std() * rng.normal(size=n)
        new = entry(truth, scores)
        if ladder.release(truth.point_labels, new, best, ledger, attempt=attempt).climbs:
            best = new
    return float(best.board["spearman"]) if best is not None and best.board["spearman"] is not None else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    seeds = range(args.seeds)
    started = time.perf_counter()
    print(f"budget: floor(n / {budget.POINTS_PER_NUMBER}) numbers per hidden split and target; Ladder: alpha "
          f"{ladder.ALPHA} spent over attempts, fixed step {ladder.STEP} / sqrt(n - 1)")
    print("\n60-account reconstruction (5 submissions each), hidden rho of the least-squares file:")
    for n in (60, 200):
        for label, size in (("site budget", None), ("no shared budget", UNLIMITED)):
            results = [reconstruction(n, s, size=size) for s in seeds]
            rhos = np.array([r for r, _ in results])
            spent = np.mean([k for _, k in results])
            print(f"  n={n:4d} {label:17s} numbers released {spent:6.1f}  hidden rho mean {rhos.mean():.3f} "
                  f"(sd {rhos.std(ddof=1):.3f}, max {rhos.max():.3f}, share >= 0.3: {np.mean(rhos >= 0.3):.2f}); "
                  f"sqrt(m/n) = {budget.reconstruction_rho(int(spent), n):.3f}")
    print("\n100 label-free adaptive submissions of one account, n=200, public score (true rho 0):")
    for noise in (0.05, 0.2, 1.0):
        for label, size in (("Ladder alone", UNLIMITED), ("site budget", None)):
            scores = np.array([label_free_climb(200, s, noise=noise, size=size) for s in seeds])
            print(f"  perturbation {noise:4.2f} x spread, {label:12s}: mean {scores.mean():.3f} "
                  f"(sd {scores.std(ddof=1):.3f}, max {scores.max():.3f})")
    n, k = 200, 300
    size = budget.budget_size(n)
    print(f"\ntranscript bound at n={n}: budget {size} numbers, {k} submissions: "
          f"{budget.transcript_bits(size, k):.0f} bits (log2 {n}! = {np.sum(np.log2(np.arange(1, n + 1))):.0f})")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()

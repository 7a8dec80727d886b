"""The rank of a row on a board, as a range that follows the confidence intervals.

The rule is Chatbot Arena's, on the rows' 95% confidence intervals (CI non-overlap; no pairing is
needed, so rows of different kinds -- an uploaded file, a container, a re-scored published row -- are
ranked alike):

* row *j* is **significantly better** than row *i* when *j*'s whole interval lies beyond *i*'s: its low
  end above *i*'s high end (for a metric where higher is better; the mirror image otherwise);
* *i*'s **best rank** is 1 + the number of rows significantly better than *i*;
* *i*'s **worst rank** is the number of rows not significantly worse than *i* (*i* itself included).

So two rows whose intervals overlap get rank ranges that overlap (two such rows alone share "1–2"), and a
row significantly better than another has both ends of its range strictly better.  Intervals that do not
overlap give disjoint ranges unless a third row overlaps both.

A row without an interval (a number reported without one) is compared with the others by its value, as
an interval of width zero, and gets a **point rank** (:attr:`Rank.point`): 1 + the number of rows whose
value is strictly better, ties sharing it.  A row without a value is not ranked (the caller leaves it
out).  Nothing here knows about Django.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """What a rank is computed from: a value and, when known, its 95% interval ``[ci_low, ci_high]``."""

    value: float
    ci_low: float | None = None
    ci_high: float | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.value):
            raise ValueError(f"a ranked value must be finite, got {self.value!r}")
        if (self.ci_low is None) != (self.ci_high is None):
            raise ValueError(f"an interval needs both ends, got [{self.ci_low!r}, {self.ci_high!r}]")
        if self.ci_low is not None and self.ci_high is not None:
            if not (math.isfinite(self.ci_low) and math.isfinite(self.ci_high)):
                raise ValueError(f"interval ends must be finite, got [{self.ci_low!r}, {self.ci_high!r}]")
            if self.ci_low > self.ci_high:
                raise ValueError(f"interval low end {self.ci_low!r} is above its high end {self.ci_high!r}")

    @property
    def has_ci(self) -> bool:
        """Whether the row has an interval."""
        return self.ci_low is not None

    @property
    def low(self) -> float:
        """Low end of the interval; the value for a row without one."""
        return self.value if self.ci_low is None else self.ci_low

    @property
    def high(self) -> float:
        """High end of the interval; the value for a row without one."""
        return self.value if self.ci_high is None else self.ci_high


@dataclass(frozen=True)
class Rank:
    """A row's rank: ``best`` to ``worst`` (1 is first); ``point`` when the row has no interval, so its
    rank follows its value alone."""

    best: int
    worst: int
    point: bool = False

    @property
    def label(self) -> str:
        """``"1"`` for a single rank, ``"2–4"`` (en dash) for a range."""
        return str(self.best) if self.best == self.worst else f"{self.best}\u2013{self.worst}"


def significantly_better(a: Row, b: Row, *, higher_is_better: bool = True) -> bool:
    """Whether ``a`` is significantly better than ``b``: ``a``'s interval lies wholly beyond ``b``'s (a row
    without an interval counts as its value)."""
    return a.low > b.high if higher_is_better else a.high < b.low


def rank(rows: Sequence[Row], *, higher_is_better: bool = True) -> list[Rank]:
    """The :class:`Rank` of each of ``rows``, in their order (see the module doc for the rule).

    Quadratic in the number of rows, which a board (one slice, best per entry) keeps in the hundreds."""
    ranks = []
    for i, row in enumerate(rows):
        if not row.has_ci:
            better = sum(1 for other in rows
                         if (other.value > row.value if higher_is_better else other.value < row.value))
            ranks.append(Rank(better + 1, better + 1, point=True))
            continue
        better = sum(1 for j, other in enumerate(rows)
                     if j != i and significantly_better(other, row, higher_is_better=higher_is_better))
        worse = sum(1 for j, other in enumerate(rows)
                    if j != i and significantly_better(row, other, higher_is_better=higher_is_better))
        ranks.append(Rank(better + 1, len(rows) - worse))
    return ranks

"""Where a result stands: its board, its rank range and the rows around it (why one is on no board is
:func:`submissions.selectors.why_unranked`).

A finished test result is on one board (:mod:`board.boards`): its slice, the tab of its source (verified or
self-reported), ranked by the board's default metric. It stands on the default view (the best per entry) when it is
its entry's best, else only among all submissions (``?all=1``). The pages that show it: a result's permalink, a
submission's page and *My submissions*.

Positions are kept per board and results version (:func:`board.evaluations.derived`), so finding a result costs one
dictionary look-up however many rows its board has.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.urls import reverse

from . import boards, evaluations
from .boards import SELF_REPORTED, TABS, VERIFIED, Board, Row, Slice

AROUND = 2
"""Rows shown above and below a result on its page."""


@dataclass(frozen=True)
class Standing:
    """A result on its board: the ``board``, its ``row``, its ``position`` (0-based) and the ``neighbours`` around it
    (its own row included)."""

    board: Board
    row: Row
    position: int
    neighbours: tuple[Row, ...]

    @property
    def rank(self) -> str:
        """The rank range, ``1`` or ``2–4``."""
        return self.row.rank.label

    @property
    def url(self) -> str:
        """The board's page that shows this row: its tab, ``all=1`` when the row is not its entry's best, its page
        of rows, and the row's anchor."""
        page = self.position // boards.PAGE_ROWS + 1
        query = {**({"source": self.board.tab} if self.board.tab != VERIFIED else {}),
                 **({"all": "1"} if self.board.all_submissions else {}), **({"page": str(page)} if page > 1 else {})}
        return (reverse("board", args=[self.board.slice.key]) + (f"?{urlencode(query)}" if query else "")
                + f"#row-{self.row.evaluation.submission_id}")

    @property
    def tab_label(self) -> str:
        """The board's tab, as its page names it (``verified``, ``self-reported``)."""
        return TABS[self.board.tab][0]


def _positions(board: Board) -> dict[int, int]:
    """Submission id -> position on ``board``, kept per results version."""
    key = ("standing", board.slice, board.metric.name, board.all_submissions, board.tab)
    return evaluations.derived(key, lambda _: {r.evaluation.submission_id: i for i, r in enumerate(board.rows)})


def standing(submission_id: int, slice_: Slice, around: int = AROUND) -> Standing | None:
    """Where submission ``submission_id`` stands on the board of ``slice_`` (ranked by
    :data:`qval.metric_registry.HEADLINE`): the default view first, else among all submissions; ``None`` when it is on
    neither tab (see :func:`submissions.selectors.why_unranked`)."""
    for all_submissions in (False, True):
        for tab in (VERIFIED, SELF_REPORTED):
            b = boards.board(slice_, all_submissions=all_submissions, tab=tab)
            at = _positions(b).get(submission_id)
            if at is not None:
                return Standing(b, b.rows[at], at, b.rows[max(at - around, 0):at + around + 1])
    return None

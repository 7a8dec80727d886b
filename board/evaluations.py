"""Every finished evaluation with its headline metrics: the rows the leaderboard, the
aggregates, the figures and their APIs all start from.

:func:`evaluations` reads them with a constant number of queries (one to learn whether
anything changed, two more when it did) and keeps them in memory per process, so a page
costs the same however many results the database holds.  The memo is keyed by the results
version, a row that PostgreSQL triggers bump in the same transaction as every write to the
results, to a finished submission or to a method (:class:`submissions.models.ResultsVersion`):
a submission that finishes (or is re-scored, or re-imported) changes it.  Of a hidden split's
ladder (:mod:`submissions.ladder`) only each account's current best is an evaluation.

On a hidden split of an open-book dataset (:attr:`leaderboard.models.Environment.open_book`: its
labels follow from the observations) only the rows the platform ran itself are evaluations
(:meth:`submissions.models.Submission.rankable`); an uploaded file there is scored for its
uploader but ranked nowhere.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from qval import families, metric_registry

FILTER_KEYS = ("environment", "dataset", "split", "target", "modality", "family", "backbone", "source", "method")
"""Query parameters that select evaluations (each an exact value; empty means any)."""


@dataclass(frozen=True)
class Score:
    """One metric of one evaluation."""

    value: float | None
    p_value: float | None
    num_points: int
    ci_low: float | None = None
    ci_high: float | None = None
    std: float | None = None
    resampled: Mapping[str, Any] | None = None
    """What the interval's resamples drew (a result's ``details.ci95_resampled``, :func:`qval.sampling.describe`);
    ``None`` for an interval stored before intervals recorded it."""
    printed_marks: str = ""
    """The significance marks the paper prints beside this number (a reported row's ``details.paper.stars``;
    the paper gives marks, never a p-value)."""
    computed_marks: str = ""
    """An erratum's marks, where the paper's stand beside another number: computed from the authors' number and
    its point count (``details.computed_marks.stars``, :func:`qval.errata.computed_marks`)."""


@dataclass(frozen=True)
class Evaluation:
    """A finished submission (ours or imported) with its metrics by name."""

    submission_id: int
    method: str
    family: str
    environment: str
    environment_slug: str
    dataset: str
    split: str
    target: str
    modality: str
    backbone: str
    source: str
    rules: str
    submitted_by: str
    date: Any
    """When the result was made: a submission's finish time; a reported row's paper date."""
    scores: Mapping[str, Score] = field(default_factory=dict)

    @property
    def family_name(self) -> str:
        """Display name of :attr:`family`."""
        return families.get(self.family).name

    def value(self, metric: str) -> float | None:
        """The value of ``metric``, ``None`` when absent or undefined."""
        score = self.scores.get(metric)
        return score.value if score else None

    def matches(self, filters: Mapping[str, str]) -> bool:
        """Whether every non-empty filter (:data:`FILTER_KEYS`) holds."""
        for key, wanted in filters.items():
            if not wanted:
                continue
            if key == "environment":
                have = self.environment_slug
            elif key == "dataset":
                have = self.dataset if "@" in wanted else self.dataset.partition("@")[0]
            else:
                have = getattr(self, key)
            if have != wanted:
                return False
        return True


_memo: dict[str, Any] = {"version": None, "rows": []}
_lock = threading.Lock()


def version() -> tuple[str, int]:
    """The results version (``(epoch, counter)`` of :class:`submissions.models.ResultsVersion`, one
    primary-key read); ``("", 0)`` before anything was written.  A page reads it a few times, so the read is
    plain SQL: the ORM's query building cost more CPU than the read itself."""
    from django.db import connection

    from submissions.models import ResultsVersion

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT epoch, counter FROM {ResultsVersion._meta.db_table} WHERE id = 1")
        row = cursor.fetchone()
    return (row[0], row[1]) if row is not None else ("", 0)


def on_board():  # type: ignore[no-untyped-def]
    """The finished submissions the board shows: public ones only (a private row is its owner's), and on a
    hidden split's ladder (:mod:`submissions.ladder`) only each scope's current best, never one that did not
    climb nor one a later climb replaced, public or private: a replacing row made private hides itself, not
    the replacement (the older row revived would be a released score the Ladder had withdrawn)."""
    from submissions.models import Submission

    finished = Submission.objects.filter(Submission.rankable(), state=Submission.FINISHED)
    replaced = finished.filter(ladder_climbed=True).exclude(ladder_against=None).values("ladder_against")
    return finished.filter(public=True).exclude(ladder_climbed=False).exclude(pk__in=replaced)


def _load() -> list[Evaluation]:
    from submissions.models import Result

    subs = (
        on_board()
        .order_by("id")
        .values_list(
            "id", "method__name", "method__family", "dataset__environment__name", "dataset__environment__slug",
            "dataset__slug", "dataset__version", "split", "target", "modality", "backbone__name", "source", "rules",
            "user__username", "finished_at", "provenance__paper_date",
        )
    )
    scores: dict[int, dict[str, Score]] = {}
    names = [m.name for m in metric_registry.METRICS]
    results = Result.objects.filter(submission__in=on_board(), metric__in=names).values_list(
        "submission_id", "metric", "value", "p_value", "num_points", "details__ci95", "details__std",
        "details__paper__stars",
        "details__ci95_resampled", "details__computed_marks__stars",
    )
    for sid, metric, value, p_value, num_points, ci, std, marks, resampled, computed in results:
        low, high = ci if isinstance(ci, list) and len(ci) == 2 else (None, None)
        scores.setdefault(sid, {})[metric] = Score(
            value, p_value, num_points, low, high, _number(std),
            resampled if isinstance(resampled, dict) else None, marks if isinstance(marks, str) else "",
            computed if isinstance(computed, str) else "")
    rows = []
    sources = {"reported": "reported by the authors", "rescored": "re-scored from published predictions"}
    for (sid, method, family, env, env_slug, ds_slug, ds_version, split, target, modality, backbone, source,
         rules, username, finished, paper_date) in subs:
        rows.append(Evaluation(
            submission_id=sid, method=method or "", family=family or families.OTHER.slug, environment=env,
            environment_slug=env_slug, dataset=f"{ds_slug}@{ds_version}", split=split, target=target,
            modality=modality, backbone=backbone or "", source=source, rules=rules,
            submitted_by=username or sources.get(source, source), date=(_published(paper_date) if source == "reported" else None) or finished,
            scores=scores.get(sid, {}),
        ))
    return rows


def _number(value: object) -> float | None:
    """A number read from a result's details, ``None`` for anything else (absent, null, text)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _published(day: object) -> datetime.datetime | None:
    """The date a reported row shows, its paper's (``provenance.paper_date``, an ISO date), as midnight UTC
    so that it sorts among the other rows' times; ``None`` for a row without one."""
    if not isinstance(day, str):
        return None
    return datetime.datetime.combine(datetime.date.fromisoformat(day), datetime.time(), datetime.timezone.utc)


def current() -> tuple[tuple[str, int], list[Evaluation]]:
    """``(version, rows)``: every finished evaluation, ordered by submission id, and the
    version it was read at (memoised, see the module doc).  Treat ``rows`` as read-only."""
    now = version()
    with _lock:
        if _memo["version"] != now:
            _memo["rows"] = _load()
            _memo["version"] = now
        return now, _memo["rows"]


T = TypeVar("T")
DERIVED_MAX = 256
"""Values :func:`derived` keeps per process (all of one results version; the oldest goes first)."""
_derived: dict[str, Any] = {"version": None, "values": {}}


def derived(key: Hashable, make: Callable[[list[Evaluation]], T]) -> T:
    """``make(rows)`` of the current evaluations, kept under ``key`` until the results version changes:
    what pages compute from every row (a figure, the filter choices, a view of the board) costs the version
    check when asked again.  Computed outside the lock; two threads may both compute a new key, and keep
    either."""
    return versioned(key, make)[1]


def versioned(key: Hashable, make: Callable[[list[Evaluation]], T]) -> tuple[tuple[str, int], T]:
    """:func:`derived`, with the results version the value is of (read once: a page that keys a cached fragment by
    the version needs no second read)."""
    version, rows = current()
    with _lock:
        if _derived["version"] == version and key in _derived["values"]:
            return version, _derived["values"][key]
    value = make(rows)
    with _lock:
        if _memo["version"] != version:
            return version, value  # another thread has read a newer version meanwhile: keep nothing stale
        if _derived["version"] != version:
            _derived.update(version=version, values={})
        values = _derived["values"]
        if len(values) >= DERIVED_MAX:
            del values[next(iter(values))]  # the oldest: a burst of new keys never drops them all
        values[key] = value
    return version, value


def evaluations() -> list[Evaluation]:
    """Every finished evaluation, ordered by submission id (see :func:`current`)."""
    return current()[1]


def select(filters: Mapping[str, str], rows: Sequence[Evaluation] | None = None) -> list[Evaluation]:
    """The evaluations matching ``filters`` (see :meth:`Evaluation.matches`)."""
    return [e for e in (evaluations() if rows is None else rows) if e.matches(filters)]


def best(rows: Sequence[Evaluation], metric: str) -> list[Evaluation]:
    """The best evaluation per (method, dataset, backbone, split, target, modality, source)
    by ``metric`` (by its direction; ties to the newest), leaving out those without a value,
    so a method that submitted many times counts once per evaluation."""
    spec = metric_registry.get(metric)
    chosen: dict[tuple[str, ...], Evaluation] = {}
    for e in rows:
        value = e.value(metric)
        if value is None:
            continue
        key = (e.method, e.dataset, e.backbone, e.split, e.target, e.modality, e.source)
        old = chosen.get(key)
        if old is None:
            chosen[key] = e
            continue
        old_value = old.value(metric)
        assert old_value is not None
        better = value > old_value if spec.higher_is_better else value < old_value
        if better or (value == old_value and e.submission_id > old.submission_id):
            chosen[key] = e
    return sorted(chosen.values(), key=lambda e: (e.method, e.dataset, e.backbone, e.target, e.modality, e.source))

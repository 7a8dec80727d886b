"""Who waits where, read from the database: the queue of every queued or running job of every kind
(:mod:`jobs.registry`), a queued job's position in its queue, and each queue's jobs, progress and estimate for the
status page.

A worker takes the messages on its queue by priority, then in the order they were queued: every user's job before
any of the platform's own runs (reference rows, training and Best-of-N runs, dataset builds:
:data:`jobs.services.PLATFORM_PRIORITY`), and those before its costliest ones (:data:`jobs.services.COSTLY_PRIORITY`);
so the jobs ahead of a queued one are those of a higher priority and those of its own queued before it. The
broker's own count of messages is the status page's other column (:func:`workers.selectors.queue_depths`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from .models import Job
from .progress import Progress, time_left_words
from .registry import kinds
from .services import USER_PRIORITY, JobKind, Work


@dataclass(frozen=True)
class Entry:
    """One queued or running job: its ``kind`` (:attr:`jobs.services.JobKind.name`), id, queue, message priority,
    when it was queued, (running) its progress and since when, and its expected :class:`~jobs.services.Work`
    (:meth:`jobs.services.JobKind.work`; ``None``: not known)."""

    kind: str
    pk: int
    queue: str
    priority: int
    queued_at: datetime
    progress: Progress | None = None
    running_since: datetime | None = None
    work: Work | None = None

    @property
    def platform(self) -> bool:
        """Whether it is the platform's own run rather than a user's job."""
        return self.priority != USER_PRIORITY

    @property
    def order(self) -> tuple[int, datetime, str, int]:
        """Its place in the order a worker takes its queue's messages: by priority, then by time queued."""
        return (self.priority, self.queued_at, self.kind, self.pk)


def _entries(kind: JobKind, jobs: Iterable[Job], weigh: bool = False) -> list[Entry]:  # type: ignore[type-arg]
    jobs = list(jobs)
    works = kind.work(jobs) if weigh else [None] * len(jobs)
    return [Entry(kind.name, job.pk, kind.queue_name(job), kind.priority(job), job.queued_at,
                  job.job_progress if job.job_state == job.RUNNING else None, job.running_since, work)
            for job, work in zip(jobs, works, strict=True)]


def queued(weigh: bool = False) -> list[Entry]:
    """Every queued job of every kind, in the order its queue's workers take them; with their expected work
    (:attr:`Entry.work`) when ``weigh``, which costs a query of its own per kind that tells it."""
    out: list[Entry] = []
    for kind in kinds():
        out += _entries(kind, kind.in_state(kind.model.QUEUED), weigh)
    return sorted(out, key=lambda e: e.order)


def running(weigh: bool = False) -> list[Entry]:
    """Every running job of every kind, with its progress, oldest start first; with their expected work when
    ``weigh``."""
    out: list[Entry] = []
    for kind in kinds():
        out += _entries(kind, kind.in_state(kind.model.RUNNING), weigh)
    return sorted(out, key=lambda e: e.running_since or e.queued_at)


@dataclass(frozen=True)
class Position:
    """Where a queued job stands: its ``queue``, how many queued jobs a worker takes before it (``ahead``; 0: it
    is next) and how many jobs run on that queue now (``running``)."""

    queue: str
    ahead: int
    running: int

    def as_dict(self) -> dict[str, object]:
        """JSON-friendly form (the API's ``queue_position``)."""
        return {"queue": self.queue, "ahead": self.ahead, "running": self.running}


def position(kind: JobKind, job: Job) -> Position | None:  # type: ignore[type-arg]
    """The position of ``job`` (of ``kind``) in its queue; ``None`` unless it is queued."""
    if job.job_state != job.QUEUED:
        return None
    [me] = _entries(kind, [job])
    ahead = sum(1 for e in queued() if e.queue == me.queue and e.order < me.order)
    busy = sum(1 for e in running() if e.queue == me.queue)
    return Position(me.queue, ahead, busy)


def seconds_left(entry: Entry, now: datetime | None = None) -> tuple[float | None, float | None]:
    """``(seconds left, whole run's seconds)`` of a running job at its measured rate: its progress's own estimate
    where it has one, else the time since it started over the share done (``done / total``); ``(None, None)``
    before anything is done."""
    p = entry.progress
    if p is None or not p.total or p.done <= 0:
        return None, None
    share = min(1.0, p.done / p.total)
    if p.seconds_left is not None:
        whole = p.seconds_left / (1 - share) if share < 1 else None
        return p.seconds_left, whole
    if entry.running_since is None:
        return None, None
    elapsed = max(0.0, ((now or timezone.now()) - entry.running_since).total_seconds())
    return elapsed * (1 - share) / share, elapsed / share


@dataclass
class QueueSummary:
    """One queue on the status page: what runs on it (with progress), how many users' jobs and platform runs wait,
    the estimate until it is empty (:attr:`seconds_left`) and how many waiting jobs it leaves out, for want of any
    measure of their length (:attr:`unmeasured`)."""

    name: str
    running: list[dict[str, object]] = field(default_factory=list)
    users_waiting: int = 0
    platform_waiting: int = 0
    seconds_left: float | None = None
    unmeasured: int = 0

    @property
    def time_left(self) -> str:
        """:attr:`seconds_left` in words, with the jobs it leaves out."""
        words = time_left_words(self.seconds_left)
        if words and self.unmeasured:
            jobs = "job" if self.unmeasured == 1 else "jobs"
            words += f", and {self.unmeasured} waiting {jobs} of a kind not measured yet"
        return words


RECENT_FINISHED = 200
"""How many of a kind's newest finished jobs :func:`measured` reads."""
MEASURED_SHARE = 0.1
"""Below this share done, a running job of known work is estimated by its expected work rather than by its own rate:
a batched LLM row reports its first point or two minutes in and the rest together, and a rate read off 1 point of 94
said 6 hours for a 10-minute row."""


@dataclass(frozen=True)
class Measures:
    """What finished jobs measured: seconds per unit of work on each queue (``per_work``: the run times of its jobs
    of known work over their work, summed) and of each (queue, :attr:`~jobs.services.Work.like`) (``alike``), and
    the mean run time of each (queue, kind) (``length``)."""

    per_work: dict[str, float]
    alike: dict[tuple[str, str], float]
    length: dict[tuple[str, str], float]


def measured() -> Measures:
    """The :class:`Measures` of every kind's newest finished jobs (:data:`RECENT_FINISHED` of each; run time:
    started to finished)."""
    work_sums: dict[str, tuple[float, float]] = {}
    alike_sums: dict[tuple[str, str], tuple[float, float]] = {}
    times: dict[tuple[str, str], list[float]] = {}
    for kind in kinds():
        jobs = list(kind.in_state(kind.model.FINISHED).order_by("-finished_at")[:RECENT_FINISHED])
        for job, work in zip(jobs, kind.work(jobs), strict=True):
            start, end = job.running_since, getattr(job, "finished_at", None)
            if not (start and end and end > start):
                continue
            queue, seconds = kind.queue_name(job), (end - start).total_seconds()
            times.setdefault((queue, kind.name), []).append(seconds)
            if work and work.units > 0:
                done, units = work_sums.get(queue, (0.0, 0.0))
                work_sums[queue] = (done + seconds, units + work.units)
                if work.like:
                    done, units = alike_sums.get((queue, work.like), (0.0, 0.0))
                    alike_sums[(queue, work.like)] = (done + seconds, units + work.units)
    return Measures({queue: done / units for queue, (done, units) in work_sums.items()},
                    {key: done / units for key, (done, units) in alike_sums.items()},
                    {key: sum(v) / len(v) for key, v in times.items()})


def summaries(names: Iterable[str], now: datetime | None = None) -> list[QueueSummary]:
    """A :class:`QueueSummary` of each queue of ``names`` (and of any other a job is on).

    The estimate: the running jobs' time left at their measured rate (:func:`seconds_left`), plus the waiting
    jobs' time shared among as many workers as run now.  A job whose expected work is known (:attr:`Entry.work`)
    takes that work at the seconds per unit of its finished jobs alike (the same method on the same environment,
    :attr:`Measures.alike`), else of its queue's newest finished jobs of known work (:func:`measured`), else of
    its queue's running ones (their whole runs' seconds over their work).  So a queue of runs as unlike as a
    2-minute ``verifier`` row and a 2-hour ``direct-16`` row is not estimated as so many copies of the one
    running, and ALFWorld all types' rows are measured by pick & place's rather than by FrozenLake's short
    prompts; a running job of known work with less than :data:`MEASURED_SHARE` done counts its expected run less
    the time it has run.  Any other waiting job takes the mean whole run of the running jobs of its kind on its
    queue, else of its kind's finished ones there; a job with neither is counted apart
    (:attr:`QueueSummary.unmeasured`), not guessed from another kind.  ``None`` when a running job has no rate
    yet, or nothing is measured."""
    now = now or timezone.now()
    by_name = {name: QueueSummary(name) for name in names}
    finished = measured()
    lengths: dict[tuple[str, str], list[float]] = {}
    weighed: dict[str, list[tuple[float, float]]] = {}
    left: dict[str, list[float | None]] = {}
    waiting: dict[str, list[Entry]] = {}

    def rate(queue: str, work: Work, fallback: float | None) -> float | None:
        alike = finished.alike.get((queue, work.like))
        return alike if alike is not None else fallback

    for e in running(weigh=True):
        summary = by_name.setdefault(e.queue, QueueSummary(e.queue))
        rest, whole = seconds_left(e, now)
        share = e.progress.done / e.progress.total if e.progress and e.progress.total else 0.0
        per_work = rate(e.queue, e.work, finished.per_work.get(e.queue)) if e.work else None
        if share < MEASURED_SHARE and e.work and per_work and e.running_since is not None:
            whole = e.work.units * per_work
            rest = max(0.0, whole - (now - e.running_since).total_seconds())
        summary.running.append({"kind": e.kind, "id": e.pk, "platform": e.platform,
                                "progress": e.progress.as_dict() if e.progress else None,
                                "seconds_left": rest, "time_left": time_left_words(rest)})
        left.setdefault(e.queue, []).append(rest)
        if whole is not None:
            lengths.setdefault((e.queue, e.kind), []).append(whole)
            if e.work and e.work.units > 0:
                weighed.setdefault(e.queue, []).append((whole, e.work.units))
    for e in queued(weigh=True):
        summary = by_name.setdefault(e.queue, QueueSummary(e.queue))
        waiting.setdefault(e.queue, []).append(e)
        if e.platform:
            summary.platform_waiting += 1
        else:
            summary.users_waiting += 1
    for summary in by_name.values():
        rests = left.get(summary.name, [])
        if any(r is None for r in rests):
            continue  # a running job has no measured rate yet
        runs = weighed.get(summary.name, [])
        per_work = finished.per_work.get(summary.name) or (
            sum(w for w, _ in runs) / sum(u for _, u in runs) if runs else None)
        ahead, counted = 0.0, 0
        for e in waiting.get(summary.name, []):
            same_kind = lengths.get((e.queue, e.kind))
            job_rate = rate(e.queue, e.work, per_work) if e.work is not None else None
            if e.work is not None and job_rate is not None:
                ahead += e.work.units * job_rate
            elif same_kind:
                ahead += sum(same_kind) / len(same_kind)
            elif (e.queue, e.kind) in finished.length:
                ahead += finished.length[(e.queue, e.kind)]
            else:
                summary.unmeasured += 1
                continue
            counted += 1
        if rests or counted:
            summary.seconds_left = max(rests, default=0.0) + ahead / max(1, len(rests))
    return list(by_name.values())

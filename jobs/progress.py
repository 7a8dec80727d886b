"""What a job page shows of a job's progress, in one shape for every kind (:attr:`jobs.models.Job.job_progress`),
drawn by one partial: ``templates/jobs/_progress.html``."""

from __future__ import annotations

from dataclasses import asdict, dataclass


def time_left_words(seconds: float | None) -> str:
    """An estimate of seconds left in words ("about 23 min left", "about 4.5 h left"), or "" without one."""
    if seconds is None:
        return ""
    if seconds < 60:
        return "under a minute left"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"about {minutes} min left"
    return f"about {minutes / 60:.1f} h left"


def rate_left(done: int | None, total: int | None, first_done: int | None, first_at: float | None,
              at: float | None) -> float | None:
    """Seconds left to reach ``total`` from ``done`` at the rate since the first report (``first_done`` at
    ``first_at``) up to the last (``done`` at ``at``; epoch seconds); ``None`` before two reports."""
    if done is None or total is None or first_done is None or first_at is None or at is None:
        return None
    if done <= first_done or float(at) <= float(first_at):
        return None
    rate = (done - first_done) / (float(at) - float(first_at))
    return max(0.0, (total - done) / rate)


@dataclass(frozen=True)
class Progress:
    """``done`` of ``total`` (``None``: not known yet) ``unit`` in ``stage``; ``detail``: one more fact
    ("1,234 tokens"); ``seconds_left``: the estimate, ``None`` without one."""

    done: int
    total: int | None
    unit: str = ""
    stage: str = ""
    detail: str = ""
    seconds_left: float | None = None

    @property
    def percent(self) -> int:
        """``done`` of ``total`` in percent, 0-100 (0 while the total is not known)."""
        return min(100, int(100 * self.done / self.total)) if self.total else 0

    @property
    def time_left(self) -> str:
        """:attr:`seconds_left` in words (:func:`time_left_words`)."""
        return time_left_words(self.seconds_left)

    def as_dict(self) -> dict[str, object]:
        """JSON-friendly form (a page's polling updates the partial from it)."""
        return {**asdict(self), "percent": self.percent, "time_left": self.time_left}

"""Run a long piece of work in a thread of its own while its progress reports are handled in the caller's thread.

An environment may run an event loop in the thread that drives it (Playwright's sync API, behind MiniWoB), and
Django refuses database calls in such a thread (``SynchronousOnlyOperation``). A dataset build or a training run
that saves its progress to the database therefore runs its environment in another thread: :func:`call_in_thread`.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, TypeVar

T = TypeVar("T")
Progress = Callable[[int, int, str], None]


def call_in_thread(work: Callable[[Progress], T], progress: Progress, name: str = "work") -> T:
    """``work(relay)`` in a thread named ``name``; each ``relay(done, total, stage)`` it makes is handled by
    ``progress`` here, synchronously: the work waits for each report, and an exception ``progress`` raises (an
    interruption) is raised in the work at that point, as if ``progress`` had run there. Returns what ``work``
    returns, or raises what it raised."""
    reports: queue.Queue[tuple[tuple[int, int, str], queue.Queue[BaseException | None]] | None] = queue.Queue()
    outcome: dict[str, T] = {}
    failure: list[BaseException] = []

    def relay(done: int, total: int, stage: str) -> None:
        answer: queue.Queue[BaseException | None] = queue.Queue(maxsize=1)
        reports.put(((done, total, stage), answer))
        error = answer.get()
        if error is not None:
            raise error

    def run() -> None:
        try:
            outcome["value"] = work(relay)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            failure.append(exc)
        finally:
            reports.put(None)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    while (report := reports.get()) is not None:
        event, answer = report
        try:
            progress(*event)
        except BaseException as exc:  # noqa: BLE001 - handed to the work, which stops with it
            answer.put(exc)
        else:
            answer.put(None)
    thread.join()
    if failure:
        raise failure[0]
    return outcome["value"]

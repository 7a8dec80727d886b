"""Run a long piece of work in a thread of its own while the messages it sends are handled in the caller's thread.

An environment may run an event loop in the thread that drives it (Playwright's sync API, behind MiniWoB), and
Django refuses database calls in such a thread (``SynchronousOnlyOperation``). A dataset build or a training run
that saves its progress, or a Best-of-N run that stores each episode, therefore runs its environment in another
thread: :func:`call_in_thread`.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


def call_in_thread(work: Callable[[Callable[P, None]], T], handle: Callable[P, None], name: str = "work") -> T:
    """``work(relay)`` in a thread named ``name``; each ``relay(...)`` call it makes (a progress report, an
    episode) is handled by ``handle(...)`` here, synchronously: the work waits for each message, and an exception
    ``handle`` raises (an interruption, a failed save) is raised in the work at that point, as if ``handle`` had
    run there. Returns what ``work`` returns, or raises what it raised."""
    reports: queue.Queue[tuple[tuple[Any, ...], dict[str, Any], queue.Queue[BaseException | None]] | None] = \
        queue.Queue()
    outcome: dict[str, T] = {}
    failure: list[BaseException] = []

    def relay(*args: P.args, **kwargs: P.kwargs) -> None:
        answer: queue.Queue[BaseException | None] = queue.Queue(maxsize=1)
        reports.put((args, kwargs, answer))
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
        args, kwargs, answer = report
        try:
            handle(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the work, which stops with it
            answer.put(exc)
        else:
            answer.put(None)
    thread.join()
    if failure:
        raise failure[0]
    return outcome["value"]

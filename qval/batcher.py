"""Requests that arrive together run together: one batch at a time, formed from whatever threads are waiting.

A model on a CPU reads all its weights for every decoding step, whether the step decodes one sequence or
eight; a step of eight sequences costs about 2.4 times a step of one (SmolLM2-135M on one core: 144 ms against
60 ms; a method's whole run: ``benchmarks/methods.py``).  The
local backbone (:class:`qval.backbone.TransformersBackend`) is called from the model server's threads, one per
request, and a method's client sends several requests at once (:class:`qval.methods.llm.LLMClient`).  A
:class:`Batcher` turns those concurrent calls into batches: :meth:`Batcher.submit` blocks until the item's
result is there; one of the waiting threads (the *leader*) runs the oldest pending items, up to ``max_batch``,
through ``run`` while the others wait, and each gets its own result or exception.

No thread of its own: nothing to start or close.  Before a batch starts the leader waits, at most
``window_s``, until as many items are pending as there were callers in flight at once since the previous
batch started: after a batch of eight the next eight requests arrive some milliseconds apart (each client
first reads its answer), and without the wait the first of them would run alone, the other seven behind it.
The first batch waits for ``max_batch`` items.  A caller that has been alone (a sequential caller, or the
first of a burst after one) waits ``solo_share`` of the previous batch's run time for company, and goes on
waiting while others keep arriving less than that apart (at most ``window_s`` in all): 1 % of a sequential
request's time at worst, and a burst whose callers arrive one after another (each first prepares its request)
runs as one batch, however many it holds.

Django-free and model-free.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Generic, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(eq=False)
class _Slot(Generic[T, R]):
    item: T
    done: bool = False
    result: R | None = None
    error: BaseException | None = None


class Batcher(Generic[T, R]):
    """Run ``run(items) -> results`` (one result per item, in order) on batches of concurrently submitted items.

    ``max_batch``: the most items in one batch.  ``window_s``: the longest a batch waits to fill;
    ``solo_share``: the share of the previous batch's run time a caller that was alone waits for company (module
    docstring).  An exception raised by ``run`` is raised in every caller of that batch.
    """

    def __init__(self, run: Callable[[Sequence[T]], Sequence[R]], *, max_batch: int = 8,
                 window_s: float = 0.25, solo_share: float = 0.01) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._run = run
        self.max_batch = max_batch
        self.window_s = window_s
        self.solo_share = solo_share
        self._last_run_s = 0.0
        self._last_arrival = 0.0
        self._cv = threading.Condition()
        self._pending: list[_Slot[T, R]] = []
        self._running = False
        self._in_flight = 0
        self._peak = max_batch  # the most callers in flight at once since the last batch started
        self.batches = 0
        """Batches run so far."""
        self.items = 0
        """Items run so far (``items / batches``: the mean batch size)."""

    def submit(self, item: T) -> R:
        """Run ``item`` in a batch with whatever else is pending; its result (or ``run``'s exception)."""
        slot: _Slot[T, R] = _Slot(item)
        with self._cv:
            self._pending.append(slot)
            self._last_arrival = time.monotonic()
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)
            self._cv.notify_all()
            while not slot.done:
                if self._running:
                    self._cv.wait()
                    continue
                self._running = True
                batch = self._gather()
                self._cv.release()
                try:
                    self._execute(batch)
                finally:
                    self._cv.acquire()
                    self._running = False
                    self._cv.notify_all()
            self._in_flight -= 1
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]

    def _gather(self) -> list[_Slot[T, R]]:
        """The next batch (the lock held): the oldest pending, after waiting for as many as were in flight."""
        started = time.monotonic()
        want = min(self._peak, self.max_batch)
        if want == 1:  # alone so far: wait a little for company, as many as come
            want, limit = self.max_batch, min(self.window_s, self.solo_share * self._last_run_s)
        else:
            limit = self.window_s
        while len(self._pending) < want:  # until ``limit`` has passed with no arrival, at most ``window_s``
            now = time.monotonic()
            if now - started >= self.window_s or (now - started >= limit and now - self._last_arrival >= limit):
                break
            self._cv.wait(min(started + self.window_s, max(started, self._last_arrival) + limit) - now)
        batch, self._pending = self._pending[:self.max_batch], self._pending[self.max_batch:]
        self._peak = self._in_flight
        self.batches += 1
        self.items += len(batch)
        return batch

    def _execute(self, batch: list[_Slot[T, R]]) -> None:
        """Run one batch (the lock not held) and hand each slot its result or the batch's exception."""
        started = time.monotonic()
        try:
            results = list(self._run([s.item for s in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"a batch of {len(batch)} items gave {len(results)} results")
        except BaseException as exc:  # every caller of the batch sees why it failed
            for s in batch:
                s.error, s.done = exc, True
            return
        finally:
            self._last_run_s = time.monotonic() - started
        for s, r in zip(batch, results):
            s.result, s.done = r, True

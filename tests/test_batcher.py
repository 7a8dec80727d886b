"""Concurrent calls run as batches (qval.batcher): real threads, a run function that records its batches."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import pytest

from qval.batcher import Batcher


class Recorder:
    """A batch function that squares its items, records each batch and takes ``seconds`` a batch."""

    def __init__(self, seconds: float = 0.05, fail_on: int | None = None) -> None:
        self.seconds, self.fail_on = seconds, fail_on
        self.batches: list[list[int]] = []
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def __call__(self, items: Sequence[int]) -> list[int]:
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.batches.append(list(items))
        time.sleep(self.seconds)
        with self._lock:
            self.running -= 1
        if self.fail_on in items:
            raise ValueError(f"item {self.fail_on} is bad")
        return [x * x for x in items]


def test_concurrent_callers_share_batches_and_each_gets_its_own_result() -> None:
    run = Recorder()
    batcher = Batcher(run, max_batch=8)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(batcher.submit, range(40)))
    assert results == [x * x for x in range(40)]
    assert sorted(x for b in run.batches for x in b) == list(range(40))  # each item run exactly once
    assert run.most_running == 1  # one batch at a time
    assert max(map(len, run.batches)) == 8 and len(run.batches) <= 10  # 40 items in batches, not one by one
    assert batcher.batches == len(run.batches) and batcher.items == 40


def test_a_batch_never_holds_more_than_max_batch() -> None:
    run = Recorder()
    batcher = Batcher(run, max_batch=3)
    with ThreadPoolExecutor(10) as pool:
        assert list(pool.map(batcher.submit, range(30))) == [x * x for x in range(30)]
    assert max(map(len, run.batches)) == 3


def test_a_sequential_caller_waits_only_for_its_first_batch() -> None:
    run = Recorder(seconds=0.0)
    batcher = Batcher(run, max_batch=8, window_s=0.2)
    started = time.monotonic()
    assert [batcher.submit(x) for x in range(20)] == [x * x for x in range(20)]
    assert run.batches == [[x] for x in range(20)]
    assert time.monotonic() - started < 0.2 + 19 * 0.1  # one window (the first batch), not twenty


def test_a_failing_batch_raises_in_each_of_its_callers_and_the_next_batch_runs() -> None:
    run = Recorder(fail_on=3)
    batcher = Batcher(run, max_batch=8)
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(batcher.submit, x) for x in range(8)]
        outcomes = []
        for f in futures:
            try:
                outcomes.append(f.result())
            except ValueError as exc:
                outcomes.append(str(exc))
    failed = next(b for b in run.batches if 3 in b)
    for x, outcome in zip(range(8), outcomes):
        assert outcome == ("item 3 is bad" if x in failed else x * x)
    assert batcher.submit(5) == 25  # the batcher is still usable


def test_a_run_that_returns_the_wrong_number_of_results_is_an_error() -> None:
    batcher: Batcher[int, int] = Batcher(lambda items: [], max_batch=2, window_s=0)
    with pytest.raises(RuntimeError, match="a batch of 1 items gave 0 results"):
        batcher.submit(1)


def test_a_burst_after_a_sequential_caller_runs_as_one_batch() -> None:
    """The first of a burst, alone so far, waits (a share of the last batch's time) for the others to arrive."""
    run = Recorder(seconds=0.2)
    batcher = Batcher(run, max_batch=8, window_s=0.3, solo_share=1.0)
    assert [batcher.submit(x) for x in range(2)] == [0, 1]  # sequential: batches of one
    barrier = threading.Barrier(4)

    def late(x: int) -> int:
        barrier.wait()
        time.sleep(0.02 * x)  # arriving 0-60 ms apart
        return batcher.submit(x)

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(late, range(10, 14))) == [x * x for x in range(10, 14)]
    # one batch; the order within it is the order the threads got there, which a loaded machine may swap
    assert [sorted(batch) for batch in run.batches[2:]] == [[10, 11, 12, 13]]


def test_a_burst_that_arrives_over_longer_than_the_solo_wait_still_runs_as_one_batch() -> None:
    """The solo wait (here 75 ms) goes on while callers keep arriving less than that apart (here 30 ms)."""
    run = Recorder(seconds=0.2)
    batcher = Batcher(run, max_batch=8, window_s=0.5, solo_share=0.375)
    assert [batcher.submit(x) for x in range(2)] == [0, 1]
    barrier = threading.Barrier(5)

    def late(x: int) -> int:
        barrier.wait()
        time.sleep(0.03 * (x - 10))  # arriving 0-120 ms after the first
        return batcher.submit(x)

    with ThreadPoolExecutor(5) as pool:
        assert list(pool.map(late, range(10, 15))) == [x * x for x in range(10, 15)]
    assert [sorted(batch) for batch in run.batches[2:]] == [[10, 11, 12, 13, 14]]  # one batch, as above

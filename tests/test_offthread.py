"""Work whose thread runs an event loop (MiniWoB's Playwright) still saves its progress to the database:
:func:`qval.offthread.call_in_thread`, behind dataset builds, training runs and Best-of-N runs."""

from __future__ import annotations

import asyncio

import pytest
from django.core.exceptions import SynchronousOnlyOperation

from qval.build import Progress
from qval.offthread import call_in_thread

pytestmark = pytest.mark.django_db


def _in_a_running_loop(steps: int):  # type: ignore[no-untyped-def]
    """Work that reports ``steps`` times from inside a running event loop, as a MiniWoB episode does."""
    def work(progress: Progress) -> str:
        async def episode() -> str:
            for i in range(steps):
                progress(i + 1, steps, "label")
            return "built"
        return asyncio.run(episode())
    return work


def test_progress_saved_to_the_database_from_work_that_runs_an_event_loop(django_user_model) -> None:  # type: ignore[no-untyped-def]
    def save(done: int, total: int, stage: str) -> None:
        django_user_model.objects.create(username=f"{stage}-{done}-of-{total}")

    with pytest.raises(SynchronousOnlyOperation):  # what a training run on MiniWoB met in the gpu worker
        _in_a_running_loop(1)(save)
    assert call_in_thread(_in_a_running_loop(3), save, name="test") == "built"
    assert sorted(django_user_model.objects.values_list("username", flat=True)) == [
        "label-1-of-3", "label-2-of-3", "label-3-of-3"]


def test_an_interruption_stops_the_work_and_its_own_errors_reach_the_caller() -> None:
    reached: list[int] = []

    def interrupt(done: int, total: int, stage: str) -> None:
        reached.append(done)
        if done == 2:
            raise KeyboardInterrupt("stopped by the worker")

    with pytest.raises(KeyboardInterrupt, match="stopped by the worker"):
        call_in_thread(_in_a_running_loop(5), interrupt)
    assert reached == [1, 2]  # raised in the work at the report: nothing after it ran

    def broken(progress: Progress) -> None:
        progress(1, 1, "collect")
        raise ValueError("no such task")

    with pytest.raises(ValueError, match="no such task"):
        call_in_thread(broken, lambda *report: None)


def test_messages_of_any_shape_arrive_in_order_with_their_keywords() -> None:
    seen: list[tuple[object, ...]] = []

    def work(send) -> int:  # type: ignore[no-untyped-def]
        send("episode", 0)
        send("episode", 1, success=True)
        return 2

    assert call_in_thread(work, lambda *args, **kwargs: seen.append((*args, kwargs))) == 2
    assert seen == [("episode", 0, {}), ("episode", 1, {"success": True})]

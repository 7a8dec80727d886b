"""Playwright's sync calls record their stacks from the frames alone (qval.playwright_stacks), and Playwright
reads the same call names and frames from them as from ``inspect.stack()``."""

from __future__ import annotations

import inspect

import pytest

from qval import playwright_stacks


def _stacks_from(code: str) -> tuple[list[inspect.FrameInfo], list[inspect.FrameInfo]]:
    """Both stacks taken at the same point, under a frame from ``<string>`` (as in an xdist worker)."""
    found: dict[str, list[inspect.FrameInfo]] = {}

    def take() -> None:
        found["light"], found["inspect"] = playwright_stacks.frame_infos(), inspect.stack(0)  # one line: one lineno

    exec(compile(code, "<string>", "exec"), {"take": take})
    return found["light"], found["inspect"]


def test_frame_infos_are_inspects_frames_files_lines_and_names() -> None:
    light, full = _stacks_from("take()")
    assert len(light) == len(full) > 3
    assert any(info.filename == "<string>" for info in light)
    for mine, theirs in zip(light, full):
        assert (mine.frame, mine.filename, mine.lineno, mine.function) == (
            theirs.frame, theirs.filename, theirs.lineno, theirs.function)


def test_playwright_parses_the_same_call_name_and_frames_from_either() -> None:
    from playwright._impl._connection import _extract_stack_trace_information_from_stack

    light, full = _stacks_from("take()")
    assert (_extract_stack_trace_information_from_stack(light, False)
            == _extract_stack_trace_information_from_stack(full, False))


@pytest.mark.browser
def test_a_failed_sync_call_still_names_the_api_call() -> None:
    """Playwright names a failing call from the recorded stack: still so once the stacks are light."""
    from playwright._impl import _sync_base
    from playwright.sync_api import Error, sync_playwright

    from tests.test_browser import CHROMIUM

    playwright_stacks.light_stacks()
    playwright_stacks.light_stacks()  # idempotent
    assert _sync_base.inspect is playwright_stacks._LIGHT and inspect.stack is not playwright_stacks._stack
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            with pytest.raises(Error, match=r"^Page\.goto: "):
                page.goto("http://127.0.0.1:1/", timeout=5000)
        finally:
            browser.close()

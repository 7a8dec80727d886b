"""Playwright's sync calls without a source lookup per stack frame.

Playwright's sync API (1.44, the version browsergym-core pins) records ``inspect.stack()`` at every call
(``playwright._impl._sync_base``) to name the call and send its frames to the driver.  ``inspect.stack()`` reads
each frame's source context, and for a frame whose file does not exist -- ``<string>`` at the bottom of every
pytest-xdist worker, ``<frozen runpy>`` under ``python -m celery`` -- it walks the whole of ``sys.modules`` looking
for it, at every call.  With Django, torch and transformers imported (a few thousand modules) that tripled the
Python time of a MiniWoB episode (``benchmarks/playwright_stacks.py``).  Playwright reads only each frame, its
file, line and function name, which the frame objects give directly: :func:`light_stacks` hands it those.
"""

from __future__ import annotations

import inspect
import sys
import types

import playwright._impl._sync_base as _sync_base


def frame_infos(skip: int = 1) -> list[inspect.FrameInfo]:
    """The caller's stack as ``inspect.stack(0)`` gives it (frame, file, line, function; no source context),
    innermost first, from the frame objects alone: no file is opened or looked for, no module searched.
    ``skip`` is how many innermost frames to leave out: 1 leaves out this function's own, so its caller comes
    first."""
    infos = []
    frame = sys._getframe(skip)
    while frame is not None:
        infos.append(inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name,
                                       None, None))
        frame = frame.f_back
    return infos


def _stack(context: int = 1) -> list[inspect.FrameInfo]:
    """``inspect.stack`` as Playwright's sync base calls it, answered by :func:`frame_infos`."""
    return frame_infos(skip=2)


_LIGHT = types.SimpleNamespace(stack=_stack)
"""What ``playwright._impl._sync_base`` sees as its ``inspect`` module once :func:`light_stacks` has run."""


def light_stacks() -> None:
    """Make every Playwright sync call of this process record its stack with :func:`frame_infos` (idempotent).

    Only Playwright's sync base is changed; ``inspect.stack`` stays as it is for everyone else."""
    if getattr(_sync_base, "inspect", None) is not _LIGHT:
        if getattr(_sync_base, "inspect", None) is not inspect:
            raise RuntimeError("playwright._impl._sync_base no longer uses inspect.stack(); "
                               "qval.playwright_stacks needs a look at this Playwright version")
        _sync_base.inspect = _LIGHT  # type: ignore[attr-defined]

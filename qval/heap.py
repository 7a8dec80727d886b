"""Give the memory that C code has freed back to the system, where the C library can (glibc's ``malloc_trim``).

glibc gives threads that allocate at the same time arenas of their own, and an arena keeps what is freed in it for
reuse rather than returning it to the system.  The model server's batches run on whichever request thread leads
them (:mod:`qval.batcher`), and each batch allocates and frees its decode cache and activations, hundreds of MB on
a CPU, in that thread's arena; so every arena in turn grows to a batch's peak and keeps it.  Serving ``direct-16``
on SmolLM2 on one core, the server's resident memory peaked at 5.9 to 8.1 GiB for 8 states (4.6 GiB with
:func:`trim` after each batch, at no measurable CPU cost) and passed 12 GiB for 32 states
(``benchmarks/server_memory.py``; ``benchmarks/README.md``).

Django-free; the standard library only.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any


@functools.cache
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # the process's own symbols: the C library it runs on
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None


def trim() -> bool:
    """Return the free pages of every arena of the C heap to the system; False where the C library has no
    ``malloc_trim`` (then nothing is done)."""
    release = _malloc_trim()
    if release is None:
        return False
    release(0)
    return True

"""qval.heap: what a thread's arena freed goes back to the system."""

from __future__ import annotations

import ctypes
import os
import threading

import pytest

from qval import heap

CHUNK, CHUNKS = 64 * 1024, 2048  # 128 MiB in chunks below glibc's mmap threshold: they live in the arena


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not heap.trim(), reason="the C library has no malloc_trim (not glibc)")
def test_trim_returns_what_a_thread_freed_below_a_live_allocation() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    kept: list[int] = []

    def allocate_then_free() -> None:  # a thread of its own, as a batch's leader: its own arena
        chunks = [libc.malloc(CHUNK) for _ in range(CHUNKS)]
        for chunk in chunks:
            ctypes.memset(chunk, 1, CHUNK)  # touched: resident
        kept.append(libc.malloc(CHUNK))  # still in use above them, so the arena cannot just shrink its top
        for chunk in chunks:
            libc.free(chunk)

    heap.trim()
    before = _resident_bytes()
    worker = threading.Thread(target=allocate_then_free)
    worker.start()
    worker.join()
    freed_but_held = _resident_bytes() - before
    assert freed_but_held > CHUNK * CHUNKS // 2, "glibc returned the freed chunks by itself: the test shows nothing"
    assert heap.trim() is True
    assert _resident_bytes() - before < freed_but_held / 4
    libc.free(kept[0])

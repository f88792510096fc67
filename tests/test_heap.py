"""shoal.core.heap: freed memory stays in the process (glibc), so rounds reuse it."""

from __future__ import annotations

import ctypes
import platform

import numpy as np
import pytest

from shoal.core.heap import keep_freed_memory

glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo() -> _MallInfo2:
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    return libc.mallinfo2()


@pytest.mark.skipif(not glibc, reason="tunes glibc's malloc only")
def test_large_arrays_come_from_the_heap_and_stay_there() -> None:
    assert keep_freed_memory() and keep_freed_memory()  # once per process, then a no-op
    before = _mallinfo()
    a = np.ones(64 << 20, np.uint8)  # above glibc's largest default mmap threshold (32 MB)
    during = _mallinfo()
    assert during.hblkhd == before.hblkhd  # not a fresh mapping
    # (the counts are the process's: other threads of an earlier test, Ray's for one, may
    # allocate and free meanwhile, so a megabyte of slack, as below)
    assert during.uordblks >= before.uordblks + a.nbytes - (1 << 20)
    del a
    after = _mallinfo()
    assert after.arena + after.hblkhd >= before.arena + before.hblkhd + (64 << 20) - (1 << 20)


@pytest.mark.skipif(glibc, reason="glibc is tuned")
def test_other_c_libraries_are_left_alone() -> None:
    assert keep_freed_memory() is False

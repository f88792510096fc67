"""Keep freed memory in the process for the next round (glibc's malloc).

A round at a million agents allocates numpy temporaries of tens of megabytes and frees
them before the round ends. glibc serves allocations above its mmap threshold (adaptive,
at most 32 MB) from fresh mappings and unmaps them on free, so each round pays again for
the page faults and the kernel's zeroing of all its temporaries: on the 2-core VM of
bench/README.md that made one inbox fan-out at 1M agents take 1.5 s instead of 0.4 s.
Raising the mmap and trim thresholds keeps that memory in the heap, where the next round
reuses it. The price: the process keeps its high-water mark of memory until it exits.
"""

from __future__ import annotations

import ctypes
import platform

_M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 1 << 30  # allocations below 1 GiB come from the heap
_TRIM_THRESHOLD = 2**31 - 1  # free memory at the heap's top is kept up to ~2 GiB

_kept: bool | None = None


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory for reuse (once per process); False where
    the C library is not glibc (nothing to tune) or refuses the setting."""
    global _kept
    if _kept is None:
        _kept = False
        if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
            mallopt = ctypes.CDLL(None).mallopt
            _kept = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
                         and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    return _kept

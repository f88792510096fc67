"""Agent ranges on threads: how the driver's agent-wise phases use every core.

Observe (feeds and their features), the inbox fan-out of apply, and belief updates work
agent by agent: one agent's row never depends on another's. The driver splits such a
phase's agents into contiguous ranges (the partition rule: `ranges`) and runs one range
per thread. numpy releases the GIL inside its loops (fancy indexing, ufuncs, sorts,
`nonzero`), so the ranges run on separate cores; each writes only its own rows, and the
results are put together in range order, so the output is bit-identical whatever the
number of workers. Threads rather than processes or Ray tasks: the world state these
phases read (posts, inboxes, beliefs) is hundreds of megabytes at a million agents, and
threads read it where it is (bench/README.md, "Scaling with workers").
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from itertools import pairwise
from threading import Lock
from typing import TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")

MIN_ROWS = 32_768  # a range smaller than this costs more to hand out than it saves

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = Lock()

# CPU seconds each thread has spent inside agent ranges (each thread writes only its own
# entry): what a phase could spread over more cores; the rest of its CPU is serial.
_range_cpu: dict[int, float] = {}
_in_range = threading.local()


def thread_cpu(ident: int) -> float:
    """CPU seconds the thread `ident` (a `threading.get_ident()`) has used; 0.0 where the
    platform cannot read another thread's clock (the current thread's is always read)."""
    if ident == threading.get_ident():
        return time.thread_time()
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (AttributeError, OSError):  # not on this platform, or the thread has ended
        return 0.0


@dataclass(frozen=True)
class CpuMark:
    """Where the CPU clocks stood: of the threads a phase runs on, and in ranges."""

    threads: dict[int, float]
    ranges: dict[int, float]

    @classmethod
    def now(cls, threads: Iterable[int]) -> CpuMark:
        """The clocks of `threads` and the range CPU of every thread, now."""
        return cls({i: thread_cpu(i) for i in threads}, dict(_range_cpu))

    def since(self) -> tuple[float, float]:
        """(serial, ranges) CPU seconds since this mark: serial is the CPU of the marked
        threads outside agent ranges; ranges, the CPU inside ranges on any thread."""
        ranges = {i: c - self.ranges.get(i, 0.0) for i, c in list(_range_cpu.items())}
        serial = sum(thread_cpu(i) - c - ranges.get(i, 0.0) for i, c in self.threads.items())
        return max(serial, 0.0), sum(ranges.values())


def _in_ranges(fn: Callable[[T], R]) -> Callable[[T], R]:
    """`fn`, counting its thread's CPU into the range CPU (a range within a range counts
    once)."""
    def run(item: T) -> R:
        if getattr(_in_range, "on", False):
            return fn(item)
        _in_range.on = True
        start = time.thread_time()
        try:
            return fn(item)
        finally:
            _in_range.on = False
            ident = threading.get_ident()
            _range_cpu[ident] = _range_cpu.get(ident, 0.0) + time.thread_time() - start
    return run


def _pool(n: int) -> ThreadPoolExecutor:
    """The process's pool of `n` threads (made once; idle threads cost nothing)."""
    with _pools_lock:
        pool = _pools.get(n)
        if pool is None:
            pool = _pools[n] = ThreadPoolExecutor(n, thread_name_prefix="shoal-worker")
        return pool


def resolve_workers(workers: int | str) -> int:
    """`executor.workers` as a count: 'auto' is this machine's CPUs."""
    if workers == "auto":
        return max(1, os.cpu_count() or 1)
    return max(1, int(workers))


@dataclass(frozen=True)
class Workers:
    """`n` threads for agent-wise work, in ranges of at least `min_rows` agents."""

    n: int = 1
    min_rows: int = MIN_ROWS

    def ranges(self, rows: int) -> list[slice]:
        """The partition rule: `rows` split into k contiguous ranges of near-equal size
        (the first `rows % k` one longer), k = min(n, rows // min_rows), at least 1."""
        k = max(1, min(self.n, rows // max(self.min_rows, 1)))
        bounds = [rows * i // k for i in range(k + 1)]
        return [slice(a, b) for a, b in pairwise(bounds)]

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """`fn` of every item, in item order; concurrently when there is more than one
        (the calling thread runs the first itself: one hand-off to the pool fewer, and
        a thread that would only wait works). Every call finishes before this returns,
        so no thread still writes when an error from one of them is raised."""
        fn = _in_ranges(fn)
        # (inside a range, ranges run inline: a pool thread waiting on its own pool's
        # threads could wait for ever)
        if len(items) <= 1 or self.n <= 1 or getattr(_in_range, "on", False):
            return [fn(item) for item in items]
        futures = [_pool(self.n).submit(fn, item) for item in items[1:]]
        try:
            first = fn(items[0])
        finally:
            wait(futures)
        return [first, *(f.result() for f in futures)]

    def over(self, rows: int, fn: Callable[[slice], R]) -> list[R]:
        """`fn` of each range of `rows`, in range order."""
        return self.map(fn, self.ranges(rows))

    def flatnonzero(self, n: int, mask_of: Callable[[slice], np.ndarray]) -> np.ndarray:
        """The indices in range(n) where `mask_of(rows)`, a range's boolean mask, holds,
        ascending (a range per worker)."""
        parts = self.over(n, lambda rows: np.flatnonzero(mask_of(rows)) + rows.start)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def copy(self, array: np.ndarray) -> np.ndarray:
        """A copy of `array`, each range of its rows copied on its own thread (one core
        neither saturates the memory bandwidth nor takes a new array's page faults
        fastest)."""
        out = np.empty_like(array)

        def copy_rows(rows: slice) -> None:
            out[rows] = array[rows]

        self.over(len(array), copy_rows)
        return out


SERIAL = Workers(1)

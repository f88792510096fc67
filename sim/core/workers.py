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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from itertools import pairwise
from threading import Lock
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

MIN_ROWS = 32_768  # a range smaller than this costs more to hand out than it saves

_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = Lock()


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
        """`fn` of every item, in item order; concurrently when there is more than one.
        Every call finishes before this returns, so no thread still writes when an
        error from one of them is raised."""
        if len(items) <= 1 or self.n <= 1:
            return [fn(item) for item in items]
        futures = [_pool(self.n).submit(fn, item) for item in items]
        wait(futures)
        return [f.result() for f in futures]

    def over(self, rows: int, fn: Callable[[slice], R]) -> list[R]:
        """`fn` of each range of `rows`, in range order."""
        return self.map(fn, self.ranges(rows))


SERIAL = Workers(1)

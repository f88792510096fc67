"""The driver's worker threads (shoal.core.workers): the partition rule, errors from a
thread, and every agent-wise phase giving the same arrays whatever the number of ranges
(the golden digests' `threads` leg checks whole runs)."""

from __future__ import annotations

import threading
import time
from itertools import pairwise

import numpy as np
import pytest

from shoal.core.rowsets import push_newest, push_to_csr_rows
from shoal.core.workers import CpuMark, Workers, resolve_workers


def test_ranges_are_contiguous_near_equal_and_cover_every_row():
    w = Workers(4, min_rows=10)
    for rows in (0, 1, 9, 10, 39, 40, 41, 1001):
        parts = w.ranges(rows)
        assert parts[0].start == 0 and parts[-1].stop == rows
        assert all(a.stop == b.start for a, b in pairwise(parts))
        sizes = [p.stop - p.start for p in parts]
        assert max(sizes) - min(sizes) <= 1
        assert len(parts) == max(1, min(4, rows // 10))


def test_map_keeps_item_order_and_raises_after_every_call_ended():
    w = Workers(3)
    assert w.map(lambda x: x * x, list(range(20))) == [x * x for x in range(20)]
    done = []

    def work(x: int) -> int:
        if x == 1:
            raise ValueError("range 1 failed")
        done.append(x)
        return x

    with pytest.raises(ValueError, match="range 1 failed"):
        w.map(work, [0, 1, 2, 3])
    assert sorted(done) == [0, 2, 3]
    done.clear()  # the first item runs on the calling thread: the others still finish

    def slow(x: int) -> int:
        if x == 1:
            raise ValueError("range 1 failed")
        time.sleep(0.05)  # (the failing call returns first; the others end later)
        done.append(x)
        return x

    with pytest.raises(ValueError, match="range 1 failed"):
        w.map(slow, [1, 0, 2, 3])
    assert sorted(done) == [0, 2, 3]
    threads = w.map(lambda _: threading.get_ident(), [0, 1, 2])
    assert threads[0] == threading.get_ident() and threading.get_ident() not in threads[1:]


def test_resolve_workers():
    assert resolve_workers(3) == 3
    assert resolve_workers("auto") >= 1


@pytest.mark.parametrize("n_rows", [1, 7, 500])
def test_push_newest_is_the_same_in_ranges(n_rows):
    rng = np.random.default_rng(n_rows)
    k = 4
    one = np.full((n_rows, k), -1, np.int64)
    many = one.copy()
    next_id = 0
    for _ in range(5):  # rounds of pushes, ids always newer than the last round's
        m = int(rng.integers(0, 3 * n_rows))
        rows = rng.integers(0, n_rows, m)
        vals = next_id + rng.permutation(m)
        again = rng.integers(0, max(m, 1), m // 3)  # repeated pairs, in other ranges
        rows, vals = np.concatenate([rows, rows[again]]), np.concatenate([vals, vals[again]])
        next_id += m
        push_newest(one, rows, vals)
        push_newest(many, rows, vals, Workers(3, min_rows=2))
        assert np.array_equal(one, many)


@pytest.mark.parametrize("n_rows", [1, 7, 500])
def test_push_to_csr_rows_is_the_expanded_push_on_any_number_of_ranges(n_rows):
    """Pushing each source's id onto its CSR rows (minus `skip`) equals pushing the
    expanded pairs one by one, whatever the ranges; sources repeat and some have no
    rows."""
    rng = np.random.default_rng(n_rows)
    k = 3
    degree = rng.integers(0, 6, n_rows)
    degree[rng.random(n_rows) < 0.2] = 0
    indptr = np.concatenate([[0], np.cumsum(degree)])
    indices = rng.integers(0, n_rows, indptr[-1])
    bufs = [np.full((n_rows, k), -1, np.int64) for _ in range(3)]
    next_id = 0
    for _ in range(5):
        m = int(rng.integers(0, 2 * n_rows))
        sources = rng.integers(0, n_rows, m)
        vals = next_id + rng.permutation(m)
        vals[rng.random(m) < 0.1] = -1  # (no id: nothing to push)
        next_id += m
        skip = np.unique(rng.integers(0, n_rows, n_rows // 5))
        rows = [indices[indptr[s]:indptr[s + 1]] for s in sources.tolist()]
        pairs_rows = np.concatenate([np.empty(0, np.int64), *rows])
        pairs_vals = np.repeat(vals, [len(r) for r in rows])
        keep = ~np.isin(pairs_rows, skip)
        push_newest(bufs[0], pairs_rows[keep], pairs_vals[keep])
        push_to_csr_rows(bufs[1], indptr, indices, sources, vals, skip)
        push_to_csr_rows(bufs[2], indptr, indices, sources, vals, skip,
                         Workers(3, min_rows=2))
        assert np.array_equal(bufs[0], bufs[1])
        assert np.array_equal(bufs[0], bufs[2])
    assert (bufs[0] >= 0).any() or n_rows == 1


def test_flatnonzero_in_ranges_is_numpys():
    rng = np.random.default_rng(2)
    for n in (0, 1, 5, 101):
        mask = rng.random(n) < 0.3
        for w in (Workers(1), Workers(3, min_rows=2), Workers(4, min_rows=1)):
            got = w.flatnonzero(n, lambda rows, m=mask: m[rows])
            assert got.dtype == np.int64 and np.array_equal(got, np.flatnonzero(mask))


def test_copy_in_ranges_is_an_independent_equal_array():
    rng = np.random.default_rng(0)
    for a in (rng.random(101), rng.random((57, 3)), np.zeros(0), rng.random(9) < 0.5):
        c = Workers(3, min_rows=2).copy(a)
        assert c.dtype == a.dtype and c.shape == a.shape and np.array_equal(c, a)
        assert not np.shares_memory(c, a)


@pytest.mark.parametrize("limits", [{}, {"max_active": 40}, {"min_active": 300}])
def test_the_schedule_is_the_same_in_ranges(limits):
    """Active masks (draws, chances, eligibility, max/min active) drawn a range of agents
    per worker equal the one-range draw, over a day of rounds."""
    from shoal.config import load_config
    from shoal.engine.schedule import Scheduler

    overrides = [f"activity.{k}={v}" for k, v in limits.items()]
    cfg = load_config("configs/quickstart.yaml", ["population.size=500", *overrides])
    rng = np.random.default_rng(1)
    activity = rng.random(500)
    hourly = rng.random((500, 24))
    hourly[::3] = np.nan  # (the config's curve for those)
    eligible = rng.random(500) < 0.8
    one = Scheduler(cfg, activity, hourly)
    many = Scheduler(cfg, activity, hourly, Workers(3, min_rows=2))
    seen = set()
    for r in range(1, 30):
        for mask in (None, eligible):
            a, b = one.active(r, mask), many.active(r, mask)
            assert np.array_equal(a, b)
            seen.add(a.tobytes())
    assert len(seen) > 2  # (the draws differ from round to round)


def test_a_config_with_bad_workers_names_the_field(tmp_path):
    from shoal.config import load_config
    from shoal.core.errors import InputError

    for bad in ("0", "many", "true"):
        with pytest.raises(InputError, match=r"executor\.workers"):
            load_config("configs/quickstart.yaml", [f"executor.workers={bad}"])
    with pytest.raises(InputError, match=r"executor\.worker_rows"):
        load_config("configs/quickstart.yaml", ["executor.worker_rows=0"])


def _burn(seconds: float) -> None:
    """Use `seconds` of this thread's CPU (by its own clock)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.parametrize("n", [1, 2])
def test_cpu_mark_splits_serial_from_range_cpu(n):
    """CPU used inside agent ranges (on any thread, inline or not) counts as ranges; CPU of
    the marked thread outside them as serial; a range within a range counts once."""
    w = Workers(n, min_rows=1)
    mark = CpuMark.now([threading.get_ident()])
    _burn(0.03)
    w.map(lambda _: w.map(lambda _: _burn(0.02), [0, 1]), [0, 1])
    serial, ranges = mark.since()
    assert serial >= 0.03
    assert ranges >= 0.08  # four inner ranges of 20 ms, each counted once
    assert serial < 0.03 + 0.08  # the ranges run inline (n = 1) are not serial too

"""Vectorised per-row selections on padded id matrices (feeds, inboxes, rings).

A "row buffer" is an int64 matrix [rows, k] of ids, ascending left to right, padded with -1
on the left; the newest id sits in the last column.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from shoal.core.follow_graph import expand_csr
from shoal.core.keys import unique_sorted
from shoal.core.workers import SERIAL, Workers

_SHIFT = np.int64(31)
_LOW = np.int64((1 << 31) - 1)


def newest_per_row(rows: np.ndarray, vals: np.ndarray, n_rows: int, k: int) -> np.ndarray:
    """For (row, id) pairs, the k largest distinct ids of each row, as a row buffer.

    Ids must be < 2**31 and rows < 2**32; one sort of packed keys does the grouping.
    """
    rows = np.asarray(rows, dtype=np.int64)
    vals = np.asarray(vals, dtype=np.int64)
    keep = vals >= 0
    keys = unique_sorted((rows[keep] << _SHIFT) | vals[keep])
    r = keys >> _SHIFT
    v = keys & _LOW
    counts = np.bincount(r, minlength=n_rows)
    ends = np.cumsum(counts)
    from_end = ends[r] - 1 - np.arange(len(keys))
    sel = from_end < k
    out = np.full((n_rows, k), -1, dtype=np.int64)
    out[r[sel], k - 1 - from_end[sel]] = v[sel]
    return out


def take_in_rows(matrices: tuple[np.ndarray, ...], order: np.ndarray,
                 out: tuple[np.ndarray, ...]) -> None:
    """Each [rows, k] matrix reordered within its rows by `order` into its `out` (what
    `np.take_along_axis(m, order, axis=1)` gives), the flat positions computed once for
    all of them: a flat `take` straight into a C-contiguous output is about 40 % cheaper
    than `take_along_axis` at 10 million entries, which builds its index arrays per
    call and returns a new array."""
    n, k = order.shape
    flat = (order + np.arange(0, n * k, k)[:, None]).reshape(-1) if k else order.reshape(-1)
    for m, o in zip(matrices, out, strict=True):
        src = m.reshape(n * k)
        if o.flags.c_contiguous:  # (indices in range: "clip" spares numpy a buffer)
            np.take(src, flat, out=o.reshape(n * k), mode="clip")
        else:
            o[...] = src.take(flat).reshape(n, k)


def push_newest(buf: np.ndarray, rows: np.ndarray, vals: np.ndarray,
                workers: Workers = SERIAL) -> None:
    """Append ids to rows of a row buffer in place, keeping the newest k per row.

    Every pushed id must be larger than every id already in `buf` (new posts are newer than
    old ones), so a row only shifts left by its number of new ids. With several `workers`
    each range of the pairs is keyed and sorted on its own thread, then each range of the
    buffer's rows takes its own keys (`_push_runs`).
    """
    if not len(rows):
        return
    rows = np.asarray(rows, dtype=np.int64)
    vals = np.asarray(vals, dtype=np.int64)
    _push_runs(buf, workers.over(len(rows), lambda part: _sorted_keys(rows[part], vals[part])),
               workers)


def push_to_csr_rows(buf: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
                     sources: np.ndarray, vals: np.ndarray, skip: np.ndarray,
                     workers: Workers = SERIAL) -> None:
    """`push_newest` of `vals[i]` onto every buffer row that CSR row `sources[i]` lists
    (a post onto its author's followers' inboxes), except the rows in `skip` (sorted).

    The expansion is split into ranges of sources holding about equal numbers of entries;
    each range expands, keys and sorts its own pairs, so nothing the size of the fan-out
    is built on the calling thread."""
    sources = np.asarray(sources, dtype=np.int64)
    vals = np.asarray(vals, dtype=np.int64)
    if not len(sources):
        return
    ends = np.cumsum(indptr[sources + 1] - indptr[sources])
    cuts = [0, *np.searchsorted(ends, [r.start for r in workers.ranges(int(ends[-1]))[1:]],
                                side="right").tolist(), len(sources)]

    def expand(part: slice) -> np.ndarray:
        which, readers = expand_csr(indptr, indices, sources[part])  # (on this thread)
        mine = vals[part][which]
        if len(skip):
            keep = ~np.isin(readers, skip)
            readers, mine = readers[keep], mine[keep]
        return _sorted_keys(readers, mine)

    _push_runs(buf, workers.map(expand, [slice(a, b) for a, b in pairwise(cuts)]),
               workers)


def _sorted_keys(rows: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """(row, id) pairs with an id (>= 0) as sorted distinct keys row << 31 | id."""
    keep = vals >= 0
    if not keep.all():
        rows, vals = rows[keep], vals[keep]
    return unique_sorted((rows << _SHIFT) | vals)


def _push_runs(buf: np.ndarray, runs: list[np.ndarray], workers: Workers) -> None:
    """Push sorted runs of keys (`_sorted_keys`) into `buf`: each range of its rows (one
    per worker) merges its part of every run and pushes it; rows never cross ranges."""
    ranges = workers.ranges(buf.shape[0])
    bounds = np.array([r.start for r in ranges[1:]], np.int64) << _SHIFT
    cuts = [[0, *np.searchsorted(run, bounds).tolist(), len(run)] for run in runs]

    def push(j: int) -> None:
        pieces = [run[c[j]:c[j + 1]] for run, c in zip(runs, cuts, strict=True)]
        pieces = [p for p in pieces if len(p)]
        if len(pieces) == 1:
            _push_keys(buf, pieces[0])
        elif pieces:  # (a stable sort merges sorted runs: timsort)
            keys = np.sort(np.concatenate(pieces), kind="stable")
            _push_keys(buf, keys[np.concatenate(([True], keys[1:] != keys[:-1]))])

    workers.map(push, range(len(ranges)))


def _push_keys(buf: np.ndarray, keys: np.ndarray) -> None:
    """`push_newest` of sorted distinct keys on one thread, touching only the rows that
    get new ids."""
    if not len(keys):
        return
    k = buf.shape[1]
    r = keys >> _SHIFT
    starts = np.flatnonzero(np.concatenate([[True], r[1:] != r[:-1]]))
    touched = r[starts]
    counts = np.diff(np.append(starts, len(keys)))
    # A row keeps its old ids shifted left by its number of new ids (rows with m new ids
    # at a time: a slice of each row, not an index per entry), ...
    n_new = np.minimum(counts, k)
    for m in range(1, k):
        moved = touched[n_new == m]
        if len(moved):
            buf[moved, :k - m] = buf[moved, m:]
    # ... then its newest k new ids, right-aligned: column k-1-j takes each row's j-th
    # newest, for the rows that have one (one pass per column rather than an index per
    # entry built with np.repeat, which holds the GIL; the same CPU)
    rows, newest, left = touched, starts + counts - 1, counts
    for column in range(k - 1, -1, -1):
        buf[rows, column] = keys[newest] & _LOW
        more = np.flatnonzero(left > 1)
        if not len(more):
            break
        rows, newest, left = rows[more], newest[more] - 1, left[more] - 1


def first_valid(cand: np.ndarray, valid: np.ndarray, k: int, distinct: bool = False
                ) -> np.ndarray:
    """Per row, the first k valid and distinct candidates in column order (-1 padded right).

    `distinct=True` promises that no id repeats within a row, which skips the dedup sort.
    """
    n, m = cand.shape
    if m == 0:
        return np.full((n, k), -1, dtype=np.int64)
    ok = valid
    if not distinct:
        # Mark repeats of an earlier *valid* column as invalid (stable sort within the row);
        # invalid entries get unique negative stand-ins so they never hide a valid copy.
        keyed = np.where(valid, cand, -2 - np.arange(m)[None, :])
        order = np.argsort(keyed, axis=1, kind="stable")
        srt = np.take_along_axis(keyed, order, axis=1)
        repeat_sorted = np.zeros_like(valid)
        repeat_sorted[:, 1:] = srt[:, 1:] == srt[:, :-1]
        repeat = np.empty_like(repeat_sorted)
        np.put_along_axis(repeat, order, repeat_sorted, axis=1)
        ok = valid & ~repeat
    pos = np.cumsum(ok, axis=1) - 1
    take = ok & (pos < k)
    out = np.full((n, k), -1, dtype=np.int64)
    r, c = np.nonzero(take)
    out[r, pos[r, c]] = cand[r, c]
    return out


def count_valid(buf: np.ndarray) -> np.ndarray:
    """Number of ids (not -1) per row."""
    return (buf >= 0).sum(axis=1)

"""Tests for the padded row-buffer selections (sim.rowsets) against brute-force Python."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.core.rowsets import count_valid, first_valid, newest_per_row, push_newest, take_in_rows

SEEDS = [0, 1, 2, 3, 4, 5, 6, 7]


def buffer_row(ids: list[int], k: int) -> list[int]:
    """A row buffer row: the k largest distinct ids, ascending, -1 padded on the left."""
    top = sorted(set(ids))[-k:] if k else []
    return [-1] * (k - len(top)) + top


def newest_ref(rows: np.ndarray, vals: np.ndarray, n_rows: int, k: int) -> np.ndarray:
    """Brute force of `newest_per_row`."""
    per_row: dict[int, list[int]] = {r: [] for r in range(n_rows)}
    for r, v in zip(rows.tolist(), vals.tolist(), strict=True):
        if v >= 0:
            per_row[r].append(v)
    return np.array([buffer_row(per_row[r], k) for r in range(n_rows)], dtype=np.int64
                    ).reshape(n_rows, k)


def first_valid_ref(cand: np.ndarray, valid: np.ndarray, k: int) -> np.ndarray:
    """Brute force of `first_valid`: walk the row, keep valid ids not kept already."""
    out = np.full((cand.shape[0], k), -1, dtype=np.int64)
    for i in range(cand.shape[0]):
        kept: list[int] = []
        for c, ok in zip(cand[i].tolist(), valid[i].tolist(), strict=True):
            if ok and c not in kept and len(kept) < k:
                kept.append(c)
        out[i, : len(kept)] = kept
    return out


# --------------------------------------------------------------------------- newest_per_row


@pytest.mark.parametrize("seed", SEEDS)
def test_newest_per_row_matches_brute_force(seed: int) -> None:
    """k newest distinct ids per row, with duplicates, -1 entries and empty rows."""
    rng = np.random.default_rng(seed)
    n_rows, k = int(rng.integers(1, 30)), int(rng.integers(1, 8))
    m = int(rng.integers(0, 200))
    rows = rng.integers(0, n_rows, m)
    vals = rng.integers(-1, 60, m)  # small range: many duplicates, some -1
    got = newest_per_row(rows, vals, n_rows, k)
    np.testing.assert_array_equal(got, newest_ref(rows, vals, n_rows, k))
    assert got.dtype == np.int64


def test_newest_per_row_large_ids_and_rows() -> None:
    """Ids up to 2**31 - 1 and large row numbers survive the key packing."""
    rows = np.array([70_000, 70_000, 3, 70_000, 3])
    vals = np.array([2**31 - 1, 5, 2**31 - 2, 2**30, 2**31 - 2])
    got = newest_per_row(rows, vals, 70_001, 2)
    assert got[70_000].tolist() == [2**30, 2**31 - 1]
    assert got[3].tolist() == [-1, 2**31 - 2]
    assert (got[np.r_[0:3, 4:70_000]] == -1).all()


def test_newest_per_row_empty_input() -> None:
    """No pairs at all gives an all -1 buffer of the requested shape."""
    got = newest_per_row(np.empty(0, np.int64), np.empty(0, np.int64), 4, 3)
    np.testing.assert_array_equal(got, np.full((4, 3), -1))


# --------------------------------------------------------------------------- push_newest


def test_push_newest_no_rows_is_noop() -> None:
    """Pushing nothing leaves the buffer unchanged."""
    buf = np.array([[-1, 1, 2], [3, 4, 5]])
    push_newest(buf, np.empty(0, np.int64), np.empty(0, np.int64))
    np.testing.assert_array_equal(buf, [[-1, 1, 2], [3, 4, 5]])


def test_push_newest_full_rows() -> None:
    """Pushing k new ids into a row replaces the whole row; other rows are untouched."""
    buf = np.array([[1, 2, 3], [-1, 4, 5]])
    push_newest(buf, np.array([1, 1, 1, 1]), np.array([9, 7, 8, 6]))
    np.testing.assert_array_equal(buf, [[1, 2, 3], [7, 8, 9]])


def test_push_newest_minimal_example() -> None:
    """One new id per row: it must become the row's last column (the newest)."""
    buf = np.array([[1, 2, 3], [-1, -1, 4]])
    push_newest(buf, np.array([0, 1, 1]), np.array([7, 8, 9]))
    np.testing.assert_array_equal(buf, [[2, 3, 7], [4, 8, 9]])


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_push_newest_matches_brute_force(seed: int) -> None:
    """Repeated pushes of newer ids keep each row equal to 'the k newest ids ever pushed'."""
    rng = np.random.default_rng(seed)
    n_rows, k = 12, int(rng.integers(2, 6))
    buf = np.full((n_rows, k), -1, dtype=np.int64)
    history: dict[int, list[int]] = {r: [] for r in range(n_rows)}
    next_id = 0
    for _ in range(10):
        m = int(rng.integers(0, 15))
        rows = rng.integers(0, n_rows, m)
        vals = next_id + rng.integers(0, 20, m)  # all newer than the buffer, with repeats
        next_id += 20
        push_newest(buf, rows, vals)
        for r, v in zip(rows.tolist(), vals.tolist(), strict=True):
            history[r].append(v)
        expected = np.array([buffer_row(history[r], k) for r in range(n_rows)])
        np.testing.assert_array_equal(buf, expected)


# --------------------------------------------------------------------------- first_valid


@pytest.mark.parametrize("seed", SEEDS)
def test_first_valid_matches_brute_force(seed: int) -> None:
    """First k valid, distinct candidates in column order, when validity depends on the id
    (as in every recommender: own posts, already-shown posts, padding)."""
    rng = np.random.default_rng(seed)
    n, m, k = int(rng.integers(1, 20)), int(rng.integers(1, 25)), int(rng.integers(1, 8))
    cand = rng.integers(-1, 15, (n, m))
    bad = rng.random((n, 15)) < 0.3  # per-row set of rejected ids
    valid = (cand >= 0) & ~np.take_along_axis(bad, np.maximum(cand, 0), axis=1)
    got = first_valid(cand, valid, k)
    np.testing.assert_array_equal(got, first_valid_ref(cand, valid, k))
    assert (count_valid(got) <= k).all()


def test_first_valid_all_invalid_and_no_columns() -> None:
    """Rows with nothing valid, and a matrix with no columns, give all -1 rows."""
    cand = np.array([[3, 4], [5, 5]])
    got = first_valid(cand, np.zeros((2, 2), dtype=bool), 3)
    np.testing.assert_array_equal(got, np.full((2, 3), -1))
    empty = first_valid(np.empty((3, 0), np.int64), np.empty((3, 0), bool), 2)
    np.testing.assert_array_equal(empty, np.full((3, 2), -1))


def test_first_valid_duplicates_keep_first_position() -> None:
    """A repeated id counts once, at its first valid column; k truncates."""
    cand = np.array([[4, 2, 4, 9, 2, 1], [1, 1, 1, 1, 1, 1]])
    valid = np.ones_like(cand, dtype=bool)
    np.testing.assert_array_equal(first_valid(cand, valid, 3), [[4, 2, 9], [1, -1, -1]])


def test_first_valid_invalid_earlier_copy_does_not_hide_valid_one() -> None:
    """An id invalid at column 0 but valid at column 1 is still a valid candidate."""
    got = first_valid(np.array([[5, 5, 6]]), np.array([[False, True, True]]), 3)
    np.testing.assert_array_equal(got, [[5, 6, -1]])


def test_count_valid() -> None:
    """Number of non-padding entries per row."""
    assert count_valid(np.array([[-1, -1, 3], [1, 2, 3], [-1, -1, -1]])).tolist() == [1, 3, 0]


@pytest.mark.parametrize("k", [0, 1, 7])
def test_take_in_rows_is_take_along_axis(k):
    rng = np.random.default_rng(k)
    mats = (rng.integers(-1, 50, (9, k)), rng.random((9, k)), rng.integers(0, 5, (9, k)))
    order = np.argsort(mats[0], axis=1, kind="stable")
    contiguous = tuple(np.empty_like(m) for m in mats)
    strided = tuple(np.empty((9, 2 * k), m.dtype)[:, ::2] for m in mats)  # (not contiguous)
    for out in (contiguous, strided):
        take_in_rows(mats, order, out)
        for m, o in zip(mats, out, strict=True):
            assert np.array_equal(o, np.take_along_axis(m, order, axis=1))

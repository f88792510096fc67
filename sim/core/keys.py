"""Packed int64 keys for pairs of ids, and sorted key sets with vectorised operations.

A pair (a, b) of non-negative ids below 2**32 packs into `a << 32 | b`; sorting keys sorts
pairs by a, then b. Sets of such keys (follow edges, votes, trust pairs, exposures) are
kept as one sorted array: membership is a binary search, insertion a single O(n) copy.

`unique_sorted` exists because numpy 2.4's `np.unique` on large int64 arrays takes a
hashing path that is about 100x slower than sorting (measured: 0.9 s vs 7 ms for 1.2M
keys).
"""

from __future__ import annotations

import numpy as np

_SHIFT = np.int64(32)
_LOW = np.int64(0xFFFFFFFF)


def pack(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pack (a, b) id arrays into int64 keys."""
    return (np.asarray(a, dtype=np.int64) << _SHIFT) | np.asarray(b, dtype=np.int64)


def unpack(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split int64 keys back into (a, b) int64 arrays."""
    return keys >> _SHIFT, keys & _LOW


def unique_sorted(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values (np.unique without its slow hashing path); values already
    strictly increasing (one platform's acting agents) are returned as a copy, unsorted
    (one comparison pass instead of a sort)."""
    values = np.asarray(values)
    if len(values) < 2 or (values[1:] > values[:-1]).all():
        return values.copy()
    s = np.sort(values)
    return s[np.concatenate(([True], s[1:] != s[:-1]))]


def first_occurrence(values: np.ndarray) -> np.ndarray:
    """Mask of the first occurrence of each distinct value, in array order."""
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    s = values[order]
    first_sorted = np.ones(len(s), dtype=bool)
    first_sorted[1:] = s[1:] != s[:-1]
    out = np.zeros(len(values), dtype=bool)
    out[order[first_sorted]] = True
    return out


class SortedKeySet:
    """A set of int64 keys held as one sorted array; all operations are vectorised.

    It keeps a journal of the keys it added and removed (`take_changes`), so that its owner
    can checkpoint it by what changed (shoal.core.state)."""

    def __init__(self, keys: np.ndarray | None = None):
        self.keys = (unique_sorted(np.asarray(keys, dtype=np.int64)) if keys is not None
                     else np.empty(0, dtype=np.int64))
        self._journal: list[tuple[np.ndarray, int]] = [(self.keys, 1)] if len(self.keys) else []

    def __len__(self) -> int:
        return len(self.keys)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        """Membership mask for `keys`."""
        keys = np.asarray(keys, dtype=np.int64)
        if not len(self.keys):
            return np.zeros(len(keys), dtype=bool)
        pos = np.searchsorted(self.keys, keys)
        pos = np.minimum(pos, len(self.keys) - 1)
        return self.keys[pos] == keys

    def add(self, keys: np.ndarray) -> np.ndarray:
        """Insert keys; returns the mask of those that were new (first occurrence only)."""
        keys = np.asarray(keys, dtype=np.int64)
        # Only the first occurrence of a duplicated new key counts as "added".
        added = ~self.contains(keys) & first_occurrence(keys)
        if added.any():
            new = np.sort(keys[added])
            # np.insert is a single O(n) copy; union1d would re-sort everything.
            self.keys = np.insert(self.keys, np.searchsorted(self.keys, new), new)
            self._journal.append((keys[added], 1))
        return added

    def remove(self, keys: np.ndarray) -> np.ndarray:
        """Delete keys; returns the mask of those that were present (first occurrence only)."""
        keys = np.asarray(keys, dtype=np.int64)
        removed = self.contains(keys) & first_occurrence(keys)
        if removed.any():
            self.keys = np.delete(self.keys, np.searchsorted(self.keys, keys[removed]))
            self._journal.append((keys[removed], -1))
        return removed

    def take_changes(self) -> tuple[np.ndarray, np.ndarray]:
        """Keys added (op 1) and removed (op -1) since the previous call, in order."""
        journal, self._journal = self._journal, []
        keys = [k for k, _ in journal]
        ops = [np.full(len(k), op, np.int8) for k, op in journal]
        return (np.concatenate(keys) if keys else np.empty(0, np.int64),
                np.concatenate(ops) if ops else np.empty(0, np.int8))

    def replay(self, keys: np.ndarray, ops: np.ndarray) -> None:
        """Apply logged changes (as `take_changes` returns them) in order."""
        if not len(keys):
            return
        cuts = np.flatnonzero(np.diff(ops)) + 1
        for k, op in zip(np.split(keys, cuts), np.split(ops, cuts), strict=True):
            (self.add if op[0] > 0 else self.remove)(k)
        self._journal = []  # what was replayed is logged already

    def reset(self, keys: np.ndarray) -> None:
        """Hold exactly `keys` (sorted, unique), with an empty journal."""
        self.keys = np.asarray(keys, dtype=np.int64)
        self._journal = []

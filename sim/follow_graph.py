"""A platform's follow graph: a sorted set of directed edges with CSR views.

Edges are packed as int64 keys `follower << 32 | followee`, kept sorted and unique, so
membership, insertion and removal are vectorised (searchsorted, merge) and the state is a
single array for checkpoints. CSR views (followees of each agent, followers of each agent)
are derived on demand and cached until the next change.
"""

from __future__ import annotations

import numpy as np

_SHIFT = np.int64(32)
_LOW = np.int64(0xFFFFFFFF)


def pack(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Pack (src, dst) id arrays into int64 keys."""
    return (np.asarray(src, dtype=np.int64) << _SHIFT) | np.asarray(dst, dtype=np.int64)


def unpack(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split int64 keys back into (src, dst) int64 arrays."""
    return keys >> _SHIFT, keys & _LOW


class SortedKeySet:
    """A set of int64 keys held as one sorted array; all operations are vectorised."""

    def __init__(self, keys: np.ndarray | None = None):
        self.keys = np.unique(np.asarray(keys, dtype=np.int64)) if keys is not None else (
            np.empty(0, dtype=np.int64)
        )

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
        new = ~self.contains(keys)
        # Only the first occurrence of a duplicated new key counts as "added".
        _, first = np.unique(keys, return_index=True)
        once = np.zeros(len(keys), dtype=bool)
        once[first] = True
        added = new & once
        if added.any():
            new = np.sort(keys[added])
            # np.insert is a single O(n) copy; union1d would re-sort everything.
            self.keys = np.insert(self.keys, np.searchsorted(self.keys, new), new)
        return added

    def remove(self, keys: np.ndarray) -> np.ndarray:
        """Delete keys; returns the mask of those that were present (first occurrence only)."""
        keys = np.asarray(keys, dtype=np.int64)
        present = self.contains(keys)
        _, first = np.unique(keys, return_index=True)
        once = np.zeros(len(keys), dtype=bool)
        once[first] = True
        removed = present & once
        if removed.any():
            self.keys = np.delete(self.keys, np.searchsorted(self.keys, keys[removed]))
        return removed


class FollowGraph:
    """Directed follow edges of one platform, for `n_agents` agents."""

    def __init__(self, n_agents: int, src: np.ndarray | None = None, dst: np.ndarray | None = None):
        self.n_agents = int(n_agents)
        keys = pack(src, dst) if src is not None else None
        self.edges = SortedKeySet(keys)
        self._followees: tuple[np.ndarray, np.ndarray] | None = None
        self._followers: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.edges)

    def _changed(self) -> None:
        self._followees = self._followers = None

    def is_following(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Mask: does src[i] follow dst[i]?"""
        return self.edges.contains(pack(src, dst))

    def follow(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Add edges; returns the mask of edges that were new."""
        added = self.edges.add(pack(src, dst))
        if added.any():
            self._changed()
        return added

    def unfollow(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Remove edges; returns the mask of edges that existed."""
        removed = self.edges.remove(pack(src, dst))
        if removed.any():
            self._changed()
        return removed

    def grow(self, n_agents: int) -> None:
        """Make room for new agents (ids up to n_agents - 1)."""
        self.n_agents = max(self.n_agents, int(n_agents))
        self._changed()

    def followees(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR (indptr, followee ids) by follower."""
        if self._followees is None:
            src, dst = unpack(self.edges.keys)
            indptr = np.searchsorted(src, np.arange(self.n_agents + 1, dtype=np.int64))
            self._followees = (indptr, dst)
        return self._followees

    def followers(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR (indptr, follower ids) by followee."""
        if self._followers is None:
            src, dst = unpack(self.edges.keys)
            order = np.argsort(dst, kind="stable")
            indptr = np.searchsorted(dst[order], np.arange(self.n_agents + 1, dtype=np.int64))
            self._followers = (indptr, src[order])
        return self._followers

    def out_degree(self) -> np.ndarray:
        """Number of accounts each agent follows."""
        return np.diff(self.followees()[0])

    def in_degree(self) -> np.ndarray:
        """Number of followers of each agent."""
        return np.diff(self.followers()[0])

    def edge_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All edges as (follower, followee) arrays, sorted."""
        return unpack(self.edges.keys)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Checkpoint form."""
        return {"n_agents": np.asarray(self.n_agents), "edges": self.edges.keys}

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> FollowGraph:
        """Rebuild from `state_dict()`."""
        g = cls(int(state["n_agents"]))
        g.edges.keys = np.asarray(state["edges"], dtype=np.int64)
        return g


def expand_csr(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """For each row in `rows`, its CSR entries: returns (row position in `rows`, entry)."""
    rows = np.asarray(rows, dtype=np.int64)
    starts, ends = indptr[rows], indptr[rows + 1]
    counts = ends - starts
    total = int(counts.sum())
    which = np.repeat(np.arange(len(rows)), counts)
    offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return which, indices[np.repeat(starts, counts) + offsets]

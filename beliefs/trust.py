"""Directed trust between agents, in [0, 1], stored sparsely.

Only pairs that have interacted are stored (sorted int64 keys `truster << 32 | trustee`
with a value each); every other pair has the configured initial trust. Lookups and
updates are vectorised.
"""

from __future__ import annotations

import numpy as np

from sim.core.keys import pack


class TrustStore:
    """Sparse pairwise trust with a default for pairs never updated."""

    def __init__(self, initial: float):
        self.initial = float(initial)
        self.keys = np.empty(0, dtype=np.int64)
        self.values = np.empty(0, dtype=np.float64)

    def __len__(self) -> int:
        return len(self.keys)

    def get(self, truster: np.ndarray, trustee: np.ndarray) -> np.ndarray:
        """Trust of truster[i] in trustee[i] (the initial value for unseen pairs)."""
        keys = pack(truster, trustee)
        out = np.full(keys.shape, self.initial, dtype=np.float64)
        if len(self.keys):
            pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
            hit = self.keys[pos] == keys
            out[hit] = self.values[pos[hit]]
        return out

    def add(self, truster: np.ndarray, trustee: np.ndarray, delta: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Add deltas (summed per pair, then clipped to [0, 1]).

        Returns (trusters, trustees, new values) of every pair touched, sorted by pair (a
        pair already at a bound may keep its value).
        """
        keys = pack(truster, trustee)
        if not len(keys):
            empty = np.empty(0, dtype=np.int64)
            return empty, empty, np.empty(0, dtype=np.float64)
        uniq, inv = np.unique(keys, return_inverse=True)
        total = np.bincount(inv, weights=np.asarray(delta, dtype=np.float64))
        current = self.get(uniq >> 32, uniq & 0xFFFFFFFF)
        new = np.clip(current + total, 0.0, 1.0)
        self._set(uniq, new)
        return uniq >> 32, uniq & 0xFFFFFFFF, new

    def _set(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Write values for sorted unique keys, inserting the pairs not stored yet."""
        if len(self.keys):
            pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
            hit = self.keys[pos] == keys
        else:
            pos = np.zeros(len(keys), dtype=np.int64)
            hit = np.zeros(len(keys), dtype=bool)
        self.values[pos[hit]] = values[hit]
        fresh = ~hit
        if fresh.any():
            at = np.searchsorted(self.keys, keys[fresh])
            self.keys = np.insert(self.keys, at, keys[fresh])
            self.values = np.insert(self.values, at, values[fresh])

    def state_dict(self) -> dict[str, np.ndarray]:
        """Checkpoint form."""
        return {"initial": np.asarray(self.initial), "keys": self.keys, "values": self.values}

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> TrustStore:
        """Rebuild from `state_dict()`."""
        store = cls(float(state["initial"]))
        store.keys = np.asarray(state["keys"], dtype=np.int64)
        store.values = np.asarray(state["values"], dtype=np.float64)
        return store

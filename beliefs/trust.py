"""Directed trust between agents, in [0, 1], stored sparsely.

Only pairs that have interacted are stored (sorted int64 keys `truster << 32 | trustee`
with a value each); every other pair has the configured initial trust. Lookups and
updates are vectorised.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shoal.core.keys import pack
from shoal.core.state import State, concat, last_value_per_key


class TrustStore:
    """Sparse pairwise trust with a default for pairs never updated."""

    def __init__(self, initial: float):
        self.initial = float(initial)
        self.keys = np.empty(0, dtype=np.int64)
        self.values = np.empty(0, dtype=np.float64)
        self._journal: list[tuple[np.ndarray, np.ndarray]] = []  # (pairs, values) set

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
        self._journal.append((uniq, new))
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

    def get_state(self) -> State:
        """Every stored pair and its value (the initial value is the config's)."""
        return State(arrays={"keys": self.keys.copy(), "values": self.values.copy()})

    def set_state(self, state: State) -> None:
        """Hold exactly the pairs of `state`; the journal starts empty."""
        self.keys = np.asarray(state.arrays["keys"], dtype=np.int64)
        self.values = np.asarray(state.arrays["values"], dtype=np.float64)
        self._journal = []

    def take_changes(self) -> State:
        """The pairs whose value was set since the previous call, with the value set."""
        journal, self._journal = self._journal, []
        return State(arrays={"keys": concat([k for k, _ in journal], np.int64),
                             "values": concat([v for _, v in journal], np.float64)})

    def replay(self, changes: Sequence[State]) -> None:
        """Rebuild from logged values: each pair ends with the last value it was set to."""
        self.keys, self.values = last_value_per_key(
            concat([c.arrays["keys"] for c in changes], np.int64),
            concat([c.arrays["values"] for c in changes], np.float64))
        self._journal = []

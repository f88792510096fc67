"""Each agent's exposure history: which posts it has already seen, and when last.

Kept as sorted int64 keys `agent << 32 | post` with the round of the latest exposure, so
"is this exposure new?" is one vectorised binary search. With `window` set, pairs not seen
for that many rounds are forgotten (novelty then means "not seen recently").
"""

from __future__ import annotations

import numpy as np

from sim.core.keys import pack, unique_sorted


class ExposureHistory:
    """Seen (agent, post) pairs with the round each was last seen."""

    def __init__(self, window: int | None = None):
        self.window = window
        self.keys = np.empty(0, dtype=np.int64)
        self.last_round = np.empty(0, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.keys)

    def seen(self, agents: np.ndarray, posts: np.ndarray) -> np.ndarray:
        """Mask: had agent[i] seen post[i] before?"""
        keys = pack(agents, posts)
        if not len(self.keys):
            return np.zeros(keys.shape, dtype=bool)
        pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return self.keys[pos] == keys

    def record(self, agents: np.ndarray, posts: np.ndarray, round_: int) -> None:
        """Remember this round's exposures (and forget those beyond the window)."""
        keys = unique_sorted(pack(agents, posts))
        pos = np.minimum(np.searchsorted(self.keys, keys), max(len(self.keys) - 1, 0))
        known = (self.keys[pos] == keys) if len(self.keys) else np.zeros(len(keys), bool)
        self.last_round[pos[known]] = round_
        keys = keys[~known]
        if len(keys):
            at = np.searchsorted(self.keys, keys)
            self.keys = np.insert(self.keys, at, keys)
            self.last_round = np.insert(self.last_round, at, np.int32(round_))
        if self.window is not None:
            keep = self.last_round > round_ - self.window
            if not keep.all():
                self.keys, self.last_round = self.keys[keep], self.last_round[keep]

    def state_dict(self) -> dict[str, np.ndarray]:
        """Checkpoint form."""
        return {"keys": self.keys, "last_round": self.last_round}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore from `state_dict()`."""
        self.keys = np.asarray(state["keys"], dtype=np.int64)
        self.last_round = np.asarray(state["last_round"], dtype=np.int32)

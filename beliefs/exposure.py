"""Each agent's exposure history: which posts it has already seen, and when last.

Kept as sorted int64 keys `agent << 32 | post` with the round of the latest exposure, so
"is this exposure new?" is one vectorised binary search. With `window` set, pairs not seen
for that many rounds are forgotten (novelty then means "not seen recently").

`since` is the first round whose exposures the history holds: 0, unless the belief rule
that reads it took over mid-run (a fork or a `set` intervention switched rules) from one
that kept none; the exposures logged before it belong to no history of this run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shoal.core.keys import pack, unique_sorted
from shoal.core.state import State, concat, last_value_per_key


class ExposureHistory:
    """Seen (agent, post) pairs with the round each was last seen."""

    def __init__(self, window: int | None = None, since: int = 0):
        self.window = window
        self.since = since
        self.keys = np.empty(0, dtype=np.int64)
        self.last_round = np.empty(0, dtype=np.int32)
        self._journal: list[tuple[np.ndarray, int]] = []  # (pairs seen, round)

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
        self._journal.append((keys, round_))
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

    def get_state(self) -> State:
        """Every remembered pair and the round it was last seen."""
        return State(arrays={"keys": self.keys.copy(), "last_round": self.last_round.copy()})

    def set_state(self, state: State) -> None:
        """Hold exactly the pairs of `state`; the journal starts empty."""
        self.keys = np.asarray(state.arrays["keys"], dtype=np.int64)
        self.last_round = np.asarray(state.arrays["last_round"], dtype=np.int32)
        self._journal = []

    def take_changes(self) -> State:
        """The pairs seen since the previous call, with the round each was seen in."""
        journal, self._journal = self._journal, []
        return State(arrays={
            "keys": concat([k for k, _ in journal], np.int64),
            "rounds": concat([np.full(len(k), r, np.int32) for k, r in journal], np.int32)})

    def replay(self, changes: Sequence[State], as_of: int | None = None) -> None:
        """Rebuild from logged exposures: each pair with the last round it was seen in,
        those outside the window forgotten as of round `as_of` (default: the last one)."""
        keys, rounds = last_value_per_key(
            concat([c.arrays["keys"] for c in changes], np.int64),
            concat([c.arrays["rounds"] for c in changes], np.int32))
        if self.window is not None and len(rounds):
            as_of = int(rounds.max()) if as_of is None else as_of
            keep = rounds > as_of - self.window
            keys, rounds = keys[keep], rounds[keep]
        self.keys, self.last_round = keys, rounds.astype(np.int32)
        self._journal = []

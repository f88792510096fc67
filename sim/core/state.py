"""The state protocol: how every stateful part of a simulation is saved and restored.

Every stateful component has `get_state()` (its whole state, as a `State`: arrays, JSON-able
metadata, Arrow tables; copies, never views of what it goes on mutating) and `set_state()`
(the inverse). A checkpoint is composed of them, and nothing outside a component writes its
fields.

Components that grow by appending (posts, the follow graph, trust values set, exposures,
votes, agents joining) are also `Journaled`: `take_changes()` returns what changed since
the previous call (the first call: everything since the component was made), and
`replay(changes)` rebuilds the component, empty, from such changes in order. Their
checkpoint is a log with one segment per round, so a round's checkpoint costs what that
round added, not what the run has accumulated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa


@dataclass
class State:
    """A component's state, or a segment of its changes."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, pa.Table] = field(default_factory=dict)

    def nbytes(self) -> int:
        """Payload size in memory."""
        return int(sum(a.nbytes for a in self.arrays.values())
                   + sum(t.nbytes for t in self.tables.values()))


@runtime_checkable
class Stateful(Protocol):
    """A component whose state a checkpoint keeps."""

    def get_state(self) -> State:
        """The whole state (copies)."""

    def set_state(self, state: State) -> None:
        """Take the state `get_state` returned."""


@runtime_checkable
class Journaled(Stateful, Protocol):
    """A component that can also be saved as a log of changes."""

    def take_changes(self) -> State:
        """What changed since the previous call (and forget it)."""

    def replay(self, changes: Sequence[State]) -> None:
        """Become, from empty, what applying `changes` in order makes."""


def concat(parts: Sequence[np.ndarray], dtype: Any) -> np.ndarray:
    """Concatenate (an empty list gives an empty array of `dtype`)."""
    return (np.concatenate(parts).astype(dtype, copy=False) if len(parts)
            else np.empty(0, dtype))


def last_value_per_key(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For keys listed in time order (repeats allowed), each key once with its last value,
    keys sorted."""
    if not len(keys):
        return keys.astype(np.int64), values
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    last = np.ones(len(k), dtype=bool)
    last[:-1] = k[1:] != k[:-1]
    return k[last], v[last]


def encode_texts(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Texts as one UTF-8 byte array plus end offsets (npz holds them without pickle)."""
    encoded = [t.encode("utf-8") for t in texts]
    ends = np.cumsum([len(b) for b in encoded], dtype=np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), ends


def decode_texts(blob: np.ndarray, ends: np.ndarray) -> list[str]:
    """Inverse of `encode_texts`."""
    if not len(ends):
        return []
    raw = blob.tobytes()
    starts = np.concatenate(([0], ends[:-1]))
    return [raw[a:b].decode("utf-8") for a, b in zip(starts.tolist(), ends.tolist(),
                                                     strict=True)]

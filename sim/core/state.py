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

Components whose state is a bounded window that changes every round (round memory, the
cross-platform digest, notifications) keep it as a flat mapping of keys to JSON values and
journal it with a `KeyedJournal`: a round's segment holds only the keys whose values
changed (a list that lost items at its head and gained some at its tail is stored as that
splice), and replaying the segments rebuilds the mapping exactly. A component restored
from a full state (a checkpoint written before these were journaled) cannot journal
(its log has no base to build on): its `journaling` is False and a checkpoint keeps its
whole state, as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
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
        """Payload size: arrays and tables in memory, metadata as the JSON it is saved as."""
        return int(sum(a.nbytes for a in self.arrays.values())
                   + sum(t.nbytes for t in self.tables.values())
                   + (len(json.dumps(self.meta, default=str)) if self.meta else 0))


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


def text_column(texts: Sequence[str]) -> pa.LargeStringArray:
    """Texts as an Arrow string column (encoded in C: about 5x faster than encoding each
    text in Python)."""
    column = pa.array(texts, pa.large_string())
    if column.null_count:
        raise TypeError("a text is None")
    return column


def column_buffers(column: pa.LargeStringArray) -> tuple[np.ndarray, np.ndarray]:
    """An Arrow string column's UTF-8 bytes and end offsets (what `encode_texts` gives)."""
    if not len(column):
        return np.empty(0, np.uint8), np.empty(0, np.int64)
    _, offsets, data = column.buffers()
    ends = np.frombuffer(offsets, np.int64, column.offset + len(column) + 1)[column.offset:]
    start, ends = int(ends[0]), ends[1:] - ends[0]
    blob = (np.frombuffer(data, np.uint8, start + int(ends[-1]))[start:]
            if data is not None and ends[-1] else np.empty(0, np.uint8))
    return blob, ends


def encode_texts(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Texts as one UTF-8 byte array plus end offsets (npz holds them without pickle): the
    buffers of an Arrow string column (the bytes are those `str.encode` gives)."""
    return column_buffers(text_column(texts))


def decode_texts(blob: np.ndarray, ends: np.ndarray) -> list[str]:
    """Inverse of `encode_texts`."""
    if not len(ends):
        return []
    offsets = np.concatenate(([0], np.asarray(ends, np.int64)))
    column = pa.LargeStringArray.from_buffers(
        len(ends), pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(blob, np.uint8)))
    column.validate(full=True)  # (a damaged file: an error here, not wrong texts)
    return column.to_pylist()


class KeyedJournal:
    """The changes of a state kept as a flat mapping of string keys to JSON values (lists,
    not tuples, so that a value read back from a file compares equal to the live one).

    `diff(values, keys)` compares `values` with what the previous segments made (only the
    `keys` given, or all of them) and returns a segment (a JSON-able dict):
    `{"set": {key: value}, "del": [key], "splice": {key: [dropped, tail]}, "merge": {key:
    [added, removed]}}`, where a splice means "drop `dropped` items from the head of the
    list, then append `tail`" (a queue that was appended to and popped from), and a merge
    applies to a strictly increasing list of integers (a sorted set of post ids that
    grew). `apply` replays a segment onto a mapping; replaying all segments in order gives
    the mapping of the last `diff`, value for value."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def diff(self, values: dict[str, Any], keys: Iterable[str] | None = None) -> dict[str, Any]:
        """The segment that turns the previous mapping into `values` (restricted to
        `keys`, the keys that may have changed, when given)."""
        if keys is None:
            keys = set(values) | set(self.values)
        seg: dict[str, Any] = {"set": {}, "del": [], "splice": {}, "merge": {}}
        for key in sorted(keys):
            old = self.values.get(key, _MISSING)
            new = values.get(key, _MISSING)
            if new is _MISSING:
                if old is not _MISSING:
                    seg["del"].append(key)
                    del self.values[key]
                continue
            if old is not _MISSING and old == new:
                continue
            cut = _splice(old, new) if old is not _MISSING else None
            both = _merge(old, new) if cut is None and old is not _MISSING else None
            if cut is not None:
                seg["splice"][key] = cut
            elif both is not None:
                seg["merge"][key] = both
            else:
                seg["set"][key] = new
            self.values[key] = new
        return {k: v for k, v in seg.items() if v}

    @staticmethod
    def apply(values: dict[str, Any], segment: dict[str, Any]) -> None:
        """Apply one segment to `values` in place (values are copied, never shared with
        the segment, which a checkpoint kept in memory may hold)."""
        for key in segment.get("del", ()):
            values.pop(key, None)
        for key, value in segment.get("set", {}).items():
            values[key] = _copy(value)
        for key, (dropped, tail) in segment.get("splice", {}).items():
            values[key] = values[key][dropped:] + _copy(tail)
        for key, (added, removed) in segment.get("merge", {}).items():
            values[key] = sorted((set(values[key]) - set(removed)) | set(added))

    def reset(self, values: dict[str, Any]) -> None:
        """Take `values` as what the segments so far have made (after a replay)."""
        self.values = dict(values)


_MISSING = object()


def json_default(value: Any) -> Any:
    """`json.dumps(default=...)` for numpy scalars that reach JSON state (their Python
    value, which compares equal to them); anything else is an error."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable in a checkpoint: {type(value).__name__}")


def _copy(value: Any) -> Any:
    """A deep copy of a JSON value, tuples made lists (how it reads back from a file)."""
    return json.loads(json.dumps(value, default=json_default))


def _splice(old: Any, new: Any) -> list[Any] | None:
    """[dropped, tail] if `new` is `old` without its first `dropped` items plus `tail`,
    and that is shorter than `new` itself; else None."""
    if not (isinstance(old, list) and isinstance(new, list)) or not old or not new:
        return None
    for dropped in range(len(old)):  # all dropped: a plain set is as small
        kept = len(old) - dropped
        if kept <= len(new) and old[dropped] == new[0] and old[dropped:] == new[:kept]:
            return [dropped, new[kept:]]
    return None


def _merge(old: Any, new: Any) -> list[Any] | None:
    """[added, removed] if `old` and `new` are strictly increasing lists of integers
    (sorted sets) and that is shorter than `new`; else None."""
    if not (_sorted_set(old) and _sorted_set(new)):
        return None
    before, after = set(old), set(new)
    added, removed = sorted(after - before), sorted(before - after)
    return [added, removed] if len(added) + len(removed) < len(new) else None


def _sorted_set(value: Any) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            and all(a < b for a, b in pairwise(value)))


# Per-(agent, platform) queues ({agent: {platform: items with `astuple()`}}, as the digest
# and the notifications keep them) journaled under the keys "agent/platform".


def queue_changes(journal: KeyedJournal, queues: Mapping[int, Mapping[str, Iterable[Any]]],
                  dirty: set[tuple[int, str]]) -> State:
    """The journal segment of the queues named in `dirty` (which is emptied)."""
    keys = {f"{a}/{p}" for a, p in dirty}
    values = {f"{a}/{p}": [list(x.astuple()) for x in queues[a][p]] for a, p in dirty}
    dirty.clear()
    return State(meta=journal.diff(values, keys))


def replay_queues(changes: Iterable[State]) -> dict[str, dict[str, list[Any]]]:
    """The {agent: {platform: items}} state (as `get_state` gives it) that replaying the
    segments of `queue_changes` in order makes."""
    values: dict[str, Any] = {}
    for change in changes:
        KeyedJournal.apply(values, change.meta)
    out: dict[str, dict[str, list[Any]]] = {}
    for key, items in values.items():
        agent, _, platform = key.partition("/")
        out.setdefault(agent, {})[platform] = items
    return out


def queue_values(queues: Mapping[int, Mapping[str, Iterable[Any]]]) -> dict[str, list[Any]]:
    """All queues under their journal keys (what a journal restarts from)."""
    return {f"{a}/{p}": [list(x.astuple()) for x in q]
            for a, per in queues.items() for p, q in per.items()}

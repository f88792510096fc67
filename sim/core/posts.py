"""The post table of all platforms, held column-wise in growable numpy arrays.

A post id is its row index, so ids are global, dense and increase with (round, canonical
order): "newer" is "larger id". Per platform we keep the ids and rounds of its posts in
order, so "the posts of the last w rounds" is a slice found by binary search, never a scan
of the whole table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import pyarrow as pa
from numpy.typing import DTypeLike

from shoal.core.state import (
    State,
    column_buffers,
    concat,
    decode_texts,
    encode_texts,
    text_column,
)


class PostKind(IntEnum):
    """What a post is. Reposts carry their root's stance; the others their author's."""

    POST = 0
    REPOST = 1
    QUOTE = 2
    REPLY = 3
    COMMENT = 4
    EVENT = 5  # breaking news by the news account, pinned to feeds (interventions)


class _Column:
    """A growable 1-D or 2-D numpy column (amortised doubling)."""

    def __init__(self, dtype: DTypeLike, width: int | None = None, fill: float = 0):
        self.dtype, self.width, self.fill = dtype, width, fill
        shape = (16,) if width is None else (16, width)
        self.data = np.full(shape, fill, dtype=dtype)

    def reserve(self, n: int) -> None:
        if n > len(self.data):
            cap = max(n, 2 * len(self.data))
            shape = (cap,) if self.width is None else (cap, self.width)
            grown = np.empty(shape, dtype=self.dtype)  # (each row written once)
            grown[: len(self.data)] = self.data
            grown[len(self.data):] = self.fill
            self.data = grown


@dataclass
class NewPosts:
    """Posts to append, in canonical order."""

    platform: np.ndarray  # int8
    author: np.ndarray  # int32
    kind: np.ndarray  # int8 (PostKind)
    parent: np.ndarray  # int64, -1 for none
    stance: np.ndarray  # float64 [n, T], nan where a topic is not addressed
    text: list[str]
    stance_method: np.ndarray | None = None  # int8 codes; None: carried as data


class PostStore:
    """All posts of a run; `n` rows, columns as attributes of the same names."""

    def __init__(self, n_topics: int, n_platforms: int):
        self.n = 0
        self.n_topics = n_topics
        self._cols = {
            "platform": _Column(np.int8),
            "author": _Column(np.int32),
            "round": _Column(np.int32),
            "kind": _Column(np.int8),
            "parent": _Column(np.int64, fill=-1),
            "root": _Column(np.int64, fill=-1),
            "stance": _Column(np.float64, width=n_topics, fill=np.nan),
            "up": _Column(np.int32),
            "down": _Column(np.int32),
            "shares": _Column(np.int32),
            "replies": _Column(np.int32),
            "stance_method": _Column(np.int8),  # how the stance was obtained (store enum)
        }
        self.text: list[str] = []
        # Per platform: ids and rounds of its posts, ascending (both grow at the end).
        self._by_platform = [(_Column(np.int64), _Column(np.int32)) for _ in range(n_platforms)]
        self._platform_n = [0] * n_platforms
        # The journal: rows from `_taken` on, and counter increments, are not logged yet.
        self._taken = 0
        # (first id, texts) the last `take_changes` encoded
        self._taken_texts: tuple[int, pa.Array] = (0, text_column([]))
        self._bumps: dict[str, list[np.ndarray]] = {name: [] for name in self.COUNTERS}

    def __getattr__(self, name: str) -> np.ndarray:
        cols = self.__dict__.get("_cols")
        if cols is not None and name in cols:
            return cols[name].data[: self.n]
        raise AttributeError(name)

    def append(self, new: NewPosts, round_: int) -> np.ndarray:
        """Append posts created in `round_`; returns their ids. Roots follow parents."""
        k = len(new.author)
        ids = np.arange(self.n, self.n + k, dtype=np.int64)
        if k == 0:
            return ids
        for col in self._cols.values():
            col.reserve(self.n + k)
        sl = slice(self.n, self.n + k)
        c = self._cols
        c["platform"].data[sl] = new.platform
        c["author"].data[sl] = new.author
        c["round"].data[sl] = round_
        c["kind"].data[sl] = new.kind
        c["parent"].data[sl] = new.parent
        c["stance"].data[sl] = new.stance
        if new.stance_method is not None:
            c["stance_method"].data[sl] = new.stance_method
        parent = np.asarray(new.parent, dtype=np.int64)
        has_parent = parent >= 0
        root = ids.copy()
        # Parents are always older posts, so their roots are already set.
        root[has_parent] = c["root"].data[parent[has_parent]]
        c["root"].data[sl] = root
        self.text.extend(new.text)
        self.n += k
        for p in sorted(set(np.asarray(new.platform).tolist())):
            mine = ids[new.platform == p]
            pid, prd = self._by_platform[p]
            m = self._platform_n[p]
            pid.reserve(m + len(mine))
            prd.reserve(m + len(mine))
            pid.data[m:m + len(mine)] = mine
            prd.data[m:m + len(mine)] = round_
            self._platform_n[p] = m + len(mine)
        return ids

    COUNTERS = ("up", "down", "shares", "replies")

    def increment(self, ids_by_counter: dict[str, np.ndarray]) -> None:
        """Add one to a counter column for each id listed (ids may repeat)."""
        for name, ids in ids_by_counter.items():
            if len(ids):
                ids = np.asarray(ids, dtype=np.int64)
                np.add.at(self._cols[name].data, ids, 1)
                self._bumps[name].append(ids)

    def rows(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Copies of the immutable columns of some posts (for checkpoint logs)."""
        ids = np.asarray(ids, dtype=np.int64)
        out = {name: self._cols[name].data[ids] for name in self._cols  # (a gather copies)
               if name not in self.COUNTERS}  # stance_method is immutable, so included
        out["id"] = ids
        return out

    def get(self, name: str, ids: np.ndarray, fill: float = -1) -> np.ndarray:
        """Column `name` at `ids`, with `fill` where an id is -1 (safe on an empty table)."""
        column = getattr(self, name)
        ids = np.asarray(ids, dtype=np.int64)
        ok = ids >= 0
        if not ok.any():
            return np.full(ids.shape + column.shape[1:], fill, dtype=column.dtype)
        # A fancy index over all ids (gaps read row 0), then the gaps blanked: faster than
        # boolean-mask indexing on big feed matrices.
        picked = column[np.where(ok, ids, 0)]
        mask = ok.reshape(ok.shape + (1,) * (column.ndim - 1))
        return np.where(mask, picked, fill).astype(column.dtype, copy=False)

    def platform_ids(self, platform: int, since_round: int = 0) -> np.ndarray:
        """Ids of the platform's posts created in rounds >= since_round, ascending."""
        pid, prd = self._by_platform[platform]
        m = self._platform_n[platform]
        start = int(np.searchsorted(prd.data[:m], since_round, side="left"))
        return pid.data[start:m]

    def platform_count(self, platform: int) -> int:
        """Number of posts on a platform."""
        return self._platform_n[platform]

    def text_column(self, ids: np.ndarray) -> pa.Array:
        """The texts of posts `ids` as an Arrow column: the one the last `take_changes`
        encoded when `ids` are the posts it took (a round's new posts are), else encoded
        now."""
        first, column = self._taken_texts
        ids = np.asarray(ids, np.int64)
        consecutive = bool(len(ids)) and bool((np.diff(ids) == 1).all())
        if consecutive and len(ids) == len(column) and int(ids[0]) == first:
            return column
        if consecutive:
            return text_column(self.text[int(ids[0]):int(ids[-1]) + 1])
        return text_column([self.text[i] for i in ids.tolist()])

    def addressed(self, ids: np.ndarray) -> np.ndarray:
        """Mask [len(ids), T]: which topics each post takes a stance on."""
        return ~np.isnan(self.stance[ids])

    # ------------------------------------------------------------------ state

    def get_state(self) -> State:
        """Every column (counters included) and the texts."""
        arrays = {name: col.data[: self.n].copy() for name, col in self._cols.items()}
        arrays["text_blob"], arrays["text_ends"] = encode_texts(self.text)
        return State(arrays=arrays)

    def set_state(self, state: State) -> None:
        """Hold exactly the posts of `state`; the journal starts empty."""
        a = state.arrays
        n = len(a["author"])
        for name, col in self._cols.items():
            col.reserve(n)
            col.data[:n] = a[name]
        self.n = n
        self.text = decode_texts(a["text_blob"], a["text_ends"])
        self._index_platforms()
        self._taken, self._bumps = n, {name: [] for name in self.COUNTERS}
        self._taken_texts = (0, text_column([]))  # (texts of another store's ids)

    def take_changes(self) -> State:
        """The posts appended (their immutable columns and texts) and the counter
        increments (ids, repeated) since the previous call."""
        ids = np.arange(self._taken, self.n, dtype=np.int64)
        arrays = self.rows(ids)
        column = text_column(self.text[self._taken:])
        arrays["text_blob"], arrays["text_ends"] = column_buffers(column)
        self._taken_texts = (self._taken, column)  # the round's `posts` rows reuse it
        for name in self.COUNTERS:
            arrays[f"counters.{name}"] = concat(self._bumps[name], np.int64)
        self._taken, self._bumps = self.n, {name: [] for name in self.COUNTERS}
        return State(arrays=arrays)

    def replay(self, changes: Sequence[State]) -> None:
        """Rebuild from logged appends and increments (this store must be empty)."""
        rows = [c.arrays for c in changes]
        ids = concat([r["id"] for r in rows], np.int64)
        if not np.array_equal(ids, np.arange(len(ids))):
            raise ValueError("post ids in the checkpoint logs are not contiguous")
        n = len(ids)
        for name, col in self._cols.items():
            col.reserve(n)
            if name in self.COUNTERS:
                col.data[:n] = 0
            else:
                col.data[:n] = np.concatenate([r[name] for r in rows]).reshape(
                    col.data[:n].shape)
        self.n = n
        self.text = [t for r in rows for t in decode_texts(r["text_blob"], r["text_ends"])]
        for name in self.COUNTERS:
            ids = concat([r.get(f"counters.{name}", np.empty(0, np.int64)) for r in rows],
                         np.int64)
            np.add.at(self._cols[name].data, ids, 1)
        self._index_platforms()
        self._taken, self._bumps = n, {name: [] for name in self.COUNTERS}
        self._taken_texts = (0, text_column([]))  # (texts of another store's ids)

    def _index_platforms(self) -> None:
        """The per-platform id and round lists, from the columns."""
        ids = np.arange(self.n, dtype=np.int64)
        for p, (pid, prd) in enumerate(self._by_platform):
            mine = ids[self.platform == p]
            pid.reserve(len(mine))
            prd.reserve(len(mine))
            pid.data[: len(mine)] = mine
            prd.data[: len(mine)] = self.round[mine]
            self._platform_n[p] = len(mine)

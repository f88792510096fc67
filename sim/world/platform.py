"""A platform's state: its members, follow graph, votes and feed indexes (what kind of
platform it is, its spec, is in shoal.platforms).

The platform owns what is specific to it; the post table is shared (global ids). Indexes
kept here so that feeds never scan the post table:

- `recent`: per author, the ids of their `k` newest posts on this platform (a row buffer);
- `inbox`: per agent, the `k` newest posts of the accounts they follow, maintained by
  pushing new posts to followers, and rebuilt by pulling from `recent` for agents whose
  follows changed. It always equals "the k newest posts of my current followees".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shoal.config.platforms import PlatformConfig
from shoal.core.follow_graph import FollowGraph, expand_csr
from shoal.core.keys import SortedKeySet, pack
from shoal.core.registry import RECOMMENDERS
from shoal.core.rowsets import newest_per_row, push_newest, push_to_csr_rows
from shoal.core.state import State
from shoal.core.workers import SERIAL, Workers
from shoal.platforms.spec import PlatformSpec, spec


def feed_kinds(name: str) -> np.ndarray:
    """The post kinds platform `name`'s feeds show (events are pinned, never recommended)."""
    return np.asarray(spec(name).feed_kinds, dtype=np.int8)


@dataclass
class Platform:
    """Mutable state of one platform."""

    name: str
    code: int
    cfg: PlatformConfig
    members: np.ndarray  # bool [N]
    graph: FollowGraph
    recent: np.ndarray  # int64 [N, k] row buffer per author
    inbox: np.ndarray  # int64 [N, k] row buffer per reader
    votes: SortedKeySet = field(default_factory=SortedKeySet)  # (agent, post) voted
    reposts: SortedKeySet = field(default_factory=SortedKeySet)  # (agent, post) reposted
    # its feed: the recommender its config names (state it keeps is checkpointed)
    recommender: Any = None

    def __post_init__(self) -> None:
        if self.recommender is None:
            self.recommender = RECOMMENDERS.create(self.cfg.recommender)

    @property
    def spec(self) -> PlatformSpec:
        """What this platform is (actions, feed, labels)."""
        return spec(self.name)

    @property
    def k(self) -> int:
        """Feed size."""
        return self.cfg.feed_size

    @classmethod
    def create(cls, name: str, cfg: PlatformConfig, members: np.ndarray,
               graph: FollowGraph) -> Platform:
        """A fresh platform with empty indexes."""
        n, k = len(members), cfg.feed_size
        return cls(name=name, code=spec(name).code, cfg=cfg, members=members, graph=graph,
                   recent=np.full((n, k), -1, np.int64), inbox=np.full((n, k), -1, np.int64))

    def reconfigure(self, cfg: PlatformConfig, posts) -> None:
        """Take a new platform config; a new feed size rebuilds the indexes, a new
        recommender starts afresh (one whose settings did not change keeps its state)."""
        old, self.cfg = self.cfg, cfg
        if cfg.feed_size != old.feed_size:
            self.rebuild_indexes(posts)
        if cfg.recommender != old.recommender:
            self.recommender = RECOMMENDERS.create(cfg.recommender)

    def rebuild_indexes(self, posts) -> None:
        """Author buffers from the post table, then every inbox by pulling from them
        (used on restore and when the feed size changes)."""
        n = len(self.members)
        self.recent = np.full((n, self.k), -1, np.int64)
        self.inbox = np.full((n, self.k), -1, np.int64)
        if posts.n:
            ids = np.arange(posts.n, dtype=np.int64)
            mine = (posts.platform == self.code) & np.isin(posts.kind, feed_kinds(self.name))
            mine &= posts.author >= 0
            self.recent = newest_per_row(posts.author[mine].astype(np.int64), ids[mine],
                                         n, self.k)
        for start in range(0, n, 8192):
            rows = np.arange(start, min(n, start + 8192), dtype=np.int64)
            self.inbox[rows] = self.pull_inbox(rows)

    def pull_inbox(self, rows: np.ndarray) -> np.ndarray:
        """The k newest posts of each row's current followees, from the author buffers."""
        indptr, followees = self.graph.followees()
        which, authors = expand_csr(indptr, followees, rows)
        cand = self.recent[authors]  # [E, k]
        r = np.repeat(which, self.k)
        return newest_per_row(r, cand.ravel(), len(rows), self.k)

    def index_new_posts(self, ids: np.ndarray, authors: np.ndarray,
                        rebuild: np.ndarray, workers: Workers = SERIAL) -> None:
        """Add this round's posts to the author buffers and the inboxes.

        `rebuild` are agents whose followees changed this round: their inbox is pulled
        afresh; everyone else gets new posts pushed from the accounts they follow (a
        range of readers per worker).
        """
        keep = authors >= 0  # the news account has no followers and no buffer
        ids, authors = ids[keep], authors[keep]
        if len(ids):
            push_newest(self.recent, authors.astype(np.int64), ids, workers)
            indptr, followers = self.graph.followers()
            push_to_csr_rows(self.inbox, indptr, followers, authors, ids, rebuild, workers)
        if len(rebuild):
            self.inbox[rebuild] = self.pull_inbox(rebuild)

    def has_voted(self, agents: np.ndarray, posts: np.ndarray) -> np.ndarray:
        """Mask: has agent already voted on post here?"""
        return self.votes.contains(pack(agents, posts))

    def add_members(self, agents: np.ndarray) -> None:
        """Agents join this platform (they must exist: see `grow`)."""
        self.members[np.asarray(agents, dtype=np.int64)] = True

    def grow(self, n: int) -> None:
        """Make room for agents up to id n - 1 (new agents join as non-members)."""
        extra = n - len(self.members)
        if extra <= 0:
            return
        self.members = np.concatenate([self.members, np.zeros(extra, bool)])
        pad = np.full((extra, self.k), -1, np.int64)
        self.recent = np.concatenate([self.recent, pad])
        self.inbox = np.concatenate([self.inbox, pad])
        self.graph.grow(n)

    # ------------------------------------------------------------------ state

    def get_state(self) -> State:
        """Members, votes, reposts and follow edges (the feed indexes are derived)."""
        return State(arrays={"members": self.members.copy(), "votes": self.votes.keys.copy(),
                             "reposts": self.reposts.keys.copy(),
                             "edges": self.graph.get_state().arrays["edges"]})

    def set_state(self, state: State, posts) -> None:
        """Take the state of `state` and rebuild the feed indexes from `posts`."""
        a = state.arrays
        self.members = np.asarray(a["members"], dtype=bool).copy()
        self.votes.reset(a["votes"])
        self.reposts.reset(a["reposts"])
        self.graph.set_state(State(arrays={"edges": a["edges"]}))
        self.rebuild_indexes(posts)

    def take_changes(self) -> State:
        """Votes and reposts cast, follows and unfollows, since the previous call (who is
        a member is not journaled: the world's snapshot keeps it)."""
        graph = self.graph.take_changes().arrays
        return State(arrays={"votes": self.votes.take_changes()[0],
                             "reposts": self.reposts.take_changes()[0],
                             "follower": graph["follower"], "followee": graph["followee"],
                             "op": graph["op"]})

    def replay(self, changes: Sequence[State], posts) -> None:
        """Rebuild votes, reposts and follows from logged changes (this platform must have
        none), then the feed indexes from `posts`."""
        for c in changes:
            a = c.arrays
            self.votes.replay(a["votes"], np.ones(len(a["votes"]), np.int8))
            self.reposts.replay(a["reposts"], np.ones(len(a["reposts"]), np.int8))
        self.graph.replay(changes)
        self.rebuild_indexes(posts)

"""A platform's state: its members, follow graph, votes and feed indexes (what kind of
platform it is, its spec, is in sim.platforms).

The platform owns what is specific to it; the post table is shared (global ids). Indexes
kept here so that feeds never scan the post table:

- `recent`: per author, the ids of their `k` newest posts on this platform (a row buffer);
- `inbox`: per agent, the `k` newest posts of the accounts they follow, maintained by
  pushing new posts to followers, and rebuilt by pulling from `recent` for agents whose
  follows changed. It always equals "the k newest posts of my current followees".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.config.platforms import PlatformConfig
from sim.core.follow_graph import FollowGraph, expand_csr
from sim.core.keys import SortedKeySet, pack
from sim.core.rowsets import newest_per_row, push_newest
from sim.platforms.spec import PlatformSpec, spec


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
        """Take a new platform config; a new feed size rebuilds the indexes."""
        old_k, self.cfg = self.k, cfg
        if cfg.feed_size != old_k:
            self.rebuild_indexes(posts)

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
                        rebuild: np.ndarray) -> None:
        """Add this round's posts to the author buffers and the inboxes.

        `rebuild` are agents whose followees changed this round: their inbox is pulled
        afresh; everyone else gets new posts pushed from the accounts they follow.
        """
        keep = authors >= 0  # the news account has no followers and no buffer
        ids, authors = ids[keep], authors[keep]
        if len(ids):
            push_newest(self.recent, authors.astype(np.int64), ids)
            indptr, followers = self.graph.followers()
            which, readers = expand_csr(indptr, followers, authors)
            post_of = ids[which]
            if len(rebuild):
                skip = np.isin(readers, rebuild)
                readers, post_of = readers[~skip], post_of[~skip]
            push_newest(self.inbox, readers, post_of)
        if len(rebuild):
            self.inbox[rebuild] = self.pull_inbox(rebuild)

    def has_voted(self, agents: np.ndarray, posts: np.ndarray) -> np.ndarray:
        """Mask: has agent already voted on post here?"""
        return self.votes.contains(pack(agents, posts))

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

    def state_dict(self) -> dict[str, np.ndarray]:
        """Checkpoint form."""
        return {
            "members": self.members, "recent": self.recent, "inbox": self.inbox,
            "votes": self.votes.keys, "reposts": self.reposts.keys,
            **{f"graph_{k}": v for k, v in self.graph.state_dict().items()},
        }

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore from `state_dict()`."""
        self.members = np.asarray(state["members"], dtype=bool)
        self.recent = np.asarray(state["recent"], dtype=np.int64)
        self.inbox = np.asarray(state["inbox"], dtype=np.int64)
        self.votes.keys = np.asarray(state["votes"], dtype=np.int64)
        self.reposts.keys = np.asarray(state["reposts"], dtype=np.int64)
        self.graph = FollowGraph.from_state(
            {k.removeprefix("graph_"): v for k, v in state.items() if k.startswith("graph_")}
        )

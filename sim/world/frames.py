"""The world as it is now, as pandas DataFrames (`Simulation.state`): for looking at a
simulation between rounds in a notebook. Each frame is computed when asked for."""

from __future__ import annotations

import numpy as np
import pandas as pd

from shoal.core.posts import PostKind
from shoal.platforms.spec import by_code
from shoal.world.world import World


class WorldFrames:
    """Frames of a world's current state (copies: changing them changes nothing)."""

    def __init__(self, world: World):
        self.world = world

    @property
    def round(self) -> int:
        """The last completed round."""
        return self.world.round

    @property
    def beliefs(self) -> pd.DataFrame:
        """One row per (agent, topic): position and confidence now."""
        w = self.world
        n, t = w.beliefs.position.shape
        return pd.DataFrame({
            "agent": np.repeat(np.arange(n), t),
            "topic": np.tile(np.asarray(w.topics, dtype=object), n),
            "position": w.beliefs.position.ravel().copy(),
            "confidence": w.beliefs.confidence.ravel().copy()})

    @property
    def agents(self) -> pd.DataFrame:
        """One row per agent: persona, group, whether alive, the round it joined, and
        membership of each platform."""
        w = self.world
        frame = w.population.to_frame(w.topics)
        frame = frame[[c for c in frame.columns if not c.startswith("interest_")]].copy()
        frame["alive"] = w.alive
        frame["joined_round"] = w.joined
        for name, plat in w.platforms.items():
            frame[f"on_{name}"] = plat.members.copy()
        return frame

    @property
    def posts(self) -> pd.DataFrame:
        """One row per post: platform, round, author (-1: the news account), kind, parent,
        root, text, the counts now (up, down, shares, replies), and a `stance_<topic>`
        column per topic (NaN where the post takes no stance on it)."""
        p = self.world.posts
        names = {code: s.name for code, s in by_code().items()}
        frame = pd.DataFrame({
            "post_id": np.arange(p.n), "platform": [names[int(c)] for c in p.platform],
            "round": p.round.copy(), "author": p.author.copy(),
            "kind": [PostKind(int(k)).name.lower() for k in p.kind],
            "parent_id": p.parent.copy(), "root_id": p.root.copy(), "text": list(p.text),
            "up": p.up.copy(), "down": p.down.copy(), "shares": p.shares.copy(),
            "replies": p.replies.copy()})
        for t, topic in enumerate(self.world.topics):
            frame[f"stance_{topic}"] = p.stance[:, t].copy()
        return frame

    @property
    def follows(self) -> pd.DataFrame:
        """One row per follow edge now: platform, follower, followee."""
        parts = []
        for name, plat in self.world.platforms.items():
            src, dst = plat.graph.edge_arrays()
            parts.append(pd.DataFrame({"platform": name, "follower": src, "followee": dst}))
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
            columns=["platform", "follower", "followee"])

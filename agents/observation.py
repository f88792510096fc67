"""What the driver sends a shard each round: per platform, the acting agents and their feeds
with every feature a policy needs, already gathered (shards never read world state)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Prompt:
    """An LLM agent's assembled context for one turn (built by the driver)."""

    system: str
    observation: str
    section_tokens: dict[str, int]
    provider: str


@dataclass
class PlatformView:
    """One platform's acting agents and their feeds; arrays are aligned on rows."""

    platform: int  # platform code
    name: str
    agents: np.ndarray  # int64 [A]
    feed: np.ndarray  # int64 [A, K] post ids, -1 empty
    author: np.ndarray  # int64 [A, K]
    kind: np.ndarray  # int8 [A, K]
    stance: np.ndarray  # float64 [A, K, T], nan where unaddressed
    up: np.ndarray  # int32 [A, K]
    down: np.ndarray  # int32 [A, K]
    follows_author: np.ndarray  # bool [A, K]
    trust: np.ndarray  # float64 [A, K]
    voted: np.ndarray  # bool [A, K]
    reposted: np.ndarray  # bool [A, K]
    prompts: list[Prompt | None] | None = None  # per row: the context of an LLM agent

    def take(self, rows: np.ndarray) -> PlatformView:
        """The view restricted to some rows (e.g. one shard's agents)."""
        return PlatformView(
            platform=self.platform, name=self.name, agents=self.agents[rows],
            feed=self.feed[rows], author=self.author[rows], kind=self.kind[rows],
            stance=self.stance[rows], up=self.up[rows], down=self.down[rows],
            follows_author=self.follows_author[rows], trust=self.trust[rows],
            voted=self.voted[rows], reposted=self.reposted[rows],
            prompts=[self.prompts[i] for i in rows] if self.prompts is not None else None,
        )


@dataclass
class DecisionRequest:
    """Everything a shard needs to decide round `round` for its acting agents."""

    round: int
    views: list[PlatformView]
    agents: np.ndarray  # int64 [U]: every agent acting on some platform, sorted
    position: np.ndarray  # float64 [U, T]
    confidence: np.ndarray  # float64 [U, T]
    extras: dict[str, object] = field(default_factory=dict)
    json_only: frozenset[str] = frozenset()  # providers known to refuse tool calls

    def rows_of(self, agents: np.ndarray) -> np.ndarray:
        """Row indices in `self.agents` of the given agents."""
        return np.searchsorted(self.agents, agents)

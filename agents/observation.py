"""What the driver sends a shard each round: per platform, the acting agents and their feeds
with every feature a policy needs, already gathered (shards never read world state)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from shoal.memory.model_tokens import ModelTokens


@dataclass
class Prompt:
    """An LLM agent's assembled context for one turn (built by the driver)."""

    system: str
    observation: str
    section_tokens: dict[str, int]
    provider: str
    reused_tokens: int | None = None  # of the agent's previous prompt (memory/prefix_reuse.py)
    meta: dict | None = None  # what it shows, as data (`Assembled.meta`)


class TurnInputs(NamedTuple):
    """What one turn's context needs beyond the shard's own (its agents' profiles, the
    config, the request's beliefs and feeds) and its `ContextBatch`'s shared parts: row
    numbers, a few account names, and indices into the batch's lines. (A tuple: it
    pickles as one.)"""

    at: int  # the turn's row in the driver's view (the `context` table's order)
    row: int  # its row in the shard's own view
    provider: str | None  # an LLM agent's provider (None: the context is only logged)
    trusted: list[str]
    distrusted: list[str]
    memory: list[int]
    digest: list[int]
    events: list[int]
    notifications: list[int]
    knowledge: list[int] | None  # None: the run has no graph memory


@dataclass
class ContextBatch:
    """A shard's context inputs for one round (`executor.contexts: shards`), sent once
    inside its `DecisionRequest`: every distinct memory, digest, event, notification and
    knowledge line of the shard's turns once (text and provenance in two columns), every
    post its feeds show once (a `FeedItem`'s fields), then per view and turn only a
    `TurnInputs`. `previous`: the last prompt (in pieces; None: none) of LLM agents whose
    shard has not been told it yet, so the prefix reuse measure continues where the
    driver's left it (after a resume, a fork, a restarted executor)."""

    text: list[str] = field(default_factory=list)
    provenance: list[dict] = field(default_factory=list)
    posts: dict[int, tuple] = field(default_factory=dict)
    feed_order: list[str] = field(default_factory=list)  # per view
    turns: list[list[TurnInputs]] = field(default_factory=list)  # per view
    previous: dict[int, tuple[str, ...] | None] = field(default_factory=dict)


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
    # Per row, the agent's language as an index into `languages` (BCP 47 tags): what
    # policies write their texts in. None: everyone's is English (so an English run
    # sends shards what it always did).
    language: np.ndarray | None = None  # int16 [A]
    languages: tuple[str, ...] = ()

    def take(self, rows: np.ndarray | slice) -> PlatformView:
        """The view restricted to some rows (e.g. one shard's agents; a slice gives views
        of the arrays, not copies)."""
        if not isinstance(rows, slice):
            rows = np.asarray(rows)
            if rows.dtype == bool:
                rows = np.flatnonzero(rows)

        def pick(a: np.ndarray) -> np.ndarray:  # (np.take: ~2-6x a fancy index on rows)
            return a[rows] if isinstance(rows, slice) else np.take(a, rows, axis=0)

        prompts = self.prompts
        if prompts is not None:
            prompts = prompts[rows] if isinstance(rows, slice) else [prompts[i] for i in rows]
        return PlatformView(
            platform=self.platform, name=self.name, agents=pick(self.agents),
            feed=pick(self.feed), author=pick(self.author), kind=pick(self.kind),
            stance=pick(self.stance), up=pick(self.up), down=pick(self.down),
            follows_author=pick(self.follows_author), trust=pick(self.trust),
            voted=pick(self.voted), reposted=pick(self.reposted),
            prompts=prompts,
            language=pick(self.language) if self.language is not None else None,
            languages=self.languages,
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
    outputs: dict[str, str] = field(default_factory=dict)  # `output: auto`, as resolved
    budget: int | None = None  # the context budget in cl100k tokens (World.context_budget)
    model_tokens: dict[str, ModelTokens] = field(default_factory=dict)  # by provider
    # contexts built in the shards: one batch per shard, by shard id (a shard's own
    # request holds its one batch); None: the driver built them (`Prompt`s in the views)
    contexts: list[ContextBatch] | None = None

    def rows_of(self, agents: np.ndarray) -> np.ndarray | slice:
        """Where the given agents are in `self.agents`: a slice when they are a contiguous
        run of it (the common case, one platform: `position[rows]` is then a view, and no
        search is made), else their row indices."""
        n = len(agents)
        if n:
            start = int(np.searchsorted(self.agents, agents[0]))
            if np.array_equal(self.agents[start:start + n], agents):
                return slice(start, start + n)
        return np.searchsorted(self.agents, agents)

"""The interface of belief update rules, and the exposures they read."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from shoal.beliefs.exposure import ExposureHistory
from shoal.beliefs.state import BeliefState
from shoal.beliefs.trust import TrustStore
from shoal.core.counter_rng import CounterRNG
from shoal.core.follow_graph import FollowGraph
from shoal.core.posts import PostStore


@dataclass
class Exposures:
    """What each agent saw this round, across platforms, oldest post first.

    `posts` is [A, M] (-1 padded on the left); `up`/`down` are the vote counts and `trust`
    the reader's trust in the author as they were when the feed was built (end of the
    previous round), aligned with `posts`.
    """

    agents: np.ndarray  # int64 [A]
    posts: np.ndarray  # int64 [A, M]
    up: np.ndarray  # int32 [A, M]
    down: np.ndarray  # int32 [A, M]
    trust: np.ndarray  # float64 [A, M]

    @property
    def valid(self) -> np.ndarray:
        """Mask of real (non-padding) entries."""
        return self.posts >= 0

    def take(self, rows: slice) -> Exposures:
        """The exposures of a range of the agents (views of these arrays, not copies)."""
        return Exposures(self.agents[rows], self.posts[rows], self.up[rows], self.down[rows],
                         self.trust[rows])

    def flat(self) -> tuple[np.ndarray, np.ndarray]:
        """(agent, post) pairs of every real exposure."""
        v = self.valid
        return np.broadcast_to(self.agents[:, None], self.posts.shape)[v], self.posts[v]


@dataclass
class UpdateContext:
    """Everything else a rule may read. Rules that work by direct interaction (random
    pairs, neighbours on the follow graph, everyone) use `rng`, `graph`, `alive` and
    `initial_position` instead of (or besides) the exposures."""

    round: int
    posts: PostStore
    trust: TrustStore
    history: ExposureHistory | None
    engagement: np.ndarray  # float64 [N, T]: net votes received this round per topic
    rng: CounterRNG | None = None  # draws keyed by (seed, round, agent, purpose)
    graph: FollowGraph | None = None  # the first enabled platform's follow graph
    alive: np.ndarray | None = None  # bool [N]: agents still in the simulation
    initial_position: np.ndarray | None = None  # [N, T] positions at round 0 (or on joining)


class UpdateRule(ABC):
    """A belief update rule. `uses_novelty` asks the driver to keep the exposure history;
    `uses_trust` to look up each exposure's trust (`Exposures.trust`); `uses_votes` to
    gather each exposure's votes (`Exposures.up`, `down`: true unless a rule says it does
    not read them, since gathering them costs a read per feed item)."""

    uses_novelty: bool = False
    uses_trust: bool = False
    uses_votes: bool = True
    # The modes (its config's `mode`) in which `update` is by agent (see `by_agent`).
    agentwise_modes: tuple[str, ...] = ()

    @property
    def by_agent(self) -> bool:
        """Whether `update` treats agents one by one: it writes only the rows of
        `exposures.agents`, and reads of other agents only what no update writes (posts,
        trust, the exposure history). The driver then updates ranges of agents on its
        worker threads (shoal.core.workers). True in the built-in rules' `exposures` mode;
        a mode that draws partners, reads others' positions or moves everyone (an anchor,
        engagement) is not."""
        mode = getattr(self, "mode", None) or getattr(getattr(self, "cfg", None), "mode", None)
        return mode in self.agentwise_modes

    @abstractmethod
    def update(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext) -> None:
        """Update beliefs in place from this round's exposures and engagement."""

    @staticmethod
    def stances(exposures: Exposures, ctx: UpdateContext) -> tuple[np.ndarray, np.ndarray]:
        """Stance [A, M, T] of each exposure (0 where unaddressed) and the addressed mask."""
        stance = ctx.posts.get("stance", exposures.posts, np.nan)
        addressed = ~np.isnan(stance) & exposures.valid[:, :, None]
        return np.where(addressed, stance, 0.0), addressed

"""An agent shard: a slice of the population with its policies.

The same class runs in-process (local executor) and inside a Ray actor (Ray executor). It
holds what is static about its agents (personas, interests, policy parameters) and gets
everything dynamic from the driver in a `DecisionRequest`, once per round.
"""

from __future__ import annotations

import numpy as np

from agents.actions import ActionBatch
from agents.observation import DecisionRequest
from agents.population import Population
from agents.rule_policy import RulePolicy
from sim.config import Config
from sim.counter_rng import CounterRNG


class AgentShard:
    """Decides for the agents `shard_id`, `shard_id + n_shards`, ... of the population."""

    def __init__(self, shard_id: int, n_shards: int, cfg: Config, population: Population):
        self.shard_id = shard_id
        self.n_shards = n_shards
        self.update(cfg, population)

    def update(self, cfg: Config, population: Population) -> None:
        """Take the effective config and population (at start, and after interventions)."""
        self.cfg = cfg
        self.n_topics = len(cfg.topics)
        self.rng = CounterRNG(cfg.seed)
        self.policy = RulePolicy(cfg.policy, cfg.topics, self.rng, population.interests,
                                 population.username)
        self.max_actions = {
            p: getattr(cfg.platforms, p).max_actions_per_round for p in ("twitter", "reddit")
        }

    def owns(self, agents: np.ndarray) -> np.ndarray:
        """Mask of the given agents that belong to this shard."""
        return agents % self.n_shards == self.shard_id

    async def decide(self, request: DecisionRequest) -> ActionBatch:
        """This round's actions of the shard's acting agents, on every platform."""
        batches = []
        for view in request.views:
            rows = request.rows_of(view.agents)
            batches.append(self.policy.decide(
                view, request.position[rows], request.confidence[rows], request.round,
                self.max_actions[view.name],
            ))
        return ActionBatch.concat(batches, self.n_topics)

    async def ping(self) -> int:
        """Liveness check (used by the Ray executor at start-up)."""
        return self.shard_id

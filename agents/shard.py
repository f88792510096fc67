"""An agent shard: a slice of the population with its policies.

The same class runs in-process (local executor) and inside a Ray actor (Ray executor). It
holds what is static about its agents (personas, interests, policy parameters) and gets
everything dynamic from the driver in a `DecisionRequest`, once per round.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from agents.actions import ActionBatch
from agents.llm_policy import LLMPolicy
from agents.observation import DecisionRequest
from agents.policy import build_policy
from agents.population import Population
from sim.config import Config
from sim.core.counter_rng import CounterRNG
from sim.llm.cache import CacheSpec, ResponseCache
from sim.platforms.spec import spec as platform_spec


@dataclass
class ShardResult:
    """A shard's decisions for one round, and the LLM calls it made."""

    actions: ActionBatch
    llm_calls: list[dict] = field(default_factory=list)
    json_only: frozenset[str] = frozenset()  # providers known to refuse tools, now


class AgentShard:
    """Decides for the agents `shard_id`, `shard_id + n_shards`, ... of the population."""

    def __init__(self, shard_id: int, n_shards: int, cfg: Config, population: Population,
                 llm_urls: dict[str, list[str]] | None = None,
                 llm_cache: CacheSpec | None = None):
        self.shard_id = shard_id
        self.n_shards = n_shards
        self.llm_urls = llm_urls or {}
        # (the shard's own, kept across config changes: its index is loaded once)
        self.cache = ResponseCache(llm_cache, f"s{shard_id}") if llm_cache else None
        self.llm: LLMPolicy | None = None
        self.update(cfg, population)

    def update(self, cfg: Config, population: Population) -> None:
        """Take the effective config and population (at start, and after interventions)."""
        same_llm = self.llm is not None and cfg.llm == self.cfg.llm
        self.cfg = cfg
        if same_llm:  # keep the connection pools; only the accounts may have changed
            self.llm.usernames = {u: i for i, u in enumerate(population.username)}
        else:
            self.llm = (LLMPolicy(cfg, population.username, self.n_shards, self.llm_urls,
                                  self.cache) if cfg.llm is not None else None)
        self.n_topics = len(cfg.topics)
        self.rng = CounterRNG(cfg.seed)
        self.policy = build_policy(cfg, self.rng, population.interests, population.username)
        self.max_actions = {
            name: p.max_actions_per_round for name, p in cfg.platforms.items()
        }

    def owns(self, agents: np.ndarray) -> np.ndarray:
        """Mask of the given agents that belong to this shard."""
        return agents % self.n_shards == self.shard_id

    async def decide(self, request: DecisionRequest) -> ShardResult:
        """This round's actions of the shard's acting agents, on every platform: the
        configured policy (`policy.kind`) for everyone (vectorised), then LLM calls for the
        LLM agents, concurrently across platforms."""
        rule = []
        for view in request.views:
            if not platform_spec(view.name).social:  # its engine decides for rule agents
                rule.append(ActionBatch.empty(self.n_topics))
                continue
            rows = request.rows_of(view.agents)
            rule.append(self.policy.decide(
                view, request.position[rows], request.confidence[rows], request.round,
                self.max_actions[view.name],
            ))
        if self.llm is None or not any(v.prompts for v in request.views):
            return ShardResult(ActionBatch.concat(rule, self.n_topics))
        self.llm.json_only |= request.json_only  # the world's record, the source of truth
        decided = await asyncio.gather(*(self.llm.decide(view, batch, request.round)
                                         for view, batch in zip(request.views, rule,
                                                                strict=True)))
        return ShardResult(ActionBatch.concat([b for b, _ in decided], self.n_topics),
                           [c for _, calls in decided for c in calls],
                           frozenset(self.llm.json_only))

    async def ping(self) -> int:
        """Liveness check (used by the Ray executor at start-up)."""
        return self.shard_id

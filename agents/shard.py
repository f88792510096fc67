"""An agent shard: a slice of the population with its policies.

The same class runs in-process (local executor) and inside a Ray actor (Ray executor). It
holds what is static about its agents (personas, interests, policy parameters) and gets
everything dynamic from the driver in a `DecisionRequest`, once per round.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shoal.agents.actions import ActionBatch
from shoal.agents.llm_policy import LLMPolicy
from shoal.agents.observation import DecisionRequest, PlatformView, Prompt
from shoal.agents.policy import build_policy, check_decisions
from shoal.agents.population import Population
from shoal.agents.prompt import ContextInputs, FeedItem, build_context, section_specs
from shoal.config import Config
from shoal.core.counter_rng import CounterRNG
from shoal.core.heap import keep_freed_memory
from shoal.core.loop_thread import gather_or_cancel
from shoal.core.registry import calling, from_shoal
from shoal.core.workers import SERIAL, Workers
from shoal.llm.cache import CacheSpec, ResponseCache
from shoal.memory.context import Line, accounting_rows
from shoal.memory.prefix_reuse import PrefixReuse, PromptUsage
from shoal.platforms.spec import spec as platform_spec


@dataclass
class BuiltContexts:
    """What a shard that built its agents' contexts sends back for the driver's tables:
    per context its key (view index, row in the driver's view, agent) and its `context`
    table rows; each LLM agent's last prompt in pieces (the world keeps them for the
    checkpoint: equal pieces are one object, pickled once); the turns' prompt and reused
    tokens (memory/prefix_reuse.py)."""

    keys: list[tuple[int, int, int]] = field(default_factory=list)
    accounting: list[list[tuple]] = field(default_factory=list)
    pieces: dict[int, tuple[str, ...]] = field(default_factory=dict)
    usage: PromptUsage = field(default_factory=PromptUsage)


@dataclass
class ShardResult:
    """A shard's decisions for one round, and the LLM calls it made."""

    actions: ActionBatch
    llm_calls: list[dict] = field(default_factory=list)
    json_only: frozenset[str] = frozenset()  # providers known to refuse tools, now
    contexts: BuiltContexts | None = None  # when the shard built them


class AgentShard:
    """Decides for the agents `shard_id`, `shard_id + n_shards`, ... of the population."""

    def __init__(self, shard_id: int, n_shards: int, cfg: Config, population: Population,
                 llm_urls: dict[str, list[str]] | None = None,
                 llm_cache: CacheSpec | None = None, workers: Workers = SERIAL):
        keep_freed_memory()  # (a Ray shard's process, as the driver's: shoal.core.heap)
        self.shard_id = shard_id
        self.n_shards = n_shards
        self.workers = workers  # threads for a `by_agent` policy's ranges of agents
        self.llm_urls = llm_urls or {}
        # (the shard's own, kept across config changes: its index is loaded once)
        self.cache = ResponseCache(llm_cache, f"s{shard_id}") if llm_cache else None
        self.llm: LLMPolicy | None = None
        # its LLM agents' previous prompts, when it builds their contexts
        self.prompts = PrefixReuse()
        self.update(cfg, population)

    def update(self, cfg: Config, population: Population) -> None:
        """Take the effective config and population (at start, and after interventions)."""
        same_llm = self.llm is not None and cfg.llm == self.cfg.llm
        self.cfg = cfg
        self.population = population
        self.specs = section_specs(cfg)
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
        LLM agents, concurrently across platforms (their contexts built here first when
        the request carries their inputs)."""
        built = self.build_contexts(request) if request.contexts else None
        rule = []
        for view in request.views:
            if not platform_spec(view.name).social:  # its engine decides for rule agents
                rule.append(ActionBatch.empty(self.n_topics))
                continue
            rule.append(self.rule_decisions(view, request))
        if self.llm is None or not any(v.prompts for v in request.views):
            return ShardResult(ActionBatch.concat(rule, self.n_topics), contexts=built)
        self.llm.json_only |= request.json_only  # the world's record, the source of truth
        self.llm.outputs = request.outputs
        self.llm.model_tokens = request.model_tokens
        decided = await gather_or_cancel(*(self.llm.decide(view, batch, request.round)
                                           for view, batch in zip(request.views, rule,
                                                                  strict=True)))
        return ShardResult(ActionBatch.concat([b for b, _ in decided], self.n_topics),
                           [c for _, calls in decided for c in calls],
                           frozenset(self.llm.json_only), built)

    def rule_decisions(self, view: PlatformView, request: DecisionRequest) -> ActionBatch:
        """The policy's decisions for a view's agents; a `by_agent` policy decides a range
        of agents per worker when no LLM agent's turn is in the view (the driver puts
        every batch in canonical order, so the order of the ranges' rows is moot)."""
        def decide(part: slice) -> ActionBatch:
            taken, most = view.take(part), self.max_actions[view.name]
            rows = request.rows_of(taken.agents)
            with calling(what, self.policy, request.round):
                batch = self.policy.decide(taken, request.position[rows],
                                           request.confidence[rows], request.round, most)
            if from_shoal(self.policy):
                return batch
            return check_decisions(batch, taken, most, self.n_topics, what, request.round)

        what = f"policy {self.cfg.policy.kind!r}"

        if not self.policy.by_agent or view.prompts:
            return decide(slice(0, len(view.agents)))
        return ActionBatch.concat(self.workers.over(len(view.agents), decide), self.n_topics,
                                  self.workers)

    def build_contexts(self, request: DecisionRequest) -> BuiltContexts:
        """Assemble the contexts of the request's `ContextBatch` (the same `build_context`
        the driver uses, on the same inputs), give the LLM agents' views their prompts,
        and measure each prompt's reuse of the agent's previous one."""
        (batch,) = request.contexts
        for agent, pieces in batch.previous.items():  # where the driver's measure left it
            self.prompts.remember(agent, pieces)
        lines = [Line(t, p) for t, p in zip(batch.text, batch.provenance, strict=True)]
        items = {post: FeedItem(*fields) for post, fields in batch.posts.items()}
        cfg, pop = self.cfg, self.population
        labels = [t.label or t.name for t in cfg.topics]
        budget = request.budget or cfg.memory.context.budget_tokens
        built = BuiltContexts()
        shared: dict[str, str] = {}  # equal pieces as one object
        for vi, view in enumerate(request.views):
            turns = batch.turns[vi]
            if not turns:
                continue
            prompts: list[Prompt | None] = [None] * len(view.agents)
            rows = request.rows_of(view.agents)
            position, confidence = request.position[rows], request.confidence[rows]
            for t in turns:
                agent = int(view.agents[t.row])
                inputs = ContextInputs.of_agent(
                    pop, agent, labels, position[t.row], confidence[t.row],
                    round=request.round, platform=view.name,
                    trusted=t.trusted, distrusted=t.distrusted,
                    memory=[lines[i] for i in t.memory],
                    digest=[lines[i] for i in t.digest],
                    events=[lines[i] for i in t.events],
                    feed=[items[p] for p in view.feed[t.row].tolist() if p >= 0],
                    notifications=[lines[i] for i in t.notifications],
                    minutes_per_round=cfg.minutes_per_round,
                    feed_order=batch.feed_order[vi],
                    knowledge=None if t.knowledge is None else [lines[i] for i in t.knowledge])
                assembled = build_context(inputs, budget, self.specs)
                built.keys.append((vi, t.at, agent))
                built.accounting.append(accounting_rows(assembled))
                if t.provider is None:
                    continue
                reused = built.usage.measure(self.prompts, agent, assembled.pieces,
                                             assembled.tokens["total"])
                built.pieces[agent] = tuple(shared.setdefault(p, p) for p in assembled.pieces)
                prompts[t.row] = Prompt(assembled.system, assembled.observation,
                                        assembled.tokens, t.provider, reused, assembled.meta)
            if any(p is not None for p in prompts):
                view.prompts = prompts
        return built

    async def ping(self) -> int:
        """Liveness check (used by the Ray executor at start-up)."""
        return self.shard_id

"""The synchronized round driver: one `step()` is one round, as a sequence of named phases
(docs/architecture.md, "The round"):

    intervene   interventions due at r fire; round memory crosses the boundary
    schedule    which agents act, on which platform
    observe     each acting agent's feed, as of the end of r-1
    context     the context of every agent whose context is built (LLM agents' prompts),
                or with `executor.contexts: shards` the inputs the shards build them from
    decide      every shard decides, one call per shard
    apply       all actions, in canonical order, against the snapshot
    update      trust, then beliefs, then the exposure history
    remember    the round's memory items, digests and notifications
    log         the round's tables to the writer (one transaction), then the checkpoint

Interventions fire before scheduling so that agents added or removed at round r act, or
not, from r on. The driver owns the world state; shards only decide. Each phase reads and
fills a `Round`; the time each takes is measured by `phase`, not by stamps in the code,
and the CPU time of the driver's thread over the whole round goes into `rounds` too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from shoal.agents.actions import ActionBatch
from shoal.agents.observation import DecisionRequest, PlatformView, Prompt
from shoal.agents.policy import reads_social_features
from shoal.beliefs.rules import Exposures, make_rule
from shoal.core.counter_rng import CounterRNG
from shoal.core.errors import ProviderDown
from shoal.core.faults import crash_point
from shoal.core.heap import keep_freed_memory
from shoal.core.registry import calling
from shoal.core.vocabulary import ACTION_NAMES, Reason
from shoal.core.workers import CpuMark, Workers, resolve_workers
from shoal.engine.agent_context import (
    build_context_for,
    context_batches,
    section_specs,
    top_comments,
)
from shoal.engine.agent_history import AppliedRows, record_actions
from shoal.engine.apply import Applied, apply_all
from shoal.engine.executors import Executor
from shoal.engine.interventions import Fired, begin_round, publish_news
from shoal.engine.observe import decision_request, empty_view, exposures, observe
from shoal.engine.round_log import (
    PlatformEnum,
    actions_table,
    agents_table,
    applied_follows_table,
    beliefs_table,
    context_table,
    exposures_table,
    follows_table,
    interventions_table,
    llm_calls_table,
    memory_table,
    posts_tables,
    trust_table,
)
from shoal.engine.round_record import round_header, round_items
from shoal.engine.schedule import Scheduler, round_start
from shoal.engine.update import update_beliefs, update_trust
from shoal.memory.context import Assembled, accounting_rows
from shoal.memory.prefix_reuse import PromptUsage
from shoal.memory.tokens import encoding
from shoal.platforms.spec import by_code
from shoal.store.checkpoints import CheckpointStore
from shoal.store.llm_usage import Usage
from shoal.store.writer import RoundPayload, RoundWriter
from shoal.surveys.responses import survey_table
from shoal.world.persistence import checkpoint
from shoal.world.platform_engine import engine_part
from shoal.world.world import World, fit_history

TIMED = ("schedule", "observe", "context", "decide", "apply", "update")  # `rounds` columns
STOPPED = "round_stopped"  # the outcome of calls whose round stopped (they stay logged)


@dataclass
class RoundStats:
    """Counts and phase timings (milliseconds) of one round."""

    round: int
    n_active: int = 0
    n_acting: int = 0
    n_actions: int = 0
    n_rejected: int = 0
    n_posts: int = 0
    n_exposures: int = 0
    n_trust_events: int = 0
    n_interventions: int = 0
    n_llm_calls: int = 0  # logical calls (sim/store/llm_usage.py), not HTTP requests
    n_llm_failed: int = 0  # calls without an answer (after their retries)
    n_llm_fallbacks: int = 0  # LLM turns decided by the fallback
    # LLM turns' prompt tokens (system text and observation) and those equal to the start
    # of the agent's previous prompt (memory/prefix_reuse.py)
    prompts: PromptUsage = field(default_factory=PromptUsage)  # (turns: prompts sent)
    driver_cpu_ms: float = 0.0  # CPU time of the driver's thread over the round
    ms: dict[str, float] = field(default_factory=dict)
    # per phase, CPU ms (serial, in agent ranges): what more cores cannot and can share
    # (bench/scaling.py; not logged)
    cpu_ms: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass
class Round:
    """What a round's phases make, each phase reading what the earlier ones left."""

    number: int
    stats: RoundStats
    fired: Fired | None = None
    active: np.ndarray | None = None  # bool [N]
    acting: dict[str, np.ndarray] = field(default_factory=dict)  # platform -> agents
    views: list[PlatformView] = field(default_factory=list)
    # per built context: platform, agent, its `context` table rows (accounting_rows)
    contexts: list[tuple[str, int, list[tuple]]] = field(default_factory=list)
    request: DecisionRequest | None = None
    calls: list[dict] = field(default_factory=list)  # llm_calls rows of the turns
    actions: ActionBatch | None = None  # canonical order
    applied: Applied | None = None
    exposures: Exposures | None = None
    new_posts: np.ndarray | None = None  # ids, ascending
    traders: dict[str, np.ndarray] = field(default_factory=dict)  # engine platform -> agents
    engine_views: list[PlatformView] = field(default_factory=list)  # LLM agents' turns there


def check_providers(calls: list[dict], round_: int) -> None:
    """Stop (before anything of the round is applied) when not one LLM call of the round
    got an answer, retries included: the provider is down, unreachable or refusing us
    (a wrong key, a wrong model). The run can be resumed once it is back."""
    if calls and all(c["status"] != "ok" for c in calls):
        failed = {c["base_url"] for c in calls if c["base_url"]}
        example = next((c["error"] for c in calls if c["error"]), "")
        turns = len({(c.get("agent"), c.get("platform"), c.get("call")) for c in calls})
        raise ProviderDown(
            f"round {round_}: none of {turns} LLM calls ({len(calls)} requests) got an "
            f"answer "
            f"({', '.join(sorted(failed)) or 'no endpoint'}: {example}); the run stopped "
            f"after round {round_ - 1} and can be resumed with `shoal resume`"
            + (_TOO_LONG_HINT if any(too_long(c["error"]) for c in calls) else ""))


# What servers say when a prompt does not fit the model's context: llama.cpp
# (`exceed_context_size_error`), OpenAI (`context_length_exceeded`), vLLM and others
# ("maximum context length").
_TOO_LONG = ("exceed_context_size", "exceeds the available context size",
             "context_length_exceeded", "maximum context length")
_TOO_LONG_HINT = (" once the prompts fit: they are longer than the model's context on the "
                  "server, so start the server with a longer context (llama-server -c, "
                  "vLLM --max-model-len) or lower memory.context.budget_tokens (`shoal "
                  "fork RUN --round K --set memory.context.budget_tokens=N`)")


def too_long(error: str) -> bool:
    """Did the server refuse the request as longer than the model's context?"""
    lowered = error.lower()
    return any(words in lowered for words in _TOO_LONG)


class RoundDriver:
    """Runs rounds on a world, deciding through an executor, logging through a writer and
    checkpointing into a store (`on_checkpoint(r)` after each)."""

    def __init__(self, world: World, executor: Executor, writer: RoundWriter,
                 checkpoints: CheckpointStore | None = None, on_checkpoint=None,
                 send_prompts: bool = True):
        self.world = world
        self.send_prompts = send_prompts  # False: LLM agents' contexts are built, not sent
        self.executor = executor
        self.writer = writer
        self.checkpoints = checkpoints
        self.on_checkpoint = on_checkpoint
        # LLM agents whose shard knows their previous prompt as the world does (contexts
        # built in the shards); emptied whenever the driver measures prompts itself
        self.synced: set[int] = set()
        self.configure()
        self.warm_up()

    def configure(self) -> None:
        """(Re)build everything derived from the effective config and population: called
        at start and after an intervention changed parameters or added agents."""
        w = self.world
        cfg = w.cfg
        keep_freed_memory()  # rounds reuse their temporaries' memory (shoal.core.heap)
        self.workers = Workers(resolve_workers(cfg.executor.workers), cfg.executor.worker_rows)
        self.rng = CounterRNG(cfg.seed)
        self.rule = make_rule(cfg.beliefs.update)
        fit_history(w)  # (a rule switched mid-run may read an exposure history, or not)
        for name, plat in w.platforms.items():
            plat.reconfigure(cfg.platforms.get(name), w.posts)
        for name, engine in w.engines.items():
            with calling(engine_part(name), engine):
                engine.reconfigure(cfg.platforms.get(name))
        self.recommenders = {name: p.recommender for name, p in w.platforms.items()}
        self.scheduler = Scheduler(cfg, w.population.activity, w.population.hourly,
                                   self.workers)
        # Which feed features anyone reads: the policy's engagement weights read follows,
        # votes and trust; some belief rules read trust.
        self.social_features = reads_social_features(cfg)
        self.trust_features = self.social_features or self.rule.uses_trust
        # Anyone reading the items' authors, stances or votes (trust is looked up by
        # author; the rule may weigh items by their votes).
        self.feed_features = self.trust_features or self.rule.uses_votes
        self.context_agents = w.context_agents()
        self.providers = w.llm_providers()  # LLM agent -> provider name
        self.section_specs = section_specs(cfg)
        self.platform_enum = PlatformEnum.of(cfg)
        self.in_shards = self.contexts_in_shards()

    def contexts_in_shards(self) -> bool:
        """Whether the shards build the contexts (`executor.contexts`; 'auto': on Ray, not
        in-process). Only when prompts are sent and no platform has its own engine (an
        engine's turns and context sections stay with the driver, so the whole round's
        contexts do)."""
        mode = self.world.cfg.executor.contexts
        if mode == "auto":
            mode = "shards" if self.executor.kind == "ray" else "driver"
        return (mode == "shards" and self.send_prompts and not self.world.engines
                and len(self.context_agents) > 0)

    def warm_up(self) -> None:
        """Build once, before round 1, what every round reads and round 1 would otherwise
        pay for inside its timings: the tokenizer (memory counts tokens each round) and
        the follow graphs' CSR views (kept until the graph changes)."""
        encoding()
        for plat in self.world.platforms.values():
            plat.graph.followees()
            plat.graph.followers()

    @contextmanager
    def phase(self, rnd: Round, name: str) -> Iterator[None]:
        """Time a phase into the round's stats (phases sharing a name add up): its wall
        time, and its CPU split into serial (the driver's thread and the in-process
        shards' thread, outside agent ranges) and agent ranges (on any thread)."""
        start = time.perf_counter()
        mark = CpuMark.now((threading.get_ident(), *self.executor.thread_ids()))
        try:
            yield
        finally:
            s = rnd.stats
            s.ms[name] = s.ms.get(name, 0.0) + 1e3 * (time.perf_counter() - start)
            serial, ranges = mark.since()
            was = s.cpu_ms.get(name, (0.0, 0.0))
            s.cpu_ms[name] = (was[0] + 1e3 * serial, was[1] + 1e3 * ranges)

    def step(self) -> RoundStats:
        """Run the next round and hand it to the writer."""
        rnd = Round(self.world.round + 1, RoundStats(self.world.round + 1))
        self.cpu_start = time.thread_time()
        with self.phase(rnd, "schedule"):
            self.intervene(rnd)
            self.schedule(rnd)
        with self.phase(rnd, "observe"):
            self.observe(rnd)
        with self.phase(rnd, "context"):
            self.assemble_contexts(rnd)
        with self.phase(rnd, "decide"):
            self.decide(rnd)
        with self.phase(rnd, "apply"):
            self.apply(rnd)
        with self.phase(rnd, "update"):
            self.update(rnd)
            self.remember(rnd)
        self.log(rnd)
        return rnd.stats

    # ------------------------------------------------------------------ phases

    def intervene(self, rnd: Round) -> None:
        """Interventions due at r fire (a config change reconfigures the driver and the
        shards); round memory takes its finished compaction."""
        w = self.world
        rnd.fired = begin_round(w, rnd.number)
        if rnd.fired.config_changed:
            self.configure()
            self.executor.update(w.cfg, w.population)
        rnd.stats.n_interventions = len(rnd.fired.rows)
        fired, r = rnd.fired, rnd.number
        for name, engine in w.engines.items():
            with calling(engine_part(name), engine, r):
                engine.begin_round(w, r, lambda text, stance, rounds, key: publish_news(
                    w, r, fired, text, stance, rounds, key))

    def schedule(self, rnd: Round) -> None:
        """The active agents, and per platform the members among them who participate."""
        r, w = rnd.number, self.world
        active = rnd.active = self.scheduler.active(r, w.alive)

        def acting(code: int, members: np.ndarray, participation: float) -> np.ndarray:
            agents = self.workers.flatnonzero(len(active),
                                              lambda rows: active[rows] & members[rows])
            part = self.scheduler.participates(r, code, agents, participation)
            return agents if part.all() else agents[part]

        for name, plat in w.platforms.items():
            rnd.acting[name] = acting(plat.code, plat.members, plat.cfg.participation)
        for name, engine in w.engines.items():
            rnd.traders[name] = acting(engine.code, engine.members, engine.participation)
        rnd.stats.n_active = int(np.count_nonzero(active))

    def observe(self, rnd: Round) -> None:
        """Every acting agent's feed on each platform, with the features policies read."""
        rnd.views = observe(self.world, rnd.number, rnd.acting, self.recommenders, self.rng,
                            self.social_features, self.trust_features, self.workers,
                            self.feed_features)

    def assemble_contexts(self, rnd: Round) -> None:
        """The context of every acting agent whose context is built; LLM agents get theirs
        as prompts in their views. Then the request the shards get. With contexts built
        in the shards, the request carries each shard's `ContextBatch` instead."""
        w, r = self.world, rnd.number
        if self.in_shards:
            rnd.request = decision_request(w, r, rnd.views, self.workers)
            rnd.request.contexts = context_batches(
                w, r, rnd.views, self.context_agents, self.providers, self.executor.n_shards,
                self.previous_prompt)
            rnd.stats.n_acting = len(rnd.request.agents)
            return
        self.synced.clear()  # the world's measure moves on; the shards' copies would not
        if len(self.context_agents):
            for view in rnd.views:
                rows = np.nonzero(np.isin(view.agents, self.context_agents))[0]
                prompts: list[Prompt | None] = [None] * len(view.agents)
                shown = view.feed[rows]
                comments = top_comments(w, np.unique(shown[shown >= 0])) if len(rows) else {}
                for i in rows:
                    agent = int(view.agents[i])
                    assembled = build_context_for(w, agent, view.name, r, view.feed[i],
                                                  self.section_specs, comments)
                    rnd.contexts.append((view.name, agent, accounting_rows(assembled)))
                    provider = self.providers.get(agent)
                    if provider is not None:
                        prompts[i] = self.prompt(rnd, agent, assembled, provider)
                if self.providers and self.send_prompts:
                    view.prompts = prompts
        self.engine_turns(rnd)
        rnd.request = decision_request(w, r, rnd.views + rnd.engine_views, self.workers)
        rnd.stats.n_acting = len(rnd.request.agents)

    def engine_turns(self, rnd: Round) -> None:
        """LLM agents acting on an engine's platform (the market) get a turn there, with
        the context the engine's sections make; rule-decided agents are the engine's."""
        w, r = self.world, rnd.number
        for name, agents in rnd.traders.items():
            llm = agents[np.isin(agents, list(self.providers))] if self.providers else agents[:0]
            if not len(llm):
                continue
            prompts: list[Prompt | None] = []
            for agent in llm.tolist():
                assembled = build_context_for(w, agent, name, r, None, self.section_specs)
                rnd.contexts.append((name, agent, accounting_rows(assembled)))
                prompts.append(self.prompt(rnd, agent, assembled, self.providers[agent]))
            view = empty_view(w.engines[name].code, name, llm, len(w.topics))
            view.prompts = prompts if self.send_prompts else None
            rnd.engine_views.append(view)

    def previous_prompt(self, agent: int):
        """What `agent`'s shard must be told of its previous prompt before measuring the
        next (`...`: it already knows; the world's pieces, or None for none)."""
        if agent in self.synced:
            return ...
        self.synced.add(agent)
        return self.world.prompts.previous.get(agent)

    def prompt(self, rnd: Round, agent: int, assembled: Assembled, provider: str) -> Prompt:
        """An LLM agent's prompt for its turn, with how much of it repeats the start of its
        previous prompt (measured only for prompts that are sent: turns in the order the
        driver builds them, platforms in code order, then engines' platforms)."""
        reused = None
        if self.send_prompts:
            reused = rnd.stats.prompts.measure(self.world.prompts, agent, assembled.pieces,
                                               assembled.tokens["total"])
        return Prompt(assembled.system, assembled.observation, assembled.tokens, provider,
                      reused, assembled.meta)

    def decide(self, rnd: Round) -> None:
        """One call per shard; the round stops here, before anything applies, if no LLM
        call got an answer."""
        w = self.world
        try:
            results = self.executor.decide(rnd.request)
        except BaseException:
            self.synced.clear()  # what the shards measured is not known here
            raise
        if rnd.request.contexts is not None:
            self.shard_contexts(rnd, results)
        w.json_only.update(*(res.json_only for res in results))
        rnd.calls = [c for res in results for c in res.llm_calls]
        try:
            check_providers(rnd.calls, rnd.number)
        except ProviderDown:  # the round is dropped, but the calls were made: keep them
            for call in rnd.calls:
                call["outcome"] = STOPPED
            self.writer.submit(RoundPayload(round=rnd.number, rounds_row=None, tables={
                "llm_calls": llm_calls_table(rnd.calls)}))
            raise
        s = rnd.stats
        usage = Usage.of(rnd.calls)
        s.n_llm_calls, s.n_llm_failed = usage.calls, usage.failed
        s.n_llm_fallbacks = usage.fallbacks
        engine_rows = []
        for name, engine in w.engines.items():
            with calling(engine_part(name), engine, rnd.number):
                engine_rows.append(engine.decide(w, rnd.number, rnd.traders[name],
                                                 np.asarray(list(self.providers), np.int64)))
        rnd.actions = ActionBatch.concat([res.actions for res in results] + engine_rows,
                                         len(w.topics)).canonical(self.workers)
        crash_point("mid_round", rnd.number)

    def shard_contexts(self, rnd: Round, results: list) -> None:
        """Take what the shards built: the `context` rows in the driver's order (views in
        order, rows in view order), the LLM agents' last prompts (the world keeps them),
        the prompt and reused tokens."""
        views = rnd.request.views
        built = [(key, acc) for res in results if res.contexts is not None
                 for key, acc in zip(res.contexts.keys, res.contexts.accounting, strict=True)]
        built.sort(key=lambda x: (x[0][0], x[0][1]))
        rnd.contexts = [(views[vi].name, agent, acc) for (vi, _, agent), acc in built]
        s = rnd.stats
        for res in results:
            c = res.contexts
            if c is None:
                continue
            for agent, pieces in c.pieces.items():
                self.world.prompts.remember(agent, pieces)
            s.prompts.add(c.usage)

    def apply(self, rnd: Round) -> None:
        """Every action in canonical order, validated against the snapshot."""
        applied = apply_all(self.world, rnd.actions, rnd.views, rnd.number, self.workers)
        rnd.applied = applied
        fired_ids = np.asarray(rnd.fired.post_ids, np.int64)
        rnd.new_posts = (np.sort(np.concatenate([fired_ids, applied.created]))
                         if len(fired_ids) else applied.created)
        s = rnd.stats
        s.n_actions = len(rnd.actions)
        s.n_rejected = int(np.count_nonzero(applied.reason != Reason.OK))
        s.n_posts = len(rnd.new_posts)
        s.n_trust_events = len(applied.trust["truster"])

    def update(self, rnd: Round) -> None:
        """Trust from the round's interactions, then beliefs from what agents saw (the
        graph memory reads the round's posts meanwhile, in the background)."""
        w = self.world
        if w.knowledge is not None and w.cfg.memory.graph.ingest_activity:
            w.knowledge.submit(round_activity(w, rnd.number, rnd.new_posts))
        rnd.exposures, n_items = exposures(rnd.views, self.workers, self.feed_features)
        update_trust(w, rnd.applied)
        update_beliefs(w, self.rule, rnd.exposures, rnd.applied, rnd.number, self.rng,
                       self.workers)
        if w.engines:  # they read what the feeds showed, and the round's final beliefs
            shown = np.concatenate([v.feed.ravel() for v in rnd.views]) if rnd.views else (
                np.empty(0, np.int64))
            for name, engine in w.engines.items():
                with calling(engine_part(name), engine, rnd.number):
                    engine.end_round(w, rnd.number, shown)
        w.round = rnd.number
        rnd.stats.n_exposures = n_items

    def remember(self, rnd: Round) -> None:
        """The round's memory items (compaction starts in the background), and for agents
        whose context is built: their digest entries and their notifications."""
        w, r, applied = self.world, rnd.number, rnd.applied
        items = round_items(w, w.memory, w.cfg.memory, r, applied, rnd.fired, w.last_means)
        w.last_means = w.beliefs.position.mean(axis=0)
        w.memory.record_round(r, round_header(w.cfg, r), items)
        if not len(self.context_agents):
            return
        for view in rnd.views:  # notices older than this turn were shown in it
            for agent in view.agents[np.isin(view.agents, self.context_agents)].tolist():
                w.notifications.seen(agent, view.name, r)
        a = applied.actions
        social = np.isin(a.platform, [p.code for p in w.platforms.values()])
        ok = np.nonzero((applied.reason == Reason.OK) & social)[0]
        tracked = np.zeros(w.n_agents, dtype=bool)
        tracked[self.context_agents] = True
        rows = AppliedRows(
            round=np.full(len(ok), r), agent=a.agent[ok].astype(np.int64),
            platform=_names({c: p.name for c, p in by_code().items()})[a.platform[ok]],
            action=_names(ACTION_NAMES)[a.action[ok]],
            target_post=a.target_post[ok].astype(np.int64),
            target_agent=a.target_agent[ok].astype(np.int64),
            new_post=applied.new_post[ok].astype(np.int64))
        record_actions(w, tracked, rows, w.digest, w.notifications)

    def log(self, rnd: Round) -> None:
        """Hand round r's tables to the writer (one transaction, in order); the checkpoint
        of r is written after that commit, on the writer thread."""
        w, r = self.world, rnd.number
        if w.knowledge is not None:  # the round's activity into the graph, before the log
            w.knowledge.join()
            every = w.cfg.memory.graph.communities_every
            if (every and r % every == 0) or r == w.cfg.rounds:
                w.knowledge.rebuild_communities(r)
        # (engines' rows before the checkpoint, as at round 0: what computing them changes
        # in an engine's state is then in the checkpoint of r, and a resume goes on exactly)
        engine_tables = {}
        with self.phase(rnd, "checkpoint"):
            for name, engine in w.engines.items():
                with calling(engine_part(name), engine, r):
                    engine_tables.update(engine.tables(w, r))
            # (taken every round: it also empties the components' journals)
            cp = checkpoint(w, self.workers)
        after_commit = None
        if self.checkpoints is not None:
            policy, store, notify = w.cfg.checkpoints, self.checkpoints, self.on_checkpoint

            def after_commit() -> None:
                store.write(cp, policy.every, policy.keep_last)
                if notify is not None:
                    notify(r)

        with self.phase(rnd, "tables"):
            tables = self.tables(rnd, engine_tables)
        # (waiting for the writer below costs no CPU: the round's work ends here)
        rnd.stats.driver_cpu_ms = 1e3 * (time.thread_time() - self.cpu_start)
        with self.phase(rnd, "wait"):
            self.writer.submit(RoundPayload(
                round=r, tables=tables,
                rounds_row=lambda ms: self.rounds_row(r, rnd.stats, ms),
                after_commit=after_commit))

    # ------------------------------------------------------------------ tables

    def tables(self, rnd: Round, engine_tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
        """The round's rows, one Arrow table per trajectory table (`engine_tables`: the
        engines' own, from their `tables` hook)."""
        w, cfg, r = self.world, self.world.cfg, rnd.number
        fired, applied, penum = rnd.fired, rnd.applied, self.platform_enum
        f = fired.follow_arrays()
        tables: dict[str, Any] = {
            **posts_tables(w, rnd.new_posts, fired.counters, self.workers),
            "actions": actions_table(r, applied, cfg.output.log_idle_actions, penum,
                                     self.workers),
            "beliefs": beliefs_table(w, r, self.workers),
            "trust": trust_table(r, applied),
            "follows": pa.concat_tables([
                follows_table(r, f["platform"], f["follower"], f["followee"],
                              np.ones(len(f["op"]), np.int8), penum),
                applied_follows_table(r, applied, penum)]),
            "interventions": interventions_table(fired.rows),
            "memory": memory_table(w.memory.drain_log()),
            "context": context_table(r, rnd.contexts, cfg.memory.context.budget_tokens),
            "llm_calls": llm_calls_table([*rnd.calls, *self.memory_calls(r)]),
        }
        if fired.joined is not None:
            first = w.n_agents - fired.joined.size
            tables["agents"] = agents_table(w, np.arange(first, w.n_agents))
        if cfg.output.log_exposures:
            tables["exposures"] = exposures_table(r, rnd.views, penum, self.workers)
        tables.update(engine_tables)
        if w.knowledge is not None:
            tables.update(w.knowledge.drain_tables(r))
        if cfg.surveys:
            responses = survey_table(w, r, set(w.llm_providers()))
            if responses is not None:
                tables["survey_responses"] = responses
        return tables

    def memory_calls(self, r: int) -> list[dict]:
        """`llm_calls` rows the memory's summariser and the graph's extractor made since
        the last round."""
        log = self.world.memory.summarizer.calls
        rows = log.drain(r) if log is not None else []
        knowledge = self.world.knowledge
        return rows + (knowledge.calls(r) if knowledge is not None else [])

    def rounds_row(self, r: int, s: RoundStats, ms_log: float) -> pa.Table:
        """The round's row of the `rounds` table (`ms_log`: the commit's time)."""
        ms, p = {**s.ms, "log": ms_log}, s.prompts
        row = {
            "round": [r], "sim_time": [round_start(self.world.cfg, r)],
            "n_active": [s.n_active], "n_acting": [s.n_acting], "n_actions": [s.n_actions],
            "n_rejected": [s.n_rejected], "n_posts": [s.n_posts],
            "n_exposures": [s.n_exposures], "n_trust_events": [s.n_trust_events],
            "n_interventions": [s.n_interventions],
            **{f"ms_{k}": [ms.get(k, 0.0)] for k in (*TIMED, "log")},
            "wall_time": [datetime.now()],
            "prefix_reuse": pa.array([p.reused_tokens / p.prompt_tokens if p.prompt_tokens
                                      else None], pa.float64()),
            "driver_cpu_ms": pa.array([s.driver_cpu_ms], pa.float64()),
            "driver_cpu_ms_per_llm_turn": pa.array(
                [s.driver_cpu_ms / p.turns if p.turns else None], pa.float64()),
        }
        return pa.table(row)


def round_activity(world: World, r: int, new_posts: np.ndarray):
    """Round r's posts by agents (news excluded), grouped by author in id order: their
    text, ids and mean stance per topic, for the graph memory (a `RoundActivity`)."""
    from shoal.memory.knowledge.ingest import RoundActivity

    posts = world.posts
    ids = new_posts[posts.author[new_posts] >= 0] if len(new_posts) else new_posts
    authors = posts.author[ids].astype(np.int64)
    order = np.lexsort((ids, authors))
    ids, authors = ids[order], authors[order]
    out = RoundActivity(r, str(round_start(world.cfg, r)))
    agents, first = np.unique(authors, return_index=True)
    for agent, mine in zip(agents.tolist(), np.split(ids, first[1:]), strict=True):
        stance = posts.stance[mine]
        counted = (~np.isnan(stance)).sum(axis=0)
        mean = np.where(counted > 0, np.nansum(stance, axis=0) / np.maximum(counted, 1),
                        np.nan)
        out.agents.append(agent)
        out.usernames.append(world.population.username[agent])
        out.texts.append(" ".join(posts.text[i] or posts.text[int(posts.root[i])]
                                  for i in mine.tolist()))
        out.post_ids.append(mine.tolist())
        out.stances.append(mean.tolist())
    return out


def _names(by_code: dict) -> np.ndarray:
    """A code -> name mapping as an array to index with code arrays."""
    out = np.empty(max(by_code) + 1, dtype=object)
    for code, name in by_code.items():
        out[int(code)] = name
    return out

"""The synchronized round driver (DESIGN, "Round anatomy").

One `step()` runs one round: intervene → schedule → observe → decide (one call per shard)
→ apply in canonical order → update beliefs → log the round in one DuckDB transaction and
checkpoint it (both on the writer thread, in that order). Interventions fire before
scheduling so that agents added or removed at round r act, or not, from r on. The driver
owns the world state; shards only decide.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa

from agents.actions import ActionBatch
from agents.observation import Prompt
from agents.prompt import SectionSpec, build_context
from beliefs.rules import UpdateContext, make_rule
from memory.tokens import encoding
from sim.core.counter_rng import CounterRNG
from sim.core.errors import ProviderDown
from sim.core.faults import crash_point
from sim.core.vocabulary import ACTION_NAMES, Reason
from sim.engine.agent_context import context_inputs, top_comments
from sim.engine.agent_history import AppliedRows, record_actions
from sim.engine.apply import apply_actions
from sim.engine.executors import Executor
from sim.engine.interventions import Fired, fire_due
from sim.engine.observe import decision_request, exposures, observe
from sim.engine.recommenders import make_recommender
from sim.engine.round_log import (
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
from sim.engine.round_record import round_header, round_items
from sim.engine.schedule import Scheduler, round_start
from sim.platforms.spec import by_code
from sim.store.checkpoints import CheckpointStore
from sim.store.writer import RoundPayload, RoundWriter
from sim.world.checkpoint import checkpoint
from sim.world.world import World


@dataclass
class RoundStats:
    """Counts and step timings (milliseconds) of one round."""

    round: int
    n_active: int = 0
    n_acting: int = 0
    n_actions: int = 0
    n_rejected: int = 0
    n_posts: int = 0
    n_exposures: int = 0
    n_trust_events: int = 0
    n_interventions: int = 0
    n_llm_calls: int = 0
    n_llm_failed: int = 0  # calls without an answer (after their retries)
    n_llm_fallbacks: int = 0  # LLM turns decided by the fallback
    ms: dict[str, float] = field(default_factory=dict)


def check_providers(calls: list[dict], round_: int) -> None:
    """Stop (before anything of the round is applied) when not one LLM call of the round
    got an answer, retries included: the provider is down, unreachable or refusing us
    (a wrong key, a wrong model). The run can be resumed once it is back."""
    if calls and all(c["status"] != "ok" for c in calls):
        failed = {c["base_url"] for c in calls if c["base_url"]}
        example = next((c["error"] for c in calls if c["error"]), "")
        raise ProviderDown(
            f"round {round_}: none of {len(calls)} LLM calls got an answer "
            f"({', '.join(sorted(failed)) or 'no endpoint'}: {example}); the run stopped "
            f"after round {round_ - 1} and can be resumed with `shoal resume`")


class RoundDriver:
    """Runs rounds on a world, deciding through an executor, logging through a writer."""

    def __init__(self, world: World, executor: Executor, writer: RoundWriter,
                 checkpoints: CheckpointStore | None = None, on_checkpoint=None,
                 send_prompts: bool = True):
        self.world = world
        self.send_prompts = send_prompts  # False: LLM agents' contexts are built, not sent
        self.executor = executor
        self.writer = writer
        self.checkpoints = checkpoints
        self.on_checkpoint = on_checkpoint  # e.g. record progress in run.json
        self.rng = CounterRNG(world.cfg.seed)
        self.configure()
        self.warm_up()

    def configure(self) -> None:
        """(Re)build everything derived from the effective config and population: called
        at start and after an intervention changed parameters or added agents."""
        w = self.world
        cfg = w.cfg
        self.rng = CounterRNG(cfg.seed)
        self.rule = make_rule(cfg.beliefs.update)
        for name, plat in w.platforms.items():
            plat.reconfigure(cfg.platforms.get(name), w.posts)
        self.recommenders = {name: make_recommender(p.cfg.recommender)
                             for name, p in w.platforms.items()}
        self.scheduler = Scheduler(cfg, w.population.activity, w.population.hourly)
        # Which feed features anyone reads: the policy's engagement weights read follows,
        # votes and trust; some belief rules read trust.
        self.social_features = cfg.policy.engage_rate > 0
        self.trust_features = self.social_features or self.rule.uses_trust
        self.context_agents = w.context_agents()
        self.providers = w.llm_providers()  # LLM agent -> provider name
        self.section_specs = {name: SectionSpec(s.priority, s.max_tokens)
                              for name, s in cfg.memory.context.sections.items()}

    def warm_up(self) -> None:
        """Build once, before round 1, what every round reads and round 1 would otherwise
        pay for inside its timings: the tokenizer (memory counts tokens each round) and
        the follow graphs' CSR views (kept until the graph changes)."""
        encoding()
        for plat in self.world.platforms.values():
            plat.graph.followees()
            plat.graph.followers()

    def acting_agents(self, round_: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Step 1: the active mask and, per platform, the agents acting there."""
        active = self.scheduler.active(round_, self.world.alive)
        acting = {}
        for name, plat in self.world.platforms.items():
            agents = np.nonzero(active & plat.members)[0]
            part = self.scheduler.participates(round_, plat.code, agents, plat.cfg.participation)
            acting[name] = agents[part]
        return active, acting

    def step(self) -> RoundStats:
        """Run the next round and hand it to the writer."""
        w = self.world
        r = w.round + 1
        stats = RoundStats(round=r)
        clock = time.perf_counter
        t0 = clock()
        fired = fire_due(w, r)
        if fired.config_changed:
            self.configure()
            self.executor.update(w.cfg, w.population)
        w.memory.boundary(r)
        active, acting = self.acting_agents(r)
        t1 = clock()
        views = observe(w, r, acting, self.recommenders, self.rng, self.social_features,
                        self.trust_features)
        tc = clock()
        contexts = self.build_contexts(r, views)
        request = decision_request(w, r, views)
        t2 = clock()
        results = self.executor.decide(request)
        w.json_only.update(*(res.json_only for res in results))
        calls = [c for res in results for c in res.llm_calls]
        check_providers(calls, r)
        stats.n_llm_calls = len(calls)
        stats.n_llm_failed = sum(c["status"] != "ok" for c in calls)
        stats.n_llm_fallbacks = sum(c["call"] == 1 and bool(c["fallback_reason"])
                                    for c in calls)  # one first call per turn
        crash_point("mid_round", r)
        t3 = clock()
        actions = ActionBatch.concat([res.actions for res in results], len(w.topics)
                                     ).canonical()
        applied = apply_actions(w, actions, views, r)
        t4 = clock()
        exp = exposures(views)
        ctx = UpdateContext(round=r, posts=w.posts, trust=w.trust, history=w.history,
                            engagement=applied.engagement, rng=self.rng,
                            graph=next(iter(w.platforms.values())).graph, alive=w.alive,
                            initial_position=w.initial_position)
        self.rule.update(w.beliefs, exp, ctx)
        if w.history is not None:
            w.history.record(*exp.flat(), r)
        w.round = r
        self.remember(r, views, applied, fired)
        t5 = clock()

        new_ids = np.sort(np.concatenate([
            np.asarray(fired.post_ids, np.int64), applied.new_post[applied.new_post >= 0]]))
        stats.n_active = int(active.sum())
        stats.n_acting = len(request.agents)
        stats.n_actions = len(actions)
        stats.n_rejected = int((applied.reason != Reason.OK).sum())
        stats.n_posts = len(new_ids)
        stats.n_exposures = int(exp.valid.sum())
        stats.n_trust_events = len(applied.trust["truster"])
        stats.n_interventions = len(fired.rows)
        stats.ms = {"schedule": 1e3 * (t1 - t0), "observe": 1e3 * (tc - t1),
                    "context": 1e3 * (t2 - tc),
                    "decide": 1e3 * (t3 - t2), "apply": 1e3 * (t4 - t3),
                    "update": 1e3 * (t5 - t4)}
        after_commit = None
        cp = checkpoint(w)  # taken every round: it also empties the components' journals
        if self.checkpoints is not None:
            policy = w.cfg.checkpoints
            store, notify = self.checkpoints, self.on_checkpoint

            def after_commit() -> None:
                store.write(cp, policy.every, policy.keep_last)
                if notify is not None:
                    notify(r)

        self._log(r, views, applied, fired, new_ids, stats, clock, after_commit, contexts,
                  calls)
        return stats

    def build_contexts(self, r: int, views) -> list[tuple]:
        """Assemble the context of every acting agent whose context is built (step 4) and
        hand LLM agents theirs as prompts: returns (platform, agent, Assembled)."""
        if not len(self.context_agents):
            return []
        w = self.world
        budget = w.cfg.memory.context.budget_tokens
        out = []
        for view in views:
            rows = np.nonzero(np.isin(view.agents, self.context_agents))[0]
            prompts: list[Prompt | None] = [None] * len(view.agents)
            shown = view.feed[rows]
            comments = top_comments(w, np.unique(shown[shown >= 0])) if len(rows) else {}
            for i in rows:
                agent = int(view.agents[i])
                inputs = context_inputs(w, w.digest, agent, view.name, r, view.feed[i],
                                        comments)
                assembled = build_context(inputs, budget, self.section_specs)
                out.append((view.name, agent, assembled))
                provider = self.providers.get(agent)
                if provider is not None:
                    prompts[i] = Prompt(assembled.system, assembled.observation,
                                        assembled.tokens, provider)
            if self.providers and self.send_prompts:
                view.prompts = prompts
        return out

    def remember(self, r: int, views, applied, fired) -> None:
        """Step 8: the round's memory items (compaction starts in the background), and
        for agents whose context is built: their digest entries and their notifications."""
        w = self.world
        items = round_items(w, w.memory, w.cfg.memory, r, applied, fired, w.last_means)
        w.last_means = w.beliefs.position.mean(axis=0)
        w.memory.record_round(r, round_header(w.cfg, r), items)
        if not len(self.context_agents):
            return
        for view in views:  # notices older than this turn were shown in it
            for agent in view.agents[np.isin(view.agents, self.context_agents)].tolist():
                w.notifications.seen(agent, view.name, r)
        a = applied.actions
        ok = np.nonzero(applied.reason == Reason.OK)[0]
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

    def _log(self, r: int, views, applied, fired: Fired, new_ids: np.ndarray,
             stats: RoundStats, clock, after_commit=None, contexts=(), calls=()) -> None:
        """Step 9: hand round r's tables to the writer (one transaction, in order)."""
        w, cfg = self.world, self.world.cfg
        t = clock()
        f = fired.follow_arrays()
        penum = PlatformEnum.of(cfg)
        tables = {
            **posts_tables(w, new_ids, fired.counters),
            "actions": actions_table(r, applied, cfg.output.log_idle_actions, penum),
            "beliefs": beliefs_table(w, r),
            "trust": trust_table(r, applied),
            "follows": pa.concat_tables([
                follows_table(r, f["platform"], f["follower"], f["followee"],
                              np.ones(len(f["op"]), np.int8), penum),
                applied_follows_table(r, applied, penum)]),
            "interventions": interventions_table(fired.rows),
            "memory": memory_table(w.memory.drain_log()),
            "context": context_table(r, contexts, cfg.memory.context.budget_tokens),
            "llm_calls": llm_calls_table([*calls, *self.memory_calls(r)]),
        }
        if fired.joined is not None:
            first = w.n_agents - fired.joined.size
            tables["agents"] = agents_table(w, np.arange(first, w.n_agents))
        if cfg.output.log_exposures:
            tables["exposures"] = exposures_table(r, views, penum)
        stats.ms["tables"] = 1e3 * (clock() - t)
        self.writer.submit(RoundPayload(
            round=r, tables=tables, rounds_row=lambda ms: self._rounds_row(r, stats, ms),
            after_commit=after_commit))
        stats.ms["wait"] = 1e3 * (clock() - t) - stats.ms["tables"]

    def memory_calls(self, r: int) -> list[dict]:
        """`llm_calls` rows the memory's summariser made since the last round."""
        log = self.world.memory.summarizer.calls
        return log.drain(r) if log is not None else []

    def _rounds_row(self, r: int, s: RoundStats, ms_log: float) -> pa.Table:
        ms = {**s.ms, "log": ms_log}
        row = {
            "round": [r], "sim_time": [round_start(self.world.cfg, r)],
            "n_active": [s.n_active], "n_acting": [s.n_acting], "n_actions": [s.n_actions],
            "n_rejected": [s.n_rejected], "n_posts": [s.n_posts],
            "n_exposures": [s.n_exposures], "n_trust_events": [s.n_trust_events],
            "n_interventions": [s.n_interventions],
            **{f"ms_{k}": [ms[k]] for k in ("schedule", "observe", "context", "decide", "apply",
                                             "update", "log")},
            "wall_time": [datetime.now()],
        }
        return pa.table(row)


def _names(by_code: dict) -> np.ndarray:
    """A code -> name mapping as an array to index with code arrays."""
    out = np.empty(max(by_code) + 1, dtype=object)
    for code, name in by_code.items():
        out[int(code)] = name
    return out

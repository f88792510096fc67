"""The world state the driver owns, and how it is built from a config (round 0).

Everything that changes during a run lives here (beliefs, trust, exposure history, posts,
platforms); shards only hold what is static. That keeps checkpoints, resume and forks a
matter of saving and loading this one object.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shoal.agents.population import Population, generate_population
from shoal.beliefs.exposure import ExposureHistory
from shoal.beliefs.rules import make_rule
from shoal.beliefs.state import BeliefState
from shoal.beliefs.trust import TrustStore
from shoal.config import Config
from shoal.core.counter_rng import CounterRNG
from shoal.core.errors import InputError
from shoal.core.follow_graph import FollowGraph
from shoal.core.language import DEFAULT
from shoal.core.posts import PostStore
from shoal.core.registry import SUMMARIZERS, calling
from shoal.core.text_files import read_user_text
from shoal.memory.compaction import Summarizer
from shoal.memory.digest import CrossPlatformDigest
from shoal.memory.model_tokens import ModelTokens
from shoal.memory.notifications import Notifications
from shoal.memory.prefix_reuse import PrefixReuse
from shoal.memory.round_memory import MemorySettings, RoundMemory
from shoal.platforms.spec import platform_slots, spec
from shoal.world.follow_init import initial_edges
from shoal.world.interventions import Interventions
from shoal.world.knowledge import build_graph_memory
from shoal.world.platform import Platform
from shoal.world.platform_engine import engine_part
from shoal.world.selection import select

# Keys of the seeded numpy generators used for round-0 construction.
_POPULATION, _STANCES, _GRAPH, _MEMBERSHIP, _LLM_AGENTS = 1, 2, 3, 4, 5


@dataclass
class World:
    """All mutable simulation state. `round` is the last completed round (0 = initial)."""

    cfg: Config
    population: Population
    beliefs: BeliefState
    trust: TrustStore
    history: ExposureHistory | None
    posts: PostStore
    platforms: dict[str, Platform]
    round: int = 0
    alive: np.ndarray | None = None  # bool [N]; removed agents never act again
    interventions: Interventions | None = None  # the schedule and what has fired
    joined: np.ndarray | None = None  # int32 [N]: the round each agent joined (0: initial)
    memory: RoundMemory | None = None  # round memory and its compaction
    digest: CrossPlatformDigest | None = None  # own actions, for agents whose context is built
    notifications: Notifications | None = None  # what others did to those agents
    last_means: np.ndarray | None = None  # per-topic mean position at the end of the round
    initial_position: np.ndarray | None = None  # [N, T] positions at round 0 (or on joining)
    json_only: set[str] = field(default_factory=set)  # providers that refused tool calls
    # the output mode each `output: auto` provider was probed to (shoal.agents.llm_output)
    outputs: dict[str, str] = field(default_factory=dict)
    # how each provider's model counts, measured at the start (shoal.memory.model_tokens);
    # None: a run begun before Shoal counted in the model's tokens, whose budgets stay in
    # cl100k tokens (so it resumes and forks as it began)
    model_tokens: dict[str, ModelTokens] | None = field(default_factory=dict)
    engines: dict = field(default_factory=dict)  # non-social platforms' engines, by name
    knowledge: Any = None  # GraphMemory (memory.graph.enabled), else None
    prompts: PrefixReuse = field(default_factory=PrefixReuse)  # LLM agents' last prompts

    def __post_init__(self) -> None:
        if self.alive is None:
            self.alive = np.ones(self.population.size, dtype=bool)
        if self.joined is None:
            self.joined = np.zeros(self.population.size, dtype=np.int32)
        if self.interventions is None:
            self.interventions = Interventions(self.cfg)
        if self.memory is None:
            self.memory = make_round_memory(self.cfg)
        if self.digest is None:
            d = self.cfg.memory.digest
            self.digest = CrossPlatformDigest(d.keep, d.show, d.preview_chars)
        if self.notifications is None:
            self.notifications = Notifications(
                preview_chars=self.cfg.memory.digest.preview_chars,
                minutes_per_round=self.cfg.minutes_per_round)
        if self.last_means is None:
            self.last_means = self.beliefs.position.mean(axis=0)
        if self.initial_position is None:
            self.initial_position = self.beliefs.position.copy()

    def context_agents(self) -> np.ndarray:
        """Agents whose context is assembled during the run (and whose digest is kept)."""
        mode = self.cfg.memory.context.build_for
        if mode == "all":
            return np.arange(self.n_agents)
        if mode == "llm":
            return np.asarray(sorted(self.llm_providers()), dtype=np.int64)
        return np.empty(0, dtype=np.int64)

    def context_budget(self) -> int:
        """The context budget in Shoal's tokens (cl100k): the config's, in every
        provider's model tokens (shoal.memory.model_tokens) when they were measured."""
        budget = self.cfg.memory.context.budget_tokens
        return min((m.budget(budget) for m in (self.model_tokens or {}).values()),
                   default=budget)

    def llm_providers(self) -> dict[int, str]:
        """LLM-driven agents (ids, groups and a seeded fraction, per `llm.agents`) and the
        provider each uses (`by_group`, else the default)."""
        llm = self.cfg.llm
        if llm is None:
            return {}
        a, pop = llm.agents, self.population
        seed = self.cfg.seed
        mask = select(a, pop, lambda: CounterRNG(seed).generator(_LLM_AGENTS), "llm.agents")
        mask &= self.alive
        out = {}
        for agent in np.nonzero(mask)[0].tolist():
            g = pop.group[agent]
            group = pop.group_names[g] if g >= 0 else None
            out[agent] = a.by_group.get(group, a.provider) if group else a.provider
        return out

    @property
    def n_agents(self) -> int:
        """Number of agents."""
        return self.population.size

    @property
    def topics(self) -> list[str]:
        """Topic names, in index order."""
        return self.cfg.topic_names


def make_summarizer(cfg: Config) -> Summarizer:
    """The compaction summariser the config asks for (any registered one), writing in the
    run's language."""
    summarizer = SUMMARIZERS.create(cfg.memory.summarizer, cfg.memory, cfg.llm)
    # (set only when it differs: an English run leaves a plug-in's summariser as made)
    if getattr(summarizer, "language", DEFAULT) != cfg.population.language:
        summarizer.language = cfg.population.language
    return summarizer


def make_round_memory(cfg: Config) -> RoundMemory:
    """Empty round memory configured from `memory`."""
    m = cfg.memory
    settings = MemorySettings(recent_rounds=m.recent_rounds, merge_every=m.merge_every,
                              detail_items=m.detail_items,
                              max_pinned_posts=m.max_pinned_posts,
                              max_pinned_shifts=m.max_pinned_shifts, retry_every=m.retry_every)
    return RoundMemory(settings, make_summarizer(cfg))


def load_population(cfg: Config) -> Population:
    """Generated personas or the profile file, per the config."""
    rng = CounterRNG(cfg.seed).generator(_POPULATION)
    if cfg.population.size is not None:
        return generate_population(cfg, rng)
    from shoal.agents.profiles import load_population_file

    return load_population_file(cfg, rng)


def initial_beliefs(cfg: Config, pop: Population, rng: np.random.Generator | None = None,
                    use_file: bool = True) -> BeliefState:
    """Positions and confidences at round 0: distributions, then profile hints, then file."""
    rng = rng if rng is not None else CounterRNG(cfg.seed).generator(_STANCES)
    n, topics = pop.size, cfg.topic_names
    s = cfg.initial_stances
    position = np.column_stack([
        s.topics.get(t, s.default).sample(rng, n, -1.0, 1.0) for t in topics
    ]) if topics else np.zeros((n, 0))
    confidence = s.confidence.sample(rng, n * len(topics), 0.0, 1.0).reshape(n, len(topics))
    if s.from_profiles and pop.stance_hint is not None:
        hint = ~np.isnan(pop.stance_hint)
        position[hint] = pop.stance_hint[hint]
    if s.file and use_file:
        _apply_stance_file(s.file, topics, position, confidence)
    return BeliefState(position, confidence)


def _apply_stance_file(path: str, topics: list[str], position: np.ndarray,
                       confidence: np.ndarray) -> None:
    """Per-agent overrides from a CSV: agent_id, topic, position[, confidence]. Every
    problem names the file's line (blank lines and quoted line breaks counted)."""
    n = position.shape[0]
    seen: dict[tuple[int, str], str] = {}  # (agent, topic) -> the line that gave it
    for where, row in _stance_rows(Path(path)):
        try:
            agent = int(row["agent_id"])
        except ValueError:
            raise InputError(
                f"{where}: agent_id: must be an integer, got {row['agent_id']!r}"
            ) from None
        if not 0 <= agent < n:
            raise InputError(f"{where}: agent_id: no agent {agent} (population has {n})")
        if row["topic"] not in topics:
            raise InputError(f"{where}: topic: unknown topic {row['topic']!r}; "
                             f"topics are {topics}")
        if (agent, row["topic"]) in seen:  # (the last row would silently win)
            raise InputError(f"{where}: agent {agent} on {row['topic']} is already given "
                             f"on line {seen[agent, row['topic']]}; give each pair once")
        seen[agent, row["topic"]] = where.rsplit(":", 1)[1]  # (`file:line`)
        t = topics.index(row["topic"])
        position[agent, t] = _number(row["position"], -1.0, 1.0, where, "position")
        conf = row.get("confidence") or ""
        if conf != "":
            confidence[agent, t] = _number(conf, 0.0, 1.0, where, "confidence")


def _stance_rows(path: Path) -> list[tuple[str, dict[str, str]]]:
    """The stance file's rows (`file:line`, cells by column), header checked."""
    text = read_user_text(path, "stance file", "save the stance file as UTF-8 text (a CSV)")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    rows, start = [], 1
    try:
        for cells in reader:
            line, start = start, reader.line_num + 1
            if not any(c.strip() for c in cells):
                continue
            if header is None:
                header = [c.strip() for c in cells]
                twice = sorted({c for c in header if header.count(c) > 1})
                if twice:  # (a row's dict would keep the last column of the name)
                    raise InputError(f"{path}:{line}: column {twice[0]!r} appears twice")
                missing = {"agent_id", "topic", "position"} - set(header)
                if missing:
                    raise InputError(f"{path}:{line}: missing column(s) {sorted(missing)}; "
                                     "expected agent_id, topic, position[, confidence]")
                continue
            if len(cells) != len(header):
                raise InputError(f"{path}:{line}: {len(cells)} fields, the header has "
                                 f"{len(header)}")
            rows.append((f"{path}:{line}", {k: v.strip() for k, v in zip(header, cells,
                                                                          strict=True)}))
    except csv.Error as exc:
        raise InputError(f"{path}:{reader.line_num}: malformed CSV: {exc}") from None
    if header is None:
        raise InputError(f"{path}: the stance file is empty; expected the columns "
                         "agent_id, topic, position[, confidence]")
    return rows


def _number(raw: str, low: float, high: float, where: str, field: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise InputError(f"{where}: {field}: must be a number in [{low:g}, {high:g}], got {raw!r}")
    return value


def membership(cfg: Config, name: str, pop: Population) -> np.ndarray:
    """Which agents join platform `name` (its `members` selector)."""
    code = spec(name).code
    return select(cfg.platforms.get(name).members, pop,
                  lambda: CounterRNG(cfg.seed).generator(_MEMBERSHIP, code),
                  f"platforms.{name}.members")


PERSONA_BYTES = 400  # a generated persona's texts as Python strings, measured roughly


def memory_needed(cfg: Config, n: int) -> int:
    """Bytes of memory a world of `n` agents needs at the least: beliefs and traits, the
    feed buffers of each platform, the personas (the trajectory, logs and posts come on
    top, growing with the rounds)."""
    t = len(cfg.topics)
    per_agent = 8 * 5 * t + PERSONA_BYTES + 64
    for _, p in cfg.platforms.social_items():
        if p.enabled:
            per_agent += 2 * 8 * p.feed_size + 1
    return n * per_agent


def available_memory() -> int | None:
    """Bytes of memory this machine can give (MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(cfg: Config) -> None:
    """Refuse, before anything is built, a generated population this machine cannot hold
    (InputError naming population.size)."""
    n = cfg.population.size
    if n is None:
        return
    need, have = memory_needed(cfg, n), available_memory()
    if have is not None and need > have:
        raise InputError(f"population.size: {n:,} agents need at least {need / 1e9:,.1f} GB "
                         f"of memory; this machine has {have / 1e9:,.1f} GB available")


def build_world(cfg: Config, population: Population | None = None, knowledge: bool = True
                ) -> World:
    """Round-0 state: population, beliefs, empty posts, platforms with initial graphs, and
    graph memory unless `knowledge` is False (a run builds it once its LLM output modes are
    resolved: an LLM extractor reads the documents in them)."""
    pop = population if population is not None else load_population(cfg)
    beliefs = initial_beliefs(cfg, pop)
    src, dst = initial_edges(cfg.graph, pop, CounterRNG(cfg.seed).generator(_GRAPH))
    graph_platforms = cfg.graph.platforms or cfg.platforms.enabled()
    platforms = {}
    for name in cfg.platforms.enabled():
        pcfg = cfg.platforms.get(name)
        members = membership(cfg, name, pop)
        if name in graph_platforms:
            keep = members[src] & members[dst]
            graph = FollowGraph(pop.size, src[keep], dst[keep])
        else:
            graph = FollowGraph(pop.size)
        platforms[name] = Platform.create(name, pcfg, members, graph)
    rule = make_rule(cfg.beliefs.update)
    history = ExposureHistory(cfg.beliefs.novelty_window_rounds) if rule.uses_novelty else None
    world = World(
        cfg=cfg, population=pop, beliefs=beliefs, trust=TrustStore(cfg.beliefs.trust.initial),
        history=history, posts=PostStore(len(cfg.topics), platform_slots()), platforms=platforms,
    )
    world.engines = build_engines(world)
    world.knowledge = build_graph_memory(cfg) if knowledge else None
    return world


def fit_history(world: World) -> None:
    """Keep the exposure history exactly when the effective belief rule reads it (a `set`
    intervention may have switched rules): a rule that reads none drops it, and one that
    reads it where none was kept starts an empty one with the next round (what agents saw
    before was not recorded). A restore rebuilds the same (shoal.world.persistence)."""
    if not make_rule(world.cfg.beliefs.update).uses_novelty:
        world.history = None
    elif world.history is None:
        world.history = ExposureHistory(world.cfg.beliefs.novelty_window_rounds,
                                        since=world.round + 1)


def build_engines(world: World) -> dict:
    """The engines of the config's non-social platforms (the market), at round 0."""
    cfg, engines = world.cfg, {}
    for name in cfg.platforms.engines():
        cls = spec(name).engine_class()
        with calling(engine_part(name), cls, during=" while being built"):
            engines[name] = cls(cfg.platforms.get(name), world)
    return engines

"""The run configuration: the `Config` model and its sections.

Every field here is used by the engine (honest config); an unknown field is an error
naming its path. Sections that hold a registered part (a belief rule, a recommender, a
platform, a policy, a summariser, a chat model, an intervention kind) are validated by the
config model that part registered (shoal.config.base.part). Reading YAML files and turning
validation errors into `file:line: path: problem` lines is shoal.config.loading's job.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from shoal.config.base import Dist, Name, PartOf, Strict
from shoal.config.experiment import ExperimentConfig
from shoal.config.interventions import SetParams, known_platform, made_before_round_1
from shoal.config.llm import LLMConfig
from shoal.config.platforms import Platforms
from shoal.config.selector import Selector
from shoal.core.distributions import Uniform
from shoal.core.language import check as check_language
from shoal.core.registry import BELIEF_RULES, EXTRACTORS, INTERVENTIONS, POLICIES, SUMMARIZERS
from shoal.surveys.config import Survey, sample_note

BeliefRule = Annotated[Any, PartOf(BELIEF_RULES)]  # the type of `beliefs.update`
Policy = Annotated[Any, PartOf(POLICIES)]  # the type of `policy`
Intervention = Annotated[Any, PartOf(INTERVENTIONS)]  # the type of an `interventions` entry


# --------------------------------------------------------------------------- population

# A BCP 47 tag with templates (shoal.core.language), in its canonical case: `zh-hant` is
# kept as `zh-Hant`; `ko` (no templates) and `en_US` (not a tag) are errors.
Language = Annotated[str, AfterValidator(check_language)]


class GroupSpec(Strict):
    """A named share of a generated population (used by platforms, interventions, models),
    optionally speaking its own `language`."""

    name: str
    fraction: float = Field(gt=0, le=1)
    language: Language | None = None  # None: the population's


class PopulationConfig(Strict):
    """Who the agents are: `size` generated personas, or a profile `file`. `language`: the
    BCP 47 tag of the language agents are spoken to in (a group's own, or a profile's
    `language` field, overrides it for its agents)."""

    size: int | None = Field(default=None, gt=0, lt=2**31)  # agent ids are 32-bit
    file: str | None = None
    format: Literal["auto", "shoal", "twitter_csv", "reddit_json"] = "auto"
    groups: list[GroupSpec] = Field(default_factory=list)
    language: Language = "en"

    @model_validator(mode="after")
    def _size_or_file(self) -> Self:
        if (self.size is None) == (self.file is None):
            raise ValueError("give exactly one of 'size' (generated personas) or 'file'")
        if self.file is not None and self.groups:
            raise ValueError("'groups' apply to generated populations; with a profile file, "
                             "give each profile a 'group' field instead")
        if self.groups:
            total = sum(g.fraction for g in self.groups)
            if total > 1 + 1e-9:
                raise ValueError(f"group fractions must sum to <= 1, got {total:g}")
            names = [g.name for g in self.groups]
            if len(set(names)) != len(names):
                raise ValueError(f"group names must be unique, got {names}")
        return self


# --------------------------------------------------------------------------- topics


class TopicSpec(Strict):
    """A debated topic. `keywords` match free text on word boundaries."""

    name: Name
    label: str | None = None
    keywords: list[str] = Field(default_factory=list)

    @field_validator("label")
    @classmethod
    def _one_line(cls, v: str | None) -> str | None:
        if v is not None and ("\n" in v or "\r" in v):
            raise ValueError("must be one line (it is shown to agents inside a sentence)")
        return v

    @model_validator(mode="after")
    def _fill(self) -> Self:
        if self.label is None:
            self.label = self.name.replace("_", " ")
        if not self.keywords:
            self.keywords = [self.label]
        return self


def _topic(value: object) -> object:
    return {"name": value} if isinstance(value, str) else value


Topic = Annotated[TopicSpec, BeforeValidator(_topic)]


class InitialStances(Strict):
    """Initial positions per topic in [-1, 1] and confidence in [0, 1].

    `default` applies to topics not listed in `topics`; `file` (CSV with columns
    agent_id, topic, position[, confidence]) overrides single agents.
    """

    default: Dist = Field(default_factory=lambda: Uniform(dist="uniform"))
    topics: dict[str, Dist] = Field(default_factory=dict)
    confidence: Dist = Field(default_factory=lambda: Uniform(dist="uniform", low=0.3, high=0.7))
    file: str | None = None
    from_profiles: bool = True


# --------------------------------------------------------------------------- activity

_DIURNAL = [  # a weekday rhythm: quiet nights, a morning rise, an evening peak
    0.25, 0.15, 0.10, 0.10, 0.15, 0.30, 0.60, 0.90, 1.10, 1.20, 1.20, 1.25,
    1.30, 1.25, 1.20, 1.20, 1.25, 1.35, 1.50, 1.65, 1.70, 1.55, 1.10, 0.55,
]
_HOURLY_PRESETS = {
    "flat": [1.0] * 24,
    # Scaled to mean 1, so `activity.level` is the agent's average P(active).
    "diurnal": [round(v * 24 / sum(_DIURNAL), 4) for v in _DIURNAL],
}


class ActivityConfig(Strict):
    """Who acts when: P(active) = clip(level_i * hourly[hour], 0, 1), then min/max clamps."""

    level: Dist = Field(default_factory=lambda: Uniform(dist="uniform", low=0.2, high=0.8))
    hourly: Literal["flat", "diurnal"] | list[float] = "flat"
    min_active: int = Field(default=0, ge=0)
    max_active: int | None = Field(default=None, gt=0)

    @field_validator("hourly")
    @classmethod
    def _hourly(cls, v: Any) -> Any:
        if isinstance(v, list):
            if len(v) != 24:
                raise ValueError(f"must list 24 hourly multipliers, got {len(v)}")
            if min(v) < 0:
                raise ValueError("hourly multipliers must be >= 0")
        return v

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.max_active is not None and self.max_active < self.min_active:
            raise ValueError(
                f"max_active ({self.max_active}) must be >= min_active ({self.min_active})"
            )
        return self

    def hourly_curve(self) -> list[float]:
        """The 24 multipliers, presets expanded."""
        return list(_HOURLY_PRESETS[self.hourly]) if isinstance(self.hourly, str) else self.hourly


# --------------------------------------------------------------------------- graph


class _Graph(Strict):
    """Fields every graph kind shares."""

    mutual: bool = True  # undirected generators make follows go both ways
    platforms: list[str] | None = None

    _platforms = field_validator("platforms")(classmethod(
        lambda cls, v: v if v is None else [known_platform(p) for p in v]))


class NoGraph(_Graph):
    """Nobody follows anybody at the start."""

    kind: Literal["none"]


class RandomGraph(_Graph):
    """Directed Erdős–Rényi: each ordered pair with p = mean_degree / (N - 1)."""

    kind: Literal["random"]
    mean_degree: float = Field(default=10.0, gt=0)


class OutDegreeGraph(_Graph):
    """Each agent follows `degree` distinct accounts drawn uniformly (benchmark W's graph)."""

    kind: Literal["out_degree"]
    degree: int = Field(default=20, gt=0)


class PreferentialAttachmentGraph(_Graph):
    """Barabási–Albert: each new node attaches to `m` existing nodes."""

    kind: Literal["preferential_attachment"]
    m: int = Field(default=3, gt=0)


class SmallWorldGraph(_Graph):
    """Watts–Strogatz ring lattice with `k` neighbours, each edge rewired with `p`."""

    kind: Literal["small_world"]
    k: int = Field(default=6, gt=1)
    p: float = Field(default=0.1, ge=0, le=1)


class EdgeListGraph(_Graph):
    """A file of `follower,followee` agent-id pairs (CSV or whitespace separated)."""

    kind: Literal["edgelist"]
    file: str


# Zero-argument networkx generators that make sense as a follow graph.
NETWORKX_BUILTINS = (
    "karate_club_graph", "davis_southern_women_graph", "florentine_families_graph",
    "les_miserables_graph", "krackhardt_kite_graph", "petersen_graph", "tutte_graph",
    "frucht_graph", "heawood_graph", "dodecahedral_graph", "icosahedral_graph",
    "bull_graph", "chvatal_graph", "cubical_graph", "desargues_graph", "diamond_graph",
    "house_graph", "moebius_kantor_graph", "octahedral_graph", "pappus_graph",
    "sedgewick_maze_graph", "tetrahedral_graph", "truncated_cube_graph",
    "truncated_tetrahedron_graph",
)


class NetworkxGraph(_Graph):
    """A networkx built-in graph by name (e.g. karate_club_graph); its size must match."""

    kind: Literal["networkx"]
    name: str

    @field_validator("name")
    @classmethod
    def _builtin(cls, name: str) -> str:
        if name not in NETWORKX_BUILTINS:
            raise ValueError(f"unknown networkx graph {name!r}; one of: "
                             f"{', '.join(NETWORKX_BUILTINS)}")
        return name

    def nodes(self) -> int:
        """How many nodes the graph has."""
        import networkx as nx  # (only for this kind: the import takes a while)

        return int(getattr(nx, self.name)().number_of_nodes())


class ProfilesGraph(_Graph):
    """The following lists carried by the profile file (OASIS `following_agentid_list`)."""

    kind: Literal["profiles"]


def _graph(value: object) -> object:
    return {"kind": value} if isinstance(value, str) else value


GraphConfig = Annotated[
    Annotated[
        NoGraph | RandomGraph | OutDegreeGraph | PreferentialAttachmentGraph | SmallWorldGraph
        | EdgeListGraph | NetworkxGraph | ProfilesGraph,
        Field(discriminator="kind"),
    ],
    BeforeValidator(_graph),
]


# --------------------------------------------------------------------------- beliefs


class TrustConfig(Strict):
    """Pairwise trust in [0, 1]: its starting value and the change per interaction."""

    initial: float = Field(default=0.5, ge=0, le=1)
    like: float = 0.05
    repost: float = 0.05
    downvote: float = -0.05
    follow: float = 0.10
    unfollow: float = -0.10
    reply_agree: float = 0.02
    reply_disagree: float = -0.02


class BeliefsConfig(Strict):
    """The belief update rule and the trust and novelty bookkeeping it uses."""

    update: BeliefRule = Field(default="social_influence", validate_default=True)
    trust: TrustConfig = Field(default_factory=TrustConfig)
    novelty_window_rounds: int | None = Field(default=None, gt=0)


# --------------------------------------------------------------------------- executor, output


class ExecutorConfig(Strict):
    """Where agents decide: in-process, or on Ray actors (`shards` of them, placed on the
    cluster's nodes by `placement`: docs/cluster.md)."""

    kind: Literal["local", "ray"] = "local"
    # a count, 'auto' (one per CPU of the cluster; 1 in-process) or 'per_node' (one per
    # node of the cluster; 1 in-process)
    shards: int | Literal["auto", "per_node"] = "auto"
    address: str | None = None
    # spread: round-robin over the cluster's nodes (by their CPUs); pack: Ray's default
    # scheduler places them (it packs them onto the driver's node until that one is busy)
    placement: Literal["spread", "pack"] = "spread"
    # Where LLM agents' contexts are assembled: in the driver, in the shards (from typed
    # inputs the driver sends once a round), or 'auto': shards on Ray, the driver
    # in-process (what measured faster, docs/llm.md "Where contexts are built").
    contexts: Literal["driver", "shards", "auto"] = "auto"
    # Threads the driver splits its agent-wise phases over (feeds, the inbox fan-out,
    # belief updates: shoal.core.workers): a count or 'auto' (this machine's CPUs). Every
    # table is the same whatever the count; `worker_rows` is the fewest agents a thread
    # is given (smaller populations use fewer threads).
    workers: int | Literal["auto"] = "auto"
    worker_rows: int = Field(default=32_768, ge=1)

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, v: Any) -> Any:
        if v == "auto":
            return v
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"must be a whole number >= 1 or 'auto', got {v!r}")
        return v

    @field_validator("shards", mode="before")
    @classmethod
    def _shards(cls, v: Any) -> Any:
        if v in ("auto", "per_node"):
            return v
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"must be a whole number >= 1, 'auto' or 'per_node', got {v!r}")
        if v < 1:
            raise ValueError(f"must be >= 1, 'auto' or 'per_node', got {v}")
        return v


class OutputConfig(Strict):
    """Where the run directory goes and what is logged."""

    dir: str = "runs"
    log_exposures: bool = True
    log_idle_actions: bool = True
    live_parquet: bool = False  # also mirror each round to Parquet, readable while running


class DigestConfig(Strict):
    """The cross-platform digest of each agent's own actions."""

    keep: int = Field(default=15, gt=0)
    show: int = Field(default=5, gt=0)
    preview_chars: int = Field(default=200, gt=10)


class SectionConfig(Strict):
    """A context section's priority (lower is kept longer) and token limit; a field left
    out keeps the section's built-in value."""

    priority: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)


class ContextConfig(Strict):
    """Agent context (system text + observation) assembly and its token budget."""

    budget_tokens: int = Field(default=2500, ge=200)
    build_for: Literal["llm", "all", "none"] = "llm"
    sections: dict[Literal["rules", "persona", "beliefs", "events", "feed", "notifications",
                           "memory", "last_round", "actions", "digest", "markets",
                           "market_digest", "knowledge"],
                   SectionConfig] = Field(default_factory=dict)


class GraphMemoryConfig(Strict):
    """Graph memory (docs/graph.md): a knowledge graph from documents and the run's
    activity, and the "What you know" context section it feeds."""

    enabled: bool = False
    scenario: str | None = None  # a scenario folder whose graph/ is loaded at round 0
    documents: list[str] = Field(default_factory=list)  # read into the graph at round 0
    ingest_activity: bool = True  # each round's posts, per agent
    extractor: Annotated[Any, PartOf(EXTRACTORS)] = Field(default="offline", validate_default=True)
    retrieve: int = Field(default=5, ge=0, le=50)  # facts per context (0: no section)
    communities_every: int = Field(default=0, ge=0)  # rounds; 0: at the last round only


class MemoryConfig(Strict):
    """Round memory and its compaction (docs/memory.md)."""

    summarizer: Annotated[Any, PartOf(SUMMARIZERS)] = Field(default="extractive",
                                                            validate_default=True)
    recent_rounds: int = Field(default=6, ge=1)
    merge_every: int = Field(default=1, ge=1)  # rounds folded into the narrative at once
    detail_items: int = Field(default=8, gt=0)
    top_posts: int = Field(default=5, ge=0)
    input_tokens: int = Field(default=400, ge=50)
    summary_tokens: int = Field(default=80, ge=20)
    narrative_tokens: int = Field(default=200, ge=40)
    max_pinned_posts: int = Field(default=5, ge=0)
    max_pinned_shifts: int = Field(default=5, ge=0)
    pin_engagement: int = Field(default=10, ge=1)
    shift_threshold: float = Field(default=0.05, gt=0)
    pin_shift: float = Field(default=0.15, gt=0)
    retry_every: int = Field(default=1, ge=1)
    digest: DigestConfig = Field(default_factory=DigestConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    graph: GraphMemoryConfig = Field(default_factory=GraphMemoryConfig)


class CheckpointConfig(Strict):
    """Which round states to keep. Every round is checkpointed (its log and its state);
    older states are pruned: kept are round 0, the latest, and rounds that are multiples
    of `every` (only the last `keep_last` of those, if set). Forks need a kept state."""

    every: int = Field(default=1, ge=1)
    keep_last: int | None = Field(default=None, ge=1)


# --------------------------------------------------------------------------- top level

NAME_MAX = 100  # characters of a run's name (`name`), and of the names an experiment gives


def _names_a_field(model: Any, key: str) -> bool:
    """Whether the dotted path names a field of `model` (as far as its sections are
    models: below a plain value, the run's validation decides)."""
    for part in key.split("."):
        fields = getattr(model, "model_fields", None)
        if not isinstance(fields, dict):
            return True
        if part not in fields:
            return False
        model = fields[part].annotation
    return True


class Config(Strict):
    """A whole simulation, as read from YAML with defaults filled in."""

    # the prefix of run ids and folder names: kept well below file systems' 255 bytes
    name: Name = Field(default="shoal", max_length=NAME_MAX)
    seed: int = Field(default=0, ge=0, lt=2**63)
    rounds: int = Field(gt=0)
    minutes_per_round: int = Field(default=60, gt=0)
    start_time: datetime = datetime(2026, 1, 5, 8, 0)
    population: PopulationConfig
    topics: list[Topic] = Field(min_length=1)
    initial_stances: InitialStances = Field(default_factory=InitialStances)
    activity: ActivityConfig = Field(default_factory=ActivityConfig)
    platforms: Platforms = Field(default_factory=dict, validate_default=True)
    graph: GraphConfig = Field(default_factory=lambda: RandomGraph(kind="random"))
    beliefs: BeliefsConfig = Field(default_factory=BeliefsConfig)
    policy: Policy = Field(default="rule", validate_default=True)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    checkpoints: CheckpointConfig = Field(default_factory=CheckpointConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    llm: LLMConfig | None = None
    interventions: list[Intervention] = Field(default_factory=list)
    # Questionnaires taken at rounds, without changing the run (docs/surveys.md); left out
    # of the resolved config when there are none.
    surveys: list[Survey] = Field(default_factory=list)
    # Arms compared in pairs by `shoal experiment` (docs/experiments.md); a plain run
    # ignores it, and it is left out of the resolved config when absent.
    experiment: ExperimentConfig | None = None
    # Where a config read from a file came from (shoal.config.loading.Origin): the lines
    # of its fields, for problems found after validation. Not part of the config.
    _origin: Any = PrivateAttr(default=None)

    @field_validator("start_time")
    @classmethod
    def _local_time(cls, value: datetime) -> datetime:
        """The simulated clock has no time zone: one given is refused, not converted."""
        if value.tzinfo is not None:
            raise ValueError(f"give a date-time without a time zone, got {value.isoformat()} "
                             "(the simulated clock is local time: drop the offset or Z)")
        return value

    @model_validator(mode="after")
    def _cross(self) -> Self:
        span = (datetime.max - self.start_time).total_seconds() / 60
        if self.minutes_per_round * self.rounds > span:
            # Named by the field that is out of scale: rounds too many for hour-long rounds
            # from any start this century; else the step the file sets, else a late start
            if self.rounds * 60 > (datetime.max - datetime(2000, 1, 1)).total_seconds() / 60:
                field = "rounds"
            elif ("minutes_per_round" not in self.model_fields_set
                  and "start_time" in self.model_fields_set):
                field = "start_time"
            else:
                field = "minutes_per_round"
            raise ValueError(f"{field}: {self.rounds} rounds of "
                             f"{self.minutes_per_round:,} minutes from {self.start_time} run "
                             "past the year 9999")
        shards, size = self.executor.shards, self.population.size
        if isinstance(shards, int) and size is not None and shards > size:
            # (each shard holds agents; 100,000 shards for 200 agents ran for minutes)
            raise ValueError(f"executor.shards: {shards:,} shards for {size:,} agents; a "
                             f"shard holds at least one agent: give at most {size:,}, or "
                             "'auto'")
        names = [t.name for t in self.topics]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"topics: duplicate topic names {dupes}")
        unknown = sorted(set(self.initial_stances.topics) - set(names))
        if unknown:
            raise ValueError(
                f"initial_stances.topics: unknown topics {unknown}; topics are {names}"
            )
        problems = [p for i, iv in enumerate(self.interventions)
                    for p in iv.problems(f"interventions.{i}", self.rounds, names)]
        problems += [f"interventions.{i}.values.{key}: cannot be changed by a set "
                     "intervention (the run's executor, folder and name are made before "
                     "round 1; a fork's --set, or resume's flags, can change them)"
                     for i, iv in enumerate(self.interventions) if isinstance(iv, SetParams)
                     for key in iv.values
                     if made_before_round_1(key) and _names_a_field(type(self), key)]
        problems += self._duplicate_names()
        for i, survey in enumerate(self.surveys):
            problems += survey.problems(f"surveys.{i}", self.rounds, names,
                                        self.population.size)
        survey_names = [s.name for s in self.surveys]
        problems += [f"surveys: the name {n!r} is used twice" for n in
                     sorted({n for n in survey_names if survey_names.count(n) > 1})]
        if self.experiment is not None:
            problems += self.experiment.problems("experiment", self.rounds, names)
        for name, section in self.platforms.items():  # a platform's own cross-checks
            check = getattr(section, "problems", None)
            if check is not None:
                problems += check(f"platforms.{name}", self.rounds, names)
        if problems:
            raise ValueError(problems[0])
        extractor = self.memory.graph.extractor
        if extractor.kind == "llm" and (self.llm is None or (
                getattr(extractor, "provider", None) is not None and extractor.provider
                not in [p.name for p in self.llm.providers])):
            raise ValueError("memory.graph.extractor: 'llm' needs an llm section with the "
                             "provider it names (default: the first)")
        if self.memory.summarizer.kind == "llm" and (self.llm is None
                                                     or not self.llm.summarizer_provider):
            raise ValueError("memory.summarizer: 'llm' needs llm.summarizer_provider")
        if self.llm is not None and self.memory.context.build_for == "none":
            raise ValueError("memory.context.build_for: 'none' leaves LLM agents without a "
                             "prompt; use 'llm' (or 'all') when the config has an llm section")
        if self.population.size is not None:  # (profile files: checked when loaded)
            self._check_groups()
            self._check_sized(self.population.size)
        return self

    def _check_sized(self, n: int) -> None:
        """What a generated population's size already settles, so `shoal check` finds it
        as the run would: the initial graph's parameters, and every agent id named (by a
        selector, or as a post's author) exists. (Not with `add_agents` entries: a fork's
        or an arm's entries may name agents added before they branch; the run checks
        those against the population it branches from.)"""
        graph = self.graph
        for param in ("m", "k"):  # (preferential attachment, small world)
            value = getattr(graph, param, None)
            if value is not None and value >= n:
                raise ValueError(f"graph.{param}: must be < population size ({n}), got {value}")
        if isinstance(graph, NetworkxGraph) and (nodes := graph.nodes()) != n:
            raise ValueError(f"graph.name: {graph.name} has {nodes} nodes but "
                             f"population.size is {n}")
        if any(iv.kind == "add_agents" for iv in self.interventions):
            return
        named = [(f"{path}.ids", sel.ids) for path, sel in self.selectors()]
        for i, iv in enumerate(self.interventions):
            named += [(f"{path}.author", [post.author])
                      for path, post in getattr(iv, "posts", lambda _: [])(f"interventions.{i}")
                      if post.author is not None]
        for path, ids in named:
            bad = [a for a in ids or () if a >= n]
            if bad:
                raise ValueError(f"{path}: no agent {bad[0]} (the population has {n} agents, "
                                 f"ids 0..{n - 1})")

    def _duplicate_names(self) -> list[str]:
        """Intervention names are unique: a fork drops or moves an entry by its name."""
        first: dict[str, int] = {}
        out = []
        for i, iv in enumerate(self.interventions):
            if iv.name is None:
                continue
            if iv.name in first:
                out.append(f"interventions.{i}.name: {iv.name!r} is also the name of "
                           f"interventions.{first[iv.name]}; names must be unique (forks "
                           "drop and move entries by name)")
            else:
                first[iv.name] = i
        return out

    def _check_groups(self) -> None:
        """Every group a selector (or `llm.agents.by_group`) names is a population group."""
        groups = sorted(g.name for g in self.population.groups)
        named = [(path, sel.groups or []) for path, sel in self.selectors()]
        if self.llm is not None:
            named.append(("llm.agents.by_group", list(self.llm.agents.by_group)))
        for path, wanted in named:
            missing = sorted(set(wanted) - set(groups))
            if missing:
                where = path if path.endswith("by_group") else f"{path}.groups"
                raise ValueError(f"{where}: unknown groups {missing}; population.groups "
                                 f"defines {groups}")

    def selectors(self) -> list[tuple[str, Selector]]:
        """Every agent selector of the config, with its path."""
        out = [(f"platforms.{n}.members", p.members) for n, p in self.platforms.items()]
        if self.llm is not None:
            out.append(("llm.agents", self.llm.agents))
        for i, iv in enumerate(self.interventions):
            out += iv.selectors(f"interventions.{i}")
        out += [(f"surveys.{i}.sample.select", s.sample.select)
                for i, s in enumerate(self.surveys)]
        return out

    def notes(self) -> list[str]:
        """Warnings about a valid config, each starting with the field's path: a group
        whose share rounds to no agent, a survey sample larger than the agents it can be
        drawn from (known before the run for a generated population; otherwise the run
        says so when it starts)."""
        n = self.population.size
        if n is None:
            return []
        # (generated groups are exact shares: round(fraction * size) agents each)
        groups = {g.name: round(g.fraction * n) for g in self.population.groups}
        out = self.empty_group_notes()
        for i, survey in enumerate(self.surveys):
            size, pool = survey.sample.size, survey.pool_bound(n, groups)
            if size is not None and size > pool:
                out.append(sample_note(f"surveys.{i}", size, pool, "known before the run"))
        return out

    def empty_group_notes(self) -> list[str]:
        """A warning for each generated group whose share rounds to no agent (the
        population generator gives each round(fraction * size)): what names it selects
        nobody. None for a population read from a file."""
        n = self.population.size
        return [f"population.groups.{i}.fraction: {g.fraction:g} of {n:,} agents rounds to "
                f"0: group {g.name} has no agents, so interventions, selectors and surveys "
                "that name it reach nobody"
                for i, g in enumerate(self.population.groups)
                if n is not None and round(g.fraction * n) == 0]

    @property
    def topic_names(self) -> list[str]:
        """Topic names in config order (the topic index used everywhere)."""
        return [t.name for t in self.topics]

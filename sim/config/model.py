"""The run configuration: YAML in, a validated and resolved `Config` out.

Every field here is used by the engine (DESIGN invariant 8, "honest config"); an unknown
field is an error naming its path. `load_config` reports problems as
`file:line: path.to.field: what is wrong`, and `resolved_dict` / `config_hash` give the
form stored with a run.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sim.config.interventions import (
    MUTABLE_PREFIXES,
    BeliefIntervention,
    EventIntervention,
    Intervention,
    PostIntervention,
    PostsIntervention,
    SetParams,
)
from sim.core.distributions import Distribution, Uniform, as_distribution
from sim.core.errors import ConfigError

PLATFORMS = ("twitter", "reddit")
Dist = Annotated[Distribution, BeforeValidator(as_distribution)]
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")


def _check_name(v: str) -> str:
    if not _NAME.match(v):
        raise ValueError(f"must start with a letter and use letters, digits, _ or -, got {v!r}")
    return v


Name = Annotated[str, AfterValidator(_check_name)]  # a topic's or a run's name


class Strict(BaseModel):
    """Base for config sections: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# --------------------------------------------------------------------------- population


class GroupSpec(Strict):
    """A named share of a generated population (used by platforms, interventions, models)."""

    name: str
    fraction: float = Field(gt=0, le=1)


class PopulationConfig(Strict):
    """Who the agents are: `size` generated personas, or a profile `file`."""

    size: int | None = Field(default=None, gt=0)
    file: str | None = None
    format: Literal["auto", "shoal", "twitter_csv", "reddit_json"] = "auto"
    groups: list[GroupSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _size_or_file(self):
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

    @model_validator(mode="after")
    def _fill(self):
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
    def _hourly(cls, v):
        if isinstance(v, list):
            if len(v) != 24:
                raise ValueError(f"must list 24 hourly multipliers, got {len(v)}")
            if min(v) < 0:
                raise ValueError("hourly multipliers must be >= 0")
        return v

    @model_validator(mode="after")
    def _bounds(self):
        if self.max_active is not None and self.max_active < self.min_active:
            raise ValueError(
                f"max_active ({self.max_active}) must be >= min_active ({self.min_active})"
            )
        return self

    def hourly_curve(self) -> list[float]:
        """The 24 multipliers, presets expanded."""
        return list(_HOURLY_PRESETS[self.hourly]) if isinstance(self.hourly, str) else self.hourly


# --------------------------------------------------------------------------- platforms


class FollowingRec(Strict):
    """Chronological feed of followed accounts; `fallback` tops a short feed up."""

    kind: Literal["following"]
    fallback: Literal["none", "recent"] = "none"


class PopularityRec(Strict):
    """Reddit hot score over the posts of the last `window_rounds`; a shared top `pool_size`."""

    kind: Literal["popularity"]
    pool_size: int = Field(default=100, gt=0)
    window_rounds: int = Field(default=48, gt=0)
    sample: Literal["random", "top"] = "random"


class RandomRec(Strict):
    """Uniform sample of the posts of the last `window_rounds`."""

    kind: Literal["random"]
    window_rounds: int = Field(default=24, gt=0)


class PersonalizedRec(Strict):
    """Ranks recent posts and the in-network inbox by stance and interest similarity."""

    kind: Literal["personalized"]
    pool_size: int = Field(default=200, gt=0)
    window_rounds: int = Field(default=24, gt=0)
    stance_weight: float = Field(default=1.0, ge=0)
    interest_weight: float = Field(default=0.5, ge=0)
    recency_weight: float = Field(default=0.5, ge=0)
    popularity_weight: float = Field(default=0.3, ge=0)
    in_network_weight: float = Field(default=0.5, ge=0)
    recency_halflife_rounds: float = Field(default=6.0, gt=0)
    explore: float = Field(default=0.1, ge=0)


class AlgorithmicBiasRec(Strict):
    """Sîrbu et al. 2019's bias as a feed: k of the newest `pool_size` posts of the last
    `window_rounds`, drawn without replacement with probability ∝ max(d, min_distance)^−γ,
    d the mean |reader position − post stance| over the topics the post addresses (1 for
    a post that takes no side). γ = 0 is a uniform random feed."""

    kind: Literal["algorithmic_bias"]
    gamma: float = Field(default=1.0, ge=0, le=20)
    min_distance: float = Field(default=2e-5, ge=1e-6, le=1)
    pool_size: int = Field(default=200, gt=0)
    window_rounds: int = Field(default=24, gt=0)


def _recommender(value: object) -> object:
    return {"kind": value} if isinstance(value, str) else value


Recommender = Annotated[
    Annotated[
        FollowingRec | PopularityRec | RandomRec | PersonalizedRec | AlgorithmicBiasRec,
        Field(discriminator="kind")
    ],
    BeforeValidator(_recommender),
]


class Membership(Strict):
    """Which agents join a platform: a seeded `fraction`, named `groups`, or explicit `ids`."""

    fraction: float = Field(default=1.0, gt=0, le=1)
    groups: list[str] | None = None
    ids: list[int] | None = None


class PlatformConfig(Strict):
    """One platform: members, feed size, recommender, per-round participation."""

    enabled: bool = True
    members: Membership = Field(default_factory=Membership)
    participation: float = Field(default=1.0, ge=0, le=1)
    feed_size: int = Field(default=10, gt=0, le=200)
    recommender: Recommender = Field(default_factory=lambda: FollowingRec(kind="following"))
    max_actions_per_round: int = Field(default=1, ge=1, le=10)


def _default_reddit() -> PlatformConfig:
    return PlatformConfig(recommender=PopularityRec(kind="popularity"))


class PlatformsConfig(Strict):
    """The Twitter-like and Reddit-like platforms."""

    twitter: PlatformConfig = Field(default_factory=PlatformConfig)
    reddit: PlatformConfig = Field(default_factory=_default_reddit)

    @model_validator(mode="before")
    @classmethod
    def _reddit_default_recommender(cls, data):
        # Reddit's default feed is the hot list, whether or not `reddit:` is written out.
        reddit = data.get("reddit") if isinstance(data, dict) else None
        if isinstance(reddit, dict) and "recommender" not in reddit:
            data = {**data, "reddit": {**reddit, "recommender": "popularity"}}
        return data

    @model_validator(mode="after")
    def _one(self):
        if not (self.twitter.enabled or self.reddit.enabled):
            raise ValueError("at least one platform must be enabled")
        return self

    def enabled(self) -> list[str]:
        """Names of enabled platforms, in canonical order."""
        return [p for p in PLATFORMS if getattr(self, p).enabled]


# --------------------------------------------------------------------------- graph


class _Graph(Strict):
    """Fields every graph kind shares."""

    mutual: bool = True  # undirected generators make follows go both ways
    platforms: list[Literal["twitter", "reddit"]] | None = None


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


class NetworkxGraph(_Graph):
    """A networkx built-in graph by name (e.g. karate_club_graph); its size must match."""

    kind: Literal["networkx"]
    name: str


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


class SocialInfluence(Strict):
    """MiroShark's social-influence nudge, with its defects fixed (docs/beliefs.md)."""

    rule: Literal["social_influence"]
    rate: float = Field(default=0.08, gt=0)
    novelty_new: float = Field(default=1.5, ge=0)
    novelty_seen: float = Field(default=0.5, ge=0)
    social_base: float = Field(default=0.3, ge=0)
    social_per_like: float = Field(default=0.07, ge=0)
    resistance_base: float = Field(default=0.3, gt=0)
    resistance_confidence: float = Field(default=0.7, ge=0)
    confidence_step: float = Field(default=0.03, ge=0)
    confidence_cap: float = Field(default=0.15, ge=0)
    confidence_floor: float = Field(default=0.1, ge=0, le=1)


class BoundedConfidence(Strict):
    """Deffuant-style bounded confidence driven by exposures, feed order oldest first."""

    rule: Literal["bounded_confidence"]
    epsilon: float = Field(default=0.3, gt=0, le=2)
    mu: float = Field(default=0.2, gt=0, le=1)


# The opinion-dynamics rules (docs/models.md). Thresholds are on Shoal's [-1, 1] scale: a
# threshold ε' stated on [0, 1] in the literature is ε = 2ε' here.
BeliefMode = Literal["exposures", "pairs", "neighbours", "complete"]
Epsilon = Annotated[float, Field(gt=0, le=2)]


class _Dynamics(Strict):
    """What every opinion-dynamics rule shares: who an agent is influenced by each round
    (`mode`), and whether exposures to posts it had already seen count (`skip_seen`)."""

    mode: BeliefMode = "exposures"
    skip_seen: bool = False

    @model_validator(mode="after")
    def _skip_seen(self):
        if self.skip_seen and self.mode != "exposures":
            raise ValueError("skip_seen applies to mode 'exposures' only")
        return self


class _Averaging(_Dynamics):
    """Weighted-average rules: weight of oneself and of each influence."""

    self_weight: float | None = Field(default=None, ge=0, le=1)
    weights: Literal["uniform", "trust"] = "uniform"

    @model_validator(mode="after")
    def _trust_needs_pairs(self):
        if self.weights == "trust" and self.mode == "complete":
            raise ValueError("weights 'trust' needs mode exposures, pairs or neighbours "
                             "(mode 'complete' weights everyone equally)")
        return self


class Deffuant(_Dynamics):
    """Deffuant–Weisbuch bounded confidence: |x_j − x_i| < ε moves x_i by μ(x_j − x_i)."""

    rule: Literal["deffuant"]
    epsilon: Epsilon = 0.4
    mu: float = Field(default=0.5, gt=0, le=1)


class HegselmannKrause(_Dynamics):
    """Hegselmann–Krause: x_i becomes the mean of itself and all influences within ε."""

    rule: Literal["hegselmann_krause"]
    epsilon: Epsilon = 0.4


class DeGroot(_Averaging):
    """DeGroot: x_i becomes a weighted mean of itself and its influences."""

    rule: Literal["degroot"]


class FriedkinJohnsen(_Averaging):
    """Friedkin–Johnsen: x ← Λ·(DeGroot step) + (I − Λ)·x(0); λ_i is the susceptibility
    (1 − λ_i the stubbornness), or 1 − confidence per agent and topic."""

    rule: Literal["friedkin_johnsen"]
    susceptibility: Annotated[float, Field(ge=0, le=1)] | Literal["confidence"] = 0.8


class Voter(_Dynamics):
    """Voter model: an agent copies the position of a random influence."""

    rule: Literal["voter"]
    rate: float = Field(default=1.0, gt=0, le=1)


class AlgorithmicBias(_Dynamics):
    """Sîrbu et al. 2019: the partner is drawn ∝ max(|x_i − x_j|, min_distance)^−γ, then a
    Deffuant update with ε and μ."""

    rule: Literal["algorithmic_bias"]
    epsilon: Epsilon = 0.4
    mu: float = Field(default=0.5, gt=0, le=1)
    gamma: float = Field(default=1.0, ge=0, le=20)
    min_distance: float = Field(default=2e-5, ge=1e-6, le=1)


def _rule(value: object) -> object:
    return {"rule": value} if isinstance(value, str) else value


BeliefRule = Annotated[
    Annotated[SocialInfluence | BoundedConfidence | Deffuant | HegselmannKrause | DeGroot
              | FriedkinJohnsen | Voter | AlgorithmicBias, Field(discriminator="rule")],
    BeforeValidator(_rule),
]


class BeliefsConfig(Strict):
    """The belief update rule and the trust and novelty bookkeeping it uses."""

    update: BeliefRule = Field(default_factory=lambda: SocialInfluence(rule="social_influence"))
    trust: TrustConfig = Field(default_factory=TrustConfig)
    novelty_window_rounds: int | None = Field(default=None, gt=0)


# --------------------------------------------------------------------------- policy


class RulePolicyConfig(Strict):
    """Parameters of the rule-based policy (formulas in docs/rule_policy.md)."""

    post_rate: float = Field(default=0.15, ge=0, le=1)
    post_confidence_boost: float = Field(default=1.0, ge=0)
    engage_rate: float = Field(default=0.6, ge=0, le=1)
    agreement_exponent: float = Field(default=2.0, ge=0)
    like_weight: float = Field(default=1.0, ge=0)
    repost_weight: float = Field(default=0.35, ge=0)
    quote_weight: float = Field(default=0.15, ge=0)
    reply_weight: float = Field(default=0.3, ge=0)
    downvote_weight: float = Field(default=0.6, ge=0)
    follow_weight: float = Field(default=0.2, ge=0)
    unfollow_weight: float = Field(default=0.1, ge=0)
    social_proof: float = Field(default=0.3, ge=0)
    expression_noise: float = Field(default=0.05, ge=0)
    second_topic_prob: float = Field(default=0.2, ge=0, le=1)


# --------------------------------------------------------------------------- executor, output


class ExecutorConfig(Strict):
    """Where agents decide: in-process, or on Ray actors (`shards` of them)."""

    kind: Literal["local", "ray"] = "local"
    shards: int | Literal["auto"] = "auto"
    address: str | None = None

    @field_validator("shards")
    @classmethod
    def _shards(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError(f"must be >= 1 or 'auto', got {v}")
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
    """A context section's priority (lower is kept longer) and token limit."""

    priority: int = Field(ge=0)
    max_tokens: int = Field(gt=0)


class ContextConfig(Strict):
    """Agent context (system text + observation) assembly and its token budget."""

    budget_tokens: int = Field(default=2500, ge=200)
    build_for: Literal["llm", "all", "none"] = "llm"
    sections: dict[Literal["rules", "persona", "beliefs", "events", "feed", "notifications",
                           "memory", "digest"], SectionConfig] = Field(default_factory=dict)


class MemoryConfig(Strict):
    """Round memory and its compaction (docs/memory.md)."""

    summarizer: Literal["extractive", "llm"] = "extractive"
    recent_rounds: int = Field(default=6, ge=1)
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


class LoopbackConfig(Strict):
    """Latency and injected faults of the loopback server started for a provider whose
    `base_urls` is `[loopback]` (rates are per request; docs/llm.md)."""

    latency_ms: float = Field(default=0.0, ge=0)
    error_rate: float = Field(default=0.0, ge=0, le=1)
    timeout_rate: float = Field(default=0.0, ge=0, le=1)
    timeout_sleep_s: float = Field(default=30.0, gt=0)
    malformed_rate: float = Field(default=0.0, ge=0, le=1)
    rate_limit_rate: float = Field(default=0.0, ge=0, le=1)
    retry_after_s: float = Field(default=1.0, ge=0)
    empty_rate: float = Field(default=0.0, ge=0, le=1)
    burst_every_s: float = Field(default=0.0, ge=0)
    burst_length_s: float = Field(default=0.0, ge=0)
    reject_tools: bool = False  # 400 to requests with tools, like a model without them


class ProviderConfig(Strict):
    """An OpenAI-compatible chat-completions endpoint (vLLM, Ollama, llama.cpp, OpenAI,
    DeepSeek, OpenRouter, ...). `api_key_env` is the *name* of the environment variable
    holding the key; the key itself never appears in a config, a log or a run directory.
    `base_urls: [loopback]` starts Shoal's own loopback server for the run."""

    name: str = "default"
    base_urls: list[str] = Field(min_length=1)
    model: str
    api_key_env: str | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=10)
    concurrency: int = Field(default=64, ge=1)
    tools: Literal["native", "json"] = "native"
    temperature: float = Field(default=0.7, ge=0, le=2)
    max_tokens: int = Field(default=400, gt=0)
    price_prompt_per_mtok: float = Field(default=0.0, ge=0)
    price_completion_per_mtok: float = Field(default=0.0, ge=0)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    loopback: LoopbackConfig = Field(default_factory=LoopbackConfig)

    @field_validator("base_urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        for url in v:
            if url != "loopback" and not re.match(r"^https?://", url):
                raise ValueError(f"must be http(s) URLs or 'loopback', got {url!r}")
        return [u.rstrip("/") for u in v]

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v):
            raise ValueError("must be the NAME of an environment variable (e.g. "
                             "OPENAI_API_KEY), not the key itself")
        return v


class LLMAgentsConfig(Strict):
    """Which agents are LLM-driven (the rest stay rule-based): `ids`, `groups`, and/or a
    seeded `fraction` of those; `provider` by default, `by_group` a provider per group."""

    fraction: float = Field(default=1.0, gt=0, le=1)
    groups: list[str] | None = None
    ids: list[int] | None = None
    provider: str = "default"
    by_group: dict[str, str] = Field(default_factory=dict)


class LLMConfig(Strict):
    """LLM agents: providers, who uses them, and what happens when a call fails."""

    providers: list[ProviderConfig] = Field(min_length=1)
    agents: LLMAgentsConfig = Field(default_factory=LLMAgentsConfig)
    fallback: Literal["rule", "nothing"] = "rule"
    round_deadline_s: float = Field(default=120.0, gt=0)
    summarizer_provider: str | None = None

    @model_validator(mode="after")
    def _names(self):
        names = [p.name for p in self.providers]
        if len(set(names)) != len(names):
            raise ValueError(f"provider names must be unique, got {names}")
        wanted = {self.agents.provider, *self.agents.by_group.values()}
        if self.summarizer_provider:
            wanted.add(self.summarizer_provider)
        missing = sorted(wanted - set(names))
        if missing:
            raise ValueError(f"unknown providers {missing}; providers are {names}")
        return self

    def provider(self, name: str) -> ProviderConfig:
        """The provider named `name`."""
        return next(p for p in self.providers if p.name == name)


class CheckpointConfig(Strict):
    """Which round states to keep. Every round is checkpointed (its log and its state);
    older states are pruned: kept are round 0, the latest, and rounds that are multiples
    of `every` (only the last `keep_last` of those, if set). Forks need a kept state."""

    every: int = Field(default=1, ge=1)
    keep_last: int | None = Field(default=None, ge=1)


# --------------------------------------------------------------------------- top level


class Config(Strict):
    """A whole simulation, as read from YAML with defaults filled in."""

    name: Name = "shoal"
    seed: int = Field(default=0, ge=0, lt=2**63)
    rounds: int = Field(gt=0)
    minutes_per_round: int = Field(default=60, gt=0)
    start_time: datetime = datetime(2026, 1, 5, 8, 0)
    population: PopulationConfig
    topics: list[Topic] = Field(min_length=1)
    initial_stances: InitialStances = Field(default_factory=InitialStances)
    activity: ActivityConfig = Field(default_factory=ActivityConfig)
    platforms: PlatformsConfig = Field(default_factory=PlatformsConfig)
    graph: GraphConfig = Field(default_factory=lambda: RandomGraph(kind="random"))
    beliefs: BeliefsConfig = Field(default_factory=BeliefsConfig)
    policy: RulePolicyConfig = Field(default_factory=RulePolicyConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    checkpoints: CheckpointConfig = Field(default_factory=CheckpointConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    llm: LLMConfig | None = None
    interventions: list[Intervention] = Field(default_factory=list)

    @model_validator(mode="after")
    def _cross(self):
        names = [t.name for t in self.topics]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"topics: duplicate topic names {dupes}")
        unknown = sorted(set(self.initial_stances.topics) - set(names))
        if unknown:
            raise ValueError(
                f"initial_stances.topics: unknown topics {unknown}; topics are {names}"
            )
        self._check_interventions(names)
        if self.memory.summarizer == "llm" and (self.llm is None
                                                or not self.llm.summarizer_provider):
            raise ValueError("memory.summarizer: 'llm' needs llm.summarizer_provider")
        if self.llm is not None and self.memory.context.build_for == "none":
            raise ValueError("memory.context.build_for: 'none' leaves LLM agents without a "
                             "prompt; use 'llm' (or 'all') when the config has an llm section")
        if self.llm is not None and self.population.size:  # (profile files: checked later)
            for group in [*(self.llm.agents.groups or []), *self.llm.agents.by_group]:
                if group not in {g.name for g in self.population.groups}:
                    raise ValueError(f"llm.agents: unknown group {group!r}; population.groups "
                                     f"defines {sorted(g.name for g in self.population.groups)}")
        groups = {g.name for g in self.population.groups}
        for p in PLATFORMS:
            wanted = getattr(self.platforms, p).members.groups or []
            missing = sorted(set(wanted) - groups) if self.population.size else []
            if missing:
                raise ValueError(
                    f"platforms.{p}.members.groups: unknown groups {missing}; "
                    f"population.groups defines {sorted(groups)}"
                )
        return self

    def _check_interventions(self, topics: list[str]) -> None:
        """Cross-field checks of the intervention schedule (ids and profile groups are
        checked against the population when the world is built)."""
        groups = {g.name for g in self.population.groups}
        for i, iv in enumerate(self.interventions):
            where = f"interventions.{i}"
            if iv.round > self.rounds:
                raise ValueError(f"{where}.round: {iv.round} is after the last round "
                                 f"({self.rounds})")
            stances = []
            if isinstance(iv, PostIntervention | EventIntervention):
                stances = [(f"{where}.stance", iv.stance)]
            elif isinstance(iv, PostsIntervention):
                stances = [(f"{where}.items.{j}.stance", p.stance)
                           for j, p in enumerate(iv.items)]
            for path, stance in stances:
                unknown = sorted(set(stance) - set(topics))
                if unknown:
                    raise ValueError(f"{path}: unknown topics {unknown}; topics are {topics}")
            if isinstance(iv, BeliefIntervention) and iv.topic not in topics:
                raise ValueError(f"{where}.topic: unknown topic {iv.topic!r}; "
                                 f"topics are {topics}")
            target = getattr(iv, "target", None)
            if target is not None and target.groups and self.population.size is not None:
                missing = sorted(set(target.groups) - groups)
                if missing:
                    raise ValueError(f"{where}.target.groups: unknown groups {missing}; "
                                     f"population.groups defines {sorted(groups)}")
            if isinstance(iv, SetParams):
                for key in iv.values:
                    if not key.startswith(MUTABLE_PREFIXES) or key.startswith("interventions"):
                        raise ValueError(f"{where}.values.{key}: cannot be changed mid-run "
                                         "(it only shaped round 0)")

    @property
    def topic_names(self) -> list[str]:
        """Topic names in config order (the topic index used everywhere)."""
        return [t.name for t in self.topics]


# --------------------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys instead of silently keeping the last."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    seen: set[object] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at `loc`, or of the deepest ancestor that exists."""
    node, line = root, (root.start_mark.line + 1 if root is not None else None)
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if getattr(k, "value", None) == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            nxt = node.value[part] if part < len(node.value) else None
        else:
            nxt = None
        if nxt is None:
            break
        node, line = nxt, nxt.start_mark.line + 1
    return line


def _field_path(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """The user's field path for a pydantic error location.

    Pydantic puts union tags (`uniform`, `popularity`, ...) and validator names into `loc`;
    walking the input data tells them apart from real keys.
    """
    path: list[Any] = []
    for part in loc:
        in_list = isinstance(data, list) and isinstance(part, int) and part < len(data)
        if (isinstance(data, dict) and part in data) or in_list:
            path.append(part)
            data = data[part]
        elif isinstance(part, str) and (
            part.startswith("function-")
            or (isinstance(data, dict) and part in (data.get("kind"), data.get("rule"),
                                                    data.get("dist")))
            or isinstance(data, str | int | float)
        ):
            continue
        else:
            path.append(part)
            data = None
    return tuple(path)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (unions and Annotated unwrapped)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()) or ():
        found += _models_in(arg)
    origin = getattr(annotation, "__origin__", None)
    if origin is not None and origin is not annotation and not found:
        found += _models_in(origin)
    return found


def _pick(models: list[type[BaseModel]], data: Any) -> type[BaseModel] | None:
    """Of a union's models, the one whose tag (kind/rule/dist) matches the input."""
    if len(models) == 1:
        return models[0]
    if isinstance(data, dict):
        for model in models:
            for tag in ("kind", "rule", "dist"):
                field = model.model_fields.get(tag)
                if field is not None and data.get(tag) in getattr(field.annotation, "__args__", ()):
                    return model
    return None


def _allowed_fields(path: tuple[Any, ...], data: Any) -> list[str]:
    """Field names valid in the mapping at `path` (for 'did you mean' hints); best effort."""
    model: type[BaseModel] | None = Config
    for part in path:
        if model is None:
            return []
        field = model.model_fields.get(str(part))
        data = data.get(part) if isinstance(data, dict) else None
        if field is None:
            return []
        model = _pick(_models_in(field.annotation), data)
    return list(model.model_fields) if model is not None else []


def _describe(err: dict[str, Any], path: tuple[Any, ...], data: Any) -> str:
    """Turn one pydantic error into 'must be > 0, got -3' style text."""
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    ops = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
           "less_than_equal": "<="}
    if kind in ops:
        bound = next(iter(ctx.values()))
        return f"must be {ops[kind]} {bound}, got {got!r}"
    if kind == "extra_forbidden":
        allowed = _allowed_fields(path[:-1], data)
        close = difflib.get_close_matches(str(path[-1]), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown field{hint}" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return "required field is missing"
    if kind in ("literal_error", "enum"):
        return f"must be one of {ctx.get('expected')}, got {got!r}"
    if kind == "union_tag_invalid":
        return f"unknown kind {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    if kind == "union_tag_not_found":
        return f"needs a {ctx.get('discriminator')} field"
    type_names = {"int_type": "an integer", "int_parsing": "an integer",
                  "int_from_float": "an integer", "float_type": "a number",
                  "float_parsing": "a number", "bool_type": "true or false",
                  "bool_parsing": "true or false", "string_type": "a string",
                  "list_type": "a list", "dict_type": "a mapping",
                  "model_type": "a mapping", "model_attributes_type": "a mapping",
                  "datetime_type": "a date-time", "datetime_parsing": "a date-time",
                  "datetime_from_date_parsing": "a date-time"}
    if kind in type_names:
        return f"must be {type_names[kind]}, got {got!r}"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    msg = err["msg"]
    return msg.removeprefix("Value error, ")


def validation_problems(
    exc: ValidationError, data: Any, root: yaml.Node | None = None, source: str | None = None
) -> list[str]:
    """Readable 'file:line: path: problem' lines for a pydantic ValidationError."""
    problems = []
    for err in exc.errors():
        path = _field_path(err["loc"], data)
        dotted = ".".join(str(p) for p in path)
        line = _line_of(root, path) if root is not None else None
        where = f"{source}:{line}: " if source and line else (f"{source}: " if source else "")
        # Whole-config checks put the field path in their message themselves.
        text = f"{where}{dotted + ': ' if dotted else ''}{_describe(err, path, data)}"
        if text not in problems:
            problems.append(text)
    return problems


def parse_config(data: Any, root: yaml.Node | None = None, source: str | None = None) -> Config:
    """Validate a mapping into a Config, raising ConfigError with readable problems."""
    if not isinstance(data, dict):
        where = f"{source}: " if source else ""
        raise ConfigError([f"{where}the config must be a YAML mapping, got {type(data).__name__}"])
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, data, root, source)) from None


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Read, parse and validate a YAML config file; relative paths resolve against its folder.

    `overrides` are `a.b=value` strings applied to the YAML before validation.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"{path}: config file not found"])
    text = path.read_text(encoding="utf-8")
    try:
        root = yaml.compose(text, Loader=_UniqueKeyLoader)
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError([f"{path}{line}: malformed YAML: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: malformed YAML: {exc}"]) from None
    if overrides:
        if not isinstance(data, dict):
            raise ConfigError([f"{path}: the config must be a YAML mapping"])
        data = apply_overrides(data, overrides)
    cfg = parse_config(data, root, str(path))
    return resolve_paths(cfg, path.parent)


def resolve_paths(cfg: Config, base: Path) -> Config:
    """Make the file fields absolute (relative to the config's folder) and check they exist."""
    problems = []
    for owner, field, dotted in (
        (cfg.population, "file", "population.file"),
        (cfg.initial_stances, "file", "initial_stances.file"),
        (cfg.graph, "file", "graph.file"),
    ):
        value = getattr(owner, field, None)
        if value is None:
            continue
        resolved = Path(value) if Path(value).is_absolute() else (base / value)
        if not resolved.is_file():
            problems.append(f"{dotted}: file not found: {value} (looked at {resolved})")
        else:
            setattr(owner, field, str(resolved.resolve()))
    if problems:
        raise ConfigError(problems)
    return cfg


def resolved_dict(cfg: Config) -> dict[str, Any]:
    """The config with every default filled in, as plain JSON-able data."""
    return cfg.model_dump(mode="json")


def config_hash(cfg: Config) -> str:
    """A stable sha256 of the resolved config (canonical JSON)."""
    blob = json.dumps(resolved_dict(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `a.b.c=value` overrides (value parsed as YAML) to a raw config mapping. A
    numeric part indexes an existing list (`llm.providers.0.model=gpt-4o-mini`)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError([f"--set {item!r}: expected key=value"])
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        cur: Any = data
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(cur, list):
                if not part.isdigit() or int(part) >= len(cur):
                    raise ConfigError([f"--set {item!r}: {'.'.join(parts[:i]) or key} is a "
                                       f"list of {len(cur)}; index it with 0..{len(cur) - 1}"])
                part = int(part)
                if last:
                    cur[part] = yaml.safe_load(raw)
                elif not isinstance(cur[part], dict | list):
                    cur[part] = {}
            elif last:
                cur[part] = yaml.safe_load(raw)
            elif not isinstance(cur.get(part), dict | list):
                cur[part] = {}
            if not last:
                cur = cur[part]
    return data

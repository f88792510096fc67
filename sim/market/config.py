"""The market platform's config section, `platforms.market` (docs/markets.md).

    platforms:
      market:
        members: {fraction: 0.5}      # who trades (any agent selector)
        budget: 100                   # each trader's starting cash
        markets:
          - id: bill
            question: Will the bill pass?
            topic: policy             # the topic whose positions imply beliefs about it
            maker: {kind: lmsr, b: 200}
            resolution: {rule: {topic: policy, metric: mean_position, op: ">", value: 0}}
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from shoal.config.base import Name, Strict, part
from shoal.config.selector import Selector
from shoal.core.registry import MARKET_MAKERS


class Outcome(Strict):
    """An outcome, and the position on the market's topic that stands for it (rule traders
    favour the outcome nearest their own position)."""

    name: Name
    stance: float | None = Field(default=None, ge=-1, le=1)


def _yes_no_name(value):
    """YAML 1.1 reads a bare yes/no as true/false: as an outcome's name it means "yes"/"no"."""
    return {True: "yes", False: "no"}[value] if isinstance(value, bool) else value


class ResolutionRule(Strict):
    """A resolution read from the run: `metric` of `topic` at the resolution round, compared
    with `value`; true resolves to `if_true` (default: the first outcome), false to
    `if_false` (default: the second)."""

    topic: str
    metric: Literal["mean_position", "share_for"] = "mean_position"
    op: Literal[">", ">=", "<", "<="] = ">"
    value: float = 0.0
    if_true: str | None = None
    if_false: str | None = None

    _names = field_validator("if_true", "if_false", mode="before")(
        classmethod(lambda cls, v: _yes_no_name(v)))


class Resolution(Strict):
    """When and how a market resolves: a fixed `outcome`, or a `rule` over the run's data,
    at `round` (default: the market's closing round)."""

    round: int | None = Field(default=None, ge=1)
    outcome: str | None = None
    rule: ResolutionRule | None = None

    _name = field_validator("outcome", mode="before")(classmethod(lambda cls, v: _yes_no_name(v)))

    @model_validator(mode="after")
    def _one(self):
        if (self.outcome is None) == (self.rule is None):
            raise ValueError("give exactly one of `outcome` and `rule`")
        return self


class MarketConfig(Strict):
    """One market: a question with outcomes, its maker, when it trades, how it resolves."""

    id: Name
    question: str = Field(min_length=1)
    topic: str | None = None  # what rule traders read; None: only LLM traders trade it
    outcomes: list[Name | Outcome] = Field(default_factory=lambda: ["yes", "no"], min_length=2)
    maker: part(MARKET_MAKERS) = Field(default="lmsr", validate_default=True)
    initial_prices: list[float] | None = None
    opens: int = Field(default=1, ge=1)
    closes: int | None = Field(default=None, ge=1)  # None: the last round
    resolution: Resolution | None = None

    @field_validator("outcomes", mode="before")
    @classmethod
    def _yes_no(cls, v):
        # YAML 1.1 reads a bare yes/no as true/false: they mean the outcomes "yes"/"no".
        return [_yes_no_name(o) for o in v] if isinstance(v, list) else v

    @field_validator("outcomes")
    @classmethod
    def _unique(cls, v):
        names = [o if isinstance(o, str) else o.name for o in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate outcomes {dupes}")
        return v

    @field_validator("initial_prices")
    @classmethod
    def _prices(cls, v):
        if v is not None and (any(p <= 0 or p >= 1 for p in v) or abs(sum(v) - 1) > 1e-6):
            raise ValueError(f"must be in (0, 1) and sum to 1, got {v}")
        return v

    def outcome_names(self) -> list[str]:
        """Outcome names, in order."""
        return [o if isinstance(o, str) else o.name for o in self.outcomes]

    def anchors(self) -> list[float]:
        """The position each outcome stands for: as given, else spread evenly from +1 (the
        first outcome) to −1 (the last)."""
        n = len(self.outcomes)
        even = [1.0 - 2.0 * i / (n - 1) for i in range(n)]
        return [e if isinstance(o, str) or o.stance is None else o.stance
                for o, e in zip(self.outcomes, even, strict=True)]

    def prices0(self) -> list[float]:
        """Initial prices (even unless given)."""
        n = len(self.outcomes)
        return list(self.initial_prices) if self.initial_prices else [1.0 / n] * n


class RuleTrading(Strict):
    """How rule-based traders trade (docs/markets.md, "Rule-based traders")."""

    kelly_fraction: float = Field(default=0.25, gt=0, le=1)
    min_edge: float = Field(default=0.02, ge=0, lt=1)
    noise: float = Field(default=0.05, ge=0, le=1)  # sd of the belief's noise each round
    belief_width: float = Field(default=0.5, gt=0)  # how sharply positions pick outcomes
    min_trade: float = Field(default=0.01, ge=0)  # smaller trades are not placed


class SocialToMarket(Strict):
    """Social → market: traders see the round's social digest of the market's topic."""

    enabled: bool = True
    weight: float = Field(default=0.3, ge=0, le=1)  # rule traders: weight of the sentiment
    top_posts: int = Field(default=3, ge=0)  # LLM traders: posts quoted in their digest


class MarketToSocial(Strict):
    """Market → social: the Markets section of every context, and market-news events."""

    enabled: bool = True
    context: bool = True  # the "Markets" context section
    news_threshold: float | None = Field(default=0.1, gt=0, lt=1)  # None: no news events
    news_rounds: int = Field(default=1, ge=1)  # how long a market-news post stays pinned


class Bridge(Strict):
    """The market–media bridge, one switch per direction."""

    social_to_market: SocialToMarket = Field(default_factory=SocialToMarket)
    market_to_social: MarketToSocial = Field(default_factory=MarketToSocial)


class MarketPlatformConfig(Strict):
    """The prediction-market platform: traders (its members), their cash, how rule traders
    trade, the bridge to the social platforms, and the markets."""

    mutable_fields: ClassVar[tuple[str, ...]] = ("participation", "max_actions_per_round",
                                                  "trading", "bridge")

    enabled: bool = True
    members: Selector = Field(default_factory=Selector)
    participation: float = Field(default=1.0, ge=0, le=1)
    max_actions_per_round: int = Field(default=1, ge=1, le=10)
    budget: float = Field(default=100.0, gt=0)
    trading: RuleTrading = Field(default_factory=RuleTrading)
    bridge: Bridge = Field(default_factory=Bridge)
    markets: list[MarketConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _ids(self):
        ids = [m.id for m in self.markets]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"markets: duplicate ids {dupes}")
        for i, m in enumerate(self.markets):
            if m.initial_prices is not None and len(m.initial_prices) != len(m.outcomes):
                raise ValueError(f"markets.{i}.initial_prices: {len(m.initial_prices)} prices "
                                 f"for {len(m.outcomes)} outcomes")
        return self

    def problems(self, path: str, rounds: int, topics: list[str]) -> list[str]:
        """What the rest of the config makes wrong here (unknown topics and outcomes,
        rounds past the run's end), each naming its field."""
        out = []
        for i, m in enumerate(self.markets):
            where = f"{path}.markets.{i}"
            names = m.outcome_names()
            for field, topic in (("topic", m.topic), ("resolution.rule.topic",
                                  m.resolution.rule.topic if m.resolution and m.resolution.rule
                                  else None)):
                if topic is not None and topic not in topics:
                    out.append(f"{where}.{field}: unknown topic {topic!r}; topics are {topics}")
            closes = m.closes or rounds
            if m.opens > closes:
                out.append(f"{where}.opens: round {m.opens} is after it closes ({closes})")
            if m.closes is not None and m.closes > rounds:
                out.append(f"{where}.closes: round {m.closes} is past the run's {rounds} rounds")
            res = m.resolution
            if res is None:
                continue
            if res.round is not None and res.round < closes:
                out.append(f"{where}.resolution.round: {res.round} is before the market "
                           f"closes ({closes})")
            if res.round is not None and res.round > rounds:
                out.append(f"{where}.resolution.round: {res.round} is past the run's "
                           f"{rounds} rounds")
            given = [("resolution.outcome", res.outcome)]
            if res.rule is not None:
                given += [("resolution.rule.if_true", res.rule.if_true),
                          ("resolution.rule.if_false", res.rule.if_false)]
                if len(names) > 2 and (res.rule.if_true is None or res.rule.if_false is None):
                    out.append(f"{where}.resolution.rule: a market with {len(names)} outcomes "
                               "needs if_true and if_false")
            for field, value in given:
                if value is not None and value not in names:
                    out.append(f"{where}.{field}: unknown outcome {value!r}; outcomes are "
                               f"{names}")
        return out

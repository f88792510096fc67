"""Intervention entries of the config (`interventions:`), one model per kind.

An entry fires once, at the boundary between rounds `round − 1` and `round` (round 0 is
the initial state: entries there fire during setup), so everything it does is part of the
world that the agents of `round` see. A kind is registered in
`shoal.core.registry.INTERVENTIONS` with its model (here, or in a plug-in) and what firing
it does (shoal.engine.interventions); docs/interventions.md describes them for users.

Every model derives from `InterventionSpec` and reports its cross-field problems through
`problems` (topics and groups it names, the round it fires at), so the config checks any
kind, Shoal's or a plug-in's, the same way.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from shoal.config.base import Strict
from shoal.config.selector import Selector
from shoal.core.registry import INTERVENTIONS, PLATFORMS

Stance = dict[str, Annotated[float, Field(ge=-1, le=1)]]


def known_platform(name: str) -> str:
    """A registered platform's name (ValueError listing them otherwise)."""
    if name not in PLATFORMS:
        raise ValueError(f"unknown platform {name!r}; platforms: {', '.join(PLATFORMS.names())}")
    return name


Platform = Annotated[str, Field(min_length=1)]


class InterventionSpec(Strict):
    """What every intervention entry has: its kind and the round it fires at; an optional
    `name` lets a fork drop or move it by name."""

    kind: str
    round: int = Field(ge=1)
    name: str | None = None

    def problems(self, where: str, rounds: int, topics: list[str]) -> list[str]:
        """Cross-field problems of this entry in a config with `rounds` and `topics`."""
        out = []
        if self.round > rounds:
            out.append(f"{where}.round: {self.round} is after the last round ({rounds})")
        for path, stance in self.stances(where):
            unknown = sorted(set(stance) - set(topics))
            if unknown:
                out.append(f"{path}: unknown topics {unknown}; topics are {topics}")
        return out

    def stances(self, where: str) -> list[tuple[str, dict[str, float]]]:
        """The stances this entry gives posts, with their paths."""
        return []

    def selectors(self, where: str) -> list[tuple[str, Selector]]:
        """The agent selectors of this entry, with their paths."""
        target = getattr(self, "target", None)
        return [(f"{where}.target", target)] if isinstance(target, Selector) else []


class Votes(Strict):
    """Votes a post starts with (not cast by any agent)."""

    up: int = Field(default=0, ge=0)
    down: int = Field(default=0, ge=0)


class PostSpec(Strict):
    """One injected post. `author: null` posts as the platform's news account."""

    platform: Platform
    author: int | None = Field(default=None, ge=0)
    text: str = Field(min_length=1)
    stance: Stance = Field(default_factory=dict)
    votes: Votes = Field(default_factory=Votes)

    _platform = field_validator("platform")(classmethod(lambda cls, v: known_platform(v)))


class PostIntervention(InterventionSpec, PostSpec):
    """Inject one post (at round 0: a seed post with chosen initial votes)."""

    kind: Literal["post"]
    round: int = Field(ge=0)

    def stances(self, where: str) -> list[tuple[str, dict[str, float]]]:
        return [(f"{where}.stance", self.stance)]

    def posts(self, where: str) -> list[tuple[str, PostSpec]]:
        """The posts this entry injects, with their paths."""
        return [(where, self)]


class PostsIntervention(InterventionSpec):
    """Inject several posts at once (e.g. the treated posts of a herd experiment)."""

    kind: Literal["posts"]
    round: int = Field(ge=0)
    items: list[PostSpec] = Field(min_length=1)

    def stances(self, where: str) -> list[tuple[str, dict[str, float]]]:
        return [(f"{where}.items.{j}.stance", p.stance) for j, p in enumerate(self.items)]

    def posts(self, where: str) -> list[tuple[str, PostSpec]]:
        """The posts this entry injects, with their paths."""
        return [(f"{where}.items.{j}", p) for j, p in enumerate(self.items)]


class EventIntervention(InterventionSpec):
    """Breaking news: a post by the news account pinned to the top of the targeted agents'
    feeds on the given platforms for `duration` rounds, then it expires."""

    kind: Literal["event"]
    text: str = Field(min_length=1)
    stance: Stance = Field(default_factory=dict)
    platforms: list[Platform] | None = None
    target: Selector = Field(default_factory=Selector)
    duration: int = Field(default=1, ge=1)

    _platforms = field_validator("platforms")(classmethod(
        lambda cls, v: v if v is None else [known_platform(p) for p in v]))

    def stances(self, where: str) -> list[tuple[str, dict[str, float]]]:
        return [(f"{where}.stance", self.stance)]


class BeliefIntervention(InterventionSpec):
    """Set or shift the position (and/or set the confidence) of a group on a topic."""

    kind: Literal["beliefs"]
    target: Selector = Field(default_factory=Selector)
    topic: str
    set: float | None = Field(default=None, ge=-1, le=1)
    shift: float | None = Field(default=None, ge=-2, le=2)
    confidence: float | None = Field(default=None, ge=0, le=1)

    @model_validator(mode="after")
    def _one_change(self) -> Self:
        if self.set is not None and self.shift is not None:
            raise ValueError("give 'set' or 'shift', not both")
        if self.set is None and self.shift is None and self.confidence is None:
            raise ValueError("give at least one of 'set', 'shift' or 'confidence'")
        return self

    def problems(self, where: str, rounds: int, topics: list[str]) -> list[str]:
        out = super().problems(where, rounds, topics)
        if self.topic not in topics:
            out.append(f"{where}.topic: unknown topic {self.topic!r}; topics are {topics}")
        return out


class AddAgents(InterventionSpec):
    """New generated agents join (personas, stances and activity drawn like at round 0)."""

    kind: Literal["add_agents"]
    count: int = Field(gt=0)
    group: str | None = None
    platforms: list[Platform] | None = None
    follow: int = Field(default=0, ge=0)  # each newcomer follows this many existing members

    _platforms = field_validator("platforms")(classmethod(
        lambda cls, v: v if v is None else [known_platform(p) for p in v]))


class RemoveAgents(InterventionSpec):
    """Agents leave: they never act again; what they posted stays."""

    kind: Literal["remove_agents"]
    target: Selector


class SetParams(InterventionSpec):
    """Change parameters from this round on: dotted config paths and their new values."""

    kind: Literal["set"]
    values: dict[str, Any] = Field(min_length=1)

    def problems(self, where: str, rounds: int, topics: list[str]) -> list[str]:
        out = super().problems(where, rounds, topics)
        for key in self.values:
            if not mutable(key):
                out.append(f"{where}.values.{key}: cannot be changed mid-run (it only "
                           "shaped round 0)")
        # (what the running process made before round 1: `Config` checks those keys, as
        # it knows which of them name a field; an unknown one is reported as such)
        return out


# Config sections a `set` intervention (or a fork's --set) may change mid-run; a platform's
# changeable fields are listed in shoal.config.platforms. The rest (population, topics,
# initial conditions, graph, start time, which platforms exist) only shaped round 0.
MUTABLE_SECTIONS = ("policy", "beliefs", "activity", "executor", "output", "checkpoints",
                    "memory", "llm", "rounds", "seed", "name")


# Of those, what the running process built once (its executor: shards, threads, Ray; its
# run directory and id), which a fork or a resume changes but a `set` entry cannot;
# `executor.contexts` is read every round, so it can.
MADE_BEFORE_ROUND_1 = ("executor", "output.dir", "name")


def made_before_round_1(key: str) -> bool:
    """Whether the dotted config path `key` is among what a `set` entry cannot change."""
    return key != "executor.contexts" and any(key == p or key.startswith(p + ".")
                                              for p in MADE_BEFORE_ROUND_1)


def mutable(key: str) -> bool:
    """Whether the dotted config path `key` may change after round 0."""
    from shoal.config.platforms import mutable_fields

    parts = key.split(".")
    if parts[0] == "platforms":
        return len(parts) >= 3 and parts[2] in mutable_fields(parts[1])
    return parts[0] in MUTABLE_SECTIONS


INTERVENTIONS.config_base = InterventionSpec  # (a plug-in's config model derives from it)

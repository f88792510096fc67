"""Intervention entries of the config (`interventions:`), one model per kind.

An entry fires once, at the boundary between rounds `round − 1` and `round` (round 0 is
the initial state: entries there fire during setup), so everything it does is part of the
world that the agents of `round` see. What each kind does is implemented in
`sim/interventions.py`; docs/interventions.md describes them for users.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Target(_Spec):
    """Which agents: everyone (no field), explicit `ids`, named `groups`, and/or a seeded
    `fraction` of those."""

    ids: list[Annotated[int, Field(ge=0)]] | None = None
    groups: list[str] | None = None
    fraction: float | None = Field(default=None, gt=0, le=1)


class Votes(_Spec):
    """Votes a post starts with (not cast by any agent)."""

    up: int = Field(default=0, ge=0)
    down: int = Field(default=0, ge=0)


class PostSpec(_Spec):
    """One injected post. `author: null` posts as the platform's news account."""

    platform: Literal["twitter", "reddit"]
    author: int | None = Field(default=None, ge=0)
    text: str = Field(min_length=1)
    stance: dict[str, Annotated[float, Field(ge=-1, le=1)]] = Field(default_factory=dict)
    votes: Votes = Field(default_factory=Votes)


class PostIntervention(PostSpec):
    """Inject one post (at round 0: a seed post with chosen initial votes)."""

    kind: Literal["post"]
    round: int = Field(ge=0)


class PostsIntervention(_Spec):
    """Inject several posts at once (e.g. the treated posts of a herd experiment)."""

    kind: Literal["posts"]
    round: int = Field(ge=0)
    items: list[PostSpec] = Field(min_length=1)


class EventIntervention(_Spec):
    """Breaking news: a post by the news account pinned to the top of the targeted agents'
    feeds on the given platforms for `duration` rounds, then it expires."""

    kind: Literal["event"]
    round: int = Field(ge=1)
    text: str = Field(min_length=1)
    stance: dict[str, Annotated[float, Field(ge=-1, le=1)]] = Field(default_factory=dict)
    platforms: list[Literal["twitter", "reddit"]] | None = None
    target: Target = Field(default_factory=Target)
    duration: int = Field(default=1, ge=1)


class BeliefIntervention(_Spec):
    """Set or shift the position (and/or set the confidence) of a group on a topic."""

    kind: Literal["beliefs"]
    round: int = Field(ge=1)
    target: Target = Field(default_factory=Target)
    topic: str
    set: float | None = Field(default=None, ge=-1, le=1)
    shift: float | None = Field(default=None, ge=-2, le=2)
    confidence: float | None = Field(default=None, ge=0, le=1)

    @model_validator(mode="after")
    def _one_change(self):
        if self.set is not None and self.shift is not None:
            raise ValueError("give 'set' or 'shift', not both")
        if self.set is None and self.shift is None and self.confidence is None:
            raise ValueError("give at least one of 'set', 'shift' or 'confidence'")
        return self


class AddAgents(_Spec):
    """New generated agents join (personas, stances and activity drawn like at round 0)."""

    kind: Literal["add_agents"]
    round: int = Field(ge=1)
    count: int = Field(gt=0)
    group: str | None = None
    platforms: list[Literal["twitter", "reddit"]] | None = None
    follow: int = Field(default=0, ge=0)  # each newcomer follows this many existing members


class RemoveAgents(_Spec):
    """Agents leave: they never act again; what they posted stays."""

    kind: Literal["remove_agents"]
    round: int = Field(ge=1)
    target: Target


class SetParams(_Spec):
    """Change parameters from this round on: dotted config paths and their new values."""

    kind: Literal["set"]
    round: int = Field(ge=1)
    values: dict[str, Any] = Field(min_length=1)


Intervention = Annotated[
    PostIntervention | PostsIntervention | EventIntervention | BeliefIntervention
    | AddAgents | RemoveAgents | SetParams,
    Field(discriminator="kind"),
]

# Config sections an intervention (or a fork's --set) may change mid-run. The rest
# (population, topics, initial conditions, graph, start time) only shaped round 0.
MUTABLE_PREFIXES = ("policy.", "beliefs.", "activity.", "platforms.twitter.recommender",
                    "platforms.reddit.recommender", "platforms.twitter.participation",
                    "platforms.reddit.participation", "platforms.twitter.feed_size",
                    "platforms.reddit.feed_size", "platforms.twitter.max_actions_per_round",
                    "platforms.reddit.max_actions_per_round", "executor.", "output.",
                    "checkpoints.", "memory.", "llm.", "rounds", "seed", "name",
                    "interventions")

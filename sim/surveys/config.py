"""Surveys in a config (`surveys:`): questionnaires put to a sample of agents at chosen
rounds, without changing the run (docs/surveys.md).

A survey has items (Likert, single or multiple choice, numeric, free text), waves (the
rounds at whose end it is taken) and a sample (a selector and a size: the same respondents
every wave, a panel). Rule-based agents answer by the response model (`response`); LLM
agents answer through the interview path (`shoal survey RUN`).
"""

from __future__ import annotations

import math
from typing import Literal, Self

from pydantic import Field, model_validator

from shoal.config.base import Name, Strict
from shoal.config.selector import Selector

ItemKind = Literal["likert", "single", "multiple", "numeric", "text"]


class Option(Strict):
    """A choice of a single- or multiple-choice item; `position` is where on the item's
    topic (−1..1) a respondent who picks it stands."""

    label: str = Field(min_length=1)
    position: float = Field(ge=-1, le=1)


class Item(Strict):
    """One question. Likert and numeric items measure `topic`; `reverse` items are worded
    against it (agreeing means opposing); choice items list `options`."""

    id: Name
    kind: ItemKind
    text: str = Field(min_length=1)
    topic: str | None = None
    scale: str | None = None  # Likert items of one scale are scored together
    points: int = Field(default=5, ge=2, le=11)  # Likert categories 1..points
    reverse: bool = False
    options: list[Option] = Field(default_factory=list)
    range: tuple[float, float] = (0.0, 100.0)  # numeric: the answer for −1 and for +1

    @model_validator(mode="after")
    def _fields(self) -> Self:
        if self.kind in ("likert", "numeric", "single", "multiple") and self.topic is None:
            raise ValueError(f"topic: a {self.kind} item measures a topic; name it")
        if self.kind in ("single", "multiple") and len(self.options) < 2:
            raise ValueError(f"options: a {self.kind}-choice item needs at least 2 options")
        if self.kind not in ("single", "multiple") and self.options:
            raise ValueError(f"options: only choice items have options, not {self.kind}")
        if self.range[0] == self.range[1]:
            raise ValueError("range: the two ends must differ")
        if not math.isfinite(self.range[1] - self.range[0]):  # (answers would all be inf)
            raise ValueError(f"range: {self.range[0]:g} to {self.range[1]:g} is wider than a "
                             "number holds; give ends within ±1e307")
        return self


class Sample(Strict):
    """Who is asked: `size` agents drawn (seeded, once: a panel) from those `select`
    picks; without a size, all of them."""

    select: Selector = Field(default_factory=Selector)
    size: int | None = Field(default=None, gt=0)


class ResponseModel(Strict):
    """How a rule-based agent answers (docs/surveys.md): the latent answer is its position
    plus logistic noise whose scale shrinks with confidence; it abstains with
    probability `abstain` × (1 − confidence)²."""

    noise: float = Field(default=0.35, gt=0)  # the noise scale at confidence 0
    floor: float = Field(default=0.05, gt=0)  # ...and at confidence 1
    abstain: float = Field(default=0.15, ge=0, le=1)


class Survey(Strict):
    """A questionnaire, its waves and its sample."""

    name: Name
    items: list[Item] = Field(min_length=1)
    waves: list[int] = Field(min_length=1)
    sample: Sample = Field(default_factory=Sample)
    response: ResponseModel = Field(default_factory=ResponseModel)

    def problems(self, path: str, rounds: int, topics: list[str],
                 agents: int | None = None) -> list[str]:
        """What is wrong with the survey given the run's rounds, topics and (a generated
        population) its number of agents at round 0, whom the sample is drawn from. (The
        sample's groups are checked with every selector's: `Config.selectors`.)"""
        out = []
        ids = self.sample.select.ids or []
        if agents is not None and ids and max(ids) >= agents:
            out.append(f"{path}.sample.select.ids: no agent {max(ids)} (the population has "
                       f"{agents} agents, ids 0..{agents - 1})")
        for i, w in enumerate(self.waves):
            if not 0 <= w <= rounds:
                out.append(f"{path}.waves.{i}: round {w} is outside the run (0..{rounds})")
        if len(set(self.waves)) != len(self.waves):
            out.append(f"{path}.waves: a round is listed twice")
        names = [it.id for it in self.items]
        for i, it in enumerate(self.items):
            if names.count(it.id) > 1:
                out.append(f"{path}.items.{i}.id: {it.id!r} is used twice")
            if it.topic is not None and it.topic not in topics:
                out.append(f"{path}.items.{i}.topic: unknown topic {it.topic!r}; topics are "
                           f"{topics}")
        scales: dict[str, int] = {}
        for it in self.items:
            if it.scale is not None:
                if it.kind != "likert":
                    out.append(f"{path}.items: scale {it.scale!r} has a {it.kind} item "
                               f"({it.id}); scales are made of Likert items")
                elif scales.setdefault(it.scale, it.points) != it.points:
                    out.append(f"{path}.items: the items of scale {it.scale!r} have "
                               "different numbers of points")
        return out

    def pool_bound(self, agents: int, groups: dict[str, int]) -> int:
        """The most agents the sample can be drawn from, knowable before the run: the
        round-0 population (`agents`), narrowed by the selector's ids and groups
        (`groups`: each group's number of agents). A seeded fraction draws fewer, by
        chance, so it is only known when the run starts."""
        sel, bound = self.sample.select, agents
        if sel.ids is not None:
            bound = min(bound, len(set(sel.ids)))
        if sel.groups is not None:
            bound = min(bound, sum(groups.get(g, 0) for g in set(sel.groups)))
        return bound


def sample_note(path: str, size: int, pool: int, known: str) -> str:
    """The warning for a sample larger than its pool (`known`: when it was found, e.g.
    "before the run"): every agent of the pool is asked, fewer than the size."""
    if pool == 0:
        return (f"{path}.sample.size: {size} respondents asked for, but no agent can be "
                f"drawn ({known}); the survey has no respondents")
    return (f"{path}.sample.size: {size} respondents asked for, but only {pool} agents can "
            f"be drawn ({known}); the sample is all {pool} of them")

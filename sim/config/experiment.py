"""The `experiment:` section of a config (docs/experiments.md): arms that differ from the
config by a treatment, compared in pairs over replicated seeds.

    experiment:
      branch_round: 4          # arms share rounds 1..4 (one base run per replicate)
      replicates: 16           # seeds seed_base .. seed_base + 15
      control: control         # default: the first arm
      metrics: [belief_mean.carbon_tax, engagement]   # default: every metric
      arms:
        control: {}
        no_news: {interventions: {remove: [news]}}
        news_at_5: {interventions: {move: {news: 5}}}
        double_stance: {overrides: {interventions.news.stance.carbon_tax: 0.8}}

`shoal run` ignores the section; `shoal experiment` (shoal.runs.experiment) runs it. What an
arm may change is what a fork may change; that check needs the fork machinery and is made
when the experiment is planned, with every problem named by its path in this section.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Self

from pydantic import BeforeValidator, Field, field_validator, model_validator

from shoal.config.base import Name, NotANumber, Strict
from shoal.core.vocabulary import outcome_metrics

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z0-9_\-]+)*$")
BASE = "base"  # the unit name of a replicate's shared base run; no arm may take it
MAX_RUNS = 100_000  # runs of one experiment (each a run directory), as for a sweep


def _ref(value: object) -> object:
    """An intervention's name or index: `true` is neither (pydantic would take it as 1)."""
    if isinstance(value, bool):
        raise ValueError(f"must be an intervention's name or index, got {str(value).lower()}")
    return value


def _round(value: object) -> object:
    """A round is a number: `true` or a quoted `"5"` is refused, as in the rest of the
    config, not read as 1 or 5."""
    return NotANumber(value) if isinstance(value, bool | str) else value


Ref = Annotated[str | int, BeforeValidator(_ref)]
Round = Annotated[int, BeforeValidator(_round)]


class ArmInterventions(Strict):
    """An arm's edits of the schedule: entries to `add` (each after the branch round), to
    `remove` (by name or index in the config's `interventions` list) and to `move`
    (name or index -> the round it fires at instead)."""

    add: list[dict[str, Any]] = Field(default_factory=list)
    remove: list[Ref] = Field(default_factory=list)
    move: dict[Ref, Round] = Field(default_factory=dict)


class ArmSpec(Strict):
    """One arm: config `overrides` (dotted key -> value, as `--set` takes them) and
    intervention edits. An arm with neither is the config as it is."""

    overrides: dict[str, Any] = Field(default_factory=dict)
    interventions: ArmInterventions = Field(default_factory=ArmInterventions)

    @field_validator("overrides")
    @classmethod
    def _keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if not _KEY.match(str(key)):
                raise ValueError(f"{key}: not a config field path (like policy.post_rate)")
        return v


def _empty_arm(value: object) -> object:
    return {} if value is None else value  # `control:` with nothing after it


Arm = Annotated[ArmSpec, BeforeValidator(_empty_arm)]


class ExperimentConfig(Strict):
    """Arms compared in pairs: each replicate runs every arm with the same seed, forked
    from one shared base run at `branch_round` (0: each arm is its own run from round 0)."""

    arms: dict[Name, Arm]
    control: Name | None = None
    branch_round: int = Field(default=0, ge=0)
    replicates: int = Field(default=8, ge=1)
    seed_base: int = Field(default=0, ge=0, lt=2**63)
    metrics: list[str] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _arms(self) -> Self:
        if len(self.arms) < 2:
            raise ValueError("arms: an experiment needs at least two arms (a control and a "
                             "treatment)")
        if BASE in self.arms:
            raise ValueError(f"arms.{BASE}: the name is taken by each replicate's base run; "
                             "call the arm something else")
        if self.control is None:
            self.control = next(iter(self.arms))
        elif self.control not in self.arms:
            raise ValueError(f"control: {self.control!r} is not an arm; arms: "
                             f"{', '.join(self.arms)}")
        runs = self.replicates * (len(self.arms) + (self.branch_round > 0))
        if runs > MAX_RUNS:  # (each is a run directory: a typo, not a plan)
            raise ValueError(f"replicates: {self.replicates:,} replicates make {runs:,} runs; "
                             f"at most {MAX_RUNS:,} in one experiment")
        if self.seed_base + self.replicates > 2**63:
            raise ValueError("replicates: the seeds seed_base .. seed_base + replicates - 1 "
                             "must lie in 0..2^63-1")
        return self

    @property
    def treatments(self) -> list[str]:
        """The arms compared with the control, in config order."""
        return [a for a in self.arms if a != self.control]

    def problems(self, where: str, rounds: int, topics: list[str]) -> list[str]:
        """Cross-field problems against the config's `rounds` and `topics`."""
        out = []
        if self.branch_round >= rounds:
            out.append(f"{where}.branch_round: {self.branch_round} leaves no round to "
                       f"compare; it must be before the last round ({rounds})")
        known = outcome_metrics(topics)
        for i, name in enumerate(self.metrics or []):
            if name not in known:
                out.append(f"{where}.metrics.{i}: unknown metric {name!r}; metrics are "
                           f"{', '.join(known)}")
        if self.metrics and len(set(self.metrics)) != len(self.metrics):
            out.append(f"{where}.metrics: a metric is listed twice")
        return out

    def metric_names(self, topics: list[str]) -> list[str]:
        """The metrics to measure: those listed, or all of them."""
        return list(self.metrics) if self.metrics else outcome_metrics(topics)

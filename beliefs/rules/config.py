"""Config models the opinion-dynamics rules share (each rule's own model lives with the
rule and registers with it). Thresholds are on Shoal's [-1, 1] scale: a threshold ε'
stated on [0, 1] in the literature is ε = 2ε' here."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from shoal.config.base import Strict

BeliefMode = Literal["exposures", "encounters", "pairs", "neighbours", "complete"]
Epsilon = Annotated[float, Field(gt=0, le=2)]
# Allowance for rounding at a confidence bound: positions lie in [-1, 1], so a distance
# equal to ε in exact arithmetic comes out a few 1e-16 off after a subtraction or an
# average; 1e-12 is far above that and far below any distance that matters. A closed bound
# (≤ ε: Hegselmann–Krause) takes ε + TIE, a strict one (< ε: Deffuant, algorithmic bias)
# ε − TIE, so equidistant start profiles, where many pairs lie exactly ε apart, interact
# as the papers' definitions say, not as rounding falls.
TIE = 1e-12


class Dynamics(Strict):
    """What every opinion-dynamics rule shares: who an agent is influenced by each round
    (`mode`), and whether exposures to posts it had already seen count (`skip_seen`).
    `modes` lists the modes a rule implements; `encounters` (sequential pairwise
    encounters) only makes sense for the pairwise rules, which add it."""

    modes: ClassVar[tuple[str, ...]] = ("exposures", "pairs", "neighbours", "complete")

    mode: BeliefMode = "exposures"
    skip_seen: bool = False

    @model_validator(mode="after")
    def _mode_implemented(self):
        if self.mode not in self.modes:
            rule = getattr(self, "rule", type(self).__name__)
            raise ValueError(f"mode {self.mode!r} is not available for rule {rule!r} "
                             f"(its modes: {', '.join(self.modes)})")
        return self

    @model_validator(mode="after")
    def _skip_seen(self):
        if self.skip_seen and self.mode != "exposures":
            raise ValueError("skip_seen applies to mode 'exposures' only")
        return self


class Averaging(Dynamics):
    """Weighted-average rules: weight of oneself and of each influence."""

    self_weight: float | None = Field(default=None, ge=0, le=1)
    weights: Literal["uniform", "trust"] = "uniform"

    @model_validator(mode="after")
    def _trust_needs_pairs(self):
        if self.weights == "trust" and self.mode == "complete":
            raise ValueError("weights 'trust' needs mode exposures, pairs or neighbours "
                             "(mode 'complete' weights everyone equally)")
        return self

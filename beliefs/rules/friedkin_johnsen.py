"""Friedkin–Johnsen: averaging anchored to initial opinions (Friedkin & Johnsen 1990).

x(t+1) = Λ·W·x(t) + (I − Λ)·x(0), Λ = diag(λ_i): λ_i is agent i's susceptibility to
influence and 1 − λ_i its stubbornness (attachment to its initial position x_i(0),
`UpdateContext.initial_position`). W·x is the DeGroot step of `degroot.py` (same modes,
weights and self weight). λ is one number, or `confidence`: λ_i,t = 1 − c_i,t, so a
confident agent holds on to where it started. With a fixed W and ρ(ΛW) < 1 the positions
converge to x* = (I − ΛW)⁻¹(I − Λ)x(0).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from shoal.beliefs.rules.base import Exposures, UpdateContext
from shoal.beliefs.rules.config import Averaging
from shoal.beliefs.rules.degroot import DeGrootRule
from shoal.beliefs.state import BeliefState
from shoal.core.registry import BELIEF_RULES


class FriedkinJohnsen(Averaging):
    """Friedkin–Johnsen: x ← Λ·(DeGroot step) + (I − Λ)·x(0); λ_i is the susceptibility
    (1 − λ_i the stubbornness), or 1 − confidence per agent and topic."""

    rule: Literal["friedkin_johnsen"]
    susceptibility: Annotated[float, Field(ge=0, le=1)] | Literal["confidence"] = 0.8


@BELIEF_RULES.register("friedkin_johnsen", config=FriedkinJohnsen)
class FriedkinJohnsenRule(DeGrootRule):
    """The DeGroot step, mixed with each agent's initial position."""

    def __init__(self, cfg: FriedkinJohnsen):
        super().__init__(cfg)

    def update(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext) -> None:
        if ctx.initial_position is None:
            raise ValueError("friedkin_johnsen anchors to the initial positions: "
                             "UpdateContext.initial_position is required")
        rows, new = self.step(beliefs, exposures, ctx)
        lam = self.cfg.susceptibility
        if lam == "confidence":
            lam = 1.0 - beliefs.confidence[rows]
        beliefs.position[rows] = lam * new + (1.0 - lam) * ctx.initial_position[rows]

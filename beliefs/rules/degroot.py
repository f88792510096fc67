"""DeGroot's weighted averaging (DeGroot 1974, "Reaching a consensus").

x_i ← W_ii·x_i + Σ_j W_ij·x_j with W row-stochastic. Here W_ij ∝ w_ij over agent i's
influences this round (`influences.py`: posts read, a random partner, followees, or
everyone), w = 1 or trust; the agent's own weight is `self_weight`, or — when unset — the
agent counts as one more influence of weight 1: x ← (x + Σ w s) / (1 + Σ w). An agent
without influences keeps its position. In mode `neighbours` with a fixed graph this is the
classic linear model x(t+1) = W x(t): consensus on π·x(0) (π the left Perron vector of W)
when W is strongly connected and aperiodic.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from shoal.beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from shoal.beliefs.rules.config import Averaging
from shoal.beliefs.rules.influences import influences
from shoal.beliefs.state import BeliefState
from shoal.core.registry import BELIEF_RULES


def average(x: np.ndarray, weight: np.ndarray, weighted: np.ndarray,
            self_weight: float | None) -> np.ndarray:
    """The DeGroot step for positions x given Σ w and Σ w·s (same shapes)."""
    if self_weight is None:
        return (x + weighted) / (1.0 + weight)
    has = weight > 0
    mean = np.divide(weighted, weight, out=np.zeros_like(weighted), where=has)
    return np.where(has, self_weight * x + (1.0 - self_weight) * mean, x)


class DeGroot(Averaging):
    """DeGroot: x_i becomes a weighted mean of itself and its influences."""

    rule: Literal["degroot"]


@BELIEF_RULES.register("degroot", config=DeGroot)
class DeGrootRule(UpdateRule):
    """Weighted averaging in any of the four modes; confidence is not used."""

    uses_votes = False  # (it reads the items' stances, not their votes)
    agentwise_modes = ("exposures",)

    def __init__(self, cfg: Averaging):
        self.cfg = cfg
        self.uses_trust = cfg.weights == "trust"
        self.uses_novelty = cfg.skip_seen

    def step(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext
             ) -> tuple[np.ndarray, np.ndarray]:
        """(updated agents, their DeGroot-averaged positions)."""
        c = self.cfg
        inf = influences(beliefs.position, exposures, ctx, c.mode,
                         trust_weights=c.weights == "trust", skip_seen=c.skip_seen)
        x = beliefs.position[inf.rows]
        return inf.rows, average(x, inf.weight, inf.weighted, c.self_weight)

    def update(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext) -> None:
        rows, new = self.step(beliefs, exposures, ctx)
        beliefs.position[rows] = new

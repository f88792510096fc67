"""Hegselmann–Krause bounded confidence (Hegselmann & Krause 2002, JASSS 5(3):2).

x_i ← mean of {x_i} ∪ {s_j : |s_j − x_i| ≤ ε} over agent i's influences this round
(`influences.py`): in mode `complete` the classic synchronous model, in which every agent
moves to the average of everyone within ε of it. Confidence is not used.

The bound is closed, and a distance that equals ε in exact arithmetic counts as within it
even when floating-point rounding puts it an ulp or two above (`TIE`): equidistant start
profiles, the standard test bed of the literature (Hegselmann & Krause 2002; Lorenz 2007),
place many pairs exactly ε apart, and without the allowance whether they interact — and so
the number of final clusters — depends on rounding (n = 11 equidistant on [0, 1],
ε = 0.1: 3 clusters in exact arithmetic; 5 on Shoal's scale with a bare `<=`), and mode
`complete` (sorted positions) and `neighbours` (differences) round differently.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from shoal.beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from shoal.beliefs.rules.config import TIE, Dynamics, Epsilon
from shoal.beliefs.rules.influences import influences
from shoal.beliefs.state import BeliefState
from shoal.core.registry import BELIEF_RULES


class HegselmannKrause(Dynamics):
    """Hegselmann–Krause: x_i becomes the mean of itself and all influences within ε."""

    rule: Literal["hegselmann_krause"]
    epsilon: Epsilon = 0.4


@BELIEF_RULES.register("hegselmann_krause", config=HegselmannKrause)
class HegselmannKrauseRule(UpdateRule):
    """Average over the influences within the confidence bound (oneself included)."""

    uses_votes = False  # (it reads the items' stances, not their votes)
    agentwise_modes = ("exposures",)

    def __init__(self, cfg: HegselmannKrause):
        self.cfg = cfg
        self.uses_novelty = cfg.skip_seen

    def update(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext) -> None:
        c = self.cfg
        inf = influences(beliefs.position, exposures, ctx, c.mode, within=c.epsilon + TIE,
                         skip_seen=c.skip_seen)
        x = beliefs.position[inf.rows]
        mean = (x + inf.weighted) / (1.0 + inf.weight)
        # Where everyone within ε already agrees, the mean is exactly x: without this a
        # converged cluster can step between two neighbouring floats forever, and the model
        # would never reach the fixed point it reaches in finite time (Dittmer 2001).
        beliefs.position[inf.rows] = mean if inf.settled is None else np.where(inf.settled, x, mean)

"""Bounded confidence driven by exposures (Deffuant et al. 2000, one-sided form).

For each post the agent saw this round, oldest first, and each topic the post addresses:
if |s − x| < ε then x ← x + μ(s − x), using the already-updated x for the next post. This
is the read phase of benchmark workload W. Confidence is not changed.
"""

from __future__ import annotations

import numpy as np

from beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from beliefs.state import BeliefState
from sim.config import BoundedConfidence


class BoundedConfidenceRule(UpdateRule):
    """Sequential over feed columns, vectorised over agents and topics."""

    def __init__(self, cfg: BoundedConfidence):
        self.cfg = cfg

    def update(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext) -> None:
        if not exposures.posts.size:
            return
        a = exposures.agents
        stance, addressed = self.stances(exposures, ctx)
        x = beliefs.position[a]
        eps, mu = self.cfg.epsilon, self.cfg.mu
        for m in range(stance.shape[1]):
            s = stance[:, m, :]
            diff = s - x
            ok = addressed[:, m, :] & (np.abs(diff) < eps)
            x = np.where(ok, x + mu * diff, x)
        beliefs.position[a] = x

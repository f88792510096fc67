"""Bounded confidence driven by exposures (Deffuant et al. 2000, one-sided form).

For each post the agent saw this round, oldest first, and each topic the post addresses:
if |s − x| < ε then x ← x + μ(s − x), using the already-updated x for the next post. This
is the read phase of benchmark workload W. Confidence is not changed. It is the `deffuant`
rule in mode `exposures` under its historical name (same code path, same numbers).
"""

from __future__ import annotations

from beliefs.rules.deffuant import DeffuantRule
from sim.config.model import BoundedConfidence, Deffuant


class BoundedConfidenceRule(DeffuantRule):
    """Sequential over feed columns, vectorised over agents and topics."""

    def __init__(self, cfg: BoundedConfidence):
        super().__init__(Deffuant(rule="deffuant", mode="exposures", epsilon=cfg.epsilon,
                                  mu=cfg.mu))
        self.cfg = cfg

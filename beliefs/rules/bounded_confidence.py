"""Bounded confidence driven by exposures (Deffuant et al. 2000, one-sided form).

For each post the agent saw this round, oldest first, and each topic the post addresses:
if |s − x| < ε then x ← x + μ(s − x), using the already-updated x for the next post. This
is the read phase of benchmark workload W. Confidence is not changed. It is the `deffuant`
rule in mode `exposures` under its historical name (same code path, same numbers).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from shoal.beliefs.rules.deffuant import Deffuant, DeffuantRule
from shoal.config.base import Strict
from shoal.core.registry import BELIEF_RULES


class BoundedConfidence(Strict):
    """Deffuant-style bounded confidence driven by exposures, feed order oldest first."""

    rule: Literal["bounded_confidence"]
    epsilon: float = Field(default=0.3, gt=0, le=2)
    mu: float = Field(default=0.2, gt=0, le=1)


@BELIEF_RULES.register("bounded_confidence", config=BoundedConfidence)
class BoundedConfidenceRule(DeffuantRule):
    """Sequential over feed columns, vectorised over agents and topics."""

    def __init__(self, cfg: BoundedConfidence):
        super().__init__(Deffuant(rule="deffuant", mode="exposures", epsilon=cfg.epsilon,
                                  mu=cfg.mu))
        self.cfg = cfg

"""Belief update rules (docs/beliefs.md, docs/models.md). Each rule registers itself, with
its config model, in `shoal.core.registry.BELIEF_RULES` when its module is imported;
`beliefs.update.rule` in a config names one. `make_rule` builds the configured rule."""

from __future__ import annotations

from shoal.beliefs.rules import (  # noqa: F401  (importing a rule's module registers it)
    algorithmic_bias,
    bounded_confidence,
    deffuant,
    degroot,
    friedkin_johnsen,
    hegselmann_krause,
    social_influence,
    social_judgment,
    voter,
)
from shoal.beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from shoal.core.registry import BELIEF_RULES


def make_rule(cfg) -> UpdateRule:
    """The update rule for a `beliefs.update` config (any registered rule)."""
    return BELIEF_RULES.create(cfg)


__all__ = ["Exposures", "UpdateContext", "UpdateRule", "make_rule"]

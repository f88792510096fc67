"""Belief update rules, selected by `beliefs.update.rule` in the config."""

from __future__ import annotations

from beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from beliefs.rules.bounded_confidence import BoundedConfidenceRule
from beliefs.rules.social_influence import SocialInfluenceRule

RULES: dict[str, type[UpdateRule]] = {
    "social_influence": SocialInfluenceRule,
    "bounded_confidence": BoundedConfidenceRule,
}


def make_rule(cfg) -> UpdateRule:
    """The update rule for a `beliefs.update` config."""
    return RULES[cfg.rule](cfg)


__all__ = ["RULES", "Exposures", "UpdateContext", "UpdateRule", "make_rule"]

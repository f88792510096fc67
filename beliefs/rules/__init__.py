"""Belief update rules, selected by `beliefs.update.rule` in the config (docs/beliefs.md,
docs/models.md). `RULES` maps each rule name to its class; `make_rule` builds one."""

from __future__ import annotations

from beliefs.rules.algorithmic_bias import AlgorithmicBiasRule
from beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from beliefs.rules.bounded_confidence import BoundedConfidenceRule
from beliefs.rules.deffuant import DeffuantRule
from beliefs.rules.degroot import DeGrootRule
from beliefs.rules.friedkin_johnsen import FriedkinJohnsenRule
from beliefs.rules.hegselmann_krause import HegselmannKrauseRule
from beliefs.rules.social_influence import SocialInfluenceRule
from beliefs.rules.voter import VoterRule

RULES: dict[str, type[UpdateRule]] = {
    "social_influence": SocialInfluenceRule,
    "bounded_confidence": BoundedConfidenceRule,
    "deffuant": DeffuantRule,
    "hegselmann_krause": HegselmannKrauseRule,
    "degroot": DeGrootRule,
    "friedkin_johnsen": FriedkinJohnsenRule,
    "voter": VoterRule,
    "algorithmic_bias": AlgorithmicBiasRule,
}


def make_rule(cfg) -> UpdateRule:
    """The update rule for a `beliefs.update` config."""
    return RULES[cfg.rule](cfg)


__all__ = ["RULES", "Exposures", "UpdateContext", "UpdateRule", "make_rule"]

"""MiroShark's social-influence nudge, with its defects fixed (docs/beliefs.md), and
defaults calibrated to how publics behave (docs/models.md).

Per exposure to a post with stance s on topic t (only topics the post addresses):

    nudge = (s − x) · trust(reader, author) · social · novelty · rate / resistance
    social     = min(1, social_base + social_per_like · likes)
    novelty    = novelty_new if the reader has not seen the post before, else novelty_seen
    resistance = resistance_base + resistance_confidence · confidence

Nudges of one round are summed, then the position is clipped to [-1, 1]; then every
position moves `anchor` of the way back to the agent's position at round 0 (or when it
joined): x ← x + anchor · (x₀ − x). Confidence moves
with the net votes (likes/upvotes minus downvotes) the agent's posts on that topic got
*this round* (MiroShark used all-time totals): ±min(cap, step·|net|), floored.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from shoal.beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from shoal.beliefs.state import BeliefState
from shoal.config.base import Strict
from shoal.core.registry import BELIEF_RULES


class SocialInfluence(Strict):
    """MiroShark's social-influence nudge, with its defects fixed (docs/beliefs.md)."""

    rule: Literal["social_influence"]
    # Calibrated (docs/models.md): MiroShark's 0.08 with no anchor collapses a polarised
    # public to consensus within a day; `rate: 0.08, anchor: 0` is that behaviour.
    rate: float = Field(default=0.001, gt=0)
    novelty_new: float = Field(default=1.5, ge=0)
    novelty_seen: float = Field(default=0.5, ge=0)
    social_base: float = Field(default=0.3, ge=0)
    social_per_like: float = Field(default=0.07, ge=0)
    resistance_base: float = Field(default=0.3, gt=0)
    resistance_confidence: float = Field(default=0.7, ge=0)
    confidence_step: float = Field(default=0.03, ge=0)
    confidence_cap: float = Field(default=0.15, ge=0)
    confidence_floor: float = Field(default=0.1, ge=0, le=1)
    # Each round, a share of the distance back to the agent's own starting position
    # (its predispositions): persuasion decays, dispersion persists (docs/models.md).
    anchor: float = Field(default=0.15, ge=0, le=1)


@BELIEF_RULES.register("social_influence", config=SocialInfluence)
class SocialInfluenceRule(UpdateRule):
    """The default rule."""

    uses_novelty = True
    uses_trust = True

    def __init__(self, cfg: SocialInfluence):
        self.cfg = cfg

    def update(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext) -> None:
        c = self.cfg
        if exposures.posts.size:
            a = exposures.agents
            stance, addressed = self.stances(exposures, ctx)
            valid = exposures.valid
            ids = np.maximum(exposures.posts, 0)
            readers = np.broadcast_to(a[:, None], ids.shape)
            seen = np.zeros(ids.shape, dtype=bool)
            if ctx.history is not None:
                seen[valid] = ctx.history.seen(readers[valid], ids[valid])
            novelty = np.where(seen, c.novelty_seen, c.novelty_new)
            social = np.minimum(1.0, c.social_base + c.social_per_like * exposures.up)
            weight = exposures.trust * social * novelty * c.rate  # [A, M]
            x = beliefs.position[a]  # [A, T]
            resistance = c.resistance_base + c.resistance_confidence * beliefs.confidence[a]
            pull = np.where(addressed, stance - x[:, None, :], 0.0)
            delta = (pull * weight[:, :, None]).sum(axis=1) / resistance
            beliefs.position[a] = np.clip(x + delta, -1.0, 1.0)
        if c.anchor > 0 and ctx.initial_position is not None:
            x = beliefs.position
            x += c.anchor * (ctx.initial_position[: len(x)] - x)
        self._engagement(beliefs, ctx.engagement)

    def _engagement(self, beliefs: BeliefState, net: np.ndarray) -> None:
        c = self.cfg
        step = np.minimum(c.confidence_cap, c.confidence_step * np.abs(net))
        conf = beliefs.confidence
        up = net > 0
        down = net < 0
        conf[up] = np.minimum(1.0, conf[up] + step[up])
        conf[down] = np.maximum(c.confidence_floor, conf[down] - step[down])

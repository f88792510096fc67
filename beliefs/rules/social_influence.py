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

Breaking news (posts of kind `event`) is its own channel, sized and sourced separately
(docs/beliefs.md, "What news does"): a reader's first reading of a news item of stance s
moves it by `news_rate` · s (every reader by the same amount, in the news' direction),
and `news_persistence` of that shift becomes its new predisposition (the anchor moves with
it), so it does not wear off. Later readings, and other platforms' copies, do nothing
more. `news_rate: null` treats news as an ordinary post, as before (and as MiroShark did).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from shoal.beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from shoal.beliefs.rules.news import first_readings, news_mask
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
    # Breaking news: a reader's first reading of news of stance s moves it by news_rate · s.
    # An op-ed moved its readers about 0.5 points of a 7-point scale (1/6 of our [-1, 1]),
    # for at least a month (Coppock, Ekins & Kirby 2018; docs/beliefs.md): 0.17 per unit
    # of stance. None: news is an ordinary post of the peer formula (the behaviour before).
    news_rate: float | None = Field(default=0.17, ge=0, le=1)
    # The share of that shift that moves the reader's anchor too: 1, it persists; 0, it
    # wears off at `anchor`'s rate like peer persuasion.
    news_persistence: float = Field(default=1.0, ge=0, le=1)


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
            x = beliefs.position[a]  # [A, T]
            pull = np.where(addressed, stance - x[:, None, :], 0.0)  # [A, M, T]
            news_shift = None
            if c.news_rate is not None and (news := news_mask(exposures, ctx)).any():
                first = first_readings(exposures, ctx, news)
                # In parallel: every reader moves by the same amount in the news' direction,
                # wherever it stands (Coppock 2023; docs/beliefs.md).
                news_shift = c.news_rate * (stance * first[:, :, None]).sum(axis=1)
                pull = np.where(news[:, :, None], 0.0, pull)  # news is not a peer post
            delta = self._peer_nudges(exposures, ctx, beliefs, a, pull)
            if news_shift is not None:
                delta += news_shift
            beliefs.position[a] = np.clip(x + delta, -1.0, 1.0)
            if news_shift is not None and c.news_persistence > 0 and (
                    ctx.initial_position is not None):
                x0 = ctx.initial_position
                x0[a] = np.clip(x0[a] + c.news_persistence * news_shift, -1.0, 1.0)
        if c.anchor > 0 and ctx.initial_position is not None:
            x = beliefs.position
            x += c.anchor * (ctx.initial_position[: len(x)] - x)
        self._engagement(beliefs, ctx.engagement)

    def _peer_nudges(self, exposures: Exposures, ctx: UpdateContext, beliefs: BeliefState,
                     a: np.ndarray, pull: np.ndarray) -> np.ndarray:
        """The summed nudges [A, T] of the posts read (pull: stance − position, 0 where a
        post does not address a topic), weighed by trust, votes, novelty and resistance."""
        c = self.cfg
        valid = exposures.valid
        ids = np.maximum(exposures.posts, 0)
        readers = np.broadcast_to(a[:, None], ids.shape)
        seen = np.zeros(ids.shape, dtype=bool)
        if ctx.history is not None:
            seen[valid] = ctx.history.seen(readers[valid], ids[valid])
        novelty = np.where(seen, c.novelty_seen, c.novelty_new)
        social = np.minimum(1.0, c.social_base + c.social_per_like * exposures.up)
        weight = exposures.trust * social * novelty * c.rate  # [A, M]
        resistance = c.resistance_base + c.resistance_confidence * beliefs.confidence[a]
        return (pull * weight[:, :, None]).sum(axis=1) / resistance

    def _engagement(self, beliefs: BeliefState, net: np.ndarray) -> None:
        c = self.cfg
        step = np.minimum(c.confidence_cap, c.confidence_step * np.abs(net))
        conf = beliefs.confidence
        up = net > 0
        down = net < 0
        conf[up] = np.minimum(1.0, conf[up] + step[up])
        conf[down] = np.maximum(c.confidence_floor, conf[down] - step[down])

"""Social judgment: assimilation and contrast (Jager & Amblard 2005), with an optional
persuasive-arguments reinforcement (Burnstein & Vinokur 1977; Myers & Lamm 1976).

Jager & Amblard formalise Sherif & Hovland's social judgment theory: a message x_j whose
distance to the receiver's position x_i is inside the latitude of acceptance moves x_i
towards it (assimilation); one beyond the latitude of rejection moves x_i away from it
(contrast, the boomerang effect); in between (non-commitment) nothing happens. With
d = x_j − x_i, per topic, independently:

    |d| < u:        x_i ← x_i + μ·d  (+ ρ·x_j if x_j·x_i > 0)
    |d| > t:        x_i ← x_i − μ·d
    otherwise:      x_i unchanged
    then x_i is clipped to [−1, 1].

The ρ term is persuasive-arguments theory: hearing an argument for one's own side moves
one further that way, beyond averaging (an accepted message that agrees in sign with the
receiver adds ρ·x_j, a step towards the pole it argues for). ρ = 0 (the default) is the
published model. Modes (docs/models.md), as for `deffuant`:

- `exposures`: each post the agent saw this round, oldest first, is a message of stance
  s = x_j, using the moved x for the next post (one-sided).
- `pairs`: a random perfect matching per round, both ends reacting to each other's
  position at the start of the round (Jager & Amblard's pairwise interactions).
- `complete` / `neighbours`: every agent draws one partner (anyone / a followee) and
  reacts to it, all from the positions at the start of the round (one-sided).

The rule keeps no state besides the positions (nothing to checkpoint); its draws are the
counter RNG's, keyed by seed, round and agent, like the other direct-interaction rules.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from shoal.beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from shoal.beliefs.rules.config import Dynamics, Epsilon
from shoal.beliefs.rules.exposure_stances import exposure_stances
from shoal.beliefs.rules.partners import (
    living,
    living_followees,
    random_followees,
    random_matching,
    random_others,
)
from shoal.beliefs.state import BeliefState
from shoal.core.registry import BELIEF_RULES


class SocialJudgment(Dynamics):
    """Jager & Amblard's social judgment rule: assimilation within `acceptance` (u),
    contrast beyond `rejection` (t), step `mu`; `reinforce` (ρ) adds ρ·s for accepted
    messages on the receiver's side. Thresholds on Shoal's [−1, 1] scale."""

    rule: Literal["social_judgment"]
    mu: float = Field(default=0.1, gt=0, le=1)
    acceptance: Epsilon = 0.4
    rejection: Epsilon = 1.2
    reinforce: float = Field(default=0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _latitudes_ordered(self):
        if self.rejection < self.acceptance:
            raise ValueError(f"rejection ({self.rejection}) must be at least acceptance "
                             f"({self.acceptance}): the latitude of rejection lies beyond "
                             "the latitude of acceptance")
        return self


def judge(x: np.ndarray, s: np.ndarray, mu: float, u: float, t: float, rho: float
          ) -> np.ndarray:
    """The receiver's new positions after one message each (elementwise): assimilation
    within u, contrast beyond t, reinforcement ρ·s for accepted messages agreeing in sign;
    clipped to [−1, 1]."""
    d = s - x
    dist = np.abs(d)
    accept = dist < u
    step = np.where(accept, mu * d, 0.0) - np.where(dist > t, mu * d, 0.0)
    if rho > 0:
        step = step + np.where(accept & (s * x > 0), rho * s, 0.0)
    return np.clip(x + step, -1.0, 1.0)


@BELIEF_RULES.register("social_judgment", config=SocialJudgment,
                       example={"mu": 0.1, "acceptance": 0.4, "rejection": 0.8,
                                "reinforce": 0.02})
class SocialJudgmentRule(UpdateRule):
    """Social judgment in any of the four modes; confidence is not used."""

    uses_votes = False  # (it reads the items' stances, not their votes)
    agentwise_modes = ("exposures",)

    def __init__(self, cfg: SocialJudgment):
        self.cfg = cfg
        self.uses_novelty = cfg.skip_seen

    def _judge(self, x: np.ndarray, s: np.ndarray) -> np.ndarray:
        c = self.cfg
        return judge(x, s, c.mu, c.acceptance, c.rejection, c.reinforce)

    def update(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext) -> None:
        pos = beliefs.position
        n, n_topics = pos.shape
        if self.cfg.mode == "exposures":
            if exposures.posts.size:
                a = exposures.agents
                stance, addressed = exposure_stances(exposures, ctx, self.cfg.skip_seen)
                x = pos[a]
                for m in range(stance.shape[1]):  # sequential over posts, oldest first
                    x = np.where(addressed[:, m, :], self._judge(x, stance[:, m, :]), x)
                pos[a] = x
            return
        live = living(ctx, n)
        if self.cfg.mode == "pairs":
            a, b = random_matching(ctx, live, n_topics)
            topic = np.broadcast_to(np.arange(n_topics), a.shape)
            xa, xb = pos[a, topic], pos[b, topic]  # both react to the other's old position
            pos[a, topic], pos[b, topic] = self._judge(xa, xb), self._judge(xb, xa)
            return
        if self.cfg.mode == "complete":
            partner = random_others(ctx, live, n_topics)
        else:
            partner = random_followees(ctx, live, n_topics, living_followees(ctx, n))
        topic = np.broadcast_to(np.arange(n_topics), partner.shape)
        has = partner >= 0
        x = pos[live]
        other = pos[np.maximum(partner, 0), topic]
        pos[live] = np.where(has, self._judge(x, other), x)

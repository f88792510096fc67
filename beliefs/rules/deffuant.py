"""Deffuant–Weisbuch bounded confidence (Deffuant, Neau, Amblard & Weisbuch 2000).

Two agents whose positions differ by less than ε move towards each other by a fraction μ
of the difference: x_i ← x_i + μ(x_j − x_i) (and, in a symmetric encounter, the same for
x_j). Per topic, independently. Modes (docs/models.md):

- `exposures`: for each post the agent saw this round, oldest first, and each topic it
  addresses, x ← x + μ(s − x) if |s − x| < ε, using the moved x for the next post (the
  one-sided form; this is `bounded_confidence`, the read phase of workload W).
- `encounters`: the published schedule — N/2 encounters per round, each a uniformly drawn
  pair of distinct living agents, applied one after another, both ends moving; an agent
  may meet several partners in a round or none, each time from where the previous
  encounter left it. Applied in batches of disjoint encounters (`encounter_batches`), which
  gives exactly the sequential result.
- `pairs`: a random perfect matching of the living agents per round, both ends moving
  (N/2 encounters too, but everyone meets exactly one partner per round; fewer stragglers
  than the published schedule).
- `complete` / `neighbours`: every agent draws one partner (anyone / a followee) and moves
  towards it, all from the positions at the start of the round (one-sided, synchronous).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from shoal.beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from shoal.beliefs.rules.config import TIE, Dynamics, Epsilon
from shoal.beliefs.rules.exposure_stances import exposure_stances
from shoal.beliefs.rules.partners import (
    encounter_batches,
    living,
    living_followees,
    random_encounters,
    random_followees,
    random_matching,
    random_others,
)
from shoal.beliefs.state import BeliefState
from shoal.core.registry import BELIEF_RULES


def read_sequentially(x: np.ndarray, stance: np.ndarray, addressed: np.ndarray, eps: float,
                      mu: float) -> np.ndarray:
    """One-sided Deffuant over feed columns, oldest first: sequential over columns,
    vectorised over agents and topics. x [A, T] (updated in place and returned),
    stance/addressed [A, M, T]."""
    diff, ok = np.empty_like(x), np.empty(x.shape, bool)
    for m in range(stance.shape[1]):
        np.subtract(stance[:, m, :], x, out=diff)
        np.less(np.abs(diff), eps, out=ok)
        ok &= addressed[:, m, :]
        diff *= mu
        np.add(x, diff, out=x, where=ok)  # x + mu * diff where ok, x elsewhere
    return x


def symmetric_pairs(pos: np.ndarray, a: np.ndarray, b: np.ndarray, eps: float, mu: float,
                    topic: np.ndarray | None = None) -> None:
    """Both agents of each pair (a[k], b[k]) on topic[k] (default: a and b are [K, T], one
    column per topic) move by μ·difference when closer than ε. Pairs must be disjoint per
    topic, so the fancy-indexed writes never collide."""
    if topic is None:
        topic = np.broadcast_to(np.arange(pos.shape[1]), a.shape)
    xa, xb = pos[a, topic], pos[b, topic]
    diff = xb - xa
    move = np.abs(diff) < eps
    pos[a, topic] = np.where(move, xa + mu * diff, xa)
    pos[b, topic] = np.where(move, xb - mu * diff, xb)


def one_sided(pos: np.ndarray, agents: np.ndarray, partner: np.ndarray, eps: float,
              mu: float) -> None:
    """Each agent moves towards its partner (partner[i, t], -1: none) by μ·difference when
    closer than ε; all differences from the positions before this call."""
    topic = np.broadcast_to(np.arange(pos.shape[1]), partner.shape)
    has = partner >= 0
    x = pos[agents]
    diff = np.where(has, pos[np.maximum(partner, 0), topic] - x, 0.0)
    move = has & (np.abs(diff) < eps)
    pos[agents] = np.where(move, x + mu * diff, x)


def sequential_pairs(pos: np.ndarray, a: np.ndarray, b: np.ndarray, eps: float, mu: float
                     ) -> None:
    """Symmetric encounters (a[k, t], b[k, t]) applied in sequence order k on each topic t,
    each from the positions the earlier ones left; one batch of disjoint encounters at a
    time."""
    for k, t in encounter_batches(a, b, pos.shape[0]):
        symmetric_pairs(pos, a[k, t], b[k, t], eps, mu, t)


class Deffuant(Dynamics):
    """Deffuant–Weisbuch bounded confidence: |x_j − x_i| < ε moves x_i by μ(x_j − x_i)."""

    modes = (*Dynamics.modes, "encounters")

    rule: Literal["deffuant"]
    epsilon: Epsilon = 0.4
    mu: float = Field(default=0.5, gt=0, le=1)


@BELIEF_RULES.register("deffuant", config=Deffuant)
class DeffuantRule(UpdateRule):
    """Deffuant–Weisbuch in any of the five modes; confidence is not used."""

    uses_votes = False  # (it reads the items' stances, not their votes)
    agentwise_modes = ("exposures",)

    def __init__(self, cfg: Deffuant):
        self.cfg = cfg
        self.mode = cfg.mode
        # (strict bound: a distance of exactly ε is outside it, whatever rounding does)
        self.epsilon, self.mu = cfg.epsilon - TIE, cfg.mu
        self.skip_seen = cfg.skip_seen
        self.uses_novelty = cfg.skip_seen

    def update(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext) -> None:
        pos = beliefs.position
        n, n_topics = pos.shape
        if self.mode == "exposures":
            if not exposures.posts.size:
                return
            a = exposures.agents
            stance, addressed = exposure_stances(exposures, ctx, self.skip_seen)
            pos[a] = read_sequentially(pos[a], stance, addressed, self.epsilon, self.mu)
            return
        live = living(ctx, n)
        if self.mode == "encounters":
            a, b = random_encounters(ctx, live, n_topics)
            sequential_pairs(pos, a, b, self.epsilon, self.mu)
            return
        if self.mode == "pairs":
            a, b = random_matching(ctx, live, n_topics)
            symmetric_pairs(pos, a, b, self.epsilon, self.mu)
            return
        if self.mode == "complete":
            partner = random_others(ctx, live, n_topics)
        else:
            partner = random_followees(ctx, live, n_topics, living_followees(ctx, n))
        one_sided(pos, live, partner, self.epsilon, self.mu)

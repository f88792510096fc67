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
from shoal.beliefs.rules.exposure_stances import unseen_feed
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

READ_BLOCK = 16_384  # agents at a time: their positions stay in cache over the feed


def read_feed(pos: np.ndarray, agents: np.ndarray, feed: np.ndarray, stance: np.ndarray,
              eps: float, mu: float) -> None:
    """One-sided Deffuant over each agent's feed, oldest first: for item m = 0, 1, … and
    each topic it addresses, x ← x + μ(s − x) if |s − x| < ε, from the x the item before
    left. `pos` [N, T] is updated at the rows `agents` [A]; `feed` [A, M]: post ids (-1:
    none); `stance` [P, T]: the posts' stances (NaN: topic not addressed).

    A block of agents at a time, each item's stances read where they are used (no
    [A, M, T] array; bench/README.md). An empty slot or an unaddressed topic gives a NaN
    difference, which |difference| < ε never admits."""
    if not len(stance):
        return  # no post yet: every slot is empty
    for start in range(0, len(agents), READ_BLOCK):
        rows = slice(start, start + READ_BLOCK)
        who, ids = agents[rows], feed[rows]
        x = pos[who]  # (a copy) every step is elementwise: on flat arrays
        flat = x.reshape(-1)
        diff, ok = np.empty_like(flat), np.empty(flat.shape, bool)
        select = np.empty(flat.shape, np.int64)
        x_bits, moved_bits = flat.view(np.int64), diff.view(np.int64)
        gaps = bool(ids.min() < 0)
        for m in range(ids.shape[1]):
            item = ids[:, m]
            s = stance[item]  # (-1 reads the last post: blanked)
            if gaps:
                s[item < 0] = np.nan
            s = s.reshape(-1)
            np.subtract(s, flat, out=diff)
            np.less(np.abs(diff, out=s), eps, out=ok)
            diff *= mu
            np.add(flat, diff, out=diff)  # the moved x (NaN where nothing was read)
            # x = moved where ok, else x, as a select of bits: exact, and without the
            # branch per element of `where=`, which mispredicts when ok is a coin flip
            np.negative(ok.view(np.int8), out=select, casting="unsafe")  # all bits set
            moved_bits ^= x_bits
            moved_bits &= select
            x_bits ^= moved_bits
        pos[who] = x


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
            if exposures.posts.size:
                read_feed(pos, exposures.agents, unseen_feed(exposures, ctx, self.skip_seen),
                          ctx.posts.stance, self.epsilon, self.mu)
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

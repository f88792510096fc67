"""The voter model (Clifford & Sudbury 1973; Holley & Liggett 1975).

An agent adopts the position of a randomly chosen influence, with probability `rate` per
round and topic. Positions are copied exactly, so the set of distinct positions only
shrinks; with ±1 starting positions this is the classic binary voter model. Modes:

- `exposures`: the stance of one post, drawn uniformly among those the agent saw this
  round that address the topic.
- `encounters`: N/2 encounters per round, each a uniformly drawn pair of living agents,
  applied one after another (an agent may copy, and be copied, several times in a round);
  in each a fair coin picks who copies whom. Applied in batches of disjoint encounters
  (`partners.encounter_batches`), which gives exactly the sequential result.
- `pairs`: a random perfect matching; in each pair a fair coin picks who copies whom.
- `complete` / `neighbours`: every agent copies a uniformly drawn other agent / followee,
  all from the positions at the start of the round (synchronous).

On a complete graph the mean position is a martingale in every mode but `exposures`, so
the probability of ending at consensus on +1 equals the initial share of +1.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from shoal.beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from shoal.beliefs.rules.config import Dynamics
from shoal.beliefs.rules.exposure_stances import exposure_stances
from shoal.beliefs.rules.partners import (
    Draw,
    draws,
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


def uniform_choice(mask: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Index along axis 1 of `mask` [R, M, T] drawn uniformly among the True entries, from
    uniforms u [R, T]; -1 where a row has none."""
    count = mask.sum(axis=1)
    k = np.minimum((u * count).astype(np.int64), np.maximum(count - 1, 0))
    rank = np.cumsum(mask, axis=1) - 1  # rank of each True entry within its row
    hit = mask & (rank == k[:, None, :])
    return np.where(count > 0, hit.argmax(axis=1), -1)


class Voter(Dynamics):
    """Voter model: an agent copies the position of a random influence."""

    modes = (*Dynamics.modes, "encounters")

    rule: Literal["voter"]
    rate: float = Field(default=1.0, gt=0, le=1)


@BELIEF_RULES.register("voter", config=Voter)
class VoterRule(UpdateRule):
    """Copy a random influence's position; confidence is not used."""

    uses_votes = False  # (it reads the items' stances, not their votes)
    agentwise_modes = ("exposures",)

    def __init__(self, cfg: Voter):
        self.cfg = cfg
        self.uses_novelty = cfg.skip_seen

    def update(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext) -> None:
        pos = beliefs.position
        n, n_topics = pos.shape
        rate = self.cfg.rate
        if self.cfg.mode == "exposures":
            a = exposures.agents
            if not exposures.posts.size:
                return
            stance, addressed = exposure_stances(exposures, ctx, self.cfg.skip_seen)
            pick = uniform_choice(addressed, draws(ctx, Draw.PICK, a, n_topics))
            s = np.take_along_axis(stance, np.maximum(pick, 0)[:, None, :], axis=1)[:, 0, :]
            adopt = (pick >= 0) & (draws(ctx, Draw.ADOPT, a, n_topics) < rate)
            pos[a] = np.where(adopt, s, pos[a])
            return
        live = living(ctx, n)
        if self.cfg.mode == "encounters":
            a, b = random_encounters(ctx, live, n_topics)
            # Draws keyed by the encounter's index: whether a copies b (else b copies a), and
            # whether the copy happens.
            k = np.arange(len(a), dtype=np.int64)
            a_copies = draws(ctx, Draw.COIN, k, n_topics) < 0.5
            adopt = draws(ctx, Draw.ADOPT, k, n_topics) < rate
            for e, t in encounter_batches(a, b, n):
                go = adopt[e, t]
                e, t = e[go], t[go]
                copier = np.where(a_copies[e, t], a[e, t], b[e, t])
                model = np.where(a_copies[e, t], b[e, t], a[e, t])
                pos[copier, t] = pos[model, t]
            return
        if self.cfg.mode == "pairs":
            a, b = random_matching(ctx, live, n_topics)
            topic = np.broadcast_to(np.arange(n_topics), a.shape)
            # Draws keyed by the pair's first agent: who copies, and whether they do.
            coin = np.take_along_axis(
                draws(ctx, Draw.COIN, np.arange(n), n_topics), a, axis=0)
            adopt = np.take_along_axis(
                draws(ctx, Draw.ADOPT, np.arange(n), n_topics), a, axis=0) < rate
            xa, xb = pos[a, topic], pos[b, topic]
            a_copies = coin < 0.5
            pos[a, topic] = np.where(adopt & a_copies, xb, xa)
            pos[b, topic] = np.where(adopt & ~a_copies, xa, xb)
            return
        if self.cfg.mode == "complete":
            partner = random_others(ctx, live, n_topics)
        else:
            partner = random_followees(ctx, live, n_topics, living_followees(ctx, n))
        topic = np.broadcast_to(np.arange(n_topics), partner.shape)
        adopt = (partner >= 0) & (draws(ctx, Draw.ADOPT, live, n_topics) < rate)
        x = pos[live]
        pos[live] = np.where(adopt, pos[np.maximum(partner, 0), topic], x)

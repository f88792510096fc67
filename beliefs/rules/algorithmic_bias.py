"""Algorithmic bias (Sîrbu, Pedreschi, Giannotti & Kertész 2019, PLOS ONE 14(3):e0213246).

A Deffuant–Weisbuch model whose interaction partner is not drawn uniformly: agent i meets
j with probability p_ij ∝ max(|x_i − x_j|, δ)^−γ (δ = `min_distance`), mimicking a
platform that shows people those who already think like them; γ = 0 is plain Deffuant.
If |x_i − x_j| < ε the agents move by μ(x_j − x_i) (Sîrbu et al. use μ = ½). The bias is
scale-free (p_ij only depends on ratios of distances), so γ needs no mapping to [-1, 1];
δ does (δ' on [0, 1] is 2δ', default 2e-5 ↔ NDlib's 1e-5). Modes:

- `exposures`: one post among those the agent read this round, drawn with the bias, then
  a one-sided update towards its stance.
- `pairs`: every living agent proposes a partner drawn with the bias among all others; a
  conflict-free subset of the proposals (`partners.conflict_free`) interact, both moving.
- `complete` / `neighbours`: every agent draws a biased partner among everyone / its
  followees and moves towards it (one-sided, synchronous).

Partner draws over everyone cost O(N²) per topic and round (done in chunks of agents).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from shoal.beliefs.rules.base import Exposures, UpdateContext, UpdateRule
from shoal.beliefs.rules.config import TIE, Dynamics, Epsilon
from shoal.beliefs.rules.deffuant import one_sided, symmetric_pairs
from shoal.beliefs.rules.exposure_stances import exposure_stances
from shoal.beliefs.rules.partners import (
    Draw,
    conflict_free,
    draws,
    living,
    living_followees,
    pick_weighted,
    pick_weighted_segments,
)
from shoal.beliefs.state import BeliefState
from shoal.core.registry import BELIEF_RULES

_CHUNK_CELLS = 4_000_000  # bound on the distance matrix held at once (32 MB)


def bias_weights(dist: np.ndarray, gamma: float, floor: float) -> np.ndarray:
    """max(d, floor)^−γ. Unnormalised: a weight only matters relative to its row's total,
    and with floor ≥ 1e-6 and γ ≤ 20 nothing overflows (floor^−γ ≤ 1e120)."""
    if gamma == 0:
        return np.ones_like(dist)
    return np.maximum(dist, floor) ** -gamma


class AlgorithmicBias(Dynamics):
    """Sîrbu et al. 2019: the partner is drawn ∝ max(|x_i − x_j|, min_distance)^−γ, then a
    Deffuant update with ε and μ."""

    rule: Literal["algorithmic_bias"]
    epsilon: Epsilon = 0.4
    mu: float = Field(default=0.5, gt=0, le=1)
    gamma: float = Field(default=1.0, ge=0, le=20)
    min_distance: float = Field(default=2e-5, ge=1e-6, le=1)


@BELIEF_RULES.register("algorithmic_bias", config=AlgorithmicBias)
class AlgorithmicBiasRule(UpdateRule):
    """Biased partner choice, then a Deffuant update; confidence is not used."""

    uses_votes = False  # (it reads the items' stances, not their votes)
    agentwise_modes = ("exposures",)

    def __init__(self, cfg: AlgorithmicBias):
        self.cfg = cfg
        self.uses_novelty = cfg.skip_seen

    def update(self, beliefs: BeliefState, exposures: Exposures, ctx: UpdateContext) -> None:
        c = self.cfg
        pos = beliefs.position
        n = pos.shape[0]
        if c.mode == "exposures":
            if exposures.posts.size:
                self._read(pos, exposures, ctx)
            return
        live = living(ctx, n)
        if c.mode == "neighbours":
            one_sided(pos, live, self._biased_followees(pos, live, ctx), c.epsilon - TIE, c.mu)
            return
        partner = self._biased_others(pos, live, ctx)
        if c.mode == "complete":
            one_sided(pos, live, partner, c.epsilon - TIE, c.mu)
            return
        keep = conflict_free(ctx, live, partner, n)
        rows, topic = np.nonzero(keep)
        symmetric_pairs(pos, live[rows], partner[rows, topic], c.epsilon - TIE, c.mu, topic)

    def _read(self, pos: np.ndarray, exposures: Exposures, ctx: UpdateContext) -> None:
        c = self.cfg
        a = exposures.agents
        stance, addressed = exposure_stances(exposures, ctx, c.skip_seen)
        x = pos[a]
        w = bias_weights(np.abs(stance - x[:, None, :]), c.gamma, c.min_distance)
        w[~addressed] = 0.0
        pick = pick_weighted(w, draws(ctx, Draw.PICK, a, pos.shape[1]))
        s = np.take_along_axis(stance, np.maximum(pick, 0)[:, None, :], axis=1)[:, 0, :]
        diff = s - x
        move = (pick >= 0) & (np.abs(diff) < c.epsilon - TIE)
        pos[a] = np.where(move, x + c.mu * diff, x)

    def _biased_others(self, pos: np.ndarray, live: np.ndarray, ctx: UpdateContext
                       ) -> np.ndarray:
        """A biased partner among all other living agents, per agent and topic [L, T]."""
        c = self.cfg
        n_live, n_topics = len(live), pos.shape[1]
        out = np.full((n_live, n_topics), -1, dtype=np.int64)
        u = draws(ctx, Draw.PARTNER, live, n_topics)
        x = pos[live]
        xt = np.ascontiguousarray(x.T)  # [T, L]: candidates on the last, contiguous axis
        step = max(1, _CHUNK_CELLS // max(n_live * n_topics, 1))
        for lo in range(0, n_live, step):  # chunks of agents bound memory; not per agent
            hi = min(lo + step, n_live)
            w = bias_weights(np.abs(xt[None, :, :] - x[lo:hi, :, None]), c.gamma,
                             c.min_distance)  # [C, T, L]
            rows = np.arange(hi - lo)
            w[rows, :, rows + lo] = 0.0  # nobody meets themself
            cdf = np.cumsum(w, axis=2)
            target = u[lo:hi] * cdf[:, :, -1]
            pick = np.minimum((cdf < target[:, :, None]).sum(axis=2), n_live - 1)
            out[lo:hi] = np.where(cdf[:, :, -1] > 0, live[pick], -1)
        return out

    def _biased_followees(self, pos: np.ndarray, live: np.ndarray, ctx: UpdateContext
                          ) -> np.ndarray:
        """A biased partner among each agent's living followees [L, T] (-1: none)."""
        c = self.cfg
        n = pos.shape[0]
        indptr, dst = living_followees(ctx, n)
        if not len(dst):
            return np.full((len(live), pos.shape[1]), -1, dtype=np.int64)
        deg = np.diff(indptr)
        src = np.repeat(np.arange(n, dtype=np.int64), deg)
        d = np.maximum(np.abs(pos[dst] - pos[src]), c.min_distance)  # [E, T]
        # Scaled to each row's largest weight: the cumulative sum runs over all rows.
        nearest = np.full((n, pos.shape[1]), np.inf)
        rows = np.nonzero(deg > 0)[0]
        nearest[rows] = np.minimum.reduceat(d, indptr[:-1][rows], axis=0)
        w = (d / nearest[src]) ** -c.gamma
        pick = pick_weighted_segments(w, indptr, live, draws(ctx, Draw.PARTNER, live,
                                                             pos.shape[1]))
        return np.where(pick >= 0, dst[np.maximum(pick, 0)], -1)

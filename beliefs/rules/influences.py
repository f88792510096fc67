"""The weighted influences an agent averages over, per mode, for the averaging rules
(DeGroot, Friedkin–Johnsen, Hegselmann–Krause).

For each updated agent i and topic t this gives Σ_j w_ij and Σ_j w_ij·s_j over i's
influences j this round, optionally only those within a confidence bound (|s_j − x_i| ≤ ε,
Hegselmann–Krause's closed bound):

- `exposures`: the stances of the posts i saw this round (readers only); w = 1 or the
  reader's trust in the author when the feed was built.
- `pairs`: the partner of i in a random perfect matching (every living agent).
- `neighbours`: the living accounts i follows; w = 1 or trust(i → j).
- `complete`: every other living agent, w = 1 (O(N log N) with a bound: sorted positions,
  so each agent's within-bound set is a contiguous range).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shoal.beliefs.rules.base import Exposures, UpdateContext
from shoal.beliefs.rules.exposure_stances import exposure_stances
from shoal.beliefs.rules.partners import living, living_followees, random_matching, segment_sum


@dataclass
class Influences:
    """Sums over each updated agent's influences this round."""

    rows: np.ndarray  # int64 [R]: the agents updated
    weight: np.ndarray  # float64 [R, T]: Σ w
    weighted: np.ndarray  # float64 [R, T]: Σ w·s
    # bool [R, T] or None: every influence within the bound holds exactly the agent's own
    # value (mode `complete` with a bound). The mean is then that value; a rule takes it
    # as is, since the sums round (prefix-sum differences carry the other clusters'
    # rounding) and a frozen cluster would otherwise step between neighbouring floats.
    settled: np.ndarray | None = None


def influences(pos: np.ndarray, exposures: Exposures, ctx: UpdateContext, mode: str,
               trust_weights: bool = False, within: float | None = None,
               skip_seen: bool = False) -> Influences:
    """Σ w and Σ w·s per updated agent and topic for `mode` (see the module docstring)."""
    n, n_topics = pos.shape
    if mode == "exposures":
        return _from_exposures(pos, exposures, ctx, trust_weights, within, skip_seen)
    live = living(ctx, n)
    if mode == "complete":
        return _from_everyone(pos, live, within)
    if mode == "neighbours":
        indptr, dst = living_followees(ctx, n)
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        w = ctx.trust.get(src, dst) if trust_weights else np.ones(len(dst))
        s = pos[dst]
        w = np.broadcast_to(w[:, None], s.shape)
        if within is not None:
            w = np.where(np.abs(s - pos[src]) <= within, w, 0.0)
        weight, weighted = segment_sum(w, indptr), segment_sum(w * s, indptr)
        return Influences(live, weight[live], weighted[live])
    if mode == "pairs":
        a, b = random_matching(ctx, live, n_topics)
        topic = np.broadcast_to(np.arange(n_topics), a.shape)
        partner = np.full((n, n_topics), -1, dtype=np.int64)
        partner[a, topic], partner[b, topic] = b, a
        partner = partner[live]
        has = partner >= 0
        j = np.maximum(partner, 0)
        s = pos[j, np.broadcast_to(np.arange(n_topics), j.shape)]
        w = (ctx.trust.get(np.broadcast_to(live[:, None], j.shape), j) if trust_weights
             else np.ones(j.shape))
        w = np.where(has, w, 0.0)
        if within is not None:
            w = np.where(np.abs(s - pos[live]) <= within, w, 0.0)
        return Influences(live, w, w * s)
    raise ValueError(f"unknown mode {mode!r}")


def _from_exposures(pos: np.ndarray, exposures: Exposures, ctx: UpdateContext,
                    trust_weights: bool, within: float | None, skip_seen: bool
                    ) -> Influences:
    a = exposures.agents
    n_topics = pos.shape[1]
    if not exposures.posts.size:
        empty = np.zeros((len(a), n_topics))
        return Influences(a, empty, empty.copy())
    stance, addressed = exposure_stances(exposures, ctx, skip_seen)
    w = exposures.trust[:, :, None] if trust_weights else np.ones((1, 1, 1))
    w = np.where(addressed, w, 0.0)
    if within is not None:
        w = np.where(np.abs(stance - pos[a][:, None, :]) <= within, w, 0.0)
    return Influences(a, w.sum(axis=1), (w * stance).sum(axis=1))


def _from_everyone(pos: np.ndarray, live: np.ndarray, within: float | None) -> Influences:
    x = pos[live]
    n_live = len(live)
    if within is None:
        weight = np.full(x.shape, float(max(n_live - 1, 0)))
        return Influences(live, weight, x.sum(axis=0)[None, :] - x)
    weight = np.empty(x.shape)
    weighted = np.empty(x.shape)
    settled = np.empty(x.shape, dtype=bool)
    for t in range(x.shape[1]):  # a loop over topics, vectorised over agents
        xs = np.sort(x[:, t])
        cs = np.concatenate([[0.0], np.cumsum(xs)])
        lo = np.searchsorted(xs, x[:, t] - within, side="left")
        hi = np.searchsorted(xs, x[:, t] + within, side="right")
        # The range holds the agent itself (distance 0); influences are the others.
        weight[:, t] = hi - lo - 1
        weighted[:, t] = cs[hi] - cs[lo] - x[:, t]
        settled[:, t] = xs[lo] == xs[hi - 1]
    return Influences(live, weight, weighted, settled)

"""Who interacts with whom in the direct-interaction modes of the opinion-dynamics rules.

Every draw goes through the run's counter RNG keyed by (round, agent, purpose), and every
topic gets its own draws, so each topic is an independent replica of the model and the
result never depends on shards or processing order. Only living agents interact.

- `encounters`: N/2 encounters per topic (N living agents), each a uniformly drawn pair of
  distinct living agents, applied one after another (Deffuant et al. 2000): an agent may
  meet several partners in a round, or none. `encounter_batches` cuts the sequence into
  runs of disjoint encounters, so a rule can apply each run at once and still get the
  result of the sequential loop.
- `pairs`: a uniform random perfect matching of the living agents, per topic (one agent
  sits out when their number is odd).
- `complete`: each agent draws one partner uniformly among all other living agents.
- `neighbours`: each agent draws one partner uniformly among the living accounts it follows
  (the first platform's follow graph); agents who follow nobody do not interact.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from shoal.beliefs.rules.base import UpdateContext
from shoal.core.counter_rng import CounterRNG, Purpose

_STRIDE = 1000  # purposes elsewhere are enum + 100·platform + 1000·slot, slots < 10


class Draw(IntEnum):
    """Purposes of belief-rule draws. Only `Purpose.INTERVENTION` is ≡ 12 (mod 100) and it
    is used through `generator()`, never with a 1000-stride, so these keys are unshared."""

    MATCH = Purpose.INTERVENTION + _STRIDE * 10
    PARTNER = Purpose.INTERVENTION + _STRIDE * 11
    COIN = Purpose.INTERVENTION + _STRIDE * 12
    ADOPT = Purpose.INTERVENTION + _STRIDE * 13
    PICK = Purpose.INTERVENTION + _STRIDE * 14
    CONFLICT = Purpose.INTERVENTION + _STRIDE * 15
    ENCOUNTER = Purpose.INTERVENTION + _STRIDE * 16  # keyed by encounter index, not agent


def rng_of(ctx: UpdateContext) -> CounterRNG:
    """The context's counter RNG (direct modes cannot run without one)."""
    if ctx.rng is None:
        raise ValueError("this belief rule draws partners at random: UpdateContext.rng is "
                         "required")
    return ctx.rng


def living(ctx: UpdateContext, n: int) -> np.ndarray:
    """Ids of the living agents, ascending."""
    if ctx.alive is None:
        return np.arange(n, dtype=np.int64)
    alive = np.asarray(ctx.alive[:n], dtype=bool)
    return np.nonzero(alive)[0].astype(np.int64)


def draws(ctx: UpdateContext, purpose: Draw, agents: np.ndarray, n_topics: int) -> np.ndarray:
    """Uniform draws [len(agents), n_topics] keyed by (round, agent, purpose)."""
    if not len(agents):
        return np.empty((0, n_topics))
    return rng_of(ctx).uniform(ctx.round, purpose, agents, n_topics)


def random_matching(ctx: UpdateContext, live: np.ndarray, n_topics: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """A random perfect matching per topic: agent ids (a, b) of shape [len(live) // 2, T];
    pair k on topic t is (a[k, t], b[k, t]). Sorting keyed uniforms gives a permutation that
    depends only on the seed, the round and who is alive."""
    u = draws(ctx, Draw.MATCH, live, n_topics)
    perm = live[np.argsort(u, axis=0, kind="stable")]
    half = len(live) // 2
    return perm[0:2 * half:2], perm[1:2 * half:2]


def random_encounters(ctx: UpdateContext, live: np.ndarray, n_topics: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The round's encounter sequence per topic: agent ids (a, b) of shape [len(live) // 2, T];
    encounter k on topic t is (a[k, t], b[k, t]), two distinct living agents drawn uniformly
    (independently of the other encounters). Draws are keyed by the encounter's index, so
    they depend only on the seed, the round, the topic and who is alive."""
    n_live, k = len(live), len(live) // 2
    if k == 0:
        empty = np.empty((0, n_topics), dtype=np.int64)
        return empty, empty.copy()
    u = draws(ctx, Draw.ENCOUNTER, np.arange(k, dtype=np.int64), 2 * n_topics)
    # min(): guards against u·n rounding up to n for u just below 1.
    i = np.minimum((u[:, :n_topics] * n_live).astype(np.int64), n_live - 1)
    j = np.minimum((u[:, n_topics:] * (n_live - 1)).astype(np.int64), n_live - 2)
    j += j >= i  # uniform among the others
    return live[i], live[j]


def encounter_batches(a: np.ndarray, b: np.ndarray, n: int
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Split each topic's encounter sequence (a, b [K, T], agent ids < n) into consecutive
    batches in which no agent appears twice: greedily, a batch ends just before the first
    encounter that reuses one of its agents. Returns, batch after batch, the (encounter
    index, topic) of its encounters; batch m of every topic is in entry m. Applying the
    entries in order, each all at once, gives exactly the sequential result: encounters of a
    batch touch disjoint agents, and every encounter comes after all earlier ones that share
    an agent with it."""
    k, n_topics = a.shape
    if k == 0:
        return []
    # prev[t, e]: the latest earlier encounter on topic t sharing an agent with e (-1: none).
    key = (np.arange(n_topics)[:, None, None] * n
           + np.stack([a.T, b.T], axis=2)).ravel()  # [T, K, 2] in sequence order per topic
    order = np.argsort(key, kind="stable")  # by (topic, agent), then by position
    same = key[order[1:]] == key[order[:-1]]
    earlier = np.full(key.size, -1, dtype=np.int64)
    earlier[order[1:][same]] = order[:-1][same]
    enc = np.where(earlier >= 0, (earlier % (2 * k)) // 2, -1)
    prev = enc.reshape(n_topics, k, 2).max(axis=2)
    # A batch starting at s ends at next[s] = min{e : prev[e] ≥ s} (prev[e] < e, so e > s):
    # the least e whose previous conflict lies in the batch; a suffix minimum over s.
    first = np.full((n_topics, k + 1), k, dtype=np.int64)
    t_idx, e_idx = np.nonzero(prev >= 0)
    np.minimum.at(first, (t_idx, prev[t_idx, e_idx]), e_idx)
    nxt = np.minimum.accumulate(first[:, ::-1], axis=1)[:, ::-1]
    starts = np.zeros((n_topics, k + 1), dtype=bool)
    s, topics = np.zeros(n_topics, dtype=np.int64), np.arange(n_topics)
    while (s < k).any():  # one step per batch (≈ √N of them), vectorised over topics
        starts[topics, s] = True
        s = nxt[topics, s]
    batch = np.cumsum(starts[:, :k], axis=1) - 1  # [T, K]
    flat = np.argsort(batch.ravel(), kind="stable")
    bounds = np.cumsum(np.bincount(batch.ravel()))[:-1]
    return [(cell % k, cell // k) for cell in np.split(flat, bounds)]


def random_others(ctx: UpdateContext, live: np.ndarray, n_topics: int) -> np.ndarray:
    """For each living agent and topic, a uniformly drawn other living agent [L, T]
    (-1 when nobody else is alive)."""
    n = len(live)
    if n < 2:
        return np.full((n, n_topics), -1, dtype=np.int64)
    u = draws(ctx, Draw.PARTNER, live, n_topics)
    k = np.minimum((u * (n - 1)).astype(np.int64), n - 2)
    k += k >= np.arange(n)[:, None]  # skip oneself
    return live[k]


def living_followees(ctx: UpdateContext, n: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (indptr [n + 1], followee ids) of the follow graph restricted to living agents
    (both ends), rows for agents 0..n-1."""
    if ctx.graph is None:
        raise ValueError("mode 'neighbours' needs the follow graph (UpdateContext.graph)")
    indptr, dst = ctx.graph.followees()
    rows = min(n, len(indptr) - 1)
    src = np.repeat(np.arange(rows, dtype=np.int64), np.diff(indptr[:rows + 1]))
    dst = dst[:len(src)]
    keep = dst < n
    if ctx.alive is not None:
        alive = np.asarray(ctx.alive, dtype=bool)
        keep &= alive[src] & alive[np.minimum(dst, n - 1)]
    src, dst = src[keep], dst[keep]
    out = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=out[1:])
    return out, dst.astype(np.int64)


def random_followees(ctx: UpdateContext, live: np.ndarray, n_topics: int,
                     csr: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """For each living agent and topic, a uniformly drawn living followee [L, T] (-1 for
    agents who follow nobody alive)."""
    indptr, dst = csr
    start, deg = indptr[live], np.diff(indptr)[live]
    u = draws(ctx, Draw.PARTNER, live, n_topics)
    k = np.minimum((u * deg[:, None]).astype(np.int64), np.maximum(deg - 1, 0)[:, None])
    has = deg > 0
    out = np.full((len(live), n_topics), -1, dtype=np.int64)
    out[has] = dst[start[has, None] + k[has]]
    return out


def segment_sum(values: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Row sums of CSR-ordered `values` [E, ...] → [rows, ...] (0 for empty rows). Exact
    per-row summation (no cumulative-sum differences)."""
    rows = len(indptr) - 1
    out = np.zeros((rows, *values.shape[1:]), dtype=np.float64)
    nonempty = np.diff(indptr) > 0
    if nonempty.any():
        out[nonempty] = np.add.reduceat(values[:indptr[-1]], indptr[:-1][nonempty], axis=0)
    return out


def pick_weighted(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Index along axis 1 of `weights` [R, K, T] drawn with probability ∝ weight, one per
    (row, topic), from uniforms `u` [R, T]; -1 where a row's weights are all zero."""
    cdf = np.cumsum(weights, axis=1)
    total = cdf[:, -1, :] if weights.shape[1] else np.zeros(u.shape)
    idx = (cdf < (u * total)[:, None, :]).sum(axis=1)
    idx = np.minimum(idx, max(weights.shape[1] - 1, 0))
    return np.where(total > 0, idx, -1)


def pick_weighted_segments(weights: np.ndarray, indptr: np.ndarray, rows: np.ndarray,
                           u: np.ndarray) -> np.ndarray:
    """For CSR-ordered weights [E, T] (each row's maximum 1, or all zero), the position of
    one entry per (row in `rows`, topic) drawn ∝ weight; -1 for empty or all-zero rows."""
    start, end = indptr[rows], indptr[rows + 1]
    out = np.full(u.shape, -1, dtype=np.int64)
    if not len(weights):
        return out
    cs = np.cumsum(weights, axis=0)
    padded = np.concatenate([np.zeros((1, weights.shape[1])), cs])
    before, through = padded[start], padded[end]
    total = through - before
    target = before + u * total
    for t in range(weights.shape[1]):  # a loop over topics, vectorised over agents
        pos = np.searchsorted(cs[:, t], target[:, t], side="right")
        pos = np.clip(pos, start, np.maximum(end - 1, start))
        ok = (end > start) & (total[:, t] > 0)
        out[ok, t] = pos[ok]
    return out


def conflict_free(ctx: UpdateContext, agents: np.ndarray, partner: np.ndarray, n: int
                  ) -> np.ndarray:
    """Of the proposals agent[i] → partner[i, t], a subset in which no agent appears twice
    per topic: a proposal is kept when its keyed random priority is the lowest of all
    proposals touching either of its two agents (one round of Luby's matching)."""
    n_topics = partner.shape[1]
    key = draws(ctx, Draw.CONFLICT, agents, n_topics)
    valid = partner >= 0
    topic = np.broadcast_to(np.arange(n_topics), partner.shape)
    lowest = np.full(n * n_topics, np.inf)
    src = agents[:, None] * n_topics + topic
    dst = np.where(valid, partner, 0) * n_topics + topic
    np.minimum.at(lowest, src[valid], key[valid])
    np.minimum.at(lowest, dst[valid], key[valid])
    return valid & (lowest[src] == key) & (lowest[dst] == key)

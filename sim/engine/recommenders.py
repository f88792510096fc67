"""Recommenders: which posts each active agent sees this round.

A feed is an int64 matrix [agents, k]: column 0 is the top of the feed, -1 an empty slot.
Feeds are built at the start of round r from the world as of the end of r-1. No
recommender scans the post table per agent: `following` reads the maintained inboxes,
`popularity` scores one window of recent posts once per round, `random` samples a window,
`personalized` ranks a shared candidate pool plus each agent's inbox, and
`algorithmic_bias` samples a window's newest posts with a bias towards the reader's views.
Each registers itself, with its config model, in `shoal.core.registry.RECOMMENDERS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from shoal.config.base import Strict
from shoal.core.counter_rng import CounterRNG, Purpose
from shoal.core.posts import PostStore
from shoal.core.registry import RECOMMENDERS
from shoal.core.rowsets import count_valid, first_valid
from shoal.core.state import State
from shoal.world.platform import Platform, feed_kinds


class FollowingRec(Strict):
    """Chronological feed of followed accounts; `fallback` tops a short feed up."""

    kind: Literal["following"]
    fallback: Literal["none", "recent"] = "none"


class PopularityRec(Strict):
    """Reddit hot score over the posts of the last `window_rounds`; a shared top `pool_size`."""

    kind: Literal["popularity"]
    pool_size: int = Field(default=100, gt=0)
    window_rounds: int = Field(default=48, gt=0)
    sample: Literal["random", "top"] = "random"


class RandomRec(Strict):
    """Uniform sample of the posts of the last `window_rounds`."""

    kind: Literal["random"]
    window_rounds: int = Field(default=24, gt=0)


class PersonalizedRec(Strict):
    """Ranks recent posts and the in-network inbox by stance and interest similarity."""

    kind: Literal["personalized"]
    pool_size: int = Field(default=200, gt=0)
    window_rounds: int = Field(default=24, gt=0)
    stance_weight: float = Field(default=1.0, ge=0)
    interest_weight: float = Field(default=0.5, ge=0)
    recency_weight: float = Field(default=0.5, ge=0)
    popularity_weight: float = Field(default=0.3, ge=0)
    in_network_weight: float = Field(default=0.5, ge=0)
    recency_halflife_rounds: float = Field(default=6.0, gt=0)
    explore: float = Field(default=0.1, ge=0)


class AlgorithmicBiasRec(Strict):
    """Sîrbu et al. 2019's bias as a feed: k of the newest `pool_size` posts of the last
    `window_rounds`, drawn without replacement with probability ∝ max(d, min_distance)^−γ,
    d the mean |reader position − post stance| over the topics the post addresses (1 for
    a post that takes no side). γ = 0 is a uniform random feed."""

    kind: Literal["algorithmic_bias"]
    gamma: float = Field(default=1.0, ge=0, le=20)
    min_distance: float = Field(default=2e-5, ge=1e-6, le=1)
    pool_size: int = Field(default=200, gt=0)
    window_rounds: int = Field(default=24, gt=0)


@dataclass
class FeedContext:
    """What a recommender may read when building round `round`'s feeds."""

    round: int
    posts: PostStore
    platform: Platform
    position: np.ndarray  # [N, T]
    interests: np.ndarray  # [N, T]
    rng: CounterRNG
    minutes_per_round: int

    def window(self, rounds: int) -> np.ndarray:
        """Feedable post ids of this platform from the last `rounds` rounds, ascending."""
        ids = self.posts.platform_ids(self.platform.code, self.round - rounds)
        return ids[np.isin(self.posts.kind[ids], feed_kinds(self.platform.name))]

    def newest(self, count: int) -> tuple[np.ndarray, bool]:
        """Up to `count` newest feedable posts of this platform (newest first), and whether
        that is all of them. Reads only the tail of the platform's id list."""
        all_ids = self.posts.platform_ids(self.platform.code)
        kinds = feed_kinds(self.platform.name)
        take = count
        while True:
            tail = all_ids[-take:][::-1]
            tail = tail[np.isin(self.posts.kind[tail], kinds)]
            if len(tail) >= count or take >= len(all_ids):
                return tail[:count], take >= len(all_ids) and len(tail) <= count
            take *= 2

    def draws(self, agents: np.ndarray, n: int, attempt: int = 0) -> np.ndarray:
        """Uniform draws for feed sampling, keyed by agent (shard- and order-independent)."""
        purpose = Purpose.FEED + 100 * self.platform.code + 1000 * attempt
        return self.rng.uniform(self.round, purpose, agents, n)


class Recommender(ABC):
    """Builds feeds for one platform; built as `Recommender(cfg)` from its config section
    (again when a fork or an intervention changes that section). The driver calls
    `feeds` once per round per platform with the acting agents, from the world as of the
    end of the previous round (`ctx`). A recommender that keeps state between rounds
    (e.g. what it learnt from engagement) returns it from `get_state`, so that a resume
    and a fork continue exactly; the default is stateless."""

    @abstractmethod
    def feeds(self, ctx: FeedContext, agents: np.ndarray) -> np.ndarray:
        """Feed matrix int64 [len(agents), k] of post ids for the given (active) agents,
        each row its feed in rank order, -1 after its last item. Every post is one the
        platform's feeds may show (its kinds, created before this round) and appears at
        most once per row; random draws come from `ctx.draws` (keyed by round, agent and
        purpose), so feeds do not depend on the order agents come in."""

    # Whether `feeds` gives each agent the same row whatever other agents are in the call
    # (shared pools computed from the world alone, draws keyed by agent) and keeps no
    # state while it builds them: the driver may then call it once per range of agents,
    # from several threads at once (shoal.core.workers). The built-in recommenders are.
    by_agent: bool = False

    def get_state(self) -> State | None:
        """Its state for a checkpoint (None: it keeps none)."""
        return None

    def set_state(self, state: State) -> None:  # noqa: B027  (stateless by default)
        """Take the state `get_state` returned (on a freshly built recommender)."""


def _newest_first(buf: np.ndarray) -> np.ndarray:
    """A left-padded ascending row buffer turned into newest-first, right-padded rows
    (reversing each row does exactly that)."""
    return np.ascontiguousarray(buf[:, ::-1])


def _sample_pool(ctx: FeedContext, agents: np.ndarray, pool: np.ndarray, k: int,
                 exclude: np.ndarray | None = None) -> np.ndarray:
    """k distinct posts per agent drawn uniformly from `pool`, skipping the agent's own."""
    out = np.full((len(agents), k), -1, dtype=np.int64)
    if not len(pool) or not len(agents):
        return out
    authors = ctx.posts.author[pool]
    rows = np.arange(len(agents))
    for attempt in range(4):  # widen the draw for the rare rows that stay short
        m = (3 + 4 * attempt) * k
        idx = (ctx.draws(agents[rows], m, attempt) * len(pool)).astype(np.int64)
        cand = pool[idx]
        valid = authors[idx] != agents[rows][:, None]
        if exclude is not None:
            valid &= (cand[:, :, None] != exclude[rows][:, None, :]).all(axis=2)
        picked = first_valid(cand, valid, k)
        out[rows] = picked
        short = (picked < 0).any(axis=1)
        # A row can only be filled if the pool holds enough posts not by that agent.
        possible = (authors[None, :] != agents[rows][:, None]).sum(axis=1) > (picked >= 0).sum(1)
        rows = rows[short & possible]
        if not len(rows):
            break
    return out


@RECOMMENDERS.register("following", config=FollowingRec, feed_order="newest first")
class FollowingFeed(Recommender):
    """Newest posts of followed accounts, newest first; optionally topped up with the
    newest posts platform-wide (not by the reader, not already shown)."""

    by_agent = True

    def __init__(self, cfg: FollowingRec):
        self.cfg = cfg

    def feeds(self, ctx: FeedContext, agents: np.ndarray) -> np.ndarray:
        k = ctx.platform.k
        feed = _newest_first(ctx.platform.inbox[agents])
        if self.cfg.fallback == "none":
            return feed
        have = count_valid(feed)
        short = np.nonzero(have < k)[0]
        width = 2 * k + 1
        while len(short):
            recent, exhausted = ctx.newest(width)
            rows = feed[short]
            top_up(rows, have[short], agents[short], recent, ctx.posts.author[recent])
            feed[short] = rows
            if exhausted:
                break
            have[short] = count_valid(rows)
            short = short[have[short] < k]
            width *= 4
        return feed


def top_up(rows: np.ndarray, have: np.ndarray, readers: np.ndarray, recent: np.ndarray,
           recent_author: np.ndarray) -> None:
    """Fill the empty tail of feed rows in place with the first of `recent` (newest first)
    that are not by the row's reader and not already in the row.

    Works column-major ([candidate, row]): one pass per candidate over all rows, which
    places it in every row that still has room and counts it there.
    """
    k = rows.shape[1]
    valid = recent_author[:, None] != readers[None, :]  # [m, S]
    # A row item can only repeat a candidate if it is at least as new as the oldest one.
    if len(recent):
        ri, ci = np.nonzero(rows >= recent.min())
        asc = recent[::-1]
        pos = np.searchsorted(asc, rows[ri, ci])
        hit = asc[np.minimum(pos, len(asc) - 1)] == rows[ri, ci]
        valid[len(asc) - 1 - pos[hit], ri[hit]] = False
    count = have.astype(np.intp)  # items in each row so far
    for i, post in enumerate(recent.tolist()):
        room = count < k
        if not room.any():
            break
        at = np.flatnonzero(room & valid[i])
        rows[at, count[at]] = post
        count[at] += 1


def hot_score(up: np.ndarray, down: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Reddit's hot score: sign(s)·log10(max(|s|, 1)) + t/45000, s = up − down."""
    s = up.astype(np.float64) - down
    return np.sign(s) * np.log10(np.maximum(np.abs(s), 1.0)) + seconds / 45000.0


@RECOMMENDERS.register("popularity", config=PopularityRec, feed_order="hot posts")
class PopularityFeed(Recommender):
    """A shared hot list (Reddit hot score over a recent window); each agent gets k of the
    top `pool_size`, sampled at random or the top ones, never their own."""

    by_agent = True

    def __init__(self, cfg: PopularityRec):
        self.cfg = cfg

    def pool(self, ctx: FeedContext) -> np.ndarray:
        """The top `pool_size` post ids by hot score, best first (ties: newer first)."""
        ids = ctx.window(self.cfg.window_rounds)
        seconds = ctx.posts.round[ids].astype(np.float64) * ctx.minutes_per_round * 60.0
        score = hot_score(ctx.posts.up[ids], ctx.posts.down[ids], seconds)
        order = np.lexsort((-ids, -score))[: self.cfg.pool_size]
        return ids[order]

    def feeds(self, ctx: FeedContext, agents: np.ndarray) -> np.ndarray:
        pool = self.pool(ctx)
        k = ctx.platform.k
        if self.cfg.sample == "random":
            return _sample_pool(ctx, agents, pool, k)
        cand = np.broadcast_to(pool, (len(agents), len(pool)))
        valid = ctx.posts.author[pool][None, :] != agents[:, None]
        return first_valid(cand, valid, k)


@RECOMMENDERS.register("random", config=RandomRec, feed_order="a random selection")
class RandomFeed(Recommender):
    """k distinct posts drawn uniformly from the last `window_rounds` rounds."""

    by_agent = True

    def __init__(self, cfg: RandomRec):
        self.cfg = cfg

    def feeds(self, ctx: FeedContext, agents: np.ndarray) -> np.ndarray:
        return _sample_pool(ctx, agents, ctx.window(self.cfg.window_rounds), ctx.platform.k)


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser: a cheap keyed hash for tie-breaking noise on big matrices."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@RECOMMENDERS.register("personalized", config=PersonalizedRec, feed_order="picked for you")
class PersonalizedFeed(Recommender):
    """Ranks candidates by stance similarity, interest match, recency, popularity and
    being in-network. Candidates: the hot pool of the window plus the agent's inbox.
    No model download; pure numpy, in chunks of agents."""

    by_agent = True

    CHUNK = 4096

    def __init__(self, cfg: PersonalizedRec):
        self.cfg = cfg
        self._hot = PopularityFeed(PopularityRec(kind="popularity", pool_size=cfg.pool_size,
                                                 window_rounds=cfg.window_rounds))

    def feeds(self, ctx: FeedContext, agents: np.ndarray) -> np.ndarray:
        k = ctx.platform.k
        out = np.full((len(agents), k), -1, dtype=np.int64)
        if not ctx.posts.n:
            return out
        pool = self._hot.pool(ctx)
        # Popularity is scaled by the window's most popular post: one constant for everyone,
        # so an agent's ranking never depends on which other agents share its chunk.
        window = ctx.window(self.cfg.window_rounds)
        net = ctx.posts.up[window] - ctx.posts.down[window]
        self._pop_scale = np.log1p(max(int(net.max(initial=0)), 1))
        for start in range(0, len(agents), self.CHUNK):
            chunk = agents[start:start + self.CHUNK]
            inbox = ctx.platform.inbox[chunk]
            cand = np.concatenate([np.broadcast_to(pool, (len(chunk), len(pool))), inbox], 1)
            in_net = np.zeros(cand.shape, dtype=bool)
            in_net[:, len(pool):] = inbox >= 0
            valid = cand >= 0
            valid &= ctx.posts.get("author", cand) != chunk[:, None]
            score = self._score(ctx, chunk, np.where(valid, cand, -1), in_net)
            score[~valid] = -np.inf
            order = np.argsort(-score, axis=1, kind="stable")
            ranked = np.take_along_axis(cand, order, axis=1)
            ok = np.take_along_axis(valid, order, axis=1)
            out[start:start + len(chunk)] = first_valid(ranked, ok, k)
        return out

    def _score(self, ctx: FeedContext, agents: np.ndarray, cand: np.ndarray,
               in_net: np.ndarray) -> np.ndarray:
        c = self.cfg
        ids = np.maximum(cand, 0)  # invalid slots are scored but masked out by the caller
        stance = ctx.posts.stance[ids]  # [A, C, T]
        addressed = ~np.isnan(stance)
        n_addr = addressed.sum(axis=2)
        pos = ctx.position[agents][:, None, :]
        dist = np.where(addressed, np.abs(pos - np.nan_to_num(stance)), 0.0).sum(axis=2)
        # Same agreement as the rule policy: a post that takes no stance is neutral (0.5).
        similarity = np.where(n_addr > 0, 1.0 - dist / np.maximum(n_addr, 1) / 2.0, 0.5)
        interest = (ctx.interests[agents][:, None, :] * addressed).sum(axis=2)
        age = ctx.round - ctx.posts.round[ids]
        recency = 0.5 ** (age / c.recency_halflife_rounds)
        net = np.maximum(ctx.posts.up[ids] - ctx.posts.down[ids], 0)
        popularity = np.minimum(1.0, np.log1p(net) / self._pop_scale)
        score = (c.stance_weight * similarity + c.interest_weight * interest
                 + c.recency_weight * recency + c.popularity_weight * popularity
                 + c.in_network_weight * in_net)
        if c.explore > 0:
            key = (agents.astype(np.uint64)[:, None] * np.uint64(0x9E3779B97F4A7C15)
                   ^ ids.astype(np.uint64) * np.uint64(0xD1B54A32D192ED03)
                   ^ np.uint64((ctx.rng.seed * 1000003 + ctx.round) & 0xFFFFFFFFFFFFFFFF))
            noise = (_mix64(key) >> np.uint64(11)).astype(np.float64) / 2.0**53
            score = score + c.explore * noise
        return score


@RECOMMENDERS.register("algorithmic_bias", config=AlgorithmicBiasRec, feed_order="picked for you")
class AlgorithmicBiasFeed(Recommender):
    """Feeds drawn with Sîrbu et al.'s bias towards posts close to the reader's opinion:
    weighted sampling without replacement by the Gumbel-top-k trick, one keyed uniform per
    (agent, candidate), so a feed never depends on shards or on other agents."""

    by_agent = True

    CHUNK = 4096

    def __init__(self, cfg: AlgorithmicBiasRec):
        self.cfg = cfg

    def feeds(self, ctx: FeedContext, agents: np.ndarray) -> np.ndarray:
        c, k = self.cfg, ctx.platform.k
        out = np.full((len(agents), k), -1, dtype=np.int64)
        pool = ctx.window(c.window_rounds)[-c.pool_size:]
        if not len(pool) or not len(agents):
            return out
        stance = ctx.posts.stance[pool]  # [C, T]
        addressed = ~np.isnan(stance)
        n_addr = addressed.sum(axis=1)
        authors = ctx.posts.author[pool]
        for start in range(0, len(agents), self.CHUNK):
            chunk = agents[start:start + self.CHUNK]
            gap = np.abs(ctx.position[chunk][:, None, :] - np.nan_to_num(stance)[None])
            dist = np.where(n_addr > 0, (gap * addressed).sum(axis=2)
                            / np.maximum(n_addr, 1), 1.0)
            log_w = -c.gamma * np.log(np.maximum(dist, c.min_distance))
            u = ctx.draws(chunk, len(pool))
            key = log_w - np.log(-np.log(np.clip(u, 1e-300, 1.0 - 1e-16)))  # + Gumbel
            key[authors[None, :] == chunk[:, None]] = -np.inf  # never one's own posts
            top = np.argsort(-key, axis=1, kind="stable")[:, :k]
            picked = pool[top]
            picked[np.take_along_axis(key, top, axis=1) == -np.inf] = -1
            out[start:start + len(chunk), :picked.shape[1]] = picked
        return out


def make_recommender(cfg: BaseModel) -> Recommender:
    """The recommender for a platform's `recommender` config (any registered one)."""
    return RECOMMENDERS.create(cfg)

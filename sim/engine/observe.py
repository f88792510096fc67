"""Step 3 of a round: feeds for every acting agent, gathered into what policies and belief
rules read. Everything here reads the world as of the end of the previous round."""

from __future__ import annotations

import numpy as np

from shoal.agents.observation import DecisionRequest, PlatformView
from shoal.beliefs.rules import Exposures
from shoal.core.counter_rng import CounterRNG
from shoal.core.keys import pack, unique_sorted
from shoal.engine.recommenders import FeedContext, Recommender
from shoal.world.world import World


def platform_view(world: World, name: str, agents: np.ndarray, feed: np.ndarray,
                  social: bool = True, trust: bool = True) -> PlatformView:
    """Gather the features of each feed item: author, kind, stance, votes; with `social`
    also whether the reader follows the author, already voted or reposted; with `trust`
    the reader's trust in the author. Features not asked for are left at their defaults
    (they cost a binary search per feed item). Each reader's language goes along."""
    plat = world.platforms[name]
    posts = world.posts
    valid = feed >= 0
    ids = feed[valid]  # gather only real items (the post table may be empty)
    readers = np.broadcast_to(agents[:, None], feed.shape)[valid]

    safe = np.where(valid, feed, 0)  # gather with a fancy index, then blank the gaps

    def gather(column: np.ndarray, fill, dtype) -> np.ndarray:
        if not len(ids):
            return np.full(feed.shape + column.shape[1:], fill, dtype=dtype)
        mask = valid.reshape(valid.shape + (1,) * (column.ndim - 1))
        return np.where(mask, column[safe], fill).astype(dtype, copy=False)

    author = gather(posts.author, -1, np.int64)
    follows = np.zeros(feed.shape, dtype=bool)
    voted = np.zeros(feed.shape, dtype=bool)
    reposted = np.zeros(feed.shape, dtype=bool)
    trust_of = np.full(feed.shape, world.trust.initial)
    if len(ids) and trust:
        trust_of[valid] = world.trust.get(readers, author[valid])
    if len(ids) and social:
        follows[valid] = plat.graph.is_following(readers, author[valid])
        keys = pack(readers, ids)
        voted[valid] = plat.votes.contains(keys)
        reposted[valid] = plat.reposts.contains(keys)
    # the writers' languages, for the texts policies write (None: all English)
    codes = world.population.language_codes()
    return PlatformView(
        platform=plat.code, name=name, agents=agents, feed=feed, author=author,
        kind=gather(posts.kind, -1, np.int8), stance=gather(posts.stance, np.nan, np.float64),
        up=gather(posts.up, 0, np.int32), down=gather(posts.down, 0, np.int32),
        follows_author=follows, trust=trust_of, voted=voted, reposted=reposted,
        language=None if codes is None else codes[1][agents],
        languages=() if codes is None else codes[0],
    )


def observe(world: World, round_: int, acting: dict[str, np.ndarray],
            recommenders: dict[str, Recommender], rng: CounterRNG, social: bool = True,
            trust: bool = True) -> list[PlatformView]:
    """Feeds and views for the acting agents of each platform (canonical platform order).
    `social` and `trust` say which per-item features someone will read."""
    views = []
    for name, agents in acting.items():
        ctx = FeedContext(
            round=round_, posts=world.posts, platform=world.platforms[name],
            position=world.beliefs.position, interests=world.population.interests, rng=rng,
            minutes_per_round=world.cfg.minutes_per_round,
        )
        if world.posts.n:
            feed = recommenders[name].feeds(ctx, agents)
        else:  # nothing posted yet: every feed is empty
            feed = np.full((len(agents), world.platforms[name].k), -1, dtype=np.int64)
        feed = pin_events(feed, agents, world, world.platforms[name].code, round_)
        views.append(platform_view(world, name, agents, feed, social, trust))
    return views


def pin_events(feed: np.ndarray, agents: np.ndarray, world: World, code: int, round_: int
               ) -> np.ndarray:
    """Put active breaking-news posts at the top of the targeted agents' feeds (newest
    event first); the feed keeps its length, so the last items drop out."""
    for event in reversed(world.interventions.active_events(round_)):
        post = event.post_ids.get(code)
        if post is None:
            continue
        if event.target is None:
            rows = np.arange(len(agents))
        else:  # agents who joined after the event fired are not in its target
            t = event.target
            rows = np.nonzero((agents < len(t)) & t[np.minimum(agents, len(t) - 1)])[0]
        if len(rows):
            feed[rows] = np.concatenate([np.full((len(rows), 1), post, np.int64),
                                         feed[rows, :-1]], axis=1)
    return feed


def decision_request(world: World, round_: int, views: list[PlatformView]) -> DecisionRequest:
    """The request shards get: views plus the beliefs of every acting agent."""
    agents = unique_sorted(np.concatenate([v.agents for v in views])) if views else (
        np.empty(0, dtype=np.int64))
    return DecisionRequest(
        round=round_, views=views, agents=agents,
        position=world.beliefs.position[agents], confidence=world.beliefs.confidence[agents],
        json_only=frozenset(world.json_only), outputs=dict(world.outputs),
        budget=world.context_budget(), model_tokens=dict(world.model_tokens or {}),
    )


def exposures(views: list[PlatformView]) -> Exposures:
    """Every acting agent's feed items across platforms, oldest (smallest id) first."""
    if not views:
        empty = np.empty((0, 0), dtype=np.int64)
        return Exposures(np.empty(0, np.int64), empty, empty.astype(np.int32),
                         empty.astype(np.int32), empty.astype(np.float64))
    if len(views) == 1 and _strictly_increasing(views[0].agents):
        v = views[0]  # one platform: its matrices are already one row per agent
        mats = (v.feed, v.up, v.down, v.trust)
        if v.feed.shape[1] and (v.feed[:, :-1] >= v.feed[:, 1:]).all():
            # Newest-first rows (the following feed): oldest first is each row reversed
            # (the padding entries are alike, so their order does not matter).
            return Exposures(v.agents, *(np.ascontiguousarray(m[:, ::-1]) for m in mats))
        agents = v.agents
    else:
        agents = unique_sorted(np.concatenate([v.agents for v in views]))
        width = sum(v.feed.shape[1] for v in views)
        mats = (np.full((len(agents), width), -1, dtype=np.int64),
                np.zeros((len(agents), width), dtype=np.int32),
                np.zeros((len(agents), width), dtype=np.int32),
                np.zeros((len(agents), width)))
        col = 0
        for v in views:
            rows = np.searchsorted(agents, v.agents)
            k = v.feed.shape[1]
            for out, part in zip(mats, (v.feed, v.up, v.down, v.trust), strict=True):
                out[rows, col:col + k] = part
            col += k
    order = np.argsort(mats[0], axis=1, kind="stable")  # -1 padding sorts to the left
    return Exposures(agents, *(np.take_along_axis(m, order, axis=1) for m in mats))


def _strictly_increasing(a: np.ndarray) -> bool:
    return bool((a[1:] > a[:-1]).all())


def empty_view(code: int, name: str, agents: np.ndarray, n_topics: int) -> PlatformView:
    """A view with no feed: the turn of agents on a platform whose engine shows them
    everything in their context (the market)."""
    n = len(agents)
    shape = (n, 0)
    return PlatformView(
        platform=code, name=name, agents=np.asarray(agents, np.int64),
        feed=np.full(shape, -1, np.int64), author=np.full(shape, -1, np.int64),
        kind=np.full(shape, -1, np.int8), stance=np.full((n, 0, n_topics), np.nan),
        up=np.zeros(shape, np.int32), down=np.zeros(shape, np.int32),
        follows_author=np.zeros(shape, bool), trust=np.zeros(shape),
        voted=np.zeros(shape, bool), reposted=np.zeros(shape, bool))

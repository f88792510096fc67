"""Step 3 of a round: feeds for every acting agent, gathered into what policies and belief
rules read. Everything here reads the world as of the end of the previous round."""

from __future__ import annotations

import numpy as np

from shoal.agents.observation import DecisionRequest, PlatformView
from shoal.beliefs.rules import Exposures
from shoal.core.counter_rng import CounterRNG
from shoal.core.keys import pack, unique_sorted
from shoal.core.registry import PluginError, calling, from_shoal
from shoal.core.rowsets import take_in_rows
from shoal.core.workers import SERIAL, Workers
from shoal.engine.recommenders import FeedContext, Recommender
from shoal.world.world import World


def new_view(world: World, name: str, agents: np.ndarray, k: int) -> PlatformView:
    """A platform's view of `agents` with feeds of width k, its arrays not yet filled
    (`fill_view` fills them, a range of rows at a time)."""
    n, shape = len(agents), (len(agents), k)
    codes = world.population.language_codes()  # the writers' languages (None: English)
    return PlatformView(
        platform=world.platforms[name].code, name=name, agents=agents,
        feed=np.empty(shape, np.int64), author=np.empty(shape, np.int64),
        kind=np.empty(shape, np.int8), stance=np.empty((n, k, len(world.topics))),
        up=np.empty(shape, np.int32), down=np.empty(shape, np.int32),
        follows_author=np.empty(shape, bool), trust=np.empty(shape),
        voted=np.empty(shape, bool), reposted=np.empty(shape, bool),
        language=None if codes is None else codes[1][agents],
        languages=() if codes is None else codes[0],
    )


def fill_view(world: World, view: PlatformView, rows: slice, feed: np.ndarray,
              social: bool = True, trust: bool = True, features: bool = True) -> None:
    """Write the feed of the view's `rows` and its items' features into the view: with
    `features` author, kind, stance, votes; with `social` also whether the reader follows
    the author, already voted or reposted; with `trust` the reader's trust in the author
    (both need `features`). Features not asked for are left at their defaults (they cost
    a read per feed item, and a binary search for the social ones and trust). Touches
    nothing outside those rows."""
    plat = world.platforms[view.name]
    posts = world.posts
    agents = view.agents[rows]
    view.feed[rows] = feed
    if not features:  # nobody reads them: their defaults, as for an empty slot
        for out, fill in ((view.author, -1), (view.kind, -1), (view.stance, np.nan),
                          (view.up, 0), (view.down, 0), (view.follows_author, False),
                          (view.voted, False), (view.reposted, False),
                          (view.trust, world.trust.initial)):
            out[rows] = fill
        return
    valid = feed >= 0
    ids = feed[valid]  # gather only real items (the post table may be empty)
    safe = np.where(valid, feed, 0)  # gather with a fancy index, then blank the gaps
    invalid = ~valid

    def gather(column: np.ndarray, out: np.ndarray, fill) -> None:
        if not len(ids):
            out[...] = fill
            return
        if column.dtype == out.dtype:
            np.take(column, safe, axis=0, out=out)
        else:
            out[...] = column[safe]
        out[invalid] = fill

    gather(posts.author, view.author[rows], -1)
    gather(posts.kind, view.kind[rows], -1)
    gather(posts.stance, view.stance[rows], np.nan)
    gather(posts.up, view.up[rows], 0)
    gather(posts.down, view.down[rows], 0)
    author = view.author[rows]
    for out in (view.follows_author, view.voted, view.reposted):
        out[rows] = False
    view.trust[rows] = world.trust.initial
    if not len(ids):
        return
    readers = np.broadcast_to(agents[:, None], feed.shape)[valid]
    if trust:
        view.trust[rows][valid] = world.trust.get(readers, author[valid])
    if social:
        view.follows_author[rows][valid] = plat.graph.is_following(readers, author[valid])
        keys = pack(readers, ids)
        view.voted[rows][valid] = plat.votes.contains(keys)
        view.reposted[rows][valid] = plat.reposts.contains(keys)


def observe(world: World, round_: int, acting: dict[str, np.ndarray],
            recommenders: dict[str, Recommender], rng: CounterRNG, social: bool = True,
            trust: bool = True, workers: Workers = SERIAL, features: bool = True
            ) -> list[PlatformView]:
    """Feeds and views for the acting agents of each platform (canonical platform order).
    `features`, `social` and `trust` say which per-item features someone will read
    (`fill_view`). With several
    `workers` each range of agents gets its feeds and features on its own thread (a
    recommender that is not `by_agent` builds all its feeds in one call first)."""
    views = []
    for name, agents in acting.items():
        plat = world.platforms[name]
        rec = recommenders[name]
        position = world.beliefs.position
        if not from_shoal(rec):  # (what a plug-in reads, it may not write)
            position = position.view()
            position.flags.writeable = False
        ctx = FeedContext(
            round=round_, posts=world.posts, platform=plat,
            position=position, interests=world.population.interests, rng=rng,
            minutes_per_round=world.cfg.minutes_per_round,
        )
        view = new_view(world, name, agents, plat.k)

        def feeds(part: np.ndarray, rec=rec, ctx=ctx, plat=plat, name=name) -> np.ndarray:
            if not world.posts.n:  # nothing posted yet: every feed is empty
                return np.full((len(part), plat.k), -1, dtype=np.int64)
            what = f"recommender {rec_kind(world, name)!r} of platforms.{name}"
            with calling(what, rec, round_):
                feed = rec.feeds(ctx, part)
            if not from_shoal(rec):
                check_feeds(feed, part, world, plat.code, plat.k, what, round_)
            elif feed.shape != (len(part), plat.k):
                raise ValueError(f"platforms.{name}.recommender ({type(rec).__name__}): "
                                 f"feeds must be [agents, {plat.k}], got {feed.shape}")
            return pin_events(feed, part, world, plat.code, round_)

        whole = None if rec.by_agent else feeds(agents)

        def fill(rows: slice, view=view, feeds=feeds, whole=whole) -> None:
            feed = feeds(view.agents[rows]) if whole is None else whole[rows]
            fill_view(world, view, rows, feed, social, trust, features)

        workers.over(len(agents), fill)
        views.append(view)
    return views


def rec_kind(world: World, platform: str) -> str:
    """The `kind` of a platform's configured recommender (for messages)."""
    return str(getattr(getattr(world.cfg.platforms.get(platform), "recommender", None),
                       "kind", "?"))


def check_feeds(feed: object, agents: np.ndarray, world: World, code: int, k: int, what: str,
                round_: int) -> None:
    """A plug-in recommender's feeds are what the engine reads them as: an integer array
    [agents, k] of existing posts of this platform (-1: an empty slot), none twice in a
    feed. Anything else would be logged as exposures and acted on as it stands."""
    def wrong(problem: str) -> PluginError:
        return PluginError(f"round {round_}: the {what} returned feeds that {problem}. "
                           f"Nothing of round {round_} was kept.")

    if not isinstance(feed, np.ndarray) or feed.dtype.kind not in "iu":
        kind = feed.dtype if isinstance(feed, np.ndarray) else type(feed).__name__
        raise wrong(f"are not an integer array (got {kind})")
    if feed.shape != (len(agents), k):
        raise wrong(f"are not [agents, feed_size] = [{len(agents)}, {k}] (got "
                    f"{list(feed.shape)})")
    shown = feed[feed != -1]
    if shown.size and (shown.min() < 0 or shown.max() >= world.posts.n):
        bad = int(shown[(shown < 0) | (shown >= world.posts.n)][0])
        raise wrong(f"name post {bad}, which does not exist (ids are 0..{world.posts.n - 1}"
                    ", -1 for an empty slot)")
    other = shown[world.posts.platform[shown] != code]
    if other.size:
        raise wrong(f"show post {int(other[0])}, which is another platform's")
    ordered = np.sort(feed, axis=1)
    twice = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] != -1)
    if twice.any():
        row = int(np.argwhere(twice)[0][0])
        raise wrong(f"show a post twice in one feed (agent {int(agents[row])}'s: "
                    f"{feed[row].tolist()})")


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


def decision_request(world: World, round_: int, views: list[PlatformView],
                     workers: Workers = SERIAL) -> DecisionRequest:
    """The request shards get: views plus the beliefs of every acting agent (copied a
    range of agents per worker)."""
    agents = unique_sorted(np.concatenate([v.agents for v in views])) if views else (
        np.empty(0, dtype=np.int64))
    b = world.beliefs
    position = np.empty((len(agents), b.position.shape[1]), b.position.dtype)
    confidence = np.empty((len(agents), b.confidence.shape[1]), b.confidence.dtype)

    def gather(rows: slice) -> None:
        np.take(b.position, agents[rows], axis=0, out=position[rows])
        np.take(b.confidence, agents[rows], axis=0, out=confidence[rows])

    workers.over(len(agents), gather)
    return DecisionRequest(
        round=round_, views=views, agents=agents, position=position, confidence=confidence,
        json_only=frozenset(world.json_only), outputs=dict(world.outputs),
        budget=world.context_budget(), model_tokens=dict(world.model_tokens or {}),
    )


def exposures(views: list[PlatformView], workers: Workers = SERIAL, features: bool = True
              ) -> tuple[Exposures, int]:
    """Every acting agent's feed items across platforms, oldest (smallest id) first (rows
    sorted a range of agents per worker), and how many real items they hold (counted in
    those ranges, not in another pass over every item). `features=False` (nobody reads the
    items' votes and trust, which were then not gathered): those are read-only zeros, not
    reordered."""
    if not views:
        empty = np.empty((0, 0), dtype=np.int64)
        return Exposures(np.empty(0, np.int64), empty, empty.astype(np.int32),
                         empty.astype(np.int32), empty.astype(np.float64)), 0
    n_mats = 4 if features else 1  # feed, up, down, trust

    def matrices(v: PlatformView) -> tuple[np.ndarray, ...]:
        return (v.feed, v.up, v.down, v.trust)[:n_mats]

    one = len(views) == 1 and _strictly_increasing(views[0].agents)
    if one:  # one platform: its matrices are already one row per agent
        agents, mats = views[0].agents, matrices(views[0])
    else:
        agents = unique_sorted(np.concatenate([v.agents for v in views]))
        width = sum(v.feed.shape[1] for v in views)
        mats = tuple(np.full((len(agents), width), fill, dtype=dtype) for fill, dtype in
                     ((-1, np.int64), (0, np.int32), (0, np.int32), (0, np.float64))[:n_mats])
        col = 0
        for v in views:
            rows = np.searchsorted(agents, v.agents)
            k = v.feed.shape[1]
            for out, part in zip(mats, matrices(v), strict=True):
                out[rows, col:col + k] = part
            col += k
    out = tuple(np.empty_like(m) for m in mats)

    def oldest_first(rows: slice) -> int:
        feed = mats[0][rows]
        if one and feed.shape[1] and (feed[:, :-1] >= feed[:, 1:]).all():
            # Newest-first rows (the following feed): oldest first is each row reversed
            # (one view's padding entries are alike, so their order does not matter).
            for o, m in zip(out, mats, strict=True):
                o[rows] = m[rows][:, ::-1]
        else:
            order = np.argsort(feed, axis=1, kind="stable")  # -1 padding sorts to the left
            take_in_rows(tuple(m[rows] for m in mats), order, tuple(o[rows] for o in out))
        return int(np.count_nonzero(feed >= 0))

    n_items = sum(workers.over(len(agents), oldest_first))
    if not features:
        shape = out[0].shape
        out = (out[0], np.broadcast_to(np.int32(0), shape), np.broadcast_to(np.int32(0), shape),
               np.broadcast_to(0.0, shape))
    return Exposures(agents, *out), n_items


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

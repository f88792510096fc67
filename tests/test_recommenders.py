"""Tests for feeds (sim.recommenders) and the platform indexes they read (sim.platform),
against brute-force scans of the post table.

Worlds are small (`build_world` from a minimal config); posts are appended by hand round by
round, indexed with `Platform.index_new_posts` (agents whose follows changed are rebuilt), and
follows change at random through the graph, as `sim.apply` does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from shoal.config import parse_config
from shoal.core.counter_rng import CounterRNG
from shoal.core.posts import NewPosts, PostKind
from shoal.engine.recommenders import (
    AlgorithmicBiasFeed,
    AlgorithmicBiasRec,
    FeedContext,
    FollowingFeed,
    FollowingRec,
    PersonalizedFeed,
    PersonalizedRec,
    PopularityFeed,
    PopularityRec,
    RandomFeed,
    RandomRec,
    hot_score,
)
from shoal.world.platform import Platform
from shoal.world.world import World, build_world

SEEDS = [0, 1, 2, 3]
TOPICS = ["alpha", "beta"]
# Feedable kinds, as the platforms define them (Reddit feeds show submissions only).
KINDS = {"twitter": {PostKind.POST, PostKind.REPOST, PostKind.QUOTE, PostKind.REPLY},
         "reddit": {PostKind.POST}}
# --------------------------------------------------------------------------- world building


def make_world(seed: int, n: int = 40, k_twitter: int = 6, k_reddit: int = 5,
               graph: dict | None = None) -> World:
    """A small two-platform world with an initial random follow graph."""
    cfg = parse_config({
        "seed": seed, "rounds": 10, "population": {"size": n}, "topics": TOPICS,
        "platforms": {"twitter": {"feed_size": k_twitter}, "reddit": {"feed_size": k_reddit}},
        "graph": graph or {"kind": "random", "mean_degree": 3},
    })
    return build_world(cfg)


def random_posts(world: World, rng: np.random.Generator, m: int,
                 authors: np.ndarray | None = None) -> NewPosts:
    """m posts in canonical (platform, author) order, of mixed kinds, with parents."""
    n_topics = len(TOPICS)
    platform = rng.integers(0, 2, m)
    author = authors if authors is not None else rng.integers(0, world.n_agents, m)
    order = np.lexsort((author, platform))
    platform, author = platform[order], author[order]
    kind = np.full(m, int(PostKind.POST))
    parent = np.full(m, -1)
    existing = world.posts.platform[: world.posts.n]
    for i in range(m):
        older = np.nonzero(existing == platform[i])[0]
        if len(older) and rng.random() < 0.4:
            parent[i] = rng.choice(older)
            kind[i] = (PostKind.COMMENT if platform[i] == 1 else
                       rng.choice([PostKind.REPOST, PostKind.QUOTE, PostKind.REPLY]))
    stance = rng.uniform(-1, 1, (m, n_topics))
    stance[rng.random((m, n_topics)) < 0.4] = np.nan
    none = np.isnan(stance).all(axis=1)
    stance[none, 0] = rng.uniform(-1, 1, none.sum())
    return NewPosts(platform=platform.astype(np.int8), author=author.astype(np.int32),
                    kind=kind.astype(np.int8), parent=parent.astype(np.int64), stance=stance,
                    text=[f"p{i}" for i in range(m)])


def churn_follows(world: World, rng: np.random.Generator, m: int) -> dict[str, np.ndarray]:
    """Random follows and unfollows per platform; returns agents whose followees changed."""
    changed = {}
    for plat in world.platforms.values():
        src, dst = rng.integers(0, world.n_agents, m), rng.integers(0, world.n_agents, m)
        keep = src != dst
        src, dst = src[keep], dst[keep]
        fol = rng.random(len(src)) < 0.6
        added = plat.graph.follow(src[fol], dst[fol])
        removed = plat.graph.unfollow(src[~fol], dst[~fol])
        changed[plat.name] = np.unique(np.concatenate([src[fol][added], src[~fol][removed]]))
    return changed


def index(world: World, ids: np.ndarray, changed: dict[str, np.ndarray]) -> None:
    """Index a round's new posts on each platform (feedable kinds only, as apply does)."""
    posts = world.posts
    for plat in world.platforms.values():
        mine = ids[(posts.platform[ids] == plat.code)
                   & np.isin(posts.kind[ids], [int(x) for x in KINDS[plat.name]])]
        plat.index_new_posts(mine, posts.author[mine].astype(np.int64),
                             changed.get(plat.name, np.empty(0, np.int64)))


def play_round(world: World, rng: np.random.Generator, r: int, max_posts: int = 15,
               churn: int = 6) -> None:
    """One round: follow churn, new posts (indexed), random votes on existing posts."""
    changed = churn_follows(world, rng, churn)
    ids = world.posts.append(random_posts(world, rng, int(rng.integers(0, max_posts))), r)
    index(world, ids, changed)
    n = world.posts.n
    if n:
        hit = rng.integers(0, n, 3 * n // 4 + 1)
        np.add.at(world.posts.up, hit, rng.integers(0, 4, len(hit)))
        np.add.at(world.posts.down, hit, rng.integers(0, 3, len(hit)))
    world.round = r


def ctx_for(world: World, name: str, round_: int, position: np.ndarray | None = None,
            minutes: int | None = None) -> FeedContext:
    """The FeedContext a driver would build at the start of `round_`."""
    return FeedContext(
        round=round_, posts=world.posts, platform=world.platforms[name],
        position=world.beliefs.position if position is None else position,
        interests=world.population.interests, rng=CounterRNG(world.cfg.seed),
        minutes_per_round=minutes or world.cfg.minutes_per_round,
    )


# --------------------------------------------------------------------------- brute force


def feedable_ids(world: World, plat: Platform) -> list[int]:
    """All feedable post ids of a platform, ascending."""
    p = world.posts
    return [i for i in range(p.n)
            if p.platform[i] == plat.code and PostKind(int(p.kind[i])) in KINDS[plat.name]]


def followees_of(plat: Platform) -> dict[int, set[int]]:
    """Current followees of every agent."""
    out: dict[int, set[int]] = {a: set() for a in range(plat.graph.n_agents)}
    for s, d in zip(*(x.tolist() for x in plat.graph.edge_arrays()), strict=True):
        out[s].add(d)
    return out


def left_buffer(ids: list[int], k: int) -> list[int]:
    """Row-buffer form: the k largest ids ascending, -1 padded on the left."""
    top = sorted(ids)[-k:]
    return [-1] * (k - len(top)) + top


def brute_recent(world: World, plat: Platform) -> np.ndarray:
    """Per author, their k newest feedable posts on the platform."""
    ids = feedable_ids(world, plat)
    author = world.posts.author
    return np.array([left_buffer([i for i in ids if author[i] == a], plat.k)
                     for a in range(world.n_agents)], dtype=np.int64)


def brute_inbox(world: World, plat: Platform) -> np.ndarray:
    """Per reader, the k newest feedable posts of their current followees."""
    ids = feedable_ids(world, plat)
    author = world.posts.author
    fol = followees_of(plat)
    return np.array([left_buffer([i for i in ids if int(author[i]) in fol[a]], plat.k)
                     for a in range(world.n_agents)], dtype=np.int64)


def newest_first(row: list[int], k: int) -> list[int]:
    """Real ids newest first, -1 padded on the right."""
    ids = sorted((i for i in row if i >= 0), reverse=True)[:k]
    return ids + [-1] * (k - len(ids))


def brute_following(world: World, plat: Platform, agents: np.ndarray, fallback: bool
                    ) -> np.ndarray:
    """Workload W's read-phase feed: followees' k newest, newest first, then (fallback) the
    newest platform posts not by the reader and not already in the feed."""
    k = plat.k
    inbox = brute_inbox(world, plat)
    ids = feedable_ids(world, plat)[::-1]
    rows = []
    for a in agents.tolist():
        feed = [i for i in newest_first(inbox[a].tolist(), k) if i >= 0]
        if fallback:
            for i in ids:
                if len(feed) >= k:
                    break
                if world.posts.author[i] != a and i not in feed:
                    feed.append(i)
        rows.append(feed + [-1] * (k - len(feed)))
    return np.array(rows, dtype=np.int64).reshape(len(agents), k)


def brute_hot_pool(world: World, plat: Platform, round_: int, window: int, pool_size: int,
                   minutes: int) -> list[int]:
    """Feedable posts of rounds >= round_ - window, by Reddit hot score (ties: newer first)."""
    p = world.posts
    scored = []
    for i in feedable_ids(world, plat):
        if p.round[i] < round_ - window:
            continue
        s = int(p.up[i]) - int(p.down[i])
        sign = (s > 0) - (s < 0)
        score = sign * math.log10(max(abs(s), 1)) + int(p.round[i]) * minutes * 60.0 / 45000.0
        scored.append((-score, -i, i))
    return [i for _, _, i in sorted(scored)][:pool_size]


def install_true_indexes(world: World) -> None:
    """Replace the maintained recent/inbox buffers by their brute-force values."""
    for plat in world.platforms.values():
        plat.recent = brute_recent(world, plat)
        plat.inbox = brute_inbox(world, plat)


def played_world(seed: int, rounds: int = 8, **kw) -> tuple[World, np.random.Generator]:
    """A world after `rounds` random rounds."""
    world = make_world(seed, **kw)
    rng = np.random.default_rng(seed + 100)
    for r in range(1, rounds + 1):
        play_round(world, rng, r)
    return world, rng


def assert_feed_basics(world: World, name: str, agents: np.ndarray, feed: np.ndarray,
                       round_: int) -> None:
    """Shape, right padding, distinct ids, the platform's feedable posts only, never the
    reader's own, and nothing from round `round_` or later (snapshot)."""
    plat = world.platforms[name]
    p = world.posts
    assert feed.shape == (len(agents), plat.k)
    for a, row in zip(agents.tolist(), feed.tolist(), strict=True):
        real = [i for i in row if i >= 0]
        assert row == real + [-1] * (len(row) - len(real)), "padding must be on the right"
        assert len(set(real)) == len(real)
        for i in real:
            assert 0 <= i < p.n
            assert p.platform[i] == plat.code
            assert PostKind(int(p.kind[i])) in KINDS[name]
            assert p.author[i] != a
            assert p.round[i] < round_


# --------------------------------------------------------------------------- platform indexes


@pytest.mark.parametrize("seed", SEEDS[:2])
@pytest.mark.parametrize("index, brute", [("recent", brute_recent), ("inbox", brute_inbox)])
def test_platform_indexes_match_brute_force_under_follow_churn(seed: int, index: str,
                                                                 brute) -> None:
    """After every round, Platform.recent holds each author's k newest feedable posts and
    Platform.inbox 'the k newest posts of my current followees' (push for unchanged
    readers, pull for readers whose follows changed)."""
    world = make_world(seed)
    rng = np.random.default_rng(seed)
    for r in range(1, 8):
        play_round(world, rng, r)
        for plat in world.platforms.values():
            np.testing.assert_array_equal(getattr(plat, index), brute(world, plat))


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_following_feed_equals_brute_force_every_round(seed: int) -> None:
    """With the engine-maintained inbox, the following feed (with and without fallback) is
    the brute-force feed at the start of every round."""
    world = make_world(seed)
    rng = np.random.default_rng(seed)
    agents = np.arange(world.n_agents)
    for r in range(1, 8):
        for name, plat in world.platforms.items():
            for fb in ("none", "recent"):
                got = FollowingFeed(FollowingRec(kind="following", fallback=fb)).feeds(
                    ctx_for(world, name, r), agents)
                np.testing.assert_array_equal(
                    got, brute_following(world, plat, agents, fb == "recent"))
        play_round(world, rng, r)


@pytest.mark.parametrize("seed", SEEDS)
def test_pull_inbox_from_true_author_buffers(seed: int) -> None:
    """pull_inbox, given correct author buffers, is the k newest posts of the followees,
    for any subset of readers in any order."""
    world, rng = played_world(seed)
    for plat in world.platforms.values():
        plat.recent = brute_recent(world, plat)
        truth = brute_inbox(world, plat)
        rows = rng.permutation(world.n_agents)[:25]
        np.testing.assert_array_equal(plat.pull_inbox(rows), truth[rows])
        np.testing.assert_array_equal(plat.pull_inbox(np.empty(0, np.int64)),
                                      np.empty((0, plat.k), np.int64))


# --------------------------------------------------------------------------- following feed


@pytest.mark.parametrize("seed", SEEDS)
def test_following_feed_is_inbox_newest_first(seed: int) -> None:
    """fallback 'none': the inbox, newest first, padded right; nothing else."""
    world, _ = played_world(seed)
    install_true_indexes(world)
    agents = np.arange(world.n_agents)
    for name, plat in world.platforms.items():
        got = FollowingFeed(FollowingRec(kind="following")).feeds(ctx_for(world, name, 9),
                                                                  agents)
        np.testing.assert_array_equal(got, brute_following(world, plat, agents, False))
        assert_feed_basics(world, name, agents, got, 9)


@pytest.mark.parametrize("seed", SEEDS)
def test_following_fallback_recent_matches_workload_w(seed: int) -> None:
    """fallback 'recent' tops short feeds up with the newest platform posts not by the
    reader and not already shown (sparse graph: most readers need it)."""
    world = make_world(seed, graph={"kind": "none"})
    rng = np.random.default_rng(seed)
    for r in range(1, 7):
        play_round(world, rng, r, churn=10)
    install_true_indexes(world)
    agents = np.sort(rng.permutation(world.n_agents)[:30])
    for name, plat in world.platforms.items():
        got = FollowingFeed(FollowingRec(kind="following", fallback="recent")).feeds(
            ctx_for(world, name, 7), agents)
        np.testing.assert_array_equal(got, brute_following(world, plat, agents, True))
        assert_feed_basics(world, name, agents, got, 7)
        # Fallback fills every feed whenever the platform has enough posts by others.
        others = [sum(1 for i in feedable_ids(world, plat) if world.posts.author[i] != a)
                  for a in agents.tolist()]
        assert ((got >= 0).sum(1) == np.minimum(plat.k, others)).all()


def test_fallback_skips_many_own_and_non_feedable_posts() -> None:
    """The fallback widens its look-back past the reader's own newest posts and past Reddit
    comments (not feedable) at the tail of the post list."""
    world = make_world(5, n=10, graph={"kind": "none"}, k_twitter=3, k_reddit=3)
    p = world.posts
    old = NewPosts(platform=np.array([0, 0, 1, 1], np.int8), author=np.array([1, 2, 1, 2],
                   np.int32), kind=np.zeros(4, np.int8), parent=np.full(4, -1),
                   stance=np.zeros((4, 2)), text=[""] * 4)
    index(world, p.append(old, 1), {})
    m = 40  # agent 0 writes the 40 newest twitter posts; reddit gets 40 comments
    spam = NewPosts(platform=np.repeat(np.array([0, 1], np.int8), m),
                    author=np.zeros(2 * m, np.int32),
                    kind=np.repeat(np.array([PostKind.POST, PostKind.COMMENT], np.int8), m),
                    parent=np.repeat(np.array([-1, 2]), m), stance=np.zeros((2 * m, 2)),
                    text=[""] * (2 * m))
    index(world, p.append(spam, 2), {})
    install_true_indexes(world)
    rec = FollowingFeed(FollowingRec(kind="following", fallback="recent"))
    agents = np.array([0, 3])
    tw = rec.feeds(ctx_for(world, "twitter", 3), agents)
    assert tw[0].tolist() == [1, 0, -1]  # only the two older posts are by someone else
    assert tw[1].tolist() == [4 + m - 1, 4 + m - 2, 4 + m - 3]
    rd = rec.feeds(ctx_for(world, "reddit", 3), agents)
    assert rd.tolist() == [[3, 2, -1], [3, 2, -1]]  # comments never fill a reddit feed
    for name, feed in (("twitter", tw), ("reddit", rd)):
        np.testing.assert_array_equal(
            feed, brute_following(world, world.platforms[name], agents, True))


def test_fallback_with_no_posts_is_empty() -> None:
    """With an empty post table every following feed is empty."""
    world = make_world(1, n=8)
    got = FollowingFeed(FollowingRec(kind="following", fallback="recent")).feeds(
        ctx_for(world, "twitter", 1), np.arange(8))
    np.testing.assert_array_equal(got, np.full((8, 6), -1))


# --------------------------------------------------------------------------- popularity


@pytest.mark.parametrize("seed", SEEDS)
def test_popularity_pool_is_hot_score_over_window(seed: int) -> None:
    """The pool is the window's feedable posts ordered by Reddit hot score, best first,
    newer first on ties, cut to pool_size; older posts are excluded."""
    world, _ = played_world(seed, rounds=10)
    for name, plat in world.platforms.items():
        for window, pool_size, minutes in ((3, 100, 60), (6, 12, 7), (50, 1000, 1)):
            rec = PopularityFeed(PopularityRec(kind="popularity", window_rounds=window,
                                               pool_size=pool_size))
            ctx = ctx_for(world, name, 11, minutes=minutes)
            pool = rec.pool(ctx)
            expected = brute_hot_pool(world, plat, 11, window, pool_size, minutes)
            assert pool.tolist() == expected
            assert (world.posts.round[pool] >= 11 - window).all()


def test_hot_score_values() -> None:
    """hot_score is sign(s) log10(max(|s|, 1)) + seconds / 45000."""
    up, down = np.array([10, 0, 3, 1]), np.array([0, 100, 3, 0])
    sec = np.array([0.0, 45000.0, 90000.0, 4500.0])
    np.testing.assert_allclose(hot_score(up, down, sec), [1.0, -2.0 + 1.0, 2.0, 0.1],
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_popularity_top_is_top_k_without_own(seed: int) -> None:
    """sample 'top': each agent gets the first k pool posts not written by itself."""
    world, _ = played_world(seed, rounds=10)
    agents = np.arange(world.n_agents)
    for name, plat in world.platforms.items():
        rec = PopularityFeed(PopularityRec(kind="popularity", window_rounds=4, pool_size=15,
                                           sample="top"))
        ctx = ctx_for(world, name, 11)
        got = rec.feeds(ctx, agents)
        pool = brute_hot_pool(world, plat, 11, 4, 15, 60)
        for a in agents.tolist():
            mine = [i for i in pool if world.posts.author[i] != a][: plat.k]
            assert got[a].tolist() == mine + [-1] * (plat.k - len(mine))
        assert_feed_basics(world, name, agents, got, 11)


@pytest.mark.parametrize("seed", SEEDS)
def test_popularity_random_sample(seed: int) -> None:
    """sample 'random': k distinct pool posts, never own, full whenever the pool allows it;
    an agent's feed does not depend on the other agents in the call; feeds vary."""
    world, rng = played_world(seed, rounds=10)
    agents = np.arange(world.n_agents)
    for name, plat in world.platforms.items():
        rec = PopularityFeed(PopularityRec(kind="popularity", window_rounds=5, pool_size=20))
        ctx = ctx_for(world, name, 11)
        got = rec.feeds(ctx, agents)
        pool = set(brute_hot_pool(world, plat, 11, 5, 20, 60))
        assert_feed_basics(world, name, agents, got, 11)
        for a in agents.tolist():
            real = [i for i in got[a].tolist() if i >= 0]
            assert set(real) <= pool
            others = sum(1 for i in pool if world.posts.author[i] != a)
            assert len(real) == min(plat.k, others)
        sub = rng.permutation(agents)[:7]
        np.testing.assert_array_equal(rec.feeds(ctx, sub), got[sub])
        if len(pool) > plat.k + 2:
            assert len({tuple(row) for row in got.tolist()}) > 1


# --------------------------------------------------------------------------- random feed


@pytest.mark.parametrize("seed", SEEDS)
def test_random_feed_distinct_in_window_never_own(seed: int) -> None:
    """k distinct posts from the last window_rounds rounds, never the reader's own, full when
    the window has enough; independent of the other agents in the call."""
    world, rng = played_world(seed, rounds=10)
    agents = np.arange(world.n_agents)
    for name, plat in world.platforms.items():
        for window in (1, 3, 20):
            rec = RandomFeed(RandomRec(kind="random", window_rounds=window))
            ctx = ctx_for(world, name, 11)
            got = rec.feeds(ctx, agents)
            assert_feed_basics(world, name, agents, got, 11)
            pool = [i for i in feedable_ids(world, plat) if world.posts.round[i] >= 11 - window]
            for a in agents.tolist():
                real = [i for i in got[a].tolist() if i >= 0]
                assert set(real) <= set(pool)
                others = sum(1 for i in pool if world.posts.author[i] != a)
                assert len(real) == min(plat.k, others)
            sub = np.sort(rng.permutation(agents)[:9])[::-1]
            np.testing.assert_array_equal(rec.feeds(ctx, sub), got[sub])


# --------------------------------------------------------------------------- personalized


@pytest.mark.parametrize("seed", SEEDS)
def test_personalized_candidates_and_exclusions(seed: int) -> None:
    """Personalized feeds hold distinct posts from the hot pool or the reader's inbox, never
    the reader's own."""
    world, _ = played_world(seed, rounds=10)
    install_true_indexes(world)
    agents = np.arange(world.n_agents)
    cfg = PersonalizedRec(kind="personalized", pool_size=15, window_rounds=4)
    for name, plat in world.platforms.items():
        got = PersonalizedFeed(cfg).feeds(ctx_for(world, name, 11), agents)
        assert_feed_basics(world, name, agents, got, 11)
        pool = set(brute_hot_pool(world, plat, 11, 4, 15, 60))
        for a in agents.tolist():
            allowed = pool | {i for i in plat.inbox[a].tolist() if i >= 0}
            real = [i for i in got[a].tolist() if i >= 0]
            assert set(real) <= allowed
            others = sum(1 for i in allowed if world.posts.author[i] != a)
            assert len(real) == min(plat.k, others)


@pytest.mark.parametrize("seed", SEEDS)
def test_personalized_stance_only_ranks_by_similarity(seed: int) -> None:
    """With only stance_weight, an agent at +1 on every topic gets the candidates with the
    highest stance similarity 1 - mean|1 - s|/2 (addressed topics), best first."""
    world, _ = played_world(seed, rounds=10)
    install_true_indexes(world)
    cfg = PersonalizedRec(kind="personalized", pool_size=30, window_rounds=5, stance_weight=1,
                          interest_weight=0, recency_weight=0, popularity_weight=0,
                          in_network_weight=0, explore=0)
    position = world.beliefs.position.copy()
    agents = np.array([2, 11, 23])
    position[agents] = 1.0
    p = world.posts
    for name, plat in world.platforms.items():
        got = PersonalizedFeed(cfg).feeds(ctx_for(world, name, 11, position=position), agents)
        pool = brute_hot_pool(world, plat, 11, 5, 30, 60)
        for row, a in zip(got.tolist(), agents.tolist(), strict=True):
            cand = {i for i in pool + plat.inbox[a].tolist() if i >= 0 and p.author[i] != a}

            def sim(i: int) -> float:
                s = p.stance[i]
                addr = ~np.isnan(s)
                return 1.0 - float(np.abs(1.0 - s[addr]).mean()) / 2.0

            ranked = sorted(cand, key=lambda i: (-sim(i), i))[: plat.k]
            assert row == ranked + [-1] * (plat.k - len(ranked))


def popularity_case(post0_up: int) -> tuple[World, int, int]:
    """Agent 0 (at +1) chooses between a popular post it disagrees with (3 likes) and an
    agreeable unpopular one; agent 1 follows the author of an old viral post (1000 likes).
    Post 0 is a Reddit post with `post0_up` likes, never a Twitter candidate."""
    world = make_world(0, n=6, graph={"kind": "none"}, k_twitter=1)
    p = world.posts

    def post(platform: int, author: int, stance: float, round_: int, up: int) -> int:
        new = NewPosts(platform=np.array([platform], np.int8),
                       author=np.array([author], np.int32), kind=np.zeros(1, np.int8),
                       parent=np.array([-1]), stance=np.array([[stance, np.nan]]), text=[""])
        i = int(p.append(new, round_)[0])
        p.up[i] = up
        return i

    assert post(1, 2, 0.0, 1, post0_up) == 0
    post(0, 3, 0.0, 1, 1000)  # outside the window; only in agent 1's inbox
    popular = post(0, 4, -1.0, 10, 3)
    agreeable = post(0, 5, 1.0, 10, 0)
    world.platforms["twitter"].graph.follow(np.array([1]), np.array([3]))
    install_true_indexes(world)
    world.beliefs.position[:] = 0.0
    world.beliefs.position[0] = 1.0
    return world, popular, agreeable


POPULARITY_CFG = PersonalizedRec(
    kind="personalized", pool_size=10, window_rounds=2, stance_weight=1, interest_weight=0,
    recency_weight=0, popularity_weight=1.5, in_network_weight=0, explore=0)


def test_personalized_popularity_term() -> None:
    """Alone, agent 0 ranks the popular post first: 0 + 1.5 * 1 beats 1 + 1.5 * 0."""
    world, popular, _ = popularity_case(post0_up=0)
    feed = PersonalizedFeed(POPULARITY_CFG).feeds(ctx_for(world, "twitter", 11), np.array([0]))
    assert feed[0].tolist() == [popular]


def test_personalized_feed_does_not_depend_on_other_agents() -> None:
    """An agent's personalized feed is the same alone and together with another reader."""
    world, popular, _ = popularity_case(post0_up=0)
    ctx = ctx_for(world, "twitter", 11)
    together = PersonalizedFeed(POPULARITY_CFG).feeds(ctx, np.array([0, 1]))
    assert together[0].tolist() == [popular]


def test_personalized_feed_ignores_non_candidate_post_zero() -> None:
    """Votes on post 0 (another platform's post, not a candidate) do not change a feed."""
    world, popular, _ = popularity_case(post0_up=1000)
    feed = PersonalizedFeed(POPULARITY_CFG).feeds(ctx_for(world, "twitter", 11), np.array([0]))
    assert feed[0].tolist() == [popular]


# --------------------------------------------------------------------------- algorithmic bias


def _feed_distance(world: World, feed: np.ndarray, position: np.ndarray) -> float:
    """Mean over shown posts of d = mean |x - s| over the topics each addresses."""
    out = []
    for a, row in enumerate(feed):
        for post in row[row >= 0].tolist():
            s = world.posts.stance[post]
            m = ~np.isnan(s)
            out.append(np.abs(position[a][m] - s[m]).mean() if m.any() else 1.0)
    return float(np.mean(out))


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_algorithmic_bias_feed_leans_towards_the_reader(seed: int) -> None:
    """gamma 0 samples the pool uniformly (distinct, never own, full); larger gamma shows
    posts ever closer to the reader's opinion; a feed does not depend on other readers."""
    world, _ = played_world(seed, rounds=10)
    agents = np.arange(world.n_agents)
    position = world.beliefs.position
    dist = {}
    for gamma in (0.0, 1.0, 4.0):
        rec = AlgorithmicBiasFeed(AlgorithmicBiasRec(kind="algorithmic_bias", gamma=gamma,
                                                     pool_size=40, window_rounds=6))
        ctx = ctx_for(world, "twitter", 11)
        feed = rec.feeds(ctx, agents)
        assert_feed_basics(world, "twitter", agents, feed, 11)
        pool = set(feedable_ids(world, world.platforms["twitter"]))
        assert set(feed[feed >= 0].tolist()) <= pool
        assert (feed >= 0).sum(axis=1).min() == world.platforms["twitter"].k
        np.testing.assert_array_equal(rec.feeds(ctx, agents[::-3]), feed[::-3])
        dist[gamma] = _feed_distance(world, feed, position)
    assert dist[0.0] > dist[1.0] > dist[4.0]
    assert dist[4.0] < 0.6 * dist[0.0]


# --------------------------------------------------------------------------- snapshot, reddit


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_every_recommender_respects_snapshot_and_kinds(seed: int) -> None:
    """At the start of each round r, every recommender on both platforms shows only posts of
    rounds < r, of that platform, of feedable kinds (Reddit: PostKind.POST only), distinct
    and never the reader's own."""
    world = make_world(seed)
    rng = np.random.default_rng(seed)
    recs = [FollowingFeed(FollowingRec(kind="following")),
            FollowingFeed(FollowingRec(kind="following", fallback="recent")),
            PopularityFeed(PopularityRec(kind="popularity", window_rounds=3, pool_size=10)),
            PopularityFeed(PopularityRec(kind="popularity", window_rounds=3, sample="top")),
            RandomFeed(RandomRec(kind="random", window_rounds=2)),
            PersonalizedFeed(PersonalizedRec(kind="personalized", window_rounds=3)),
            AlgorithmicBiasFeed(AlgorithmicBiasRec(kind="algorithmic_bias", window_rounds=3))]
    shown_reddit_kinds: set[int] = set()
    for r in range(1, 9):
        agents = np.sort(rng.permutation(world.n_agents)[:20])
        for name in world.platforms:
            if not world.posts.n:  # observe() skips recommenders on an empty post table
                continue
            install_true_indexes(world)  # index upkeep is tested above; here: what is read
            ctx = ctx_for(world, name, r)
            for rec in recs:
                feed = rec.feeds(ctx, agents)
                assert_feed_basics(world, name, agents, feed, r)
                if name == "reddit":
                    shown_reddit_kinds |= set(world.posts.kind[feed[feed >= 0]].tolist())
        play_round(world, rng, r, max_posts=25)
    assert shown_reddit_kinds == {int(PostKind.POST)}
    assert (world.posts.kind == PostKind.COMMENT).sum() > 0  # comments existed all along

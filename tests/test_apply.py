"""Tests for applying a round's actions (sim.apply.apply_actions): validation reasons,
counters, trust, engagement, new post ids and parents, against a brute-force Python model.

Feeds come from `shoal.observe.observe` with a `random` recommender: the Twitter feed is large
enough to hold every post, the Reddit feed holds 4, so both "in feed" and "not in feed"
targets exist.
"""

from __future__ import annotations

import numpy as np
import pytest

from shoal.agents.actions import ActionBatch
from shoal.agents.observation import PlatformView
from shoal.beliefs.trust import TrustStore
from shoal.config import parse_config
from shoal.core.counter_rng import CounterRNG
from shoal.core.posts import PostKind
from shoal.core.vocabulary import TARGETS_POST, VOTES, ActionType, Reason
from shoal.core.workers import Workers
from shoal.engine.apply import Applied, apply_actions
from shoal.engine.observe import observe
from shoal.engine.recommenders import make_recommender
from shoal.engine.update import update_trust
from shoal.world.world import World, build_world

A = ActionType
TOPICS = ["alpha", "beta"]
N = 24
REDDIT_MEMBERS = list(range(20))  # agents 20..23 are not on Reddit
TW, RD = 0, 1
ALLOWED = {  # the action spaces, as documented on ActionType
    TW: {A.DO_NOTHING, A.POST, A.REPOST, A.QUOTE, A.REPLY, A.LIKE, A.FOLLOW, A.UNFOLLOW},
    RD: {A.DO_NOTHING, A.POST, A.COMMENT, A.UPVOTE, A.DOWNVOTE, A.FOLLOW},
}
KIND = {A.POST: PostKind.POST, A.REPOST: PostKind.REPOST, A.QUOTE: PostKind.QUOTE,
        A.REPLY: PostKind.REPLY, A.COMMENT: PostKind.COMMENT}
# TrustConfig defaults.
TRUST = {"like": 0.05, "repost": 0.05, "downvote": -0.05, "follow": 0.10, "unfollow": -0.10,
         "reply_agree": 0.02, "reply_disagree": -0.02}

Row = tuple  # (agent, platform, action, target_post, target_agent, stance, slot)


# --------------------------------------------------------------------------- helpers


class Sim:
    """A small world and the driver-side pieces apply needs (recommenders, rng, views)."""

    def __init__(self, seed: int):
        cfg = parse_config({
            "seed": seed, "rounds": 5, "population": {"size": N}, "topics": TOPICS,
            "platforms": {
                "twitter": {"feed_size": 60,
                            "recommender": {"kind": "random", "window_rounds": 50}},
                "reddit": {"feed_size": 4, "members": {"ids": REDDIT_MEMBERS},
                           "recommender": {"kind": "random", "window_rounds": 50}},
            },
            "graph": {"kind": "random", "mean_degree": 3},
        })
        self.world: World = build_world(cfg)
        self.recs = {name: make_recommender(p.cfg.recommender)
                     for name, p in self.world.platforms.items()}
        self.rng = CounterRNG(seed)
        self.round = 0
        self.views: list[PlatformView] = []

    def observe(self) -> list[PlatformView]:
        """Start the next round: every member acts on every platform."""
        self.round += 1
        acting = {name: np.nonzero(p.members)[0] for name, p in self.world.platforms.items()}
        self.views = observe(self.world, self.round, acting, self.recs, self.rng)
        return self.views

    def apply(self, rows: list[Row]) -> Applied:
        """Apply rows (any order) as a canonical batch in the current round."""
        applied = apply_actions(self.world, batch(rows).canonical(), self.views, self.round)
        update_trust(self.world, applied)  # the update phase that follows in a round
        return applied

    def feed(self, platform: int, agent: int) -> list[int]:
        """Real post ids in an agent's feed this round."""
        view = self.views[platform]
        assert view.platform == platform
        row = np.searchsorted(view.agents, agent)
        if row >= len(view.agents) or view.agents[row] != agent:
            return []
        return [int(i) for i in view.feed[row] if i >= 0]


def batch(rows: list[Row]) -> ActionBatch:
    """An ActionBatch from (agent, platform, action, target_post, target_agent, stance, slot)."""
    n = len(rows)
    stance = np.full((n, len(TOPICS)), np.nan)
    for i, r in enumerate(rows):
        if r[5] is not None:
            stance[i] = r[5]
    return ActionBatch(
        agent=np.array([r[0] for r in rows], np.int32),
        platform=np.array([r[1] for r in rows], np.int8),
        action=np.array([int(r[2]) for r in rows], np.int8),
        target_post=np.array([r[3] for r in rows], np.int64),
        target_agent=np.array([r[4] for r in rows], np.int32),
        stance=stance, text=[f"text {i}" for i in range(n)],
        slot=np.array([r[6] for r in rows], np.int8),
    )


def act(agent: int, platform: int, action: ActionType, post: int = -1, target: int = -1,
        stance: list[float] | None = None, slot: int = 0) -> Row:
    """One action row."""
    return (agent, platform, action, post, target, stance, slot)


def posted_sim(seed: int) -> Sim:
    """Round 1: every member posts once on each platform (stances with unaddressed topics).
    Round 2 has been observed on return."""
    sim = Sim(seed)
    sim.observe()
    rng = np.random.default_rng(seed)
    rows = []
    for platform, members in ((TW, range(N)), (RD, REDDIT_MEMBERS)):
        for a in members:
            s = rng.uniform(-1, 1, 2)
            s[rng.random(2) < 0.3] = np.nan
            rows.append(act(a, platform, A.POST, stance=s.tolist()))
    applied = sim.apply(rows)
    assert (applied.reason == Reason.OK).all()
    sim.observe()
    return sim


def other_post(sim: Sim, platform: int, agent: int, in_feed: bool) -> int:
    """A post of `platform` not by `agent`, in (or not in) the agent's feed this round."""
    p = sim.world.posts
    feed = set(sim.feed(platform, agent))
    for i in range(p.n):
        if p.platform[i] == platform and p.author[i] != agent and (i in feed) == in_feed:
            return i
    raise AssertionError("no such post")


def edges(sim: Sim, platform: int) -> set[tuple[int, int]]:
    """The platform's follow edges."""
    plat = list(sim.world.platforms.values())[platform]
    s, d = plat.graph.edge_arrays()
    return set(zip(s.tolist(), d.tolist(), strict=True))


# --------------------------------------------------------------------------- brute force


def brute_reasons(sim: Sim, b: ActionBatch, votes: dict[int, set], reposts: dict[int, set],
                  graph: dict[int, set]) -> list[int]:
    """Validate a canonical batch row by row against the snapshot, first valid action wins."""
    members = {TW: np.ones(N, bool), RD: np.isin(np.arange(N), REDDIT_MEMBERS)}
    seen_vote: dict[int, set] = {TW: set(), RD: set()}
    seen_repost: dict[int, set] = {TW: set(), RD: set()}
    seen_pair: dict[int, set] = {TW: set(), RD: set()}
    out = []
    for i in range(len(b)):
        a, code, x = int(b.agent[i]), int(b.platform[i]), A(int(b.action[i]))
        tp, ta = int(b.target_post[i]), int(b.target_agent[i])
        if x not in ALLOWED[code]:
            out.append(Reason.NOT_ALLOWED)
            continue
        if x in TARGETS_POST and (tp < 0 or tp not in sim.feed(code, a)):
            out.append(Reason.NOT_IN_FEED)
            continue
        reason = Reason.OK
        for kinds, before, seen in ((VOTES, votes, seen_vote), ({A.REPOST}, reposts,
                                                               seen_repost)):
            if x in kinds:
                if (a, tp) in before[code] or (a, tp) in seen[code]:
                    reason = Reason.DUPLICATE
                seen[code].add((a, tp))
        if x in (A.FOLLOW, A.UNFOLLOW):
            if ta < 0 or ta >= N:
                reason = Reason.UNKNOWN_AGENT
            elif ta == a:
                reason = Reason.SELF
            elif x == A.FOLLOW and not members[code][ta]:
                reason = Reason.NOT_MEMBER
            elif x == A.FOLLOW and (a, ta) in graph[code]:
                reason = Reason.ALREADY_FOLLOWING
            elif x == A.UNFOLLOW and (a, ta) not in graph[code]:
                reason = Reason.NOT_FOLLOWING
            elif (a, ta) in seen_pair[code]:
                reason = Reason.DUPLICATE
            else:
                seen_pair[code].add((a, ta))
        out.append(reason)
    return out


def random_rows(sim: Sim, rng: np.random.Generator) -> list[Row]:
    """A messy batch: every action type on both platforms, targets mostly from the feed,
    some own posts, foreign posts and repeats, agents in and out of range."""
    p = sim.world.posts
    rows: list[Row] = []
    for platform, members in ((TW, range(N)), (RD, REDDIT_MEMBERS)):
        for a in members:
            for slot in range(int(rng.integers(0, 4))):
                x = A(int(rng.integers(0, len(A))))
                feed = sim.feed(platform, a)
                u = rng.random()
                if u < 0.7 and feed:
                    tp = int(rng.choice(feed))
                elif u < 0.85:
                    tp = int(rng.integers(0, p.n))
                else:
                    own = np.nonzero((p.author == a) & (p.platform == platform))[0]
                    tp = int(own[0]) if len(own) else -1
                v = rng.random()
                ta = a if v < 0.1 else int(rng.choice([-1, N, N + 3])) if v < 0.2 else int(
                    rng.integers(0, N))
                s = rng.uniform(-1, 1, 2)
                s[rng.random(2) < 0.3] = np.nan
                rows.append(act(a, platform, x, tp, ta, s.tolist(), slot))
    # Repeat some rows in later slots (duplicates within the round).
    for i in rng.choice(len(rows), size=len(rows) // 5, replace=False):
        r = rows[i]
        rows.append((*r[:6], 5 + int(rng.integers(0, 3))))
    return rows


# --------------------------------------------------------------------------- tests


def test_new_post_ids_in_canonical_order() -> None:
    """Posts created in a round get consecutive ids in (platform, agent, slot) order, with
    their kind, author, platform, round, stance and text, whatever the input order."""
    sim = Sim(3)
    sim.observe()
    rows = [act(a, pl, A.POST, stance=[0.1 * a - 1, np.nan], slot=s)
            for pl in (RD, TW) for a in (7, 2, 11) for s in (1, 0)]
    rows += [act(5, TW, A.DO_NOTHING), act(9, RD, A.DO_NOTHING, slot=2)]
    order = np.random.default_rng(0).permutation(len(rows))
    shuffled = [rows[i] for i in order]
    b = batch(shuffled).canonical()
    keys = list(zip(b.platform.tolist(), b.agent.tolist(), b.slot.tolist(), strict=True))
    assert keys == sorted(keys)
    applied = apply_actions(sim.world, b, sim.views, sim.round)
    update_trust(sim.world, applied)
    assert (applied.reason == Reason.OK).all()
    creates = b.action == A.POST
    assert applied.new_post[creates].tolist() == list(range(12))
    assert (applied.new_post[~creates] == -1).all()
    p = sim.world.posts
    assert p.n == 12
    assert p.platform.tolist() == b.platform[creates].tolist()
    assert p.author.tolist() == b.agent[creates].tolist()
    assert (p.round == 1).all()
    assert (p.kind == PostKind.POST).all()
    assert (p.parent == -1).all()
    np.testing.assert_array_equal(p.stance, b.stance[creates])
    assert p.text == [b.text[i] for i in np.nonzero(creates)[0]]


def test_target_not_in_feed_is_rejected() -> None:
    """Targets outside the agent's feed: a same-platform post not shown, its own post, a post
    of the other platform, an action with no target. Nothing is counted."""
    sim = posted_sim(1)
    p = sim.world.posts
    hidden = other_post(sim, RD, 4, in_feed=False)
    own_tw = int(np.nonzero((p.author == 4) & (p.platform == TW))[0][0])
    reddit_post = other_post(sim, RD, 4, in_feed=True)
    shown = other_post(sim, RD, 4, in_feed=True)
    before = (p.up.copy(), p.down.copy(), p.shares.copy(), p.replies.copy())
    applied = sim.apply([
        act(4, RD, A.UPVOTE, hidden, slot=0),
        act(4, RD, A.COMMENT, hidden, stance=[0.0, 0.0], slot=1),
        act(4, TW, A.LIKE, own_tw, slot=0),
        act(4, TW, A.REPOST, reddit_post, slot=1),
        act(4, TW, A.LIKE, -1, slot=2),
        act(5, RD, A.DOWNVOTE, shown, slot=0),  # shown to agent 4, maybe not to 5
    ])
    assert applied.reason[:5].tolist() == [Reason.NOT_IN_FEED] * 5
    expected_5 = Reason.OK if shown in sim.feed(RD, 5) else Reason.NOT_IN_FEED
    assert applied.reason[5] == expected_5
    assert p.n == len(before[0])  # no comment or repost was created
    np.testing.assert_array_equal(p.up, before[0])
    np.testing.assert_array_equal(p.shares, before[2])
    np.testing.assert_array_equal(p.replies, before[3])
    assert (p.down - before[1]).sum() == (expected_5 == Reason.OK)


def test_target_beyond_post_table_is_rejected_not_crashing() -> None:
    """A target post id that does not exist (e.g. a hallucinated id) is NOT_IN_FEED."""
    sim = posted_sim(2)
    applied = sim.apply([act(3, TW, A.LIKE, 10**6), act(3, TW, A.REPLY, 10**6, slot=1)])
    assert applied.reason.tolist() == [Reason.NOT_IN_FEED] * 2


def test_duplicate_votes_and_reposts() -> None:
    """A second vote (like/upvote/downvote) or repost of the same post by the same agent is
    DUPLICATE, in the same round and in a later round; counters move once."""
    sim = posted_sim(4)
    p = sim.world.posts
    tw = other_post(sim, TW, 6, in_feed=True)
    rd = other_post(sim, RD, 6, in_feed=True)
    tw2 = next(i for i in sim.feed(TW, 6) if i != tw)
    up0, down0, sh0 = int(p.up[tw]), int(p.down[rd]), int(p.shares[tw])
    rd_up0 = int(p.up[rd])
    applied = sim.apply([
        act(6, TW, A.LIKE, tw, slot=0), act(6, TW, A.LIKE, tw, slot=1),
        act(6, TW, A.REPOST, tw, slot=2), act(6, TW, A.REPOST, tw, slot=3),
        act(6, RD, A.UPVOTE, rd, slot=0), act(6, RD, A.DOWNVOTE, rd, slot=1),
    ])
    assert applied.reason.tolist() == [Reason.OK, Reason.DUPLICATE, Reason.OK,
                                       Reason.DUPLICATE, Reason.OK, Reason.DUPLICATE]
    assert (int(p.up[tw]), int(p.shares[tw])) == (up0 + 1, sh0 + 1)
    assert (int(p.up[rd]), int(p.down[rd])) == (rd_up0 + 1, down0)
    sim.observe()  # round 3: the Twitter feed still shows every post
    assert tw in sim.feed(TW, 6)
    rd_again = rd in sim.feed(RD, 6)
    rows = [act(6, TW, A.LIKE, tw), act(6, TW, A.REPOST, tw, slot=1),
            act(6, TW, A.LIKE, tw2, slot=2)]
    if rd_again:
        rows.append(act(6, RD, A.DOWNVOTE, rd))
    applied = sim.apply(rows)
    canon = batch(rows).canonical()
    got = dict(zip(zip(canon.platform.tolist(), canon.target_post.tolist(),
                       canon.action.tolist(), strict=True), applied.reason.tolist(),
                   strict=True))
    assert got[(TW, tw, A.LIKE)] == Reason.DUPLICATE
    assert got[(TW, tw, A.REPOST)] == Reason.DUPLICATE
    assert got[(TW, tw2, A.LIKE)] == Reason.OK
    if rd_again:
        assert got[(RD, rd, A.DOWNVOTE)] == Reason.DUPLICATE
    assert int(p.up[tw]) == up0 + 1


def test_follow_reasons_and_graph_changes() -> None:
    """SELF, ALREADY_FOLLOWING, NOT_FOLLOWING, NOT_MEMBER, UNKNOWN_AGENT and a DUPLICATE
    follow are rejected; valid follows and unfollows change the graph and are reported."""
    sim = posted_sim(5)
    g = edges(sim, TW)
    a = 3
    followed = next(d for (s, d) in sorted(g) if s == a) if any(s == a for s, _ in g) else None
    if followed is None:
        sim.world.platforms["twitter"].graph.follow(np.array([a]), np.array([0]))
        followed = 0
        g = edges(sim, TW)
    free = [d for d in range(N) if d != a and (a, d) not in g]
    rows = [
        act(a, TW, A.FOLLOW, target=a, slot=0),
        act(a, TW, A.FOLLOW, target=followed, slot=1),
        act(a, TW, A.UNFOLLOW, target=free[0], slot=2),
        act(a, TW, A.FOLLOW, target=free[1], slot=3),
        act(a, TW, A.FOLLOW, target=free[1], slot=4),
        act(a, TW, A.UNFOLLOW, target=followed, slot=5),
        act(a, TW, A.FOLLOW, target=N + 5, slot=6),
        act(a, TW, A.UNFOLLOW, target=-1, slot=7),
        act(a, RD, A.FOLLOW, target=22, slot=0),  # 22 is not on Reddit
    ]
    applied = sim.apply(rows)
    canon = batch(rows).canonical()
    by_slot = {(int(p), int(s)): int(r) for p, s, r in zip(canon.platform, canon.slot,
                                                            applied.reason, strict=True)}
    assert by_slot == {
        (TW, 0): Reason.SELF, (TW, 1): Reason.ALREADY_FOLLOWING, (TW, 2): Reason.NOT_FOLLOWING,
        (TW, 3): Reason.OK, (TW, 4): Reason.DUPLICATE, (TW, 5): Reason.OK,
        (TW, 6): Reason.UNKNOWN_AGENT, (TW, 7): Reason.UNKNOWN_AGENT, (RD, 0): Reason.NOT_MEMBER,
    }
    assert edges(sim, TW) == (g | {(a, free[1])}) - {(a, followed)}
    f = applied.follows
    assert list(zip(f["platform"].tolist(), f["follower"].tolist(), f["followee"].tolist(),
                    f["op"].tolist(), strict=True)) == [(TW, a, free[1], 1),
                                                        (TW, a, followed, -1)]
    trust = sim.world.trust
    np.testing.assert_allclose(trust.get(np.array([a, a]), np.array([free[1], followed])),
                               [0.5 + TRUST["follow"], 0.5 + TRUST["unfollow"]], atol=1e-12)


@pytest.mark.parametrize(("platform", "action"), [
    (TW, A.DOWNVOTE), (TW, A.UPVOTE), (TW, A.COMMENT),
    (RD, A.REPOST), (RD, A.LIKE), (RD, A.QUOTE), (RD, A.REPLY), (RD, A.UNFOLLOW),
])
def test_action_not_allowed_on_platform(platform: int, action: ActionType) -> None:
    """Actions outside a platform's action space are NOT_ALLOWED (even with a valid target)
    and change nothing."""
    sim = posted_sim(6)
    p = sim.world.posts
    target = other_post(sim, platform, 2, in_feed=True)
    g = edges(sim, platform)
    n, up, down = p.n, p.up.copy(), p.down.copy()
    applied = sim.apply([act(2, platform, action, target, target=9, stance=[0.0, 0.0])])
    assert applied.reason.tolist() == [Reason.NOT_ALLOWED]
    assert p.n == n
    np.testing.assert_array_equal(p.up, up)
    np.testing.assert_array_equal(p.down, down)
    assert edges(sim, platform) == g
    assert len(applied.trust["truster"]) == 0


def test_idle_rows_are_valid_where_the_platform_offers_doing_nothing() -> None:
    """Rows that do nothing skip validation (apply works on the other rows) but keep their
    place: valid on the platforms, NOT_ALLOWED on a platform code the world lacks, no new
    post; the rows that act around them get the ids and reasons they would alone."""
    sim = posted_sim(7)
    p = sim.world.posts
    n = p.n
    applied = sim.apply([act(1, TW, A.DO_NOTHING), act(2, TW, A.POST, stance=[0.5, 0.0]),
                         act(3, RD, A.DO_NOTHING), act(4, 9, A.DO_NOTHING),
                         act(5, 9, A.POST, stance=[0.5, 0.0])])
    # canonical order: (platform, agent, slot)
    assert applied.actions.agent.tolist() == [1, 2, 3, 4, 5]
    assert applied.reason.tolist() == [Reason.OK, Reason.OK, Reason.OK, Reason.NOT_ALLOWED,
                                       Reason.NOT_ALLOWED]
    assert applied.new_post.tolist() == [-1, n, -1, -1, -1]
    assert p.n == n + 1 and int(p.author[n]) == 2


def test_repost_of_repost_points_at_root() -> None:
    """Reposting a repost creates a post whose parent and root are the original post;
    quotes and replies keep the post they respond to as parent."""
    sim = posted_sim(7)
    p = sim.world.posts
    original = other_post(sim, TW, 1, in_feed=True)
    first = sim.apply([act(1, TW, A.REPOST, original, stance=p.stance[original].tolist())])
    r1 = int(first.new_post[0])
    assert (int(p.parent[r1]), int(p.root[r1]), int(p.kind[r1])) == (original, original,
                                                                        PostKind.REPOST)
    sim.observe()
    b = 2 if int(p.author[original]) != 2 else 3
    assert r1 in sim.feed(TW, b)
    second = sim.apply([act(b, TW, A.REPOST, r1, slot=0), act(b, TW, A.QUOTE, r1, slot=1,
                                                             stance=[0.3, np.nan]),
                        act(b, TW, A.REPLY, r1, slot=2, stance=[0.3, np.nan])])
    assert second.reason.tolist() == [Reason.OK] * 3
    r2, q, rep = (int(i) for i in second.new_post)
    assert (int(p.parent[r2]), int(p.root[r2])) == (original, original)
    assert (int(p.parent[q]), int(p.kind[q])) == (r1, PostKind.QUOTE)
    assert (int(p.parent[rep]), int(p.kind[rep])) == (r1, PostKind.REPLY)
    # The quote shares r1 and the reply replies to it; the repost of a repost shares the
    # root (it is the root that gets amplified).
    assert (int(p.shares[r1]), int(p.replies[r1])) == (1, 1)
    assert int(p.shares[original]) == 2  # r1 itself, then r2


def test_repost_carries_root_stance() -> None:
    """A repost takes the root post's stance, whatever stance the action row carries."""
    sim = posted_sim(7)
    p = sim.world.posts
    original = other_post(sim, TW, 1, in_feed=True)
    applied = sim.apply([act(1, TW, A.REPOST, original, stance=None)])
    new = int(applied.new_post[0])
    np.testing.assert_array_equal(p.stance[new], p.stance[original])


def test_engagement_per_author_and_topic() -> None:
    """engagement[author, t] is +1 per like/upvote and -1 per downvote received this round on
    posts addressing topic t; zero elsewhere."""
    sim = posted_sim(8)
    p = sim.world.posts
    author = 0
    tw = int(np.nonzero((p.author == author) & (p.platform == TW))[0][0])
    rd = int(np.nonzero((p.author == author) & (p.platform == RD))[0][0])
    p.stance[tw] = [0.5, np.nan]
    p.stance[rd] = [-0.2, 0.9]
    voters_tw = [a for a in range(1, N) if tw in sim.feed(TW, a)][:3]
    voters_rd = [a for a in range(1, 20) if rd in sim.feed(RD, a)]
    rows = [act(a, TW, A.LIKE, tw) for a in voters_tw]
    ups = voters_rd[: len(voters_rd) // 2]
    downs = voters_rd[len(voters_rd) // 2:]
    rows += [act(a, RD, A.UPVOTE, rd) for a in ups] + [act(a, RD, A.DOWNVOTE, rd) for a in downs]
    applied = sim.apply(rows)
    assert (applied.reason == Reason.OK).all()
    expected = np.zeros((N, 2))
    expected[author] = [len(voters_tw) + len(ups) - len(downs), len(ups) - len(downs)]
    np.testing.assert_array_equal(applied.engagement, expected)


def test_reply_trust_agree_and_disagree() -> None:
    """Replies move trust by reply_agree when the mean stance gap on shared topics is < 0.5,
    by reply_disagree otherwise; likes by `like`; repeated pairs add up."""
    sim = posted_sim(9)
    p = sim.world.posts
    a = 5
    feed = [i for i in sim.feed(TW, a) if not np.isnan(p.stance[i, 0])][:2]
    close, far = feed
    p.stance[close] = [0.2, np.nan]
    p.stance[far] = [0.9, np.nan]
    t0 = sim.world.trust.get(np.array([a, a]), p.author[[close, far]])
    applied = sim.apply([act(a, TW, A.REPLY, close, stance=[0.5, -1.0], slot=0),
                         act(a, TW, A.REPLY, far, stance=[0.3, 0.0], slot=1),
                         act(a, TW, A.LIKE, close, slot=2)])
    assert (applied.reason == Reason.OK).all()
    causes = ["like", "repost", "downvote", "follow", "unfollow", "reply_agree",
              "reply_disagree"]
    assert [causes[c] for c in applied.trust["cause"]] == ["reply_agree", "reply_disagree",
                                                           "like"]
    np.testing.assert_allclose(applied.trust["delta"], [0.02, -0.02, 0.05], atol=1e-15)
    got = sim.world.trust.get(np.array([a, a]), p.author[[close, far]])
    assert p.author[close] != p.author[far]  # round 1: one post per author
    np.testing.assert_allclose(got, t0 + np.array([0.07, -0.02]), atol=1e-12)


@pytest.mark.parametrize(("seed", "n_workers"), [(0, 1), (1, 1), (2, 1), (3, 3), (4, 3)])
def test_random_batches_match_brute_force(seed: int, n_workers: int) -> None:
    """Random messy batches over two rounds: reasons, counters, new posts and parents, votes
    and repost stores, follow graph, trust values and engagement all equal a row-by-row
    Python model of the rules (on one range of rows, and on several)."""
    sim = posted_sim(seed)
    rng = np.random.default_rng(seed + 50)
    w = sim.world
    p = w.posts
    tcfg = w.cfg.beliefs.trust
    assert {k: getattr(tcfg, k) for k in TRUST} == TRUST
    for _ in range(2):
        rows = random_rows(sim, rng)
        b = batch(rows).canonical()
        plats = list(w.platforms.values())
        votes = {pl.code: {(int(k >> 32), int(k & 0xFFFFFFFF)) for k in pl.votes.keys}
                 for pl in plats}
        reposts = {pl.code: {(int(k >> 32), int(k & 0xFFFFFFFF)) for k in pl.reposts.keys}
                   for pl in plats}
        graph = {TW: edges(sim, TW), RD: edges(sim, RD)}
        expected_reason = brute_reasons(sim, b, votes, reposts, graph)
        n0 = p.n
        counters = {c: getattr(p, c).copy() for c in ("up", "down", "shares", "replies")}
        author = p.author.copy()
        stance = p.stance.copy()
        root = p.root.copy()
        trust_state = w.trust.get_state()  # copies

        applied = apply_actions(w, b, sim.views, sim.round, Workers(n_workers, min_rows=2))
        update_trust(w, applied)
        assert applied.reason.tolist() == [int(r) for r in expected_reason]
        ok = [i for i in range(len(b)) if expected_reason[i] == Reason.OK]

        # Counters and new posts.
        exp_counters = {c: v.tolist() for c, v in counters.items()}
        next_id = n0
        exp_new = [-1] * len(b)
        events: list[tuple[int, int, str, float]] = []
        engagement = np.zeros((N, 2))
        new_votes = {TW: set(votes[TW]), RD: set(votes[RD])}
        new_graph = {TW: set(graph[TW]), RD: set(graph[RD])}
        for i in ok:
            a, code, x = int(b.agent[i]), int(b.platform[i]), A(int(b.action[i]))
            tp, ta = int(b.target_post[i]), int(b.target_agent[i])
            if x in KIND:
                exp_new[i] = next_id
                parent = -1 if x == A.POST else (int(root[tp]) if x == A.REPOST else tp)
                assert int(p.parent[next_id]) == parent
                assert int(p.kind[next_id]) == KIND[x]
                assert (int(p.author[next_id]), int(p.platform[next_id])) == (a, code)
                next_id += 1
            column = {A.LIKE: "up", A.UPVOTE: "up", A.DOWNVOTE: "down", A.REPOST: "shares",
                      A.QUOTE: "shares", A.REPLY: "replies", A.COMMENT: "replies"}.get(x)
            if column:  # a repost of a repost shares the root (as in the engine)
                exp_counters[column][int(root[tp]) if x == A.REPOST else tp] += 1
            if x in VOTES:
                new_votes[code].add((a, tp))
                addressed = ~np.isnan(stance[tp])
                engagement[author[tp]] += addressed * (-1.0 if x == A.DOWNVOTE else 1.0)
            if x == A.FOLLOW:
                new_graph[code].add((a, ta))
            if x == A.UNFOLLOW:
                new_graph[code].discard((a, ta))
            other = ta if x in (A.FOLLOW, A.UNFOLLOW) else int(author[tp])
            cause = {A.LIKE: "like", A.UPVOTE: "like", A.REPOST: "repost",
                     A.DOWNVOTE: "downvote", A.FOLLOW: "follow", A.UNFOLLOW: "unfollow"}.get(x)
            if x in (A.QUOTE, A.REPLY, A.COMMENT):
                theirs, mine = stance[tp], b.stance[i]
                both = ~np.isnan(theirs) & ~np.isnan(mine)
                # No shared topic: agreement is undefined and trust does not move.
                gap = np.abs(theirs[both] - mine[both]).mean() if both.any() else None
                cause = None if gap is None else (
                    "reply_agree" if gap < 0.5 else "reply_disagree")
            if cause and other != a:
                events.append((a, other, cause, TRUST[cause]))
        assert applied.new_post.tolist() == exp_new
        assert p.n == next_id
        for c, v in exp_counters.items():
            assert getattr(p, c)[:n0].tolist() == v[:n0], c
            assert (getattr(p, c)[n0:] == 0).all()
        np.testing.assert_array_equal(applied.engagement, engagement)
        for pl in plats:
            assert {(int(k >> 32), int(k & 0xFFFFFFFF)) for k in pl.votes.keys} == \
                new_votes[pl.code]
        assert edges(sim, TW) == new_graph[TW]
        assert edges(sim, RD) == new_graph[RD]

        # Trust: one row per event, deltas summed per pair then clipped.
        causes = ["like", "repost", "downvote", "follow", "unfollow", "reply_agree",
                  "reply_disagree"]
        got_events = list(zip(applied.trust["truster"].tolist(),
                              applied.trust["trustee"].tolist(),
                              [causes[c] for c in applied.trust["cause"]],
                              applied.trust["delta"].tolist(), strict=True))
        assert got_events == events
        prior = TrustStore(w.trust.initial)
        prior.set_state(trust_state)
        sums: dict[tuple[int, int], float] = {}
        for s, o, _, d in events:
            sums[(s, o)] = sums.get((s, o), 0.0) + d
        for (s, o), d in sums.items():
            before = float(prior.get(np.array([s]), np.array([o]))[0])
            after = float(w.trust.get(np.array([s]), np.array([o]))[0])
            assert after == pytest.approx(min(1.0, max(0.0, before + d)), abs=1e-12)
        sim.observe()


@pytest.mark.parametrize("seed", range(6))
def test_is_canonical_agrees_with_a_stable_sort(seed: int) -> None:
    """`ActionBatch.is_canonical` (comparisons, no sort) says yes exactly when a stable
    sort by (platform, agent, slot) would leave the rows where they are: ties, negative
    slots and sorted, nearly sorted and shuffled batches."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    rows = [act(int(rng.integers(0, 4)), int(rng.integers(0, 2)), A.DO_NOTHING,
                slot=int(rng.integers(-2, 3))) for _ in range(n)]
    b = batch(rows)
    order = np.lexsort((b.slot, b.agent, b.platform))
    swapped = []  # sorted but for one neighbouring pair, at every place (range edges too)
    for i in range(n - 1):
        o = order.copy()
        o[[i, i + 1]] = o[[i + 1, i]]
        swapped.append(b.take(o))
    for candidate in (b, b.take(order), b.take(order[::-1]), *swapped):
        expected = np.array_equal(np.lexsort((candidate.slot, candidate.agent,
                                              candidate.platform)), np.arange(n))
        for workers in (Workers(1), Workers(3, min_rows=2), Workers(4, min_rows=1)):
            assert candidate.is_canonical(workers) == expected
        assert candidate.canonical().is_canonical()


@pytest.mark.parametrize("n_workers", [1, 3])
def test_concat_keeps_every_row_in_order_on_any_number_of_workers(n_workers: int) -> None:
    """Batches (one empty, one whose agents are int64, meta keys only some have) concatenate
    to their rows in order, column by column as numpy concatenates them, with 0 for a meta
    key a batch lacks; on worker threads as on one."""
    rng = np.random.default_rng(7)
    parts = []
    for n in (5, 0, 3, 4):
        rows = [act(int(rng.integers(0, N)), int(rng.integers(0, 2)), A.POST,
                    post=int(rng.integers(-1, 9)), target=int(rng.integers(-1, N)),
                    stance=rng.uniform(-1, 1, len(TOPICS)).tolist(),
                    slot=int(rng.integers(0, 3))) for _ in range(n)]
        parts.append(batch(rows))
    parts[2].agent = parts[2].agent.astype(np.int64)
    parts[0].meta["source"] = np.arange(5, dtype=np.int8)
    parts[3].meta["source"] = np.full(4, 2, np.int8)
    parts[3].meta["calls"] = np.arange(4, dtype=np.int32)
    whole = ActionBatch.concat(parts, len(TOPICS), Workers(n_workers, min_rows=1))
    for name in ("agent", "platform", "action", "target_post", "target_agent", "stance",
                 "slot"):
        expected = np.concatenate([getattr(p, name) for p in parts])
        assert getattr(whole, name).dtype == expected.dtype, name
        np.testing.assert_array_equal(getattr(whole, name), expected, err_msg=name)
    assert whole.text == [t for p in parts for t in p.text]
    np.testing.assert_array_equal(whole.meta["source"], [0, 1, 2, 3, 4, 0, 0, 0, 2, 2, 2, 2])
    np.testing.assert_array_equal(whole.meta["calls"], [0] * 8 + [0, 1, 2, 3])
    assert sorted(whole.meta) == ["calls", "source"]

"""Tests for the belief update rules (beliefs.rules) against direct per-exposure Python
implementations of their documented formulas, and for how exposures are gathered
(sim.observe.exposures)."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.agents.observation import PlatformView
from shoal.beliefs.exposure import ExposureHistory
from shoal.beliefs.rules import Exposures, UpdateContext, make_rule
from shoal.beliefs.rules.bounded_confidence import BoundedConfidence, BoundedConfidenceRule
from shoal.beliefs.rules.social_influence import SocialInfluence, SocialInfluenceRule
from shoal.beliefs.state import BeliefState
from shoal.beliefs.trust import TrustStore
from shoal.core.posts import NewPosts, PostStore
from shoal.engine.observe import exposures as gather_exposures

SEEDS = [0, 1, 2, 3, 4, 5]
N, T = 30, 2


class Case:
    """Random posts (topics partly unaddressed), beliefs, feeds, votes, trust, history."""

    def __init__(self, seed: int, n_posts: int = 40, width: int = 7):
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.posts = PostStore(T, 2)
        for r in (1, 2, 3):
            m = n_posts // 3
            stance = rng.uniform(-1, 1, (m, T))
            stance[rng.random((m, T)) < 0.35] = np.nan
            self.posts.append(NewPosts(
                platform=rng.integers(0, 2, m).astype(np.int8),
                author=rng.integers(0, N, m).astype(np.int32), kind=np.zeros(m, np.int8),
                parent=np.full(m, -1), stance=stance, text=[""] * m), r)
        n = self.posts.n
        self.beliefs = BeliefState(rng.uniform(-1, 1, (N, T)), rng.uniform(0, 1, (N, T)))
        self.beliefs.position[0] = [-1.0, 1.0]  # extremes, so clipping can bite
        agents = np.sort(rng.choice(N, size=N - 5, replace=False))
        posts = np.full((len(agents), width), -1, dtype=np.int64)
        for i in range(len(agents)):
            k = int(rng.integers(0, width + 1))  # some rows see nothing
            ids = np.sort(rng.choice(n, size=k, replace=False))
            posts[i, width - k:] = ids  # oldest first, -1 padding on the left
        valid = posts >= 0
        up = np.where(valid, rng.integers(0, 15, posts.shape), 0).astype(np.int32)
        down = np.where(valid, rng.integers(0, 5, posts.shape), 0).astype(np.int32)
        trust = np.where(valid, rng.uniform(0, 1, posts.shape), 0.0)
        self.exp = Exposures(agents, posts, up, down, trust)
        # History: about half of this round's exposures were seen in earlier rounds.
        self.history = ExposureHistory()
        fa, fp = self.exp.flat()
        old = rng.random(len(fa)) < 0.5
        self.history.record(fa[old], fp[old], 1)
        self.history.record(rng.integers(0, N, 20), rng.integers(0, n, 20), 2)
        keys = self.history.keys
        self.seen = set(zip((keys >> 32).tolist(), (keys & 0xFFFFFFFF).tolist(), strict=True))
        engagement = rng.integers(-9, 10, (N, T)).astype(np.float64)
        engagement[rng.random((N, T)) < 0.3] = 0.0
        self.engagement = engagement

    def ctx(self, history: bool = True) -> UpdateContext:
        """The update context (a trust store is present but the rule reads exposures.trust)."""
        trust = TrustStore(0.9)
        return UpdateContext(round=4, posts=self.posts, trust=trust,
                             history=self.history if history else None,
                             engagement=self.engagement)


def random_social_cfg(rng: np.random.Generator) -> SocialInfluence:
    """A social-influence config with every parameter drawn at random (catches mix-ups)."""
    return SocialInfluence(
        rule="social_influence", rate=float(rng.uniform(0.02, 0.6)),
        novelty_new=float(rng.uniform(1, 2)), novelty_seen=float(rng.uniform(0, 1)),
        social_base=float(rng.uniform(0, 0.5)), social_per_like=float(rng.uniform(0, 0.2)),
        resistance_base=float(rng.uniform(0.1, 0.5)),
        resistance_confidence=float(rng.uniform(0, 1)),
        confidence_step=float(rng.uniform(0, 0.1)), confidence_cap=float(rng.uniform(0, 0.2)),
        confidence_floor=float(rng.uniform(0, 0.4)),
    )


def social_ref(case: Case, c: SocialInfluence, use_history: bool = True
               ) -> tuple[np.ndarray, np.ndarray]:
    """The docstring formula, one exposure at a time: summed nudges, clip, then the
    engagement -> confidence step (cap, floor) for every agent."""
    pos0, conf0 = case.beliefs.position.copy(), case.beliefs.confidence.copy()
    pos, conf = pos0.copy(), conf0.copy()
    e = case.exp
    for row, a in enumerate(e.agents.tolist()):
        for t in range(T):
            delta = 0.0
            for m in range(e.posts.shape[1]):
                post = int(e.posts[row, m])
                if post < 0:
                    continue
                s = case.posts.stance[post, t]
                if np.isnan(s):
                    continue
                seen = use_history and (a, post) in case.seen
                novelty = c.novelty_seen if seen else c.novelty_new
                social = min(1.0, c.social_base + c.social_per_like * int(e.up[row, m]))
                resistance = c.resistance_base + c.resistance_confidence * conf0[a, t]
                delta += ((s - pos0[a, t]) * e.trust[row, m] * social * novelty * c.rate
                          / resistance)
            pos[a, t] = min(1.0, max(-1.0, pos0[a, t] + delta))
    for a in range(N):
        for t in range(T):
            net = case.engagement[a, t]
            step = min(c.confidence_cap, c.confidence_step * abs(net))
            if net > 0:
                conf[a, t] = min(1.0, conf[a, t] + step)
            elif net < 0:
                conf[a, t] = max(c.confidence_floor, conf[a, t] - step)
    return pos, conf


def bounded_ref(case: Case, eps: float, mu: float) -> np.ndarray:
    """Sequential Deffuant read phase: per agent, posts oldest first, each addressed topic,
    |s - x| < eps moves x by mu (s - x), the moved x is used for the next post."""
    pos = case.beliefs.position.copy()
    e = case.exp
    for row, a in enumerate(e.agents.tolist()):
        x = pos[a].copy()
        for post in sorted(int(p) for p in e.posts[row] if p >= 0):
            for t in range(T):
                s = case.posts.stance[post, t]
                if not np.isnan(s) and abs(s - x[t]) < eps:
                    x[t] = x[t] + mu * (s - x[t])
        pos[a] = x
    return pos


# --------------------------------------------------------------------------- social influence


@pytest.mark.parametrize("seed", SEEDS)
def test_social_influence_matches_per_exposure_formula(seed: int) -> None:
    """Positions and confidences equal the per-exposure reference (novelty from history,
    trust and likes from the exposures, resistance from confidence, clip, engagement)."""
    case = Case(seed)
    cfg = random_social_cfg(case.rng)
    expected_pos, expected_conf = social_ref(case, cfg)
    rule = make_rule(cfg)
    assert isinstance(rule, SocialInfluenceRule)
    assert rule.uses_novelty
    rule.update(case.beliefs, case.exp, case.ctx())
    np.testing.assert_allclose(case.beliefs.position, expected_pos, rtol=0, atol=1e-12)
    np.testing.assert_allclose(case.beliefs.confidence, expected_conf, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS[:3])
def test_social_influence_without_history_counts_everything_new(seed: int) -> None:
    """With no exposure history every exposure gets novelty_new."""
    case = Case(seed)
    cfg = random_social_cfg(case.rng)
    expected_pos, expected_conf = social_ref(case, cfg, use_history=False)
    SocialInfluenceRule(cfg).update(case.beliefs, case.exp, case.ctx(history=False))
    np.testing.assert_allclose(case.beliefs.position, expected_pos, rtol=0, atol=1e-12)
    np.testing.assert_allclose(case.beliefs.confidence, expected_conf, rtol=0, atol=1e-12)


def test_social_influence_miroshark_constants_by_hand() -> None:
    """One reader, one post, MiroShark's constants (rate 0.08, no anchor), worked by hand."""
    posts = PostStore(2, 2)
    posts.append(NewPosts(platform=np.zeros(1, np.int8), author=np.array([1], np.int32),
                          kind=np.zeros(1, np.int8), parent=np.array([-1]),
                          stance=np.array([[0.8, np.nan]]), text=[""]), 1)
    beliefs = BeliefState(np.array([[0.0, 0.3], [0.5, 0.5]]), np.array([[0.5, 0.5],
                                                                       [0.12, 0.5]]))
    exp = Exposures(np.array([0]), np.array([[-1, 0]]), np.array([[0, 4]], np.int32),
                    np.zeros((1, 2), np.int32), np.array([[0.0, 0.6]]))
    engagement = np.array([[0.0, 0.0], [-2.0, 10.0]])
    ctx = UpdateContext(round=2, posts=posts, trust=TrustStore(0.5), history=ExposureHistory(),
                        engagement=engagement)
    SocialInfluenceRule(SocialInfluence(rule="social_influence", rate=0.08, anchor=0)
                        ).update(beliefs, exp, ctx)
    # nudge = (0.8 - 0) * 0.6 * min(1, 0.3 + 0.07 * 4) * 1.5 * 0.08 / (0.3 + 0.7 * 0.5)
    nudge = 0.8 * 0.6 * 0.58 * 1.5 * 0.08 / 0.65
    np.testing.assert_allclose(beliefs.position, [[nudge, 0.3], [0.5, 0.5]], atol=1e-15)
    # Agent 1: -2 net votes on topic 0 -> 0.12 - 0.06 floored at 0.1; +10 on topic 1 ->
    # + min(0.15, 0.3).
    np.testing.assert_allclose(beliefs.confidence, [[0.5, 0.5], [0.1, 0.65]], atol=1e-15)


def test_social_influence_calibrated_defaults_by_hand() -> None:
    """The defaults (rate 0.001, anchor 0.15): the nudge, then every position pulled 15% of
    the way back to where the agent started."""
    posts = PostStore(2, 2)
    posts.append(NewPosts(platform=np.zeros(1, np.int8), author=np.array([1], np.int32),
                          kind=np.zeros(1, np.int8), parent=np.array([-1]),
                          stance=np.array([[0.8, np.nan]]), text=[""]), 1)
    beliefs = BeliefState(np.array([[0.0, 0.3], [0.5, 0.5]]), np.full((2, 2), 0.5))
    start = np.array([[-0.2, 0.3], [0.1, 0.5]])
    exp = Exposures(np.array([0]), np.array([[-1, 0]]), np.array([[0, 4]], np.int32),
                    np.zeros((1, 2), np.int32), np.array([[0.0, 0.6]]))
    ctx = UpdateContext(round=2, posts=posts, trust=TrustStore(0.5), history=ExposureHistory(),
                        engagement=np.zeros((2, 2)), initial_position=start)
    SocialInfluenceRule(SocialInfluence(rule="social_influence")).update(beliefs, exp, ctx)
    nudge = 0.8 * 0.6 * 0.58 * 1.5 * 0.001 / 0.65
    moved = np.array([[nudge, 0.3], [0.5, 0.5]])
    np.testing.assert_allclose(beliefs.position, moved + 0.15 * (start - moved), atol=1e-15)


def test_social_influence_empty_exposures_still_moves_confidence() -> None:
    """A round with no exposures leaves positions alone but applies engagement."""
    case = Case(1)
    cfg = SocialInfluence(rule="social_influence")
    pos0 = case.beliefs.position.copy()
    empty = Exposures(np.empty(0, np.int64), np.empty((0, 0), np.int64),
                      np.empty((0, 0), np.int32), np.empty((0, 0), np.int32),
                      np.empty((0, 0)))
    case.exp = empty
    _, expected_conf = social_ref(case, cfg)
    SocialInfluenceRule(cfg).update(case.beliefs, empty, case.ctx())
    np.testing.assert_array_equal(case.beliefs.position, pos0)
    np.testing.assert_allclose(case.beliefs.confidence, expected_conf, rtol=0, atol=1e-15)


# --------------------------------------------------------------------------- bounded confidence


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("eps", "mu"), [(0.3, 0.2), (0.8, 0.5), (2.0, 1.0)])
def test_bounded_confidence_matches_sequential_loop(seed: int, eps: float, mu: float) -> None:
    """Column-vectorised update equals the sequential per-agent loop over posts oldest
    first, with two topics that posts address only sometimes; confidence is untouched."""
    case = Case(seed)
    conf0 = case.beliefs.confidence.copy()
    expected = bounded_ref(case, eps, mu)
    rule = make_rule(BoundedConfidence(rule="bounded_confidence", epsilon=eps, mu=mu))
    assert isinstance(rule, BoundedConfidenceRule)
    assert not rule.uses_novelty
    rule.update(case.beliefs, case.exp, case.ctx())
    np.testing.assert_allclose(case.beliefs.position, expected, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(case.beliefs.confidence, conf0)


def test_bounded_confidence_order_matters_by_hand() -> None:
    """x = 0, eps 0.3, mu 0.5: post 0.2 then 0.35 gives 0.1 -> 0.225; the reverse order
    would ignore 0.35 (|0.35 - 0| >= eps) and end at 0.1. The rule reads oldest first."""
    posts = PostStore(1, 2)
    posts.append(NewPosts(platform=np.zeros(2, np.int8), author=np.array([1, 2], np.int32),
                          kind=np.zeros(2, np.int8), parent=np.full(2, -1),
                          stance=np.array([[0.2], [0.35]]), text=["", ""]), 1)
    beliefs = BeliefState(np.zeros((1, 1)), np.full((1, 1), 0.5))
    exp = Exposures(np.array([0]), np.array([[-1, 0, 1]]), np.zeros((1, 3), np.int32),
                    np.zeros((1, 3), np.int32), np.zeros((1, 3)))
    ctx = UpdateContext(round=2, posts=posts, trust=TrustStore(0.5), history=None,
                        engagement=np.zeros((1, 1)))
    BoundedConfidenceRule(BoundedConfidence(rule="bounded_confidence", epsilon=0.3, mu=0.5)
                          ).update(beliefs, exp, ctx)
    assert beliefs.position[0, 0] == pytest.approx(0.225, abs=1e-15)


# --------------------------------------------------------------------------- gathering exposures


def view(platform: int, agents: list[int], feed: list[list[int]], seed: int) -> PlatformView:
    """A hand-made platform view whose up/down/trust encode the post id (to check alignment)."""
    f = np.array(feed, dtype=np.int64)
    valid = f >= 0
    a, k = f.shape
    return PlatformView(
        platform=platform, name=("twitter", "reddit")[platform],
        agents=np.array(agents, np.int64), feed=f, author=np.where(valid, 0, -1),
        kind=np.zeros((a, k), np.int8), stance=np.full((a, k, T), np.nan),
        up=np.where(valid, f * 10, 0).astype(np.int32),
        down=np.where(valid, f * 10 + 1, 0).astype(np.int32),
        follows_author=np.zeros((a, k), bool), trust=np.where(valid, f / 100.0, 0.0),
        voted=np.zeros((a, k), bool), reposted=np.zeros((a, k), bool),
    )


def test_exposures_merge_platforms_oldest_first() -> None:
    """exposures() unions the acting agents of all platforms (sorted), puts each agent's
    items of every platform in one row sorted by id (oldest first, -1 padding on the left),
    and keeps up/down/trust aligned with their post."""
    tw = view(0, [2, 5, 9], [[7, 3, -1], [12, -1, -1], [-1, -1, -1]], 0)
    rd = view(1, [1, 5], [[4, 8], [6, 1]], 1)
    e, n_items = gather_exposures([tw, rd])
    assert n_items == 7
    assert e.agents.tolist() == [1, 2, 5, 9]
    assert e.posts.tolist() == [[-1, -1, -1, 4, 8], [-1, -1, -1, 3, 7],
                                [-1, -1, 1, 6, 12], [-1, -1, -1, -1, -1]]
    v = e.posts >= 0
    np.testing.assert_array_equal(e.up[v], e.posts[v] * 10)
    np.testing.assert_array_equal(e.down[v], e.posts[v] * 10 + 1)
    np.testing.assert_allclose(e.trust[v], e.posts[v] / 100.0)
    assert (e.up[~v] == 0).all() and (e.trust[~v] == 0).all()
    fa, fp = e.flat()
    assert list(zip(fa.tolist(), fp.tolist(), strict=True)) == [
        (1, 4), (1, 8), (2, 3), (2, 7), (5, 1), (5, 6), (5, 12)]
    empty, n_items = gather_exposures([])
    assert n_items == 0
    assert empty.posts.shape == (0, 0) and len(empty.agents) == 0


@pytest.mark.parametrize("feed", [
    [[9, 7, -1], [12, 4, 1], [-1, -1, -1]],  # newest first (the following feed): reversed
    [[7, 9, -1], [4, 12, 1], [-1, -1, -1]],  # ranked feed: sorted
])
def test_exposures_of_one_platform(feed: list[list[int]]) -> None:
    """With one platform each row is that agent's feed, oldest first, -1 padding on the
    left, up/down/trust aligned, whichever order the recommender produced."""
    e, n_items = gather_exposures([view(0, [2, 5, 8], feed, 0)])
    assert n_items == 5
    assert e.agents.tolist() == [2, 5, 8]
    assert e.posts.tolist() == [[-1, 7, 9], [1, 4, 12], [-1, -1, -1]]
    v = e.posts >= 0
    np.testing.assert_array_equal(e.up[v], e.posts[v] * 10)
    np.testing.assert_allclose(e.trust[v], e.posts[v] / 100.0)
    assert e.posts.flags.c_contiguous

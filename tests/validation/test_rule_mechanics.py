"""The mechanics under the validated models: each exposure-driven mode against a direct
per-agent loop over its documented formula, the sequential `encounters` mode against a plain
loop over its encounters, the partner draws (encounters, matchings, partners, conflict-free
proposals), determinism, dead agents, flags and config checks."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.beliefs.exposure import ExposureHistory
from shoal.beliefs.rules import Exposures, UpdateContext, deffuant, make_rule
from shoal.beliefs.rules.config import TIE
from shoal.beliefs.rules.partners import (
    Draw,
    conflict_free,
    encounter_batches,
    living_followees,
    random_encounters,
    random_followees,
    random_matching,
    random_others,
)
from shoal.beliefs.state import BeliefState
from shoal.beliefs.trust import TrustStore
from shoal.core.counter_rng import CounterRNG, Purpose
from shoal.core.errors import ConfigError
from shoal.core.follow_graph import FollowGraph
from shoal.core.posts import NewPosts, PostStore
from shoal.core.registry import BELIEF_RULES
from shoal.platforms.spec import MAX_CODE
from tests.validation.harness import NO_EXPOSURES, rule_config, run_rule
from tests.validation.networks import strongly_connected_graph

N, T, WIDTH = 40, 2, 6


class Feed:
    """Random posts (topics partly unaddressed), positions and feeds, and a history in
    which about half of this round's exposures were already seen."""

    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        self.posts = PostStore(T, 2)
        m = 50
        stance = rng.uniform(-1, 1, (m, T))
        stance[rng.random((m, T)) < 0.3] = np.nan
        self.posts.append(NewPosts(
            platform=np.zeros(m, np.int8), author=rng.integers(0, N, m).astype(np.int32),
            kind=np.zeros(m, np.int8), parent=np.full(m, -1), stance=stance, text=[""] * m), 1)
        self.position = rng.uniform(-1, 1, (N, T))
        self.confidence = rng.uniform(0, 1, (N, T))
        agents = np.sort(rng.choice(N, size=N - 8, replace=False))
        posts = np.full((len(agents), WIDTH), -1, dtype=np.int64)
        for i in range(len(agents)):
            k = int(rng.integers(0, WIDTH + 1))
            posts[i, WIDTH - k:] = np.sort(rng.choice(m, size=k, replace=False))
        valid = posts >= 0
        trust = np.where(valid, rng.uniform(0.05, 1, posts.shape), 0.0)
        self.exp = Exposures(agents, posts, np.zeros(posts.shape, np.int32),
                             np.zeros(posts.shape, np.int32), trust)
        self.history = ExposureHistory()
        fa, fp = self.exp.flat()
        self.seen_mask = np.zeros(posts.shape, dtype=bool)
        old = rng.random(len(fa)) < 0.5
        self.history.record(fa[old], fp[old], 1)
        self.seen_mask[valid] = self.history.seen(
            np.broadcast_to(agents[:, None], posts.shape)[valid], posts[valid])

    def run(self, spec: dict, seed: int = 0) -> np.ndarray:
        """One update with the rule; returns the new positions."""
        beliefs = BeliefState(self.position.copy(), self.confidence.copy())
        ctx = UpdateContext(round=2, posts=self.posts, trust=TrustStore(0.5),
                            history=self.history, engagement=np.zeros((N, T)),
                            rng=CounterRNG(seed), graph=FollowGraph(N), alive=np.ones(N, bool),
                            initial_position=self.position * 0.5)
        make_rule(rule_config(spec)).update(beliefs, self.exp, ctx)
        return beliefs.position

    def read(self, skip_seen: bool = False):
        """Per reader row: (agent, [(stance vector, trust)] of real, counted exposures)."""
        for row, a in enumerate(self.exp.agents.tolist()):
            items = []
            for m in range(WIDTH):
                post = int(self.exp.posts[row, m])
                if post < 0 or (skip_seen and self.seen_mask[row, m]):
                    continue
                items.append((self.posts.stance[post], float(self.exp.trust[row, m])))
            yield a, items


SEEDS = [0, 1, 2, 3]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("skip_seen", [False, True])
def test_hegselmann_krause_exposures_matches_loop(seed: int, skip_seen: bool) -> None:
    """x ← mean of x and the stances read within ε (closed bound), per topic; with
    skip_seen, posts seen in earlier rounds do not count."""
    f = Feed(seed)
    eps = 0.6
    got = f.run({"rule": "hegselmann_krause", "epsilon": eps, "skip_seen": skip_seen})
    want = f.position.copy()
    for a, items in f.read(skip_seen):
        for t in range(T):
            x = f.position[a, t]
            vals = [s[t] for s, _ in items if not np.isnan(s[t]) and abs(s[t] - x) <= eps]
            want[a, t] = (x + sum(vals)) / (1 + len(vals))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("weights", "self_weight"), [("trust", 0.4), ("uniform", None),
                                                      ("trust", None)])
def test_degroot_and_friedkin_johnsen_exposures_match_loop(seed: int, weights: str,
                                                           self_weight: float | None) -> None:
    """DeGroot: sw·x + (1 − sw)·Σ w s / Σ w (or (x + Σ w s)/(1 + Σ w) without a self
    weight), w = trust or 1, over the stances read; FJ mixes that with x(0) by λ."""
    f = Feed(seed)
    spec = {"weights": weights, "self_weight": self_weight}
    degroot = f.run({"rule": "degroot", **spec})
    fj = f.run({"rule": "friedkin_johnsen", "susceptibility": "confidence", **spec})
    want = f.position.copy()
    want_fj = f.position.copy()
    for a, items in f.read():
        for t in range(T):
            x = f.position[a, t]
            pairs = [(s[t], w if weights == "trust" else 1.0) for s, w in items
                     if not np.isnan(s[t])]
            sw = sum(w for _, w in pairs)
            sws = sum(w * s for s, w in pairs)
            if self_weight is None:
                new = (x + sws) / (1 + sw)
            else:
                new = self_weight * x + (1 - self_weight) * sws / sw if sw > 0 else x
            want[a, t] = new
            lam = 1 - f.confidence[a, t]
            want_fj[a, t] = lam * new + (1 - lam) * 0.5 * x
    np.testing.assert_allclose(degroot, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fj, want_fj, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_deffuant_exposures_is_bounded_confidence(seed: int) -> None:
    """`deffuant` in mode exposures and `bounded_confidence` give identical numbers."""
    f = Feed(seed)
    a = f.run({"rule": "deffuant", "epsilon": 0.7, "mu": 0.3})
    b = f.run({"rule": "bounded_confidence", "epsilon": 0.7, "mu": 0.3})
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("skip_seen", [False, True])
@pytest.mark.parametrize("block", [1, 3, 4096])
def test_deffuant_exposures_equals_the_loop_in_any_block(seed: int, skip_seen: bool,
                                                         block: int, monkeypatch) -> None:
    """x ← x + μ(s − x) for each stance read within ε (strict), oldest first, from the x
    the item before left; with skip_seen, posts seen in earlier rounds are not read. The
    same numbers, bit for bit, whatever block of agents the rule reads at a time (one,
    three: blocks that end mid-feed-list, or all at once)."""
    monkeypatch.setattr(deffuant, "READ_BLOCK", block)
    f = Feed(seed)
    eps, mu = 0.7, 0.3
    got = f.run({"rule": "deffuant", "epsilon": eps, "mu": mu, "skip_seen": skip_seen})
    want = f.position.copy()
    for a, items in f.read(skip_seen):
        for t in range(T):
            x = want[a, t]
            for s, _ in items:
                if not np.isnan(s[t]) and abs(s[t] - x) < eps - TIE:
                    x = x + mu * (s[t] - x)
            want[a, t] = x
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", SEEDS)
def test_voter_exposures_adopts_one_read_stance(seed: int) -> None:
    """Rate 1: each reader takes exactly the stance of one post it read on each topic that
    a post addressed, and keeps its position otherwise."""
    f = Feed(seed)
    got = f.run({"rule": "voter"}, seed=seed)
    readers = set(f.exp.agents.tolist())
    for a, items in f.read():
        for t in range(T):
            vals = [s[t] for s, _ in items if not np.isnan(s[t])]
            if vals:
                assert got[a, t] in vals
            else:
                assert got[a, t] == f.position[a, t]
    others = [i for i in range(N) if i not in readers]
    np.testing.assert_array_equal(got[others], f.position[others])


@pytest.mark.parametrize("seed", SEEDS)
def test_algorithmic_bias_exposures_with_strong_bias_picks_the_nearest_post(seed: int
                                                                          ) -> None:
    """γ = 20 makes a read stance twice as near as any other 2^20 ≈ 10⁶ times likelier:
    x moves by μ towards it if it is within ε (one encounter per topic and round). Where
    two stances are about as near, x moves towards one of the stances read (or stays)."""
    f = Feed(seed)
    eps, mu = 0.8, 0.5
    got = f.run({"rule": "algorithmic_bias", "epsilon": eps, "mu": mu, "gamma": 20.0})
    for a, items in f.read():
        for t in range(T):
            x = f.position[a, t]
            vals = sorted((s[t] for s, _ in items if not np.isnan(s[t])),
                          key=lambda v: abs(v - x))
            moves = [x + mu * (v - x) if abs(v - x) < eps else x for v in vals] or [x]
            if len(vals) < 2 or abs(vals[1] - x) > 2 * abs(vals[0] - x):
                assert got[a, t] == pytest.approx(moves[0], abs=1e-12)
            else:
                assert min(abs(got[a, t] - m) for m in moves) < 1e-12


def ctx_for(n: int, seed: int = 0, round_: int = 3, alive=None, graph=None) -> UpdateContext:
    """A bare context for the partner draws."""
    return UpdateContext(round=round_, posts=PostStore(1, 2), trust=TrustStore(0.5),
                         history=None, engagement=np.zeros((n, 1)), rng=CounterRNG(seed),
                         graph=graph if graph is not None else FollowGraph(n), alive=alive)


def test_matching_is_a_perfect_matching_per_topic() -> None:
    """Every living agent appears once per topic (one sits out when odd); topics differ."""
    live = np.array([0, 2, 3, 5, 6, 7, 9, 11, 12])
    a, b = random_matching(ctx_for(13), live, 4)
    assert a.shape == (4, 4)
    for t in range(4):
        both = np.concatenate([a[:, t], b[:, t]])
        assert len(set(both.tolist())) == 8 and set(both.tolist()) <= set(live.tolist())
    assert not all((a[:, 0] == a[:, t]).all() for t in range(1, 4))


def test_encounters_are_uniform_pairs_of_distinct_living_agents() -> None:
    """⌊L/2⌋ encounters per topic (L living agents), each two distinct living agents; the
    sequence differs between topics and rounds, is the same whatever else the context holds,
    and every living agent takes part about once per round (2/L per encounter)."""
    n = 23
    alive = np.ones(n, bool)
    alive[[0, 5, 17]] = False
    live = np.nonzero(alive)[0]
    a, b = random_encounters(ctx_for(n, alive=alive), live, 3)
    assert a.shape == b.shape == (10, 3)
    assert (a != b).all() and np.isin(a, live).all() and np.isin(b, live).all()
    assert not (a[:, 0] == a[:, 1]).all()
    a2, b2 = random_encounters(ctx_for(n + 5, alive=np.r_[alive, [False] * 5]), live, 3)
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)
    a3, _ = random_encounters(ctx_for(n, alive=alive, round_=4), live, 3)
    assert not np.array_equal(a, a3)
    assert random_encounters(ctx_for(n), live[:1], 2)[0].shape == (0, 2)
    # Participation over 400 rounds × 3 topics: each agent in 1200·(2/20)·10 = 1200 on
    # average; binomial σ ≈ 33, so ± 6σ.
    seen = np.zeros(n)
    for r in range(400):
        a, b = random_encounters(ctx_for(n, alive=alive, round_=r), live, 3)
        seen += np.bincount(np.r_[a.ravel(), b.ravel()], minlength=n)
    assert (seen[~alive] == 0).all()
    assert np.abs(seen[alive] - 1200).max() < 200, seen


@pytest.mark.parametrize("seed", range(6))
def test_encounter_batches_are_greedy_runs_of_disjoint_encounters(seed: int) -> None:
    """Per topic the batches are consecutive runs covering the sequence in order, no agent
    twice in a batch, and each batch ends just before an encounter that reuses one of its
    agents."""
    rng = np.random.default_rng(seed)
    n, k, n_topics = int(rng.integers(2, 60)), int(rng.integers(1, 40)), 3
    a = rng.integers(0, n, (k, n_topics))
    b = (a + rng.integers(1, n, (k, n_topics))) % n if n > 1 else a
    batches = encounter_batches(a, b, n)
    for t in range(n_topics):
        runs = [e[tt == t] for e, tt in batches]
        runs = [r for r in runs if len(r)]
        np.testing.assert_array_equal(np.concatenate(runs), np.arange(k))
        for i, r in enumerate(runs):
            np.testing.assert_array_equal(r, np.arange(r[0], r[-1] + 1))
            ends = np.r_[a[r, t], b[r, t]]
            assert len(set(ends.tolist())) == len(ends)
            if i + 1 < len(runs):
                nxt = runs[i + 1][0]
                assert {int(a[nxt, t]), int(b[nxt, t])} & set(ends.tolist())


def plain_encounters(rng: CounterRNG, round_: int, alive: np.ndarray, n_topics: int
                     ) -> list[list[tuple[int, int]]]:
    """The documented encounter sequence, per topic, one draw at a time: encounter k uses
    the uniforms (u, v) of key (round, k, ENCOUNTER) in columns t and T + t; the first agent
    is the ⌊u·L⌋-th living agent, the second the ⌊v·(L − 1)⌋-th of the others."""
    live = [i for i in range(len(alive)) if alive[i]]
    n_live = len(live)
    out: list[list[tuple[int, int]]] = [[] for _ in range(n_topics)]
    for k in range(n_live // 2):
        u = rng.uniform(round_, Draw.ENCOUNTER, np.array([k]), 2 * n_topics)[0]
        for t in range(n_topics):
            i = min(int(u[t] * n_live), n_live - 1)
            j = min(int(u[n_topics + t] * (n_live - 1)), n_live - 2)
            j = j + 1 if j >= i else j
            out[t].append((live[i], live[j]))
    return out


CASES = [(0, 2, 1), (1, 3, 2), (2, 7, 3), (3, 40, 3), (4, 101, 2), (5, 300, 4)]


def direct_context(n: int, n_topics: int, seed: int, round_: int, alive: np.ndarray
                   ) -> UpdateContext:
    """A context for a direct mode: counter RNG, empty graph, the living mask."""
    return UpdateContext(round=round_, posts=PostStore(n_topics, 2), trust=TrustStore(0.5),
                         history=None, engagement=np.zeros((n, n_topics)),
                         rng=CounterRNG(seed), graph=FollowGraph(n), alive=alive)


@pytest.mark.parametrize(("seed", "n", "n_topics"), CASES)
def test_deffuant_encounters_equal_the_sequential_loop(seed: int, n: int, n_topics: int
                                                       ) -> None:
    """The batched `encounters` mode gives bit for bit the positions of a plain loop over
    the encounters in order, each moving both agents by μ·difference if closer than ε
    (x_i + μ(x_j − x_i), x_j + μ(x_i − x_j)), over several rounds with dead agents."""
    gen = np.random.default_rng(seed)
    x0 = gen.uniform(-1, 1, (n, n_topics))
    alive = gen.random(n) > 0.15
    eps, mu = 0.7, 0.3
    rule = make_rule(rule_config({"rule": "deffuant", "mode": "encounters", "epsilon": eps,
                                  "mu": mu}))
    beliefs = BeliefState(x0.copy(), np.full((n, n_topics), 0.5))
    want = x0.copy()
    for r in range(1, 6):
        rule.update(beliefs, NO_EXPOSURES, direct_context(n, n_topics, seed, r, alive))
        for t, seq in enumerate(plain_encounters(CounterRNG(seed), r, alive, n_topics)):
            for i, j in seq:
                xi, xj = want[i, t], want[j, t]
                if abs(xj - xi) < eps:
                    want[i, t] = xi + mu * (xj - xi)
                    want[j, t] = xj + mu * (xi - xj)
        np.testing.assert_array_equal(beliefs.position, want)


@pytest.mark.parametrize(("seed", "n", "n_topics"), CASES)
def test_voter_encounters_equal_the_sequential_loop(seed: int, n: int, n_topics: int
                                                    ) -> None:
    """The batched voter `encounters` mode equals a plain loop: in encounter k, with
    probability `rate` (ADOPT uniform of key k) one agent copies the other, a copying b
    when the COIN uniform of key k is below ½."""
    gen = np.random.default_rng(seed)
    x0 = gen.uniform(-1, 1, (n, n_topics))
    alive = gen.random(n) > 0.15
    rate = 0.7
    rule = make_rule(rule_config({"rule": "voter", "mode": "encounters", "rate": rate}))
    beliefs = BeliefState(x0.copy(), np.full((n, n_topics), 0.5))
    want = x0.copy()
    rng = CounterRNG(seed)
    for r in range(1, 6):
        rule.update(beliefs, NO_EXPOSURES, direct_context(n, n_topics, seed, r, alive))
        for t, seq in enumerate(plain_encounters(rng, r, alive, n_topics)):
            for k, (i, j) in enumerate(seq):
                coin = rng.uniform(r, Draw.COIN, np.array([k]), n_topics)[0, t]
                adopt = rng.uniform(r, Draw.ADOPT, np.array([k]), n_topics)[0, t]
                if adopt < rate:
                    if coin < 0.5:
                        want[i, t] = want[j, t]
                    else:
                        want[j, t] = want[i, t]
        np.testing.assert_array_equal(beliefs.position, want)


def test_partners_are_others_and_followees() -> None:
    """`complete` partners are other living agents; `neighbours` partners are living
    followees (−1 for agents who follow no living account)."""
    n = 30
    alive = np.ones(n, bool)
    alive[[4, 9]] = False
    live = np.nonzero(alive)[0]
    other = random_others(ctx_for(n, alive=alive), live, 3)
    assert (other != live[:, None]).all() and np.isin(other, live).all()
    graph, _ = strongly_connected_graph(n, extra=2, seed=1)
    ctx = ctx_for(n, alive=alive, graph=graph)
    partner = random_followees(ctx, live, 3, living_followees(ctx, n))
    src, dst = graph.edge_arrays()
    edges = set(zip(src.tolist(), dst.tolist(), strict=True))
    for i, a in enumerate(live.tolist()):
        for t in range(3):
            j = int(partner[i, t])
            assert j == -1 or ((a, j) in edges and alive[j])


def test_conflict_free_proposals_are_disjoint() -> None:
    """Kept proposals never share an agent on a topic, and a good share is kept."""
    n = 200
    live = np.arange(n)
    partner = random_others(ctx_for(n), live, 3)
    keep = conflict_free(ctx_for(n), live, partner, n)
    for t in range(3):
        ends = np.concatenate([live[keep[:, t]], partner[keep[:, t], t]])
        assert len(ends) == len(set(ends.tolist()))
        assert keep[:, t].mean() > 0.2


DIRECT = [(rule, mode) for mode in ("encounters", "pairs", "complete", "neighbours")
          for rule in ("deffuant", "voter", "algorithmic_bias", "degroot", "hegselmann_krause",
                       "friedkin_johnsen")
          if mode != "encounters" or rule in ("deffuant", "voter")]


@pytest.mark.parametrize(("rule", "mode"), DIRECT)
def test_direct_modes_are_deterministic_and_spare_the_dead(rule: str, mode: str) -> None:
    """Same seed → same positions, bit for bit; another seed → different (for the random
    modes); dead agents neither move nor influence anyone."""
    n = 60
    graph, trust = strongly_connected_graph(n, extra=3, seed=2)
    x0 = np.random.default_rng(0).uniform(-1, 1, (n, 2))
    spec = {"rule": rule, "mode": mode}
    if rule in ("deffuant", "algorithmic_bias", "hegselmann_krause"):
        spec["epsilon"] = 2.0  # everyone within reach, so every encounter moves someone
    a, _ = run_rule(spec, x0, 5, seed=1, graph=graph, trust=trust)
    b, _ = run_rule(spec, x0, 5, seed=1, graph=graph, trust=trust)
    np.testing.assert_array_equal(a, b)
    deterministic = mode == "complete" and rule in ("degroot", "hegselmann_krause",
                                                    "friedkin_johnsen")
    if not deterministic and not (mode == "neighbours" and rule in (
            "degroot", "hegselmann_krause", "friedkin_johnsen")):
        c, _ = run_rule(spec, x0, 5, seed=2, graph=graph, trust=trust)
        assert not np.array_equal(a, c)
    # Dead agents: give them an extreme, distinctive position; it must stay and not spread.
    rule_obj = make_rule(rule_config(spec))
    x = x0.copy()
    alive = np.ones(n, bool)
    alive[::7] = False
    x[~alive] = 0.987654321
    beliefs = BeliefState(x.copy(), np.full((n, 2), 0.5))
    for r in range(1, 4):
        rule_obj.update(beliefs, Exposures(np.empty(0, np.int64), np.empty((0, 0), np.int64),
                                           np.empty((0, 0), np.int32),
                                           np.empty((0, 0), np.int32), np.empty((0, 0))),
                        UpdateContext(round=r, posts=PostStore(2, 2), trust=trust,
                                      history=None, engagement=np.zeros((n, 2)),
                                      rng=CounterRNG(5), graph=graph, alive=alive,
                                      initial_position=x.copy()))
    np.testing.assert_array_equal(beliefs.position[~alive], x[~alive])
    if rule == "voter":
        assert not np.isin(beliefs.position[alive], [0.987654321]).any()


def test_draw_purposes_are_not_used_by_the_engine() -> None:
    """Engine purposes are enum + 100·platform + 1000·slot (slot < 10, feed attempts < 4);
    the belief draws use none of those keys, and each other's neither."""
    used = {p + 100 * k + 1000 * s for p in Purpose for k in range(MAX_CODE + 1)
            for s in range(10)}
    ours = [int(d) for d in Draw]
    assert len(set(ours)) == len(ours)
    assert not set(ours) & used


def test_flags() -> None:
    """uses_trust when trust weights are read; uses_novelty when seen posts are skipped."""
    assert make_rule(rule_config({"rule": "degroot", "weights": "trust"})).uses_trust
    assert not make_rule(rule_config({"rule": "degroot"})).uses_trust
    for name in ("deffuant", "hegselmann_krause", "degroot", "friedkin_johnsen", "voter",
                 "algorithmic_bias"):
        assert make_rule(rule_config({"rule": name, "skip_seen": True})).uses_novelty
        assert not make_rule(rule_config({"rule": name})).uses_novelty
    assert set(BELIEF_RULES.names()) >= {"social_influence", "bounded_confidence"}


@pytest.mark.parametrize(("update", "message"), [
    ({"rule": "deffuant", "epsilon": 3}, "beliefs.update.epsilon: must be <= 2"),
    ({"rule": "voter", "mode": "ring"}, "beliefs.update.mode: must be one of"),
    ({"rule": "degroot", "mode": "complete", "weights": "trust"}, "weights 'trust' needs"),
    ({"rule": "deffuant", "mode": "pairs", "skip_seen": True}, "skip_seen applies"),
    ({"rule": "deffuant", "mode": "encounters", "skip_seen": True}, "skip_seen applies"),
    ({"rule": "degroot", "mode": "encounters"},
     "mode 'encounters' is not available for rule 'degroot' (its modes: exposures, pairs"),
    ({"rule": "hegselmann_krause", "mode": "encounters"}, "not available for rule"),
    ({"rule": "friedkin_johnsen", "mode": "encounters"}, "not available for rule"),
    ({"rule": "algorithmic_bias", "mode": "encounters"}, "not available for rule"),
    ({"rule": "algorithmic_bias", "gama": 1}, "did you mean 'gamma'"),
    ({"rule": "friedkin_johnsen", "susceptibility": 1.5}, "susceptibility"),
    ({"rule": "kuramoto"}, "unknown kind 'kuramoto'"),
])
def test_config_errors_name_the_field(quickstart_dict, update: dict, message: str) -> None:
    """Bad rule parameters are config errors that name the field and the problem."""
    from shoal.config import parse_config

    with pytest.raises(ConfigError) as err:
        parse_config({**quickstart_dict, "beliefs": {"update": update}})
    assert message in " ".join(str(err.value).split())

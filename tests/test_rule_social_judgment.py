"""The `social_judgment` belief rule (Jager & Amblard 2005, with persuasive-arguments
reinforcement): its zones, bounds, reinforcement, order of reading, modes and config."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.beliefs.rules import Exposures, UpdateContext, make_rule
from shoal.beliefs.rules.social_judgment import SocialJudgment, SocialJudgmentRule, judge
from shoal.beliefs.state import BeliefState
from shoal.beliefs.trust import TrustStore
from shoal.core.errors import ConfigError
from shoal.core.posts import NewPosts, PostStore
from tests.validation.harness import rule_config, run_rule

MU, U, T = 0.1, 0.4, 1.2


def read(x0: float, stances: list[float], **cfg: float) -> float:
    """One agent at x0 reads posts of the given stances (oldest first) on one topic."""
    posts = PostStore(1, 2)
    k = len(stances)
    posts.append(NewPosts(platform=np.zeros(k, np.int8), author=np.ones(k, np.int32),
                          kind=np.zeros(k, np.int8), parent=np.full(k, -1),
                          stance=np.array(stances, dtype=float)[:, None], text=[""] * k), 1)
    beliefs = BeliefState(np.full((1, 1), x0), np.full((1, 1), 0.5))
    exp = Exposures(np.array([0]), np.arange(k)[None, :], np.zeros((1, k), np.int32),
                    np.zeros((1, k), np.int32), np.zeros((1, k)))
    ctx = UpdateContext(round=2, posts=posts, trust=TrustStore(0.5), history=None,
                        engagement=np.zeros((1, 1)))
    spec = {"mu": MU, "acceptance": U, "rejection": T, **cfg}
    rule = make_rule(SocialJudgment(rule="social_judgment", **spec))
    assert isinstance(rule, SocialJudgmentRule)
    rule.update(beliefs, exp, ctx)
    return float(beliefs.position[0, 0])


@pytest.mark.parametrize(("x", "s"), [(0.0, 0.3), (0.2, -0.1), (-0.5, -0.2), (0.9, 0.6)])
def test_attraction_inside_the_latitude_of_acceptance(x, s):
    """|s − x| < u: x moves by μ(s − x), towards the message."""
    assert read(x, [s]) == pytest.approx(x + MU * (s - x), abs=1e-15)
    assert abs(read(x, [s]) - s) < abs(x - s)


@pytest.mark.parametrize(("x", "s"), [(0.5, -0.8), (-0.3, 0.95), (0.3, -1.0)])
def test_repulsion_beyond_the_latitude_of_rejection(x, s):
    """|s − x| > t: x moves by −μ(s − x), away from the message."""
    new = read(x, [s])
    assert new == pytest.approx(np.clip(x - MU * (s - x), -1, 1), abs=1e-15)
    assert abs(new - s) > abs(x - s)


@pytest.mark.parametrize(("x", "s"), [(0.0, 0.4), (0.0, -0.9), (0.5, -0.7), (0.2, 1.0),
                                      (-0.6, 0.6)])
def test_nothing_in_the_latitude_of_non_commitment(x, s):
    """u ≤ |s − x| ≤ t: no change, with or without reinforcement."""
    assert read(x, [s]) == x
    assert read(x, [s], reinforce=0.3) == x


def test_positions_stay_in_bounds():
    """Strong contrast and reinforcement at the poles never leave [−1, 1]."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 10_000)
    s = rng.uniform(-1, 1, 10_000)
    x[:50], s[:50] = 1.0, -1.0  # contrast pushes the pole outward
    x[50:100], s[50:100] = 0.99, 0.995  # reinforcement at the pole
    for mu, u, t, rho in [(1.0, 0.5, 0.5, 1.0), (0.5, 2.0, 2.0, 0.5), (0.3, 0.1, 0.2, 0.0)]:
        new = judge(x, s, mu, u, t, rho)
        assert np.all((new >= -1) & (new <= 1))
    assert read(0.95, [-0.9], mu=1.0) == 1.0  # contrast: clipped at the pole
    assert read(0.98, [0.99], reinforce=0.5) == 1.0  # reinforcement: clipped at the pole


@pytest.mark.parametrize(("x", "s"), [(0.5, 0.5), (0.5, 0.3), (-0.4, -0.6), (-0.4, -0.2)])
def test_reinforcement_moves_outward_on_agreeing_messages(x, s):
    """An accepted message of the receiver's sign adds ρ·s: the receiver ends further
    towards its own pole than plain assimilation puts it, by exactly ρ·s."""
    rho = 0.05
    plain, reinforced = read(x, [s]), read(x, [s], reinforce=rho)
    assert reinforced - plain == pytest.approx(rho * s, abs=1e-15)
    assert np.sign(reinforced - plain) == np.sign(x)
    if s == x:  # a message at one's own position moves one outward
        assert abs(reinforced) > abs(x)


@pytest.mark.parametrize(("x", "s"), [(0.1, -0.1), (-0.15, 0.2), (0.0, 0.2)])
def test_no_reinforcement_across_or_at_the_centre(x, s):
    """A message of the other sign (or a receiver at 0) only assimilates."""
    assert read(x, [s], reinforce=0.2) == read(x, [s])


def test_reads_oldest_first_from_the_moved_position():
    """x = 0.5, u 0.4, t 1.2: −0.75 (d = 1.25 > t) repels to 0.625; then −0.6 (d = 1.225 >
    t) repels to 0.7475. The reverse order would ignore −0.6 (d = 1.1) and end at 0.625."""
    assert read(0.5, [-0.75, -0.6]) == pytest.approx(0.7475, abs=1e-12)
    assert read(0.5, [-0.6, -0.75]) == pytest.approx(0.625, abs=1e-12)


def test_unaddressed_topics_do_not_move():
    """A post that does not address a topic (NaN stance) leaves that position alone."""
    assert read(0.3, [float("nan")], reinforce=0.5) == 0.3


def test_defaults_are_the_published_model_without_reinforcement():
    c = SocialJudgment(rule="social_judgment")
    assert (c.mu, c.acceptance, c.rejection, c.reinforce, c.mode) == (
        0.1, 0.4, 1.2, 0.0, "exposures")


@pytest.mark.parametrize(("spec", "message"), [
    ({"acceptance": 0.8, "rejection": 0.5}, "must be at least acceptance"),
    ({"mu": 0}, "greater than 0"),
    ({"reinforce": -0.1}, "greater than or equal to 0"),
    ({"rejection": 2.5}, "less than or equal to 2"),
    ({"mode": "encounters"}, "not available"),
])
def test_bad_configs_are_refused(spec, message):
    with pytest.raises((ValueError, ConfigError), match=message):
        rule_config({"rule": "social_judgment", **spec})


@pytest.mark.parametrize("mode", ["pairs", "complete", "neighbours"])
def test_direct_modes_are_deterministic_and_bounded(mode):
    """Direct interaction: the same seed gives the same positions, another seed others;
    positions stay in [−1, 1]."""
    from tests.validation.networks import strongly_connected_graph

    rng = np.random.default_rng(1)
    x0 = rng.uniform(-1, 1, (60, 2))
    spec = {"rule": "social_judgment", "mode": mode, "mu": 0.2, "acceptance": 0.4,
            "rejection": 1.0, "reinforce": 0.05}
    graph = strongly_connected_graph(60, 4, seed=1)[0] if mode == "neighbours" else None
    a, _ = run_rule(spec, x0, 20, seed=3, graph=graph)
    b, _ = run_rule(spec, x0, 20, seed=3, graph=graph)
    c, _ = run_rule(spec, x0, 20, seed=4, graph=graph)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.all(np.abs(a) <= 1)


def test_pairs_bipolarize_with_a_narrow_latitude_of_rejection():
    """Jager & Amblard's stylized result: uniform opinions, random pairs, a latitude of
    rejection well inside the range (t = 0.8 on [−1, 1]) and no reinforcement: the
    population splits towards both poles (bipolarization) instead of converging."""
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-1, 1, (400, 1))
    x, _ = run_rule({"rule": "social_judgment", "mode": "pairs", "mu": 0.1,
                     "acceptance": 0.4, "rejection": 0.8}, x0, 300, seed=0)
    assert np.mean(np.abs(x) > 0.9) > 0.8
    assert 0.3 < np.mean(x > 0) < 0.7


def test_pairs_converge_when_nothing_is_rejected():
    """t = u = 2 (no rejection): pure assimilation of everyone, a single consensus."""
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-1, 1, (400, 1))
    x, _ = run_rule({"rule": "social_judgment", "mode": "pairs", "mu": 0.1,
                     "acceptance": 2.0, "rejection": 2.0}, x0, 300, seed=0)
    assert np.ptp(x) < 0.05

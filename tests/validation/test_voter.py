"""The voter model against its exact martingale property (Clifford & Sudbury 1973, "A model
for spatial conflict", Biometrika 60(3):581–588; Holley & Liggett 1975, "Ergodic theorems
for weakly interacting infinite systems and the voter model", Annals of Probability
3(4):643–663; for the complete graph e.g. Sood & Redner 2005, PRL 94:178701).

On a complete graph the share of agents holding +1 is a martingale and the process is
absorbed at consensus, so P(consensus on +1) equals the initial share f exactly. Checked
over many independent replicas: the observed share of +1 consensus must lie in the
binomial interval f ± 4σ, σ = √(f(1 − f)/replicas) (a false alarm rate below 1e-4).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.validation.harness import run_rule

N, REPLICAS, F = 40, 600, 0.3


def initial_opinions(seed: int) -> np.ndarray:
    """±1 opinions, exactly F·N of them +1 in each replica, placed at random."""
    rng = np.random.default_rng(seed)
    x = -np.ones((N, REPLICAS))
    for_ = int(F * N)
    order = np.argsort(rng.random((N, REPLICAS)), axis=0)
    np.put_along_axis(x, order[:for_], 1.0, axis=0)
    return x


@pytest.mark.parametrize("mode", ["complete", "pairs", "encounters"])
def test_consensus_probability_equals_initial_share(mode: str) -> None:
    """600 replicas (topics) of N = 40 agents with 30 % at +1: all reach consensus within
    the run, and the share that ends at +1 is within 0.3 ± 4σ (σ ≈ 0.019). (Run until
    every replica is at consensus: with sequential encounters a round can pass without a
    change before that.)"""
    x, _ = run_rule({"rule": "voter", "mode": mode}, initial_opinions(31), rounds=3000,
                    seed=31, until=lambda x: bool((np.ptp(x, axis=0) == 0).all()))
    final = x[0]
    assert (np.ptp(x, axis=0) == 0).all(), "some replicas did not reach consensus"
    share = float((final > 0).mean())
    sigma = np.sqrt(F * (1 - F) / REPLICAS)
    assert abs(share - F) <= 4 * sigma, share


def test_copies_are_exact() -> None:
    """Positions are copied, never blended: the set of values only shrinks."""
    x0 = np.random.default_rng(5).uniform(-1, 1, (50, 4))
    x, _ = run_rule({"rule": "voter", "mode": "complete", "rate": 0.5}, x0, rounds=20)
    for t in range(4):
        assert set(x[:, t]) <= set(x0[:, t])


def star(leaves: int):
    """A star of mutual follows: agent 0 follows and is followed by every leaf."""
    from shoal.core.follow_graph import FollowGraph

    hub, spokes = np.zeros(leaves, np.int64), np.arange(1, leaves + 1)
    return FollowGraph(leaves + 1, np.r_[hub, spokes], np.r_[spokes, hub])


def test_degree_weighted_consensus_probability_on_a_star() -> None:
    """On an undirected graph the degree-weighted mean Σ k_i x_i / Σ k_i is the martingale
    of the voter model (Sood & Redner 2005), not the plain share: on a star with 10 leaves,
    the hub alone at +1 holds half the degree, so P(+1 consensus) = 1/2 (the plain share is
    1/11). Mode `neighbours` with rate ½ (see the next test for rate 1): 400 replicas,
    within ± 4σ (σ = 0.025)."""
    graph, replicas = star(10), 400
    x0 = -np.ones((11, replicas))
    x0[0] = 1.0
    x, _ = run_rule({"rule": "voter", "mode": "neighbours", "rate": 0.5}, x0, rounds=2000,
                    seed=3, graph=graph,
                    until=lambda x: bool((np.ptp(x, axis=0) == 0).all()))
    assert (np.ptp(x, axis=0) == 0).all()
    assert abs(float((x[0] > 0).mean()) - 0.5) <= 4 * np.sqrt(0.25 / replicas)


def test_synchronous_rate_one_swaps_forever_on_bipartite_graphs() -> None:
    """The documented limitation of the synchronous modes at rate 1 (docs/models.md,
    `voter`): on a bipartite graph both sides copy each other at once, so a state with
    each side at one opinion swaps every round and never reaches consensus — two agents
    in mode `complete`, and a star whose hub disagrees with all its leaves."""
    x, _ = run_rule({"rule": "voter", "mode": "complete"}, np.array([[1.0], [-1.0]]), rounds=41)
    np.testing.assert_array_equal(x[:, 0], [-1.0, 1.0])
    x0 = -np.ones((11, 1))
    x0[0] = 1.0
    x, _ = run_rule({"rule": "voter", "mode": "neighbours"}, x0, rounds=41, graph=star(10))
    np.testing.assert_array_equal(x[:, 0], -x0[:, 0])

"""Hegselmann–Krause against Hegselmann & Krause (2002), "Opinion dynamics and bounded
confidence: models, analysis and simulation", JASSS 5(3):2, and the consensus threshold
studies of Fortunato (2005), "On the consensus threshold for the opinion dynamics of
Krause–Hegselmann", Int. J. Mod. Phys. C 16(2):259–270, and Lorenz (2007), "Continuous
opinion dynamics under bounded confidence: a survey", Int. J. Mod. Phys. C 18:1819–1838.

Setup: n = 625 agents (as in Hegselmann & Krause's figures), opinions uniform on [0, 1],
everyone hears everyone (mode `complete`), synchronous updates, run to the fixed point.
Published regimes: fragmentation for small ε (ε = 0.05: many clusters), polarisation
around ε = 0.15 (a few clusters, never consensus), and consensus for ε clearly above the
threshold ε_c ≈ 0.2 (Fortunato; Lorenz's bifurcation diagram).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.validation.harness import clusters, run_rule, to_shoal

N, REPLICAS, SEEDS = 625, 8, (21, 22)


def final_cluster_counts(eps01: float) -> list[int]:
    """Cluster counts per replica at the fixed point for ε on [0, 1] (reached exactly: a
    round that moves nobody)."""
    counts = []
    for seed in SEEDS:
        x0 = to_shoal(np.random.default_rng(seed).uniform(0, 1, (N, REPLICAS)))
        x, rounds = run_rule({"rule": "hegselmann_krause", "mode": "complete",
                              "epsilon": 2 * eps01}, x0, rounds=1000, until_still=0.0)
        assert rounds < 1000, "did not reach the fixed point"
        counts += [len(clusters(x[:, t], gap=1e-6)) for t in range(REPLICAS)]
    return counts


@pytest.mark.parametrize("eps01", [0.25, 0.3])
def test_consensus_above_threshold(eps01: float) -> None:
    """ε ≥ 0.25 (above ε_c ≈ 0.2): every one of the 16 replicas ends in one cluster.
    Tolerance: none; the threshold is a sharp transition for n in the hundreds and both
    values are well above it."""
    assert final_cluster_counts(eps01) == [1] * (REPLICAS * len(SEEDS))


def test_polarisation_below_threshold() -> None:
    """ε = 0.15 (below ε_c): no replica reaches consensus; Hegselmann & Krause's example
    shows two to three clusters, and so must every replica here."""
    counts = final_cluster_counts(0.15)
    assert all(2 <= k <= 3 for k in counts), counts


def test_fragmentation_for_small_epsilon() -> None:
    """ε = 0.05: fragmentation into many clusters; with clusters ≈ 2ε apart in the bulk
    (Lorenz 2007) that is about 1/(2ε) = 10; we require ≥ 6 in every replica (margins for
    finite-n merging at the edges, where clusters drift inwards)."""
    counts = final_cluster_counts(0.05)
    assert min(counts) >= 6, counts


@pytest.mark.parametrize("eps01", [0.19, 0.2, 0.21, 0.22, 0.23])
def test_reaches_its_fixed_point_in_finite_time(eps01: float) -> None:
    """The synchronous model reaches a fixed point after finitely many rounds (Dittmer
    2001; Lorenz 2005), so a round comes that moves nobody, not even by an ulp: 16
    replicas of n = 625 near the consensus threshold, where clusters are large and the
    sums over them carry the most rounding. (Before the exact mean of a settled cluster,
    replica 1 at ε = 0.22 had a cluster stepping between two neighbouring floats forever.)"""
    x0 = to_shoal(np.random.default_rng(7).uniform(0, 1, (N, 16)))
    _, rounds = run_rule({"rule": "hegselmann_krause", "mode": "complete",
                          "epsilon": 2 * eps01}, x0, rounds=2000, until_still=0.0)
    assert rounds < 2000, "some position still moves after 2,000 rounds"


def test_complete_mode_equals_the_definition() -> None:
    """One synchronous step on 300 agents equals the O(N²) definition
    x_i ← mean{x_j : |x_j − x_i| ≤ ε} (1e-12), which the sorted-prefix-sum form must match."""
    x0 = np.random.default_rng(4).uniform(-1, 1, (300, 2))
    eps = 0.3
    x, _ = run_rule({"rule": "hegselmann_krause", "mode": "complete", "epsilon": eps}, x0, 1)
    close = np.abs(x0[None, :, :] - x0[:, None, :]) <= eps  # [i, j, t]
    expected = (close * x0[None, :, :]).sum(axis=1) / close.sum(axis=1)
    np.testing.assert_allclose(x, expected, rtol=0, atol=1e-12)


def exact_fixed_point(n: int, eps01) -> list:
    """Hegselmann–Krause from n equidistant opinions k/(n − 1) on [0, 1], in exact rational
    arithmetic (so ties at distance exactly ε are decided as the closed bound says), run to
    its fixed point."""
    from fractions import Fraction

    x = [Fraction(k, n - 1) for k in range(n)]
    for _ in range(1000):
        y = [sum(s) / len(s) for s in ([xj for xj in x if abs(xj - xi) <= eps01] for xi in x)]
        if y == x:
            return x
        x = y
    raise AssertionError("no fixed point")


@pytest.mark.parametrize("mode", ["complete", "neighbours"])
@pytest.mark.parametrize(("n", "eps01"), [(11, (1, 10)), (21, (1, 20)), (21, (1, 10)),
                                          (11, (3, 10)), (21, (1, 4))])
def test_equidistant_start_ties_are_within_the_bound(n: int, eps01: tuple, mode: str) -> None:
    """Equidistant start profiles put many pairs exactly ε apart; the closed bound counts
    them as within. Shoal (on [−1, 1], ε doubled; `complete`, and `neighbours` on the
    complete follow graph) must end at the exact-arithmetic fixed point (1e-9), whatever
    floating-point rounding does to those distances. (Without the allowance for rounding:
    n = 11, ε = 0.1 ended in 3 clusters in `complete` and 5 in `neighbours`, and n = 21,
    ε = 0.05 in 9–10 instead of 7.)"""
    from fractions import Fraction

    from shoal.core.follow_graph import FollowGraph

    eps = Fraction(*eps01)
    expected = np.array([float(v) for v in exact_fixed_point(n, eps)])
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    x, rounds = run_rule({"rule": "hegselmann_krause", "mode": mode, "epsilon": 2 * float(eps)},
                         to_shoal(np.linspace(0, 1, n))[:, None], rounds=1000,
                         graph=FollowGraph(n, src, dst), until_still=1e-13)
    assert rounds < 1000
    np.testing.assert_allclose((x[:, 0] + 1) / 2, expected, rtol=0, atol=1e-9)

"""Algorithmic bias against Sîrbu, Pedreschi, Giannotti & Kertész (2019), "Algorithmic bias
amplifies opinion fragmentation and polarization: A bounded confidence model", PLOS ONE
14(3):e0213246.

Setup of the paper: N = 100 agents, opinions uniform on [0, 1], μ = ½; the first agent of
an encounter is drawn uniformly, its partner with probability ∝ d^−γ. Results (their
Figs 1, 3, 5): γ = 0 is Deffuant (consensus for ε ≳ 0.3); as γ grows at fixed ε the
number of clusters grows — fragmentation appears even where Deffuant predicts consensus —
and convergence slows down dramatically.

The paper reports means over 100 runs without a closed form, so the test is qualitative
with wide margins: with 24 replicas the standard error of a mean cluster count is below
0.3 at γ = 0, far below the differences required.
"""

from __future__ import annotations

import numpy as np

from tests.validation.harness import clusters, run_rule, to_shoal

N, REPLICAS, SEEDS, ROUNDS = 100, 12, (41, 42), 300


def mean_clusters(eps01: float, gamma: float) -> float:
    """Mean number of clusters (gap 0.01 on [0, 1]) over the replicas after ROUNDS rounds
    (each round: N proposals, a conflict-free subset of them interacts)."""
    counts = []
    for seed in SEEDS:
        x0 = to_shoal(np.random.default_rng(seed).uniform(0, 1, (N, REPLICAS)))
        x, _ = run_rule({"rule": "algorithmic_bias", "mode": "pairs", "epsilon": 2 * eps01,
                         "mu": 0.5, "gamma": gamma}, x0, rounds=ROUNDS, seed=seed)
        counts += [len(clusters(x[:, t], gap=0.02)) for t in range(REPLICAS)]
    return float(np.mean(counts))


def test_more_clusters_as_gamma_grows() -> None:
    """ε = 0.3 on [0, 1]: γ = 0 gives (near-)consensus like Deffuant — mean ≤ 2.5 clusters
    with N = 100 (Sîrbu et al. Fig 1 at γ = 0, ε = 0.3: ≈ 1–2); the mean grows with γ
    over 0 < 0.8 < 1.6, and at γ = 1.6 the population is fragmented (≥ 4× the γ = 0 count)."""
    c0, c1, c2 = (mean_clusters(0.3, g) for g in (0.0, 0.8, 1.6))
    assert c0 <= 2.5, c0
    assert c0 < c1 < c2, (c0, c1, c2)
    assert c2 >= 4 * c0, (c0, c2)


def test_gamma_zero_is_deffuant() -> None:
    """With γ = 0 every partner is equally likely, so the partner draw is uniform: after
    convergence the cluster count follows Deffuant's ⌊1/(2ε)⌋ = 2 at ε = 0.2 (±1 per
    replica, as in test_deffuant)."""
    x0 = to_shoal(np.random.default_rng(43).uniform(0, 1, (N, REPLICAS)))
    x, _ = run_rule({"rule": "algorithmic_bias", "mode": "pairs", "epsilon": 0.4, "mu": 0.5,
                     "gamma": 0.0}, x0, rounds=600, seed=43)
    counts = [len(clusters(x[:, t], gap=0.02, min_share=0.05)) for t in range(REPLICAS)]
    assert all(1 <= k <= 3 for k in counts), counts

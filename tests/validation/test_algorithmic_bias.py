"""Algorithmic bias against Sîrbu, Pedreschi, Giannotti & Kertész (2019), "Algorithmic bias
amplifies opinion fragmentation and polarization: A bounded confidence model", PLOS ONE
14(3):e0213246.

Setup of the paper: N = 100 agents, opinions uniform on [0, 1], μ = ½; the first agent of
an encounter is drawn uniformly, its partner with probability ∝ d^−γ. Results (their
Figs 1, 3, 5): γ = 0 is Deffuant (consensus for ε ≳ 0.3); as γ grows at fixed ε the
number of clusters grows — fragmentation appears even where Deffuant predicts consensus —
and convergence slows down dramatically.

The paper counts clusters at convergence (means over 100 runs, no closed form). Counting
after a fixed number of rounds instead mostly measures the slowdown: at γ = 1.2 the
groups still unmerged after 300 rounds number ~30, the clusters at convergence ~2. So the
tests stop each replica once it is frozen — its opinions split, at gaps of at least ε,
into groups each narrower than ε: no two groups can interact again and each group ends
as one cluster, so the final clusters are known — and check the two results separately.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.validation.harness import clusters, run_rule, to_shoal, to_unit

N, REPLICAS, SEED, EPS, CHECK_EVERY = 100, 24, 41, 0.3, 10


def frozen_groups(u: np.ndarray, eps: float) -> list[int] | None:
    """Group sizes of one replica's opinions on [0, 1] if it is frozen (see above), else
    None."""
    xs = np.sort(u)
    cuts = np.nonzero(np.diff(xs) >= eps)[0] + 1
    groups = np.split(xs, cuts)
    if any(g[-1] - g[0] >= eps for g in groups):
        return None
    return [len(g) for g in groups]


def run_to_freeze(gamma: float, cap: int = 40_000) -> tuple[np.ndarray, list[list[int]]]:
    """Per replica: the round (to CHECK_EVERY) at which it froze, and its groups' sizes
    then — the final clusters. Every replica must freeze within `cap` rounds."""
    x0 = to_shoal(np.random.default_rng(SEED).uniform(0, 1, (N, REPLICAS)))
    froze_at = np.full(REPLICAS, -1)
    sizes: list[list[int]] = [[] for _ in range(REPLICAS)]
    rounds = [0]

    def all_frozen(x: np.ndarray) -> bool:
        rounds[0] += 1
        if rounds[0] % CHECK_EVERY:
            return False
        u = to_unit(x)
        for t in np.flatnonzero(froze_at < 0):
            groups = frozen_groups(u[:, t], EPS)
            if groups is not None:
                froze_at[t], sizes[t] = rounds[0], groups
        return bool((froze_at > 0).all())

    run_rule({"rule": "algorithmic_bias", "mode": "pairs", "epsilon": 2 * EPS, "mu": 0.5,
              "gamma": gamma}, x0, rounds=cap, seed=SEED, until=all_frozen)
    assert (froze_at > 0).all(), f"γ = {gamma}: {np.sum(froze_at < 0)} replicas not frozen"
    return froze_at, sizes


@pytest.mark.slow  # ~30 s: γ = 1 takes up to ~6,600 rounds to freeze
def test_bias_slows_convergence_and_fragments() -> None:
    """ε = 0.3 on [0, 1], N = 100, 24 replicas, each run until frozen.

    Convergence slows dramatically with γ (Sîrbu et al. Fig 4: the interactions needed
    grow ≈ exp(3.4 γ) at ε = 0.4): the median round of freezing at γ = 1 at least 10× that
    of γ = 0 (measured: 50 vs 1,565 rounds; seed 42: 40 vs 1,450).

    More clusters at convergence (their Figs 1, 7): the mean effective number of
    clusters, 1 / Σ (cluster share)², and the replicas ending with more than one major
    cluster (≥ 5 % of the agents), both more at γ = 1 than at γ = 0 (measured: 1.34 vs
    1.71 and 13 vs 21 of 24; seed 42: 1.45 vs 1.81 and 12 vs 23), with γ = 0 near
    consensus as Deffuant's ε = 0.3 gives (mean effective clusters ≤ 1.6)."""
    t0, s0 = run_to_freeze(0.0)
    t1, s1 = run_to_freeze(1.0)
    assert np.median(t1) >= 10 * np.median(t0), (np.median(t0), np.median(t1))

    def effective(sizes: list[int]) -> float:
        return 1.0 / float(np.sum((np.array(sizes) / N) ** 2))

    def several_major(all_sizes: list[list[int]]) -> int:
        return sum(sum(k >= 0.05 * N for k in s) > 1 for s in all_sizes)

    e0, e1 = (float(np.mean([effective(s) for s in ss])) for ss in (s0, s1))
    assert e0 <= 1.6, e0
    assert e1 > e0, (e0, e1)
    assert several_major(s1) > several_major(s0), (several_major(s0), several_major(s1))


def test_gamma_zero_is_deffuant() -> None:
    """With γ = 0 every partner is equally likely, so the partner draw is uniform: after
    convergence the cluster count follows Deffuant's ⌊1/(2ε)⌋ = 2 at ε = 0.2 (±1 per
    replica, as in test_deffuant)."""
    replicas = 12
    x0 = to_shoal(np.random.default_rng(43).uniform(0, 1, (N, replicas)))
    x, _ = run_rule({"rule": "algorithmic_bias", "mode": "pairs", "epsilon": 0.4, "mu": 0.5,
                     "gamma": 0.0}, x0, rounds=600, seed=43)
    counts = [len(clusters(x[:, t], gap=0.02, min_share=0.05)) for t in range(replicas)]
    assert all(1 <= k <= 3 for k in counts), counts

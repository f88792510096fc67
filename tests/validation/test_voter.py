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

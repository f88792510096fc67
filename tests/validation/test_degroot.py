"""DeGroot's model against DeGroot (1974), "Reaching a consensus", Journal of the American
Statistical Association 69(345):118–121, and pairwise averaging against Boyd, Ghosh,
Prabhakar & Shah (2006), "Randomized gossip algorithms", IEEE Transactions on Information
Theory 52(6):2508–2530.

DeGroot: x(t+1) = W x(t) with W row-stochastic. If W is irreducible (strongly connected
influence graph) and aperiodic (here: every agent keeps a positive weight on itself), all
opinions converge to the same value π·x(0), π the left eigenvector of W for eigenvalue 1
(normalised to sum 1). This is an exact statement, so the tolerance is numerical: 1e-9.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.validation.harness import run_rule
from tests.validation.networks import influence_matrix, strongly_connected_graph

N, T = 60, 3


def left_perron(w: np.ndarray) -> np.ndarray:
    """π with π W = π, Σπ = 1."""
    vals, vecs = np.linalg.eig(w.T)
    pi = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
    return pi / pi.sum()


@pytest.mark.parametrize(("weights", "self_weight"), [
    ("trust", 0.3), ("trust", None), ("uniform", None), ("uniform", 0.6)])
def test_limit_is_left_eigenvector_weighted_initial_opinions(weights: str,
                                                             self_weight: float | None
                                                             ) -> None:
    """Mode `neighbours` on a fixed strongly connected follow graph with trust weights:
    every agent ends at π·x(0), within 1e-9 (exact result; the tolerance is rounding over
    the rounds run). The first step also equals W x(0) to 1e-12, checking that the engine
    applies exactly the documented W."""
    graph, trust = strongly_connected_graph(N, extra=3, seed=5)
    w = influence_matrix(graph, trust if weights == "trust" else None, self_weight)
    assert np.allclose(w.sum(axis=1), 1.0)
    x0 = np.random.default_rng(7).uniform(-1, 1, (N, T))
    spec = {"rule": "degroot", "mode": "neighbours", "weights": weights,
            "self_weight": self_weight}
    x1, _ = run_rule(spec, x0, rounds=1, graph=graph, trust=trust)
    np.testing.assert_allclose(x1, w @ x0, rtol=0, atol=1e-12)
    x, _ = run_rule(spec, x0, rounds=2000, graph=graph, trust=trust)
    expected = left_perron(w) @ x0  # [T]
    np.testing.assert_allclose(x, np.broadcast_to(expected, x.shape), rtol=0, atol=1e-9)


def test_complete_mode_reaches_the_mean_in_one_step() -> None:
    """Equal weights on everyone (W = 11ᵀ/N): π is uniform, so the limit is the mean, and
    here it is reached after one round (exact, 1e-12)."""
    x0 = np.random.default_rng(8).uniform(-1, 1, (200, T))
    x, _ = run_rule({"rule": "degroot", "mode": "complete"}, x0, rounds=1)
    np.testing.assert_allclose(x, np.broadcast_to(x0.mean(axis=0), x.shape), atol=1e-12)


def test_pairwise_gossip_conserves_the_mean_and_converges_to_it() -> None:
    """Mode `pairs` with equal weights is randomized gossip (Boyd et al. 2006): each
    encounter replaces both values by their average, so the mean is conserved exactly
    (1e-12) and every value converges to it; after 200 rounds of N/2 encounters on a
    complete population the spread is below 1e-9 (the error contracts by a constant
    factor per round, ≈ ½ in expectation)."""
    x0 = np.random.default_rng(9).uniform(-1, 1, (500, T))
    x, _ = run_rule({"rule": "degroot", "mode": "pairs"}, x0, rounds=200, seed=4)
    np.testing.assert_allclose(x.mean(axis=0), x0.mean(axis=0), rtol=0, atol=1e-12)
    assert np.ptp(x, axis=0).max() < 1e-9

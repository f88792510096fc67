"""Friedkin–Johnsen against Friedkin & Johnsen (1990), "Social influence and opinions",
Journal of Mathematical Sociology 15(3–4):193–206.

x(t+1) = Λ W x(t) + (I − Λ) x(0), Λ = diag(λ_i) the susceptibilities (1 − λ_i the
stubbornness). For ρ(ΛW) < 1 the unique equilibrium is x* = (I − ΛW)⁻¹ (I − Λ) x(0) and
the iteration converges to it geometrically. Exact statement: tolerance 1e-9 (rounding).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.validation.harness import run_rule
from tests.validation.networks import influence_matrix, strongly_connected_graph

N, T = 60, 3


@pytest.mark.parametrize("susceptibility", [0.7, "confidence"])
def test_equilibrium_is_closed_form(susceptibility: float | str) -> None:
    """Mode `neighbours` on a fixed graph with trust weights and self weight 0.2; λ one
    number, or λ_i,t = 1 − confidence_i,t (per agent and topic). Positions reach
    x* = (I − ΛW)⁻¹(I − Λ)x(0) per topic within 1e-9, and the first round equals
    ΛWx(0) + (I − Λ)x(0) within 1e-12."""
    graph, trust = strongly_connected_graph(N, extra=3, seed=6)
    w = influence_matrix(graph, trust, 0.2)
    rng = np.random.default_rng(10)
    x0 = rng.uniform(-1, 1, (N, T))
    confidence = rng.uniform(0.05, 0.6, (N, T))
    lam = (1.0 - confidence) if susceptibility == "confidence" else np.full((N, T), 0.7)
    spec = {"rule": "friedkin_johnsen", "mode": "neighbours", "weights": "trust",
            "self_weight": 0.2, "susceptibility": susceptibility}
    x1, _ = run_rule(spec, x0, rounds=1, graph=graph, trust=trust, confidence=confidence)
    np.testing.assert_allclose(x1, lam * (w @ x0) + (1 - lam) * x0, rtol=0, atol=1e-12)
    x, _ = run_rule(spec, x0, rounds=800, graph=graph, trust=trust, confidence=confidence)
    for t in range(T):
        big_lam = np.diag(lam[:, t])
        expected = np.linalg.solve(np.eye(N) - big_lam @ w, (np.eye(N) - big_lam) @ x0[:, t])
        np.testing.assert_allclose(x[:, t], expected, rtol=0, atol=1e-9)


def test_fully_stubborn_agents_do_not_move_and_no_consensus_forms() -> None:
    """λ = 0 keeps everyone at x(0) (exact); with 0 < λ < 1 opinions stay dispersed — the
    model's point, unlike DeGroot — so the equilibrium spread is > 0."""
    graph, trust = strongly_connected_graph(N, extra=3, seed=6)
    x0 = np.random.default_rng(11).uniform(-1, 1, (N, T))
    x, _ = run_rule({"rule": "friedkin_johnsen", "mode": "neighbours", "susceptibility": 0.0},
                    x0, rounds=5, graph=graph, trust=trust)
    np.testing.assert_array_equal(x, x0)
    x, _ = run_rule({"rule": "friedkin_johnsen", "mode": "neighbours", "susceptibility": 0.5},
                    x0, rounds=200, graph=graph, trust=trust)
    assert np.ptp(x, axis=0).min() > 0.1

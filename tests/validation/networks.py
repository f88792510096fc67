"""Small fixed networks with trust, and the influence matrix W the engine should apply."""

from __future__ import annotations

import numpy as np

from shoal.beliefs.trust import TrustStore
from shoal.core.follow_graph import FollowGraph


def strongly_connected_graph(n: int, extra: int, seed: int) -> tuple[FollowGraph, TrustStore]:
    """A directed follow graph on n agents — a ring i → i+1 (so it is strongly connected)
    plus `extra` random follows per agent — and random trust in [0.1, 1] on its edges."""
    rng = np.random.default_rng(seed)
    src = np.concatenate([np.arange(n), np.repeat(np.arange(n), extra)])
    dst = np.concatenate([(np.arange(n) + 1) % n, rng.integers(0, n, n * extra)])
    keep = src != dst
    graph = FollowGraph(n, src[keep], dst[keep])
    s, d = graph.edge_arrays()
    trust = TrustStore(0.5)
    trust.add(s, d, rng.uniform(0.1, 1.0, len(s)) - 0.5)
    return graph, trust


def influence_matrix(graph: FollowGraph, trust: TrustStore | None,
                     self_weight: float | None) -> np.ndarray:
    """Row-stochastic W of the documented DeGroot step in mode `neighbours`: W_ij ∝ w_ij
    over followees (w = trust, or 1 without a store); the agent's own weight is
    `self_weight`, or it counts as one more influence of weight 1."""
    n = graph.n_agents
    s, d = graph.edge_arrays()
    w = trust.get(s, d) if trust is not None else np.ones(len(s))
    m = np.zeros((n, n))
    m[s, d] = w
    total = m.sum(axis=1, keepdims=True)
    if self_weight is None:
        return (m + np.eye(n)) / (1.0 + total)
    return self_weight * np.eye(n) + (1.0 - self_weight) * m / total

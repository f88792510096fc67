"""The preferential-attachment graph is networkx's Barabási–Albert graph, edge for edge,
without building it in networkx (which at a million agents took gigabytes)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from shoal.world.follow_init import _barabasi_albert, _undirected


@pytest.mark.parametrize(("n", "m", "seed", "mutual"), [
    (3000, 5, 7, False), (2000, 4, 2**31 - 1, True), (7, 6, 0, False), (500, 1, 3, False)])
def test_same_edges_as_networkx(n, m, seed, mutual):
    want = _undirected(nx.barabasi_albert_graph(n, m, seed=seed), mutual)
    got = _barabasi_albert(n, m, seed, mutual)
    assert np.array_equal(np.sort(want[0] * n + want[1]), np.sort(got[0] * n + got[1]))

"""Round tables own their memory: the writer thread commits them while the driver mutates
the world for the next round, so no table may be a view of world state."""

from __future__ import annotations

import numpy as np

from shoal.config import parse_config
from shoal.engine.round_log import beliefs_table, initial_follows_table
from shoal.world.world import build_world


def test_tables_do_not_alias_world_state(quickstart_dict):
    """Mutating beliefs and the graph after building the tables leaves the tables as they
    were."""
    cfg = parse_config({**quickstart_dict, "population": {"size": 50}})
    world = build_world(cfg)
    beliefs = beliefs_table(world, 0)
    follows = initial_follows_table(world)
    before = (beliefs.column("position").to_numpy().copy(),
              follows.column("followee").to_numpy().copy())
    world.beliefs.position[:] = 0.123
    world.beliefs.confidence[:] = 0.456
    for plat in world.platforms.values():
        plat.graph.edges.keys[:] = 0
    np.testing.assert_array_equal(beliefs.column("position").to_numpy(), before[0])
    np.testing.assert_array_equal(follows.column("followee").to_numpy(), before[1])
    assert not np.isclose(beliefs.column("confidence").to_numpy(), 0.456).all()

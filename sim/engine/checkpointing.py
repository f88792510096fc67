"""What a round adds to the checkpoint logs: the delta of round 0 (the whole population,
the initial graphs, posts seeded at round 0) and of every later round (posts, counters,
votes, follows, trust values, exposures, agents who joined), built from what the round's
phases did. The driver hands them to the writer thread with the world's snapshot."""

from __future__ import annotations

import numpy as np

from beliefs.rules import Exposures
from sim.core.keys import pack, unique_sorted
from sim.core.posts import PostStore
from sim.engine.apply import Applied
from sim.engine.interventions import Fired
from sim.store.checkpoints import RoundDelta, concat, encode_texts
from sim.world.world import World


def _posts_arrays(world: World, ids: np.ndarray) -> dict[str, np.ndarray]:
    rows = world.posts.rows(ids)
    blob, ends = encode_texts([world.posts.text[i] for i in ids])
    return {**{f"posts.{k}": v for k, v in rows.items()},
            "posts.text_blob": blob, "posts.text_ends": ends}


def initial_delta(world: World, fired: Fired | None = None) -> RoundDelta:
    """Round 0: the whole population, the initial graphs, posts seeded at round 0."""
    arrays: dict[str, np.ndarray] = {}
    parts = {"platform": [], "follower": [], "followee": [], "op": []}
    for plat in world.platforms.values():
        src, dst = plat.graph.edge_arrays()
        parts["platform"].append(np.full(len(src), plat.code, np.int8))
        parts["follower"].append(src)
        parts["followee"].append(dst)
        parts["op"].append(np.ones(len(src), np.int8))
    arrays.update({f"follows.{k}": concat(v, np.int64 if k in ("follower", "followee")
                                          else np.int8) for k, v in parts.items()})
    fired = fired or Fired()
    arrays.update(_posts_arrays(world, np.asarray(fired.post_ids, np.int64)))
    for name in PostStore.COUNTERS:
        arrays[f"counters.{name}"] = np.asarray(fired.counters.get(name, []), np.int64)
    return RoundDelta(0, arrays, world.population.to_arrow())


def round_delta(world: World, round_: int, applied: Applied, exposures: Exposures,
                new_post_ids: np.ndarray, fired: Fired) -> RoundDelta:
    """What round `round_` added: posts (ids ascending), counters, votes, reposts, follows
    (interventions' first, then the agents'), trust values, exposures (only if the rule
    keeps a history), and the agents who joined."""
    arrays = _posts_arrays(world, np.sort(new_post_ids))
    counters = {name: [np.asarray(fired.counters.get(name, []), np.int64)]
                for name in PostStore.COUNTERS}
    if applied is not None:
        for name, ids in applied.counters.items():
            counters[name].append(ids)
        for code in applied.votes:
            arrays[f"votes.{code}"] = applied.votes[code].copy()
            arrays[f"reposts.{code}"] = applied.reposts[code].copy()
        f, g = fired.follow_arrays(), applied.follows
        for key, dtype in (("platform", np.int8), ("follower", np.int64),
                           ("followee", np.int64), ("op", np.int8)):
            arrays[f"follows.{key}"] = np.concatenate([f[key], np.asarray(g[key])]).astype(
                dtype)
        t = applied.trust
        arrays["trust.keys"] = pack(t["truster"], t["trustee"])
        arrays["trust.values"] = np.asarray(t["value"], np.float64).copy()
    for name, parts in counters.items():
        arrays[f"counters.{name}"] = concat(parts, np.int64)
    if world.history is not None and exposures is not None:
        arrays["exposures.keys"] = unique_sorted(pack(*exposures.flat()))
    return RoundDelta(round_, arrays, None if fired.joined is None
                      else fired.joined.to_arrow())

"""How a `World` becomes a checkpoint snapshot, and how a world is rebuilt from a checkpoint.

`round_delta` and `snapshot` are called by the driver at the end of a round (they copy, so
the writer thread can save them while the next round runs); `restore_world` rebuilds the
world at the end of round K from the checkpoint store, bit for bit.
"""

from __future__ import annotations

import numpy as np

from agents.population import Population
from beliefs.exposure import ExposureHistory
from beliefs.rules import make_rule
from beliefs.state import BeliefState
from beliefs.trust import TrustStore
from sim.config import Config, parse_config, resolved_dict
from sim.core.follow_graph import FollowGraph
from sim.core.posts import PostStore
from sim.platforms.spec import platform_slots, spec
from sim.store.checkpoints import (
    FORMAT,
    CheckpointStore,
    RoundDelta,
    Snapshot,
    concat,
    decode_texts,
    last_value_per_key,
    union_keys,
)
from sim.world.interventions import Interventions
from sim.world.platform import Platform
from sim.world.world import World


class CheckpointError(Exception):
    """A checkpoint that cannot be restored (missing or inconsistent files)."""


def snapshot(world: World) -> Snapshot:
    """The mutable state at the end of the current round (copies of the arrays)."""
    arrays = {"position": world.beliefs.position.copy(),
              "confidence": world.beliefs.confidence.copy(),
              "alive": world.alive.copy(), "joined": world.joined.copy()}
    for plat in world.platforms.values():
        arrays[f"members.{plat.code}"] = plat.members.copy()
    iv_meta, iv_arrays = world.interventions.state()
    arrays.update({k: v.copy() for k, v in iv_arrays.items()})
    memory_meta, memory_arrays = world.memory.state()
    arrays.update({k: v.copy() for k, v in memory_arrays.items()})
    arrays["last_means"] = world.last_means.copy()
    arrays["initial_position"] = world.initial_position.copy()
    counts = {
        "n_agents": world.n_agents, "n_posts": world.posts.n, "n_trust": len(world.trust),
        "n_history": len(world.history) if world.history is not None else None,
        "edges": {p.name: len(p.graph) for p in world.platforms.values()},
        "votes": {p.name: len(p.votes) for p in world.platforms.values()},
    }
    return Snapshot(world.round, arrays, {"config": resolved_dict(world.cfg),
                                          "interventions": iv_meta, "memory": memory_meta,
                                          "digest": world.digest.state(),
                                          "notifications": world.notifications.state(),
                                          "counts": counts})


def restore_world(store: CheckpointStore, round_: int, cfg: Config | None = None
                  ) -> tuple[World, dict]:
    """The world at the end of `round_` and the snapshot's metadata. The config is the
    effective one saved with the checkpoint, unless `cfg` (a fork's) is given."""
    try:
        snap = store.snapshot(round_)
        deltas = store.deltas(round_)
    except (OSError, KeyError, ValueError) as exc:
        raise CheckpointError(f"cannot read the checkpoint of round {round_}: {exc}") from exc
    if snap.meta.get("format") != FORMAT:
        raise CheckpointError(f"the checkpoint of round {round_} was written by another "
                              f"version of Shoal (format {snap.meta.get('format', 1)}, this "
                              f"version reads format {FORMAT}); rerun the simulation")
    if cfg is None:
        cfg = parse_config(snap.meta["config"])
    if deltas[0].population is None:
        raise CheckpointError("the round-0 checkpoint log has no population")
    population = Population.from_arrow(deltas[0].population)
    for d in deltas[1:]:
        if d.population is not None:
            population.extend(Population.from_arrow(d.population))
    n, t = population.size, len(cfg.topics)

    posts = _restore_posts(deltas, t)
    beliefs = BeliefState(snap.arrays["position"].astype(np.float64),
                          snap.arrays["confidence"].astype(np.float64))
    trust = TrustStore(cfg.beliefs.trust.initial)
    keys, values = last_value_per_key(
        concat([d.arrays.get("trust.keys", np.empty(0, np.int64)) for d in deltas], np.int64),
        concat([d.arrays.get("trust.values", np.empty(0)) for d in deltas], np.float64))
    trust.keys, trust.values = keys, values
    rule = make_rule(cfg.beliefs.update)
    history = _restore_history(deltas, cfg.beliefs.novelty_window_rounds, round_) \
        if rule.uses_novelty else None

    platforms = {}
    for name in cfg.platforms.enabled():
        code = spec(name).code
        graph = _restore_graph(deltas, code, n)
        plat = Platform.create(name, cfg.platforms.get(name),
                               snap.arrays[f"members.{code}"].astype(bool), graph)
        plat.votes.keys = union_keys([d.arrays[f"votes.{code}"] for d in deltas
                                      if f"votes.{code}" in d.arrays])
        plat.reposts.keys = union_keys([d.arrays[f"reposts.{code}"] for d in deltas
                                        if f"reposts.{code}" in d.arrays])
        plat.rebuild_indexes(posts)
        platforms[name] = plat

    interventions = Interventions.from_state(cfg, snap.meta.get("interventions", {}),
                                             snap.arrays)
    world = World(cfg=cfg, population=population, beliefs=beliefs, trust=trust,
                  history=history, posts=posts, platforms=platforms, round=round_,
                  alive=snap.arrays["alive"].astype(bool), interventions=interventions,
                  joined=snap.arrays["joined"].astype(np.int32),
                  last_means=snap.arrays["last_means"].astype(np.float64),
                  initial_position=snap.arrays["initial_position"].astype(np.float64))
    world.memory.load_state(snap.meta.get("memory", {}), snap.arrays)
    world.digest.load_state(snap.meta.get("digest", {}))
    world.notifications.load_state(snap.meta.get("notifications", {}))
    _check_counts(world, snap.meta.get("counts", {}))
    return world, snap.meta


def _restore_posts(deltas: list[RoundDelta], n_topics: int) -> PostStore:
    columns: dict[str, list[np.ndarray]] = {}
    texts: list[str] = []
    for d in deltas:
        for k, v in d.arrays.items():
            if k.startswith("posts.") and k not in ("posts.text_blob", "posts.text_ends"):
                columns.setdefault(k.removeprefix("posts."), []).append(v)
        texts += decode_texts(d.arrays["posts.text_blob"], d.arrays["posts.text_ends"])
    state: dict[str, object] = {k: np.concatenate(v) for k, v in columns.items()}
    ids = state.pop("id")
    if not np.array_equal(ids, np.arange(len(ids))):
        raise CheckpointError("post ids in the checkpoint logs are not contiguous")
    state["stance"] = np.asarray(state["stance"]).reshape(len(ids), n_topics)
    for name in PostStore.COUNTERS:
        state[name] = np.zeros(len(ids), dtype=np.int32)
    state["text"] = texts
    posts = PostStore.from_state(state, n_topics, platform_slots())
    posts.increment({name: concat([d.arrays.get(f"counters.{name}", np.empty(0, np.int64))
                                   for d in deltas], np.int64)
                     for name in PostStore.COUNTERS})
    return posts


def _restore_graph(deltas: list[RoundDelta], code: int, n: int) -> FollowGraph:
    graph = FollowGraph(n)
    for d in deltas:
        if "follows.platform" not in d.arrays:
            continue
        mine = d.arrays["follows.platform"] == code
        src, dst = d.arrays["follows.follower"][mine], d.arrays["follows.followee"][mine]
        op = d.arrays["follows.op"][mine]
        graph.follow(src[op > 0], dst[op > 0])
        graph.unfollow(src[op < 0], dst[op < 0])
    return graph


def _restore_history(deltas: list[RoundDelta], window: int | None, round_: int
                     ) -> ExposureHistory:
    history = ExposureHistory(window)
    keys = [d.arrays.get("exposures.keys", np.empty(0, np.int64)) for d in deltas]
    rounds = [np.full(len(k), d.round, np.int32) for k, d in zip(keys, deltas, strict=True)]
    k, r = last_value_per_key(concat(keys, np.int64), concat(rounds, np.int32))
    if window is not None:
        keep = r > round_ - window
        k, r = k[keep], r[keep]
    history.keys, history.last_round = k, r.astype(np.int32)
    return history


def _check_counts(world: World, counts: dict) -> None:
    """Compare the rebuilt world with the sizes recorded when the checkpoint was made."""
    got = {
        "n_agents": world.n_agents, "n_posts": world.posts.n, "n_trust": len(world.trust),
        "n_history": len(world.history) if world.history is not None else None,
        "edges": {p.name: len(p.graph) for p in world.platforms.values()},
        "votes": {p.name: len(p.votes) for p in world.platforms.values()},
    }
    bad = {k: (counts[k], got[k]) for k in counts if k in got and counts[k] != got[k]}
    if bad:
        raise CheckpointError(f"checkpoint of round {world.round} is inconsistent "
                              f"(expected, rebuilt): {bad}")

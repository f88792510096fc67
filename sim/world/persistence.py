"""How a `World` becomes a checkpoint, and is rebuilt from one, bit for bit.

The world composes its components' states (shoal.core.state): journaled components give the
round's log segment (`take_changes`), the others the state at the end of the round
(`get_state`). Restoring round K replays the logs of rounds 0..K into empty components and
sets the others from the state of K. Nothing here reaches into a component's fields.

Round memory, the digest and notifications are bounded windows that change every round;
they are journaled too (shoal.core.state.KeyedJournal), unless the world was restored from a
checkpoint that kept their whole state (written before they were journaled): then they
are kept whole in every later state, and restoring takes whichever form the state has.

The exposure history is rebuilt as the checkpoint's own config kept it (so the counts can
check it), then, for a fork whose belief rule or novelty window differs, as the fork's
rule reads it: replayed from the same logs with the fork's window, dropped, or, where
none was kept, empty from the next round on (`since`, saved in the state while not 0).
"""

from __future__ import annotations

import numpy as np

from shoal.agents.population import Population
from shoal.beliefs.exposure import ExposureHistory
from shoal.beliefs.rules import make_rule
from shoal.beliefs.state import BeliefState
from shoal.beliefs.trust import TrustStore
from shoal.config import Config, parse_config, resolved_dict, upgrade_saved
from shoal.core.follow_graph import FollowGraph
from shoal.core.posts import PostStore
from shoal.core.registry import calling
from shoal.core.state import State
from shoal.core.workers import SERIAL, Workers
from shoal.memory.model_tokens import ModelTokens
from shoal.platforms.spec import platform_slots, spec
from shoal.store.checkpoints import Checkpoint, CheckpointError, CheckpointStore
from shoal.world.knowledge import build_graph_memory, empty_graph_memory
from shoal.world.platform import Platform
from shoal.world.platform_engine import PlatformEngine, engine_part
from shoal.world.world import World, build_engines

__all__ = ["CheckpointError", "checkpoint", "restore_world"]

# Components journaled unless restored from a whole state (see the module docstring).
WINDOWS = ("memory", "digest", "notifications")


def checkpoint(world: World, workers: Workers = SERIAL) -> Checkpoint:
    """The checkpoint of the world's current round: what the round added (since the
    previous checkpoint) and the state at its end. Everything is copied (the per-agent
    arrays a range of agents per worker), so the writer thread can save it while the next
    round runs."""
    return Checkpoint(world.round, log=changes(world), state=state(world, workers),
                      meta={"config": resolved_dict(world.cfg), "counts": counts(world)})


def changes(world: World) -> dict[str, State]:
    """The journaled components' changes since the previous checkpoint."""
    out = {"population": world.population.take_changes(),
           "posts": world.posts.take_changes(), "trust": world.trust.take_changes()}
    if world.history is not None:
        out["history"] = world.history.take_changes()
    for plat in world.platforms.values():
        out[f"platform.{plat.code}"] = plat.take_changes()
    if world.knowledge is not None:
        out["knowledge"] = world.knowledge.take_changes()
    for name in WINDOWS:
        component = getattr(world, name)
        if component.journaling:
            out[name] = component.take_changes()
    return out


def state(world: World, workers: Workers = SERIAL) -> dict[str, State]:
    """The other components' state."""
    copy = workers.copy
    return {
        "beliefs": world.beliefs.get_state(workers),
        "world": State(arrays={"alive": copy(world.alive), "joined": copy(world.joined),
                               "last_means": world.last_means.copy(),
                               "initial_position": copy(world.initial_position)}),
        "membership": State(arrays={str(p.code): copy(p.members)
                                    for p in world.platforms.values()}),
        **{f"recommender.{p.code}": s for p in world.platforms.values()
           if (s := p.recommender.get_state()) is not None},
        "interventions": world.interventions.get_state(),
        **{name: getattr(world, name).get_state() for name in WINDOWS
           if not getattr(world, name).journaling},
        "llm": State(meta={"json_only": sorted(world.json_only),
                           "outputs": dict(sorted(world.outputs.items())),
                           "tokens": None if world.model_tokens is None else {
                               k: v.to_dict() for k, v in sorted(world.model_tokens.items())}}),
        "prompts": world.prompts.get_state(),  # the prefix reuse measure's
        **{f"engine.{name}": _engine_state(name, eng, world.round)
           for name, eng in world.engines.items()},
        **({"knowledge": State(meta={"generation": world.knowledge.generation})}
           if world.knowledge is not None else {}),
        **({"history": State(meta={"since": world.history.since})}
           if world.history is not None and world.history.since else {}),
    }


def counts(world: World) -> dict:
    """Sizes a restore must find again (a check that logs and state belong together)."""
    return {
        "n_agents": world.n_agents, "n_posts": world.posts.n, "n_trust": len(world.trust),
        "n_history": len(world.history) if world.history is not None else None,
        "edges": {p.name: len(p.graph) for p in world.platforms.values()},
        "votes": {p.name: len(p.votes) for p in world.platforms.values()},
    }


def restore_world(store: CheckpointStore, round_: int, cfg: Config | None = None
                  ) -> tuple[World, dict]:
    """The world at the end of `round_` and the checkpoint's metadata. The config is the
    effective one saved with the checkpoint, unless `cfg` (a fork's) is given."""
    try:
        saved, meta = store.read_state(round_)
        logs = store.read_logs(round_)
    except (OSError, KeyError, ValueError) as exc:
        raise CheckpointError(f"cannot read the checkpoint of round {round_}: {exc}") from exc
    own = parse_config(upgrade_saved(meta["config"]))  # the config it was written under
    cfg = cfg if cfg is not None else own
    try:
        world = _rebuild(cfg, round_, saved, logs, own)
    except (KeyError, ValueError) as exc:
        raise CheckpointError(f"the checkpoint of round {round_} is inconsistent: "
                              f"{type(exc).__name__}: {exc}") from exc
    bad = {k: (v, counts(world)[k]) for k, v in meta.get("counts", {}).items()
           if k in counts(world) and counts(world)[k] != v}
    if bad:
        raise CheckpointError(f"checkpoint of round {round_} is inconsistent "
                              f"(expected, rebuilt): {bad}")
    kept, reads = world.history, make_rule(cfg.beliefs.update).uses_novelty
    if cfg is not own and (reads != (kept is not None) or (
            kept is not None and kept.window != cfg.beliefs.novelty_window_rounds)):
        # a fork that switched belief rules (or windows): the history its rule reads
        world.history = _history(cfg, round_, logs,
                                 kept.since if kept is not None else round_ + 1)
    return world, meta


def _rebuild(cfg: Config, round_: int, saved: dict[str, State],
             logs: list[dict[str, State]], own: Config) -> World:
    def segments(name: str) -> list[State]:
        return [log[name] for log in logs if name in log]

    population = Population.restored(segments("population"))
    n = population.size
    posts = PostStore(len(cfg.topics), platform_slots())
    posts.replay(segments("posts"))
    trust = TrustStore(cfg.beliefs.trust.initial)
    trust.replay(segments("trust"))
    history = _history(own, round_, logs, saved.get("history", State()).meta.get("since", 0))
    beliefs = BeliefState(np.empty((0, 0)), np.empty((0, 0)))
    beliefs.set_state(saved["beliefs"])
    members = saved["membership"].arrays
    platforms = {}
    for name in cfg.platforms.enabled():
        code = spec(name).code
        plat = Platform.create(name, cfg.platforms.get(name),
                               np.asarray(members[str(code)], dtype=bool).copy(),
                               FollowGraph(n))
        plat.replay(segments(f"platform.{code}"), posts)
        if f"recommender.{code}" in saved:  # (a stateful recommender's)
            plat.recommender.set_state(saved[f"recommender.{code}"])
        platforms[name] = plat
    w = saved["world"].arrays
    world = World(cfg=cfg, population=population, beliefs=beliefs, trust=trust,
                  history=history, posts=posts, platforms=platforms, round=round_,
                  alive=w["alive"].astype(bool), joined=w["joined"].astype(np.int32),
                  last_means=w["last_means"].astype(np.float64),
                  initial_position=w["initial_position"].astype(np.float64),
                  json_only=set(saved.get("llm", State()).meta.get("json_only", [])),
                  outputs=dict(saved.get("llm", State()).meta.get("outputs", {})),
                  model_tokens=_model_tokens(saved.get("llm", State()).meta))
    world.interventions.set_state(saved["interventions"])
    if "prompts" in saved:  # (a checkpoint written before prompts were kept has none)
        world.prompts.set_state(saved["prompts"])
    for name in WINDOWS:
        if name in saved:  # kept whole (a format-5 checkpoint, or a run resumed from one)
            getattr(world, name).set_state(saved[name])
        else:
            getattr(world, name).replay(segments(name))
    world.knowledge = empty_graph_memory(cfg, world.outputs)  # (outputs: as restored)
    if world.knowledge is not None:
        if segments("knowledge"):
            world.knowledge.replay(segments("knowledge"))
            world.knowledge.generation = saved.get("knowledge", State()).meta.get(
                "generation", 0)
        else:  # graph memory is new in this (forked) config: its round-0 graph
            world.knowledge = build_graph_memory(cfg, world.outputs)
    world.engines = build_engines(world)
    for name, eng in world.engines.items():
        if f"engine.{name}" in saved:  # else the platform is new in this (forked) config
            with calling(engine_part(name), eng, during=" taking its checkpointed state"):
                eng.set_state(saved[f"engine.{name}"])
    return world


def _engine_state(name: str, engine: PlatformEngine, round_: int) -> State:
    """A platform engine's `get_state` at the end of `round_` (a plug-in's error names its
    engine and the round)."""
    with calling(engine_part(name), engine, round_, during=" giving its state"):
        return engine.get_state()


def _history(cfg: Config, round_: int, logs: list[dict[str, State]], since: int
             ) -> ExposureHistory | None:
    """The exposure history `cfg`'s belief rule reads at the end of `round_` (None if it
    reads none), replayed from the exposures logged from round `since` on."""
    if not make_rule(cfg.beliefs.update).uses_novelty:
        return None
    history = ExposureHistory(cfg.beliefs.novelty_window_rounds, since)
    history.replay([log["history"] for log in logs[since:] if "history" in log], as_of=round_)
    return history


def _model_tokens(llm: dict) -> dict[str, ModelTokens] | None:
    """How the providers' models count, as the checkpoint kept it (None: the run began
    before Shoal counted in the model's tokens)."""
    if llm.get("tokens") is None:
        return None
    return {k: ModelTokens.from_dict(v) for k, v in llm["tokens"].items()}

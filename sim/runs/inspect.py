"""`shoal inspect`: the exact context an agent got (or would get) in a round.

The world at the end of round R−1 is restored from the checkpoint; then exactly what the
driver does at the start of round R is done again — interventions due at R fire, round
memory takes its finished compaction, the agent's feed is built by the platform's
recommender (with breaking news pinned) — and the context is assembled with the run's own
settings. If the agent acted in round R, its feed is checked against the `exposures`
table. The digest and notifications come from the checkpoint when the run kept them live,
otherwise from the logged actions (`sim.agent_history`: the same function of the same
history).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents.prompt import SectionSpec, build_context
from memory.context import Assembled
from sim.core.counter_rng import CounterRNG
from sim.core.errors import InputError
from sim.engine.agent_context import context_inputs
from sim.engine.agent_history import rebuild_history
from sim.engine.interventions import fire_due
from sim.engine.observe import observe
from sim.engine.recommenders import make_recommender
from sim.store.lineage import read_table
from sim.store.run_dir import open_run_dir
from sim.world.checkpoint import CheckpointError, restore_world


@dataclass
class Inspection:
    """One agent's context in one round, on one platform."""

    platform: str
    acted: bool  # did the agent act there that round (else: what it would have got)
    assembled: Assembled
    feed_matches_log: bool | None  # None when the agent did not act
    budget: int


def inspect_agent(run: str, agent: int, round_: int, platform: str | None = None
                  ) -> list[Inspection]:
    """The context of `agent` in `round_` on each platform it belongs to (or one)."""
    run_dir = open_run_dir(run)
    store = run_dir.checkpoints
    if round_ < 1:
        raise InputError(f"--round {round_}: rounds start at 1")
    kept = store.available()
    if round_ - 1 not in kept:
        raise InputError(f"--round {round_}: inspecting needs the checkpoint of round "
                         f"{round_ - 1}; kept rounds: {', '.join(map(str, kept)) or 'none'}")
    try:
        world, _ = restore_world(store, round_ - 1)
    except CheckpointError as exc:
        raise InputError(f"{run}: {exc}") from None
    if not 0 <= agent < world.n_agents:
        raise InputError(f"--agent {agent}: no such agent (agents 0..{world.n_agents - 1})")
    fire_due(world, round_)
    world.memory.boundary(round_)
    if agent not in world.context_agents():  # not tracked live: rebuilt from its actions
        rebuild_history(run, world, np.array([agent]), round_, world.digest,
                        world.notifications)
    digest = world.digest
    names = [platform] if platform else [n for n, p in world.platforms.items()
                                         if p.members[agent]]
    if platform and platform not in world.platforms:
        raise InputError(f"--platform {platform}: not enabled in this run")
    specs = {name: SectionSpec(s.priority, s.max_tokens)
             for name, s in world.cfg.memory.context.sections.items()}
    rng = CounterRNG(world.cfg.seed)
    out = []
    for name in names:
        rec = {name: make_recommender(world.platforms[name].cfg.recommender)}
        (view,) = observe(world, round_, {name: np.array([agent])}, rec, rng, False, False)
        logged = read_table(run, "exposures", f"round = {round_} AND agent = {agent} "
                                              f"AND platform = '{name}'")
        acted = not read_table(run, "actions", f"round = {round_} AND agent = {agent} "
                                               f"AND platform = '{name}'").empty
        matches = None
        if acted:
            feed = [int(p) for p in view.feed[0] if p >= 0]
            matches = feed == [int(p) for p in logged.sort_values("rank")["post_id"]]
        inputs = context_inputs(world, digest, agent, name, round_, view.feed[0])
        assembled = build_context(inputs, world.cfg.memory.context.budget_tokens, specs)
        out.append(Inspection(name, acted, assembled, matches,
                              world.cfg.memory.context.budget_tokens))
    world.memory.close()
    return out

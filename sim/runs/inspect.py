"""`shoal inspect`: the exact context an agent got (or would get) in a round.

The world at the end of round R−1 is restored from the checkpoint; then exactly what the
driver does at the start of round R is done again (`begin_round`: interventions due at R
fire, round memory takes its finished compaction) and the context is built by the same
function the driver uses (`context_for`: the feed from the platform's recommender, with
breaking news pinned, then the context with the run's own settings). If the agent acted
in round R, its feed is checked against the `exposures` table. The digest and
notifications come from the checkpoint when the run kept them live, otherwise from the
logged actions (`shoal.engine.agent_history`: the same function of the same history).

A fork's rounds up to its fork round are its parent's (or an earlier ancestor's): such a
round is inspected in the run that ran it, and `Inspection.run_id` names that run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shoal.core.errors import InputError
from shoal.engine.agent_context import context_for
from shoal.engine.agent_history import rebuild_history
from shoal.engine.interventions import begin_round
from shoal.memory.context import Assembled
from shoal.runs.simulation import world_at
from shoal.store.lineage import lineage, read_table
from shoal.store.run_dir import RunDir, open_run_dir


@dataclass
class Inspection:
    """One agent's context in one round, on one platform."""

    platform: str
    acted: bool  # did the agent act there that round (else: what it would have got)
    assembled: Assembled
    feed_matches_log: bool | None  # None when the agent did not act
    budget: int
    run_id: str  # the run that ran the round (a fork's early rounds are an ancestor's)
    fork_round: int | None = None  # when that is an ancestor: the fork round it passes at


def round_owner(run: str | Path, round_: int) -> tuple[RunDir, int | None]:
    """The run directory that ran `round_` of `run`'s history (`run` itself, or for a
    round up to a fork round, the ancestor it comes from) and, if an ancestor, the fork
    round of the first fork below it."""
    for segment in lineage(run):
        if segment.last_round is None or round_ <= segment.last_round:
            return segment.dir, segment.last_round
    raise AssertionError("the last segment of a lineage holds every later round")


def inspect_agent(run: str, agent: int, round_: int, platform: str | None = None
                  ) -> list[Inspection]:
    """The context of `agent` in `round_` on each platform it belongs to (or one); a
    fork's round up to its fork round is inspected in the ancestor that ran it."""
    run_dir = open_run_dir(run)
    if round_ < 1:
        raise InputError(f"--round {round_}: rounds start at 1")
    run_dir, fork_round = round_owner(run_dir.root, round_)
    run = str(run_dir.root)
    world = world_at(run_dir, round_ - 1, f"--round {round_}: inspecting needs round")
    if not 0 <= agent < world.n_agents:
        raise InputError(f"--agent {agent}: no such agent (agents 0..{world.n_agents - 1})")
    if platform is not None and platform not in world.platforms:
        raise InputError(f"--platform {platform or repr(platform)}: not enabled in this "
                         f"run (platforms: {', '.join(world.platforms)})")
    begin_round(world, round_)
    if agent not in world.context_agents():  # not tracked live: rebuilt from its actions
        rebuild_history(run, world, np.array([agent]), round_, world.digest,
                        world.notifications)
    names = [platform] if platform is not None else [n for n, p in world.platforms.items()
                                         if p.members[agent]]
    out = []
    for name in names:
        ctx = context_for(world, agent, round_, name)
        where = f"round = {round_} AND agent = {agent} AND platform = '{name}'"
        acted = not read_table(run, "actions", where).empty
        matches = None
        if acted:
            logged = read_table(run, "exposures", where).sort_values("rank")["post_id"]
            matches = [int(p) for p in ctx.feed if p >= 0] == [int(p) for p in logged]
        out.append(Inspection(name, acted, ctx.assembled, matches,
                              world.cfg.memory.context.budget_tokens, run_dir.run_id,
                              fork_round))
    world.memory.close()
    return out

"""Agents' cross-platform digests and notifications, rebuilt from the trajectory.

The driver keeps both live only for agents whose context is built during the run
(`memory.context.build_for`). For any other agent they are a function of the logged
`actions` table, and this module computes them with the driver's rules
(`RoundDriver.remember`): the digest is the agent's last `keep` applied actions per
platform; the notifications are what others did to the agent or its posts since its last
turn on that platform. `shoal inspect` uses it for agents the run did not track, and a fork
that starts tracking agents (more LLM agents, `build_for: all`) hands them what they would
have had. Exact when idle actions are logged (`output.log_idle_actions`, the default):
otherwise a turn with nothing done is invisible and older notices stay queued.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd

from memory.digest import NOISE, CrossPlatformDigest, Entry
from memory.notifications import FOLLOW, REACTIONS, REPLIES, Notice, Notifications
from sim.lineage import read_table

_NOTIFYING = sorted(REPLIES | set(REACTIONS) | {FOLLOW})
_MAX_LISTED_POSTS = 20_000  # beyond this, read every action and filter in memory


def newly_tracked(world, before_cfg) -> np.ndarray:
    """Agents whose context the world's config builds but `before_cfg` did not."""
    before = copy.copy(world)
    before.cfg = before_cfg
    return np.setdiff1d(world.context_agents(), before.context_agents())


def rebuild_history(run: str, world, agents: np.ndarray, before_round: int,
                    digest: CrossPlatformDigest, notifications: Notifications) -> None:
    """Record into `digest` and `notifications` the entries `agents` would hold at the
    start of `before_round` had they been tracked from round 1 (their queues must be
    empty)."""
    agents = np.unique(np.asarray(agents, dtype=np.int64))
    if not len(agents) or before_round <= 1:
        return
    rows = _actions(run, world, agents, before_round)
    if rows.empty:
        return
    tracked = np.zeros(world.n_agents, dtype=bool)
    tracked[agents] = True
    actor = rows["agent"].to_numpy(np.int64)
    target_post = rows["target_post"].fillna(-1).to_numpy(np.int64)
    target_agent = rows["target_agent"].fillna(-1).to_numpy(np.int64)
    new_post = rows["new_post_id"].fillna(-1).to_numpy(np.int64)
    action = rows["action"].astype(str).to_numpy()
    platform = rows["platform"].astype(str).to_numpy()
    rounds = rows["round"].to_numpy(np.int64)
    ok = (rows["status"].astype(str) == "ok").to_numpy() & ~np.isin(action, list(NOISE))
    posts, users = world.posts, world.population.username
    author = np.where(target_post >= 0, posts.author[np.maximum(target_post, 0)], -1)
    other = np.where(target_agent >= 0, target_agent, author)

    own = ok & tracked[actor]
    for i in np.nonzero(own)[0].tolist():
        post = int(new_post[i]) if new_post[i] >= 0 else (
            int(target_post[i]) if target_post[i] >= 0 else None)
        text = "" if post is None else (posts.text[post] or posts.text[int(posts.root[post])])
        who = users[int(other[i])] if other[i] >= 0 else None
        digest.record(int(actor[i]), Entry(int(rounds[i]), str(platform[i]), str(action[i]),
                                           post, who, text))

    # A turn (any logged action, idle included) on a platform clears what came before it.
    last_turn: dict[tuple[int, str], int] = {}
    for a, p, r in zip(actor[tracked[actor]].tolist(), platform[tracked[actor]].tolist(),
                       rounds[tracked[actor]].tolist(), strict=True):
        last_turn[(a, p)] = max(r, last_turn.get((a, p), 0))
    to_them = ok & (other >= 0) & tracked[np.maximum(other, 0)] & (other != actor)
    to_them &= np.isin(action, _NOTIFYING)
    for i in np.nonzero(to_them)[0].tolist():
        who, p, r = int(other[i]), str(platform[i]), int(rounds[i])
        if r < last_turn.get((who, p), 0):
            continue
        act = str(action[i])
        mine = int(target_post[i]) if target_post[i] >= 0 else None
        new = int(new_post[i]) if new_post[i] >= 0 else None
        if act in REPLIES:
            text = posts.text[new] if new is not None else ""
        else:
            text = (posts.text[mine] or posts.text[int(posts.root[mine])]
                    if mine is not None else "")
        notifications.record(who, Notice(r, p, act, users[int(actor[i])], mine, text, new))


def _actions(run: str, world, agents: np.ndarray, before_round: int) -> pd.DataFrame:
    """The actions before `before_round` by `agents`, on their posts or at them, in the
    order the driver applied them (round, platform, agent, slot)."""
    where = f"round < {before_round}"
    mine = np.nonzero(np.isin(world.posts.author, agents))[0]
    if len(agents) + len(mine) <= _MAX_LISTED_POSTS:
        ids = ", ".join(map(str, agents.tolist()))
        parts = [f"agent IN ({ids})", f"target_agent IN ({ids})"]
        if len(mine):
            parts.append(f"target_post IN ({', '.join(map(str, mine.tolist()))})")
        where += f" AND ({' OR '.join(parts)})"
    rows = read_table(run, "actions", where)
    code = {name: p.code for name, p in world.platforms.items()}  # canonical order
    rows = rows.assign(_p=rows["platform"].astype(str).map(code).fillna(len(code)))
    return rows.sort_values(["round", "_p", "agent", "slot"], kind="stable")

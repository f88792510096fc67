"""Agents' cross-platform digests and notifications: how applied actions become entries.

`record_actions` is the one place the rules live: an applied action is a digest entry of
its actor and, if it replies to, reacts to or follows someone else, a notice for them. The
driver calls it every round for the agents whose context is built
(`memory.context.build_for`). For any other agent both are a function of the logged
`actions` table: `rebuild_history` replays the table through the same function, for
`shoal inspect` of an untracked agent and for a fork that starts tracking agents (more LLM
agents, `build_for: all`). The rebuild is exact when idle actions are logged
(`output.log_idle_actions`, the default): otherwise a turn with nothing done is invisible
and notices from before it stay queued.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pandas as pd

from shoal.memory.digest import CrossPlatformDigest, Entry
from shoal.memory.notifications import FOLLOW, REACTIONS, REPLIES, Notice, Notifications

_NOTIFYING = sorted(REPLIES | set(REACTIONS) | {FOLLOW})
_MAX_LISTED_IDS = 20_000  # beyond this, read every action and filter in memory


@dataclass
class AppliedRows:
    """Applied actions in application order: names as strings, ids as int64 (-1: none)."""

    round: np.ndarray
    platform: np.ndarray
    action: np.ndarray
    agent: np.ndarray
    target_post: np.ndarray
    target_agent: np.ndarray
    new_post: np.ndarray


def record_actions(world, tracked: np.ndarray, rows: AppliedRows,
                   digest: CrossPlatformDigest, notifications: Notifications,
                   notify: np.ndarray | None = None) -> None:
    """Digest entries of tracked actors and notices to tracked agents (`tracked`: bool
    per agent) for these applied actions. `notify` can veto notices row by row."""
    posts, users = world.posts, world.population.username
    author = posts.get("author", rows.target_post, -1).astype(np.int64)
    other = np.where(rows.target_agent >= 0, rows.target_agent, author)
    by = tracked[rows.agent]
    to = (other >= 0) & tracked[np.maximum(other, 0)] & (other != rows.agent)
    to &= np.isin(rows.action, _NOTIFYING)
    if notify is not None:
        to &= notify
    for i in np.nonzero(by | to)[0].tolist():
        r, platform, action = int(rows.round[i]), str(rows.platform[i]), str(rows.action[i])
        new, target, who = int(rows.new_post[i]), int(rows.target_post[i]), int(other[i])
        if by[i]:
            post = new if new >= 0 else (target if target >= 0 else None)
            text = "" if post is None else (posts.text[post] or posts.text[int(posts.root[post])])
            digest.record(int(rows.agent[i]), Entry(r, platform, action, post,
                                                    users[who] if who >= 0 else None, text))
        if to[i]:
            mine = target if target >= 0 else None
            text = posts.text[new] if action in REPLIES else (
                posts.text[mine] or posts.text[int(posts.root[mine])]
                if mine is not None else "")
            notifications.record(who, Notice(r, platform, action, users[int(rows.agent[i])],
                                             mine, text, new if new >= 0 else None))


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
    logged = _actions(run, world, agents, before_round)
    if logged.empty:
        return
    tracked = np.zeros(world.n_agents, dtype=bool)
    tracked[agents] = True
    # A turn (any logged action, idle included) on a platform shows, and so clears, the
    # notices from before it.
    mine = logged[tracked[logged["agent"].to_numpy(np.int64)]]
    last_turn = mine.groupby([mine["agent"].astype(np.int64),
                              mine["platform"].astype(str)])["round"].max()
    ok = logged[logged["status"].astype(str) == "ok"]
    rows = AppliedRows(
        round=ok["round"].to_numpy(np.int64), platform=ok["platform"].astype(str).to_numpy(),
        action=ok["action"].astype(str).to_numpy(), agent=ok["agent"].to_numpy(np.int64),
        target_post=ok["target_post"].fillna(-1).to_numpy(np.int64),
        target_agent=ok["target_agent"].fillna(-1).to_numpy(np.int64),
        new_post=ok["new_post_id"].fillna(-1).to_numpy(np.int64))
    author = world.posts.get("author", rows.target_post, -1).astype(np.int64)
    other = np.where(rows.target_agent >= 0, rows.target_agent, author)
    since = last_turn.reindex(pd.MultiIndex.from_arrays([other, rows.platform])).fillna(0)
    notify = rows.round >= since.to_numpy()
    record_actions(world, tracked, rows, digest, notifications, notify)


def _actions(run: str, world, agents: np.ndarray, before_round: int) -> pd.DataFrame:
    """The actions before `before_round` by `agents`, on their posts or at them, in the
    order the driver applied them (round, platform, agent, slot)."""
    from shoal.store.lineage import read_table  # lineage -> run -> driver imports this module

    where = f"round < {before_round}"
    mine = np.nonzero(np.isin(world.posts.author, agents))[0]
    if len(agents) + len(mine) <= _MAX_LISTED_IDS:
        ids = ", ".join(map(str, agents.tolist()))
        parts = [f"agent IN ({ids})", f"target_agent IN ({ids})"]
        if len(mine):
            parts.append(f"target_post IN ({', '.join(map(str, mine.tolist()))})")
        where += f" AND ({' OR '.join(parts)})"
    rows = read_table(run, "actions", where)
    code = {name: p.code for name, p in world.platforms.items()}  # canonical order
    rows = rows.assign(_p=rows["platform"].astype(str).map(code).fillna(len(code)))
    return rows.sort_values(["round", "_p", "agent", "slot"], kind="stable")

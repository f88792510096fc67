"""Step 6 of a round: apply every agent's actions in canonical order (snapshot semantics).

All decisions of round r were made against the world as of the end of r-1. They are sorted
by (platform, agent, slot) and validated against that same snapshot: a target post must be
in the agent's feed, votes and reposts happen once per (agent, post), follows must change
something. Within the round the first valid action wins. Rejected actions are kept, with
their reason, and logged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shoal.agents.actions import ActionBatch
from shoal.agents.observation import PlatformView
from shoal.core.keys import first_occurrence, pack, unique_sorted
from shoal.core.posts import NewPosts, PostKind
from shoal.core.registry import calling
from shoal.core.vocabulary import (
    CREATES_POST,
    TARGETS_POST,
    TRUST_CAUSES,
    VOTES,
    ActionType,
    Reason,
)
from shoal.core.workers import SERIAL, Workers
from shoal.world.platform import feed_kinds
from shoal.world.platform_engine import engine_part
from shoal.world.world import World

_KIND_OF = {ActionType.POST: PostKind.POST, ActionType.REPOST: PostKind.REPOST,
            ActionType.QUOTE: PostKind.QUOTE, ActionType.REPLY: PostKind.REPLY,
            ActionType.COMMENT: PostKind.COMMENT}
_KIND_LUT = np.full(max(ActionType) + 1, -1, np.int8)  # action code -> post kind
for _action, _kind in _KIND_OF.items():
    _KIND_LUT[_action] = _kind


@dataclass
class Applied:
    """What applying a round's actions did."""

    actions: ActionBatch  # canonical order
    reason: np.ndarray  # int8 Reason per action
    new_post: np.ndarray  # int64 post id created by each action, -1 if none
    created: np.ndarray  # int64 ids of the posts the actions created, ascending
    trust: dict[str, np.ndarray]  # truster, trustee, cause, delta (one row per event); the
    # update phase applies them and adds `value`, each pair's trust after the round
    follows: dict[str, np.ndarray]  # platform, follower, followee, op (1 follow, -1 unfollow)
    engagement: np.ndarray  # float64 [N, T] net votes received per topic this round
    counters: dict[str, np.ndarray]  # post counter name -> ids incremented by one (repeats)
    votes: dict[int, np.ndarray]  # platform code -> (agent, post) keys voted this round
    reposts: dict[int, np.ndarray]  # platform code -> (agent, post) keys reposted


def _first_occurrence(keys: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Mask: candidates[i] and no earlier candidate row has the same key."""
    out = np.zeros(len(keys), dtype=bool)
    idx = np.nonzero(candidates)[0]
    out[idx[first_occurrence(keys[idx])]] = True
    return out


def _in_feed(actions: ActionBatch, views: dict[int, PlatformView]) -> np.ndarray:
    """Mask: is each action's target post in that agent's feed this round?"""
    ok = np.zeros(len(actions), dtype=bool)
    for code, view in views.items():
        rows = np.nonzero((actions.platform == code) & (actions.target_post >= 0))[0]
        if not len(rows) or not len(view.agents):
            continue
        pos = np.searchsorted(view.agents, actions.agent[rows])
        pos = np.minimum(pos, len(view.agents) - 1)
        known = view.agents[pos] == actions.agent[rows]
        hit = (view.feed[pos] == actions.target_post[rows][:, None]).any(axis=1)
        ok[rows] = known & hit
    return ok


def validate(world: World, actions: ActionBatch, views: dict[int, PlatformView]
             ) -> np.ndarray:
    """Reason code per action (OK where it applies), in canonical order."""
    n = len(actions)
    reason = np.zeros(n, dtype=np.int8)
    act = actions.action.astype(np.int64)
    by_code = {p.code: p for p in world.platforms.values()}

    allowed = np.zeros(n, dtype=bool)
    for code, plat in by_code.items():
        here = actions.platform == code
        allowed[here] = np.isin(act[here], [int(a) for a in plat.spec.actions])
    reason[~allowed] = Reason.NOT_ALLOWED

    targets_post = np.isin(act, [int(a) for a in TARGETS_POST]) & (reason == 0)
    reason[targets_post & ~_in_feed(actions, views)] = Reason.NOT_IN_FEED

    keys = pack(actions.agent, np.maximum(actions.target_post, 0))
    for code, plat in by_code.items():
        here = (actions.platform == code) & (reason == 0)
        votes = here & np.isin(act, [int(a) for a in VOTES])
        reposts = here & (act == ActionType.REPOST)
        for mask, store in ((votes, plat.votes), (reposts, plat.reposts)):
            dup = mask & (store.contains(keys) | ~_first_occurrence(keys, mask))
            reason[dup] = Reason.DUPLICATE

        graph_ops = here & np.isin(act, [ActionType.FOLLOW, ActionType.UNFOLLOW])
        if graph_ops.any():
            idx = np.nonzero(graph_ops)[0]
            src, dst = actions.agent[idx].astype(np.int64), actions.target_agent[idx]
            unknown = (dst < 0) | (dst >= world.n_agents)
            dst_safe = np.where(unknown, 0, dst)
            following = plat.graph.is_following(src, dst_safe)
            is_follow = act[idx] == ActionType.FOLLOW
            r = np.zeros(len(idx), dtype=np.int8)
            r[is_follow & following] = Reason.ALREADY_FOLLOWING
            r[~is_follow & ~following] = Reason.NOT_FOLLOWING
            r[is_follow & ~plat.members[dst_safe]] = Reason.NOT_MEMBER
            r[src == dst] = Reason.SELF
            r[unknown] = Reason.UNKNOWN_AGENT
            reason[idx] = r
            ok = np.zeros(n, dtype=bool)
            ok[idx] = r == 0
            pairs = pack(actions.agent, np.maximum(actions.target_agent, 0))
            reason[ok & ~_first_occurrence(pairs, ok)] = Reason.DUPLICATE
    return reason


def apply_actions(world: World, actions: ActionBatch, views: list[PlatformView],
                  round_: int, workers: Workers = SERIAL) -> Applied:
    """Validate and apply a canonical batch; mutates the world's posts and platforms (the
    inboxes' fan-out a range of readers per worker). The trust events it returns are
    applied by the update phase (`shoal.engine.update`).

    Rows that do nothing change nothing and are valid wherever the platform offers doing
    nothing, so only the other rows go through validation and application: most rows of
    a large rule-based round are idle, and the work is then that of the rest. Finding the
    acting rows and writing every row's reason and post id run a range of rows per
    worker."""
    n, ranges = len(actions), workers.ranges(len(actions))
    live = workers.flatnonzero(n, lambda rows: actions.action[rows] != ActionType.DO_NOTHING)
    if len(live) == n:
        return _apply_acts(world, actions, views, round_, workers)
    applied = _apply_acts(world, actions.take(live), views, round_, workers)
    offers = [p.code for p in world.platforms.values()  # (platforms where idling is valid)
              if ActionType.DO_NOTHING in p.spec.actions]
    reason, new_post = np.empty(n, np.int8), np.empty(n, np.int64)
    cuts = np.searchsorted(live, [r.start for r in ranges] + [n])

    def fill(j: int) -> None:  # a range's rows: the idle ones, then those that act
        rows, acts = ranges[j], slice(cuts[j], cuts[j + 1])
        offered = np.zeros(rows.stop - rows.start, bool)
        for code in offers:  # (a comparison per platform: cheaper than isin)
            offered |= actions.platform[rows] == code
        reason[rows] = np.where(offered, Reason.OK, Reason.NOT_ALLOWED)
        new_post[rows] = -1
        reason[live[acts]] = applied.reason[acts]
        new_post[live[acts]] = applied.new_post[acts]

    workers.map(fill, range(len(ranges)))
    applied.actions, applied.reason, applied.new_post = actions, reason, new_post
    return applied


def _apply_acts(world: World, actions: ActionBatch, views: list[PlatformView],
                round_: int, workers: Workers) -> Applied:
    """`apply_actions` of a batch's rows (in canonical order)."""
    by_code = {v.platform: v for v in views}
    reason = validate(world, actions, by_code)
    ok = reason == Reason.OK
    act = actions.action.astype(np.int64)
    posts = world.posts
    tcfg = world.cfg.beliefs.trust

    # Author of each targeted post, as of the snapshot (before new posts exist).
    known = actions.target_post < posts.n  # an id past the table is rejected, not fatal
    target_author = posts.get("author", np.where(known, actions.target_post, -1)).astype(
        np.int64)

    # New posts, ids in canonical order. A repost of a repost points at the root.
    creates = ok & np.isin(act, [int(a) for a in CREATES_POST])
    new_post = np.full(len(actions), -1, dtype=np.int64)
    created = np.empty(0, np.int64)
    if creates.any():
        idx = np.nonzero(creates)[0]
        parent = actions.target_post[idx].copy()
        is_repost = act[idx] == ActionType.REPOST
        parent[is_repost] = posts.root[parent[is_repost]]
        kinds = _KIND_LUT[act[idx]]
        stance = actions.stance[idx].copy()
        stance[is_repost] = posts.stance[parent[is_repost]]  # a repost carries its root's
        method = actions.meta.get("stance_method")
        created = posts.append(NewPosts(
            platform=actions.platform[idx], author=actions.agent[idx], kind=kinds,
            parent=np.where(act[idx] == ActionType.POST, -1, parent),
            stance=stance, text=(actions.text if len(idx) == len(actions)  # (all post)
                                 else [actions.text[i] for i in idx.tolist()]),
            stance_method=method[idx] if method is not None else None,
        ), round_)
        new_post[idx] = created

    # Counters on target posts; a repost shares the root (its parent), not the repost.
    reposts = ok & (act == ActionType.REPOST)
    counters = {
        "up": actions.target_post[ok & np.isin(act, [ActionType.LIKE, ActionType.UPVOTE])],
        "down": actions.target_post[ok & (act == ActionType.DOWNVOTE)],
        "shares": np.concatenate([actions.target_post[ok & (act == ActionType.QUOTE)],
                                  posts.parent[new_post[reposts]]]),
        "replies": actions.target_post[ok & np.isin(act, [ActionType.REPLY,
                                                          ActionType.COMMENT])],
    }
    posts.increment(counters)

    # Engagement received this round, per author and topic the voted post addresses.
    engagement = np.zeros((world.n_agents, len(world.topics)))
    votes = ok & np.isin(act, [int(a) for a in VOTES])
    if votes.any():
        sign = np.where(act[votes] == ActionType.DOWNVOTE, -1.0, 1.0)
        addressed = ~np.isnan(posts.stance[actions.target_post[votes]])
        np.add.at(engagement, target_author[votes], addressed * sign[:, None])

    follows = {"platform": [], "follower": [], "followee": [], "op": []}
    voted, reposted = {}, {}
    for plat in world.platforms.values():
        here = ok & (actions.platform == plat.code)
        keys = pack(actions.agent[here], np.maximum(actions.target_post[here], 0))
        voted[plat.code] = keys[np.isin(act[here], [int(a) for a in VOTES])]
        reposted[plat.code] = keys[act[here] == ActionType.REPOST]
        plat.votes.add(voted[plat.code])
        plat.reposts.add(reposted[plat.code])
        # Follow graph changes; their followers' inboxes are rebuilt below.
        changed = []
        for op, fn in ((ActionType.FOLLOW, plat.graph.follow),
                       (ActionType.UNFOLLOW, plat.graph.unfollow)):
            m = here & (act == op)
            if m.any():
                src, dst = actions.agent[m].astype(np.int64), actions.target_agent[m]
                fn(src, dst.astype(np.int64))
                changed.append(src)
                follows["platform"].append(np.full(m.sum(), plat.code, np.int8))
                follows["follower"].append(src)
                follows["followee"].append(dst.astype(np.int64))
                follows["op"].append(np.full(m.sum(), 1 if op == ActionType.FOLLOW else -1,
                                             np.int8))
        rebuild = unique_sorted(np.concatenate(changed)) if changed else np.empty(0, np.int64)
        mine = new_post[here & (new_post >= 0)]
        mine = mine[np.isin(posts.kind[mine], feed_kinds(plat.name))]
        plat.index_new_posts(mine, posts.author[mine].astype(np.int64), rebuild, workers)

    trust = _trust_events(world, actions, ok, act, target_author, tcfg)
    return Applied(
        actions=actions, reason=reason, new_post=new_post, created=created, trust=trust,
        follows={k: (np.concatenate(v) if v else np.empty(0, np.int64))
                 for k, v in follows.items()},
        engagement=engagement, counters=counters, votes=voted, reposts=reposted,
    )


def _trust_events(world: World, actions: ActionBatch, ok: np.ndarray, act: np.ndarray,
                  target_author: np.ndarray, tcfg) -> dict[str, np.ndarray]:
    """Trust deltas from the round's interactions, one row per event (the update phase
    applies them)."""
    other = np.where(np.isin(act, [ActionType.FOLLOW, ActionType.UNFOLLOW]),
                     actions.target_agent, target_author)
    cause = np.full(len(actions), -1, dtype=np.int8)
    delta = np.zeros(len(actions))
    table = {
        ActionType.LIKE: ("like", tcfg.like), ActionType.UPVOTE: ("like", tcfg.like),
        ActionType.REPOST: ("repost", tcfg.repost),
        ActionType.DOWNVOTE: ("downvote", tcfg.downvote),
        ActionType.FOLLOW: ("follow", tcfg.follow),
        ActionType.UNFOLLOW: ("unfollow", tcfg.unfollow),
    }
    for a, (name, d) in table.items():
        m = ok & (act == a)
        cause[m] = TRUST_CAUSES.index(name)
        delta[m] = d
    responds = ok & np.isin(act, [ActionType.QUOTE, ActionType.REPLY, ActionType.COMMENT])
    if responds.any():
        theirs = world.posts.stance[actions.target_post[responds]]
        mine = actions.stance[responds]
        both = ~np.isnan(theirs) & ~np.isnan(mine)
        gap = np.where(both, np.abs(np.nan_to_num(theirs) - np.nan_to_num(mine)), 0).sum(1)
        agree = gap / np.maximum(both.sum(axis=1), 1) < 0.5
        shared = both.any(axis=1)  # no common topic: agreement is undefined, trust unchanged
        cause[responds] = np.where(~shared, -1, np.where(
            agree, TRUST_CAUSES.index("reply_agree"), TRUST_CAUSES.index("reply_disagree")))
        delta[responds] = np.where(agree, tcfg.reply_agree, tcfg.reply_disagree) * shared
    ev = (cause >= 0) & (other >= 0) & (other != actions.agent)
    truster = actions.agent[ev].astype(np.int64)
    trustee = other[ev].astype(np.int64)
    return {"truster": truster, "trustee": trustee, "cause": cause[ev], "delta": delta[ev]}



def apply_all(world: World, actions: ActionBatch, views: list[PlatformView],
              round_: int, workers: Workers = SERIAL) -> Applied:
    """Apply a canonical batch: the social platforms' rows here, each engine platform's
    rows (the market's trades) by its engine, in canonical order within each."""
    codes = {engine.code: (name, engine) for name, engine in world.engines.items()}
    on_engine = np.isin(actions.platform, list(codes)) if codes else np.zeros(0, bool)
    if not on_engine.any():
        return apply_actions(world, actions, views, round_, workers)
    social = np.nonzero(~on_engine)[0]
    applied = apply_actions(world, actions.take(social), views, round_, workers)
    reason = np.zeros(len(actions), np.int8)
    new_post = np.full(len(actions), -1, np.int64)
    reason[social], new_post[social] = applied.reason, applied.new_post
    for code, (name, engine) in codes.items():
        rows = np.nonzero(actions.platform == code)[0]
        if len(rows):  # the engine may fill in what a row did (a rule trader's side)
            part = actions.take(rows)
            with calling(engine_part(name), engine, round_):
                reason[rows] = engine.apply(world, round_, part)
            actions.action[rows] = part.action
    applied.actions, applied.reason, applied.new_post = actions, reason, new_post
    return applied

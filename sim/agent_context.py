"""An agent's context inputs, read from the live world (driver) or a restored one
(`shoal inspect`): persona, beliefs in words, round memory, digest, events, the feed."""

from __future__ import annotations

import numpy as np

from agents.prompt import ContextInputs, FeedItem
from beliefs.render import stance_lines, trusted_accounts
from memory.context import Line, quote
from memory.digest import CrossPlatformDigest
from sim.interventions import NEWS_AUTHOR
from sim.posts import PostKind

KIND_NAMES = {k.value: k.name.lower() for k in PostKind}
FEED_ORDER = {"following": "newest first", "popularity": "hot posts",
              "random": "a random selection", "personalized": "picked for you"}


def feed_items(world, feed_row: np.ndarray, round_: int, pinned: set[int]) -> list[FeedItem]:
    """The posts of one feed row as the agent sees them (counts as of the last round)."""
    posts, users = world.posts, world.population.username
    out = []
    for post in feed_row[feed_row >= 0].tolist():
        author = int(posts.author[post])
        text = posts.text[post] or posts.text[int(posts.root[post])]  # a repost shows its root
        out.append(FeedItem(
            post_id=post, author=users[author] if author != NEWS_AUTHOR else "news",
            kind=KIND_NAMES[int(posts.kind[post])], text=text,
            age_rounds=round_ - int(posts.round[post]), up=int(posts.up[post]),
            down=int(posts.down[post]), shares=int(posts.shares[post]),
            replies=int(posts.replies[post]), pinned=post in pinned))
    return out


def event_lines(world, agent: int, round_: int) -> list[Line]:
    """Breaking news the agent is targeted by, while it lasts."""
    out = []
    for event in world.interventions.active_events(round_):
        t = event.target
        if t is not None and not (agent < len(t) and t[agent]):
            continue
        post = next(iter(event.post_ids.values()))
        out.append(Line(f"- {quote(world.posts.text[post], 400)} (until round {event.until})",
                        {"kind": "event", "rounds": [round_, event.until],
                         "posts": sorted(event.post_ids.values()), "rank": 100}))
    return out


def context_inputs(world, digest: CrossPlatformDigest, agent: int, platform: str,
                   round_: int, feed_row: np.ndarray) -> ContextInputs:
    """Everything agent `agent` is shown on `platform` in `round_`."""
    pop = world.population
    labels = [t.label or t.name for t in world.cfg.topics]
    trusted, distrusted = trusted_accounts(world.trust, agent, pop.username)
    pinned = {pid for e in world.interventions.active_events(round_)
              for pid in e.post_ids.values()}
    group = pop.group_names[pop.group[agent]] if pop.group[agent] >= 0 else None
    return ContextInputs(
        round=round_, platform=platform, name=pop.name[agent], username=pop.username[agent],
        bio=pop.bio[agent], persona=pop.persona[agent], group=group,
        beliefs=stance_lines(labels, world.beliefs.position[agent],
                             world.beliefs.confidence[agent]),
        trusted=trusted, distrusted=distrusted,
        memory=world.memory.lines(round_, agent), digest=digest.lines(agent, platform),
        events=event_lines(world, agent, round_),
        feed=feed_items(world, feed_row, round_, pinned),
        minutes_per_round=world.cfg.minutes_per_round,
        feed_order=FEED_ORDER[world.platforms[platform].cfg.recommender.kind],
    )

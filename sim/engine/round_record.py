"""What a round leaves in round memory: its memory items, chosen by salience.

Breaking news (pinned, visible to its audience), news posts, the posts that drew the most
engagement this round (the top one pinned when it drew a lot), notable shifts of public
opinion (pinned when large), and one line of activity counts. Other agents' words enter
only through `quote`. Opinion is described in words, never numbers.
"""

from __future__ import annotations

import numpy as np

from shoal.config import MemoryConfig
from shoal.core.posts import PostKind
from shoal.engine.apply import Applied
from shoal.engine.interventions import Fired
from shoal.engine.schedule import round_start
from shoal.memory.context import quote
from shoal.memory.round_memory import MemoryItem, RoundMemory
from shoal.platforms.spec import by_code
from shoal.world.interventions import NEWS_AUTHOR


def round_header(cfg, round_: int) -> str:
    """'Round 12 (Mon 5 Jan, 19:00):' — the simulated time the round started."""
    return f"Round {round_} ({round_start(cfg, round_):%a %-d %b, %H:%M}):"


def _public_opinion(mean: float) -> str:
    if mean > 0.2:
        return "most people lean towards support"
    if mean < -0.2:
        return "most people lean against it"
    return "opinion is split"


def round_items(world, memory: RoundMemory, cfg: MemoryConfig, round_: int, applied: Applied,
                fired: Fired, previous_means: np.ndarray | None) -> list[MemoryItem]:
    """The memory items of round `round_` (call after the belief update)."""
    items: list[MemoryItem] = []
    posts = world.posts
    labels = [t.label or t.name for t in world.cfg.topics]

    for event in world.interventions.events:  # breaking news fired this round
        if any(r["index"] == event.index for r in fired.rows):
            post = next(iter(event.post_ids.values()))
            audience = None
            if event.target is not None:
                audience = memory.new_id()
                memory.audiences[audience] = event.target.copy()
            items.append(MemoryItem(memory.new_id(), round_, "event",
                                    f"BREAKING NEWS: {quote(posts.text[post])}", 100.0,
                                    pinned=True, posts=sorted(event.post_ids.values()),
                                    audience=audience))
    for post in fired.post_ids:  # posts by the news account
        if posts.author[post] == NEWS_AUTHOR and posts.kind[post] == PostKind.POST:
            platform = by_code()[int(posts.platform[post])]
            items.append(MemoryItem(memory.new_id(), round_, "news",
                                    f"News on {platform.label}: "
                                    f"{quote(posts.text[post])}", 50.0, platform=platform.name,
                                    posts=[post]))

    items += _top_posts(world, memory, cfg, round_, applied)
    means = world.beliefs.position.mean(axis=0)
    if previous_means is not None:
        for t, label in enumerate(labels):
            delta = float(means[t] - previous_means[t])
            if abs(delta) >= cfg.shift_threshold:
                way = "towards support" if delta > 0 else "against"
                items.append(MemoryItem(
                    memory.new_id(), round_, "shift",
                    f"Opinion on {label} moved {way}; {_public_opinion(float(means[t]))}.",
                    100.0 * abs(delta), pinned=abs(delta) >= cfg.pin_shift))
    counts = {name: len(ids) for name, ids in applied.counters.items()}
    n_posts = int((applied.new_post >= 0).sum())
    items.append(MemoryItem(memory.new_id(), round_, "stats",
                            f"{n_posts} new posts, {counts.get('up', 0)} likes and upvotes, "
                            f"{counts.get('replies', 0)} replies and comments.", 1.0))
    return items


def _top_posts(world, memory: RoundMemory, cfg: MemoryConfig, round_: int,
               applied: Applied) -> list[MemoryItem]:
    """The posts that drew the most engagement this round (votes, shares, replies)."""
    ids = np.concatenate([np.asarray(v, np.int64) for v in applied.counters.values()]) \
        if applied.counters else np.empty(0, np.int64)
    if not len(ids) or cfg.top_posts == 0:
        return []
    uniq, counts = np.unique(ids, return_counts=True)
    order = np.lexsort((uniq, -counts))[: cfg.top_posts]
    posts, users = world.posts, world.population.username
    out = []
    for rank, k in enumerate(order):
        post, n = int(uniq[k]), int(counts[k])
        author = int(posts.author[post])
        who = f"@{users[author]}" if author >= 0 else "the news"
        platform = by_code()[int(posts.platform[post])]
        up = int((applied.counters.get("up", np.empty(0)) == post).sum())
        text = posts.text[post] or posts.text[int(posts.root[post])]
        out.append(MemoryItem(
            memory.new_id(), round_, "post",
            f"{who} on {platform.label}: {quote(text)} ({n} reactions this round, "
            f"{up} of them likes)", float(n), pinned=rank == 0 and n >= cfg.pin_engagement,
            platform=platform.name, posts=[post]))
    return out

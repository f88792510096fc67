"""What a round leaves in round memory: its memory items, chosen by salience.

Breaking news (pinned, visible to its audience), news posts, the posts that drew the most
engagement this round (the top one pinned when it drew a lot), notable shifts of public
opinion (pinned when large), and one line of activity counts. Other agents' words enter
only through `quote`. Opinion is described in words, never numbers: the run's words, in
`population.language` (the items are shared by every agent that remembers them).
"""

from __future__ import annotations

import numpy as np

from shoal.config import MemoryConfig
from shoal.core.language import Templates, templates
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
    t = templates(cfg.population.language)
    start = round_start(cfg, round_)
    return t("memory.round_header", round=round_, weekday=t.items("time.weekdays")[
        start.weekday()], day=start.day, month=t.items("time.months")[start.month - 1],
        time=f"{start:%H:%M}")


def _public_opinion(t: Templates, mean: float) -> str:
    if mean > 0.2:
        return t("memory.lean_support")
    if mean < -0.2:
        return t("memory.lean_against")
    return t("memory.split")


def round_items(world, memory: RoundMemory, cfg: MemoryConfig, round_: int, applied: Applied,
                fired: Fired, previous_means: np.ndarray | None) -> list[MemoryItem]:
    """The memory items of round `round_` (call after the belief update)."""
    items: list[MemoryItem] = []
    posts = world.posts
    labels = [t.label or t.name for t in world.cfg.topics]
    t = templates(world.cfg.population.language)

    for event in world.interventions.events:  # breaking news fired this round
        if any(r["index"] == event.index for r in fired.rows):
            post = next(iter(event.post_ids.values()))
            audience = None
            if event.target is not None:
                audience = memory.new_id()
                memory.audiences[audience] = event.target.copy()
            items.append(MemoryItem(memory.new_id(), round_, "event",
                                    t("memory.breaking", text=quote(posts.text[post])), 100.0,
                                    pinned=True, posts=sorted(event.post_ids.values()),
                                    audience=audience))
    for post in fired.post_ids:  # posts by the news account
        if posts.author[post] == NEWS_AUTHOR and posts.kind[post] == PostKind.POST:
            platform = by_code()[int(posts.platform[post])]
            items.append(MemoryItem(memory.new_id(), round_, "news",
                                    t("memory.news", platform=_label(t, platform),
                                      text=quote(posts.text[post])), 50.0,
                                    platform=platform.name, posts=[post]))

    items += _top_posts(world, memory, cfg, round_, applied, t, _audiences(memory, items))
    means = world.beliefs.position.mean(axis=0)
    if previous_means is not None:
        for k, label in enumerate(labels):
            delta = float(means[k] - previous_means[k])
            if abs(delta) >= cfg.shift_threshold:
                way = t("memory.towards_support") if delta > 0 else t("memory.against")
                items.append(MemoryItem(
                    memory.new_id(), round_, "shift",
                    t("memory.shift", label=label, way=way,
                      opinion=_public_opinion(t, float(means[k]))),
                    100.0 * abs(delta), pinned=abs(delta) >= cfg.pin_shift))
    counts = {name: len(ids) for name, ids in applied.counters.items()}
    n_posts = len(applied.created)
    items.append(MemoryItem(memory.new_id(), round_, "stats",
                            t("memory.stats", posts=n_posts, up=counts.get("up", 0),
                              replies=counts.get("replies", 0)), 1.0))
    return items


def _label(t: Templates, platform) -> str:
    """A platform's name in the run's language (its spec's label if the language has
    none for it)."""
    return t.get(f"platforms.{platform.name}.label", platform.label)


def _audiences(memory: RoundMemory, items: list[MemoryItem]) -> dict[int, int]:
    """The audience of each targeted breaking news post (its event's item: pinned for
    good, or of this round), so that what is remembered of it stays with its audience."""
    return {p: i.audience for i in [*memory.pinned, *items]
            if i.kind == "event" and i.audience is not None for p in i.posts}


def _top_posts(world, memory: RoundMemory, cfg: MemoryConfig, round_: int,
               applied: Applied, t: Templates, audiences: dict[int, int]
               ) -> list[MemoryItem]:
    """The posts that drew the most engagement this round (votes, shares, replies); one
    of targeted breaking news is remembered by its audience only."""
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
        who = f"@{users[author]}" if author >= 0 else t("memory.the_news")
        platform = by_code()[int(posts.platform[post])]
        up = int((applied.counters.get("up", np.empty(0)) == post).sum())
        text = posts.text[post] or posts.text[int(posts.root[post])]
        out.append(MemoryItem(
            memory.new_id(), round_, "post",
            t("memory.top_post", who=who, platform=_label(t, platform), text=quote(text),
              n=n, up=up), float(n), pinned=rank == 0 and n >= cfg.pin_engagement,
            platform=platform.name, posts=[post], audience=audiences.get(post)))
    return out

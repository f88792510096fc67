"""Step 4 of a round: an agent's context, built from the world (live in the driver, or
restored by `shoal inspect`, `shoal interview` and the memory diagnostic, which all use
`context_for`): persona, beliefs in words, round memory, digest, events, notifications,
the feed with its top comments, assembled within the token budget."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shoal.agents.observation import ContextBatch, PlatformView, TurnInputs
from shoal.agents.prompt import (
    INTERVIEW,
    ContextInputs,
    FeedItem,
    SectionSpec,
    build_context,
    section_specs,
)
from shoal.beliefs.render import trusted_accounts
from shoal.core.counter_rng import CounterRNG
from shoal.core.language import DEFAULT, templates
from shoal.core.posts import PostKind
from shoal.core.registry import RECOMMENDERS
from shoal.engine.observe import observe
from shoal.memory.context import Assembled, Line, quote
from shoal.memory.knowledge.retrieval import provenance
from shoal.world.interventions import NEWS_AUTHOR

KIND_NAMES = {k.value: k.name.lower() for k in PostKind}


def feed_order(recommender: str) -> str:
    """How a feed is ordered, in words, as its recommender registered it."""
    return RECOMMENDERS.get(recommender).meta.get("feed_order", "picked for you")


def top_comments(world, post_ids: np.ndarray, k: int = 2) -> dict[int, list[int]]:
    """The `k` best replies/comments of each of `post_ids` (by score, then earliest), for
    the whole round's feeds at once: one pass over the post store, not one per feed."""
    posts = world.posts
    n = posts.n
    kind = posts.kind[:n]
    parent = posts.parent[:n]
    sel = np.nonzero(((kind == PostKind.REPLY) | (kind == PostKind.COMMENT))
                     & np.isin(parent, post_ids))[0]
    if not len(sel):
        return {}
    score = posts.up[sel].astype(np.int64) - posts.down[sel]
    order = np.lexsort((sel, -score, parent[sel]))  # by parent, best first, oldest first
    out: dict[int, list[int]] = {}
    for i in sel[order].tolist():
        best = out.setdefault(int(parent[i]), [])
        if len(best) < k:
            best.append(i)
    return out


def feed_items(world, feed_row: np.ndarray, round_: int, pinned: set[int],
               comments: dict[int, list[int]] | None = None) -> list[FeedItem]:
    """The posts of one feed row as the agent sees them (counts as of the last round),
    each with its top comments (computed here if the caller did not for the round)."""
    rows = feed_row[feed_row >= 0]
    if comments is None:
        comments = top_comments(world, rows)
    return [FeedItem(*t) for t in feed_tuples(world, rows, round_, pinned, comments)]


def feed_tuples(world, post_ids: np.ndarray, round_: int, pinned: set[int],
                comments: dict[int, list[int]]) -> list[tuple]:
    """The `FeedItem` fields (in order) of each of `post_ids`: what a feed shows of a post
    in `round_` does not depend on whose feed it is."""
    posts, users = world.posts, world.population.username

    def name(author: int) -> str:
        return users[author] if author != NEWS_AUTHOR else "news"

    # One gather per column for the whole row (not one attribute lookup per field and post).
    cols = {c: getattr(posts, c)[post_ids].tolist()
            for c in ("author", "root", "kind", "round", "up", "down", "shares", "replies")}
    texts = posts.text
    out = []
    for i, post in enumerate(post_ids.tolist()):
        out.append((
            post, name(cols["author"][i]), KIND_NAMES[cols["kind"][i]],
            texts[post] or texts[cols["root"][i]],  # a repost shows its root
            round_ - cols["round"][i], cols["up"][i], cols["down"][i], cols["shares"][i],
            cols["replies"][i], post in pinned,
            [(name(int(posts.author[c])), texts[c], int(posts.up[c]) - int(posts.down[c]))
             for c in comments.get(post, ())]))
    return out


def event_lines(world, agent: int, round_: int, language: str = DEFAULT) -> list[Line]:
    """Breaking news the agent is targeted by, while it lasts (framed in `language`)."""
    words = templates(language)
    out = []
    for event in world.interventions.active_events(round_):
        t = event.target
        if t is not None and not (agent < len(t) and t[agent]):
            continue
        post = next(iter(event.post_ids.values()))
        out.append(Line(words("prompt.events.line", text=quote(world.posts.text[post], 400),
                          until=event.until),
                        {"kind": "event", "rounds": [round_, event.until],
                         "posts": sorted(event.post_ids.values()), "rank": 100}))
    return out


def knowledge_lines(world, agent: int, round_: int, feed_row: np.ndarray | None,
                    language: str = DEFAULT) -> list[Line] | None:
    """The facts of the graph memory most relevant to what the agent sees (its feed's
    posts) and the topics, as known at the end of the previous round, each line with its
    provenance in `language` (None when the run has no graph memory)."""
    knowledge, k = world.knowledge, world.cfg.memory.graph.retrieve
    if knowledge is None or not k:
        return None
    texts = [t.label or t.name for t in world.cfg.topics]
    if feed_row is not None:
        texts += [world.posts.text[p] for p in feed_row[feed_row >= 0][:5].tolist()]
    hits = knowledge.index.search(" ".join(texts), k, as_of=round_ - 1)
    return [Line(f"- {quote(h.fact, 240)} ({provenance(h, language)})",
                 {"kind": "knowledge", "relation": h.relation_id, "source": h.source_id,
                  "round": h.valid_from, "rank": h.score}) for h in hits]


def context_inputs(world, agent: int, platform: str, round_: int, feed_row: np.ndarray | None,
                   comments: dict[int, list[int]] | None = None) -> ContextInputs:
    """Everything agent `agent` is shown on `platform` in `round_` (`comments`: the round's
    `top_comments`, when the caller builds many contexts)."""
    pop = world.population
    labels = [t.label or t.name for t in world.cfg.topics]
    trusted, distrusted = trusted_accounts(world.trust, agent, pop.username)
    pinned = {pid for e in world.interventions.active_events(round_)
              for pid in e.post_ids.values()}
    language = pop.language_of(agent)
    return ContextInputs.of_agent(
        pop, agent, labels, world.beliefs.position[agent], world.beliefs.confidence[agent],
        round=round_, platform=platform, trusted=trusted, distrusted=distrusted,
        memory=world.memory.lines(round_, agent, language),
        digest=world.digest.lines(agent, platform, language),
        events=event_lines(world, agent, round_, language),
        feed=[] if feed_row is None else feed_items(world, feed_row, round_, pinned, comments),
        notifications=world.notifications.lines(agent, platform, round_, language),
        minutes_per_round=world.cfg.minutes_per_round,
        feed_order=feed_order(world.platforms[platform].cfg.recommender.kind)
        if platform in world.platforms else "",
        knowledge=knowledge_lines(world, agent, round_, feed_row, language),
    )


def build_context_for(world, agent: int, platform: str, round_: int,
                      feed_row: np.ndarray | None, specs: dict[str, SectionSpec] | None = None,
                      comments: dict[int, list[int]] | None = None) -> Assembled:
    """The assembled context of `agent` on `platform` in `round_` given its feed row
    (`specs` and `comments`: the round's, when the caller builds many contexts)."""
    inputs = context_inputs(world, agent, platform, round_, feed_row, comments)
    specs = section_specs(world.cfg) if specs is None else specs
    inputs.extra = [section for engine in world.engines.values()
                    for section in engine.context_sections(world, agent, round_, platform,
                                                           specs)]
    return build_context(inputs, world.context_budget(), specs)


class _Lines:
    """Lines interned into a `ContextBatch`: each distinct line (text and provenance) once,
    turns holding indices."""

    def __init__(self, batch: ContextBatch):
        self.batch = batch
        self.index: dict[str, int] = {}

    def add(self, lines: list[Line]) -> list[int]:
        text, provenance = self.batch.text, self.batch.provenance
        out = []
        for ln in lines:
            i = self.index.get(ln.text)
            if i is None or provenance[i] != ln.provenance:  # (a text seen with another
                i = len(text)                                 # provenance: kept apart)
                text.append(ln.text)
                provenance.append(ln.provenance)
                self.index.setdefault(ln.text, i)
            out.append(i)
        return out


def context_batches(world, round_: int, views: list[PlatformView], context_agents: np.ndarray,
                    providers: dict[int, str], n_shards: int, previous
                    ) -> list[ContextBatch]:
    """Per shard, the inputs of the contexts its agents get this round on the social
    platforms' `views` (`executor.contexts: shards`): the same parts `context_inputs`
    gathers, except what the shard has itself (profiles, beliefs, feeds, the config).
    `previous(agent)`: what the shard must be told of an LLM agent's last prompt before
    it measures the next one (`...`: nothing, it knows)."""
    batches = [ContextBatch(turns=[[] for _ in views]) for _ in range(n_shards)]
    interned = [_Lines(b) for b in batches]
    shown: list[list[np.ndarray]] = [[] for _ in range(n_shards)]
    users = world.population.username
    for vi, view in enumerate(views):
        order = feed_order(world.platforms[view.name].cfg.recommender.kind)
        for b in batches:
            b.feed_order.append(order)
        rows = np.nonzero(np.isin(view.agents, context_agents))[0]
        if not len(rows):
            continue
        shard_of = view.agents % n_shards
        in_shard = np.empty(len(view.agents), np.int64)  # row in the shard's own view
        for s in range(n_shards):
            mine = np.nonzero(shard_of == s)[0]
            in_shard[mine] = np.arange(len(mine))
            shown[s].append(view.feed[rows[shard_of[rows] == s]].ravel())
        for i in rows.tolist():
            agent = int(view.agents[i])
            s = agent % n_shards
            lines = interned[s]
            provider = providers.get(agent)
            if provider is not None:
                before = previous(agent)
                if before is not ...:
                    batches[s].previous[agent] = before
            trusted, distrusted = trusted_accounts(world.trust, agent, users)
            language = world.population.language_of(agent)
            knowledge = knowledge_lines(world, agent, round_, view.feed[i], language)
            batches[s].turns[vi].append(TurnInputs(
                i, int(in_shard[i]), provider, trusted, distrusted,
                lines.add(world.memory.lines(round_, agent, language)),
                lines.add(world.digest.lines(agent, view.name, language)),
                lines.add(event_lines(world, agent, round_, language)),
                lines.add(world.notifications.lines(agent, view.name, round_, language)),
                None if knowledge is None else lines.add(knowledge)))
    pinned = {pid for e in world.interventions.active_events(round_)
              for pid in e.post_ids.values()}
    ids = [np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)
           for parts in shown]
    ids = [x[x >= 0] for x in ids]
    comments = top_comments(world, np.unique(np.concatenate(ids))) if any(map(len, ids)) else {}
    for b, mine in zip(batches, ids, strict=True):
        b.posts = dict(zip(mine.tolist(), feed_tuples(world, mine, round_, pinned, comments),
                           strict=True))
    return batches


@dataclass
class AgentContext:
    """What an agent is shown in a turn: its feed (post ids, -1 padded; None in an
    interview) and the assembled context."""

    platform: str
    feed: np.ndarray | None
    assembled: Assembled


def context_for(world, agent: int, round_: int, platform: str = INTERVIEW) -> AgentContext:
    """The context `agent` gets on `platform` in round `round_`, the world being as it is
    at the start of that round (`shoal.engine.interventions.begin_round` done): the feed is
    the one the platform's recommender builds for the agent, as the driver would. With
    `platform` INTERVIEW: the system text of an interview, no feed."""
    feed = None
    if platform != INTERVIEW:
        rec = {platform: world.platforms[platform].recommender}
        (view,) = observe(world, round_, {platform: np.array([agent])}, rec,
                          CounterRNG(world.cfg.seed), False, False)
        feed = view.feed[0]
    return AgentContext(platform, feed, build_context_for(world, agent, platform, round_, feed))

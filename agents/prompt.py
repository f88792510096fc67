"""Prompt assembly: an agent's system text and observation, built fresh for every turn.

The system text has these sections, in this order (the most stable first, so a server can
reuse the start of an agent's previous prompt): persona, how to act, beliefs, round
memory, breaking news, cross-platform digest, what the agent can do on the platform, and
with graph memory what it knows. The observation has the notifications since the agent's
last turn and the feed, with top comments. Each is built from typed inputs (nothing edits
a previous prompt), given a priority and a token limit, and assembled within the
configured budget (`memory.context`). Every fixed text is the agent's language's template
(shoal.core.language; English by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from shoal.beliefs.render import confidence_bin, stance_bin, stance_lines
from shoal.core.language import DEFAULT, Templates, positional, templates
from shoal.llm.metadata import CONFIDENCES, STANCES
from shoal.memory.context import Assembled, Line, Section, assemble, inline, quote
from shoal.platforms.spec import spec as platform_spec

INTERVIEW = "interview"  # the pseudo-platform of `shoal interview`
INTERVIEW_LABEL = "social media"
# (in English; an agent's own language's is its templates' `prompt.rules.interview`)
INTERVIEW_RULES = templates()("prompt.rules.interview")


@dataclass
class FeedItem:
    """A post as the agent sees it in its feed."""

    post_id: int
    author: str  # username, or "news"
    kind: str
    text: str
    age_rounds: int
    up: int = 0
    down: int = 0
    shares: int = 0
    replies: int = 0
    pinned: bool = False
    top_comments: list[tuple[str, str, int]] = field(default_factory=list)  # author, text, score


@dataclass
class ContextInputs:
    """Everything one turn's context is made of."""

    round: int
    platform: str
    name: str
    username: str
    bio: str
    persona: str
    group: str | None
    beliefs: list[str]
    trusted: list[str]
    distrusted: list[str]
    memory: list[Line]
    digest: list[Line]
    events: list[Line]
    feed: list[FeedItem]
    notifications: list[Line] = field(default_factory=list)
    minutes_per_round: int = 60
    feed_order: str = "newest first"
    extra_rules: list[str] = field(default_factory=list)
    extra: list[Section] = field(default_factory=list)  # platform engines' sections
    knowledge: list[Line] | None = None  # graph memory's facts (None: no graph memory)
    # `beliefs` as data, line for line: {about, stance, confidence} (shoal.llm.metadata)
    stances: list[dict] = field(default_factory=list)
    language: str = DEFAULT  # the agent's BCP 47 tag: the fixed texts' language

    @classmethod
    def of_agent(cls, population: Any, agent: int, labels: list[str], position: np.ndarray,
                 confidence: np.ndarray, **parts: Any) -> ContextInputs:
        """An agent's inputs: its profile from `population`, its beliefs in words from its
        `position` and `confidence` rows, and the turn's `parts` (round, platform, memory,
        feed, ...). The driver and the shards build every context through this."""
        group = population.group[agent]
        language = population.language_of(agent)
        return cls(name=population.name[agent], username=population.username[agent],
                   bio=population.bio[agent], persona=population.persona[agent],
                   group=population.group_names[group] if group >= 0 else None,
                   beliefs=stance_lines(labels, position, confidence, language),
                   stances=stance_data(labels, position, confidence), language=language,
                   **parts)


def stance_data(labels: list[str], position: np.ndarray, confidence: np.ndarray
                ) -> list[dict]:
    """The beliefs `stance_lines` words, as data: per topic its label and the bins its
    stance and confidence fall in (the same functions choose the words)."""
    bins = stance_bin(np.asarray(position, dtype=float)).tolist()
    return [{"about": label, "stance": STANCES[b],
             "confidence": CONFIDENCES[confidence_bin(float(c))]}
            for label, b, c in zip(labels, bins, confidence, strict=True)]


@dataclass
class SectionSpec:
    """Priority (lower = kept longer) and token limit of a section."""

    priority: int
    max_tokens: int


DEFAULT_SECTIONS = {
    "rules": SectionSpec(0, 250),
    "persona": SectionSpec(1, 300),
    "beliefs": SectionSpec(1, 200),
    "events": SectionSpec(2, 250),
    "feed": SectionSpec(2, 1200),
    "notifications": SectionSpec(2, 250),
    "memory": SectionSpec(3, 700),
    "digest": SectionSpec(4, 300),
    "markets": SectionSpec(2, 300),
    "knowledge": SectionSpec(3, 250),
}


def platform_label(t: Templates, platform: str) -> str:
    """How agents speaking `t`'s language are told the platform's name."""
    return t.get(f"platforms.{platform}.label", platform_spec(platform).label)


@dataclass(frozen=True)
class _FeedWords:
    """A language's feed-line texts, looked up once (every context has a feed of them):
    the fixed ones as they are, the others as bound `str.format`s."""

    sep: str
    pinned: str
    kinds: dict[str, str]
    counts: dict[str, tuple[Any, Any]]  # likes/shares/replies: (one, other)
    ages: tuple[Any, Any, Any]  # minutes, hours, days ago
    score: Any
    line: Any
    points: Any
    comment: Any


@lru_cache(maxsize=64)
def _feed_words(language: str) -> _FeedWords:
    t = templates(language)
    kinds = {k.rpartition(".")[2]: v for k, v in t.texts.items()
             if k.startswith("feed.kinds.") and isinstance(v, str)}
    counts = {name: (positional(t.text(f"feed.{name}.one"), ("n",)),
                     positional(t.text(f"feed.{name}.other"), ("n",)))
              for name in ("likes", "shares", "replies")}
    ages = tuple(positional(t.text(f"time.{k}_ago"), ("n",))
                 for k in ("minutes", "hours", "days"))
    return _FeedWords(t.text("language.sep"), t("feed.pinned"), kinds, counts, ages,
                      positional(t.text("feed.score"), ("score",)),
                      positional(t.text("feed.line"), ("post", "meta", "text")),
                      positional(t.text("feed.points"), ("score",)),
                      positional(t.text("feed.comment"), ("author", "points", "text")))


def feed_line(item: FeedItem, platform: str, minutes_per_round: int,
              language: str = DEFAULT) -> Line:
    """One compact feed line: id, author, age, non-zero counts, the quoted text."""
    words = _feed_words(language)
    counts = []
    if platform_spec(platform).votes_as_score:
        if item.up or item.down:
            counts.append(words.score(f"{item.up - item.down:+d}"))
    elif item.up:
        counts.append(words.counts["likes"][item.up != 1](item.up))
    if item.shares:
        counts.append(words.counts["shares"][item.shares != 1](item.shares))
    if item.replies:
        counts.append(words.counts["replies"][item.replies != 1](item.replies))
    tag = words.pinned if item.pinned else \
        words.kinds.get(item.kind, item.kind) if item.kind != "post" else ""
    minutes = item.age_rounds * minutes_per_round
    when = (words.ages[0](minutes) if minutes < 60 else
            words.ages[1](minutes // 60) if minutes < 48 * 60 else
            words.ages[2](minutes // (24 * 60)))
    meta = words.sep.join(x for x in [f"@{item.author}", when, tag, *counts] if x)
    text = words.line(item.post_id, meta, quote(item.text, 280))
    for author, body, score in item.top_comments:
        points = words.points(f"{score:+d}") if score else ""
        text += "\n    " + words.comment(author, points, quote(body, 160))
    return Line(text, {"kind": "observed", "post": item.post_id, "platform": platform})


def sections(inp: ContextInputs, specs: dict[str, SectionSpec] | None = None) -> list[Section]:
    """The sections of one turn, in display order: from what stays the same between an
    agent's turns to what changes every turn, so that consecutive prompts of an agent
    share a long start a server can cache (docs/llm.md, "Prompts a server can cache").

    Measured on `configs/llm_quickstart.yaml` (most consecutive turns of an agent are on
    the other platform, in the same round): who the agent is and how to act never change
    (so neither names the platform); beliefs rarely; round memory changes once a round,
    at its end; breaking news when an event starts or ends (the same for every turn of a
    round); the digest and the platform's actions are the same on the same platform;
    graph knowledge follows the feed. Then the observation: notifications, the feed.
    Display order and trimming priority are separate: each section keeps its priority."""
    spec = {**DEFAULT_SECTIONS, **(specs or {})}
    t = templates(inp.language)
    # The platform's actions are rules too: they take the rules' priority and limit.
    actions_spec = section_spec(spec, "actions")
    interview = inp.platform == INTERVIEW
    label = INTERVIEW_LABEL if interview else platform_label(t, inp.platform)
    group = t("prompt.persona.group", group=inline(inp.group)) if inp.group else ""
    persona = [Line(t("prompt.persona.you_are", name=inline(inp.name),
                      username=inp.username, group=group)),
               Line(t("prompt.persona.bio", bio=inline(inp.bio))),
               Line(inline(inp.persona), {"truncatable": True})]
    beliefs = [Line(b, {"kind": "state"}) for b in inp.beliefs]
    sep = t.text("language.sep")
    if inp.trusted:
        beliefs.append(Line(t("beliefs.trusted",
                              accounts=sep.join(f"@{u}" for u in inp.trusted))))
    if inp.distrusted:
        beliefs.append(Line(t("beliefs.wary",
                              accounts=sep.join(f"@{u}" for u in inp.distrusted))))
    # an interview: no feed, no actions, a question
    rules = [Line(t("prompt.rules.interview"))] if interview else []
    rules += [Line(t("prompt.rules.voice")), *[Line(r) for r in inp.extra_rules]]
    feed = [feed_line(f, inp.platform, inp.minutes_per_round, inp.language) for f in inp.feed]
    # The last round's details change every round while the rest of the round memory only
    # grows at its end (memory.merge_every): they get their own section after the memory
    # and the news, with the memory's priority and limit unless configured.
    memory = [ln for ln in inp.memory if ln.provenance.get("kind") != "observed"]
    last_round = [ln for ln in inp.memory if ln.provenance.get("kind") == "observed"]
    last_spec = section_spec(spec, "last_round")
    out = [
        Section("persona", t("prompt.persona.title"), spec["persona"].priority,
                spec["persona"].max_tokens, persona),
        Section("rules", t("prompt.rules.title"), spec["rules"].priority,
                spec["rules"].max_tokens, rules),
        Section("beliefs", t("prompt.beliefs.title"), spec["beliefs"].priority,
                spec["beliefs"].max_tokens, beliefs),
        Section("memory", t("prompt.memory.title"), spec["memory"].priority,
                spec["memory"].max_tokens, memory,
                intro=t("prompt.memory.intro") if inp.memory else t("prompt.memory.empty")),
        Section("events", t("prompt.events.title"), spec["events"].priority,
                spec["events"].max_tokens, inp.events,
                intro="" if inp.events else t("prompt.events.empty")),
        *([Section("last_round", t("prompt.last_round.title"), last_spec.priority,
                   last_spec.max_tokens, last_round)] if last_round else []),
        Section("digest", t("prompt.digest.title" if interview
                            else "prompt.digest.title_elsewhere"),
                spec["digest"].priority, spec["digest"].max_tokens, inp.digest,
                intro="" if inp.digest else t("prompt.digest.empty")),
    ]
    if not interview:
        helps = t.get_items(f"platforms.{inp.platform}.actions",
                            platform_spec(inp.platform).action_help)
        out.append(Section("actions", t("prompt.actions.title", platform=label),
                           actions_spec.priority, actions_spec.max_tokens, [Line(
                               t("prompt.actions.choose",
                                 actions=t.text("prompt.actions.sep").join(helps)))]))
    out += [x for x in inp.extra if x.part != "observation"]
    if inp.knowledge is not None:
        out.append(Section("knowledge", t("prompt.knowledge.title"),
                           spec["knowledge"].priority, spec["knowledge"].max_tokens,
                           inp.knowledge, intro=t("prompt.knowledge.intro") if inp.knowledge
                           else t("prompt.knowledge.empty")))
    if interview:  # an interview has no observation
        return out
    if platform_spec(inp.platform).social:  # else its engine's sections are the observation
        order = t.get("feed.orders." + inp.feed_order.replace(" ", "_"), inp.feed_order)
        out += [
            Section("notifications", t("prompt.notifications.title"),
                    spec["notifications"].priority, spec["notifications"].max_tokens,
                    inp.notifications, part="observation",
                    intro="" if inp.notifications else t("prompt.notifications.empty")),
            Section("feed", t("prompt.feed.title", platform=label, round=inp.round,
                              order=order),
                    spec["feed"].priority, spec["feed"].max_tokens, feed, part="observation",
                    intro=t("prompt.feed.empty") if not feed else "")]
    return out + [x for x in inp.extra if x.part == "observation"]


# sections whose built-in setting is another's, `lower` priorities after it: the platform's
# actions are rules too, the last round's lines are memory, and what people said about the
# markets follows their prices
DERIVED_SECTIONS = {"actions": ("rules", 0), "last_round": ("memory", 0),
                    "market_digest": ("markets", 1)}


def section_spec(specs: Mapping[str, SectionSpec] | None, name: str) -> SectionSpec:
    """A section's setting: the config's (`specs`, from `section_specs`), else its
    built-in one, else (a derived section) its base's, as configured, `lower` after."""
    specs = specs or {}
    if name in specs:
        return specs[name]
    if name in DEFAULT_SECTIONS:
        return DEFAULT_SECTIONS[name]
    of, lower = DERIVED_SECTIONS[name]
    base = section_spec(specs, of)
    return SectionSpec(base.priority + lower, base.max_tokens)


def section_specs(cfg) -> dict[str, SectionSpec]:
    """The config's context section settings (priority, token limit) by section; a field
    the config leaves out keeps the section's built-in value (for a derived section, its
    base's, as configured)."""
    given = cfg.memory.context.sections
    out: dict[str, SectionSpec] = {}
    for name in sorted(given, key=lambda n: n in DERIVED_SECTIONS):  # (bases first)
        base = section_spec(out, name)
        s = given[name]
        out[name] = SectionSpec(base.priority if s.priority is None else s.priority,
                                base.max_tokens if s.max_tokens is None else s.max_tokens)
    return out


def build_context(inp: ContextInputs, budget: int,
                  specs: dict[str, SectionSpec] | None = None) -> Assembled:
    """The assembled system text and observation of one turn, with what they show as
    data in `meta` (`shown`)."""
    parts = sections(inp, specs)
    assembled = assemble(parts, budget)
    assembled.meta = shown(inp, parts, assembled)
    return assembled


def shown(inp: ContextInputs, parts: list[Section], assembled: Assembled) -> dict:
    """What an assembled context shows, as data, from the inputs its lines were made of
    and the lines the budget kept: the round and platform; who the agent is (`name` None
    when its line was trimmed); its beliefs (`{about, stance, confidence}`); the posts of
    its feed (`{post, author}`, in the feed's order) and the markets the observation
    prices; and the agent's `language` when it is not English. Requests carry it in their
    `shoal` field (shoal.llm.metadata)."""
    kept = assembled.kept_lines
    persona = kept.get("persona", ())
    beliefs = [inp.stances[i] for i in kept.get("beliefs", ()) if i < len(inp.stances)]
    feed = [{"post": int(inp.feed[i].post_id), "author": inp.feed[i].author}
            for i in kept.get("feed", ())]
    markets = [str(s.lines[i].provenance["market"])
               for s in parts if s.part == "observation"
               for i in kept.get(s.name, ()) if s.lines[i].provenance.get("kind") == "market"]
    out = {"round": inp.round, "platform": inp.platform, "username": inp.username,
           "name": inline(inp.name) if 0 in persona else None, "beliefs": beliefs,
           "feed": feed, "markets": list(dict.fromkeys(markets))}
    if inp.language != DEFAULT:  # (English turns carry exactly what they always did)
        out["language"] = inp.language
    return out

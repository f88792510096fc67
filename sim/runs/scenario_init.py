"""`shoal init BRIEF`: from a document to a runnable scenario folder (docs/graph.md).

1. The brief is read into a knowledge graph (the configured extractor).
2. **Topics**: the entities the brief takes sides on — objects of `supports`/`opposes`
   facts — most contested first (at most `max_topics`); failing those, the brief's top
   keyphrases (YAKE). Each topic's keywords: its name, its aliases, and keyphrases sharing
   a word with it. The graph is then read again with the topics known, so every mention
   of one resolves to the topic's entity.
3. **Stakeholder groups**: the entities that take sides on a topic (subjects of polar
   facts), by number of such facts (at most `max_groups`), plus "the public" for everyone
   else. A group's position on a topic is the mean of its facts (+1 supports, −1
   opposes; 0 without one); its share of the population is proportional to
   1 + its number of facts, the public holding `public_share`.
4. **Personas**: each agent belongs to a group (largest-remainder allocation of the
   shares, then a seeded shuffle) and is written from the facts about its group (each
   persona lists the ids of the relations it was built from, in `facts`); the public's
   personas rest on the facts about the topics.
5. **Initial stances**: the group's position, shrunk by 0.7 and spread by a seeded
   normal (sd 0.25), clipped to [−1, 1]; confidence 0.35 + 0.4·|group position|.
6. **Follow graph**: each agent follows `follows` others, each within its own group with
   probability `homophily`, otherwise anyone (seeded).
7. **Time**: a time span the requirement states ("the two weeks after the announcement")
   sets `rounds` × `minutes_per_round` to cover it (`schedule`); none: 24 rounds of an hour.
8. `config.yaml` (runs as it is: `shoal check` and `shoal run` accept it), `personas.yaml`,
   `graph/` (the brief's graph, Parquet), and `SCENARIO.md` saying what was derived from
   which facts.
9. **Language**: the brief's (`--language`, else Chinese or Japanese when the brief is
   written in it, else English): the personas' own words are in it, and a language other
   than English is `population.language` in `config.yaml`.

Every text that comes from the brief or a preset (names, labels, facts, the title, the
file's own name) is data: the YAML files are the emitter's output of a mapping, with
comments of one line each (`memory.context.one_line`); persona text is fenced as profile
fields are (`inline`, facts quoted); SCENARIO.md's table cells cannot end their row.

Same brief, seed, agent count and extractor → byte-identical files.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shoal.config.yaml_text import dump_yaml
from shoal.core.counter_rng import CounterRNG
from shoal.core.errors import InputError
from shoal.core.files import write_text
from shoal.core.language import DEFAULT, Templates, detect_cjk, templates
from shoal.memory.context import inline, one_line, quote
from shoal.memory.knowledge.communities import detect
from shoal.memory.knowledge.extract import Extractor, keyphrases
from shoal.memory.knowledge.ingest import TopicNames, ingest_document
from shoal.memory.knowledge.model import POLARITY, KnowledgeGraph
from shoal.memory.knowledge.resolve import key
from shoal.store.knowledge import write_scenario_graph
from shoal.store.run_dir import is_run_dir
from shoal.world.knowledge import read_document

PUBLIC = "public"
_SLUG = re.compile(r"[^a-z0-9]+")
MAX_AGENTS = 1_000_000  # personas.yaml is written agent by agent
MAX_ROUNDS = 100_000
REQUIREMENT_CHARS = 1000  # the requirement shown and matched: a one-paragraph brief's is long


@dataclass
class InitOptions:
    """What `shoal init` may be told (`rounds` None: from the brief's time span, else 24)."""

    agents: int = 200
    seed: int = 0
    rounds: int | None = None
    max_topics: int = 3
    max_groups: int = 6
    public_share: float = 0.4
    follows: int = 6
    homophily: float = 0.7
    requirement: str = ""  # what to simulate: steers which topics and groups come first
    language: str | None = None  # a BCP 47 tag (None: the brief's, Chinese/Japanese or English)


@dataclass
class Brief:
    """What `shoal init` reads: the document, and for a MiroShark preset template, its
    requirement, sizes, platforms and the fate of each of its fields."""

    source: str  # the document's name in fact sources
    text: str
    title: str
    requirement: str = ""
    agents: int | None = None
    rounds: int | None = None
    twitter: bool = True
    reddit: bool = True
    market: bool = False
    fields: list[tuple[str, str]] | None = None  # preset field -> what Shoal did with it
    details: dict[str, str] | None = None  # the preset's descriptive fields, shown as given


PRESET_FIELDS = {
    "id": "the scenario's name",
    "name": "the scenario's title (config.yaml, SCENARIO.md)",
    "description": "SCENARIO.md",
    "category": "SCENARIO.md",
    "icon": "dropped: a UI icon",
    "difficulty": "dropped: a UI label",
    "estimated_agents": "the population size (unless --agents)",
    "estimated_rounds": "rounds (unless --rounds)",
    "platforms": "which platforms are on (with recommended_settings)",
    "tags": "SCENARIO.md",
    "simulation_type": "SCENARIO.md; a type without a Shoal platform runs on twitter",
    "simulation_requirement": "the scenario's description; ranks topics and groups it names "
                              "first",
    "seed_document": "the brief: read into the graph (topics, groups, personas, facts)",
    "recommended_settings": "enable_twitter / enable_reddit switch platforms; "
                            "enable_polymarket adds a market on the first topic",
    "counterfactual_branches": "not imported: fork the run (`shoal fork`) for each branch",
    "oracle_tools": "dropped: MiroShark's oracle seeding has no Shoal counterpart",
}


def read_brief(path: Path) -> Brief:
    """A document (text, Markdown, PDF), or a MiroShark preset template (JSON with a
    `seed_document`)."""
    if path.suffix.lower() != ".json":
        text = read_document(path)
        if not text.strip():
            raise InputError(f"{path}: the brief is empty")
        title, asked = title_and_description(text, path.stem)
        return Brief(one_line(path.name), text, one_line(title), asked)
    try:
        data = json.loads(read_document(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    except ValueError:  # (an integer Python will not read: more than 4,300 digits)
        raise InputError(f"{path}: a number of more than 4,300 digits; no field takes "
                         "one") from None
    except RecursionError:
        raise InputError(f"{path}: not a preset template: JSON nested too deeply") from None
    if not isinstance(data, dict) or not isinstance(data.get("seed_document"), str) \
            or not data["seed_document"].strip():
        raise InputError(f"{path}: a preset template needs a non-empty `seed_document` "
                         "text (MiroShark's preset_templates/*.json)")
    _check_preset(path, data)
    settings = data.get("recommended_settings") or {}
    platforms = [str(p) for p in data.get("platforms") or []]

    def on(name: str) -> bool:
        flag = settings.get(f"enable_{name}")
        return bool(flag) if flag is not None else (not platforms or name in platforms)

    def count(key: str) -> int | None:
        value = data.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and \
            value > 1 else None

    fields = [(k, PRESET_FIELDS.get(k, "dropped: not a field Shoal knows")) for k in data]
    details = {k: ", ".join(map(str, v)) if isinstance(v, list) else str(v)
               for k, v in data.items()
               if k in ("description", "category", "tags", "simulation_type") and v}
    name = one_line(str(data.get("id") or "")).strip() or one_line(path.stem)
    return Brief(f"{name}.md", data["seed_document"],
                 one_line(str(data.get("name") or "")).strip() or one_line(path.stem),
                 requirement(str(data.get("simulation_requirement") or "")),
                 count("estimated_agents"), count("estimated_rounds"), on("twitter"),
                 on("reddit"), on("polymarket"), fields, details)


# A preset's fields Shoal reads, and the JSON types each may have.
_PRESET_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "id": ((str, int), "text"), "name": ((str,), "text"), "description": ((str,), "text"),
    "category": ((str,), "text"), "simulation_type": ((str,), "text"),
    "simulation_requirement": ((str,), "text"), "tags": ((list, str), "a list of text"),
    "platforms": ((list,), "a list of platform names"),
    "recommended_settings": ((dict,), "an object of enable_* flags"),
    # (a size written as 60.0, "60" or 1e400 would fall back to the default unsaid)
    "estimated_agents": ((int,), "a whole number"),
    "estimated_rounds": ((int,), "a whole number"),
}


def _check_preset(path: Path, data: dict) -> None:
    """InputError naming the field when a preset's field has the wrong JSON type, or a
    text anywhere in it is not valid Unicode (JSON lets a lone surrogate through)."""
    for field, (types, what) in _PRESET_TYPES.items():
        value = data.get(field)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            raise InputError(f"{path}: `{field}` must be {what}, not "
                             f"{type(value).__name__}: {quote(str(value), 60)}")
    if any(not isinstance(p, str) for p in data.get("platforms") or []):
        raise InputError(f"{path}: `platforms` must be a list of platform names")
    stack: list[tuple[str, object]] = [(k, v) for k, v in data.items()]
    while stack:  # (a loop, not recursion: JSON may nest as deep as the parser allows)
        where, value = stack.pop()
        for text in ([where] if isinstance(value, dict | list) else [where, value]):
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError as exc:
                    top = where.split(".")[0]
                    raise InputError(f"{path}: `{one_line(top)}` is not valid Unicode text "
                                     f"(a lone surrogate at character {exc.start})") from None
        if isinstance(value, dict):
            stack += [(f"{where}.{k}", v) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(f"{where}.{i}", v) for i, v in enumerate(value)]


def slug(text: str, fallback: str = "scenario") -> str:
    """A config-safe name: lower case, letters, digits and underscores, starting with a
    letter."""
    s = _SLUG.sub("_", text.lower()).strip("_")[:40].strip("_")
    return s if s and s[0].isalpha() else f"{fallback}_{s}".strip("_")


def requirement(text: str) -> str:
    """The simulation requirement as one line, at most `REQUIREMENT_CHARS` characters: a
    longer one (a brief that is one paragraph) ends at its last sentence that fits."""
    text = " ".join(one_line(text).split())
    if len(text) <= REQUIREMENT_CHARS:
        return text
    head = text[:REQUIREMENT_CHARS - 1]
    end = max(head.rfind(". "), head.rfind("? "), head.rfind("! "))
    return head[:end + 1] if end > REQUIREMENT_CHARS // 2 else \
        head[:head.rfind(" ")].rstrip() + "…" if " " in head else head + "…"


def title_and_description(text: str, fallback: str) -> tuple[str, str]:
    """The brief's first Markdown heading (or the file name) and its first paragraph (as
    `requirement` gives it)."""
    title, description = fallback, ""
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
        if not lines:
            continue
        if lines[0].startswith("#") and title == fallback:
            title = lines[0].lstrip("#").strip() or fallback
            lines = lines[1:]
        if lines and not description:
            description = requirement(" ".join(lines))
        if description:
            break
    return title, description


def _words(requirement: str) -> set[str]:
    """The requirement's words, for `_named` (computed once: it may be long)."""
    return set(key(requirement).split())


def _named(requirement: set[str], name: str) -> float:
    """How much of a name the requirement names: the share of its words (longer than two
    letters) among the requirement's words — the requirement steers what comes first."""
    words = {w for w in key(name).split() if len(w) > 2}
    return len(words & requirement) / len(words) if words else 0.0


# --------------------------------------------------------------------------- time

_UNIT_MINUTES = {"minute": 1, "hour": 60, "day": 1440, "week": 10080, "fortnight": 20160,
                 "month": 43200, "quarter": 129600, "year": 525600, "decade": 5256000}
_COUNTS = {"a": 1, "an": 1, "one": 1, "the": 1, "first": 1, "next": 1, "coming": 1,
           "a couple of": 2, "couple of": 2, "a few": 3, "few": 3, "several": 3, "two": 2,
           "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
           "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30,
           "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
           "a hundred": 100}
# A count and a unit as words apart ("two weeks", "the month", "48 hours"); joined by a
# hyphen they describe a thing ("a four-day week"), not the span to simulate.
_SPAN = re.compile(r"(?<![\w-])(\d+(?:\.\d+)?|" + "|".join(
    sorted(_COUNTS, key=len, reverse=True)) + r")\s+(" + "|".join(_UNIT_MINUTES)
    + r")s?\b(?!-)", re.IGNORECASE)
_NOT_A_SPAN = {"last", "past", "previous", "every", "each", "per", "once", "twice", "times"}
SPAN_ROUNDS = 48  # at most this many rounds from a span (unless --rounds says otherwise)
MAX_SPAN = 10 * 525600  # ten years
# Round lengths a span is cut into (minutes): the finest that needs at most SPAN_ROUNDS.
_STEPS = (60, 120, 180, 240, 360, 480, 720, 1440, 2880, 10080, 20160, 43200)


@dataclass
class Schedule:
    """How long a round is and how many there are, and why."""

    rounds: int
    minutes_per_round: int
    span: str = ""  # the requirement's words that state the span ("" if none)
    span_minutes: int = 0
    given: bool = False  # rounds given (--rounds, the preset's estimated_rounds)

    def describe(self) -> str:
        """A sentence for SCENARIO.md."""
        step = f"{self.rounds} rounds of {_duration(self.minutes_per_round)}"
        if not self.span:
            return (f"The requirement states no time span: {step}"
                    + (" (the default)." if not self.given else "."))
        why = ("the rounds given (--rounds, or the preset's estimated_rounds) stretched to "
               "cover it" if self.given else f"the finest of Shoal's round lengths that "
               f"covers it in at most {SPAN_ROUNDS} rounds")
        return (f"The requirement says \u201c{self.span}\u201d "
                f"({_duration(self.span_minutes)}): {step}, {why} (docs/graph.md, "
                "\"Time\").")


def _duration(minutes: int) -> str:
    for unit, size in (("day", 1440), ("hour", 60), ("minute", 1)):
        if minutes % size == 0:
            n = minutes // size
            return f"{n:,} {unit}{'s' * (n != 1)}"
    return f"{minutes} minutes"  # pragma: no cover - every count is a whole minute


def time_span(text: str) -> tuple[str, int] | None:
    """The time span a requirement states: its words and minutes (a month is 30 days, a
    year 365), capped at ten years; None if it states none. The first span in a sentence
    that asks to simulate, else the first span; spans of the past or a frequency ("last
    year", "once a week") are not spans."""
    found = []
    for m in _SPAN.finditer(text):
        before = text[:m.start()].split()[-1:]
        if before and before[0].lower().strip(",;:(") in _NOT_A_SPAN:
            continue
        count = m.group(1).lower()
        n = float(count) if count[0].isdigit() else _COUNTS[count]
        minutes = min(math.ceil(n * _UNIT_MINUTES[m.group(2).lower()]), MAX_SPAN)
        if minutes > 0:
            sentence = text[:m.start()].rsplit(".", 1)[-1] + text[m.start():].split(".")[0]
            found.append(("simulat" not in sentence.lower(), len(found), m.group(0),
                          minutes))
    if not found:
        return None
    _, _, words, minutes = min(found)
    return " ".join(words.split()), minutes


def schedule(requirement: str, rounds: int | None) -> Schedule:
    """Rounds and their length: from the requirement's time span (`time_span`) — the
    given `rounds` stretched to cover it, or the finest round length of `_STEPS` that
    covers it in at most `SPAN_ROUNDS` rounds (a span under 12 hours: the longest of 30,
    15 and 10 minutes that makes 12 rounds, else 5) — and without a span, `rounds`
    (default 24) of an hour (docs/graph.md, "Time")."""
    found = time_span(requirement)
    if found is None:
        return Schedule(rounds or 24, 60, given=rounds is not None)
    words, span = found
    if rounds is not None:
        return Schedule(rounds, max(1, math.ceil(span / rounds)), words, span, True)
    if span < 12 * 60:
        step = next((s for s in (30, 15, 10) if span / s >= 12), 5)
    else:
        step = next((s for s in _STEPS if math.ceil(span / s) <= SPAN_ROUNDS),
                    math.ceil(span / SPAN_ROUNDS / 1440) * 1440)
    return Schedule(max(1, math.ceil(span / step)), step, words, span)


def _polar_facts(graph: KnowledgeGraph) -> list[int]:
    rel = graph.rows["graph_relations"].columns
    visible = graph.visible()
    return [r for r in range(graph.n_relations) if visible[r] and rel["predicate"][r] in POLARITY]


def _topics(graph: KnowledgeGraph, text: str, opts: InitOptions) -> TopicNames:
    rel = graph.rows["graph_relations"].columns
    names = graph.column("graph_entities", "name")
    types = graph.column("graph_entities", "type")
    asked = _words(opts.requirement)
    contested = Counter(rel["object"][r] for r in _polar_facts(graph)
                        if types[rel["object"][r]] not in ("group", "person"))
    ranked = [e for e, _ in sorted(contested.items(), key=lambda x: (
        -_named(asked, names[x[0]]), -x[1], x[0]))]
    folded: dict[int, list[str]] = {}  # topic entity -> names folded into it
    words_of: dict[int, set[str]] = {}
    for e in ranked:  # "levy" is the "carbon levy": one topic, the other name a keyword
        words = set(key(names[e]).split())
        into = next((t for t in folded if words <= words_of[t] or words_of[t] <= words),
                    None)
        if into is not None:
            folded[into].append(names[e])
        elif len(folded) < opts.max_topics:  # (more would never be picked)
            folded[e], words_of[e] = [], words
    picked = list(folded)
    # The label: the most specific name of a topic ("carbon levy" over "levy"), one line
    # (a name an LLM extractor returned may hold anything).
    labels = [inline(max([names[e], *folded[e]], key=lambda n: (len(n.split()), n)))
              for e in picked]
    labels = [label for label in labels if key(label)]
    phrases = [p for p, _ in keyphrases(text, 20)]
    if not labels:  # nothing is argued over explicitly: the brief's main phrases
        labels = [p for p in phrases if len(p.split()) > 1][: opts.max_topics] or phrases[:1]
        labels = [label for label in map(inline, labels) if key(label)]
    if not labels:
        raise InputError("the brief names nothing to take sides on: write what is proposed "
                         "and who supports or opposes it")
    keywords = []
    aliases = graph.column("graph_entities", "aliases")
    for label in labels:
        words = {w for w in key(label).split() if len(w) > 3}
        entity = graph.by_key.get(key(label))
        own = list(aliases[entity]) if entity is not None else []
        related = [p for p in phrases if words & set(key(p).split()) and key(p) != key(label)]
        group = next(([names[e], *folded[e]] for e in picked if label in
                      map(inline, [names[e], *folded[e]])), [])
        keywords.append([k for k in dict.fromkeys(map(inline, [label, *own, *group,
                                                                *related[:3]])) if k])
    ids = []
    for label in labels:
        base = slug(label, "topic")
        ids.append(base if base not in ids else f"{base}_{len(ids)}")
    return TopicNames(ids, labels, keywords)


@dataclass
class Group:
    """A stakeholder group: its entity (None for the public), positions, share, facts."""

    name: str
    entity: int | None
    positions: list[float]
    share: float
    facts: list[int]


def _groups(graph: KnowledgeGraph, topics: TopicNames, opts: InitOptions) -> list[Group]:
    rel = graph.rows["graph_relations"].columns
    names = graph.column("graph_entities", "name")
    topic_ids = [graph.by_key[key(t)] for t in topics.labels]
    visible = graph.visible()  # (once: a new mask per call, and there is one per relation)
    asked = _words(opts.requirement)
    sides: dict[int, list[int]] = {}
    for r in _polar_facts(graph):
        if rel["object"][r] in topic_ids and rel["subject"][r] not in topic_ids:
            sides.setdefault(rel["subject"][r], []).append(r)
    ranked = sorted(sides.items(), key=lambda x: (
        -_named(asked, names[x[0]]), -len(x[1]), x[0]))[: opts.max_groups]
    groups = []
    used: set[str] = {PUBLIC}
    for entity, facts in ranked:
        positions = []
        for t in topic_ids:
            signs = [POLARITY[rel["predicate"][r]] for r in facts if rel["object"][r] == t]
            positions.append(float(np.mean(signs)) if signs else 0.0)
        name = slug(names[entity], "group")
        while name in used:
            name += "_"
        used.add(name)
        about = [r for r in range(graph.n_relations) if visible[r]
                 and entity in (rel["subject"][r], rel["object"][r])]
        groups.append(Group(name, entity, positions, 1.0 + len(facts), about))
    total = sum(g.share for g in groups)
    rest = opts.public_share if groups else 1.0
    for g in groups:
        g.share = round((1.0 - rest) * g.share / total, 4)
    about_topics = [r for r in range(graph.n_relations) if visible[r]
                    and rel["object"][r] in topic_ids]
    groups.append(Group(PUBLIC, None, [0.0] * len(topic_ids),
                        round(1.0 - sum(g.share for g in groups), 4), about_topics))
    return groups


def _allocate(groups: list[Group], n: int, rng: np.random.Generator) -> np.ndarray:
    """Group index per agent: largest remainder of the shares, then shuffled."""
    exact = np.array([g.share for g in groups]) * n
    counts = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - counts), kind="stable")[: n - counts.sum()]:
        counts[i] += 1
    out = np.repeat(np.arange(len(groups)), counts)
    rng.shuffle(out)
    return out


def _persona(group: Group, graph: KnowledgeGraph, facts: list[int], label: str,
             words: Templates | None = None) -> str:
    """A persona from the brief's facts, fenced as profile fields and posts are: names on
    one line, each fact quoted (the brief's words are data, not the agent's voice); its
    own words in the scenario's language (`words`; English by default)."""
    words = words or templates()
    rel = graph.rows["graph_relations"].columns
    who = (words("init.public") if group.entity is None else words(
        "init.aligned", entity=inline(graph.column('graph_entities', 'name')[group.entity])))
    said = " ".join(words("init.fact", fact=quote(rel['fact'][r], 400), id=r) for r in facts)
    return words("init.persona", who=who, topics=label, facts=said).strip()


def brief_language(text: str) -> str:
    """The language a brief is written in, as far as `shoal init` tells: Chinese or
    Japanese by its script, else English (`--language` says it otherwise)."""
    return detect_cjk([p for p in re.split(r"\n\s*\n", text) if p.strip()]) or DEFAULT


def init_scenario(brief: str | Path, out: str | Path | None, extractor: Extractor,
                  opts: InitOptions | None = None, force: bool = False) -> Path:
    """Write the scenario folder for `brief` (default: a folder named after it in the
    current directory); returns its path."""
    opts = opts or InitOptions()
    path = Path(brief)
    brief = read_brief(path)
    text, title, description = brief.text, brief.title, brief.requirement
    opts.requirement = requirement(opts.requirement) or description
    plan = schedule(description, opts.rounds)
    folder = Path(out) if out is not None else Path.cwd() / slug(path.stem)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder}: is a file; give --out a folder")
    if folder.is_dir() and is_run_dir(folder):  # --force overwrites a scenario, never a run
        raise InputError(f"{folder}: is a run directory; a scenario is never written into a "
                         "run: give --out a new folder")
    if folder.exists() and any(folder.iterdir()) and not force:
        raise InputError(f"{folder}: exists and is not empty (use --force to overwrite)")
    first = KnowledgeGraph()
    ingest_document(first, brief.source, text, extractor)
    try:
        topics = _topics(first, text, opts)
    except InputError as exc:  # (named by the brief it is about)
        raise InputError(f"{path}: {exc}") from None
    graph = KnowledgeGraph()
    ingest_document(graph, brief.source, text, extractor, topics)
    groups = _groups(graph, topics, opts)
    rng = CounterRNG(opts.seed).generator(7, 1)
    member = _allocate(groups, opts.agents, rng)
    language = opts.language or brief_language(text)
    words = templates(language)

    personas, stances = [], []
    first_names = _names("first")
    last_names = _names("last")
    labels = words.text("language.sep").join(topics.labels)
    for agent, g in enumerate(member.tolist()):
        group = groups[g]
        facts = sorted(rng.choice(group.facts, size=min(2, len(group.facts)), replace=False)
                       .tolist()) if group.facts else []
        name = f"{first_names[rng.integers(len(first_names))]} " \
               f"{last_names[rng.integers(len(last_names))]}"
        position = np.clip(0.7 * np.asarray(group.positions)
                           + rng.normal(0, 0.25, len(group.positions)), -1, 1)
        stance = {t: round(float(p), 3) for t, p in zip(topics.names, position, strict=True)}
        stances.append(stance)
        personas.append({
            "user_id": agent, "name": name, "username": f"{group.name[:20]}_{agent}",
            "bio": f"{group.name.replace('_', ' ')} · {labels}",
            "persona": _persona(group, graph, facts, labels, words), "group": group.name,
            "stances": stance, "facts": facts, "following": []})
    for agent, p in enumerate(personas):
        same = np.nonzero(member == member[agent])[0]
        picks: list[int] = []
        while len(picks) < min(opts.follows, opts.agents - 1):
            pool = same if rng.random() < opts.homophily and len(same) > 1 else np.arange(
                opts.agents)
            other = int(pool[rng.integers(len(pool))])
            if other != agent and other not in picks:
                picks.append(other)
        p["following"] = sorted(picks)

    found = detect(graph, 1, 0, seed=opts.seed)
    made = not folder.exists()  # (a folder this call makes goes again if it fails)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        from shoal.memory.knowledge.memory import stamp

        tables = {name: stamp(t, 0) for name, t in {**graph.tables(), **found.tables()}.items()}
        write_scenario_graph(folder, tables)
        calls = getattr(extractor, "calls", None)  # an LLM extractor's calls, kept beside it
        rows = calls.drain(0) if calls is not None else []
        if rows:
            write_calls(folder, rows)
        _write(folder / "personas.yaml", dump_yaml(personas, sort_keys=False,
                                                        allow_unicode=True))
        config = _config(title, topics, opts, brief, plan, language)
        # The YAML is the emitter's, from data; the brief's words go only into comments of one
        # line each, so no title or file name can add a key.
        header = _comment(f"{title}: made by `shoal init` from {path.name}; SCENARIO.md says "
                          "what came from which facts.") + (_comment(description)
                                                            if description else "")
        _write(folder / "config.yaml", header + dump_yaml(config, sort_keys=False,
                                                               allow_unicode=True))
        # An LLM extractor says what it came to (texts that gave no facts, and why); the
        # offline one, the default, has nothing to report.
        described = getattr(extractor, "report", None)
        _write(folder / "SCENARIO.md", _report(path, title, description, topics, groups, graph,
                                               member, plan, brief.fields, brief.details,
                                               described() if described else None))
    except BaseException:  # a full disk, say, or Ctrl-C: no half-written scenario
        if made:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def _comment(text: str) -> str:
    """A YAML comment line: `text` on one line of printable characters."""
    return f"# {one_line(text)}\n"


def write_calls(folder: Path, rows: list[dict]) -> Path:
    """The extraction's `llm_calls` rows as `graph/llm_calls.parquet`."""
    import duckdb

    from shoal.engine.round_log import llm_calls_table

    path = folder / "graph" / "llm_calls.parquet"
    con = duckdb.connect()
    con.register("calls", llm_calls_table(rows))
    quoted = str(path).replace("'", "''")  # a folder's name is data too
    con.execute(f"COPY calls TO '{quoted}' (FORMAT parquet)")
    con.close()
    return path


def _names(kind: str) -> list[str]:
    from importlib import resources

    text = resources.files("shoal.agents").joinpath(f"data/{kind}_names.txt").read_text("utf-8")
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def _config(title: str, topics: TopicNames, opts: InitOptions, brief: Brief,
            plan: Schedule, language: str = DEFAULT) -> dict:
    platforms: dict = {}
    words = templates(language)
    if not brief.reddit:
        platforms["reddit"] = {"enabled": False}
    if not brief.twitter and brief.reddit:
        platforms["twitter"] = {"enabled": False}
    if brief.market:  # a yes/no market on the first topic, resolved by the run's opinion
        platforms["market"] = {"markets": [{
            "id": topics.names[0],
            "question": words("init.market_question", label=topics.labels[0]),
            "topic": topics.names[0], "resolution": {"rule": {
                "topic": topics.names[0], "metric": "mean_position", "op": ">",
                "value": 0}}}]}
    return {
        "name": slug(title),
        "seed": opts.seed,
        "rounds": plan.rounds,
        "minutes_per_round": plan.minutes_per_round,
        "population": {"file": "personas.yaml", "format": "shoal",
                       **({"language": language} if language != DEFAULT else {})},
        "topics": [{"name": n, "label": label, "keywords": kw} for n, label, kw in
                   zip(topics.names, topics.labels, topics.keywords, strict=True)],
        "initial_stances": {"from_profiles": True},
        "graph": {"kind": "profiles"},
        **({"platforms": platforms} if platforms else {}),
        "memory": {"graph": {"enabled": True, "scenario": "."}},
        "interventions": [],
    }


def _cell(text: object) -> str:
    """Text as a Markdown table cell: one line, its pipes escaped."""
    return one_line(str(text)).replace("|", "\\|")


def _code(text: str) -> str:
    """Text as Markdown code on one line, fenced by more backticks than it holds."""
    text = one_line(text)
    ticks = "`" * (max((len(r) for r in re.findall("`+", text)), default=0) + 1)
    return f"{ticks} {text} {ticks}" if len(ticks) > 1 else f"`{text}`"


def _report(brief: Path, title: str, description: str, topics: TopicNames,
            groups: list[Group], graph: KnowledgeGraph, member: np.ndarray, plan: Schedule,
            fields: list[tuple[str, str]] | None = None,
            details: dict[str, str] | None = None, extraction: str | None = None) -> str:
    rel = graph.rows["graph_relations"].columns
    counts = Counter(member.tolist())
    lines = [f"# {one_line(title)}", "", f"Made by `shoal init` from {_code(brief.name)}.", ""]
    if description:
        lines += ["## The brief's requirement", "", one_line(description), ""]
    lines += ["## Time", "", plan.describe(), ""]
    lines += ["## Topics", "", "| topic | label | keywords |", "|---|---|---|"]
    lines += [f"| `{n}` | {_cell(label)} | {_cell(', '.join(kw))} |"
              for n, label, kw in zip(topics.names, topics.labels, topics.keywords,
                                      strict=True)]
    lines += ["", "## Stakeholder groups", "",
              "| group | agents | share | positions | facts |", "|---|---:|---:|---|---|"]
    for i, g in enumerate(groups):
        pos = ", ".join(f"{t} {p:+.2f}" for t, p in zip(topics.names, g.positions,
                                                           strict=True))
        lines.append(f"| `{g.name}` | {counts.get(i, 0)} | {g.share:.2f} | {pos} | "
                     f"{', '.join(map(str, g.facts[:12]))} |")
    if details:
        lines += ["", "## The preset template", ""]
        lines += [f"- **{k}**: {one_line(' '.join(v.split()))}" for k, v in details.items()]
    if fields:
        lines += ["", "## The preset template's fields", "", "| field | what Shoal did |",
                  "|---|---|"]
        lines += [f"| {_cell(_code(k))} | {what} |" for k, what in fields]
    if extraction:
        lines += ["", "## Extraction", "", f"The facts were read by {one_line(extraction)}. "
                  "Every call is a row of `graph/llm_calls.parquet`."]
    lines += ["", "## Facts", "", "| id | fact | source |", "|---:|---|---|"]
    lines += [f"| {r} | {_cell(rel['fact'][r])} | {_cell(rel['source_id'][r])} |"
              for r in range(graph.n_relations)]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    write_text(path, text)

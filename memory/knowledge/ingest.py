"""Ingestion: documents and the simulation's activity into the graph.

A document becomes one episode per paragraph (its character span in the document kept);
every fact extracted from a paragraph is a `document` relation whose source id is the
document and the sentence's span (`brief.md:120-245`). Mentions without a fact still
become entities.

A round's activity becomes one episode per agent who posted (their posts' text, the post
ids, the round and simulated time): never one batch of everyone, never one kind for a
mixed batch. From it, per topic the agent's posts took a side on, a `belief` relation
(the agent –supports/opposes/is undecided about→ the topic, from the posts' mean stance),
and from the text the facts about others (`observation` relations; the agent's first-person
statements are its beliefs already). Source ids are the post ids. A relation already
visible with the same subject, predicate and object is not added again (its first source
stands); a polar relation contradicting an older one on the same endpoints withdraws it
(`memory/knowledge/model.py`), and an agent's new belief relation on a topic withdraws its
older one of any other predicate (an agent holds one position at a time).

Extraction is pure text work and may run in the background (`memory/knowledge/memory.py`);
resolving into the graph happens here, on the caller's thread, in a fixed order, so the
same inputs always give the same graph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shoal.core.registry import PluginError, calling, from_shoal
from shoal.memory.knowledge.extract import Extraction, Extractor, trimmed
from shoal.memory.knowledge.model import KnowledgeGraph
from shoal.memory.knowledge.resolve import key, resolve

UNDECIDED = 0.2  # |mean stance| below this: "is undecided about"
_PARAGRAPH = re.compile(r"\n\s*\n")


@dataclass
class TopicNames:
    """How topics appear in text: each topic's entity name (its label) and keywords."""

    names: list[str]  # topic ids, in index order
    labels: list[str]
    keywords: list[list[str]]

    def known(self) -> dict[str, str]:
        """Names the extractor should find, as topics."""
        out = {}
        for label, words in zip(self.labels, self.keywords, strict=True):
            for w in [label, *words]:
                out[_plain(w)] = "topic"
        return out

    def entities(self, graph: KnowledgeGraph) -> list[int]:
        """The topics' entities (created once), every keyword an alias of its topic."""
        out = []
        for label, words in zip(self.labels, self.keywords, strict=True):
            entity = resolve(graph, _plain(label), "topic")
            for w in words:
                graph.alias(key(w), entity)
            out.append(entity)
        return out


def _plain(label: str) -> str:
    return re.sub(r"^(the|a|an)\s+", "", label.strip(), flags=re.IGNORECASE)


def paragraphs(text: str) -> list[tuple[int, int]]:
    """Character spans of the paragraphs (blocks separated by blank lines), trimmed."""
    out, start = [], 0
    for m in [*_PARAGRAPH.finditer(text), None]:
        a, b = trimmed(text, start, m.start() if m else len(text))
        if b > a:
            out.append((a, b))
        start = m.end() if m else len(text)
    return out


def ingest_document(graph: KnowledgeGraph, source: str, text: str, extractor: Extractor,
                    topics: TopicNames | None = None) -> dict[str, int]:
    """Read a document into the graph; counts of what was added."""
    before = (graph.n_episodes, graph.n_entities, graph.n_relations)
    known = topics.known() if topics else {}
    if topics:
        topics.entities(graph)
    spans = paragraphs(text)
    extractions = extract(extractor, [text[a:b] for a, b in spans], known)
    for (a, b), ex in zip(spans, extractions, strict=True):
        episode = graph.add_episode("document", source, text[a:b], span=(a, b))
        _add_mentions(graph, ex)
        for fact in ex.facts:
            s0, s1 = a + fact.span[0], a + fact.span[1]
            subject = resolve(graph, fact.subject.name, fact.subject.type)
            obj = resolve(graph, fact.object.name, fact.object.type)
            if subject == obj:
                continue
            _add_once(graph, subject, fact.predicate, obj, fact.text, "document",
                      "document", f"{source}:{s0}-{s1}", episode, 0, "")
    return {"episodes": graph.n_episodes - before[0], "entities": graph.n_entities - before[1],
            "relations": graph.n_relations - before[2]}


def _add_mentions(graph: KnowledgeGraph, ex: Extraction) -> None:
    for m in ex.mentions:
        if m.type != "agent":
            resolve(graph, m.name, m.type)


def _add_once(graph: KnowledgeGraph, subject: int, predicate: str, obj: int, fact: str,
              kind: str, source_type: str, source_id: str, episode: int, round_: int,
              sim_time: str) -> int | None:
    """Add a relation unless the same one is visible already."""
    rel = graph.rows["graph_relations"].columns
    for rid in graph.by_pair.get((subject, obj), []):  # (those not withdrawn)
        if rel["predicate"][rid] == predicate:
            return None
    rid, _ = graph.add_relation(subject, predicate, obj, fact, kind, source_type, source_id,
                                episode, round_, sim_time)
    return rid


def _supersede_beliefs(graph: KnowledgeGraph, rid: int, agent: int, topic: int,
                       episode: int, round_: int, sim_time: str) -> None:
    """An agent holds one position on a topic: its new belief relation `rid` withdraws
    its older visible ones of another predicate ("is undecided about" included, which
    has no polarity to contradict)."""
    rel = graph.rows["graph_relations"].columns
    for old in list(graph.by_pair.get((agent, topic), [])):
        if old != rid and rel["kind"][old] == "belief" \
                and rel["predicate"][old] != rel["predicate"][rid]:
            graph.withdraw(old, round_, sim_time, episode,
                           f"superseded by relation {rid} ({rel['predicate'][rid]}): "
                           f"{rel['fact'][rid]}")


@dataclass
class RoundActivity:
    """What the agents posted in one round: per posting agent (ascending), the text of
    their posts, the post ids and the mean stance per topic (nan: not addressed)."""

    round: int
    sim_time: str
    agents: list[int] = field(default_factory=list)
    usernames: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    post_ids: list[list[int]] = field(default_factory=list)
    stances: list[list[float]] = field(default_factory=list)


def extract_activity(activity: RoundActivity, extractor: Extractor,
                     topics: TopicNames) -> list[Extraction]:
    """The extraction of every agent's text (pure: safe in a background thread)."""
    return extract(extractor, activity.texts, topics.known(),
                   authors=[f"@{u}" for u in activity.usernames])


def extract(extractor: Extractor, texts: list[str], known: dict[str, Any],
            authors: list[str] | None = None) -> list[Extraction]:
    """`extractor.extract`, held to its contract when it is a plug-in's: an error it
    raises names it, and it returns one Extraction per text."""
    what = f"extractor {type(extractor).__name__}"
    with calling(what, extractor):
        out = (extractor.extract(texts, known) if authors is None
               else extractor.extract(texts, known, authors=authors))
    if not from_shoal(extractor) and (not isinstance(out, list) or len(out) != len(texts)
                                      or not all(isinstance(e, Extraction) for e in out)):
        got = f"{len(out)} items" if isinstance(out, list) else type(out).__name__
        raise PluginError(f"the {what} returned {got} for {len(texts)} texts; it must "
                          "return a list of one Extraction per text")
    return out


def apply_activity(graph: KnowledgeGraph, activity: RoundActivity,
                   extractions: list[Extraction], topics: TopicNames) -> None:
    """Resolve one round's activity into the graph (in agent order)."""
    r, when = activity.round, activity.sim_time
    topic_entities = topics.entities(graph)
    for i, agent in enumerate(activity.agents):
        ids = activity.post_ids[i]
        source_id = "posts " + ",".join(map(str, ids))
        episode = graph.add_episode("activity", f"round {r}", activity.texts[i], round_=r,
                                    sim_time=when, agent=agent, post_ids=ids)
        handle = f"@{activity.usernames[i]}"
        me = resolve(graph, handle, "agent")
        for t, stance in enumerate(activity.stances[i]):
            if np.isnan(stance):
                continue
            predicate = ("supports" if stance >= UNDECIDED else "opposes" if
                         stance <= -UNDECIDED else "is undecided about")
            fact = f"{handle} {predicate} {topics.labels[t]} (stance {stance:+.2f})"
            rid = _add_once(graph, me, predicate, topic_entities[t], fact, "belief",
                            "post", source_id, episode, r, when)
            if rid is not None:
                _supersede_beliefs(graph, rid, me, topic_entities[t], episode, r, when)
        ex = extractions[i]
        _add_mentions(graph, ex)
        for f in ex.facts:
            if f.subject.type == "agent":  # the author's own position: a belief, above
                continue
            subject = resolve(graph, f.subject.name, f.subject.type)
            obj = resolve(graph, f.object.name, f.object.type)
            if subject != obj:
                _add_once(graph, subject, f.predicate, obj, f.text, "observation", "post",
                          source_id, episode, r, when)

"""Entity resolution: names that mean the same thing get one entity.

A name's key is its lower-cased words without punctuation, a leading article or a
possessive ("The Ministry of Finance's" → "ministry of finance"); a name written with its
acronym ("European Union (EU)") also answers to the acronym. A name whose key is known
resolves to that entity; otherwise it becomes a new one. Keys are deterministic, so the
same text always resolves the same way.
"""

from __future__ import annotations

import re

from shoal.memory.context import one_line
from shoal.memory.knowledge.model import KnowledgeGraph, key

_ACRONYM = re.compile(r"^(.*\S)\s*\(([A-Z][A-Za-z0-9&]{1,9})\)$")


def split_acronym(name: str) -> tuple[str, str | None]:
    """("European Union", "EU") for "European Union (EU)"; (name, None) otherwise."""
    m = _ACRONYM.match(name.strip())
    return (m.group(1), m.group(2)) if m else (name.strip(), None)


def resolve(graph: KnowledgeGraph, name: str, type_: str, summary: str = "") -> int:
    """The entity `name` denotes, created if it is new. A name is kept as one line of
    text (one broken over two lines, or one an LLM extractor returned with anything in
    it), so wherever an entity's name is shown it opens nothing."""
    full, acronym = split_acronym(one_line(name))
    keys = [key(full)] + ([key(acronym)] if acronym else [])
    for k in keys:
        if k in graph.by_key:
            entity = graph.by_key[k]
            for other in keys:
                graph.alias(other, entity)
            return entity
    aliases = [acronym] if acronym else []
    entity = graph.add_entity(keys[0], full, type_, summary, aliases)
    for other in keys[1:]:
        graph.alias(other, entity)
    return entity

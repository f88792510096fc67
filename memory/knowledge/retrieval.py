"""Retrieval: hybrid search over the graph's facts, honouring validity.

- **Keywords**: BM25 (k1 = 1.2, b = 0.75) over each relation's fact text and its
  endpoints' names, computed here (no extension to download). The index is incremental:
  the graph only grows, so each refresh indexes the new relations.
- **Embeddings** (optional): an `Embedder` (texts → unit vectors) adds `weight` × cosine
  similarity; none is required, and none is configured by default.
- **Graph neighbourhood**: the relations sharing an entity with the best hits join the
  results at half their neighbour's score.

Every hit is a `Hit` with provenance (kind, source type and id) and validity (valid from,
invalid at); only relations visible at `as_of` (`KnowledgeGraph.visible`) are returned.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Protocol

import numpy as np

from shoal.core.language import DEFAULT, templates
from shoal.memory.context import inline
from shoal.memory.knowledge.model import Hit, KnowledgeGraph

K1, B = 1.2, 0.75
HUB = 50  # an entity in more relations than this (a topic) does not expand the results
_WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset([
    "a", "an", "the", "and", "or", "but", "if", "of", "to", "in", "on", "at", "by", "for",
    "with", "from", "as", "is", "are", "was", "were", "be", "been", "being", "it", "its",
    "this", "that", "these", "those", "i", "we", "you", "he", "she", "they", "them", "his",
    "her", "our", "their", "my", "your", "not", "no", "do", "does", "did", "so", "than",
    "then", "too", "very", "can", "could", "would", "should", "will", "may", "might", "must",
    "about", "over", "under", "into", "out", "up", "down", "more", "most", "some", "any",
    "all", "each", "every", "which", "who", "whom", "what", "when", "where", "why", "how",
    "also", "just", "there", "here", "has", "have", "had"
])


def tokens(text: str) -> list[str]:
    """Lower-case words without stopwords."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


class Embedder(Protocol):
    """Optional dense retrieval: texts to unit-length vectors."""

    def embed(self, texts: list[str]) -> np.ndarray: ...


class FactIndex:
    """BM25 over a graph's relations (refreshed as the graph grows)."""

    def __init__(self, graph: KnowledgeGraph, embedder: Embedder | None = None,
                 weight: float = 0.5):
        self.graph = graph
        self.embedder, self.weight = embedder, weight
        self.postings: dict[str, list[tuple[int, int]]] = {}  # term -> (relation, tf)
        self.lengths: list[int] = []
        self._lengths = np.empty(0)  # the same, as an array (rebuilt on refresh)
        self.vectors: np.ndarray | None = None
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.adjacent: dict[int, list[int]] = {}  # entity -> relations touching it

    def refresh(self) -> None:
        """Index the relations added since the last refresh."""
        g = self.graph
        rel = g.rows["graph_relations"].columns
        names = g.column("graph_entities", "name")
        start = len(self.lengths)
        if start == g.n_relations:
            return
        for rid in range(start, g.n_relations):
            s, o = rel["subject"][rid], rel["object"][rid]
            words = tokens(f"{rel['fact'][rid]} {names[s]} {names[o]}")
            self.lengths.append(len(words))
            for term, tf in Counter(words).items():
                self.postings.setdefault(term, []).append((rid, tf))
                self._arrays.pop(term, None)
            self.adjacent.setdefault(s, []).append(rid)
            self.adjacent.setdefault(o, []).append(rid)
        self._lengths = np.asarray(self.lengths, np.float64)
        if self.embedder is not None:
            new = self.embedder.embed([rel["fact"][rid] for rid in
                                       range(start, g.n_relations)])
            self.vectors = new if self.vectors is None else np.vstack([self.vectors, new])

    def _posting(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        if term not in self._arrays:
            rows = self.postings.get(term, [])
            self._arrays[term] = (np.array([r for r, _ in rows], np.int64),
                                  np.array([tf for _, tf in rows], np.float64))
        return self._arrays[term]

    def scores(self, query: str) -> np.ndarray:
        """BM25 (plus the embedding term) of every relation for `query`."""
        self.refresh()
        n = len(self.lengths)
        out = np.zeros(n)
        if not n:
            return out
        lengths = self._lengths
        avg = max(lengths.mean(), 1e-9)
        for term in sorted(set(tokens(query))):  # a fixed order: float sums must not vary
            ids, tf = self._posting(term)
            if not len(ids):
                continue
            idf = math.log(1.0 + (n - len(ids) + 0.5) / (len(ids) + 0.5))
            norm = tf + K1 * (1.0 - B + B * lengths[ids] / avg)
            np.add.at(out, ids, idf * tf * (K1 + 1.0) / norm)
        if self.embedder is not None and self.vectors is not None:
            q = self.embedder.embed([query])[0]
            out += self.weight * (self.vectors @ q)
        return out

    def search(self, query: str, k: int = 5, as_of: int | None = None,
               expand: bool = True) -> list[Hit]:
        """The `k` best visible relations for `query` (ties: the older relation first),
        with their 1-hop neighbourhood at half score when `expand` (through entities in at
        most `HUB` relations: a hub such as a topic would bring in everything)."""
        score = self.scores(query)
        if not len(score):
            return []
        visible = self.graph.visible(as_of)
        score = np.where(visible, score, 0.0)
        if expand:
            rel = self.graph.rows["graph_relations"].columns
            best = np.nonzero(score > 0)[0]
            best = best[np.lexsort((best, -score[best]))][:k]
            extra = np.zeros_like(score)
            through: dict[int, float] = {}  # entity -> the best score that reaches it
            for rid in best.tolist():
                for ent in (rel["subject"][rid], rel["object"][rid]):
                    if len(self.adjacent.get(ent, ())) <= HUB:
                        through[ent] = max(through.get(ent, 0.0), 0.5 * float(score[rid]))
            for ent, value in through.items():
                others = np.asarray(self.adjacent[ent], np.int64)
                extra[others] = np.maximum(extra[others], value)
            score = np.where(visible, np.maximum(score, extra), 0.0)
        hits = np.nonzero(score > 0)[0]
        hits = hits[np.lexsort((hits, -score[hits]))][:k]
        return [self.graph.hit(int(r), float(score[r])) for r in hits]


def provenance(hit: Hit, language: str = DEFAULT) -> str:
    """Where a fact came from, in words (of `language`): a document span, or posts and the
    round. The source id names a document (a file, a preset's id): it is fenced like a
    profile field, one line that opens nothing."""
    t = templates(language)
    source = inline(hit.source_id)
    kind = t.get(f"knowledge.kinds.{hit.kind}", hit.kind)
    if hit.source_type == "document":
        return t("knowledge.from_document", kind=kind, source=source)
    return t("knowledge.from_run", kind=kind, source=source, round=hit.valid_from)


SEARCH_COLUMNS = ["score", "relation_id", "subject", "predicate", "object", "fact", "kind",
                  "source_id", "valid_from"]


def search_tables(tables: dict, query: str, k: int, as_of: int | None = None):
    """BM25 search over a graph given as its tables (Arrow, by name), rebuilt in memory
    with the same validity rule as every reader: a DataFrame of SEARCH_COLUMNS."""
    import pandas as pd

    hits = FactIndex(KnowledgeGraph.from_tables(tables)).search(query, k, as_of)
    return pd.DataFrame([{"score": round(h.score, 3), "relation_id": h.relation_id,
                          "subject": h.subject, "predicate": h.predicate, "object": h.object,
                          "fact": h.fact, "kind": h.kind, "source_id": h.source_id,
                          "valid_from": h.valid_from} for h in hits], columns=SEARCH_COLUMNS)

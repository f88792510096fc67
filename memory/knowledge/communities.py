"""Communities of the entity graph: Louvain clustering (networkx's implementation, seeded)
of the entities joined by visible relations, and an extractive summary per community:
its most connected entities and its best-attested facts.

A rebuild makes a new **generation**: every community and membership row carries it, the
store writes a generation in one transaction, and readers read the newest complete one, so
nobody ever sees half a set; older generations stay (membership history).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from shoal.memory.knowledge.model import KnowledgeGraph

COMMUNITY_COLUMNS = {"generation": pa.int32(), "community": pa.int32(),
                     "size": pa.int32(), "summary": pa.string(),
                     "top_entities": pa.list_(pa.string())}
MEMBER_COLUMNS = {"generation": pa.int32(), "community": pa.int32(), "entity_id": pa.int64()}


@dataclass
class Communities:
    """One generation: communities (largest first) and their members."""

    generation: int
    round: int
    members: list[list[int]]  # entity ids per community, ascending
    summaries: list[str]
    top: list[list[str]]

    def tables(self) -> dict[str, pa.Table]:
        """The `graph_communities` and `graph_community_members` rows."""
        n = len(self.members)
        communities = pa.table({
            "generation": pa.array([self.generation] * n, pa.int32()),
            "community": pa.array(range(n), pa.int32()),
            "size": pa.array([len(m) for m in self.members], pa.int32()),
            "summary": pa.array(self.summaries, pa.string()),
            "top_entities": pa.array(self.top, pa.list_(pa.string()))})
        pairs = [(c, e) for c, m in enumerate(self.members) for e in m]
        members = pa.table({
            "generation": pa.array([self.generation] * len(pairs), pa.int32()),
            "community": pa.array([c for c, _ in pairs], pa.int32()),
            "entity_id": pa.array([e for _, e in pairs], pa.int64())})
        return {"graph_communities": communities, "graph_community_members": members}


def detect(graph: KnowledgeGraph, generation: int, round_: int, seed: int = 0,
           as_of: int | None = None, top: int = 5) -> Communities:
    """Cluster the entities linked by relations visible at `as_of`."""
    import networkx as nx  # here: importing it costs a quarter second every process pays
    rel = graph.rows["graph_relations"].columns
    names = graph.column("graph_entities", "name")
    visible = np.nonzero(graph.visible(as_of))[0].tolist()
    g = nx.Graph()
    weight: Counter = Counter()
    for rid in visible:
        s, o = rel["subject"][rid], rel["object"][rid]
        if s != o:
            weight[(min(s, o), max(s, o))] += 1
    g.add_nodes_from(sorted({e for pair in weight for e in pair}))
    g.add_weighted_edges_from((s, o, w) for (s, o), w in sorted(weight.items()))
    groups = nx.community.louvain_communities(g, weight="weight", seed=seed) if len(g) else []
    groups = sorted((sorted(c) for c in groups), key=lambda c: (-len(c), c[0]))
    # each community's facts (relations with both ends inside), in one pass over the
    # relations, in their order (a pass per community was quadratic in a large graph)
    community = {e: c for c, members in enumerate(groups) for e in members}
    inside: list[list[str]] = [[] for _ in groups]
    for rid in visible:
        c = community.get(rel["subject"][rid])
        if c is not None and community.get(rel["object"][rid]) == c:
            inside[c].append(rel["fact"][rid])
    summaries, tops = [], []
    for members, found in zip(groups, inside, strict=True):
        degree = Counter({e: g.degree(e, weight="weight") for e in members})
        best = [names[e] for e, _ in sorted(degree.items(), key=lambda x: (-x[1], x[0]))[:top]]
        facts = [f for f, _ in Counter(found).most_common(2)]
        summaries.append(f"{len(members)} entities around {', '.join(best)}."
                         + (" " + " ".join(facts) if facts else ""))
        tops.append(best)
    return Communities(generation, round_, groups, summaries, tops)

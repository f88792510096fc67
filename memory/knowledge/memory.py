"""A run's graph memory: the knowledge graph, its ingestion of the run's activity, its
fact index, and its community generations (world state; docs/graph.md).

Activity ingestion overlaps the round: the driver submits round r's posts once they are
applied, extraction (pure text work, or LLM calls) runs on a background thread while
trust, beliefs and round memory are updated, and the result is resolved into the graph
before round r's tables are written. Nothing is pending between rounds, so a checkpoint is
the graph's journal alone, and a resume or a fork continues exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa

from shoal.core.state import State
from shoal.memory.knowledge.communities import Communities, detect
from shoal.memory.knowledge.extract import Extraction, Extractor
from shoal.memory.knowledge.ingest import (
    RoundActivity,
    TopicNames,
    apply_activity,
    extract_activity,
)
from shoal.memory.knowledge.model import KnowledgeGraph
from shoal.memory.knowledge.retrieval import FactIndex


class GraphMemory:
    """The graph of one run and what keeps it current."""

    def __init__(self, topics: TopicNames, extractor: Extractor, seed: int = 0,
                 graph: KnowledgeGraph | None = None):
        self.graph = graph if graph is not None else KnowledgeGraph()
        self.topics = topics
        self.extractor = extractor
        self.seed = seed
        self.index = FactIndex(self.graph)
        self.generation = 0  # communities built so far
        self._community_rows: list[dict[str, pa.Table]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._job: tuple[RoundActivity, Future[list[Extraction]]] | None = None

    def submit(self, activity: RoundActivity) -> None:
        """Start extracting a round's activity in the background."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="shoal-graph")
        if hasattr(self.extractor, "round"):
            self.extractor.round = activity.round
        self._job = (activity, self._pool.submit(extract_activity, activity, self.extractor,
                                                 self.topics))

    def join(self) -> None:
        """Resolve the submitted round into the graph (waits for its extraction)."""
        if self._job is None:
            return
        activity, future = self._job
        self._job = None
        apply_activity(self.graph, activity, future.result(), self.topics)

    def rebuild_communities(self, round_: int) -> Communities:
        """A new generation of communities (its rows go out with the round's tables)."""
        self.generation += 1
        found = detect(self.graph, self.generation, round_, seed=self.seed)
        self._community_rows.append(found.tables())
        return found

    def drain_tables(self, round_: int) -> dict[str, pa.Table]:
        """The rows added since the last call, each stamped with the round whose
        transaction writes it."""
        out = self.graph.drain_tables()
        for rows in self._community_rows:
            for name, table in rows.items():
                out[name] = pa.concat_tables([out[name], table]) if name in out else table
        self._community_rows = []
        return {name: stamp(table, round_) for name, table in out.items()}

    def calls(self, round_: int) -> list[dict]:
        """`llm_calls` rows of the extractor since the last call (LLM extractor only)."""
        log = getattr(self.extractor, "calls", None)
        return log.drain(round_) if log is not None else []

    def close(self) -> None:
        """Stop the background thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        close = getattr(self.extractor, "close", None)
        if close is not None:
            close()

    # ---------------------------------------------------------------- state

    def take_changes(self) -> State:
        """The graph's new rows since the previous checkpoint (the generation count is
        state: `generation`)."""
        return self.graph.take_changes()

    def replay(self, changes: Sequence[State]) -> None:
        """Rebuild the graph from its checkpoint log."""
        self.graph.replay(changes)
        self.index = FactIndex(self.graph)


def stamp(table: pa.Table, round_: int) -> pa.Table:
    """The table with a leading `round` column: the round whose transaction writes it
    (what a fork's history is cut by)."""
    return table.add_column(0, "round", pa.array([round_] * len(table), pa.int32()))

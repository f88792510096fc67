"""The temporal knowledge graph: episodes, entities, relations, withdrawals (docs/graph.md).

- An **episode** is admitted text kept verbatim, with where it came from: a document and
  the character span, or a round, an agent and the post ids.
- An **entity** has a canonical name, a type, a summary and aliases (entity resolution
  folds names that mean the same thing, `memory/knowledge/resolve.py`).
- A **relation** is subject –predicate→ object with the fact as text, its kind (`document`:
  read from a document; `observation`: seen in the simulation's activity; `belief`: an
  agent's own expressed position), its source (type and id) and episode, and when it
  became valid (round and simulated time).
- A **withdrawal** ends a relation's validity: at a round and time, by an episode, with a
  reason (a newer relation on the same endpoints contradicted it). Nothing is deleted:
  the relation stays, and `visible(as_of)` — the one rule every reader goes through —
  shows it only for rounds before its withdrawal.

Everything is append-only, so the graph is journaled like the post store: a checkpoint
keeps the rows a round added, a resume replays them, and a fork keeps its parent's rows
up to the fork round. The same rows are the run's `graph_*` tables, each row stamped with
the round whose transaction wrote it (sim/store/knowledge.py reads them with the same rule in
SQL).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from shoal.core.state import State

KINDS = ("document", "observation", "belief")
_NEVER = np.iinfo(np.int64).max  # the withdrawal round of a relation never withdrawn
_ARTICLE = re.compile(r"^(the|a|an)\s+")
_POSSESSIVE = re.compile(r"['’]s\b")
_NON_WORD = re.compile(r"[^\w\s-]")


def key(name: str) -> str:
    """The resolution key of a name: lower-cased words without punctuation, a leading
    article or a possessive ("The Ministry of Finance's" → "ministry of finance")."""
    text = _POSSESSIVE.sub("", name.strip().lower())
    text = " ".join(_NON_WORD.sub(" ", text).split())
    return _ARTICLE.sub("", text)
# Predicates with a polarity: a relation of one sign contradicts an older one of the other
# sign on the same endpoints (anything else on those endpoints coexists).
POLARITY = {"supports": 1, "opposes": -1}

EPISODE_COLUMNS = {"episode_id": pa.int64(), "kind": pa.string(), "source": pa.string(),
                   "span_start": pa.int64(), "span_end": pa.int64(), "at_round": pa.int32(),
                   "sim_time": pa.string(), "agent": pa.int32(),
                   "post_ids": pa.list_(pa.int64()), "text": pa.string()}
ENTITY_COLUMNS = {"entity_id": pa.int64(), "name": pa.string(), "type": pa.string(),
                  "summary": pa.string(), "aliases": pa.list_(pa.string())}
RELATION_COLUMNS = {"relation_id": pa.int64(), "subject": pa.int64(), "predicate": pa.string(),
                    "object": pa.int64(), "fact": pa.string(), "kind": pa.string(),
                    "source_type": pa.string(), "source_id": pa.string(),
                    "episode_id": pa.int64(), "valid_from": pa.int32(),
                    "valid_from_time": pa.string()}
WITHDRAWAL_COLUMNS = {"relation_id": pa.int64(), "invalid_at": pa.int32(),
                      "invalid_at_time": pa.string(), "invalidated_by": pa.int64(),
                      "reason": pa.string()}
ALIAS_COLUMNS = {"key": pa.string(), "entity_id": pa.int64()}
TABLES = {"graph_episodes": EPISODE_COLUMNS, "graph_entities": ENTITY_COLUMNS,
          "graph_relations": RELATION_COLUMNS, "graph_withdrawals": WITHDRAWAL_COLUMNS,
          "graph_aliases": ALIAS_COLUMNS}


@dataclass
class Hit:
    """A relation as readers see it: the fact, its endpoints, provenance and validity."""

    relation_id: int
    subject: str
    predicate: str
    object: str
    fact: str
    kind: str
    source_type: str
    source_id: str
    valid_from: int
    invalid_at: int | None
    score: float = 0.0


@dataclass
class _Rows:
    """Append-only columns of one table, with the index up to which they were logged."""

    columns: dict[str, list] = field(default_factory=dict)
    logged: int = 0  # rows handed to the round's tables already
    taken: int = 0  # rows handed to checkpoints already

    def append(self, row: dict) -> None:
        for k, v in row.items():
            self.columns.setdefault(k, []).append(v)

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))

    def table(self, schema: dict, start: int, stop: int | None = None) -> pa.Table:
        return pa.table({k: pa.array(self.columns.get(k, [])[start:stop], t)
                         for k, t in schema.items()})


class KnowledgeGraph:
    """The graph of one run (or one scenario): append-only tables plus the indexes readers
    need (entity by resolved key, relations by endpoints, withdrawals by relation)."""

    def __init__(self) -> None:
        self.rows = {name: _Rows() for name in TABLES}
        self.withdrawn: dict[int, int] = {}  # relation -> round of its withdrawal
        self.by_key: dict[str, int] = {}  # resolution key -> entity id
        # (subject, object) -> its relations not withdrawn: what a new relation on the
        # pair is checked against, however many it had (a flip-flopping pair stays short)
        self.by_pair: dict[tuple[int, int], list[int]] = {}
        self.version = 0  # bumped on every change (readers' caches follow it)
        self._cache_version = -1
        self._valid_from = self._ends = np.empty(0, np.int64)

    # ---------------------------------------------------------------- sizes

    @property
    def n_entities(self) -> int:
        """Entities so far."""
        return len(self.rows["graph_entities"])

    @property
    def n_relations(self) -> int:
        """Relations so far (withdrawn ones included)."""
        return len(self.rows["graph_relations"])

    @property
    def n_episodes(self) -> int:
        """Episodes so far."""
        return len(self.rows["graph_episodes"])

    def column(self, table: str, name: str) -> list:
        """A column of a table (do not modify)."""
        return self.rows[table].columns.get(name, [])

    # ---------------------------------------------------------------- writing

    def add_episode(self, kind: str, source: str, text: str, round_: int = 0,
                    sim_time: str = "", span: tuple[int, int] = (-1, -1), agent: int = -1,
                    post_ids: Sequence[int] = ()) -> int:
        """Admit a text; its id."""
        eid = self.n_episodes
        self.rows["graph_episodes"].append({
            "episode_id": eid, "kind": kind, "source": source, "span_start": span[0],
            "span_end": span[1], "at_round": round_, "sim_time": sim_time, "agent": agent,
            "post_ids": list(post_ids), "text": text})
        self.version += 1
        return eid

    def add_entity(self, key: str, name: str, type_: str, summary: str = "",
                   aliases: Sequence[str] = ()) -> int:
        """A new entity under resolution key `key` (the caller resolved it first)."""
        eid = self.n_entities
        self.rows["graph_entities"].append({"entity_id": eid, "name": name, "type": type_,
                                            "summary": summary, "aliases": list(aliases)})
        self.alias(key, eid)
        self.version += 1
        return eid

    def alias(self, key: str, entity: int) -> None:
        """A resolution key for an entity (a row of `graph_aliases`; the first entity a
        key named keeps it)."""
        if key not in self.by_key:
            self.by_key[key] = entity
            self.rows["graph_aliases"].append({"key": key, "entity_id": entity})

    def add_relation(self, subject: int, predicate: str, obj: int, fact: str, kind: str,
                     source_type: str, source_id: str, episode: int, round_: int = 0,
                     sim_time: str = "") -> tuple[int, list[int]]:
        """Add a relation; an older visible relation on the same endpoints with the
        opposite polarity is withdrawn by it. Returns its id and the ids it withdrew."""
        if kind not in KINDS:
            raise ValueError(f"relation kind {kind!r}; kinds: {KINDS}")
        rid = self.n_relations
        withdrawn = []
        sign = POLARITY.get(predicate)
        if sign is not None:
            for old in list(self.by_pair.get((subject, obj), [])):
                old_sign = POLARITY.get(self.column("graph_relations", "predicate")[old])
                if old_sign == -sign:
                    self.withdraw(old, round_, sim_time, episode,
                                  f"contradicted by relation {rid} ({predicate}): {fact}")
                    withdrawn.append(old)
        self.rows["graph_relations"].append({
            "relation_id": rid, "subject": subject, "predicate": predicate, "object": obj,
            "fact": fact, "kind": kind, "source_type": source_type, "source_id": source_id,
            "episode_id": episode, "valid_from": round_, "valid_from_time": sim_time})
        self.by_pair.setdefault((subject, obj), []).append(rid)
        self.version += 1
        return rid, withdrawn

    def withdraw(self, relation: int, round_: int, sim_time: str, episode: int,
                 reason: str) -> None:
        """End a relation's validity (the relation itself stays)."""
        if relation in self.withdrawn:
            return
        self.rows["graph_withdrawals"].append({
            "relation_id": relation, "invalid_at": round_, "invalid_at_time": sim_time,
            "invalidated_by": episode, "reason": reason})
        self.withdrawn[relation] = round_
        rel = self.rows["graph_relations"].columns
        pair = self.by_pair.get((rel["subject"][relation], rel["object"][relation]), [])
        if relation in pair:
            pair.remove(relation)
        self.version += 1

    # ---------------------------------------------------------------- reading

    def visible(self, as_of: int | None = None) -> np.ndarray:
        """The one rule of validity: a mask over relations, true for those valid at the end
        of round `as_of` (default: now) — added by then and not withdrawn by then."""
        valid_from, ends = self._validity()
        if as_of is None:
            return ends == _NEVER
        return (valid_from <= as_of) & (ends > as_of)

    def _validity(self) -> tuple[np.ndarray, np.ndarray]:
        """Per relation: the round it became valid and the round it was withdrawn (never:
        a large number); cached until the graph changes."""
        if self._cache_version != self.version:
            n = self.n_relations
            self._valid_from = np.asarray(self.column("graph_relations", "valid_from"),
                                          np.int64)
            self._ends = np.full(n, _NEVER, np.int64)
            if self.withdrawn:
                ids = np.fromiter(self.withdrawn.keys(), np.int64, len(self.withdrawn))
                self._ends[ids] = np.fromiter(self.withdrawn.values(), np.int64, len(ids))
            self._cache_version = self.version
        return self._valid_from, self._ends

    def hit(self, rid: int, score: float = 0.0) -> Hit:
        """Relation `rid` with its endpoints' names, provenance and validity."""
        col = self.rows["graph_relations"].columns
        names = self.column("graph_entities", "name")
        return Hit(rid, names[col["subject"][rid]], col["predicate"][rid],
                   names[col["object"][rid]], col["fact"][rid], col["kind"][rid],
                   col["source_type"][rid], col["source_id"][rid], col["valid_from"][rid],
                   self.withdrawn.get(rid), score)

    @classmethod
    def from_tables(cls, tables) -> KnowledgeGraph:
        """A graph holding the rows of `tables` (by name; Arrow tables, as a reader or a
        file gives them)."""
        graph = cls()
        graph.replay([State(tables=dict(tables))])
        return graph

    def mark_new(self) -> None:
        """Treat every row as added since the last log and checkpoint (a graph read from a
        scenario becomes part of a run's round 0)."""
        for rows in self.rows.values():
            rows.logged = rows.taken = 0

    # ---------------------------------------------------------------- tables

    def drain_tables(self) -> dict[str, pa.Table]:
        """The rows added since the last call, as the run's `graph_*` tables."""
        out = {}
        for name, schema in TABLES.items():
            rows = self.rows[name]
            out[name] = rows.table(schema, rows.logged)
            rows.logged = len(rows)
        return out

    def tables(self) -> dict[str, pa.Table]:
        """Every row, as the `graph_*` tables."""
        return {name: self.rows[name].table(schema, 0) for name, schema in TABLES.items()}

    # ---------------------------------------------------------------- state

    def get_state(self) -> State:
        """Everything (copies), as Arrow tables."""
        return State(tables=self.tables())

    def set_state(self, state: State) -> None:
        """Become the graph of `state`."""
        self.__init__()
        self.replay([state])

    def take_changes(self) -> State:
        """The rows added since the previous call."""
        tables = {}
        for name, schema in TABLES.items():
            rows = self.rows[name]
            tables[name] = rows.table(schema, rows.taken)
            rows.taken = len(rows)
        return State(tables=tables)

    def replay(self, changes: Sequence[State]) -> None:
        """Rebuild from logged changes, in order (this graph must be empty)."""
        for change in changes:
            for name in TABLES:
                table = change.tables.get(name)
                if table is None:
                    continue
                columns = [c for c in TABLES[name] if c in table.column_names]
                for row in table.select(columns).to_pylist():  # not a file's `round` stamp
                    self.rows[name].append(row)
        a = self.rows["graph_aliases"].columns
        self.by_key = dict(zip(a.get("key", []), a.get("entity_id", []), strict=True))
        w = self.rows["graph_withdrawals"].columns
        self.withdrawn = dict(zip(w.get("relation_id", []), w.get("invalid_at", []),
                                  strict=True))
        rel = self.rows["graph_relations"].columns
        self.by_pair = {}
        for rid in range(self.n_relations):
            if rid not in self.withdrawn:
                self.by_pair.setdefault((rel["subject"][rid], rel["object"][rid]),
                                        []).append(rid)
        for rows in self.rows.values():
            rows.logged = rows.taken = len(rows)
        self.version += 1

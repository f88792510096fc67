"""The graph memory's tables on disk, and the one SQL path that reads them.

A run keeps its graph in its own trajectory file (`graph_*` tables, one transaction per
round like every table, each row stamped with that round in `round`, read through the
run's lineage so a fork sees its parent's graph up to the fork round). A scenario keeps
the graph of its documents in a folder of Parquet files (`graph/<table>.parquet`,
written by DuckDB: the same inputs give the same bytes), which DuckDB reads in place.

Every SQL reader — `shoal graph`, the notebook API, the report — goes through
`GraphReader`, whose relations query applies the validity rule: a relation is visible at
round R if it was added by R and not withdrawn by R (`invalid_at` NULL or after R); without
`as_of`, the withdrawn ones are left out. Only `include_withdrawn=True` shows them, with
their `invalid_at`, `invalidated_by` and `reason`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from shoal.core.errors import InputError
from shoal.store.schema import TEXT, typed_frame
from shoal.store.tables import TABLES, TableSpec


def _declare(name: str, columns: str, doc: str, **how: Any) -> TableSpec:
    return TABLES.declare(TableSpec(name, columns, "knowledge", doc, **how))


# Every row is stamped in `round` with the round whose transaction wrote it: that is what
# a resume cuts and a fork inherits by. Validity (what as-of reads filter on) is its own
# column where it differs: when a relation became valid, when it was withdrawn.
GRAPH = {s.name: s for s in (
    _declare("graph_episodes", "round INTEGER, episode_id BIGINT, kind VARCHAR, "
             "source VARCHAR, span_start BIGINT, span_end BIGINT, at_round INTEGER, "
             "sim_time VARCHAR, agent INTEGER, post_ids BIGINT[], text VARCHAR",
             "The texts the graph was read from, verbatim, with their sources."),
    _declare("graph_entities", "round INTEGER, entity_id BIGINT, name VARCHAR, type VARCHAR, "
             "summary VARCHAR, aliases VARCHAR[]", "The graph's entities."),
    _declare("graph_relations", "round INTEGER, relation_id BIGINT, subject BIGINT, "
             "predicate VARCHAR, object BIGINT, fact VARCHAR, kind VARCHAR, "
             "source_type VARCHAR, source_id VARCHAR, episode_id BIGINT, valid_from INTEGER, "
             "valid_from_time VARCHAR", "The graph's relations, with provenance.",
             as_of="valid_from"),
    _declare("graph_withdrawals", "round INTEGER, relation_id BIGINT, invalid_at INTEGER, "
             "invalid_at_time VARCHAR, invalidated_by BIGINT, reason VARCHAR",
             "When and why a relation stopped being valid.", as_of="invalid_at"),
    _declare("graph_aliases", "round INTEGER, key VARCHAR, entity_id BIGINT",
             "The resolution key of every name an entity was met under."),
    _declare("graph_communities", "round INTEGER, generation INTEGER, community INTEGER, "
             "size INTEGER, summary VARCHAR, top_entities VARCHAR[]",
             "Communities of entities, by generation."),
    _declare("graph_community_members", "round INTEGER, generation INTEGER, "
             "community INTEGER, entity_id BIGINT", "Which entities each community holds."),
)}
GRAPH_TABLES = tuple(GRAPH)
# A relation's withdrawal as read (`relations_sql`, a LEFT JOIN): NULL unless it was
# withdrawn, so DuckDB's dtype would depend on the rows (a nullable integer when some are
# NULL, int32 when none are or there are no rows; text, or object when all are NULL).
_WITHDRAWAL = {"invalid_at": "Int32", "invalid_at_time": TEXT, "invalidated_by": "Int64",
               "reason": TEXT}
DDL = "".join(s.ddl() for s in GRAPH.values())
SCENARIO_DIR = "graph"
_REPAIR = "run `shoal init` again or restore it"


def _reason(exc: duckdb.Error, path: Path) -> str:
    """DuckDB's message, on one line, without its error class or the file's name (the
    message that quotes it names it already)."""
    text = " ".join((str(exc).splitlines() or [""])[0].split())  # (not DuckDB's "LINE 1:")
    text = re.sub(r"^[A-Za-z ]*Error: ", "", text)
    return text.replace(f"File '{path}' ", "").replace(f" '{path}'", "")[:300]


def read_scenario_file(path: str | Path) -> pa.Table:
    """One Parquet file of a scenario's `graph/`, whole; InputError naming the file when it
    cannot be read (truncated, overwritten, not Parquet at all)."""
    path = Path(path)
    con = duckdb.connect()
    try:  # (the path is a parameter: a folder's name is data)
        return con.sql("SELECT * FROM read_parquet($path)",
                       params={"path": str(path)}).to_arrow_table()
    except duckdb.Error as exc:
        raise InputError(f"{path}: damaged or not a Parquet file ({_reason(exc, path)}); "
                         f"{_REPAIR}") from None
    finally:
        con.close()


def relations_sql(as_of: int | None = None, include_withdrawn: bool = False) -> str:
    """The one validity rule, in SQL: the relations visible at the end of round `as_of`
    (default: now), with their endpoints' names; a withdrawal shows only if it had
    happened by then (as of an earlier round, a later withdrawal has not happened yet)."""
    valid, withdrawn = GRAPH["graph_relations"].as_of, GRAPH["graph_withdrawals"].as_of
    added = "" if as_of is None else f"r.{valid} <= {int(as_of)}"
    by_then = "" if as_of is None else f" AND w.{withdrawn} <= {int(as_of)}"
    where = [c for c in (added, "" if include_withdrawn else "w.invalid_at IS NULL") if c]
    return f"""
        SELECT r.relation_id, s.name AS subject, r.predicate, o.name AS object, r.fact,
               r.kind, r.source_type, r.source_id, r.episode_id, r.valid_from,
               r.valid_from_time, w.invalid_at, w.invalid_at_time, w.invalidated_by,
               w.reason, r.subject AS subject_id, r.object AS object_id, r.round
        FROM graph_relations r
        JOIN graph_entities s ON s.entity_id = r.subject
        JOIN graph_entities o ON o.entity_id = r.object
        LEFT JOIN graph_withdrawals w ON w.relation_id = r.relation_id{by_then}
        {'WHERE ' + ' AND '.join(where) if where else ''}
        ORDER BY r.relation_id"""


class GraphReader:
    """SQL over a graph's tables (DataFrames or Arrow tables by name; missing ones are
    empty)."""

    def __init__(self, tables: Mapping[str, pd.DataFrame | pa.Table]):
        self.con = duckdb.connect()
        self.con.execute(DDL)
        for name in GRAPH_TABLES:
            table = tables.get(name)
            if table is not None and len(table):
                self._insert(name, table)

    def _insert(self, name: str, table: pd.DataFrame | pa.Table) -> None:
        self.con.register(f"_{name}", table)
        try:
            self.con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM _{name}")
        finally:
            self.con.unregister(f"_{name}")

    @classmethod
    def of_scenario(cls, folder: str | Path) -> GraphReader:
        """The graph of a scenario folder (its `graph/` Parquet files). InputError naming
        the file when one is missing, damaged or not the table its name says."""
        root = Path(folder) / SCENARIO_DIR
        if not root.exists():  # (a write killed between its renames)
            with suppress(OSError):  # (a folder this process may not change: read on)
                settle_scenario_graph(folder)
        reader = cls({})
        for name in GRAPH_TABLES:
            # `shoal init` and `shoal graph add` write every table, empty ones included:
            # a missing file is a lost one, and reading on would rewrite the graph without it.
            path = root / f"{name}.parquet"
            if not path.is_file():
                raise InputError(f"{path}: missing from the scenario's graph (it has one "
                                 f"file per table); {_REPAIR}")
            table = read_scenario_file(path)
            expected = [c for c, *_ in reader.con.sql(f"DESCRIBE {name}").fetchall()]
            absent = [c for c in expected if c not in table.column_names]
            if absent:
                raise InputError(f"{path}: not a {name} table (no column "
                                 f"{', '.join(absent)}); {_REPAIR}")
            try:
                reader._insert(name, table)
            except duckdb.Error as exc:  # a column of another type, or one it never had
                raise InputError(f"{path}: not a {name} table ({_reason(exc, path)}); "
                                 f"{_REPAIR}") from None
        return reader

    def _frame(self, sql: str) -> pd.DataFrame:
        """The rows of `sql`, of the same dtypes however many there are: text columns the
        text dtype also without rows, and a relation's withdrawal columns (NULL unless it
        was withdrawn) theirs, also when every row, or none, is NULL."""
        df = typed_frame(self.con.sql(sql))
        return df.astype({c: t for c, t in _WITHDRAWAL.items() if c in df.columns})

    def arrow(self, name: str) -> pa.Table:
        """One of the graph tables, whole."""
        return self.con.sql(f"SELECT * FROM {name}").to_arrow_table()

    def relations(self, as_of: int | None = None, include_withdrawn: bool = False
                  ) -> pd.DataFrame:
        """Relations as visible at `as_of` (see `relations_sql`)."""
        return self._frame(relations_sql(as_of, include_withdrawn))

    def entities(self, as_of: int | None = None) -> pd.DataFrame:
        """Entities (those that existed by `as_of`), with how many visible relations each
        takes part in."""
        cond = "" if as_of is None else f"WHERE e.round <= {int(as_of)}"
        return self._frame(f"""
            WITH v AS ({relations_sql(as_of)})
            SELECT e.*, count(v.relation_id) AS relations
            FROM graph_entities e
            LEFT JOIN v ON e.entity_id IN (v.subject_id, v.object_id)
            {cond} GROUP BY ALL ORDER BY e.entity_id""")

    def episodes(self, as_of: int | None = None) -> pd.DataFrame:
        """Every episode admitted by the end of round `as_of` (default: all), verbatim."""
        cond = "" if as_of is None else f"WHERE round <= {int(as_of)}"
        return self._frame(f"SELECT * FROM graph_episodes {cond} ORDER BY episode_id")

    def neighbourhood(self, entity: str, as_of: int | None = None) -> pd.DataFrame:
        """Visible relations with `entity` (a name, case-insensitive) at either end."""
        name = entity.replace("'", "''").lower()
        return self._frame(f"""
            SELECT * FROM ({relations_sql(as_of)})
            WHERE lower(subject) = '{name}' OR lower(object) = '{name}'""")

    def history(self, relation_id: int) -> pd.DataFrame:
        """One relation with its withdrawal, and the relations on the same endpoints."""
        return self._frame(f"""
            SELECT v.* FROM ({relations_sql(include_withdrawn=True)}) v
            JOIN graph_relations r ON r.subject = v.subject_id AND r.object = v.object_id
            WHERE r.relation_id = {int(relation_id)} ORDER BY v.relation_id""")

    @staticmethod
    def _generation(generation: int | None, as_of: int | None) -> str:
        """SQL for a generation of communities: the one given, else the newest built by
        the end of round `as_of` (default: the newest of all)."""
        if generation is not None:
            return str(int(generation))
        cond = "" if as_of is None else f" WHERE round <= {int(as_of)}"
        return f"(SELECT max(generation) FROM graph_communities{cond})"

    def communities(self, generation: int | None = None, as_of: int | None = None
                    ) -> pd.DataFrame:
        """The communities of one generation (default: the newest, or the newest built by
        the end of round `as_of`)."""
        gen = self._generation(generation, as_of)
        return self._frame(f"SELECT * FROM graph_communities WHERE generation = {gen} "
                           "ORDER BY community")

    def members(self, generation: int | None = None, as_of: int | None = None
                ) -> pd.DataFrame:
        """Entity membership of one generation's communities (default as `communities`)."""
        gen = self._generation(generation, as_of)
        return self._frame(f"""
            SELECT m.generation, m.community, m.entity_id, e.name, e.type
            FROM graph_community_members m JOIN graph_entities e USING (entity_id)
            WHERE m.generation = {gen} ORDER BY m.community, m.entity_id""")


def write_scenario_graph(folder: str | Path, tables: Mapping[str, pa.Table]) -> Path:
    """Write a scenario's graph as Parquet (same rows, same bytes), whole or not at all:
    the files are written into `graph.next/`, which then takes the place of `graph/` by
    renames (a kill leaves the old graph or the new one, never some tables of each; the
    next write or read puts things right, `settle_scenario_graph`). Other files of the
    old `graph/` (the extraction's LLM calls) are carried over. Returns the folder."""
    folder = Path(folder)
    root, staging, old = _graph_dirs(folder)
    settle_scenario_graph(folder)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    con = duckdb.connect()
    con.execute(DDL)
    for name in GRAPH_TABLES:
        table = tables.get(name)
        if table is not None and len(table):
            con.register("_t", table)
            con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM _t")
            con.unregister("_t")
        order = {"graph_communities": "generation, community",
                 "graph_community_members": "generation, community, entity_id",
                 "graph_withdrawals": "relation_id",
                 "graph_aliases": "entity_id, key"}.get(name, "1")
        con.execute(f"COPY (SELECT * FROM {name} ORDER BY {order}) TO $path "
                    "(FORMAT parquet)", {"path": str(staging / f"{name}.parquet")})
    con.close()
    if root.is_dir():
        for path in root.iterdir():
            if path.is_file() and not (staging / path.name).exists():
                shutil.copy2(path, staging / path.name)
        os.replace(root, old)
    os.replace(staging, root)
    shutil.rmtree(old, ignore_errors=True)
    return root


def _graph_dirs(folder: Path) -> tuple[Path, Path, Path]:
    """A scenario's `graph/`, the `graph.next/` a write fills, the `graph.old/` it sets
    aside while the new one takes its place."""
    root = folder / SCENARIO_DIR
    return root, root.with_name(f"{SCENARIO_DIR}.next"), root.with_name(f"{SCENARIO_DIR}.old")


def settle_scenario_graph(folder: str | Path) -> None:
    """Finish or undo a write of a scenario's graph that a kill stopped: between its two
    renames (no `graph/`) the new graph, whole, takes its place; a `graph.next/` beside
    a `graph/` was cut short and goes; so does a `graph.old/` left behind."""
    root, staging, old = _graph_dirs(Path(folder))
    if not root.exists() and old.is_dir():
        os.replace(staging if staging.is_dir() else old, root)
    shutil.rmtree(staging, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)

"""The table registry: every table of a trajectory file, declared once (docs/store.md).

A declaration (`TableSpec`) says what a table holds and how the rest of Shoal treats it:
its columns, the component that writes it, the column that ties a row to a round (or to a
post id), what a fork reads of it, which columns differ between two runs of one config,
the order rows come back in. Everything else derives from it: creating the schema,
cutting a run back to its last checkpoint on resume, what a fork copies and inherits, the
readers' lineage filters, the live mirror's schema, comparisons.

Shoal's own tables are declared beside the code that owns them (`sim/store/schema.py`,
`sim/store/knowledge.py`, `sim/store/traces.py`, `sim/market/tables.py`); a plug-in declares
its own the same way, from the module its entry point loads:

    from shoal.store.tables import TABLES, TableSpec
    TABLES.declare(TableSpec("toy_tally", "round INTEGER, agents INTEGER", owner="toy"))

Each declaration is also written into the trajectory file, as its table's comment, so a
file describes itself: a reader (a notebook, `shoal compare`) treats every table of a run
correctly without importing the engine or the plug-in that wrote it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Literal

import duckdb

from shoal.core.errors import InputError

Lineage = Literal["inherit", "own", "none"]
# In a declaration's columns: one `on_<platform> BOOLEAN` column per platform of the run.
PER_PLATFORM = "{on_<platform>}"


@dataclass(frozen=True)
class TableSpec:
    """One table. `columns`: the column definitions (DDL, in order; `PER_PLATFORM` among
    them stands for a membership column per platform of the run).

    `round_key`: the column holding the round a row belongs to (rows of rounds after K are
    cut when a run resumes from K, and a fork from K inherits rows up to K); `post_key`:
    instead, a post id column (rows of posts created after round K are cut); neither: the
    table is never cut. `kept`: a condition for rows after the cut that stay all the same.

    `lineage`: `inherit` (a fork reads its ancestors' rows up to its fork round, then its
    own), `own` (a fork writes its own complete copy: the run row, topics, agents), `none`
    (the table belongs to the run alone and is neither inherited nor copied: analyses,
    interviews). `created`: `run` (with the file) or `on_demand` (the first time it is
    written). `volatile`: columns that differ between two runs of one config and seed
    (timings, ports, ids). `as_of`: the column an as-of-round read filters on, where it is
    not `round_key` (graph relations: when they became valid). `frame`: the notebook
    `Run` shows it as a property of that name.

    `listed`: (value, position), for a log whose rows come in runs of positions under
    the same other columns (a feed's items): the file stores one row per run, `value` as
    a list in `position` order (NULL where a position is empty), in the base table
    `<name>_listed`, and `name` is a view giving the declared rows. DuckDB inserts that
    in about a third of the CPU (10 million feed items a round at 1M agents: ~300 ms
    against ~800); a full scan costs more (bench/README.md, "Feed items kept as lists").
    """

    name: str
    columns: str
    owner: str
    doc: str = ""
    round_key: str | None = "round"
    post_key: str | None = None
    kept: str | None = None
    lineage: Lineage = "inherit"
    created: Literal["run", "on_demand"] = "run"
    volatile: tuple[str, ...] = ()
    order: str = "ALL"
    as_of: str | None = None
    frame: bool = False
    listed: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise InputError(f"table {self.name!r}: a table name is a lower-case identifier")
        if self.round_key and self.post_key:
            raise InputError(f"table {self.name!r}: keyed by a round or by a post id, "
                             "not both")
        if self.lineage not in ("inherit", "own", "none"):
            raise InputError(f"table {self.name!r}: lineage {self.lineage!r} is not one "
                             "of inherit, own, none")
        if self.listed is not None:
            if not (isinstance(self.listed, tuple) and len(self.listed) == 2
                    and all(isinstance(c, str) for c in self.listed)):
                raise InputError(f"table {self.name!r}: listed {self.listed!r} is not a pair "
                                 "of column names (value, position)")
            value, position = self.listed
            keys = {self.round_key, self.post_key, self.as_of}
            if (value == position or not {value, position} <= set(self.column_names)
                    or keys & {value, position}):
                raise InputError(f"table {self.name!r}: listed {self.listed!r} names two of "
                                 "its columns that are not its round or post key")

    @property
    def column_names(self) -> list[str]:
        """The columns' names, in order."""
        return [c.split()[0] for c in _definitions(self.columns) if c != PER_PLATFORM]

    @property
    def stored(self) -> str:
        """The base table holding the rows: `<name>_listed` for a listed table, else the
        table itself."""
        return f"{self.name}_listed" if self.listed else self.name

    def unnested(self, source: str) -> str:
        """SELECT of the declared rows from `source`, rows in this listed table's stored
        shape (the view's definition)."""
        assert self.listed is not None
        value, position = self.listed
        kind = dict(d.split(maxsplit=1) for d in _definitions(self.columns))[position]
        inner = ", ".join(
            f"unnest({value}) AS {value}" if c == value else
            f"CAST(generate_subscripts({value}, 1) - 1 AS {kind}) AS {c}" if c == position
            else c for c in self.column_names)
        return (f"SELECT {', '.join(self.column_names)} FROM (SELECT {inner} FROM {source}) "
                f"WHERE {value} IS NOT NULL")

    def nested(self, source: str) -> str:
        """SELECT of this listed table's stored rows from `source`, rows in its declared
        shape (positions missing under a key become NULL items)."""
        assert self.listed is not None
        value, position = self.listed
        keys = ", ".join(c for c in self.column_names if c not in self.listed)
        # (groups in the order they first come in `source`: its rows are in declared order)
        return (f"WITH t AS (SELECT *, row_number() OVER () AS _row FROM {source}), "
                f"s AS (SELECT {keys}, unnest(range(top + 1)) AS {position} FROM "
                f"(SELECT {keys}, max({position}) AS top FROM t GROUP BY {keys})) "
                f"SELECT {keys}, list(t.{value} ORDER BY s.{position}) AS {value} "
                f"FROM s LEFT JOIN t USING ({keys}, {position}) GROUP BY {keys} "
                "ORDER BY min(t._row)")

    @property
    def cut(self) -> bool:
        """Whether rows of rounds after a checkpoint are cut on resume."""
        return bool(self.round_key or self.post_key)

    def upto(self, round_: int | None, n_posts: int | None) -> str | None:
        """The SQL condition selecting rows of rounds 0..`round_` (posts: ids below
        `n_posts`, the post count at the end of that round); None: every row."""
        if self.post_key:
            return None if n_posts is None else f"{self.post_key} < {int(n_posts)}"
        if self.round_key:
            return None if round_ is None else f"{self.round_key} <= {int(round_)}"
        return None

    def ddl(self, platforms: Sequence[str] = (), if_not_exists: bool = False,
            plain: bool = False) -> str:
        """CREATE TABLE for a run on `platforms`, with this declaration as the table's
        comment (a listed table: its base table, and the view of its name; `plain`: the
        declared rows as a table all the same, as the live mirror keeps them)."""
        exists = "IF NOT EXISTS " if if_not_exists else ""
        on = "".join(f"on_{p} BOOLEAN, " for p in platforms)
        columns = self.columns.replace(f"{PER_PLATFORM}, ", on)
        if self.listed is None or plain:
            return (f"CREATE TABLE {exists}{self.name} ({columns});\n"
                    f"COMMENT ON TABLE {self.name} IS '{self.comment()}';\n")
        value, position = self.listed
        stored = ", ".join(f"{d}[]" if d.split()[0] == value else d
                           for d in _definitions(columns) if d.split()[0] != position)
        marker = json.dumps({"stores": self.name})
        return (f"CREATE TABLE {exists}{self.stored} ({stored});\n"
                f"COMMENT ON TABLE {self.stored} IS '{marker}';\n"
                f"CREATE VIEW {exists}{self.name} AS {self.unnested(self.stored)};\n"
                f"COMMENT ON VIEW {self.name} IS '{self.comment()}';\n")

    def comment(self) -> str:
        """The declaration without its columns, as JSON (SQL-quoted)."""
        data = {k: v for k, v in asdict(self).items() if k not in ("name", "columns")}
        return json.dumps(data, sort_keys=True).replace("'", "''")

    @classmethod
    def from_comment(cls, name: str, columns: str, comment: str | None) -> TableSpec | None:
        """The declaration a file stored with a table (None: none, or not one of ours)."""
        try:
            data = json.loads(comment or "")
            known = {f.name for f in fields(cls)}
            data = {k: v for k, v in data.items() if k in known}
            data["volatile"] = tuple(data.get("volatile", ()))
            if data.get("listed") is not None:
                data["listed"] = tuple(data["listed"])
            return cls(name=name, columns=columns, **data)
        except (ValueError, TypeError, InputError):
            return None


class TableRegistry:
    """The declared tables, in declaration order."""

    def __init__(self) -> None:
        self._specs: dict[str, TableSpec] = {}

    def declare(self, spec: TableSpec) -> TableSpec:
        """Declare a table (again with the same declaration: no change; a different one
        under a taken name: an error)."""
        old = self._specs.get(spec.name)
        if old is not None and old != spec:
            differ = [f.name for f in fields(spec) if getattr(old, f.name) != getattr(spec, f.name)]
            raise InputError(f"table {spec.name!r} is declared twice, by {old.owner} and "
                             f"by {spec.owner}, with different {', '.join(differ)}")
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> TableSpec | None:
        """The declaration of `name`, if declared in this process."""
        return self._specs.get(name)

    def __iter__(self) -> Iterator[TableSpec]:
        return iter(list(self._specs.values()))

    def __contains__(self, name: str) -> bool:
        return name in self._specs

    def with_run(self) -> list[TableSpec]:
        """Every table a trajectory file is created with, once every part that may
        declare one (Shoal's own and the installed plug-ins) is loaded."""
        from shoal.core.registry import load_plugins

        load_plugins()
        return [s for s in self if s.created == "run"]


TABLES = TableRegistry()


def _definitions(columns: str) -> list[str]:
    """A declaration's column definitions ("name TYPE ..."), in order."""
    return re.split(r", (?=[A-Za-z_{]\S* )|, (?=\{)", columns)


def file_tables(con: duckdb.DuckDBPyConnection, catalog: str | None = None
                ) -> dict[str, TableSpec]:
    """The tables of a trajectory file (`catalog`: an attached one; default: the
    connection's own), each with its declaration: the one stored with it, else the one
    this process knows (files written before declarations were stored), else one
    inferred from its columns (a `round` column: cut and inherited by round)."""
    where = "database_name = " + ("current_database()" if catalog is None else "?")
    rows = con.execute(
        "SELECT t.name, t.comment, t.view, string_agg(c.column_name || ' ' || c.data_type, "
        "', ' ORDER BY c.column_index) FROM (SELECT database_name, schema_name, table_name "
        "AS name, comment, table_oid AS oid, false AS view FROM duckdb_tables() WHERE NOT "
        "temporary UNION ALL SELECT v.database_name, v.schema_name, v.view_name, v.comment, "
        # (a listed table's view in its base table's place)
        "coalesce(b.table_oid, v.view_oid), true FROM duckdb_views() v LEFT JOIN "
        "duckdb_tables() b ON b.database_name = v.database_name AND b.schema_name = "
        "v.schema_name AND b.table_name = v.view_name || '_listed' WHERE NOT v.internal AND "
        "NOT v.temporary) t JOIN "
        "duckdb_columns() c ON c.database_name = t.database_name AND c.schema_name = "
        f"t.schema_name AND c.table_name = t.name WHERE t.{where} AND t.schema_name = 'main' "
        "GROUP BY ALL ORDER BY min(t.oid)", [] if catalog is None else [catalog],
    ).fetchall()
    out = {}
    for name, comment, view, columns in rows:
        spec = TableSpec.from_comment(name, columns, comment)
        if view:  # a listed table's rows (other views are not tables of the run)
            if spec is not None and spec.listed:
                out[name] = spec
        elif not _stores(comment):  # (a listed table's base table is read by its view)
            spec = spec or TABLES.get(name) or inferred(name, columns)
            # a table holds its declared rows however they are declared to be kept (a file
            # from before, the live mirror's)
            out[name] = replace(spec, listed=None) if spec.listed else spec
    return out


def _stores(comment: str | None) -> bool:
    """Whether a table's comment marks it as a listed table's base table."""
    try:
        data = json.loads(comment or "")
    except ValueError:
        return False
    return isinstance(data, dict) and set(data) == {"stores"}


def inferred(name: str, columns: str) -> TableSpec:
    """A declaration for a table nobody declared: cut and inherited by its `round`
    column if it has one, otherwise the run's own."""
    spec = TableSpec(name, columns, owner="unknown", round_key=None, lineage="none")
    if "round" in spec.column_names:
        spec = replace(spec, round_key="round", lineage="inherit")
    return spec

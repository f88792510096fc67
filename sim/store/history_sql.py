"""Read-only SQL over a run's full history, for people and for the analyst.

The lineage's trajectory files are attached read-only and a catalog `hist` gets one view
per table with the lineage's filters (a fork's `beliefs` is its parent's rows up to the
fork round, then its own): exactly the rows `read_table` gives. Queries run with `hist`
as their default catalog; only a single SELECT statement is accepted, and external access
(reading other files) is switched off once the files are attached.

`query_history(run, sql)` does all of this in a fresh in-memory database closed after the
query. A process that already holds the run's file open (the analyst, which also writes
its trace there) attaches the history to its own connection once with `attach_history`
and runs queries with `select_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from sim.core.errors import InputError
from sim.store.lineage import lineage
from sim.store.tables import file_tables

CATALOG = "hist"


@dataclass
class QueryResult:
    """Rows of a query: column names, at most `limit` rows, and whether more existed."""

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-able data."""
        return {"columns": self.columns, "rows": self.rows, "truncated": self.truncated}


class SQLError(InputError):
    """A query that is not a single SELECT, or that DuckDB rejects."""


def check_select(sql: str) -> str:
    """`sql` without trailing semicolons, if it is exactly one SELECT statement."""
    text = sql.strip().rstrip(";").strip()
    try:
        statements = duckdb.extract_statements(text)
    except duckdb.Error as exc:
        raise SQLError(f"the query does not parse: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise SQLError(f"one statement per query, got {len(statements)}")
    if statements[0].type != duckdb.StatementType.SELECT:
        raise SQLError(f"only SELECT queries are allowed, got {statements[0].type.name}")
    return text


def query_history(run: str | Path, sql: str, limit: int = 100) -> QueryResult:
    """Run one SELECT over `run`'s history (see the module docstring); at most `limit`
    rows come back, `truncated` says whether there were more."""
    text = check_select(sql)
    con = duckdb.connect()
    try:
        attach_history(con, run)
        return select_rows(con, text, limit)
    finally:
        con.close()


def attach_history(con: duckdb.DuckDBPyConnection, run: str | Path,
                   own: str | None = None) -> None:
    """Attach `run`'s lineage to `con` read-only, define the `hist` views, and switch
    external access off. `own`: the catalog under which `con` already holds the run's own
    file (its ancestors are attached; it is not attached twice)."""
    segments = lineage(run)
    catalogs = []
    for i, seg in enumerate(segments):
        if own is not None and i == len(segments) - 1:
            catalogs.append(own)
            continue
        path = str(seg.dir.db).replace("'", "''")
        con.execute(f"ATTACH '{path}' AS s{i} (READ_ONLY)")
        catalogs.append(f"s{i}")
    con.execute(f"ATTACH ':memory:' AS {CATALOG}")
    declared = [file_tables(con, c) for c in catalogs]
    for table, spec in declared[-1].items():  # the run's own tables, as it declares them
        if spec.lineage == "none":  # what was asked of the run: not its history
            continue
        parts = []
        for i, (seg, catalog) in enumerate(zip(segments, catalogs, strict=True)):
            if (spec.lineage == "own" and i != len(segments) - 1) or table not in declared[i]:
                continue
            cond = seg.condition(spec)
            parts.append(f"SELECT * FROM {catalog}.{table}" + (f" WHERE {cond}" if cond
                                                               else ""))
        con.execute(f"CREATE VIEW {CATALOG}.{table} AS " + " UNION ALL ".join(parts))
    con.execute("SET enable_external_access = false")


def select_rows(con: duckdb.DuckDBPyConnection, sql: str, limit: int = 100) -> QueryResult:
    """One SELECT over the `hist` views of `con` (see `attach_history`)."""
    text = check_select(sql)
    cur = con.cursor()
    try:
        cur.execute(f"USE {CATALOG}")
        cur.execute(f"SELECT * FROM ({text}) AS q LIMIT {int(limit) + 1}")
        rows = cur.fetchall()
        columns = [d[0] for d in cur.description]
    except duckdb.Error as exc:
        raise SQLError(f"the query failed: {str(exc).splitlines()[0]}") from None
    finally:
        cur.close()
    return QueryResult(columns, [list(r) for r in rows[:limit]], len(rows) > limit)

"""Read-only SQL over a run's full history, for people and for the analyst.

The lineage's trajectory files are attached read-only and a catalog `hist` gets one view
per table with the lineage's filters (a fork's `beliefs` is its parent's rows up to the
fork round, then its own): exactly the rows `read_table` gives. Queries run with `hist`
as their default catalog; only a single query is accepted (SELECT, with PIVOT and UNPIVOT),
external access (reading other files) is switched off once the files are attached, and
the catalog and system functions that would show where the files live
(`duckdb_databases()`, `duckdb_settings()`, `current_setting`, ...) are refused: a query
sees the run's data, not the file system. Error messages and results are scrubbed of the
run's paths as well.

Every query is bounded (`Limits`): at most `rows` rows and `columns` columns come back,
a text or nested value longer than `cell_chars` characters is cut (ending in "…"), and a
note says what was cut; with `timeout_s` the query is interrupted when it runs longer,
and a `Cancel` interrupts the queries running under it (a section's deadline, Ctrl-C).
`bound_connection` puts a memory, temporary-disk and thread limit on a connection.

`query_history(run, sql)` does all of this in a fresh in-memory database closed after the
query. A process that already holds the run's file open (the analyst, which also writes
its trace there) attaches the history to its own connection once with `attach_history`
and runs queries with `select_rows`.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import duckdb

from shoal.core.errors import InputError
from shoal.store.lineage import Segment, held_by_writer, lineage
from shoal.store.live_mirror import LiveMirror
from shoal.store.run_dir import RunDir
from shoal.store.tables import TableSpec, file_tables

CATALOG = "hist"
ELLIPSIS = "…"  # ends a cut value
# Names a query may not use: functions and views of the catalog and the system (they show
# file paths, settings, the environment), and those that read files or run other SQL.
_DENIED_PREFIXES = ("duckdb_", "pragma_", "pg_", "sqlite_", "read_", "parquet_")
_DENIED = frozenset({
    "current_setting", "getenv", "which_secret", "query", "query_table", "glob",
    "checkpoint", "force_checkpoint", "enable_logging", "disable_logging",
    "enable_profiling", "disable_profiling", "truncate_duckdb_logs", "sniff_csv",
    "json_execute_serialized_sql", "add_grammar_extension", "remove_grammar_extension",
    "create_external_resource", "destroy_external_resource", "deregister_external_resource",
    "register_external_resource", "register_external_resource_type", "arrow_scan",
    "arrow_scan_dumb", "pandas_scan", "python_arrow_scan", "python_map_function",
    "seq_scan"})
# Column types of bounded size: passed through; any other (text, lists, structs, JSON,
# blobs) is cut when its text is longer than the cell limit.
_FIXED = re.compile(r"^(BOOLEAN|U?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT)|FLOAT|DOUBLE|"
                    r"DECIMAL\(\d+,\s*\d+\)|DATE|TIME|TIME WITH TIME ZONE|TIMESTAMP.*|"
                    r"INTERVAL|UUID)$")


@dataclass(frozen=True)
class Limits:
    """What one query may take and give back."""

    rows: int = 100  # rows returned (`truncated` says whether there were more)
    columns: int = 100  # columns returned (the first ones)
    cell_chars: int = 2000  # a longer text or nested value is cut, ending in "…"
    timeout_s: float | None = None  # the query is interrupted after this long
    # the characters of all the rows together: rows stop before it is passed (each limit
    # above allows 1,000 rows x 100 columns x 2,000 characters: 200 MB from one request)
    chars: int = 2_000_000


@dataclass
class QueryResult:
    """Rows of a query: column names, at most `Limits.rows` rows, whether more existed,
    and a note saying what was cut (empty when nothing was)."""

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The result as JSON-able data (`note` only when something was cut)."""
        out = {"columns": self.columns, "rows": self.rows, "truncated": self.truncated}
        return {**out, "note": self.note} if self.note else out


class SQLError(InputError):
    """A query that is not a single SELECT, that DuckDB rejects, or that went past a
    limit (time, memory) or was cancelled."""


class Cancel:
    """Interrupts the queries running under it, now and later (a section's deadline, or
    Ctrl-C): `select_rows(..., cancel=c)` registers its cursor while it runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cursors: set[duckdb.DuckDBPyConnection] = set()
        self.reason: str | None = None

    def cancel(self, reason: str) -> None:
        """Interrupt the running queries; later ones are refused with `reason`."""
        with self._lock:
            if self.reason is None:
                self.reason = reason
            for cur in self._cursors:
                cur.interrupt()

    @contextmanager
    def running(self, cur: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """Register `cur` while the block runs (refused if already cancelled)."""
        with self._lock:
            if self.reason is not None:
                raise SQLError(f"the query was not run: {self.reason}")
            self._cursors.add(cur)
        try:
            yield
        finally:
            with self._lock:
                self._cursors.discard(cur)


def check_select(sql: str) -> str:
    """`sql` without trailing semicolons, if it is exactly one query that only reads: a
    SELECT (PIVOT and UNPIVOT included) naming no catalog or system function."""
    text = sql.strip().rstrip(";").strip()
    try:
        statements = duckdb.extract_statements(text)
    except duckdb.Error as exc:
        raise SQLError(f"the query does not parse: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise SQLError(f"one statement per query, got {len(statements)}")
    kind = statements[0].type
    if kind == duckdb.StatementType.MULTI:
        # A PIVOT without an IN list: DuckDB first gathers its columns, then selects. Only
        # a query parses as a subquery, so that is what the statement is if this parses.
        try:
            wrapped = duckdb.extract_statements(_subquery(text))
        except duckdb.Error:
            wrapped = []
        if len(wrapped) != 1:
            raise SQLError("only SELECT queries (PIVOT and UNPIVOT included) are allowed")
    elif kind != duckdb.StatementType.SELECT:
        raise SQLError(f"only SELECT queries are allowed, got {kind.name}")
    _check_names(text)
    return text


def _subquery(text: str) -> str:
    # (newlines: a comment ending the query must not swallow the closing parenthesis)
    return f"SELECT * FROM (\n{text}\n) AS q"


def _check_names(text: str) -> None:
    """Refuse a query naming a catalog or system function or view (quoted or not)."""
    tokens = duckdb.tokenize(text)
    words = (duckdb.token_type.identifier, duckdb.token_type.keyword)
    for i, (start, kind) in enumerate(tokens):
        if kind not in words:
            continue
        end = tokens[i + 1][0] if i + 1 < len(tokens) else len(text)
        name = text[start:end].strip().strip('"').lower()
        if name in _DENIED or name.startswith(_DENIED_PREFIXES):
            raise SQLError(f"{name} is not available: queries read the run's tables, not "
                           "the database's catalog, settings or files")


def query_history(run: str | Path, sql: str, limit: int = 100,
                  limits: Limits | None = None) -> QueryResult:
    """Run one SELECT over `run`'s history (see the module docstring); at most `limit`
    rows come back (or `limits.rows`), `truncated` says whether there were more."""
    text = check_select(sql)
    con = duckdb.connect()
    try:
        attach_history(con, run)
        return select_rows(con, text, limits or Limits(rows=limit))
    finally:
        con.close()


def attach_history(con: duckdb.DuckDBPyConnection, run: str | Path,
                   own: str | None = None, live: bool = False) -> int | None:
    """Attach `run`'s lineage to `con` read-only, define the `hist` views, and switch
    external access off. `own`: the catalog under which `con` already holds the run's own
    file (its ancestors are attached; it is not attached twice). `live`: when a writer
    holds the run's own file, read its live mirror instead (`output.live_parquet`), up to
    the last round the mirror has whole; returns that round (None: the file was read)."""
    segments = lineage(run)
    catalogs: list[str] = []
    mirror: LiveMirror | None = None
    live_last: int | None = None
    for i, seg in enumerate(segments):
        if own is not None and i == len(segments) - 1:
            catalogs.append(own)
            continue
        assert seg.dir is not None  # every segment `lineage` gives has a directory
        path = str(seg.dir.db).replace("'", "''")
        try:
            con.execute(f"ATTACH '{path}' AS s{i} (READ_ONLY)")
        except duckdb.Error as exc:
            if not (live and i == len(segments) - 1 and held_by_writer(exc)):
                raise
            mirror, live_last = _attach_mirror(con, seg.dir, f"s{i}")
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
            source = f"{catalog}.{table}"
            if mirror is not None and i == len(segments) - 1:
                source = _mirrored(mirror, catalog, table)
                if spec.round_key:  # a round the writer is still mirroring is not whole
                    cond = " AND ".join(c for c in (cond, f"{spec.round_key} <= {live_last}")
                                        if c)
            parts.append(f"SELECT * FROM {source}" + (f" WHERE {cond}" if cond else ""))
        # by name, in the run's own columns: a file written by an older release may lack
        # columns added since (NULL there) or hold them in another order
        columns = ", ".join(f'"{c}"' for c in spec.column_names)
        con.execute(f"CREATE VIEW {CATALOG}.{table} AS SELECT {columns} FROM ("
                    + " UNION ALL BY NAME ".join(parts) + ")")
        if (stored := _stored_view(spec, segments, catalogs, declared,
                                   mirror is not None)) is not None:
            con.execute(f"CREATE VIEW {CATALOG}.{spec.stored} AS {stored}")
    if mirror is not None:  # the mirror's files stay readable, and nothing else
        con.execute("SET allowed_directories = $dirs", {"dirs": [str(mirror.root) + "/"]})
    con.execute("SET enable_external_access = false")
    return live_last


def _stored_view(spec: TableSpec, segments: list[Segment], catalogs: list[str],
                 declared: list[dict[str, TableSpec]], live: bool) -> str | None:
    """The SELECT of `hist.<table>_listed` for a listed table (`TableSpec.listed`): its
    rows as the files store them, one row per feed, through the lineage's filters; None
    unless every file of the history keeps it listed (a file written before it was listed,
    or the live mirror, keeps one row per item: then only the view of the declared rows
    is defined).

    Why: the view of the declared rows unnests every list, so a read that searches a post
    id or scans every item costs several times what it did on a table of rows (30 M feed
    items: `WHERE post_id = x` ~30 -> ~270 ms); on the lists, `list_contains(post_id, x)`
    or an unnest without ranks reads them as fast as before (shoal.web.service)."""
    if spec.listed is None or live:
        return None
    parts = []
    for i, (seg, catalog) in enumerate(zip(segments, catalogs, strict=True)):
        if spec.lineage == "own" and i != len(segments) - 1:
            continue
        if spec.name not in declared[i]:
            continue
        if declared[i][spec.name].listed is None:
            return None
        # (the lineage's filters name the round and post keys, never a listed column)
        cond = seg.condition(spec)
        parts.append(f"SELECT * FROM {catalog}.{spec.stored}" + (f" WHERE {cond}" if cond
                                                                  else ""))
    return " UNION ALL ".join(parts) if parts else None


def _attach_mirror(con: duckdb.DuckDBPyConnection, run_dir: RunDir, catalog: str
                   ) -> tuple[LiveMirror, int]:
    """An in-memory catalog with the schema of a run being written (as its live mirror
    keeps it), and the last round the mirror has whole (its `rounds` row is written last)."""
    mirror = LiveMirror(run_dir.root)
    ddl = mirror.schema()
    if ddl is None:
        raise InputError(f"run {run_dir.run_id} is being written; set output.live_parquet: "
                         "true to read it while it runs, or wait for it to finish")
    con.execute(f"ATTACH ':memory:' AS {catalog}")
    con.execute(f"USE {catalog}")
    con.execute(ddl)
    con.execute("USE memory")
    rounds = sorted((mirror.root / "rounds").glob("round=*.parquet"))
    last = int(rounds[-1].name[6:12]) if rounds else 0
    return mirror, last


def _mirrored(mirror: LiveMirror, catalog: str, table: str) -> str:
    """A table of a run being written: what the mirror has of it (its schema's rows and
    its round files, matched by column name)."""
    if not any((mirror.root / table).glob("round=*.parquet")):
        return f"{catalog}.{table}"
    glob = mirror.glob(table).replace("'", "''")
    return (f"(SELECT * FROM {catalog}.{table} UNION ALL BY NAME SELECT * FROM "
            f"read_parquet('{glob}', hive_partitioning = false, union_by_name = true))")


def bound_connection(con: duckdb.DuckDBPyConnection, memory_mb: int | None = None,
                     temp_mb: int | None = None, threads: int | None = None) -> None:
    """Limit the database `con` belongs to (every cursor of it): the memory it may use,
    the temporary files it may spill to when that is full, its threads."""
    if memory_mb:
        con.execute(f"SET memory_limit = '{int(memory_mb)}MB'")
    if temp_mb is not None:
        con.execute(f"SET max_temp_directory_size = '{int(temp_mb)}MB'")
    if threads:
        con.execute(f"SET threads = {int(threads)}")


def select_rows(con: duckdb.DuckDBPyConnection, sql: str, limits: Limits | None = None,
                cancel: Cancel | None = None) -> QueryResult:
    """One SELECT over the `hist` views of `con` (see `attach_history`), within `limits`;
    `cancel` can interrupt it from another thread."""
    limits = limits or Limits()
    text = check_select(sql)
    cur = con.cursor()
    hidden = _paths(cur)
    try:
        with _watched(cur, limits.timeout_s, cancel) as watch:
            try:
                cur.execute(f"USE {CATALOG}")
                described = cur.execute(f"DESCRIBE {_subquery(text)}").fetchall()
                names = [str(d[0]) for d in described]
                types = [str(d[1]) for d in described]
                shown = min(len(names), max(1, limits.columns))
                aliases = ", ".join(f"c{i}" for i in range(len(names)))
                cur.execute(f"SELECT {_projection(types[:shown], limits.cell_chars)} FROM "
                            f"(SELECT * FROM (\n{text}\n) AS q({aliases}) "
                            f"LIMIT {int(limits.rows) + 1}) AS r")
                raw = cur.fetchall()
            except duckdb.InterruptException:
                if cancel is not None and cancel.reason is not None:
                    raise SQLError(f"the query was stopped: {cancel.reason}") from None
                if watch["timed_out"]:
                    raise SQLError(f"the query was stopped after {limits.timeout_s:g} s, "
                                   "the limit for one query: aggregate, filter or LIMIT "
                                   "what it reads") from None
                raise
    except duckdb.OutOfMemoryException:
        raise SQLError("the query needs more memory than the limit allows: aggregate or "
                       "filter before sorting or joining") from None
    except duckdb.Error as exc:
        raise SQLError(f"the query failed: {_scrub(str(exc).splitlines()[0], hidden)}"
                       ) from None
    finally:
        cur.close()
    rows: list[list[Any]] = []
    cut, size, full = 0, 0, False
    for r in raw[:limits.rows]:
        row, k = [], 0
        for t in types[:shown]:
            if _FIXED.match(t):
                row.append(_plain(r[k], hidden))
                k += 1
                continue
            whole, long = r[k], r[k + 1]
            k += 2
            if long is not None:
                cut += 1
                row.append(_scrub(long, hidden) + ELLIPSIS)
            else:
                row.append(_plain(whole, hidden))
        size += sum(len(str(v)) for v in row)
        if size > limits.chars and rows:  # (the first row always: its cells are bounded)
            full = True
            break
        rows.append(row)
    notes = []
    if full:
        notes.append(f"only the first {len(rows)} rows are shown: the answer reached its "
                     f"budget of {limits.chars:,} characters")
    elif len(raw) > limits.rows:
        notes.append(f"only the first {limits.rows} rows are shown (there are more)")
    if shown < len(names):
        notes.append(f"only the first {shown} of {len(names)} columns are shown")
    if cut:
        notes.append(f"{cut} values longer than {limits.cell_chars} characters are cut "
                     f"(ending in {ELLIPSIS})")
    note = "; ".join(notes) + ("; aggregate, filter or select fewer columns to see the "
                               "rest" if notes else "")
    shown_names = [n if len(n) <= limits.cell_chars else n[:limits.cell_chars] + ELLIPSIS
                   for n in names[:shown]]  # (a column's name is as long as its query says)
    return QueryResult(shown_names, rows, full or len(raw) > limits.rows, note)


def _projection(types: list[str], cell_chars: int) -> str:
    """Columns c0, c1, ... as they come back: one column each for a value of bounded
    size; for any other, two: the value when its text is short, and its text cut to
    `cell_chars` when it is long."""
    cols = []
    for i, t in enumerate(types):
        if _FIXED.match(t):
            cols.append(f"c{i}")
            continue
        size = f"length(CAST(c{i} AS VARCHAR))"
        cols += [f"CASE WHEN {size} <= {int(cell_chars)} THEN c{i} END",
                 f"CASE WHEN {size} > {int(cell_chars)} THEN "
                 f"left(CAST(c{i} AS VARCHAR), {int(cell_chars)}) END"]
    return ", ".join(cols) or "NULL"


@contextmanager
def _watched(cur: duckdb.DuckDBPyConnection, timeout_s: float | None,
             cancel: Cancel | None) -> Iterator[dict[str, bool]]:
    """Interrupt `cur` after `timeout_s` (the state says whether it did), and while
    `cancel` is cancelled."""
    lock = threading.Lock()
    state = {"timed_out": False, "done": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                state["timed_out"] = True
                cur.interrupt()

    timer = threading.Timer(timeout_s, fire) if timeout_s else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        if cancel is not None:
            with cancel.running(cur):
                yield state
        else:
            yield state
    finally:
        with lock:
            state["done"] = True
        if timer is not None:
            timer.cancel()


def _paths(cur: duckdb.DuckDBPyConnection) -> list[str]:
    """The file-system paths a result must not show: the attached files, their run and
    runs folders, the temporary directory, home and the working directory (longest
    first, so a path is replaced whole)."""
    found: set[str] = set()
    try:
        for (path,) in cur.execute("SELECT path FROM duckdb_databases() WHERE path IS "
                                   "NOT NULL").fetchall():
            p = Path(path).resolve()
            found |= {str(p), str(p.parent), str(p.parent.parent), path}
        row = cur.execute("SELECT current_setting('temp_directory')").fetchone()
        assert row is not None  # a SELECT without FROM always returns one row
        found.add(row[0])
    except duckdb.Error:
        pass
    found |= {os.path.expanduser("~"), os.getcwd()}
    return sorted((p for p in found if p and len(p.strip("/")) > 3), key=len, reverse=True)


def _scrub(text: str, hidden: list[str]) -> str:
    for path in hidden:
        if path in text:
            text = text.replace(path, "<path>")
    return text


def _plain(v: Any, hidden: list[str]) -> Any:
    """A value as JSON data (decimals as floats; times, ids, intervals as text)."""
    if v is None or isinstance(v, bool | int | float):
        return v
    if isinstance(v, str):
        return _scrub(v, hidden)
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, datetime | date | time | timedelta | UUID):
        return str(v)
    if isinstance(v, bytes | bytearray | memoryview):
        return _scrub(bytes(v).decode("utf-8", "backslashreplace"), hidden)
    if isinstance(v, list | tuple):
        return [_plain(x, hidden) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x, hidden) for k, x in v.items()}
    return _scrub(str(v), hidden)

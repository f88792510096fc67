"""The DuckDB trajectory store: one file per run, one transaction per round.

Only the driver writes (one writer, whole rounds). Tables are bulk-inserted from Arrow
tables, one insert per table per round. The schema is shoal.store.schema's (docs/store.md).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from shoal.core.errors import InputError, StorageFull, out_of_space
from shoal.store.schema import ADDED_COLUMNS, schema
from shoal.store.tables import TABLES, TableSpec, file_tables


def connect(path: str | Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection to a trajectory file; a file another process holds, or one that is not
    a DuckDB database, is an InputError saying so."""
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        if out_of_space(exc):  # (opening replays the WAL into the file)
            raise StorageFull(f"no space left on the device of {path}") from None
        raise InputError(trajectory_problem(path, exc)) from None


def trajectory_problem(path: str | Path, exc: duckdb.Error) -> str:
    """What is wrong with opening a trajectory file, for the user."""
    text = str(exc)
    if "lock" in text.lower():
        pid = re.search(r"PID (\d+)", text)
        holder = f"process {pid.group(1)}" if pid else "another process"
        return (f"{path}: in use by {holder} (a run or resume of it still going, or a "
                "notebook holding it open); wait for it or stop it, or close that "
                "connection (con.close())")
    if "not a valid duckdb database" in text.lower():
        return f"{path}: damaged, or not a Shoal trajectory (not a DuckDB database)"
    if (damage := damage_reason(exc)) is not None:
        return damaged(path, damage)
    return f"{path}: cannot be opened: {text.splitlines()[0]}"


# What DuckDB says when a file's bytes are not what it wrote, in words for the user.
_DAMAGE = (("checksum", "a block's checksum does not match: bytes were changed after they "
                        "were written"),
           ("corrupt", "DuckDB finds it corrupt"),
           ("could not read enough bytes", "cut short: it ends before the data it lists"),
           ("not a valid duckdb database", "not a DuckDB database"))
_HEADER = 4096  # DuckDB: a main header, then two database headers, 4 kB each


def damage_reason(exc: BaseException | str) -> str | None:
    """Why a DuckDB error says a file is damaged, in words (None: it says something
    else, such as a lock held by another process)."""
    text = str(exc).lower()
    return next((why for key, why in _DAMAGE if key in text), None)


def damaged(path: str | Path, reason: str) -> str:
    """The message for a damaged trajectory file: which file, why, what to do."""
    return (f"{path}: damaged ({reason}); the run cannot be read from it: restore the file "
            "from a copy, or run the config again")


# The files this process holds open as TrajectoryStores, by (device, inode). DuckDB's
# lock on a file is a POSIX record lock, which the kernel drops when the process closes
# *any* descriptor of that file: reading such a file's header here would silently let a
# second process open it for writing beside us (a second `shoal resume` of a running run).
_HELD: Counter[tuple[int, int]] = Counter()


def _identity(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def header_damage(path: str | Path) -> str | None:
    """What the first 12 kB of a trajectory file show wrong, without opening it in DuckDB
    (cheap enough for every run of a folder): not a DuckDB file (overwritten, zeroed), or
    shorter than the blocks its newest header lists (cut off). None: nothing seen (bytes
    changed inside a block are found only when the block is read), or the file is one this
    process has open as a store (opened whole; not read here: that would drop its lock)."""
    if _identity(path) in _HELD:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(3 * _HEADER)
            size = f.seek(0, 2)
    except OSError:
        return None  # (unreadable, not damaged: opening it says why)
    if len(head) < 12 or head[8:12] != b"DUCK":
        return "not a DuckDB database: its header is gone"
    if len(head) < 3 * _HEADER:
        return "cut short: it ends inside its header"
    # Each database header: checksum, iteration, meta block, free list, block count,
    # block size (little-endian 64-bit); the one with the higher iteration is current.
    headers = [struct.unpack_from("<6Q", head, _HEADER * i) for i in (1, 2)]
    _, _, _, _, blocks, block_size = max(headers, key=lambda h: h[1])
    if block_size & (block_size - 1) or not 4096 <= block_size <= 1 << 30:
        return None  # a layout this check does not know: leave it to DuckDB
    needed = 3 * _HEADER + blocks * block_size
    # (DuckDB trims free blocks off the end after writing the header, whose count still
    # lists them: a file shorter by whole blocks can be whole; DuckDB finds it if not)
    if size < needed and (size - 3 * _HEADER) % block_size:
        return (f"cut short: {size:,} bytes of the {needed:,} its header lists; it ends "
                "before the data it lists")
    return None


def verify(con: duckdb.DuckDBPyConnection, path: str | Path) -> None:
    """Read every column of every table of an open trajectory, so that DuckDB checks every
    block's checksum: an InputError naming the file if one is damaged."""
    try:
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE "
                                    "database_name = current_database()").fetchall():
            con.execute(f'SELECT min(hash(COLUMNS(*))) FROM "{table}"').fetchall()
    except duckdb.Error as exc:
        if (reason := damage_reason(exc)) is None:
            raise
        raise InputError(damaged(path, reason)) from None


class TrajectoryStore:
    """A run's DuckDB file (`":memory:"`: an in-memory database). With `platforms` (the
    run's platform names, in code order) the schema is created; otherwise the file must
    hold one."""

    def __init__(self, path: str | Path, platforms: Sequence[str] | None = None):
        self.path = Path(path) if str(path) != ":memory:" else None
        self.con = connect(path)
        self._views: dict[str, bool] = {}  # table -> kept listed (`_listed`)
        self._held = _identity(self.path) if self.path is not None else None
        if self._held is not None:
            _HELD[self._held] += 1
        try:
            if platforms is not None:
                self.con.execute(schema(platforms))
            else:
                self._upgrade()
        except duckdb.Error as exc:
            self.abandon()
            if out_of_space(exc):
                raise StorageFull(f"no space left on the device of {path}") from None
            if (reason := damage_reason(exc)) is not None:
                raise InputError(damaged(path, reason)) from None
            raise

    def _upgrade(self) -> None:
        """What a file written by an older release lacks, added: declared tables it does
        not have (created empty) and columns added since (with their defaults)."""
        present = file_tables(self.con)
        platforms = [p for (p,) in self.con.execute(
            "SELECT unnest(enum_range(NULL::platform_t))").fetchall()]
        for spec in TABLES.with_run():
            if spec.name not in present:
                self.con.execute(spec.ddl(platforms))
        for table, columns in ADDED_COLUMNS.items():
            for name, kind, default in columns if table in present else ():
                self.con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {kind} "
                                 f"DEFAULT {default}")

    def verify(self) -> None:
        """Read every block of the file once: an InputError naming it if one is damaged
        (`verify`)."""
        verify(self.con, self.path or ":memory:")

    def insert(self, table: str, data: pa.Table) -> None:
        """Bulk insert an Arrow table (columns in schema order). A column that holds one
        value in every row (the round; the platform of a one-platform run) goes in as a
        SQL literal: DuckDB then stores a constant instead of reading, converting and
        analysing every value (an ENUM from an Arrow dictionary costs ~40 ns a row).

        A listed table (`TableSpec.listed`) takes its rows in either shape, stored or
        declared, whichever way this file keeps it (files written before it was listed
        keep the declared rows)."""
        if not data.num_rows:
            return
        names = data.column_names
        literals = {} if data.num_rows < _CONSTANT_ROWS else {
            name: value for name in names
            if (value := sql_constant(data.column(name))) is not None}
        if len(literals) == len(names):  # keep one column to carry the row count
            literals.pop(names[0])
        self.con.register("_batch", data.drop_columns(list(literals)))
        select = ", ".join(f"{literals[name]} AS {name}" if name in literals else name
                           for name in names)
        source, target = f"(SELECT {select} FROM _batch)", table
        spec = TABLES.get(table)
        if spec is not None and spec.listed is not None:
            given_listed = spec.listed[1] not in names
            if self._listed(table):
                target = spec.stored
                if not given_listed:
                    source, names = f"({spec.nested(source)})", _stored_names(spec)
            elif given_listed:
                source, names = f"({spec.unnested(source)})", spec.column_names
        self.con.execute(f"INSERT INTO {target} ({', '.join(names)}) SELECT * FROM {source}")
        self.con.unregister("_batch")

    def _listed(self, table: str) -> bool:
        """Whether this file keeps `table` as a listed table (a view over its lists)."""
        if table not in self._views:
            self._views[table] = bool(self.con.execute(
                "SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND database_name "
                "= current_database()", [table]).fetchall()[0][0])
        return self._views[table]

    def write_round(self, tables: dict[str, pa.Table]) -> None:
        """All of one round's rows, in one transaction."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            for name, data in tables.items():
                self.insert(name, data)
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise

    def write_run(self, row: dict[str, Any]) -> None:
        """The run's single metadata row."""
        self.con.execute(
            "INSERT INTO run VALUES ($run_id, $name, $created_at, $seed, $engine_version, "
            "$config_hash, $config, $topics, $parent_run_id, $fork_round, $lineage)",
            {**row, "config": json.dumps(row["config"]), "lineage": json.dumps(row["lineage"])},
        )

    def truncate_after(self, round_: int, n_posts: int) -> None:
        """Delete everything logged after round `round_`, from every table of the file as
        its declaration says (`n_posts` posts existed at the end of that round: post ids
        are dense), in one transaction."""
        self.con.execute("BEGIN TRANSACTION")
        for spec in file_tables(self.con).values():
            if spec.cut:
                kept = f" AND ({spec.kept}) IS NOT TRUE" if spec.kept else ""
                self.con.execute(f"DELETE FROM {spec.stored} WHERE NOT "
                                 f"({spec.upto(round_, n_posts)}){kept}")
        self.con.execute("COMMIT")

    def last_round(self) -> int:
        """The last round fully committed (0 if none)."""
        row = self.con.execute("SELECT max(round) FROM rounds").fetchone()
        assert row is not None  # an aggregate without GROUP BY always returns one row
        value = row[0]
        return int(value) if value is not None else 0

    def close(self) -> None:
        """Checkpoint the WAL into the file and close (a full disk: StorageFull; what was
        committed stays in the WAL, which the next open replays)."""
        try:
            self.con.execute("CHECKPOINT")
        except duckdb.Error as exc:
            if not out_of_space(exc):
                raise
            raise StorageFull(f"no space left on the device of {self.path}") from None
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Close the connection without a checkpoint (on an error path; what was committed
        stays in the WAL) and forget that this process holds the file."""
        self.con.close()
        if self._held is not None:
            _HELD[self._held] -= 1
            if _HELD[self._held] <= 0:
                del _HELD[self._held]
            self._held = None


_CONSTANT_ROWS = 4096  # below this a batch is cheap however it is sent


def _stored_names(spec: TableSpec) -> list[str]:
    """The columns of a listed table's base table, in order."""
    return [c for c in spec.column_names if spec.listed is None or c != spec.listed[1]]


def sql_constant(column: pa.ChunkedArray) -> str | None:
    """The SQL literal of the one value every row of `column` holds (no nulls), for an
    integer column or a dictionary of strings; None otherwise."""
    if column.null_count or not len(column):
        return None
    kind = column.type
    if pa.types.is_integer(kind):
        low, high = pc.min_max(column).values()
        return str(low.as_py()) if low == high else None
    if not (pa.types.is_dictionary(kind) and (pa.types.is_string(kind.value_type)
                                              or pa.types.is_large_string(kind.value_type))):
        return None
    values = set()
    for chunk in column.chunks:
        if len(chunk):
            low, high = pc.min_max(chunk.indices).values()
            if low != high:
                return None
            values.add(chunk.dictionary[low.as_py()].as_py())
    if len(values) != 1:
        return None
    (value,) = values
    return "'" + value.replace("'", "''") + "'"

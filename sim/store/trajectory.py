"""The DuckDB trajectory store: one file per run, one transaction per round.

Only the driver writes (one writer, whole rounds). Tables are bulk-inserted from Arrow
tables, one insert per table per round. The schema is sim.store.schema's (docs/store.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from sim.core.errors import InputError, StorageFull, out_of_space
from sim.store.schema import ADDED_COLUMNS, schema
from sim.store.tables import TABLES, file_tables


def connect(path: str | Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection to a trajectory file; a file another process holds, or one that is not
    a DuckDB database, is an InputError saying so."""
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
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
    return f"{path}: cannot be opened: {text.splitlines()[0]}"


class TrajectoryStore:
    """A run's DuckDB file (`":memory:"`: an in-memory database). With `platforms` (the
    run's platform names, in code order) the schema is created; otherwise the file must
    hold one."""

    def __init__(self, path: str | Path, platforms: Sequence[str] | None = None):
        self.path = Path(path) if str(path) != ":memory:" else None
        self.con = connect(path)
        if platforms is not None:
            self.con.execute(schema(platforms))
        else:
            self._upgrade()

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

    def insert(self, table: str, data: pa.Table) -> None:
        """Bulk insert an Arrow table (columns in schema order)."""
        if data.num_rows:
            self.con.register("_batch", data)
            cols = ", ".join(data.column_names)
            self.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _batch")
            self.con.unregister("_batch")

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

    def write_run(self, row: dict) -> None:
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
                self.con.execute(f"DELETE FROM {spec.name} WHERE NOT "
                                 f"({spec.upto(round_, n_posts)}){kept}")
        self.con.execute("COMMIT")

    def last_round(self) -> int:
        """The last round fully committed (0 if none)."""
        value = self.con.execute("SELECT max(round) FROM rounds").fetchone()[0]
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
            self.con.close()

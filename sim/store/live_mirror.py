"""A Parquet mirror of each committed round, for reading a run while it is still running.

DuckDB lets one process hold a database file for writing and then no other process may
open it, not even read-only. With `output.live_parquet: true` the driver also writes every
committed round's rows to `live/<table>/round=<r>.parquet` (each file written under a temp
name and renamed, so a reader never sees half a file). Readers glob those files with DuckDB
or pandas, without touching the writer's lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from shoal.core.files import replacing, write_text
from shoal.store.schema import schema
from shoal.store.tables import TABLES, TableSpec, file_tables
from shoal.store.trajectory import TrajectoryStore


class LiveMirror:
    """Writes round tables to `<run>/live/<table>/round=NNNNNN.parquet`."""

    def __init__(self, run_root: Path):
        self.root = run_root / "live"

    def write(self, round_: int, tables: dict[str, pa.Table]) -> None:
        """Mirror one committed round (tables with no rows are skipped; a listed table's
        rows as declared, the shape the mirror's schema has)."""
        for name, table in tables.items():
            if not table.num_rows:
                continue
            if (spec := TABLES.get(name)) and spec.listed and spec.listed[1] not in (
                    table.column_names):
                table = _unnested(spec, table)
            folder = self.root / name
            folder.mkdir(parents=True, exist_ok=True)
            with replacing(folder / f"round={round_:06d}.parquet") as tmp:
                pq.write_table(table, tmp)

    def start(self, store: TrajectoryStore, platforms: Sequence[str]) -> None:
        """Begin the mirror of a new run directory: its schema (the trajectory file's DDL,
        declarations included, so a reader builds the same tables without the plug-ins
        that declared them), then everything the new file holds, as round 0."""
        self.root.mkdir(parents=True, exist_ok=True)
        write_text(self.root / "schema.sql", schema(platforms, plain=True))
        self.write(0, {name: store.con.sql(f"SELECT * FROM {name}").to_arrow_table()
                       for name in file_tables(store.con)})

    def schema(self) -> str | None:
        """The schema `write_schema` kept (None: a mirror written before it was kept)."""
        path = self.root / "schema.sql"
        return path.read_text() if path.is_file() else None

    def truncate_after(self, round_: int) -> None:
        """Remove the files of rounds after `round_` (a resume recomputes them)."""
        if not self.root.is_dir():
            return
        for path in self.root.glob("*/*round=*.parquet*"):
            digits = path.name.split("round=", 1)[1][:6]
            if digits.isdigit() and int(digits) > round_:
                path.unlink(missing_ok=True)

    def glob(self, table: str) -> str:
        """The glob pattern a reader passes to `read_parquet`."""
        return str(self.root / table / "round=*.parquet")


def _unnested(spec: TableSpec, table: pa.Table) -> pa.Table:
    """A listed table's rows in its declared shape."""
    con = duckdb.connect()
    try:
        con.register("_batch", table)
        return con.sql(spec.unnested("_batch")).to_arrow_table()
    finally:
        con.close()

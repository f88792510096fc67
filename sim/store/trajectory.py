"""The DuckDB trajectory store: one file per run, one transaction per round.

Only the driver writes (one writer, whole rounds). Tables are bulk-inserted from Arrow
tables, one insert per table per round. The schema is sim.store.schema's (docs/store.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from sim.store.schema import schema


class TrajectoryStore:
    """A run's DuckDB file (`":memory:"`: an in-memory database). With `platforms` (the
    run's platform names, in code order) the schema is created; otherwise the file must
    hold one."""

    def __init__(self, path: str | Path, platforms: Sequence[str] | None = None):
        self.path = Path(path) if str(path) != ":memory:" else None
        self.con = duckdb.connect(str(path))
        if platforms is not None:
            self.con.execute(schema(platforms))

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
        """Delete everything logged after round `round_` (posts by id: ids are dense, and
        `n_posts` posts existed at the end of that round), in one transaction."""
        self.con.execute("BEGIN TRANSACTION")
        for table in ("rounds", "actions", "exposures", "beliefs", "trust", "follows",
                      "interventions", "memory", "context", "llm_calls"):
            self.con.execute(f"DELETE FROM {table} WHERE round > ?", [round_])
        self.con.execute("DELETE FROM agents WHERE joined_round > ?", [round_])
        for table in ("posts", "post_stances"):
            self.con.execute(f"DELETE FROM {table} WHERE post_id >= ?", [n_posts])
        self.con.execute("COMMIT")

    def last_round(self) -> int:
        """The last round fully committed (0 if none)."""
        value = self.con.execute("SELECT max(round) FROM rounds").fetchone()[0]
        return int(value) if value is not None else 0

    def close(self) -> None:
        """Checkpoint the WAL into the file and close."""
        self.con.execute("CHECKPOINT")
        self.con.close()

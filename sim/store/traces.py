"""What is asked of a run after it ran, kept in the run's own trajectory file: the
analyst's reports with their whole traces, and batch interviews.

Tables (created the first time something is asked; a run never asked has none):

    analysis_runs      one row per `shoal analyse`: question, runs compared, model, plan,
                       status, counts of claims and unverified claims, tokens and cost
    analysis_sections  one row per section and attempt: status, the text, tool calls made
    analysis_steps     every step of every attempt, in order: the model's messages, each
                       tool call (`call`: the number a sentence cites as [step N]) with
                       its arguments and the hash of its result, the verifier's verdicts
    analysis_results   tool results exactly as the model was given them (bounded by the
                       analyst's limits), stored once per distinct content (by hash) and
                       referenced from steps
    analysis_claims    one row per sentence of a finished section: its citations, the
                       verifier's verdict and the evidence rows it checked
    interviews         one row per agent asked: round, question, answer, the hash of the
                       exact context it was asked in, tokens and cost

Every write is one transaction on a connection opened for it and closed after, so the
analyst's readers (which open the same file read-only) never meet a writer's connection.
Deleting an analysis deletes its runs, sections, steps and claims rows, and the results no
other step references, in one transaction.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from shoal.core.errors import InputError
from shoal.store.lineage import held_by_writer
from shoal.store.tables import TABLES, TableSpec
from shoal.store.trajectory import connect


def _declare(name: str, columns: str, owner: str, doc: str, volatile: tuple[str, ...] = ()
             ) -> TableSpec:
    """What is asked of a run belongs to that run alone: not cut on resume (it was asked
    of rounds the run keeps), not inherited by forks, created the first time."""
    return TABLES.declare(TableSpec(name, " ".join(columns.split()), owner, doc,
                                    round_key=None, lineage="none", created="on_demand",
                                    volatile=volatile))


ANALYSIS = (
    _declare("analysis_runs", """
        analysis_id VARCHAR, created_at TIMESTAMP, finished_at TIMESTAMP, question VARCHAR,
        compare VARCHAR[], provider VARCHAR, model VARCHAR, status VARCHAR, plan JSON,
        sections INTEGER, claims INTEGER, unverified INTEGER, prompt_tokens BIGINT,
        completion_tokens BIGINT, cost_usd DOUBLE, error VARCHAR""", "analyst",
        "One row per `shoal analyse`.", ("analysis_id", "created_at", "finished_at")),
    _declare("analysis_sections", """
        analysis_id VARCHAR, section_id VARCHAR, position INTEGER, title VARCHAR,
        brief VARCHAR, attempt INTEGER, status VARCHAR, text VARCHAR, tool_calls INTEGER,
        started_at TIMESTAMP, finished_at TIMESTAMP, error VARCHAR""", "analyst",
        "One row per section and attempt.", ("analysis_id", "started_at", "finished_at")),
    _declare("analysis_steps", """
        analysis_id VARCHAR, section_id VARCHAR, attempt INTEGER, step INTEGER,
        kind VARCHAR, call INTEGER, name VARCHAR, arguments JSON, content VARCHAR,
        result_hash VARCHAR, result_chars BIGINT, status VARCHAR, prompt_tokens BIGINT,
        completion_tokens BIGINT, cost_usd DOUBLE, latency_ms DOUBLE,
        created_at TIMESTAMP""", "analyst", "Every step of every attempt, in order.",
        ("analysis_id", "latency_ms", "created_at")),
    _declare("analysis_results", "result_hash VARCHAR, content VARCHAR", "analyst",
             "Tool results as the model was given them, once per distinct content."),
    _declare("analysis_claims", """
        analysis_id VARCHAR, section_id VARCHAR, attempt INTEGER, claim INTEGER,
        paragraph INTEGER, sentence VARCHAR, citations JSON, verdict VARCHAR,
        detail VARCHAR, evidence JSON""", "analyst",
        "One row per sentence of a finished section, with its verdict.", ("analysis_id",)),
    _declare("interviews", """
        batch_id VARCHAR, asked_at TIMESTAMP, round INTEGER, agent INTEGER,
        question VARCHAR, answer VARCHAR, status VARCHAR, error VARCHAR,
        context_hash VARCHAR, context_tokens INTEGER, provider VARCHAR, model VARCHAR,
        prompt_tokens BIGINT, completion_tokens BIGINT, cost_usd DOUBLE,
        latency_ms DOUBLE""", "interviews", "One row per agent asked.",
        ("batch_id", "asked_at", "latency_ms")),
)
ANALYSIS_TABLES = tuple(s.name for s in ANALYSIS if s.owner == "analyst")
DDL = "".join(s.ddl(if_not_exists=True) for s in ANALYSIS)
# Results no step references any more (results are shared between analyses by hash).
_ORPHANS = ("DELETE FROM analysis_results WHERE result_hash NOT IN (SELECT result_hash FROM "
            "analysis_steps WHERE result_hash IS NOT NULL)")
# Verdicts that count as unverified claims (docs/analyst.md).
UNVERIFIED = ("unresolved", "unsupported", "uncited")


def content_hash(text: str) -> str:
    """The key a tool result is stored under."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class AnalysisStore:
    """Writes to a run's analysis and interview tables, one transaction per call: on a
    connection opened for it and closed after, or on a cursor of `con` (a process that
    holds the file open for a whole analysis)."""

    def __init__(self, db: str | Path, con: duckdb.DuckDBPyConnection | None = None):
        self.db = Path(db)
        self.con = con
        self._ready = False  # the tables exist (checked once per store)

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection with the tables created, in a transaction committed on exit (rolled
        back, and the error raised, if the block fails)."""
        con = self.con.cursor() if self.con is not None else open_for_writing(self.db)
        try:
            con.execute("BEGIN")
            if not self._ready:
                con.execute(DDL)
            yield con
            con.execute("COMMIT")
            self._ready = True
        except BaseException as exc:
            with suppress(duckdb.Error):  # nothing to roll back if BEGIN itself failed
                con.execute("ROLLBACK")
            if isinstance(exc, duckdb.Error) and held_by_writer(exc):
                # another process writes the file (an analysis holding it, a run): its
                # commit took the lock this one needs
                raise InputError(f"{self.db}: in use by another process (an analysis or "
                                 "a run writing it); ask again when it has finished"
                                 ) from None
            raise
        finally:
            con.close()

    def insert(self, table: str, rows: Iterable[dict[str, Any]]) -> None:
        """Append rows (dicts keyed by column) to a table."""
        rows = list(rows)
        if not rows:
            return
        with self.transaction() as con:
            _insert(con, table, rows)

    def add_step(self, step: dict[str, Any], result: str | None = None) -> None:
        """Append a step; `result` (a tool's full output) is stored once by its hash."""
        with self.transaction() as con:
            if result is not None:
                key = content_hash(result)
                step = {**step, "result_hash": key, "result_chars": len(result)}
                row = con.execute("SELECT count(*) FROM analysis_results WHERE "
                                  "result_hash = ?", [key]).fetchone()
                assert row is not None  # count(*) always returns one row
                known = row[0]
                if not known:
                    _insert(con, "analysis_results", [{"result_hash": key,
                                                       "content": result}])
            _insert(con, "analysis_steps", [step])

    def update(self, table: str, key: dict[str, Any], values: dict[str, Any]) -> None:
        """Set `values` on the rows of `table` matching `key`."""
        with self.transaction() as con:
            _update(con, table, key, values)

    def finish_section(self, key: dict[str, Any], values: dict[str, Any],
                       claims: list[dict[str, Any]]) -> None:
        """A section's final row and its claims, together."""
        with self.transaction() as con:
            _update(con, "analysis_sections", key, values)
            _insert(con, "analysis_claims", claims)

    def interrupted(self, question: str | None, compare: list[str], provider: str,
                    model: str) -> str | None:
        """The newest analysis asking the same of the run (question, runs compared, model)
        that was interrupted (Ctrl-C) or is still marked running: called by a process that
        holds the file, so its writer is gone."""
        with self.transaction() as con:
            row = con.execute(
                "SELECT analysis_id FROM analysis_runs WHERE status IN ('running', "
                "'interrupted') AND "
                "question IS NOT DISTINCT FROM ? AND compare = ?::VARCHAR[] AND "
                "provider = ? AND model = ? ORDER BY created_at DESC LIMIT 1",
                [question, compare, provider, model]).fetchone()
        return None if row is None else str(row[0])

    def discard_attempts(self, analysis_id: str, attempts: list[tuple[str, int]]) -> None:
        """Delete section attempts that never finished (their rows, steps and claims), the
        interview answers no remaining step cites, and results no step references."""
        with self.transaction() as con:
            for section, attempt in attempts:
                for spec in ANALYSIS:
                    if "attempt" in spec.column_names:
                        con.execute(f"DELETE FROM {spec.name} WHERE analysis_id = ? AND "
                                    "section_id = ? AND attempt = ?",
                                    [analysis_id, section, attempt])
            con.execute(
                "DELETE FROM interviews WHERE starts_with(batch_id, $id || '-') AND NOT "
                "EXISTS (SELECT 1 FROM analysis_steps s JOIN analysis_results r USING "
                "(result_hash) WHERE s.analysis_id = $id AND "
                "contains(r.content, interviews.batch_id))", {"id": analysis_id})
            con.execute(_ORPHANS)

    def delete(self, analysis_id: str) -> int:
        """Delete an analysis and its whole trace; the number of step rows deleted."""
        with self.transaction() as con:
            row = con.execute("SELECT count(*) FROM analysis_runs WHERE analysis_id = ?",
                              [analysis_id]).fetchone()
            assert row is not None  # count(*) always returns one row
            found = row[0]
            if not found:
                raise InputError(f"no analysis {analysis_id!r} in {self.db}")
            row = con.execute("SELECT count(*) FROM analysis_steps WHERE analysis_id = ?",
                              [analysis_id]).fetchone()
            assert row is not None  # count(*) always returns one row
            steps = row[0]
            for spec in ANALYSIS:  # (results are shared between analyses: below)
                if "analysis_id" in spec.column_names:
                    con.execute(f"DELETE FROM {spec.name} WHERE analysis_id = ?",
                                [analysis_id])
            con.execute(_ORPHANS)
        return int(steps)


def open_for_writing(db: str | Path, patience_s: float = 30.0) -> duckdb.DuckDBPyConnection:
    """A read-write connection, waiting while another process (a notebook, a report)
    has the file open read-only: a write must not fail because someone is looking."""
    deadline = time.monotonic() + patience_s
    delay = 0.05
    while True:
        try:
            return duckdb.connect(str(db))
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                return connect(db)  # raises the InputError that says who holds it
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    cols = list(rows[0])
    marks = ", ".join("?" for _ in cols)
    con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})",
                    [[_value(r.get(c)) for c in cols] for r in rows])


def _update(con: duckdb.DuckDBPyConnection, table: str, key: dict[str, Any],
            values: dict[str, Any]) -> None:
    sets = ", ".join(f"{c} = ?" for c in values)
    where = " AND ".join(f"{c} = ?" for c in key)
    con.execute(f"UPDATE {table} SET {sets} WHERE {where}",
                [*map(_value, values.values()), *key.values()])


def _value(v: Any) -> Any:
    """Dicts go to JSON columns as text."""
    return json.dumps(v) if isinstance(v, dict) else v


def read_tables(db: str | Path | duckdb.DuckDBPyConnection, tables: Iterable[str],
                where: str = "", params: list[Any] | None = None) -> dict[str, pd.DataFrame]:
    """The named analysis tables of a trajectory file, or of a connection holding it
    (empty frames for those never written), filtered by `where`."""
    out = {}
    if isinstance(db, duckdb.DuckDBPyConnection):
        con = db.cursor()
    elif not Path(db).is_file():
        raise InputError(f"{db}: no trajectory file")
    else:
        con = connect(db, read_only=True)
    try:
        present = {r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = "
            "current_database()").fetchall()}
        for table in tables:
            if table in present:
                sql = f"SELECT * FROM {table} {where}"
                out[table] = con.execute(sql, params or []).df()
            else:
                out[table] = _empty(table)
    finally:
        con.close()
    return out


def _empty(table: str) -> pd.DataFrame:
    con = duckdb.connect()
    try:
        con.execute(DDL)
        return con.execute(f"SELECT * FROM {table}").df()
    finally:
        con.close()

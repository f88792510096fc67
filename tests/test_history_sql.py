"""The read-only SQL over a run's history (shoal.store.history_sql): what it refuses, what
it lets through (PIVOT and UNPIVOT read), that it never shows where the files live, and
its limits (rows, columns, long values, time, memory, cancellation)."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest
import yaml

from shoal.store.history_sql import (
    Cancel,
    Limits,
    SQLError,
    attach_history,
    bound_connection,
    check_select,
    query_history,
    select_rows,
)
from tests.conftest import CONFIGS
from tests.helpers import make_config, run_config

RUNAWAY = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
           "SELECT count(*) FROM r")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """The quick start shrunk to 40 agents and 3 rounds."""
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data["population"]["size"] = 40
    data["activity"]["min_active"] = 5
    out = tmp_path_factory.mktemp("history_sql") / "runs"
    return run_config(make_config(data, out, rounds=3)).dir.root


@pytest.fixture
def con(run):
    """An in-memory connection with the run's history attached (as the analyst's)."""
    c = duckdb.connect()
    attach_history(c, run)
    yield c
    c.close()


def test_pivot_and_unpivot_read_and_are_allowed(run):
    """issue 26 item 14: PIVOT (with or without an IN list) and UNPIVOT only read."""
    pivot = query_history(run, "PIVOT (SELECT round, topic, position FROM beliefs) "
                               "ON topic USING avg(position) ORDER BY round")
    assert pivot.columns[0] == "round" and len(pivot.columns) == 3
    assert [r[0] for r in pivot.rows] == [0, 1, 2, 3]
    listed = query_history(run, "SELECT * FROM (PIVOT beliefs ON topic IN ('carbon_tax') "
                                "USING count(*) GROUP BY round) ORDER BY round")
    assert len(listed.rows) == 4
    unpivot = query_history(run, "UNPIVOT (SELECT agent, position, confidence FROM beliefs "
                                 "WHERE round = 0) ON position, confidence INTO NAME what "
                                 "VALUE v")
    assert unpivot.columns == ["agent", "what", "v"] and unpivot.truncated
    # a PIVOT that writes is still refused
    for bad in ("CREATE TABLE x AS PIVOT beliefs ON topic USING count(*)",
                "PIVOT beliefs ON topic USING count(*); DROP TABLE beliefs"):
        with pytest.raises(SQLError):
            check_select(bad)


@pytest.mark.parametrize("sql", [
    "SELECT * FROM duckdb_databases()",
    "SELECT path FROM duckdb_databases",
    "SELECT * FROM duckdb_settings()",
    'SELECT * FROM "duckdb_settings"()',
    "SELECT * FROM system.main.duckdb_temporary_files()",
    "SELECT current_setting('temp_directory')",
    "SELECT 'temp_directory'.current_setting()",
    "SELECT * FROM pragma_database_list",
    "SELECT * FROM pg_catalog.pg_settings",
    "SELECT getenv('HOME')",
    "SELECT * FROM query('SELECT * FROM duckdb_databases()')",
    "SELECT * FROM duckdb_extensions()",
    "SELECT * FROM glob('*')",
    "SELECT * FROM checkpoint()",
])
def test_catalog_functions_that_show_paths_are_refused(run, sql):
    """issue 26 item 14: the SQL tool sees the run's data, not where it lives."""
    with pytest.raises(SQLError, match="not available"):
        query_history(run, sql)


def test_no_result_or_error_shows_a_path(run, con):
    """issue 26 item 14: what is allowed of the catalog (information_schema, SHOW) and
    the errors a query can meet name no directory of the run."""
    queries = ["SHOW DATABASES", "SELECT * FROM information_schema.schemata",
               "SELECT * FROM information_schema.tables", "SELECT current_database()",
               "SELECT * FROM no_such_table", "SELECT * FROM 'trajectory.duckdb'"]
    seen = []
    for sql in queries:
        try:
            seen.append(str(select_rows(con, sql).as_dict()))
        except SQLError as exc:
            seen.append(str(exc))
    text = "\n".join(seen)
    for part in (str(run), str(run.parent), str(Path.home())):
        assert part not in text


def test_rows_columns_and_long_values_are_cut_with_a_note(run):
    """issue 26 item 3: a result is bounded in rows, columns and characters, and says
    so; numbers and short values come back as they are."""
    many = query_history(run, "SELECT * FROM range(100000)", limits=Limits(rows=50))
    assert len(many.rows) == 50 and many.truncated and "first 50 rows" in many.note
    long = query_history(run, "SELECT repeat('x', 5000000) AS big, 7 AS n, 'ok' AS s, "
                              "[1, 2] AS l, range(0, 100000) AS biglist",
                         limits=Limits(cell_chars=100))
    big, n, s, small_list, big_list = long.rows[0]
    assert big == "x" * 100 + "…" and n == 7 and s == "ok" and small_list == [1, 2]
    assert isinstance(big_list, str) and len(big_list) == 101 and big_list.endswith("…")
    assert "2 values longer than 100 characters are cut" in long.note
    wide = query_history(run, "SELECT " + ", ".join(f"{i} AS c{i}" for i in range(30)),
                         limits=Limits(columns=10))
    assert len(wide.columns) == 10 and "first 10 of 30 columns" in wide.note
    plain = query_history(run, "SELECT 1.5::DECIMAL(4, 2) AS d, DATE '2026-01-02' AS day, "
                               "INTERVAL 1 DAY AS i")
    assert plain.rows == [[1.5, "2026-01-02", "1 day, 0:00:00"]] and plain.note == ""


def test_a_whole_answer_is_bounded_in_characters_and_names(run):
    """Each limit alone allowed 1,000 rows x 100 columns x 2,000 characters (200 MB from
    one short request, found by a hostile sweep of `shoal serve`): rows stop before the
    answer passes `Limits.chars`, and a column's name is cut like a value."""
    cols = ", ".join(f"repeat('<', 2000) AS c{i}" for i in range(100))
    wide = query_history(run, f"SELECT {cols} FROM range(1000)", limits=Limits(rows=1000))
    assert len(wide.rows) == Limits().chars // 200_000 and wide.truncated
    assert "budget of 2,000,000 characters" in wide.note
    named = query_history(run, f'SELECT 1 AS "{"n" * 5000}"', limits=Limits(cell_chars=100))
    assert named.columns == ["n" * 100 + "…"] and named.rows == [[1]]


def test_a_runaway_query_is_interrupted_at_the_timeout(run):
    """issue 26 item 3: a recursive CTE that never ends, and a cross join, are stopped at
    the query timeout and reported as such."""
    for sql in (RUNAWAY, "SELECT count(*) FROM range(1000000) a, range(1000000) b"):
        with pytest.raises(SQLError, match=r"stopped after 0.5 s"):
            query_history(run, sql, limits=Limits(timeout_s=0.5))
    # a query that ends in time runs normally (a timeout it cannot reach even on a loaded
    # machine: 0.5 s would race the attach and DESCRIBE that run under the same timer)
    assert query_history(run, "SELECT 1", limits=Limits(timeout_s=60)).rows == [[1]]


def test_cancel_interrupts_a_running_query_and_refuses_later_ones(con):
    """issue 26 item 3: a section's deadline (or Ctrl-C) stops its query in flight."""
    cancel = Cancel()
    failure: list[Exception] = []

    def work() -> None:
        try:
            select_rows(con, RUNAWAY, cancel=cancel)
        except SQLError as exc:
            failure.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    while not cancel._cursors and worker.is_alive():  # the query is under way
        worker.join(0.02)
    cancel.cancel("the section's deadline passed")
    worker.join()
    assert "stopped: the section's deadline passed" in str(failure[0])
    with pytest.raises(SQLError, match="not run: the section's deadline passed"):
        select_rows(con, "SELECT 1", cancel=cancel)


def test_memory_limit_stops_a_query_that_needs_more(con):
    """issue 26 item 3: with a memory limit (and no room to spill), a query that builds
    a huge value fails with an error saying so, and the connection still works."""
    bound_connection(con, memory_mb=100, temp_mb=0, threads=1)
    with pytest.raises(SQLError, match="more memory than the limit"):
        select_rows(con, "SELECT list(range) AS l FROM range(300000000)")
    assert select_rows(con, "SELECT count(*) FROM beliefs").rows[0][0] > 0


def test_writes_and_other_statements_are_refused(run):
    """The guard of one SELECT (its escapes are refused as before)."""
    for bad in ("DELETE FROM posts", "SELECT 1; SELECT 2", "ATTACH 'x.db' AS x",
                "COPY posts TO 'x.csv'", "SET enable_external_access = true",
                "SELECT * FROM read_csv('/etc/passwd')", "INSTALL httpfs",
                "SELECT 1) UNION (SELECT 2"):
        with pytest.raises(SQLError):
            query_history(run, bad)
    assert query_history(run, "SELECT 1 AS one -- a comment").rows == [[1]]

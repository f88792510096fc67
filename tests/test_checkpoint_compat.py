"""A run written by an earlier release still resumes and forks.

tests/data/format4_run/ holds a run made by Shoal 0.1 (checkpoint format 4) from
tests/data/format4_run.yaml and stopped after round 3 of 6 (make_fixture.py beside it).
Resuming it, or forking it, must give the same tables as doing the same with a run made
by this release.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shoal.cli.main import main
from tests.golden import run_digests

DATA = Path(__file__).parent / "data"
CONFIG = DATA / "format4_run.yaml"


@pytest.fixture
def old_run(tmp_path) -> Path:
    """A copy of the fixture run (resume and fork write into it and beside it)."""
    (src,) = [p for p in (DATA / "format4_run").iterdir() if p.is_dir()]
    dst = tmp_path / "old" / src.name
    shutil.copytree(src, dst)
    return dst


@pytest.fixture
def new_run(tmp_path) -> Path:
    """The same config run to the end by this release, with the belief rule's parameters of
    the release that made the fixture (the defaults have been calibrated since; the old run
    keeps its own, see shoal.config.upgrade_saved)."""
    out = tmp_path / "new"
    assert main(["run", str(CONFIG), "--out", str(out), "--quiet", "--set",
                 "beliefs.update={rule: social_influence, rate: 0.08, anchor: 0}"]) == 0
    (run,) = out.iterdir()
    return run


def read_sql(run: Path, sql: str):
    """A query's rows in canonical order (sorted by every column)."""
    import duckdb

    con = duckdb.connect(str(run / "trajectory.duckdb"), read_only=True)
    try:
        df = con.sql(sql).df()
    finally:
        con.close()
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def _differ(a: Path, b: Path) -> list[str]:
    da, db = run_digests(a / "trajectory.duckdb"), run_digests(b / "trajectory.duckdb")
    return sorted(t for t in da.keys() | db.keys() if da.get(t) != db.get(t))


def test_an_old_run_resumes_to_the_same_tables(old_run, new_run):
    assert main(["resume", str(old_run), "--quiet"]) == 0
    # The contexts of the rounds the old release ran are its own (the sections have been
    # reordered for prefix caching since); those of the rounds after the resume match.
    assert _differ(old_run, new_run) in ([], ["context"])
    after = "SELECT * FROM context WHERE round > 3"
    assert read_sql(old_run, after).equals(read_sql(new_run, after))


def test_an_old_run_forks_like_a_new_one(old_run, new_run, tmp_path):
    what_if = tmp_path / "what_if.yaml"
    what_if.write_text("- {kind: beliefs, round: 3, topic: nuclear_power, set: 0.9}\n")
    forks = []
    for parent in (old_run, new_run):
        out = tmp_path / f"forks-{parent.parent.name}"
        assert main(["fork", str(parent), "--round", "2", "--intervene", str(what_if),
                     "--out", str(out), "--quiet"]) == 0
        (fork,) = out.iterdir()
        forks.append(fork)
    assert _differ(*forks) == []


def test_an_old_run_forks_in_memory_and_saves(old_run, tmp_path):
    """Tables the old release did not write (e.g. profile_fixes) have no rows to carry:
    an in-memory fork of the resumed old run runs, reads and saves."""
    from shoal import Simulation, open_run

    with Simulation.resume(old_run) as sim:
        fork = sim.fork(2)
        fork.run(2)
        assert sorted(open_run(fork).beliefs["round"].unique())[-1] == 4
        saved = fork.save(tmp_path / "saved" / "fork")
        fork.close()
    assert main(["resume", str(saved), "--quiet"]) == 0


def test_the_history_sql_of_a_fork_of_an_old_run_reads_every_table(old_run, tmp_path):
    """The old parent's files lack columns added since (rounds.prefix_reuse, ...): the
    history views take each file's columns by name (NULL where it has none), as the
    notebook's read_table does, instead of refusing a union of unequal rows."""
    import duckdb

    from shoal import open_run
    from shoal.store.history_sql import CATALOG, attach_history
    from shoal.store.tables import file_tables

    assert main(["fork", str(old_run), "--round", "2", "--out", str(tmp_path / "forks"),
                 "--quiet"]) == 0
    (fork,) = (tmp_path / "forks").iterdir()
    con = duckdb.connect()
    attach_history(con, fork)
    run = open_run(fork)
    own = duckdb.connect(str(fork / "trajectory.duckdb"), read_only=True)
    tables = [t for t, spec in file_tables(own).items() if spec.lineage != "none"]
    own.close()
    assert "rounds" in tables and "exposures" in tables
    for table in tables:
        rows = con.execute(f"SELECT count(*) FROM {CATALOG}.{table}").fetchall()[0][0]
        assert rows == len(run.table(table)), table
    old = con.execute(f"SELECT prefix_reuse FROM {CATALOG}.rounds WHERE round <= 2"
                      ).fetchall()
    assert old and all(v is None for (v,) in old)
    con.close()

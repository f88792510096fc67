"""Test helpers: run a config to completion, read and compare trajectory tables."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd

from sim.config import Config, parse_config
from sim.runs.simulation import Simulation

# Columns that legitimately differ between two runs of the same config.
VOLATILE = {"rounds": ["ms_schedule", "ms_observe", "ms_context", "ms_decide", "ms_apply",
                       "ms_update", "ms_log", "wall_time", "driver_cpu_ms",
                       "driver_cpu_ms_per_llm_turn"],
            # The loopback server listens on a fresh port each run; latency and waits for
            # endpoint limits are wall time; what a server has in its prefix cache depends
            # on what it was asked before, by every agent, in whatever order they came.
            "llm_calls": ["base_url", "latency_ms", "wait_ms", "cached_tokens"]}
COMPARED = ("agents", "posts", "post_stances", "actions", "exposures", "beliefs", "trust",
            "follows", "rounds", "topics", "interventions", "memory", "context", "llm_calls",
            "markets", "prices", "trades", "positions", "market_bridge", "market_books",
            "forecasts", "payouts", "graph_episodes", "graph_entities", "graph_relations",
            "graph_withdrawals", "graph_communities", "graph_community_members")


def make_config(data: dict, out: Path, **overrides) -> Config:
    """A validated Config from a mapping, writing runs under `out`."""
    data = {**data, **overrides}
    data["output"] = {**data.get("output", {}), "dir": str(out)}
    return parse_config(data)


def run_config(cfg: Config) -> Simulation:
    """Create and run a config to the end (in its run directory); returns it closed."""
    with Simulation.create(cfg) as sim:
        sim.run()
    return sim


def query(db: Path, sql: str) -> list[tuple]:
    """Rows of a query on a trajectory file (opened read-only, then closed)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def fork_plan(intervene: Path | None = None, **plan):
    """A ForkPlan (`plan`: its fields), with the entries of an `--intervene` file added."""
    from sim.runs.fork_plan import ForkPlan, load_interventions

    if intervene is not None:
        plan.update(interventions=load_interventions(Path(intervene)), source=str(intervene))
    return ForkPlan(**plan)


def fork_and_run(parent: Path, fork_round: int, out: Path | None = None,
                 name: str | None = None, **plan) -> Path:
    """Fork `parent` (into its own output folder), run the fork, return its directory.
    `plan`: `intervene` (a file) and the fields of a ForkPlan (sets, seed, schedule)."""
    from sim.runs.fork import fork_run

    with fork_run(parent, fork_round, fork_plan(**plan), out=out, name=name) as sim:
        sim.run()
    return sim.dir.root


def read_table(db: Path, table: str) -> pd.DataFrame:
    """A whole table, sorted by all its columns, volatile columns dropped."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return _canonical(con, table)
    finally:
        con.close()


def _canonical(con: duckdb.DuckDBPyConnection, table: str) -> pd.DataFrame:
    df = con.sql(f"SELECT * FROM {table}").df()
    df = df.drop(columns=VOLATILE.get(table, []))
    for col in df.columns:  # enums come back as categoricals, lists as arrays
        if isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = df[col].astype(str)
        elif df[col].dtype == object:
            df[col] = df[col].map(lambda v: repr(list(v)) if hasattr(v, "__len__")
                                  and not isinstance(v, str) else v)
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def tables_differ(db_a: Path, db_b: Path) -> list[str]:
    """Names of the compared tables whose contents differ (each file opened once)."""
    cons = [duckdb.connect(str(db), read_only=True) for db in (db_a, db_b)]
    try:
        return [t for t in COMPARED
                if not _canonical(cons[0], t).equals(_canonical(cons[1], t))]
    finally:
        for con in cons:
            con.close()


def run_cli(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """`shoal ARGS` in a fresh process (its output captured)."""
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **(env or {})})


def kill_then_resume(config: Path, out: Path, fault: str) -> Path:
    """Run `config` into `out` with SIGKILL at the crash point `fault` (e.g. mid_round:6),
    then `shoal resume` it to the end; returns the run directory."""
    killed = run_cli(["run", str(config), "--out", str(out), "--quiet"],
                     env={"SHOAL_FAULT": fault})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (run_dir,) = out.iterdir()
    resumed = run_cli(["resume", str(run_dir), "--quiet"])
    assert resumed.returncode == 0, resumed.stderr
    return run_dir


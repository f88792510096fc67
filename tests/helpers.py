"""Test helpers: run a config to completion, read and compare trajectory tables."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import pandas as pd

from shoal.config import Config, parse_config
from shoal.runs.simulation import Simulation
from shoal.store.tables import TableSpec, file_tables
from shoal.testing import canonical, differing_tables


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
    from shoal.runs.fork_plan import ForkPlan, load_interventions

    if intervene is not None:
        plan.update(interventions=load_interventions(Path(intervene)), source=str(intervene))
    return ForkPlan(**plan)


def fork_and_run(parent: Path, fork_round: int, out: Path | None = None,
                 name: str | None = None, **plan) -> Path:
    """Fork `parent` (into its own output folder), run the fork, return its directory.
    `plan`: `intervene` (a file) and the fields of a ForkPlan (sets, seed, schedule)."""
    from shoal.runs.fork import fork_run

    with fork_run(parent, fork_round, fork_plan(**plan), out=out, name=name) as sim:
        sim.run()
    return sim.dir.root


def read_table(db: Path, table: str) -> pd.DataFrame:
    """A whole table, sorted by all its columns, volatile columns dropped."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return canonical(con, file_tables(con)[table])
    finally:
        con.close()


def declared(db: Path) -> dict[str, TableSpec]:
    """The tables of a trajectory file with their declarations, read from the file."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return file_tables(con)
    finally:
        con.close()


# the conformance kit's comparison: every table of the files, volatile columns left out
tables_differ = differing_tables


def run_cli(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """`shoal ARGS` in a fresh process (its output captured)."""
    return subprocess.run([sys.executable, "-m", "shoal.cli", *args], capture_output=True,
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


@contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (e.g. "3m") mounted at `folder`/disk, to fill up: needs root, so
    the test is skipped without it; unmounted afterwards (lazily if still held)."""
    import pytest

    mount = folder / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                           str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def serve_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A server of `handler` on 127.0.0.1 for a fixture to yield from: its root URL
    (http://127.0.0.1:PORT), shut down when the fixture ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on, held bound (not listening) while the block
    runs: a port released at once can be taken by another process, or be the source port
    of a connect to itself (a TCP self-connect), and then something answers there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]

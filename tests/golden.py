"""Golden digests: one sha256 per trajectory table of the example configs.

They pin the engine's output while its code is reorganised: a refactor must leave every
digest unchanged (on both executors); a deliberate change of behaviour updates the file
and says why in its commit. Regenerate with

    .venv/bin/python -m tests.golden --write

A digest covers a whole table, rows in a canonical order (sorted by every column), without
the columns that legitimately differ between two runs of one config: timings, wall-clock
stamps, run ids and paths, the loopback server's port and what its prefix cache held.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import yaml

from shoal.store.tables import TableSpec, file_tables

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden_digests.json"

# Columns added after the digests were first pinned, left out of a digest while they are
# NULL in every row (runs without LLM agents have no prefix reuse), so the digests of
# those runs stay what they were.
LATER = {"rounds": ["prefix_reuse"]}
# Columns added after the digests were pinned that record something new about the same
# rows (the output mode a turn asked in; Shoal's own token count beside the server's):
# the digests pin what the runs produced before them, and the crash matrix and the
# resume/fork tests compare these columns like every other.
ADDED = {"llm_calls": ["output", "counted_prompt_tokens"]}


@dataclass(frozen=True)
class Case:
    """An example config run as it ships (`overrides`: only to make it small), and
    optionally forked with an intervention file."""

    name: str
    config: str
    overrides: tuple[str, ...] = ()
    fork_round: int | None = None
    intervene: str | None = None


CASES = (
    Case("quickstart", "configs/quickstart.yaml"),
    Case("llm_quickstart", "configs/llm_quickstart.yaml"),
    Case("workload_w", "bench/configs/workload_w.yaml", ("population.size=2000",)),
    *(Case(f"model_{p.stem}", f"configs/models/{p.name}")
      for p in sorted((ROOT / "configs" / "models").glob("*.yaml"))),
    Case("herd_effect_up", "configs/herd_effect.yaml", fork_round=10,
         intervene="configs/herd_effect/up.yaml"),
)


def table_digest(db: Path, table: str) -> str:
    """sha256 of a table's rows in canonical order, without the columns its declaration
    calls volatile. Rows are rendered by DuckDB (floats in their shortest exact form) and
    sorted as text."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return _digest(con, file_tables(con)[table])
    finally:
        con.close()


def _digest(con: duckdb.DuckDBPyConnection, spec: TableSpec) -> str:
    cols = [r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
        "ORDER BY ordinal_position", [spec.name]).fetchall()]
    empty = [c for c in LATER.get(spec.name, []) if c in cols and not con.execute(
        f'SELECT count("{c}") FROM {spec.name}').fetchone()[0]]
    empty += ADDED.get(spec.name, [])
    keep = ", ".join(f'"{c}"' for c in cols if c not in spec.volatile and c not in empty)
    (digest,) = con.execute(
        f"SELECT sha256(coalesce(string_agg(r, chr(10) ORDER BY r), '')) FROM "
        f"(SELECT CAST(ROW({keep}) AS VARCHAR) AS r FROM {spec.name})").fetchone()
    return digest


def run_digests(db: Path) -> dict[str, str]:
    """The digest of every table of one trajectory file (the tables read from the file)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {name: _digest(con, spec) for name, spec in file_tables(con).items()}
    finally:
        con.close()


# The driver's agent-wise phases split into many small ranges on 3 threads
# (shoal.core.workers): the tables must not change.
THREADED = ("executor.workers=3", "executor.worker_rows=7")


def run_case(case: Case, out: Path, executor: str = "local", threaded: bool = False
             ) -> dict[str, str]:
    """Run a case through the CLI into `out`; the digests of its (last) trajectory.
    `threaded`: with the driver's phases split over threads (`THREADED`)."""
    from shoal.cli.main import main

    args = ["run", str(ROOT / case.config), "--out", str(out), "--quiet",
            "--executor", executor]
    for item in (*case.overrides, *(THREADED if threaded else ())):
        args += ["--set", item]
    if executor == "ray":
        args += ["--shards", "2"]
    if main(args) != 0:
        raise RuntimeError(f"{case.name}: shoal run failed")
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    if case.fork_round is None:
        return run_digests(run_dir / "trajectory.duckdb")
    fork_args = ["fork", str(run_dir), "--round", str(case.fork_round), "--quiet",
                 "--intervene", str(ROOT / case.intervene), "--name", "golden-fork"]
    if main(fork_args) != 0:
        raise RuntimeError(f"{case.name}: shoal fork failed")
    (fork_dir,) = [p for p in out.iterdir() if p.name.startswith("golden-fork")]
    return run_digests(fork_dir / "trajectory.duckdb")


def load_golden() -> dict[str, dict[str, str]]:
    """The committed digests, by case and table."""
    return json.loads(GOLDEN.read_text())


def main(argv: list[str] | None = None) -> int:
    """Print (or with --write, store) the digests of every case on the local executor."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {GOLDEN}")
    parser.add_argument("--case", action="append", help="only these cases")
    args = parser.parse_args(argv)
    found = {}
    for case in CASES:
        if args.case and case.name not in args.case:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            found[case.name] = run_case(case, Path(tmp))
        print(case.name, file=sys.stderr)
    if args.write:
        merged = {**(load_golden() if GOLDEN.exists() and args.case else {}), **found}
        GOLDEN.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
    else:
        print(yaml.safe_dump(found, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

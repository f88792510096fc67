"""The writer's DuckDB transaction for one round of workload W, with DuckDB on 1, 2, 4, ...
threads: how the part of a round that runs beside the next one scales with cores.

    .venv/bin/python bench/writer.py                       # N = 1,000,000
    .venv/bin/python bench/writer.py --n 100000 --repeats 5

The writer commits round r while the driver computes round r+1, one round in flight
(shoal.store.writer), so a round can never be shorter than one transaction: once the
driver's work is spread over enough cores, the writer sets the pace. This bench runs W for
two rounds, keeps the tables the driver handed to the writer for round 2, and commits them
again into copies of the finished trajectory file, exactly as the writer does (one
transaction, `TrajectoryStore.insert` per table, then COMMIT), with DuckDB's `threads`
setting at k = 1, 2, 4, ... up to the machine's cores. Per k: the wall and CPU
milliseconds of the whole transaction (medians of --repeats), each table's insert and the
COMMIT (which writes and compresses the row groups), and the speed-up over k = 1.
Nothing else runs meanwhile. Results go to bench/results/writer-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

from shoal.config import load_config
from shoal.runs.simulation import Simulation
from shoal.store.trajectory import TrajectoryStore
from shoal.store.writer import RoundPayload

HERE = Path(__file__).resolve().parent


def round_payload(n: int, out: Path) -> tuple[RoundPayload, Path]:
    """Run W with `n` agents for two rounds into `out`: round 2's payload as the driver
    handed it to the writer, and the trajectory file."""
    cfg = load_config(HERE / "configs" / "workload_w.yaml",
                      [f"population.size={n}", "rounds=2", f"output.dir={out}"])
    sim = Simulation.create(cfg)
    writer = sim.driver().writer  # (the writer starts with the driver)
    kept: list[RoundPayload] = []
    submit = writer.submit

    def keep(payload: RoundPayload) -> None:
        if payload.round == 2:
            kept.append(payload)
        submit(payload)

    writer.submit = keep  # type: ignore[method-assign]
    try:
        sim.run()
        sim.writer.flush()
    finally:
        sim.close()
    return kept[0], sim.dir.db


def commit_once(payload: RoundPayload, db: Path, copy: Path, threads: int) -> dict:
    """Commit `payload`'s tables into a fresh copy of `db` with DuckDB on `threads`
    threads: wall and CPU ms of the transaction, and each step's wall ms."""
    shutil.copy(db, copy)
    store = TrajectoryStore(copy)
    try:
        store.con.execute(f"SET threads = {threads}")
        steps = {}
        cpu, wall = time.process_time(), time.perf_counter()
        store.con.execute("BEGIN TRANSACTION")
        for name, data in payload.tables.items():
            t = time.perf_counter()
            store.insert(name, data)
            steps[name] = 1e3 * (time.perf_counter() - t)
        t = time.perf_counter()
        store.con.execute("COMMIT")
        steps["COMMIT"] = 1e3 * (time.perf_counter() - t)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        store.close()
        copy.unlink()
    return {"wall_ms": 1e3 * wall, "cpu_ms": 1e3 * cpu, "steps_ms": steps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    threads, k = [], 1
    while k <= args.max_threads:
        threads.append(k)
        k *= 2
    with tempfile.TemporaryDirectory() as tmp:
        payload, db = round_payload(args.n, Path(tmp) / "run")
        rows = {name: data.num_rows for name, data in payload.tables.items()}
        runs: dict[int, list[dict]] = {k: [] for k in threads}
        for _ in range(args.repeats):  # alternated, so drift on the machine hits every k
            for k in threads:
                runs[k].append(commit_once(payload, db, Path(tmp) / "copy.duckdb", k))
    result = {"when": datetime.now().isoformat(timespec="seconds"), "cores": os.cpu_count(),
              "n": args.n, "rows": rows, "threads": {}}
    for k in threads:
        med = {key: statistics.median(r[key] for r in runs[k]) for key in ("wall_ms", "cpu_ms")}
        med["steps_ms"] = {s: statistics.median(r["steps_ms"][s] for r in runs[k])
                           for s in runs[k][0]["steps_ms"]}
        result["threads"][str(k)] = med
    one = result["threads"]["1"]["wall_ms"]
    print(f"W, N = {args.n:,}: one round's transaction, medians of {args.repeats}")
    print("threads  wall ms  CPU ms  speed-up  efficiency  largest steps (ms)")
    for k in threads:
        med = result["threads"][str(k)]
        med["speedup"] = one / med["wall_ms"]
        big = sorted(med["steps_ms"].items(), key=lambda kv: -kv[1])[:4]
        print(f"{k:>7}  {med['wall_ms']:>7.0f}  {med['cpu_ms']:>6.0f}  {med['speedup']:>7.2f}x"
              f"  {med['speedup'] / k:>10.2f}  "
              + ", ".join(f"{s} {ms:.0f}" for s, ms in big))
    out = HERE / "results" / f"writer-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Workload W with 1, 2, 4, ... workers: the rounds' speed and each phase's parallel
efficiency, beside the hand-written numpy baselines measured in the same run.

    .venv/bin/python bench/scaling.py                    # N = 100,000, 5 rounds
    .venv/bin/python bench/scaling.py --n 1000000 --rounds 5

k workers, for k = 1, 2, 4, ... up to the machine's cores: the in-process executor with k
driver threads (`executor.workers: k`: feeds, the inbox fan-out, belief updates and the
rule decisions in agent ranges, shoal.core.workers), and Ray with k shards and k driver
threads. For each the bench reads the `rounds` table: every phase's milliseconds
(schedule, observe, context, decide, apply, update, and log, which runs beside the next
round), medians over rounds 2..R (round 1 warms caches). A phase's parallel efficiency at
k workers is T(1) / (k · T(k)), T(1) that phase with one worker on the same executor: 1.0
is perfect scaling; 1/k means the phase did not get faster ("round": the whole round,
from the rounds' wall time). Agent-steps per second count that wall time, every table
logged. The baselines (bench/baselines/w_numpy.py, push and pull feeds) write
nothing. Results go to bench/results/scaling-<time>.json and are printed.

Each run also reports its CPU split (`RoundStats.cpu_ms`): per phase, the CPU the driver
spent outside agent ranges (serial) and inside them (on any thread), medians of rounds
2..R, and from it the speed-up Amdahl's law allows the driver's work at 2..16 workers
("amdahl"; measured on the one-worker run as well, so a small machine shows what a large
one could do).

"writer_share": per run, the writer's transaction (the `log` phase) over the round. The
writer commits one round while the driver computes the next, one round in flight, so a
round is never shorter than its commit: near 1, the writer sets the pace, and more
workers cannot help (bench/writer.py times the transaction alone on 1, 2, 4, ... DuckDB
threads).

With --pin (Linux) the run with k workers is held to k cores (CPUs 0..k-1: every thread of
this process, and the Ray processes it starts, which inherit the mask), the baselines to
one: strong scaling on cores, not only on driver threads. Unpinned, a one-worker run still
has every core for its writer thread and DuckDB's own threads.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from datetime import datetime
from pathlib import Path

import duckdb

from shoal.config import load_config
from shoal.runs.simulation import Simulation

HERE = Path(__file__).resolve().parent
PHASES = ("schedule", "observe", "context", "decide", "apply", "update", "log")
# the driver's phases whose CPU RoundStats splits into serial and agent ranges
# ("checkpoint": copying the round's state for the writer; "tables": building the round's
# Arrow tables before the writer takes them)
CPU_PHASES = ("schedule", "observe", "context", "decide", "apply", "update", "checkpoint",
              "tables")


def set_affinity(cpus: set[int]) -> None:
    """Every thread of this process on `cpus` (threads and processes started later inherit
    the mask of the thread that starts them)."""
    for tid in os.listdir("/proc/self/task"):
        with suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cpus)


@contextmanager
def pinned(k: int | None):
    """Within the block, this process on CPUs 0..k-1 (k None: unchanged)."""
    if k is None:
        yield
        return
    before = os.sched_getaffinity(0)
    set_affinity(set(sorted(before)[:k]))
    try:
        yield
    finally:
        set_affinity(before)


def run_w(n: int, rounds: int, executor: str, workers: int,
          overrides: tuple[str, ...] = (), pin: bool = False,
          around: Callable[[Simulation], AbstractContextManager] = nullcontext) -> dict:
    """One run of W with `workers` driver threads (and as many shards on Ray): its
    rounds' wall time and each phase's median milliseconds. `overrides` are config
    overrides (`path=value`) applied last; `pin`: on `workers` cores; `around(sim)`: a
    context entered once the world is built, left when the rounds' tables are written
    (bench/gil.py samples the rounds inside it)."""
    with tempfile.TemporaryDirectory() as out, pinned(workers if pin else None):
        cfg = load_config(HERE / "configs" / "workload_w.yaml",
                          [f"population.size={n}", f"rounds={rounds}",
                           f"executor.kind={executor}", f"executor.workers={workers}",
                           f"executor.shards={workers if executor == 'ray' else 1}",
                           f"output.dir={out}", *overrides])
        sim = Simulation.create(cfg)
        try:
            sim.driver()  # the executor (and Ray) start before the clock
            with around(sim):
                t = time.perf_counter()
                stats = sim.run()
                sim.writer.flush()
                seconds = time.perf_counter() - t
        finally:
            sim.close()
        con = duckdb.connect(str(sim.dir.db), read_only=True)
        try:
            rows = con.execute(f"SELECT {', '.join(f'ms_{p}' for p in PHASES)} FROM rounds "
                               "WHERE round >= 2 ORDER BY round").fetchall()
        finally:
            con.close()
    phases = {p: statistics.median(r[i] for r in rows) for i, p in enumerate(PHASES)}
    phases["round"] = 1e3 * seconds / rounds  # the whole round, every table logged
    later = [s.cpu_ms for s in stats if s.round >= 2]
    cpu = {p: [statistics.median(c.get(p, (0.0, 0.0))[i] for c in later) for i in (0, 1)]
           for p in CPU_PHASES}
    return {"executor": executor, "workers": workers, "n": n, "rounds": rounds,
            "seconds": seconds, "agent_steps_per_s": n * rounds / seconds,
            "phase_ms": phases, "cpu_ms": cpu}


def numpy_baseline(n: int, rounds: int, feed: str, pin: bool = False) -> dict:
    """bench/baselines/w_numpy.py, in its own process (one JSON line); `pin`: on one
    core."""
    with pinned(1 if pin else None):
        out = subprocess.run([sys.executable, str(HERE / "baselines" / "w_numpy.py"), "--n",
                              str(n), "--rounds", str(rounds), "--seed", "0", "--feed", feed,
                              "--repeat", "1"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def efficiency(rows: list[dict]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per executor, phase and worker count: T(1) / (k * T(k))."""
    out = {}
    for executor in ("local", "ray"):
        by_k = {r["workers"]: r for r in rows if r["executor"] == executor}
        if 1 not in by_k:
            continue
        one = by_k[1]["phase_ms"]
        out[executor] = {p: {str(k): (one[p] / (k * r["phase_ms"][p]) if r["phase_ms"][p]
                                      else None) for k, r in sorted(by_k.items())}
                         for p in (*PHASES, "round")}
    return out


def amdahl(run: dict, ks: tuple[int, ...] = (2, 4, 8, 16)) -> dict:
    """From one run's CPU split (per phase: serial ms, ms in agent ranges; medians of
    rounds 2..R): the serial fraction of the driver's work, and the speed-up of that work
    Amdahl's law allows with k workers, 1 / (s + (1 - s) / k). An upper bound: it assumes
    ranges share perfectly and leaves out the writer, which runs beside the next round
    (its DuckDB transaction parallelises on its own: bench/writer.py; `writer_share`)."""
    serial = sum(v[0] for v in run["cpu_ms"].values())
    ranges = sum(v[1] for v in run["cpu_ms"].values())
    s = serial / (serial + ranges) if serial + ranges else 0.0
    return {"serial_ms": serial, "ranges_ms": ranges, "serial_fraction": s,
            "speedup_bound": {str(k): 1 / (s + (1 - s) / k) for k in ks}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--executors", default="local,ray", help="comma-separated: local, ray")
    ap.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                    help="a config override for every Shoal run, e.g. "
                         "output.log_exposures=false (to time the phases without the "
                         "writer's largest table)")
    ap.add_argument("--pin", action="store_true",
                    help="hold the run with k workers to k cores, the baselines to one")
    args = ap.parse_args(argv)
    workers, k = [], 1
    while k <= args.max_workers:
        workers.append(k)
        k *= 2
    rows = []
    for executor in args.executors.split(","):
        for k in workers:
            rows.append(run_w(args.n, args.rounds, executor, k, tuple(args.set), args.pin))
            print(json.dumps(rows[-1]), flush=True)
    base = {feed: numpy_baseline(args.n, args.rounds, feed, args.pin)
            for feed in ("push", "pull")}
    print(json.dumps(base), flush=True)
    result = {"when": datetime.now().isoformat(timespec="seconds"), "cores": os.cpu_count(),
              "overrides": args.set, "pinned": args.pin,
              "runs": rows, "numpy": base, "efficiency": efficiency(rows),
              "amdahl": {f"{r['executor']}/{r['workers']}": amdahl(r) for r in rows},
              "over_numpy_push": {f"{r['executor']}/{r['workers']}": r["agent_steps_per_s"]
                                  / base["push"]["agent_steps_per_s"] for r in rows},
              # the writer's transaction over the round: near 1, the writer sets the pace
              # (one round in flight, so a round is never shorter than its commit)
              "writer_share": {f"{r['executor']}/{r['workers']}": r["phase_ms"]["log"]
                               / r["phase_ms"]["round"] for r in rows}}
    out = HERE / "results" / f"scaling-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("efficiency", "over_numpy_push", "amdahl",
                                             "writer_share")},
                     indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

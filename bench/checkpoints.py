"""Checkpoint size and time, and fork latency, against a replay baseline.

For N in {10k, 100k}: run the quick-start model (configs/quickstart.yaml) for R rounds,
read every round's checkpoint cost from its state metadata (bytes of log + state, ms to
write), then fork the run at round K = R/2 (restore the world, hard-link the checkpoint,
create the fork's directory: `sim.runs.fork.fork_run`, no rounds run) and compare with the
baseline a fork replaces: replaying rounds 1..K from scratch (the measured time of those
rounds in the parent run). Also the time `shoal resume` needs to restore the last round.

    .venv/bin/python bench/checkpoints.py            # ~2 minutes
    .venv/bin/python bench/checkpoints.py --quick    # 2k and 10k agents
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import duckdb

from sim.config import load_config
from sim.runs.fork import fork_run
from sim.runs.simulation import Simulation

ROOT = Path(__file__).resolve().parents[1]


def measure(n: int, rounds: int, out: Path) -> dict:
    """One size: run, checkpoint costs, fork latency, resume latency."""
    cfg = load_config(ROOT / "configs" / "quickstart.yaml",
                      [f"population.size={n}", f"rounds={rounds}", f"output.dir={out}"])
    run = Simulation.create(cfg)
    try:
        run.run()
    finally:
        run.close()
    store = run.dir.checkpoints
    metas = [store.meta(r) for r in store.available() if r > 0]
    per_round_kb = [(m["log_bytes"] + m["state_bytes"]) / 1e3 for m in metas]
    per_round_ms = [m["ms"] for m in metas]
    logs, states = store.size_bytes()
    con = duckdb.connect(str(run.dir.db), read_only=True)
    k = rounds // 2
    replay_s = con.execute(
        "SELECT sum(ms_schedule + ms_observe + ms_context + ms_decide + ms_apply + ms_update) "
        "/ 1e3 "
        "FROM rounds WHERE round <= ?", [k]).fetchone()[0]
    con.close()

    t = time.perf_counter()
    fork = fork_run(run.dir.root, k, out=out / "forks")
    fork_s = time.perf_counter() - t
    fork.close()

    t = time.perf_counter()
    resumed = Simulation.resume(run.dir.root)
    resume_s = time.perf_counter() - t
    resumed.close()
    return {
        "n": n, "rounds": rounds, "fork_round": k,
        "checkpoint_kb_per_round_median": statistics.median(per_round_kb),
        "checkpoint_kb_per_round_max": max(per_round_kb),
        "checkpoint_ms_per_round_median": statistics.median(per_round_ms),
        "logs_mb": logs / 1e6, "states_mb": states / 1e6,
        "db_mb": run.dir.db.stat().st_size / 1e6,
        "fork_s": fork_s, "replay_rounds_1_to_k_s": replay_s,
        "fork_over_replay": fork_s / replay_s, "resume_restore_s": resume_s,
    }


def main() -> None:
    """Measure both sizes and print one JSON line each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()
    sizes = [2_000, 10_000] if args.quick else [10_000, 100_000]
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(measure(n, args.rounds, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()

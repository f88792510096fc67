"""Rule-based throughput: agent-steps per second, DuckDB logging included.

Two parts, both measured in one run so the ratios compare like with like on this machine:

1. `model`: the quick-start model (configs/quickstart.yaml) at N = 1k, 10k, 100k agents on
   the in-process executor and on Ray (2 shards).
2. `w`: benchmark workload W (docs/workload_w.md) as a Shoal config
   (bench/configs/workload_w.yaml) at N = 100k, R = 5, against the baselines in
   bench/baselines (hand-written numpy, plain Python, idiomatic Mesa 3), none of which
   writes anything.

Timed: the R rounds, from the first round to the last commit (Shoal: scheduling, feeds,
decisions, apply, belief update, DuckDB transaction per round). Not timed: building round
0 (population, graph), starting Ray and its actors; the baselines likewise exclude building
their initial state. Each figure is the median of --repeat runs.

    .venv/bin/python bench/throughput.py                 # everything (~5 minutes)
    .venv/bin/python bench/throughput.py --part w        # only workload W
    .venv/bin/python bench/throughput.py --quick         # small sizes, for a smoke test
    .venv/bin/python bench/throughput.py --part large    # configs/large.yaml, once

`large` runs configs/large.yaml (a million agents, every table logged, a checkpoint per
round) once, with `--set`-style overrides from `--large-set`, and reports the setup time
(building round 0 and writing it) apart from the rounds, seconds per round, the peak RSS
per agent (the process's ru_maxrss, also sampled each second with what phase was
running), DuckDB bytes per agent-round and checkpoint bytes per round. A watchdog stops
the run (exit 3) if RSS passes `--rss-limit-gb`, reporting the peak so far.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import numpy as np

from shoal.config import load_config
from shoal.runs.simulation import Simulation

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MESA_PY = HERE / ".venv-mesa" / "bin" / "python"


def time_shoal(config: Path, overrides: list[str], repeat: int) -> dict:
    """Median wall time of the rounds of a Shoal run (setup and executor start excluded)."""
    times, last = [], None
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            cfg = load_config(config, [*overrides, f"output.dir={out}"])
            run = Simulation.create(cfg)
            try:
                run.driver()  # start the executor (and Ray) before the clock
                t = time.perf_counter()
                run.run()
                run.writer.flush()
                times.append(time.perf_counter() - t)
            finally:
                run.close()
            last = run.world
    n, r = last.n_agents, last.round
    x = np.sort(last.beliefs.position[:, 0])
    return {"impl": "shoal", "n": n, "rounds": r, "seconds": statistics.median(times),
            "all_seconds": times, "agent_steps_per_s": n * r / statistics.median(times),
            "clusters": int(1 + (np.diff(x) > 0.05).sum()),
            "mean_abs_x": float(np.abs(x).mean())}


def model_part(sizes: list[int], rounds: int, repeat: int) -> list[dict]:
    """The quick-start model at several sizes, local and Ray."""
    rows = []
    for n in sizes:
        for executor, shards in (("local", 1), ("ray", 2)):
            over = [f"population.size={n}", f"rounds={rounds}", f"executor.kind={executor}",
                    f"executor.shards={shards}"]
            row = time_shoal(ROOT / "configs" / "quickstart.yaml", over, repeat)
            row.update(part="model", executor=executor, shards=shards)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def baseline(script: str, python: Path, n: int, rounds: int, feed: str, repeat: int) -> dict:
    """One baseline implementation of W, as a subprocess printing one JSON line."""
    out = subprocess.run(
        [str(python), str(HERE / "baselines" / script), "--n", str(n), "--rounds",
         str(rounds), "--seed", "0", "--feed", feed, "--repeat", str(repeat)],
        capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def w_part(n: int, rounds: int, repeat: int, with_mesa: bool) -> list[dict]:
    """Workload W: Shoal (local, Ray) and the baselines, in the same run."""
    rows = []
    config = HERE / "configs" / "workload_w.yaml"
    for executor, shards in (("local", 1), ("ray", 2)):
        over = [f"population.size={n}", f"rounds={rounds}", f"executor.kind={executor}",
                f"executor.shards={shards}"]
        row = time_shoal(config, over, repeat)
        row.update(part="w", executor=executor, shards=shards, feed="push+pull")
        rows.append(row)
        print(json.dumps(row), flush=True)
    impls = [("w_numpy.py", Path(sys.executable)), ("w_plain.py", Path(sys.executable))]
    if with_mesa:
        if not MESA_PY.exists():
            subprocess.run([str(HERE / "baselines" / "setup_mesa_venv.sh")], check=True)
        impls.append(("w_mesa.py", MESA_PY))
    for script, python in impls:
        for feed in ("pull", "push"):
            row = baseline(script, python, n, rounds, feed, repeat)
            row["part"] = "w"
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _rss_gb() -> float:
    """This process's resident set now (Linux /proc), in GB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9


def large_part(overrides: list[str], out: Path, rss_limit_gb: float) -> dict:
    """configs/large.yaml once: setup, rounds, memory, bytes written (see the docstring)."""
    phase = {"now": "setup", "peaks": {}}

    def watch() -> None:
        while True:
            rss = _rss_gb()
            name = phase["now"]
            phase["peaks"][name] = max(phase["peaks"].get(name, 0.0), rss)
            if rss > rss_limit_gb:
                print(json.dumps({"part": "large", "stopped": f"RSS {rss:.1f} GB > "
                                  f"{rss_limit_gb} GB during {name}",
                                  "peaks_gb": phase["peaks"]}), flush=True)
                os._exit(3)
            time.sleep(1.0)

    threading.Thread(target=watch, daemon=True).start()
    cfg = load_config(ROOT / "configs" / "large.yaml", [*overrides, f"output.dir={out}"])
    t = time.perf_counter()
    run = Simulation.create(cfg)
    setup_s = time.perf_counter() - t
    setup_rss = _rss_gb()
    try:
        phase["now"] = "executor start"
        run.driver()
        step_s, rss_gb, duckdb_gb = [], [], []
        probe = run.trajectory.con.cursor()  # its own connection: the writer uses `con`
        t0 = time.perf_counter()
        for r in range(1, cfg.rounds + 1):
            phase["now"] = f"round {r}"
            t = time.perf_counter()
            run.step()
            step_s.append(time.perf_counter() - t)
            rss_gb.append(_rss_gb())
            duckdb_gb.append(probe.execute(
                "SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0] / 1e9)
        probe.close()
        phase["now"] = "last commit"
        run.writer.flush()
        rounds_s = time.perf_counter() - t0
    finally:
        run.close()
    n, rounds = run.world.n_agents, cfg.rounds
    store = run.dir.checkpoints
    cps = [store.meta(r) for r in store.available()]
    logs, states = store.size_bytes()
    db = run.dir.db.stat().st_size
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    return {
        "part": "large", "n": n, "rounds": rounds, "topics": len(cfg.topics),
        "setup_s": setup_s, "rounds_s": rounds_s, "s_per_round": rounds_s / rounds,
        "step_s": step_s, "agent_steps_per_s": n * rounds / rounds_s,
        "rss_gb_after_each_round": rss_gb, "duckdb_gb_after_each_round": duckdb_gb,
        "peak_rss_gb": peak_gb, "peak_rss_bytes_per_agent": peak_gb * 1e9 / n,
        "rss_after_setup_gb": setup_rss, "peak_rss_by_phase_gb": phase["peaks"],
        "db_bytes": db, "db_bytes_per_agent_round": db / (n * rounds),
        "checkpoint_bytes_by_round": {m["round"]: m["log_bytes"] + m["state_bytes"]
                                      for m in cps},
        "checkpoint_logs_bytes": logs, "checkpoint_states_bytes": states,
        "run_dir": str(run.dir.root),
    }


def main() -> None:
    """Run the parts asked for and save the rows under bench/results/."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["model", "w", "all", "large"], default="all")
    ap.add_argument("--large-set", action="append", default=[],
                    help="an override for --part large, e.g. population.size=100000")
    ap.add_argument("--rss-limit-gb", type=float, default=16.0)
    ap.add_argument("--out", type=Path, default=None,
                    help="where --part large writes its run, kept (default: a temporary "
                         "folder, removed)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--no-mesa", action="store_true", help="skip the Mesa baseline")
    args = ap.parse_args()
    sizes = [1000, 5000] if args.quick else [1000, 10_000, 100_000]
    n_w = 10_000 if args.quick else 100_000
    rows = []
    if args.part == "large":
        if args.out is not None:  # kept (e.g. to time a resume of it afterwards)
            rows.append(large_part(args.large_set, args.out, args.rss_limit_gb))
        else:
            with tempfile.TemporaryDirectory() as out:
                rows.append(large_part(args.large_set, Path(out), args.rss_limit_gb))
        print(json.dumps(rows[-1]), flush=True)
    if args.part in ("model", "all"):
        rows += model_part(sizes, rounds=10, repeat=args.repeat)
    if args.part in ("w", "all"):
        rows += w_part(n_w, rounds=5, repeat=args.repeat, with_mesa=not args.no_mesa)
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    meta = {"date": stamp, "machine": platform.platform(), "cpus": os.cpu_count(),
            "python": sys.version.split()[0], "repeat": args.repeat}
    path = results / f"throughput-{stamp}.json"
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"saved {path}")


if __name__ == "__main__":
    main()

"""Multi-node Ray overhead: the same rule-based run on the local executor, on a local Ray
instance with 2 shards, and on a three-node Ray cluster started on this machine
(tests/cluster.py: a head and two worker nodes, one CPU each) with `placement: spread`
(shards: auto, one per CPU: one per node).

Each leg runs in its own process (a process joins one Ray cluster only). Timed: each round,
from the start of the round to its end (decisions, apply, update, the round's DuckDB
transaction queued), and the last commit; not timed: building round 0 and starting the
executor (Ray, its actors), reported apart as `start_s`. The figure per leg is the median
over --repeat runs of the mean seconds per round.

On this 2-core machine a 3-node cluster cannot be faster than one process: the point is the
overhead of shipping each round's requests to actors on other raylets (other object
stores) and back.

    .venv/bin/python bench/cluster.py                 # quickstart, 10,000 agents, 5 rounds
    .venv/bin/python bench/cluster.py --n 1000 --repeat 1   # a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

LEGS = (  # name, executor overrides, on the test cluster
    ("local", ["executor.kind=local", "executor.shards=1"], False),
    ("ray_local_2", ["executor.kind=ray", "executor.shards=2"], False),
    ("cluster_3_spread", ["executor.kind=ray", "executor.shards=auto",
                          "executor.placement=spread"], True),
)


def one(config: str, overrides: list[str]) -> dict:
    """Run the config once in this process; its timings as a dict (printed as JSON)."""
    from shoal.config import load_config
    from shoal.runs.simulation import Simulation

    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(config, [*overrides, f"output.dir={json.dumps(out)}"])
        t0 = time.perf_counter()
        run = Simulation.create(cfg)
        try:
            run.driver()  # start the executor (and Ray, its actors) before the clock
            start = time.perf_counter() - t0
            executor = run.executor
            nodes = getattr(executor, "nodes", None)
            rounds = []
            t = time.perf_counter()
            while not run.finished:
                run.step()
                rounds.append(time.perf_counter() - t)
                t = time.perf_counter()
            run.writer.flush()
            rounds[-1] += time.perf_counter() - t  # the last commit
        finally:
            run.close()
    return {"start_s": start, "round_s": rounds, "s_per_round": statistics.mean(rounds),
            "shards": executor.n_shards, "executor": executor.kind,
            "nodes": len(set(nodes)) if nodes else 1,
            "shards_per_node": (sorted(Counter(nodes).values()) if nodes
                                else [executor.n_shards])}


def leg(config: str, overrides: list[str], env: dict | None) -> dict:
    """One run of a leg in a fresh process."""
    out = subprocess.run([sys.executable, __file__, "--one", config, *overrides],
                         capture_output=True, text=True, cwd=ROOT, timeout=1800,
                         env=env or {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
    if out.returncode != 0:
        raise RuntimeError(f"{overrides}: failed\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--n", type=int, default=10_000, help="agents")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from tests.cluster import ray_cluster

    base = [f"population.size={args.n}", f"rounds={args.rounds}"]
    rows = []
    t = time.perf_counter()
    with ray_cluster() as cluster:
        cluster_start = time.perf_counter() - t
        for name, overrides, on_cluster in LEGS:
            sets = [*base, *overrides]
            env = None
            if on_cluster:
                sets.append(f"executor.address={json.dumps(cluster.address)}")
                env = cluster.env
            runs = [leg(args.config, sets, env) for _ in range(args.repeat)]
            row = {"leg": name, "n": args.n, "rounds": args.rounds,
                   "s_per_round": statistics.median(r["s_per_round"] for r in runs),
                   "start_s": statistics.median(r["start_s"] for r in runs),
                   "runs": runs}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
    local = rows[0]["s_per_round"]
    print(f"\n{'leg':<18} {'shards':>6} {'nodes':>5} {'s/round':>8} {'÷ local':>8} "
          f"{'start s':>8}")
    for row in rows:
        r0 = row["runs"][0]
        print(f"{row['leg']:<18} {r0['shards']:>6} {r0['nodes']:>5} "
              f"{row['s_per_round']:>8.3f} {row['s_per_round'] / local:>8.2f} "
              f"{row['start_s']:>8.1f}")
    print(f"(the cluster took {cluster_start:.1f} s to start)")
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = HERE / "results" / f"cluster-{stamp}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "load_avg": os.getloadavg()},
        "cluster_start_s": cluster_start, "rows": rows}, indent=1))
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2], sys.argv[3:])))
        raise SystemExit(0)
    raise SystemExit(main())

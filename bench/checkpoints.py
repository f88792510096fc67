"""Checkpoint size and time, and fork latency, against a replay baseline.

For N in {10k, 100k}: run the quick-start model (configs/quickstart.yaml) for R rounds,
read every round's checkpoint cost from its state metadata (bytes of log + state, ms to
write), then fork the run at round K = R/2 (restore the world, hard-link the checkpoint,
create the fork's directory: `shoal.runs.fork.fork_run`, no rounds run) and compare with the
baseline a fork replaces: replaying rounds 1..K from scratch (the measured time of those
rounds in the parent run). Also the time `shoal resume` needs to restore the last round.

    .venv/bin/python bench/checkpoints.py            # ~2 minutes
    .venv/bin/python bench/checkpoints.py --quick    # 2k and 10k agents
    .venv/bin/python bench/checkpoints.py --long     # 300 rounds at the quick start's size

`--long` checks that a round's checkpoint costs what the round changed, not what the run
has accumulated: it runs the quick start (its own size, 1,000 agents) for 300 rounds and
reports, at rounds 10, 50, 100, 200 and 300, the bytes of that round's checkpoint on disk
(its log segment plus its state folder, split by component) and its time (building it on
the round loop plus writing it on the writer thread; the median of that round and the four
before it), and the ratio round 300 / round 10.
`--config` runs the same on another config (e.g. configs/llm_quickstart.yaml, whose LLM
agents keep digests and notifications).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import zipfile
from pathlib import Path

import duckdb

import shoal.engine.driver as driver_module
from shoal.config import load_config
from shoal.runs.fork import fork_run
from shoal.runs.simulation import Simulation

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


LONG_AT = (10, 50, 100, 200, 300)


def _component_bytes(folder: Path, prefix: str) -> dict[str, int]:
    """Bytes per component of the checkpoint files named `prefix*` in `folder`: npz members
    are named `<component>/<array>`, parquet files `<round>.<component>.<table>.parquet`,
    a log's `<round>.meta.json` and a state's `meta.json` hold components' JSON."""
    out: dict[str, int] = {}
    for path in sorted(folder.glob(f"{prefix}*")):
        if path.suffix == ".npz":
            with zipfile.ZipFile(path) as z:
                for info in z.infolist():
                    comp = info.filename.partition("/")[0].removesuffix(".npy")
                    out[comp] = out.get(comp, 0) + info.compress_size
        elif path.suffix == ".parquet":
            comp = path.name.split(".")[1]
            out[comp] = out.get(comp, 0) + path.stat().st_size
        elif path.name.endswith(".meta.json"):  # a log's JSON changes, by component
            for comp, m in json.loads(path.read_text()).items():
                out[comp] = out.get(comp, 0) + len(json.dumps(m))
        elif path.name == "meta.json":
            meta = json.loads(path.read_text())
            for comp, m in meta.get("components", {}).items():
                out[comp] = out.get(comp, 0) + len(json.dumps(m))
            out["(config)"] = len(json.dumps(meta.get("config", {})))
    return out


def measure_long(config: Path, rounds: int, out: Path) -> dict:
    """One run of `rounds` rounds at the config's own size; every round's checkpoint kept.
    The time of a checkpoint is building it on the round loop (`checkpoint(world)`, timed
    by wrapping the driver's reference to it) plus writing it on the writer thread (its
    state metadata's `ms`)."""
    build_ms: dict[int, float] = {}
    original = driver_module.checkpoint

    def timed(world):
        t = time.perf_counter()
        cp = original(world)
        build_ms[world.round] = 1e3 * (time.perf_counter() - t)
        return cp

    cfg = load_config(config, [f"rounds={rounds}", f"output.dir={out}",
                               "checkpoints.every=1"])
    driver_module.checkpoint = timed
    run = Simulation.create(cfg)
    try:
        run.run()
    finally:
        run.close()
        driver_module.checkpoint = original
    store = run.dir.checkpoints
    rows = {}
    for r in [r for r in LONG_AT if r <= rounds]:
        name = f"round-{r:06d}"
        log = _component_bytes(store.log_dir, f"{name}.")
        state = _component_bytes(store.state_dir / name, "")
        comps = sorted(set(log) | set(state))
        window = range(max(1, r - 4), r + 1)  # one round's time is noisy: median of 5
        rows[r] = {"bytes": sum(log.values()) + sum(state.values()),
                   "log_bytes": sum(log.values()), "state_bytes": sum(state.values()),
                   "build_ms": statistics.median(build_ms.get(k, 0.0) for k in window),
                   "write_ms": statistics.median(store.meta(k)["ms"] for k in window),
                   "ms": statistics.median(build_ms.get(k, 0.0) + store.meta(k)["ms"]
                                           for k in window),
                   "by_component": {c: log.get(c, 0) + state.get(c, 0) for c in comps}}
    first, last = rows[min(rows)], rows[max(rows)]
    return {"config": str(config.relative_to(ROOT) if config.is_relative_to(ROOT) else config),
            "n": run.world.n_agents, "rounds": rounds, "at": rows,
            "bytes_ratio_last_over_first": last["bytes"] / first["bytes"],
            "state_bytes_ratio_last_over_first": last["state_bytes"] / first["state_bytes"],
            "ms_ratio_last_over_first": last["ms"] / first["ms"]}


def main() -> None:
    """Measure both sizes and print one JSON line each (or the `--long` rows)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--long", action="store_true",
                    help="300 rounds at the config's size: checkpoint cost per round")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "quickstart.yaml",
                    help="the config of --long")
    args = ap.parse_args()
    if args.long:
        rounds = args.rounds if args.rounds != 12 else 300
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(measure_long(args.config.resolve(), rounds, Path(tmp))),
                  flush=True)
        return
    sizes = [2_000, 10_000] if args.quick else [10_000, 100_000]
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(measure(n, args.rounds, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()

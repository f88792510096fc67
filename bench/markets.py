"""What the prediction market costs: throughput of configs/market.yaml with five markets
against the same run without the market platform, in the same process, alternating.

Five markets on the one topic (two LMSR, two constant-product, one with three outcomes),
every agent a trader, so every active agent places orders in every market each round;
everything else as in configs/market.yaml (both social platforms, every table logged,
checkpoints every round). Agent-steps per second = agents × rounds ÷ wall time of the
rounds (round 0 and start-up excluded); medians of `--repeats` runs each.

    .venv/bin/python bench/markets.py                 # 100k agents, 5 rounds, ~4 minutes
    .venv/bin/python bench/markets.py --agents 10000
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import yaml

from shoal.config import parse_config
from shoal.runs.simulation import Simulation

ROOT = Path(__file__).resolve().parents[1]


def configs(n: int, rounds: int, out: Path) -> dict[str, dict]:
    """The market run and its no-market twin."""
    base = yaml.safe_load((ROOT / "configs" / "market.yaml").read_text())
    base.update(rounds=rounds, output={"dir": str(out)})
    base["population"]["size"] = n
    base["interventions"][0]["round"] = max(1, rounds // 2)
    market = base["platforms"]["market"]
    market["members"] = {"fraction": 1.0}
    first = market["markets"][0]
    market["markets"] = [
        {**first, "id": "m1"},
        {**first, "id": "m2", "maker": {"kind": "lmsr", "b": 1000}},
        {**first, "id": "m3", "maker": {"kind": "constant_product", "liquidity": 500}},
        {**first, "id": "m4", "maker": {"kind": "constant_product", "liquidity": 2000}},
        {**first, "id": "m5", "outcomes": ["for", "undecided", "against"],
         "resolution": {"rule": {**first["resolution"]["rule"], "if_true": "for",
                                 "if_false": "against"}}},
    ]
    bare = copy.deepcopy(base)
    del bare["platforms"]["market"]
    return {"with 5 markets": base, "without markets": bare}


def measure(data: dict) -> dict:
    """One run: agent-steps/s over its rounds, and the mean ms per phase per round."""
    with Simulation.create(parse_config(data)) as sim:
        t = time.perf_counter()
        sim.run()
        sim.flush()
        wall = time.perf_counter() - t
        db = sim.dir.db
    con = duckdb.connect(str(db), read_only=True)
    phases = con.execute("SELECT avg(ms_decide), avg(ms_apply), avg(ms_update), avg(ms_log) "
                         "FROM rounds").fetchone()
    trades = con.execute("SELECT count(*) FROM trades").fetchone()[0]
    con.close()
    n, rounds = data["population"]["size"], data["rounds"]
    return {"rate": n * rounds / wall, "phases": phases, "trades": trades}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agents", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = configs(args.agents, args.rounds, Path(tmp))
        results: dict[str, list[dict]] = {k: [] for k in cases}
        for _ in range(args.repeats):
            for name, data in cases.items():
                results[name].append(measure(data))
    rates = {k: statistics.median(r["rate"] for r in v) for k, v in results.items()}
    print(f"{args.agents:,} agents × {args.rounds} rounds, medians of {args.repeats}")
    for name, runs in results.items():
        d, a, u, lg = (statistics.median(r["phases"][i] for r in runs) for i in range(4))
        print(f"  {name:16s} {rates[name]:>10,.0f} agent-steps/s   ms/round: decide {d:,.0f}"
              f"  apply {a:,.0f}  update {u:,.0f}  log {lg:,.0f}   trades {runs[0]['trades']:,}")
    print(f"  ratio with ÷ without: {rates['with 5 markets'] / rates['without markets']:.2f}")


if __name__ == "__main__":
    main()

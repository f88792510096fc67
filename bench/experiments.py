"""Coverage of the experiment intervals against a known effect: how often does the 95%
interval of `shoal experiment` contain the true effect?

The world is small and built so the true effect is known exactly. Positions never move
on their own (`degroot` with `self_weight: 1`: x' = x), initial positions on the carbon
tax are uniform on [−0.5, 0.5], and the treatment arm adds, after the branch round, a
belief shock of +0.3 to a seeded half of the agents (`target: {fraction: 0.5}`: each
agent independently with probability 1/2; no position reaches the clip at 1). The
treatment's effect on the mean position is then 0.3·K/N with K ~ Binomial(N, 1/2): its
expectation, the true average effect, is exactly 0.15. The control arm has no change.

Each experiment (`shoal.runs.experiment`, on Ray, as `shoal experiment` runs it) has
`--replicates` replicates; the `--experiments` experiments use disjoint, fixed seed sets
(experiment i: seeds i·R .. i·R + R − 1). Reported: the share of experiments whose 95%
t-interval, and whose 95% percentile-bootstrap interval, of the mean paired difference in
`belief_mean.carbon_tax` at the end contains 0.15, with its binomial standard error.

Forty experiments pin coverage down to about ±5 points. For a sharper figure the script
then recomputes the effect without simulating: K is drawn by the engine's keyed generator
for intervention targets (`CounterRNG(seed).generator(Purpose.INTERVENTION, 0)`, the added
entry being the only one in the schedule), so d = 0.3·K/N per seed. It first checks that
this reproduces every simulated experiment's mean difference exactly, then applies the
same interval functions to `--long-run` experiments of the same design.

    .venv/bin/python bench/experiments.py          # about 9 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import yaml

from shoal.analysis.experiments import bootstrap_interval
from shoal.analysis.metrics import t_interval
from shoal.core.counter_rng import CounterRNG, Purpose
from shoal.engine.executors import ensure_ray
from shoal.runs.experiment import plan_experiment, run_experiment, start_experiment

ROOT = Path(__file__).resolve().parents[1]
SHIFT, FRACTION = 0.3, 0.5
TRUE_EFFECT = SHIFT * FRACTION  # E[0.3 · K/N], K ~ Binomial(N, 1/2)
METRIC = "belief_mean.carbon_tax"


def config(agents: int, replicates: int) -> dict:
    """The synthetic-truth world and its two-arm experiment."""
    return {
        "name": "coverage", "rounds": 3,
        "population": {"size": agents},
        "topics": ["carbon_tax"],
        "initial_stances": {"topics": {"carbon_tax": {"dist": "uniform", "low": -0.5,
                                                      "high": 0.5}}},
        "platforms": {"twitter": {"feed_size": 5}},
        "graph": {"kind": "random", "mean_degree": 5},
        "beliefs": {"update": {"rule": "degroot", "self_weight": 1.0}},
        "experiment": {
            "branch_round": 1, "replicates": replicates, "metrics": [METRIC],
            "arms": {"control": {}, "shock": {"interventions": {"add": [
                {"kind": "beliefs", "round": 2, "topic": "carbon_tax", "shift": SHIFT,
                 "target": {"fraction": FRACTION}}]}}}},
    }


def covers(low: float, high: float, value: float) -> bool:
    """Whether [low, high] contains `value` (an undefined interval does not)."""
    return bool(np.isfinite(low) and np.isfinite(high) and low <= value <= high)


def effects_by_recomputation(seeds: range, agents: int) -> np.ndarray:
    """Each seed's paired difference d = SHIFT·K/N, with K the agents the engine's
    generator for the first intervention target puts in the shocked half."""
    return np.array([SHIFT * (CounterRNG(s).generator(Purpose.INTERVENTION, 0)
                              .random(agents) < FRACTION).sum() / agents for s in seeds])


def main() -> None:
    """Run the experiments, print the coverage, save the rows in bench/results/."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", type=int, default=40)
    ap.add_argument("--replicates", type=int, default=8)
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--address", help="a Ray cluster to join (default: start one)")
    ap.add_argument("--long-run", type=int, default=4000,
                    help="experiments recomputed without simulating (default: 4000)")
    args = ap.parse_args()
    owns_ray = ensure_ray(args.address)  # once, for every experiment
    rows = []
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "coverage.yaml"
            source.write_text(yaml.safe_dump(config(args.agents, args.replicates)))
            for i in range(args.experiments):
                plan = plan_experiment(source, [f"experiment.seed_base={i * args.replicates}"],
                                       Path(tmp) / "out")
                root, spec = start_experiment(plan)
                result = run_experiment(root, spec)
                if result.failed:
                    raise SystemExit(f"experiment {i}: {result.failed[0]['error']}")
                (row,) = result.experiment.effects.query("metric == @METRIC").to_dict(
                    "records")
                row = {"experiment": i, "seeds": [spec["seeds"][0], spec["seeds"][-1]],
                       **{k: row[k] for k in ("n", "mean_diff", "sd_diff", "t_low", "t_high",
                                              "boot_low", "boot_high", "pairing_ratio")},
                       "t_covers": covers(row["t_low"], row["t_high"], TRUE_EFFECT),
                       "boot_covers": covers(row["boot_low"], row["boot_high"], TRUE_EFFECT)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        if owns_ray:
            import ray

            ray.shutdown()
    seconds = time.perf_counter() - start
    n = len(rows)
    summary = {"true_effect": TRUE_EFFECT, "experiments": n, "replicates": args.replicates,
               "agents": args.agents, "seconds": seconds,
               "mean_estimate": float(np.mean([r["mean_diff"] for r in rows])),
               "median_pairing_ratio": float(np.median([r["pairing_ratio"] for r in rows]))}
    for kind in ("t", "boot"):
        share = sum(r[f"{kind}_covers"] for r in rows) / n
        summary[f"{kind}_coverage"] = share
        summary[f"{kind}_coverage_se"] = math.sqrt(share * (1 - share) / n)
    print(f"\ntrue effect {TRUE_EFFECT}; mean estimate {summary['mean_estimate']:.4f} over "
          f"{n} experiments of {args.replicates} replicates ({args.agents} agents)")
    print(f"95% t-interval covers it in {summary['t_coverage']:.1%} "
          f"(± {summary['t_coverage_se']:.1%} s.e.)")
    print(f"95% bootstrap interval covers it in {summary['boot_coverage']:.1%} "
          f"(± {summary['boot_coverage_se']:.1%} s.e.)")
    print(f"median pairing variance ratio {summary['median_pairing_ratio']:.4f}; "
          f"{seconds:.0f} s")
    r = args.replicates
    d = effects_by_recomputation(range(n * r), args.agents).reshape(n, r)
    mismatch = [row["experiment"] for row, di in zip(rows, d, strict=True)
                if not math.isclose(row["mean_diff"], di.mean(), abs_tol=1e-12)]
    if mismatch:
        raise SystemExit(f"the recomputed effect differs from the simulated one in "
                         f"experiments {mismatch}")
    long = effects_by_recomputation(range(args.long_run * r), args.agents) \
        .reshape(args.long_run, r)
    for kind, interval in (("t", t_interval), ("boot", bootstrap_interval)):
        summary[f"{kind}_coverage_long_run"] = float(np.mean(
            [covers(*interval(di), TRUE_EFFECT) for di in long]))
    summary["long_run"] = args.long_run
    print(f"recomputed without simulating, the {n} experiments agree (to 1e-12); over "
          f"{args.long_run} experiments of this design the t-interval covers "
          f"{summary['t_coverage_long_run']:.1%}, the bootstrap interval "
          f"{summary['boot_coverage_long_run']:.1%}")
    out = ROOT / "bench" / "results" / f"experiments-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": platform.platform(), "summary": summary,
                               "rows": rows}, indent=1))
    print(f"rows saved in {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

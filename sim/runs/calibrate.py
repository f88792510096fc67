"""`shoal calibrate`: fit config parameters to an observed time series (docs/calibration.md).

The target is a CSV of (round, metric, value) rows: a metric of the positions on a topic at
a round — `mean.<topic>`, `sd.<topic>`, `bimodality.<topic>`, `support.<topic>` (share with
a position above 0), `retest.<topic>` (correlation of each agent's position with its
position at round 0: panel stability). Parameters are config fields with a range
(`beliefs.update.rate=0.001:0.2:log`).

Method: approximate Bayesian computation by rejection. Trials draw parameters from the
prior (uniform on the range, or on its logarithm) with Optuna's seeded random sampler; each
trial runs the config with `seeds` seeds on Ray (one task per run) and its distance to the
target is the mean over target rows of the squared difference of the seed-averaged metric,
divided per metric by max(sd of the target's values, 0.01)². The `accept` share of trials
closest to the target is the approximate posterior: the estimate is its median, the
uncertainty its 5th–95th percentiles (a 90% interval). The Optuna study is kept in a
journal file, so a killed calibration resumes where it stopped.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from sim.config import load_config, resolved_dict
from sim.core.errors import InputError
from sim.engine.executors import ensure_ray

KINDS = ("mean", "sd", "bimodality", "support", "retest")
STUDY_FILE, TRIALS_FILE, RESULT_FILE = "study.journal", "trials.csv", "calibration.json"


@dataclass(frozen=True)
class Param:
    """A config field to fit and its prior range."""

    key: str
    low: float
    high: float
    log: bool = False


def parse_param(text: str) -> Param:
    """`KEY=LOW:HIGH[:log]` (an InputError naming `--param` otherwise)."""
    key, sep, rest = text.partition("=")
    parts = rest.split(":")
    try:
        if not sep or not key or len(parts) not in (2, 3) or (len(parts) == 3
                                                              and parts[2] != "log"):
            raise ValueError
        low, high = float(parts[0]), float(parts[1])
    except ValueError:
        raise InputError(f"--param {text}: expected KEY=LOW:HIGH or KEY=LOW:HIGH:log") from None
    log = len(parts) == 3
    if not low < high or (log and low <= 0):
        raise InputError(f"--param {text}: the range must have LOW < HIGH"
                         + (" and LOW > 0 for a log range" if log else ""))
    return Param(key.strip(), low, high, log)


def position_series(beliefs: pd.DataFrame) -> pd.DataFrame:
    """Every metric of KINDS per round and topic: round, metric, value."""
    from sim.analysis.metrics import bimodality_coefficient

    rows = []
    first = beliefs[beliefs["round"] == beliefs["round"].min()]
    for topic, part in beliefs.groupby("topic", sort=False):
        start = first[first["topic"] == topic].set_index("agent")["position"]
        for r, now in part.groupby("round"):
            x = now["position"].to_numpy()
            base = start.reindex(now["agent"]).to_numpy()
            ok = ~np.isnan(base)
            retest = (float(np.corrcoef(base[ok], x[ok])[0, 1])
                      if ok.sum() > 2 and x[ok].std() > 0 and base[ok].std() > 0 else 1.0)
            for kind, value in (("mean", x.mean()), ("sd", x.std()),
                                ("bimodality", bimodality_coefficient(x)),
                                ("support", float((x > 0).mean())), ("retest", retest)):
                rows.append({"round": int(r), "metric": f"{kind}.{topic}",
                             "value": float(value)})
    return pd.DataFrame(rows, columns=["round", "metric", "value"])


def load_target(path: str | Path, topics: list[str], rounds: int) -> pd.DataFrame:
    """The target CSV (round, metric, value), checked against the config."""
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"--target {path}: {exc}") from None
    missing = {"round", "metric", "value"} - set(df.columns)
    if missing:
        raise InputError(f"--target {path}: missing columns {sorted(missing)} (need round, "
                         "metric, value)")
    known = {f"{k}.{t}" for k in KINDS for t in topics}
    for i, row in enumerate(df.itertuples(index=False), start=2):
        if row.metric not in known:
            raise InputError(f"--target {path}, line {i}: unknown metric {row.metric!r}; "
                             f"metrics: {', '.join(sorted(known))}")
        if not (isinstance(row.round, int | np.integer) and 0 <= row.round <= rounds):
            raise InputError(f"--target {path}, line {i}: round {row.round} is not in "
                             f"0..{rounds}")
        if not np.isfinite(row.value):
            raise InputError(f"--target {path}, line {i}: the value is not a number")
    return df[["round", "metric", "value"]].reset_index(drop=True)


def simulate(config: str, sets: list[str], seed: int) -> pd.DataFrame:
    """The metric series of one run of `config` with `sets` and `seed`, held in memory
    (the body of a Ray task)."""
    from sim.analysis.runs import Run
    from sim.runs.simulation import Simulation

    cfg = load_config(config, [*sets, f"seed={seed}"])
    with Simulation.create(cfg, out=None) as sim:
        sim.run()
        return position_series(Run(sim).beliefs)


def distance(simulated: pd.DataFrame, target: pd.DataFrame) -> float:
    """Mean scaled squared difference over the target's rows (see the module docstring)."""
    both = target.merge(simulated, on=["round", "metric"], how="left",
                        suffixes=("", "_sim"))
    if both["value_sim"].isna().any():
        return math.inf
    scale = both.groupby("metric")["value"].transform(lambda v: max(v.std(ddof=0), 0.01))
    return float((((both["value_sim"] - both["value"]) / scale) ** 2).mean())


@dataclass
class Calibration:
    """The fit: every trial, the accepted ones, and the estimates."""

    out: Path
    trials: pd.DataFrame  # trial, one column per parameter, distance, accepted
    estimates: pd.DataFrame  # param, estimate, low, high, best
    seconds: float


def calibrate(config: str, target: str, params: list[Param], out: str | Path,
              trials: int = 64, seeds: int = 2, accept: float = 0.1, sets: list[str] | None = None,
              seed: int = 0, parallel: int | None = None, address: str | None = None,
              on_trial: Callable[[int, int, float], None] | None = None) -> Calibration:
    """Fit `params` of `config` to `target` (see the module docstring); results in `out`
    (resumed if it holds a study of the same calibration)."""
    import optuna
    import ray

    started = time.perf_counter()
    if trials < 2 or seeds < 1 or not 0 < accept <= 1:
        raise InputError("--trials must be >= 2, --seeds >= 1 and --accept in (0, 1]")
    if not params:
        raise InputError("name at least one --param KEY=LOW:HIGH")
    sets = list(sets or [])
    base = load_config(config, sets)
    topics = [t.name for t in base.topics]
    for p in params:  # both ends must make a valid config
        for v in (p.low, p.high):
            load_config(config, [*sets, f"{p.key}={v}"])
    data = load_target(target, topics, base.rounds)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec = {"config": str(config), "target": str(target), "sets": sets, "seed": seed,
            "seeds": seeds, "params": [p.__dict__ for p in params]}
    spec_file = out / "spec.json"
    if spec_file.exists() and json.loads(spec_file.read_text()) != spec:
        raise InputError(f"--out {out}: holds another calibration (spec.json differs); "
                         "choose a new folder")
    spec_file.write_text(json.dumps(spec, indent=1))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / STUDY_FILE)))
    study = optuna.create_study(study_name="calibration", storage=storage,
                                sampler=optuna.samplers.RandomSampler(seed=seed),
                                load_if_exists=True)
    for t in study.trials:  # a trial cut short by a kill is asked again
        if t.state == optuna.trial.TrialState.RUNNING:
            study.tell(t.number, state=optuna.trial.TrialState.FAIL)
    owns_ray = ensure_ray(address)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(simulate)
        limit = parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
        done = len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
        while done < trials:
            batch = [study.ask() for _ in range(min(limit, trials - done))]
            runs = {}
            for trial in batch:
                values = {p.key: trial.suggest_float(p.key, p.low, p.high, log=p.log)
                          for p in params}
                sets_t = [*sets, *(f"{k}={v!r}" for k, v in values.items())]
                runs[trial.number] = [task.remote(str(config), sets_t, s)
                                      for s in range(seed, seed + seeds)]
            for trial in batch:
                series = pd.concat(ray.get(runs[trial.number]))
                mean = series.groupby(["round", "metric"], as_index=False)["value"].mean()
                d = distance(mean, data)
                study.tell(trial, d)
                done += 1
                if on_trial is not None:
                    on_trial(done, trials, d)
    finally:
        if owns_ray:
            ray.shutdown()
    result = summarise(study, params, accept, out)
    best = dict(zip(result.estimates["param"], result.estimates["best"], strict=True))
    write_config(config, sets, best, out / "calibrated.yaml")
    result.seconds = time.perf_counter() - started
    return result


def summarise(study: Any, params: list[Param], accept: float, out: Path) -> Calibration:
    """Accept the closest trials; estimates and intervals; trials.csv and the JSON."""
    import optuna

    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    frame = pd.DataFrame([{"trial": t.number, **t.params, "distance": t.value}
                          for t in done]).sort_values(["distance", "trial"])
    n = max(1, math.ceil(accept * len(frame)))
    frame["accepted"] = False
    frame.loc[frame.index[:n], "accepted"] = True
    kept = frame[frame["accepted"]]
    rows = []
    for p in params:
        v = kept[p.key].to_numpy()
        rows.append({"param": p.key, "estimate": float(np.median(v)),
                     "low": float(np.percentile(v, 5)), "high": float(np.percentile(v, 95)),
                     "best": float(frame.iloc[0][p.key]), "prior_low": p.low,
                     "prior_high": p.high, "log": p.log})
    estimates = pd.DataFrame(rows)
    frame.sort_values("trial").to_csv(out / TRIALS_FILE, index=False)
    (out / RESULT_FILE).write_text(json.dumps({
        "trials": len(frame), "accepted": n, "best_distance": float(frame["distance"].min()),
        "estimates": rows}, indent=1))
    return Calibration(out, frame.sort_values("trial").reset_index(drop=True), estimates, 0.0)


def write_config(config: str, sets: list[str], values: dict[str, float], path: Path) -> None:
    """The config with the fitted values filled in (resolved, every default written)."""
    cfg = load_config(config, [*sets, *(f"{k}={v!r}" for k, v in values.items())])
    path.write_text("# calibrated by `shoal calibrate` (docs/calibration.md)\n"
                    + yaml.safe_dump(resolved_dict(cfg), sort_keys=False))


def plot_fit(config: str, sets: list[str], values: dict[str, float], target: pd.DataFrame,
             seeds: int, seed: int, path: Path) -> Path:
    """Target points and the fitted model's seed-averaged series, a panel per metric."""
    from matplotlib.figure import Figure

    fitted = [*sets, *(f"{k}={v!r}" for k, v in values.items())]
    series = pd.concat([simulate(config, fitted, s) for s in range(seed, seed + seeds)])
    mean = series.groupby(["round", "metric"], as_index=False)["value"].mean()
    metrics = list(dict.fromkeys(target["metric"]))
    fig = Figure(figsize=(5.0 * min(2, len(metrics)), 3.0 * math.ceil(len(metrics) / 2)),
                 layout="constrained")
    axes = fig.subplots(math.ceil(len(metrics) / 2), min(2, len(metrics)), squeeze=False)
    for ax, metric in zip(axes.ravel(), metrics, strict=False):
        m = mean[mean["metric"] == metric]
        t = target[target["metric"] == metric]
        ax.plot(m["round"], m["value"], color="C0", label="fitted (mean over seeds)")
        ax.scatter(t["round"], t["value"], color="C3", s=14, zorder=3, label="target")
        ax.set_title(metric)
        ax.set_xlabel("round")
    axes.ravel()[0].legend(fontsize=8)
    fig.savefig(path, dpi=110)
    return path

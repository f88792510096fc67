"""`shoal sweep`: a config run over seeds (and a parameter grid) in parallel on Ray.

A sweep is the product of its grid points (every combination of the `--grid` values) and
N seeds. Each member is an ordinary run (`create_run` + `run_rounds`, local executor) made
by one Ray task in a Ray worker process; members run side by side, at most `--parallel`
at once. Everything is validated before anything is written: a bad `--grid` or an unknown
config key is an InputError (exit 2) and leaves nothing behind.

Layout of a sweep directory (`<out>/<name>-sweep-<YYYYmmdd-HHMMSS>-<hex>/`):

    sweep.json    what was asked (config, sets, grid, seeds) and every member: its grid
                  point, grid values, seed, run id, status, time and metrics
    config.yaml   the source config, as given
    summary.csv   per grid point, for each metric: mean, sd and 95% t-interval over seeds
    <run_id>/     one normal run directory per member (`shoal report` etc. work on it)

Metrics of a member (its last round R; rounds 1..R for rates):
    belief_mean.<topic>   mean position at R
    belief_sd.<topic>     population standard deviation of positions at R
    polarization.<topic>  bimodality coefficient of positions at R
    activity              mean number of acting agents per round
    engagement            applied actions per round (every action with status ok, except
                          do_nothing)

The interval is Student's t over seeds: mean ± t(0.975, n−1) · sd / √n, sd with n−1 in
the denominator; with one seed it is undefined (NaN).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from rich.table import Table

from sim import metrics
from sim.config import Config, load_config, parse_config, resolved_dict
from sim.errors import InputError
from sim.executors import ensure_ray
from sim.lineage import read_table

SWEEP_FILE = "sweep.json"
SUMMARY_FILE = "summary.csv"
LEVEL = 0.95
STATS = ("mean", "sd", "ci95_low", "ci95_high")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z0-9_\-]+)*$")
# Not parameters of a member: the seed is the ensemble axis, the rest shape the layout.
_NOT_GRID = ("seed", "name", "output.dir")
_WRITE_LOCK = threading.Lock()


# ---------------------------------------------------------------------- planning


def parse_grid(items: list[str] | None) -> dict[str, list[Any]]:
    """`key=v1,v2,...` items as {key: [values]}; values are YAML (`0.3`, `true`, `[1,2]`);
    commas inside brackets, braces or quotes do not split."""
    grid: dict[str, list[Any]] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not raw.strip():
            raise InputError(f"--grid {item!r}: expected key=value1,value2,...")
        if not _KEY.match(key):
            raise InputError(f"--grid {item!r}: {key!r} is not a config field path "
                             "(like policy.post_rate)")
        if key in _NOT_GRID:
            raise InputError(f"--grid {key}: not a parameter to sweep"
                             + (" (use --seeds and --seed-base)" if key == "seed" else ""))
        if key in grid:
            raise InputError(f"--grid {key}: given twice; list all its values in one --grid")
        parts = _split_values(raw)
        if any(not p.strip() for p in parts):
            raise InputError(f"--grid {item!r}: an empty value")
        try:
            values = [yaml.safe_load(p) for p in parts]
        except yaml.YAMLError as exc:
            raise InputError(f"--grid {item!r}: a value is not valid YAML: {exc}") from None
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
            raise InputError(f"--grid {item!r}: a value is repeated")
        grid[key] = values
    return grid


def _split_values(raw: str) -> list[str]:
    """Split on top-level commas (not inside [], {} or quotes)."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in raw:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if depth or quote:
        raise InputError(f"--grid value {raw!r}: unbalanced brackets or quotes")
    parts.append("".join(cur))
    return parts


@dataclass(frozen=True)
class Member:
    """One run of the sweep: a grid point and a seed, with its validated config."""

    index: int
    point: int
    seed: int
    grid: dict[str, Any]
    config: dict  # resolved (JSON-able), executor forced local, output.dir the sweep


@dataclass
class SweepPlan:
    """A validated sweep, not started: its folder (not created yet) and its members."""

    root: Path
    source: Path
    grid: dict[str, list[Any]]
    seeds: list[int]
    sets: list[str]
    members: list[Member]
    name: str

    @property
    def points(self) -> list[dict[str, Any]]:
        """The grid points in member order (each a {key: value} mapping)."""
        keys = list(self.grid)
        return [dict(zip(keys, combo, strict=True))
                for combo in itertools.product(*self.grid.values())]


def plan_sweep(config: str | Path, seeds: int, seed_base: int = 0,
               grid: list[str] | None = None, sets: list[str] | None = None,
               out: str | Path = "runs") -> SweepPlan:
    """Validate every member's config (InputError on any problem; nothing is written)."""
    if seeds < 1:
        raise InputError(f"--seeds {seeds}: need at least one seed")
    if seed_base < 0 or seed_base + seeds > 2**63:
        raise InputError(f"--seed-base {seed_base}: seeds must lie in 0..2^63-1")
    axes = parse_grid(grid)
    base = load_config(config, list(sets or []))
    root = Path(out).resolve() / f"{base.name}-sweep-{datetime.now():%Y%m%d-%H%M%S}-" \
                                 f"{secrets.token_hex(2)}"
    plan = SweepPlan(root=root, source=Path(config), grid=axes,
                     seeds=list(range(seed_base, seed_base + seeds)), sets=list(sets or []),
                     members=[], name=base.name)
    for p, point in enumerate(plan.points):
        grid_sets = [f"{k}={json.dumps(v)}" for k, v in point.items()]  # JSON is YAML
        try:
            cfg = load_config(config, [*plan.sets, *grid_sets])
        except InputError as exc:
            shown = ", ".join(f"{k}={v}" for k, v in point.items())
            raise InputError(f"grid point {shown}: {exc}") from None
        for seed in plan.seeds:
            member_name = f"{base.name}-p{p}-s{seed}" if axes else f"{base.name}-s{seed}"
            plan.members.append(Member(index=len(plan.members), point=p, seed=seed,
                                       grid=point, config=_member_config(cfg, seed,
                                                                         member_name, root)))
    return plan


def _member_config(cfg: Config, seed: int, name: str, root: Path) -> dict:
    """A member's resolved config: its seed and name, runs under the sweep folder, and the
    local executor inside its Ray task (where agents decide never changes results)."""
    data = resolved_dict(cfg)
    data["seed"] = seed
    data["name"] = name
    data["output"]["dir"] = str(root)
    data["executor"] = {**data["executor"], "kind": "local", "address": None}
    parse_config(data)  # the seed range and name pattern are the config's to check
    return data


# ---------------------------------------------------------------------- running


def run_member(config: dict) -> dict:
    """Run one member to the end and measure it (the body of a Ray task). Errors come back
    as data, so one failed member does not stop the sweep."""
    from sim.run import create_run, run_rounds

    start = time.perf_counter()
    try:
        run = create_run(parse_config(config))
        try:
            run_rounds(run)
        finally:
            run.close()
        metrics = member_metrics(run.dir.root)
    except InputError as exc:
        return {"status": "failed", "error": str(exc), "input_error": True,
                "seconds": time.perf_counter() - start}
    except Exception as exc:  # recorded in sweep.json; the driver reports it
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                "seconds": time.perf_counter() - start}
    return {"status": "finished", "run": run.dir.run_id, "seconds": time.perf_counter() - start,
            "rounds": run.world.round, "metrics": metrics}


def member_metrics(run: str | Path) -> dict[str, float]:
    """The summary metrics of one run (see the module docstring; formulas of the belief
    statistics and the bimodality coefficient in `sim.metrics`)."""
    rounds = read_table(run, "rounds")
    last = int(rounds["round"].max()) if len(rounds) else 0
    beliefs = read_table(run, "beliefs", f"round = {last}")  # only the last round is needed
    beliefs = beliefs.assign(topic=beliefs["topic"].astype(str))
    out: dict[str, float] = {}
    stats = metrics.belief_stats(beliefs).set_index("topic")
    for topic, pos in beliefs.groupby("topic", sort=False)["position"]:
        out[f"belief_mean.{topic}"] = float(stats.loc[topic, "mean"])
        out[f"belief_sd.{topic}"] = float(stats.loc[topic, "sd"])
        out[f"polarization.{topic}"] = metrics.bimodality_coefficient(pos)
    acted = rounds[rounds["round"] >= 1]
    out["activity"] = float(acted["n_acting"].mean()) if len(acted) else math.nan
    applied = read_table(run, "actions", "status = 'ok' AND action <> 'do_nothing' "
                                         f"AND round BETWEEN 1 AND {last}")
    out["engagement"] = len(applied) / len(acted) if len(acted) else math.nan
    return out


@dataclass
class SweepResult:
    """A finished (or stopped) sweep: its folder, member records and summary."""

    root: Path
    members: list[dict] = field(default_factory=list)
    summary: pd.DataFrame | None = None
    seconds: float = 0.0

    @property
    def failed(self) -> list[dict]:
        """Members that did not finish."""
        return [m for m in self.members if m["status"] != "finished"]


def run_sweep(plan: SweepPlan, parallel: int | None = None, address: str | None = None,
              on_member: Callable[[dict, int, int], None] | None = None) -> SweepResult:
    """Create the sweep folder and run every member on Ray (joining `address`, or a Ray
    already initialized in this process, or starting a local one), at most `parallel` at
    once (default: the cluster's CPUs). `on_member(record, done, total)` after each."""
    import ray  # only here: planning and reading a sweep must not pay Ray's import

    if parallel is not None and parallel < 1:
        raise InputError(f"--parallel {parallel}: must be >= 1")
    owns_ray = ensure_ray(address)
    start = time.perf_counter()
    records = [_record(m) for m in plan.members]
    spec = _spec(plan, records)
    pending: dict[Any, Member] = {}
    try:
        plan.root.mkdir(parents=True, exist_ok=False)
        shutil.copyfile(plan.source, plan.root / "config.yaml")
        _write_json(plan.root / SWEEP_FILE, spec)
        # one CPU per member: a run is single-threaded numpy; no retry (a retry would
        # leave a second run directory for the same member)
        task = ray.remote(num_cpus=1, max_retries=0)(run_member)
        limit = parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
        queue = list(plan.members)
        done = 0
        while queue or pending:
            while queue and len(pending) < limit:
                member = queue.pop(0)
                records[member.index]["status"] = "running"
                pending[task.remote(member.config)] = member
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                member = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.RayError as exc:  # the worker died
                    outcome = {"status": "failed", "error": f"{type(exc).__name__}: "
                                                            f"{str(exc).splitlines()[0]}"}
                records[member.index].update(outcome)
                done += 1
                spec["seconds"] = time.perf_counter() - start
                _write_json(plan.root / SWEEP_FILE, spec)
                if on_member is not None:
                    on_member(records[member.index], done, len(records))
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        spec["status"] = "interrupted"
        _write_json(plan.root / SWEEP_FILE, spec)
        raise
    finally:
        if owns_ray:
            ray.shutdown()
    result = SweepResult(root=plan.root, members=records, seconds=time.perf_counter() - start)
    spec["status"] = "failed" if result.failed else "finished"
    spec["seconds"] = result.seconds
    _write_json(plan.root / SWEEP_FILE, spec)
    result.summary = summarize_members(members_frame(spec), list(plan.grid))
    result.summary.to_csv(plan.root / SUMMARY_FILE, index=False)
    return result


def _record(m: Member) -> dict:
    return {"member": m.index, "point": m.point, "seed": m.seed, "grid": m.grid,
            "status": "pending", "run": None}


def _spec(plan: SweepPlan, records: list[dict]) -> dict:
    return {"sweep": plan.root.name, "created_at": datetime.now().isoformat(),
            "status": "running", "config": str(plan.source), "sets": plan.sets,
            "grid": plan.grid, "seeds": plan.seeds, "points": plan.points,
            "interval": f"{LEVEL:.0%} Student t-interval over seeds", "members": records}


def _write_json(path: Path, data: dict) -> None:
    """Atomic replace, so a reader never sees half a file."""
    with _WRITE_LOCK:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str))
        tmp.replace(path)


# ---------------------------------------------------------------------- statistics


def members_frame(spec: dict) -> pd.DataFrame:
    """One row per member: member, point, run, seed, status, seconds, the grid values (one
    column per key) and the metrics (one column each)."""
    keys = list(spec.get("grid") or {})
    rows = []
    for m in spec["members"]:
        row = {"member": m["member"], "point": m["point"], "run": m.get("run"),
               "seed": m["seed"], "status": m["status"], "seconds": m.get("seconds")}
        row.update({k: _cell(m["grid"].get(k)) for k in keys})
        row.update(m.get("metrics") or {})
        rows.append(row)
    return pd.DataFrame(rows)


def _cell(value: Any) -> Any:
    """A grid value as a table cell: scalars as they are, lists and mappings as JSON."""
    return json.dumps(value) if isinstance(value, list | dict) else value


def metric_names(members: pd.DataFrame, grid_keys: list[str]) -> list[str]:
    """The metric columns of a members frame, in a stable order."""
    fixed = {"member", "point", "run", "seed", "status", "seconds", *grid_keys}
    return [c for c in members.columns if c not in fixed]


def summarize_members(members: pd.DataFrame, grid_keys: list[str]) -> pd.DataFrame:
    """Per grid point (finished members only): n, and for each metric its mean, sd and the
    95% t-interval over seeds (`<metric>.mean`, `.sd`, `.ci95_low`, `.ci95_high`)."""
    ok = members[members["status"] == "finished"]
    names = metric_names(members, grid_keys)
    rows = []
    for point, group in members.groupby("point", sort=True):
        row: dict[str, Any] = {"point": int(point)}
        row.update({k: group[k].iloc[0] for k in grid_keys})
        done = ok[ok["point"] == point]
        row["n"] = len(done)
        for m in names:
            mean, sd, low, high = seed_stats(done[m].to_numpy(dtype=float))
            row.update({f"{m}.mean": mean, f"{m}.sd": sd, f"{m}.ci95_low": low,
                        f"{m}.ci95_high": high})
        rows.append(row)
    return pd.DataFrame(rows)


def seed_stats(x: np.ndarray, level: float = LEVEL) -> tuple[float, float, float, float]:
    """Mean, sd (n−1) and the Student t-interval of the mean over seeds
    (`metrics.t_interval`); NaNs are dropped; with fewer than two values the sd and the
    interval are NaN."""
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return (math.nan,) * 4
    sd = float(x.std(ddof=1)) if len(x) > 1 else math.nan
    low, high = metrics.t_interval(x, level)
    return float(x.mean()), sd, float(low), float(high)


# ---------------------------------------------------------------------- reading


class Sweep:
    """A sweep directory opened for analysis, read like a run: `members` (one row per
    member: point, run, seed, status, time, grid values, metrics) and `summary` (per grid
    point) are DataFrames; every frame of the notebook API (`sweep.beliefs`,
    `sweep.posts`, `sweep.table("post_stances")`, ...) and every metric
    (`sweep.polarization()`, ...) is the finished members' results concatenated, with the
    columns `run`, `seed` and the grid keys first. `sweep.runs` is the `sim.analysis.Runs`
    underneath; index it by run id for one member's `Run`."""

    def __init__(self, root: Path, spec: dict):
        self.root = root
        self.spec = spec
        self.members = members_frame(spec)
        self.summary = summarize_members(self.members, self.grid_keys)
        from sim.analysis import open_runs  # not at the top: Ray workers never need it

        done = self.members[self.members["status"] == "finished"]
        self._labels = done[["run", "seed", *self.grid_keys]].reset_index(drop=True)
        self.runs = open_runs([root / r for r in done["run"]], labels=list(done["run"]))

    def __repr__(self) -> str:
        return (f"<Sweep {self.root.name}: {len(self.summary)} grid point(s), "
                f"{len(self._labels)}/{len(self.members)} members finished>")

    @property
    def grid_keys(self) -> list[str]:
        """The swept config fields."""
        return list(self.spec.get("grid") or {})

    def label(self, frame: pd.DataFrame | pd.Series) -> pd.DataFrame:
        """A frame with a `run` column (or a Series by run) with `seed` and the grid
        values inserted after `run`."""
        if isinstance(frame, pd.Series):
            frame = frame.rename(frame.name or "value").reset_index()
        rest = [c for c in frame.columns if c != "run"]
        return self._labels.merge(frame, on="run", how="right")[
            [*self._labels.columns, *rest]]

    def table(self, name: str) -> pd.DataFrame:
        """A store table of every finished member, concatenated and labelled."""
        self._some_finished()
        return self.label(self.runs.table(name))

    def _some_finished(self) -> None:
        if not len(self.runs):
            raise InputError(f"{self.root}: no member of this sweep has finished yet")

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("runs", "spec", "members", "summary", "root"):
            raise AttributeError(name)
        if not hasattr(type(self.runs), name):
            raise AttributeError(f"a sweep has no {name!r} (nor has sim.analysis.Runs)")
        self._some_finished()
        value = getattr(self.runs, name)
        if isinstance(value, pd.DataFrame | pd.Series):
            return self.label(value)
        if callable(value):
            def labelled(*args, **kwargs):
                out = value(*args, **kwargs)
                return self.label(out) if isinstance(out, pd.DataFrame | pd.Series) else out
            labelled.__doc__ = value.__doc__
            return labelled
        return value


def open_sweep(path: str | Path) -> Sweep:
    """Open a sweep directory (the one holding sweep.json); a sweep still running shows
    the members finished so far."""
    root = Path(path)
    if not (root / SWEEP_FILE).is_file():
        raise InputError(f"{path}: not a sweep directory (no {SWEEP_FILE})")
    return Sweep(root, json.loads((root / SWEEP_FILE).read_text()))


# ---------------------------------------------------------------------- command


def summary_table(summary: pd.DataFrame, grid_keys: list[str]) -> Table:
    """Metrics as rows, grid points as columns; each cell mean ± half-width of the 95%
    t-interval."""
    table = Table(box=None)
    table.add_column("metric")
    for row in summary.itertuples(index=False):
        values = dict(zip(summary.columns, row, strict=True))
        head = ", ".join(f"{k}={values[k]}" for k in grid_keys) or "all members"
        table.add_column(head, justify="right")
    metrics = [c[: -len(".mean")] for c in summary.columns if c.endswith(".mean")]
    for m in metrics:
        cells = []
        for _, r in summary.iterrows():
            mean, low, high = r[f"{m}.mean"], r[f"{m}.ci95_low"], r[f"{m}.ci95_high"]
            if pd.isna(mean):
                cells.append("—")
            elif pd.isna(low):
                cells.append(f"{mean:.3f}")
            else:
                cells.append(f"{mean:.3f} ± {(high - low) / 2:.3f}")
        table.add_row(m, *cells)
    return table


def cmd_sweep(args) -> int:
    """`shoal sweep CONFIG --seeds N [--grid key=v1,v2 ...]`."""
    from sim.cli import _print_whole, console, out

    sets = list(args.set or [])
    if args.rounds is not None:
        sets.append(f"rounds={args.rounds}")
    plan = plan_sweep(args.config, args.seeds, args.seed_base, args.grid, sets, args.out)
    console.print(f"sweep [bold]{plan.root.name}[/]: {len(plan.points)} grid point(s) × "
                  f"{len(plan.seeds)} seed(s) = {len(plan.members)} runs → {plan.root}")

    def on_member(record: dict, done: int, total: int) -> None:
        if args.quiet and record["status"] == "finished":
            return
        grid = ", ".join(f"{k}={v}" for k, v in record["grid"].items())
        what = f"seed {record['seed']}" + (f", {grid}" if grid else "")
        if record["status"] == "finished":
            console.print(f"  [{done}/{total}] {what} → {record['run']} "
                          f"({record['seconds']:.1f} s)", highlight=False)
        else:
            console.print(f"  [{done}/{total}] {what}: [red]failed[/]: {record['error']}",
                          highlight=False, markup=True)

    result = run_sweep(plan, parallel=args.parallel, address=args.address,
                       on_member=on_member)
    n = ", ".join(sorted({str(int(v)) for v in result.summary["n"]}))
    out.print(f"mean ± half-width of the {LEVEL:.0%} t-interval over seeds (n = {n} per "
              "grid point)", highlight=False)
    _print_whole(summary_table(result.summary, list(plan.grid)))
    console.print(f"{len(plan.members) - len(result.failed)}/{len(plan.members)} members in "
                  f"{result.seconds:.1f} s; summary → {result.root / SUMMARY_FILE}")
    if result.failed:
        console.print(f"[red]{len(result.failed)} member(s) failed[/] (see {SWEEP_FILE})")
        return 2 if all(m.get("input_error") for m in result.failed) else 1
    return 0

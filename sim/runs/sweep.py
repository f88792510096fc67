"""`shoal sweep`: a config run over seeds (and a parameter grid) in parallel on Ray.

A sweep is the product of its grid points (every combination of the `--grid` values) and
N seeds. Each member is an ordinary run (a `Simulation`, local executor) made
by one Ray task in a Ray worker process; members run side by side, at most `--parallel`
at once. Everything is validated before anything is written: a bad `--grid` or an unknown
config key is an InputError (exit 2) and leaves nothing behind.

Layout of a sweep directory (`<out>/<name>-sweep-<YYYYmmdd-HHMMSS>-<hex>/`):

    sweep.json    what was asked (config, sets, grid, seeds), each grid point's resolved
                  config, and every member: its grid point, grid values, seed, run id,
                  status, time and metrics
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

`shoal sweep --resume DIR` continues a sweep that stopped (Ctrl-C, killed, a member that
failed): finished members are kept, a member whose run directory exists is resumed from
its last checkpoint (so it ends as it would have), and the others run; the members'
configs come from sweep.json, not from the config file, which may have changed since.
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

import pandas as pd
import yaml

from shoal.analysis.sweeps import (
    LEVEL,
    SUMMARY_FILE,
    SWEEP_FILE,
    member_metrics,
    members_frame,
    summarize_members,
)
from shoal.config import Config, load_config, parse_config, resolved_dict
from shoal.config.loading import override_value
from shoal.config.yaml_text import yaml_value
from shoal.core.errors import InputError
from shoal.core.files import write_text
from shoal.runs.task_pool import Outcome, TaskPool, failure

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
            values = [yaml_value(p) for p in parts]
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise InputError(f"--grid {item!r}: a value is not valid YAML ({problem}); "
                             "quote it") from None
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


MAX_SEEDS = 100_000  # members of one sweep (each a run directory)


def plan_sweep(config: str | Path, seeds: int, seed_base: int = 0,
               grid: list[str] | None = None, sets: list[str] | None = None,
               out: str | Path = "runs", labels: dict[str, str] | None = None
               ) -> SweepPlan:
    """Validate every member's config (InputError on any problem; nothing is written).
    `labels`: how messages name an override a flag wrote (`--rounds 0`)."""
    if seeds < 1:
        raise InputError(f"--seeds {seeds}: need at least one seed")
    if seeds > MAX_SEEDS:  # each is a run directory: a typo, not a plan
        raise InputError(f"--seeds {seeds}: at most {MAX_SEEDS:,} runs in one sweep")
    if seed_base < 0 or seed_base + seeds > 2**63:
        raise InputError(f"--seed-base {seed_base}: seeds must lie in 0..2^63-1")
    axes = parse_grid(grid)
    points = math.prod(len(values) for values in axes.values())
    if points * seeds > MAX_SEEDS:  # (before a grid point is loaded: that takes a while)
        raise InputError(f"--grid: {points:,} grid points × {seeds:,} seed(s) = "
                         f"{points * seeds:,} runs; at most {MAX_SEEDS:,} in one sweep")
    base = load_config(config, list(sets or []), labels)
    if Path(out).exists() and not Path(out).is_dir():
        raise InputError(f"--out {out}: a file, not a folder")
    root = Path(out).resolve() / f"{base.name}-sweep-{datetime.now():%Y%m%d-%H%M%S}-" \
                                 f"{secrets.token_hex(2)}"
    plan = SweepPlan(root=root, source=Path(config), grid=axes,
                     seeds=list(range(seed_base, seed_base + seeds)), sets=list(sets or []),
                     members=[], name=base.name)
    configs = []
    for point in plan.points:
        grid_sets = [f"{k}={override_value(v)}" for k, v in point.items()]
        try:
            configs.append(_point_config(load_config(config, [*plan.sets, *grid_sets]), root))
        except InputError as exc:
            shown = ", ".join(f"{k}={v}" for k, v in point.items())
            raise InputError(f"grid point {shown}: {exc}") from None
    plan.members = _members(plan, configs)
    return plan


def _point_config(cfg: Config, root: Path) -> dict:
    """A grid point's resolved config: runs under the sweep folder, and the local executor
    inside its Ray task (where agents decide never changes results)."""
    data = resolved_dict(cfg)
    data["output"]["dir"] = str(root)
    data["executor"] = {**data["executor"], "kind": "local", "address": None}
    return data


def _members(plan: SweepPlan, configs: list[dict]) -> list[Member]:
    """Every member, its config its point's with its seed and name (validated)."""
    members = []
    for p, point in enumerate(plan.points):
        for seed in plan.seeds:
            name = f"{plan.name}-p{p}-s{seed}" if plan.grid else f"{plan.name}-s{seed}"
            config = {**configs[p], "seed": seed, "name": name}
            parse_config(config)  # the seed range and name pattern are the config's to check
            members.append(Member(index=len(members), point=p, seed=seed, grid=point,
                                  config=config))
    return members


# ---------------------------------------------------------------------- running


def run_member(config: dict, started: str | None = None) -> dict:
    """Run one member to the end and measure it (the body of a Ray task): from its config,
    or, `started`, resuming the run directory an earlier attempt left. Errors come back as
    data, so one failed member does not stop the sweep."""
    from shoal.runs.simulation import Simulation  # a Ray worker imports it when it runs one

    start = time.perf_counter()
    try:
        sim = Simulation.resume(started) if started else Simulation.create(parse_config(config))
        with sim as run:
            run.run()
        metrics = member_metrics(run.dir.root)
    except Exception as exc:  # recorded in sweep.json; the driver reports it
        return failure(exc, start)
    return {"status": "finished", "run": run.dir.run_id, "seconds": time.perf_counter() - start,
            "rounds": run.world.round, "metrics": metrics}


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
              on_member: Callable[[dict, int, int], None] | None = None,
              resumed: dict | None = None) -> SweepResult:
    """Create the sweep folder and run every member on Ray (joining `address`, or a Ray
    already initialized in this process, or starting a local one), at most `parallel` at
    once (default: the cluster's CPUs). `on_member(record, done, total)` after each.
    `resumed`: the record of a sweep that stopped (`reopen_sweep`), whose folder exists:
    only its unfinished members run."""
    if parallel is not None and parallel < 1:
        raise InputError(f"--parallel {parallel}: must be >= 1")
    start = time.perf_counter()
    spec = resumed if resumed is not None else _spec(plan, [_record(m) for m in plan.members])
    spec["status"] = "running"
    records = spec["members"]
    todo = [i for i, r in enumerate(records) if r["status"] != "finished"]
    done = len(records) - len(todo)

    def args(i: int) -> tuple[Any, ...]:
        records[i]["status"] = "running"
        started = _started(plan.root, plan.members[i]) if resumed is not None else None
        return (plan.members[i].config, started and str(started))

    def finished(i: int, out: Outcome) -> None:
        nonlocal done
        records[i].update(out.value if out.ok else {"status": "failed", "error": out.error})
        done += 1
        spec["seconds"] = time.perf_counter() - start
        write_json(plan.root / SWEEP_FILE, spec)
        if on_member is not None:
            on_member(records[i], done, len(records))

    with TaskPool(run_member, parallel, address) as pool:
        try:
            if resumed is None:
                plan.root.mkdir(parents=True, exist_ok=False)
                shutil.copyfile(plan.source, plan.root / "config.yaml")
            write_json(plan.root / SWEEP_FILE, spec)
            pool.run(lambda: todo, args, finished)
        except KeyboardInterrupt:
            spec["status"] = "interrupted"
            for r in records:  # (their run directories stay: a resume continues them)
                if r["status"] == "running":
                    r["status"] = "interrupted"
            write_json(plan.root / SWEEP_FILE, spec)
            raise
    result = SweepResult(root=plan.root, members=records, seconds=time.perf_counter() - start)
    spec["status"] = "failed" if result.failed else "finished"
    spec["seconds"] = result.seconds
    write_json(plan.root / SWEEP_FILE, spec)
    result.summary = summarize_members(members_frame(spec), list(plan.grid))
    result.summary.to_csv(plan.root / SUMMARY_FILE, index=False)
    return result


def _record(m: Member) -> dict:
    return {"member": m.index, "point": m.point, "seed": m.seed, "grid": m.grid,
            "status": "pending", "run": None}


def _spec(plan: SweepPlan, records: list[dict]) -> dict:
    # (members run point by point, each point's seeds in turn)
    configs = [plan.members[p * len(plan.seeds)].config for p in range(len(plan.points))]
    return {"sweep": plan.root.name, "created_at": datetime.now().isoformat(),
            "status": "running", "config": str(plan.source), "name": plan.name,
            "sets": plan.sets, "grid": plan.grid, "seeds": plan.seeds, "points": plan.points,
            "point_configs": [{k: v for k, v in c.items() if k not in ("seed", "name")}
                              for c in configs],
            "interval": f"{LEVEL:.0%} Student t-interval over seeds", "members": records}


def _started(root: Path, member: Member) -> Path | None:
    """The run directory an earlier attempt at `member` left in the sweep folder (the
    newest, if several), or None."""
    pattern = re.compile(re.escape(member.config["name"]) + r"-\d{8}-\d{6}-[0-9a-f]+$")
    found = sorted(p for p in root.iterdir() if pattern.match(p.name)
                   and (p / "run.json").is_file())
    return found[-1] if found else None


def reopen_sweep(path: str | Path) -> tuple[SweepPlan, dict, int]:
    """A sweep folder to continue: its plan rebuilt from sweep.json, its record with
    every member not recorded as finished (or whose run is gone) set back to pending, and
    how many members are kept."""
    root = Path(path).resolve()
    file = root / SWEEP_FILE
    if not file.is_file():
        raise InputError(f"--resume {path}: not a sweep directory (no {SWEEP_FILE})")
    try:
        spec = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"--resume {path}: {file} cannot be read ({exc})") from None
    if not (isinstance(spec, dict) and spec.keys() >= {"members", "grid", "seeds", "sets"}
            and isinstance(spec["members"], list)):
        raise InputError(f"--resume {path}: {file} is not a sweep's record (edited, or "
                         "another file); start the sweep again")
    if "point_configs" not in spec or "name" not in spec:
        raise InputError(f"--resume {path}: the sweep was started by an older Shoal, "
                         "whose sweep.json keeps no configs to resume from; start it again")
    plan = SweepPlan(root=root, source=Path(spec["config"]), grid=spec["grid"],
                     seeds=spec["seeds"], sets=spec["sets"], members=[], name=spec["name"])
    try:
        plan.members = _members(plan, spec["point_configs"])
    except (InputError, KeyError, TypeError, IndexError) as exc:
        raise InputError(f"--resume {path}: {file}: its configs are not valid ({exc})"
                         ) from None
    if len(plan.members) != len(spec["members"]):
        raise InputError(f"--resume {path}: {file} is not a sweep's record (edited, or "
                         "another file); start the sweep again")
    kept = 0
    for record in spec["members"]:
        if record.get("status") == "finished" and record.get("run") and \
                (root / record["run"] / "run.json").is_file():
            kept += 1
        else:
            record.update(status="pending", run=None, error=None)
            record.pop("input_error", None)
    return plan, spec, kept


def write_json(path: Path, data: dict) -> None:
    """Atomic replace, so a reader never sees half a file."""
    with _WRITE_LOCK:
        write_text(path, json.dumps(data, indent=2, default=str))

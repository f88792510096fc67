"""`shoal experiment`: arms compared in pairs, with common random numbers, on Ray.

A config's `experiment:` section (shoal.config.experiment, docs/experiments.md) names arms,
each a change of the config that a fork could make (config overrides, interventions
added, removed or moved), a control arm, a branch round k and N replicates. Replicate i
(seed seed_base + i) is one **base run** of rounds 1..k and one **fork** of it at k per
arm, so the arms of a replicate share their first k rounds and every random stream the
treatment does not touch; with k = 0 each arm is its own run from round 0 with the
replicate's seed. Every arm's plan is validated against the config before anything is
written; a problem names its path (`experiment.arms.news_at_5.overrides.foo: ...`).

Units (a base run, an arm's run) run as Ray tasks like a sweep's members, one CPU each
with the in-process executor inside (`--parallel` at once); an arm runs once its base has
finished. Layout of an experiment directory (`<out>/<name>-experiment-<stamp>-<hex>/`):

    experiment.json     what was asked (the base config, the arms' fork plans, seeds,
                        metrics) and every unit's status, replaced atomically as units
                        finish
    config.yaml         the source config, as given
    r0-base/<run_id>/   replicate 0's base run (stopped at round k)
    r0-<arm>/<run_id>/  its fork for <arm>; metrics.parquet beside it: the arm's metrics
                        per round over its full history
    metrics.csv, effects.csv, effects_by_round.csv, report.html   when every unit is done

`shoal experiment --resume DIR` continues an experiment that stopped (killed, Ctrl-C, a
machine gone): units recorded as finished are kept, every other unit is run again from an
empty folder. Runs are deterministic, so the tables are those of an uninterrupted
experiment.
"""

from __future__ import annotations

import difflib
import json
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from shoal.analysis.experiments import (
    EXPERIMENT_FILE,
    LEVEL,
    MIN_BOOTSTRAP,
    RESAMPLES,
    UNIT_METRICS_FILE,
    Experiment,
    open_experiment,
    unit_metrics,
    write_report,
    write_tables,
)
from shoal.config import Config, load_config, parse_config, resolved_dict
from shoal.config.experiment import BASE, ArmSpec, ExperimentConfig
from shoal.config.interventions import MUTABLE_SECTIONS, mutable
from shoal.config.loading import locate, override_value, shown_override
from shoal.config.model import NAME_MAX
from shoal.config.platforms import mutable_fields
from shoal.core.errors import InputError
from shoal.core.faults import crash_point
from shoal.core.files import replacing
from shoal.runs.fork_plan import ForkPlan, Schedule, fork_config
from shoal.runs.sweep import write_json
from shoal.runs.task_pool import Outcome, TaskPool, failure

# Fields no arm may change, and why: they are the experiment's to set.
_RESERVED = {
    "seed": "the replicates set the seeds (experiment.replicates, experiment.seed_base)",
    "rounds": "every arm runs the same rounds, so that they compare round by round",
    "name": "the experiment names its runs",
    "output.dir": "the experiment places its runs",
    "executor": "each run uses the in-process executor inside its Ray task",
    "experiment": "an arm is a run, not an experiment",
}
_NOT_FOR_ARMS = {"seed", "rounds", "name", "executor"}


@dataclass
class ExperimentPlan:
    """A validated experiment, not started: its folder (not created yet), the spec
    experiment.json will hold, and `notes`: warnings about it (too few replicates for an
    interval, a survey sample larger than its pool), each naming its field."""

    root: Path
    source: Path
    spec: dict
    notes: list[str] = field(default_factory=list)


def plan_experiment(config: str | Path, sets: list[str] | None = None,
                    out: str | Path = "runs") -> ExperimentPlan:
    """Read a config with an `experiment:` section (and `--set` overrides), check every
    arm's plan against it, and lay out the units. InputError on any problem; nothing is
    written."""
    cfg = load_config(config, list(sets or []))
    exp = cfg.experiment
    if exp is None:
        raise InputError(f"{config}: the config has no experiment section (see "
                         "docs/experiments.md)")
    base = resolved_dict(cfg)
    base.pop("experiment", None)
    base["executor"] = {**base["executor"], "kind": "local", "address": None}
    arms = {}
    for arm, arm_spec in exp.arms.items():
        try:
            arms[arm] = arm_plan(arm, arm_spec, base, exp.branch_round)
        except InputError as exc:
            raise locate(cfg, exc) from None
    for arm in exp.arms:  # (checked by each unit as it starts: too late)
        run_name = f"{cfg.name}-r{exp.replicates - 1}-{arm}"
        if len(run_name) > NAME_MAX:
            raise locate(cfg, InputError(
                f"experiment.arms.{arm}: the arm's runs are named like {run_name!r}, "
                f"longer than {NAME_MAX} characters; give the arm (or the config) a "
                "shorter name"))
    root = Path(out).resolve() / (f"{cfg.name}-experiment-{datetime.now():%Y%m%d-%H%M%S}-"
                                  f"{secrets.token_hex(2)}")
    seeds = list(range(exp.seed_base, exp.seed_base + exp.replicates))
    spec = {"experiment": root.name, "created_at": datetime.now().isoformat(),
            "status": "planned", "config": str(config), "sets": list(sets or []),
            "name": cfg.name, "branch_round": exp.branch_round,
            "replicates": exp.replicates, "seeds": seeds, "control": exp.control,
            "arms": {a: asdict(p) for a, p in arms.items()},
            "metrics": exp.metric_names(cfg.topic_names),
            "interval": f"{LEVEL:.0%} percentile bootstrap ({RESAMPLES} resamples; from "
                        f"{MIN_BOOTSTRAP} replicates on) and Student t (from 2), over "
                        "replicates",
            "base_config": base, "units": _units(exp, seeds), "seconds": 0.0}
    notes = cfg.notes()
    if exp.replicates < MIN_BOOTSTRAP:
        notes.append(f"experiment.replicates: {exp.replicates} replicate(s) give no "
                     f"bootstrap interval (it needs at least {MIN_BOOTSTRAP})"
                     + ("" if exp.replicates >= 2 else ", and one gives no interval at all")
                     + "; the effects say n/a where a statistic cannot be estimated")
    return ExperimentPlan(root=root, source=Path(config), spec=spec,
                          notes=[str(locate(cfg, InputError(n))) for n in notes])


def _units(exp: ExperimentConfig, seeds: list[int]) -> list[dict]:
    """Each replicate's base run (when k > 0), then its arms."""
    width = len(str(len(seeds) - 1))
    units = []
    for i, seed in enumerate(seeds):
        kinds = ([(BASE, None)] if exp.branch_round > 0 else []) + [(a, a) for a in exp.arms]
        for label, arm in kinds:
            units.append({"unit": f"r{i:0{width}d}-{label}", "kind": "base" if arm is None
                          else "arm", "arm": arm, "replicate": i, "seed": seed,
                          "status": "pending", "run": None, "seconds": None, "error": None})
    return units


def arm_plan(arm: str, spec: ArmSpec, base: dict, k: int) -> ForkPlan:
    """An arm as a fork plan of the base config at round k, checked as a fork is: every
    problem is an InputError naming its path under `experiment.arms.<arm>`."""
    where = f"experiment.arms.{arm}"
    schedule = Schedule(base.get("interventions") or [], k)
    sets, labels = [], {}
    for key, value in spec.overrides.items():
        path = f"{where}.overrides.{key}"
        _check_override(key, path, schedule)
        sets.append(f"{key}={override_value(value)}")
        labels[sets[-1]] = f"{where}.overrides"
    edits = []
    for i, ref in enumerate(spec.interventions.remove):
        schedule.find(str(ref), f"{where}.interventions.remove.{i}:")
        edits.append(f"drop {ref}")
    for ref, to in spec.interventions.move.items():
        path = f"{where}.interventions.move.{ref}"
        schedule.find(str(ref), f"{path}:")
        if to <= k:
            raise InputError(f"{path}: round {to} is not after the branch round ({k}); an "
                             f"arm can only schedule rounds after {k}")
        edits.append(f"move {ref} {to}")
    for i, entry in enumerate(spec.interventions.add):
        r = entry.get("round")
        if type(r) is int and r <= k:
            raise InputError(f"{where}.interventions.add.{i}.round: {r} is not after the "
                             f"branch round ({k}); an arm can only schedule rounds after {k}")
    plan = ForkPlan(sets=sets, interventions=list(spec.interventions.add), schedule=edits,
                    source=f"{where}.interventions.add", labels=labels)
    try:  # the fork's own checks: values, the schedule as edited, the whole config
        cfg, _, _ = fork_config(base, k, plan)
        _check_ids(cfg, base, k)
    except InputError as exc:  # named as the arm's fields, not as the flags of `shoal fork`
        text = str(exc)
        for item in sets:
            key = item.split("=", 1)[0]
            for flag in (f"--set {shown_override(item)}", f"--set {key}"):
                text = text.replace(flag, f"{where}.overrides.{key}")
        raise InputError(text if text.startswith(where) else f"{where}: {text}") from None
    return plan


def _check_ids(cfg: Config, base: dict, k: int) -> None:
    """The agent ids an arm's selectors name exist where the arm resolves them: among
    the agents at the branch round (a fork checks them there; with k = 0, at round 0),
    so that a unit does not fail for it after the experiment has started. Known before
    anything runs for a generated population: its size and the agents added by k; a
    profile file's are checked when each unit starts."""
    size = base["population"].get("size")
    if size is None:
        return
    n = size + sum(e.get("count", 0) for e in base.get("interventions") or []
                   if e.get("kind") == "add_agents" and e.get("round", 0) <= k)
    for path, selector in cfg.selectors():
        bad = [i for i in selector.ids or [] if i >= n]
        if bad:
            at = f" at round {k}" if k else ""
            raise locate(cfg, InputError(f"{path}.ids: no agent {bad[0]} (the population "
                                         f"has {n} agents{at}, ids 0..{n - 1})"))


def _check_override(key: str, path: str, schedule: Schedule) -> None:
    """What an arm may override: what a fork may change, except the fields the experiment
    sets itself."""
    top = key.split(".")[0]
    if top == "interventions":
        parts = key.split(".")
        if len(parts) > 1:  # an entry edited by name or index: it must be ahead of k
            schedule.find(parts[1], f"{path}:")
        return
    if top not in Config.model_fields:
        close = difflib.get_close_matches(top, list(Config.model_fields), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(f"{path}: unknown field {top!r}{hint}")
    for reserved, why in _RESERVED.items():
        if key == reserved or key.startswith(reserved + "."):
            raise InputError(f"{path}: an arm cannot change {reserved}: {why}")
    if not mutable(key):
        parts = key.split(".")
        platform = parts[1] if parts[0] == "platforms" and len(parts) > 1 else "<name>"
        allowed = [f"{s} (except {s}.dir)" if s == "output" else s
                   for s in MUTABLE_SECTIONS if s not in _NOT_FOR_ARMS]
        raise InputError(f"{path}: an arm cannot change this: it only shaped round 0, "
                         "and an arm changes what a fork of the base run may; arms may "
                         "change "
                         f"{', '.join(allowed)}, platforms.{platform}.{{"
                         f"{','.join(mutable_fields(platform))}}}, and interventions after "
                         "the branch round")


# ---------------------------------------------------------------------- one unit


def run_unit(task: dict) -> dict:
    """Run one unit from an empty folder (the body of a Ray task): a base run to round k,
    or an arm (a fork of its base at k, or with k = 0 a run of its own) to the end, then
    the arm's metrics per round into metrics.parquet beside its run. Errors come back as
    data, so one failed unit does not stop the experiment."""
    from shoal.runs.fork import fork_run  # a Ray worker imports the engine when it runs one
    from shoal.runs.simulation import Simulation

    start = time.perf_counter()
    folder = Path(task["dir"])
    try:
        shutil.rmtree(folder, ignore_errors=True)  # what a killed attempt left
        folder.mkdir(parents=True)
        if task["kind"] == "base":
            with Simulation.create(parse_config(task["config"]), out=folder) as sim:
                sim.run(task["rounds"])
            sim.dir.write_meta(status="stopped", stopped_reason=(
                f"an experiment's base run: it runs to round {task['rounds']}, where the "
                "arms fork from it"))
        else:
            if task["kind"] == "fork":
                sim = fork_run(task["parent"], task["round"], ForkPlan(**task["plan"]),
                               out=folder, name=task["name"])
            else:
                sim = Simulation.create(parse_config(task["config"]), out=folder)
            with sim:
                sim.run()
                frame = unit_metrics(sim.reader(), task["metrics"])
            with replacing(folder / UNIT_METRICS_FILE) as tmp:
                frame.to_parquet(tmp, index=False)
    except Exception as exc:  # recorded in experiment.json; the driver reports it
        return failure(exc, start)
    return {"status": "finished", "run": f"{folder.name}/{sim.dir.run_id}",
            "seconds": time.perf_counter() - start}


def unit_task(root: Path, spec: dict, unit: dict) -> dict:
    """What `run_unit` needs for `unit`, from the spec (so a resume rebuilds it)."""
    i, seed = unit["replicate"], unit["seed"]
    folder = root / unit["unit"]
    config = {**spec["base_config"], "seed": seed, "name": f"{spec['name']}-r{i}",
              "output": {**spec["base_config"]["output"], "dir": str(folder)}}
    if unit["kind"] == "base":
        return {"kind": "base", "dir": str(folder), "config": config,
                "rounds": spec["branch_round"]}
    arm = unit["arm"]
    name = f"{spec['name']}-r{i}-{arm}"
    if spec["branch_round"] > 0:
        base = next(u for u in spec["units"] if u["kind"] == "base" and u["replicate"] == i)
        return {"kind": "fork", "dir": str(folder), "parent": str(root / base["run"]),
                "round": spec["branch_round"], "plan": spec["arms"][arm], "name": name,
                "metrics": spec["metrics"]}
    plan = ForkPlan(**spec["arms"][arm])
    cfg, _, _ = fork_config({**config, "name": name}, 0, plan)
    return {"kind": "run", "dir": str(folder), "config": resolved_dict(cfg),
            "metrics": spec["metrics"]}


# ---------------------------------------------------------------------- the experiment


@dataclass
class ExperimentResult:
    """A finished (or stopped) experiment: its folder, spec and, once every unit is
    done, the opened experiment with its tables written."""

    root: Path
    spec: dict
    experiment: Experiment | None = None
    seconds: float = 0.0
    files: list[Path] = field(default_factory=list)

    @property
    def failed(self) -> list[dict]:
        """Units that did not finish."""
        return [u for u in self.spec["units"] if u["status"] != "finished"]


def start_experiment(plan: ExperimentPlan) -> tuple[Path, dict]:
    """Create the experiment folder with its config and experiment.json."""
    try:
        plan.root.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise InputError(f"--out {plan.root.parent}: cannot create the experiment folder "
                         f"there ({exc.strerror or exc})") from None
    shutil.copyfile(plan.source, plan.root / "config.yaml")
    write_json(plan.root / EXPERIMENT_FILE, plan.spec)
    return plan.root, plan.spec


def reopen_experiment(path: str | Path) -> tuple[Path, dict, int]:
    """An experiment folder to continue: its spec with every unit that is not recorded as
    finished (or whose files are gone) set back to pending; and how many are kept."""
    root = Path(path).resolve()
    file = root / EXPERIMENT_FILE
    if not file.is_file():
        raise InputError(f"--resume {path}: not an experiment directory (no "
                         f"{EXPERIMENT_FILE})")
    try:
        spec = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"--resume {path}: {file} cannot be read ({exc})") from None
    if not (isinstance(spec, dict) and spec.keys() >= _RECORD_KEYS
            and isinstance(spec["units"], list)
            and all(isinstance(u, dict) and {"status", "kind", "unit", "replicate"} <= u.keys()
                    for u in spec["units"])):
        raise InputError(f"--resume {path}: {file} is not an experiment's record (edited, "
                         "or another file); start the experiment again")
    kept = 0
    for unit in spec["units"]:
        done = unit["status"] == "finished" and unit.get("run") and \
            (root / unit["run"] / "run.json").is_file() and (
                unit["kind"] == "base" or (root / unit["unit"] / UNIT_METRICS_FILE).is_file())
        if done:
            kept += 1
        else:
            unit.update(status="pending", run=None, seconds=None, error=None)
            unit.pop("input_error", None)
    for unit in spec["units"]:  # an arm forks its base's run: a base redone, its arms too
        base = _base_of(spec, unit)
        if base is not None and base["status"] != "finished" and unit["status"] == "finished":
            unit.update(status="pending", run=None, seconds=None, error=None)
            kept -= 1
    return root, spec, kept


# what resuming reads of experiment.json before any run starts
_RECORD_KEYS = {"name", "branch_round", "arms", "metrics", "base_config", "units", "control"}


def _base_of(spec: dict, unit: dict) -> dict | None:
    if unit["kind"] != "arm" or spec["branch_round"] == 0:
        return None
    return next(u for u in spec["units"] if u["kind"] == "base"
                and u["replicate"] == unit["replicate"])


def run_experiment(root: Path, spec: dict, parallel: int | None = None,
                   address: str | None = None,
                   on_unit: Callable[[dict, int, int], None] | None = None
                   ) -> ExperimentResult:
    """Run every pending unit on Ray (joining `address`, or a Ray already initialized in
    this process, or starting a local one), at most `parallel` at once (default: the
    cluster's CPUs), an arm once its base has finished; `on_unit(record, done, total)`
    after each. When all are done, write the tables and the report."""
    if parallel is not None and parallel < 1:
        raise InputError(f"--parallel {parallel}: must be >= 1")
    start = time.perf_counter()
    file = root / EXPERIMENT_FILE
    units = {u["unit"]: u for u in spec["units"]}
    total = sum(u["status"] != "finished" for u in units.values())
    done = 0

    def args(key: str) -> tuple[Any, ...]:
        units[key]["status"] = "running"
        return (unit_task(root, spec, units[key]),)

    def finished(key: str, out: Outcome) -> None:
        nonlocal done
        unit = units[key]
        unit.update(out.value if out.ok else {"status": "failed", "error": out.error})
        done += 1
        for arm in _orphans(spec, unit):
            arm.update(status="failed", error=f"its base run ({unit['unit']}) failed")
            done += 1
        write_json(file, spec)
        crash_point("experimenting", done)
        if on_unit is not None:
            on_unit(unit, done, total)

    with TaskPool(run_unit, parallel, address) as pool:
        spec["status"] = "running"
        write_json(file, spec)
        try:
            pool.run(lambda: [u["unit"] for u in _ready(spec)], args, finished)
        except KeyboardInterrupt:
            for key in pool.running:
                units[key]["status"] = "pending"
            spec["status"] = "interrupted"
            write_json(file, spec)
            raise
    result = ExperimentResult(root=root, spec=spec, seconds=time.perf_counter() - start)
    spec["status"] = "failed" if result.failed else "finished"
    spec["seconds"] = spec.get("seconds", 0.0) + result.seconds
    write_json(file, spec)
    result.experiment = open_experiment(root)
    result.files = [*write_tables(result.experiment), write_report(result.experiment)]
    return result


def _ready(spec: dict) -> list[dict]:
    """Pending units that can start: arms whose base has finished first (a replicate's
    results complete sooner), then bases."""
    units = [u for u in spec["units"] if u["status"] == "pending"]
    arms = [u for u in units if u["kind"] == "arm" and (
        (b := _base_of(spec, u)) is None or b["status"] == "finished")]
    return arms + [u for u in units if u["kind"] == "base"]


def _orphans(spec: dict, unit: dict) -> list[dict]:
    """The pending arms of a base run that failed."""
    if unit["kind"] != "base" or unit["status"] == "finished":
        return []
    return [u for u in spec["units"] if u["kind"] == "arm" and u["status"] == "pending"
            and u["replicate"] == unit["replicate"]]

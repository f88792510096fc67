"""`shoal calibrate`: fit config parameters to an observed time series (docs/calibration.md).

The target is a CSV of (round, metric, value) rows: a metric of the positions on a topic at
a round — `mean.<topic>`, `sd.<topic>`, `bimodality.<topic>`, `support.<topic>` (share with
a position above 0), `retest.<topic>` (correlation of each agent's position with its
position at round 0: panel stability). Parameters are config fields with a range
(`beliefs.update.rate=0.001:0.2:log`).

Method: approximate Bayesian computation by rejection. Draw i takes its parameters from the
prior (uniform on the range, or on its logarithm) with a generator keyed by (seed, i), so
its values depend on nothing else; each draw runs the config with `seeds` seeds on Ray (one
task per run) and its distance to the target is the mean over target rows of the squared
difference of the seed-averaged metric, divided per metric by max(sd of the target's
values, 0.01)². The `accept` share of draws closest to the target is the approximate
posterior: the estimate is its median, the uncertainty its 5th–95th percentiles (a 90%
interval, reported from MIN_ACCEPTED accepted draws on). Each finished draw is recorded,
whole, in an Optuna study kept in a journal file, so a killed calibration resumes where it
stopped and more trials extend a finished one, with the draws an uninterrupted
calibration would have made: never a draw again.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shoal.config import load_config, resolved_dict
from shoal.config.yaml_text import dump_yaml
from shoal.core.errors import InputError
from shoal.core.files import replacing, special
from shoal.core.text_files import read_user_text
from shoal.runs.task_pool import Outcome, TaskPool

KINDS = ("mean", "sd", "bimodality", "support", "retest")
# What each kind can be, whatever the run: a target outside it can never be fitted, so it
# is a mistake in the file (a 1-7 scale not rescaled, a percentage for a share). Positions
# lie in [-1, 1]; the sd (ddof 0) of such values is at most 1 (half at -1, half at 1);
# Sarle's coefficient, corrected or not, lies in (0, 1] (kurtosis >= skewness² + 1).
RANGES: dict[str, tuple[float, float, str]] = {
    "mean": (-1.0, 1.0, "positions lie in [-1, 1]"),
    "sd": (0.0, 1.0, "the sd of positions in [-1, 1] is at most 1"),
    "bimodality": (0.0, 1.0, "Sarle's bimodality coefficient lies in (0, 1]"),
    "support": (0.0, 1.0, "it is a share of agents"),
    "retest": (-1.0, 1.0, "it is a correlation"),
}
STUDY_FILE, TRIALS_FILE, RESULT_FILE = "study.journal", "trials.csv", "calibration.json"
SPEC_FILE, TARGET_FILE = "spec.json", "target.csv"  # TARGET_FILE: the target's copy
# Fewer accepted draws than this give no 90% interval: their 5th and 95th percentiles are
# (nearly) their smallest and largest value, or one value (the same rule as an
# experiment's bootstrap interval, shoal.analysis.experiments.MIN_BOOTSTRAP).
MIN_ACCEPTED = 5
MAX_RUNS = 100_000  # runs of one calibration (--trials × --seeds), as of a sweep: a typo beyond


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
    if not (math.isfinite(low) and math.isfinite(high)):
        raise InputError(f"--param {text}: LOW and HIGH must be finite numbers")
    if not low < high or (log and low <= 0):
        raise InputError(f"--param {text}: the range must have LOW < HIGH"
                         + (" and LOW > 0 for a log range" if log else ""))
    return Param(key.strip(), low, high, log)


def shown(p: Param) -> str:
    """A parameter as the command line gives it: `--param KEY=LOW:HIGH[:log]`."""
    return f"--param {p.key}={p.low:g}:{p.high:g}" + (":log" if p.log else "")


def draw(params: list[Param], seed: int, index: int) -> dict[str, float]:
    """Draw `index`'s values: each parameter uniform on its range (or on its logarithm),
    from numpy's generator seeded with (seed, index), so that a draw is the same however
    the calibration was cut and resumed, and no two draws share a stream."""
    u = np.random.default_rng([seed, index]).random(len(params))
    out = {}
    for p, x in zip(params, u, strict=True):
        if p.log:
            value = math.exp(math.log(p.low) + x * (math.log(p.high) - math.log(p.low)))
        else:
            value = p.low + x * (p.high - p.low)
        out[p.key] = min(max(float(value), p.low), p.high)  # (exp∘log may round past an end)
    return out


def position_series(beliefs: pd.DataFrame) -> pd.DataFrame:
    """Every metric of KINDS per round and topic: round, metric, value. `retest` is
    Pearson's r between the agents' positions at the round and at the first round, over
    the agents present in both; like the bimodality coefficient it is NaN where it is
    undefined (fewer than two agents, or no spread beyond rounding at either round: a
    consensus has no correlation with anything, and is not a perfectly stable panel)."""
    from shoal.analysis.metrics import _pearson, bimodality_coefficient

    rows = []
    first = beliefs[beliefs["round"] == beliefs["round"].min()]
    for topic, part in beliefs.groupby("topic", sort=False):
        start = first[first["topic"] == topic].set_index("agent")["position"]
        for r, now in part.groupby("round"):
            x = now["position"].to_numpy()
            base = start.reindex(now["agent"]).to_numpy()
            ok = ~np.isnan(base)
            retest = _pearson(base[ok], x[ok])
            for kind, value in (("mean", x.mean()), ("sd", x.std()),
                                ("bimodality", bimodality_coefficient(x)),
                                ("support", float((x > 0).mean())), ("retest", retest)):
                rows.append({"round": int(r), "metric": f"{kind}.{topic}",
                             "value": float(value)})
    return pd.DataFrame(rows, columns=["round", "metric", "value"])


def load_target(path: str | Path, topics: list[str], rounds: int) -> pd.DataFrame:
    """The target CSV at `path` (a regular file), read and checked: `parse_target`."""
    return parse_target(path, read_target(path), topics, rounds)


def read_target(path: str | Path) -> str:
    """The text of the target CSV: an InputError naming `--target` if it is a pipe or a
    device (read once it is gone, so a resume or a second read finds nothing; a FIFO with
    no writer never ends), cannot be read or is not UTF-8 text."""
    if special(path):  # (a folder or a missing file: read_user_text says what is wrong)
        raise InputError(f"--target {path}: not a regular file (a pipe or device); save it "
                         "to a file")
    try:
        return read_user_text(Path(path), "target CSV", "save the target as UTF-8 CSV")
    except InputError as exc:
        raise InputError(f"--target {exc}") from None


def parse_target(path: str | Path, text: str, topics: list[str], rounds: int
                 ) -> pd.DataFrame:
    """The target CSV `text` (round, metric, value; read from `path`, which messages
    name), checked against the config: every row (named by the line where it starts) has
    as many fields as the header, a known metric, a whole round in 0..rounds and a finite
    value within the metric's possible range (RANGES), no (round, metric) comes twice,
    and there is at least one row."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    known = {f"{k}.{t}" for k in KINDS for t in topics}
    rows, start = [], 1
    seen: dict[tuple[int, str], int] = {}  # (round, metric) -> its line
    try:
        for cells in reader:  # (a quoted newline makes a row of several lines)
            line, start = start, reader.line_num + 1
            if not any(c.strip() for c in cells):
                continue
            if header is None:
                header = [c.strip() for c in cells]
                _check_target_header(path, line, header)
                continue
            if len(cells) != len(header):
                raise InputError(f"--target {path}, line {line}: {len(cells)} fields, the "
                                 f"header ({', '.join(header)}) has {len(header)}")
            row = _target_row(path, line, dict(zip(header, cells, strict=True)), known,
                              rounds)
            key = (row["round"], row["metric"])
            if key in seen:  # (two values of one observation: which to fit is unknowable)
                raise InputError(f"--target {path}, lines {seen[key]} and {line}: round "
                                 f"{key[0]}, {key[1]} is given twice; give each (round, "
                                 "metric) once")
            seen[key] = line
            rows.append(row)
    except csv.Error as exc:
        raise InputError(f"--target {path}, line {reader.line_num}: malformed CSV: "
                         f"{exc}") from None
    if not rows:
        raise InputError(f"--target {path}: no rows; give at least one observation "
                         "(round, metric, value)")
    return pd.DataFrame(rows, columns=["round", "metric", "value"])


def _check_target_header(path: str | Path, line: int, header: list[str]) -> None:
    """The header names round, metric and value, each once; if not, the message shows
    the header found and says when another separator or upper case is the cause."""
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise InputError(f"--target {path}, line {line}: column {twice[0]!r} appears twice")
    need = {"round", "metric", "value"}
    missing = need - set(header)
    if not missing:
        return
    found = ",".join(header)
    shown_header = found if len(found) <= 80 else found[:77] + "..."
    hints = []
    names = header
    sep = next((s for s in (";", "\t", "|") if s in found), None)
    if sep is not None:
        names = [c.strip() for c in found.split(sep)]
        if need <= {c.lower() for c in names}:
            hints.append(f"separate the columns with commas, not {sep!r}")
    if need - set(names) and need <= {c.lower() for c in names}:
        hints.append("write the column names in lower case")
    raise InputError(f"--target {path}: missing columns {sorted(missing)} (need round, "
                     f"metric, value); the header (line {line}) is {shown_header!r}"
                     + (": " + " and ".join(hints) if hints else ""))


def _target_row(path: str | Path, line: int, row: dict[str, str], known: set[str],
                rounds: int) -> dict[str, Any]:
    """One observation of the target, checked (InputError naming its line)."""
    metric = row["metric"].strip()
    if metric not in known:
        raise InputError(f"--target {path}, line {line}: unknown metric {row['metric']!r}; "
                         f"metrics: {', '.join(sorted(known))}")
    r = row["round"].strip()  # (ASCII digits: `²` is a digit to str.isdigit, not to int)
    if not (r.isascii() and r.isdigit() and len(r) < 19 and int(r) <= rounds):
        raise InputError(f"--target {path}, line {line}: round {r!r} is not a round in "
                         f"0..{rounds}")
    try:
        value = float(row["value"])
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise InputError(f"--target {path}, line {line}: the value {row['value']!r} is not a "
                         "finite number")
    low, high, why = RANGES[metric.partition(".")[0]]
    if not low <= value <= high:
        raise InputError(f"--target {path}, line {line}: {metric} {row['value'].strip()} is "
                         f"outside its possible range [{low:g}, {high:g}] ({why})")
    return {"round": int(r), "metric": metric, "value": value}


def simulate(config: str, sets: list[str], seed: int) -> pd.DataFrame:
    """The metric series of one run of `config` with `sets` and `seed`, held in memory
    (the body of a Ray task)."""
    from shoal.analysis.runs import Run
    from shoal.runs.simulation import Simulation

    try:
        cfg = load_config(config, [*sets, f"seed={seed}"])
        with Simulation.create(cfg, out=None) as sim:
            sim.run()
            return position_series(Run(sim).beliefs)
    except InputError as exc:  # (as a plain InputError: a ConfigError does not unpickle)
        raise InputError(str(exc)) from None


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
    """The fit: every trial, the accepted ones, and the estimates (`low`, `high`: NaN
    when too few draws were accepted for an interval). `notes`: what the user should
    know about them (for the CLI to print as warnings). `target`: the rows fitted (for
    the plot: the target file is read once)."""

    out: Path
    trials: pd.DataFrame  # trial, draw, one column per parameter, distance, accepted
    estimates: pd.DataFrame  # param, estimate, low, high, best, prior_low, prior_high, log
    seconds: float
    notes: list[str] = field(default_factory=list)
    target: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["round", "metric", "value"]))

    @property
    def accepted(self) -> int:
        """The number of accepted draws."""
        return int(self.trials["accepted"].sum())


def _check_flags(trials: int, seeds: int, accept: float, seed: int, parallel: int | None,
                 params: list[Param]) -> None:
    """The flags' own limits, each named (before anything is read or written)."""
    if trials < 2:
        raise InputError(f"--trials {trials}: must be >= 2 (draws from the prior)")
    if seeds < 1:
        raise InputError(f"--seeds {seeds}: must be >= 1 (runs per draw)")
    if not 0 < accept <= 1:
        raise InputError(f"--accept {accept:g}: must be in (0, 1] (the share of draws kept)")
    if seed < 0:
        raise InputError(f"--seed {seed}: must be >= 0")
    if seed + seeds > 2**63:  # (a run refused it, after the output folder was written)
        raise InputError(f"--seed {seed}: the seeds --seed .. --seed + --seeds - 1 must lie "
                         "in 0..2^63-1")
    if trials * seeds > MAX_RUNS:  # (laying them out ran out of memory)
        raise InputError(f"--trials {trials} × --seeds {seeds}: {trials * seeds:,} runs; at "
                         f"most {MAX_RUNS:,} in one calibration")
    if parallel is not None and parallel < 1:
        raise InputError(f"--parallel {parallel}: must be >= 1")
    if not params:
        raise InputError("name at least one --param KEY=LOW:HIGH")
    keys = [p.key for p in params]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise InputError(f"--param {twice[0]}: given twice; fit each field once")


def _check_params(config: str, sets: list[str], params: list[Param]) -> None:
    """Both ends of each range, and a value inside it that is not a whole number, make
    valid configs (a draw is any real number in the range)."""
    def load(p: Param, value: float) -> None:
        item = f"{p.key}={value!r}"
        load_config(config, [*sets, item], labels={item: shown(p)})

    for p in params:
        load(p, p.low)
        load(p, p.high)
        inner = p.low + (p.high - p.low) * 0.3819660112501051  # (any fraction would do)
        if not inner.is_integer():
            try:
                load(p, inner)
            except InputError as exc:
                raise InputError(f"{exc}; a draw is any number in the range, so a field "
                                 "of whole numbers cannot be calibrated") from None


def calibrate(config: str, target: str | Path, params: list[Param], out: str | Path,
              trials: int = 64, seeds: int = 2, accept: float = 0.1, sets: list[str] | None = None,
              seed: int = 0, parallel: int | None = None, address: str | None = None,
              on_trial: Callable[[int, int, float], None] | None = None) -> Calibration:
    """Fit `params` of `config` to `target` (see the module docstring); results in `out`
    (resumed, or extended to `trials` draws, if it holds a study of the same
    calibration). Every input is checked before anything is written. The target is read
    once, here, and copied to `out`/TARGET_FILE, which a resume fits (`_folder_target`)."""
    import optuna

    started = time.perf_counter()
    _check_flags(trials, seeds, accept, seed, parallel, params)
    sets = list(sets or [])
    base = load_config(config, sets)
    _check_params(config, sets, params)
    text = read_target(target)
    data = parse_target(target, text, base.topic_names, base.rounds)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: is a file, not a folder")
    spec = {"config": str(config), "target": str(target), "sets": sets, "seed": seed,
            "seeds": seeds, "params": [p.__dict__ for p in params]}
    spec_file, copy = out / SPEC_FILE, out / TARGET_FILE
    old = _read_spec(spec_file)
    # the target path may change (the folder keeps its copy); anything else is another
    # calibration, whose draws' distances mean something else
    if old is not None and {**old, "target": None} != {**spec, "target": None}:
        raise InputError(f"--out {out}: holds another calibration (spec.json differs); "
                         "choose a new folder")
    data = _folder_target(out, target, data, old, base.topic_names, base.rounds)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {out}: cannot create the folder ({exc.strerror or exc})"
                         ) from None
    if not copy.exists():  # (whole or not at all: a kill leaves no half copy)
        with replacing(copy) as tmp:
            tmp.write_text(text, encoding="utf-8", newline="")
    if old is None:  # (a resume keeps the path first recorded)
        spec_file.write_text(json.dumps(spec, indent=1))
    _check_journal(out)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(out / STUDY_FILE)))
    study = optuna.create_study(study_name="calibration", storage=storage,
                                load_if_exists=True)
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    made = {t.user_attrs.get("draw") for t in complete}
    # the draws still to make: the first indices not recorded (one cut off by a kill is
    # made again, with its own values); a study made by an earlier release, without
    # indices, continues on fresh streams
    todo = list(itertools.islice((i for i in itertools.count() if i not in made),
                                 max(0, trials - len(complete))))
    lost: list[str] = []
    if todo:
        lost = _run_draws(study, todo, config, sets, params, data, seed, seeds, parallel,
                          address, len(complete), trials, on_trial)
    result = summarise(study, params, accept, out)
    result.notes += lost
    if len(result.trials) > trials:
        result.notes.append(f"--trials {trials}: the study in {out} already holds "
                            f"{len(result.trials)} draws; all of them are used")
    best = dict(zip(result.estimates["param"], result.estimates["best"], strict=True))
    write_config(config, sets, best, out / "calibrated.yaml")
    result.target = data
    result.seconds = time.perf_counter() - started
    return result



def _check_journal(out: Path) -> None:
    """The study's journal reads whole (a line of JSON a record), or an InputError naming
    the first damaged line, before any draw runs (Optuna reads it again only when the
    first new draw is recorded: the draws' work was lost with an internal error)."""
    journal = out / STUDY_FILE
    if not journal.is_file():
        return
    for number, line in enumerate(journal.read_bytes().splitlines(), 1):
        try:
            json.loads(line)
        except ValueError:
            raise InputError(f"--out {out}: {STUDY_FILE} is damaged at line {number} (a "
                             "write cut short?); delete that line and the ones after it to "
                             "resume from the draws before it, or choose a new folder"
                             ) from None

def _read_spec(path: Path) -> dict[str, Any] | None:
    """The calibration recorded in `path` (spec.json), or None if there is none."""
    if not path.exists():
        return None
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"--out {path.parent}: cannot read {path.name} ({exc}); choose a "
                         "new folder") from None
    if not isinstance(spec, dict):
        raise InputError(f"--out {path.parent}: {path.name} is not a calibration's spec; "
                         "choose a new folder")
    return spec


def _folder_target(out: Path, target: str | Path, data: pd.DataFrame,
                   old: dict[str, Any] | None, topics: list[str], rounds: int
                   ) -> pd.DataFrame:
    """The rows to fit: `data`, read from `target`, unless `out` holds a target copy,
    which a resume fits (its draws were measured against it) and `data` must equal; a
    calibration from before targets were copied (spec.json, no copy) is continued only
    from the path it recorded."""
    copy = out / TARGET_FILE
    if copy.exists():
        kept = parse_target(copy, read_target(copy), topics, rounds)
        if not _same_rows(kept, data):
            if old is None:  # (not a calibration's copy, but not ours to overwrite)
                raise InputError(f"--out {out}: holds a {TARGET_FILE} whose rows differ "
                                 f"from --target {target}; choose a new folder")
            raise InputError(f"--target {target}: its rows differ from {copy}, the target "
                             f"of the calibration in {out}; give that file to continue it, "
                             "or choose a new folder")
        return kept
    if old is not None and old.get("target") != str(target):
        raise InputError(f"--target {target}: the calibration in {out} fits "
                         f"{old.get('target')} (spec.json); give that file to continue "
                         "it, or choose a new folder")
    return data


def _same_rows(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """The same observations, in any order ((round, metric) is a key: no duplicates)."""
    def norm(f: pd.DataFrame) -> pd.DataFrame:
        return f.sort_values(["round", "metric"]).reset_index(drop=True)

    return norm(a).equals(norm(b))


def _run_draws(study: Any, todo: list[int], config: str, sets: list[str],
               params: list[Param], data: pd.DataFrame, seed: int, seeds: int,
               parallel: int | None, address: str | None, done: int, trials: int,
               on_trial: Callable[[int, int, float], None] | None) -> list[str]:
    """Run the draws `todo` on Ray, `parallel` runs at once, recording each in the study
    as a finished trial (its values, distance and draw index) once all its runs are in,
    in draw order. A draw whose run failed (its worker died) is not recorded, so a resume
    makes it again; what failed is returned as notes. A draw the config refuses is an
    InputError naming it."""
    import optuna

    dists = {p.key: optuna.distributions.FloatDistribution(p.low, p.high, log=p.log)
             for p in params}
    values = {i: draw(params, seed, i) for i in todo}
    series: dict[int, dict[int, pd.DataFrame | None]] = {i: {} for i in todo}
    lost: list[str] = []
    order = iter(todo)
    next_draw = [next(order, None)]

    def args(key: tuple[int, int]) -> tuple[Any, ...]:
        i, s = key
        return str(config), [*sets, *(f"{k}={v!r}" for k, v in values[i].items())], s

    def finished(key: tuple[int, int], out: Outcome) -> None:
        nonlocal done
        i, s = key
        if not out.ok:
            if isinstance(out.cause, InputError):  # a draw the config refuses
                given = ", ".join(f"{k}={v:.6g}" for k, v in values[i].items())
                raise InputError(f"draw {i} ({given}): {out.cause}") from None
            lost.append(f"draw {i} (seed {s}) failed: {out.error}; it is not counted "
                        "(a rerun with the same --out makes it again)")
        series[i][s] = out.value if out.ok else None
        while (i := next_draw[0]) is not None and len(series[i]) == seeds:  # in draw order
            next_draw[0] = next(order, None)
            if any(v is None for v in series[i].values()):
                continue
            runs = pd.concat([series[i][s] for s in sorted(series[i])])
            mean = runs.groupby(["round", "metric"], as_index=False)["value"].mean()
            d = distance(mean, data)
            study.add_trial(optuna.trial.create_trial(
                params=values[i], distributions=dists, value=d, user_attrs={"draw": i}))
            done += 1
            if on_trial is not None:
                on_trial(done, trials, d)

    keys = [(i, s) for i in todo for s in range(seed, seed + seeds)]
    with TaskPool(simulate, parallel, address) as pool:
        pool.run(lambda: keys, args, finished)
    return lost


def summarise(study: Any, params: list[Param], accept: float, out: Path) -> Calibration:
    """Accept the closest draws; estimates and intervals (none from fewer than
    MIN_ACCEPTED accepted draws: `low` and `high` NaN, null in the JSON, and a note);
    trials.csv and the JSON."""
    import optuna

    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    keys = [p.key for p in params]
    frame = pd.DataFrame([{"trial": t.number, "draw": t.user_attrs.get("draw"), **t.params,
                           "distance": t.value} for t in done],
                         columns=["trial", "draw", *keys, "distance"])
    notes: list[str] = []
    # (a study extended by an earlier release may hold a draw twice: counted once)
    repeats = frame.duplicated(subset=keys, keep="first")
    if repeats.any():
        notes.append(f"{int(repeats.sum())} draw(s) in {out / STUDY_FILE} repeat an earlier "
                     "draw's values (made by an earlier release when the calibration was "
                     "extended); each is counted once")
        frame = frame[~repeats]
    frame = frame.sort_values(["distance", "trial"])
    n = max(1, math.ceil(accept * len(frame)))
    frame["accepted"] = False
    frame.loc[frame.index[:n], "accepted"] = True
    kept = frame[frame["accepted"]]
    interval = n >= MIN_ACCEPTED
    if not interval:
        notes.append(f"only {_draws(n)} accepted ({accept:g} of {len(frame)}): no 90% "
                     f"interval (it needs at least {MIN_ACCEPTED}); raise --trials or "
                     "--accept")
    rows = []
    for p in params:
        v = kept[p.key].to_numpy()
        rows.append({"param": p.key, "estimate": float(np.median(v)),
                     "low": float(np.percentile(v, 5)) if interval else math.nan,
                     "high": float(np.percentile(v, 95)) if interval else math.nan,
                     "best": float(frame.iloc[0][p.key]), "prior_low": p.low,
                     "prior_high": p.high, "log": p.log})
    estimates = pd.DataFrame(rows)
    frame.sort_values("trial").to_csv(out / TRIALS_FILE, index=False)
    (out / RESULT_FILE).write_text(json.dumps({
        "trials": len(frame), "accepted": n, "best_distance": float(frame["distance"].min()),
        "interval": "5th-95th percentiles of the accepted draws" if interval else
        f"n/a: {_draws(n)} accepted, at least {MIN_ACCEPTED} needed",
        "estimates": [{k: (None if isinstance(v, float) and math.isnan(v) else v)
                       for k, v in r.items()} for r in rows],
        "notes": notes}, indent=1))
    return Calibration(out, frame.sort_values("trial").reset_index(drop=True), estimates,
                       0.0, notes)


def _draws(n: int) -> str:
    return f"{n} draw" + ("" if n == 1 else "s")


def write_config(config: str, sets: list[str], values: dict[str, float], path: Path) -> None:
    """The config with the fitted values filled in (resolved, every default written)."""
    cfg = load_config(config, [*sets, *(f"{k}={v!r}" for k, v in values.items())])
    path.write_text("# calibrated by `shoal calibrate` (docs/calibration.md)\n"
                    + dump_yaml(resolved_dict(cfg), sort_keys=False))


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

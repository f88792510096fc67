"""An experiment directory read for analysis: the outcome metrics of every arm and
replicate, and the paired effects of each treatment arm against the control
(`open_experiment`). `shoal experiment` (shoal.runs.experiment) makes these folders; the
layout, the metrics and the statistics are described in docs/experiments.md.

Metrics of a run, per round r (rounds 0..R for beliefs, 1..R for activity):

    belief_mean.<topic>   mean position at r
    belief_sd.<topic>     population standard deviation of positions at r
    polarization.<topic>  bimodality coefficient of positions at r
    activity              acting agents in round r (`n_acting`)
    engagement            applied actions in round r (status ok, except do_nothing)

and at the end: the value at the last round R for the belief metrics, the mean over
rounds 1..R for activity and engagement (so they equal `sweeps.member_metrics`).

Effects pair arm t with the control c replicate by replicate (same seed, same base run):
d_i = y_t,i − y_c,i. Reported: the mean of d with a percentile bootstrap interval
(RESAMPLES resamples of the replicates, numpy `default_rng(BOOTSTRAP_SEED)`, so the
interval is reproducible; none from fewer than MIN_BOOTSTRAP pairs) and the Student
t-interval (`metrics.t_interval`; none from one pair); and what pairing bought: var(d)
against var(y_t) + var(y_c), the variance of a difference of independent runs (sample
variances, n − 1). A statistic that cannot be estimated from the pairs there are is NaN
in the frames, empty in the CSV files, and said in words in the `note` column, the
printed table and the report ("n/a (n = 2)").
"""

from __future__ import annotations

import html
import json
import math
import numbers
from functools import cached_property, partial
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from shoal.analysis import metrics, plots
from shoal.analysis.report import CSP, CSS, kv_html, png_uri, table_html
from shoal.analysis.runs import Run
from shoal.core.errors import InputError
from shoal.core.vocabulary import RUN_METRICS
from shoal.store.lineage import LiveRun, read_table

EXPERIMENT_FILE = "experiment.json"
UNIT_METRICS_FILE = "metrics.parquet"  # in each arm unit's folder
METRICS_FILE = "metrics.csv"
EFFECTS_FILE = "effects.csv"
EFFECTS_BY_ROUND_FILE = "effects_by_round.csv"
REPORT_FILE = "report.html"
LEVEL = 0.95
RESAMPLES = 2000
BOOTSTRAP_SEED = 0
# The fewest pairs a bootstrap interval is given from: below it the resampled means take
# a handful of values and the percentile interval is a fraction of the t interval's width
# (about √((n−1)/n)·z/t(0.975, n−1): 0.11 at n = 2, 0.53 at 4, 0.63 at 5, 0.78 at 8).
MIN_BOOTSTRAP = 5
SUMMARY_COLUMNS = ["n", "mean_diff", "sd_diff", "boot_low", "boot_high", "t_low", "t_high"]
PAIRING_COLUMNS = ["var_paired", "var_control", "var_treatment", "var_unpaired",
                   "pairing_ratio"]


# ---------------------------------------------------------------------- one run


def unit_metrics(run: str | Path | LiveRun, names: list[str]) -> pd.DataFrame:
    """The outcome metrics `names` of one run over its full history (a fork's includes
    its parent's rounds), per round: columns round, metric, value. `run` is a run
    directory, or the reader of a simulation still open (`Simulation.reader()`, which
    reads its own rows without opening its file again)."""
    read = run.read if isinstance(run, LiveRun) else partial(read_table, run)
    beliefs = read("beliefs")
    beliefs = beliefs.assign(topic=beliefs["topic"].astype(str))
    stats = metrics.belief_stats(beliefs).merge(
        beliefs.groupby(["round", "topic"])["position"].agg(metrics.bimodality_coefficient)
        .rename("polarization").reset_index(), on=["round", "topic"])
    named = {"mean": "belief_mean", "sd": "belief_sd", "polarization": "polarization"}
    frames = [stats.melt(id_vars=["round", "topic"], value_vars=list(named))
              .assign(metric=lambda f: f["variable"].map(named) + "." + f["topic"])]
    rounds = read("rounds")
    acted = rounds[rounds["round"] >= 1]
    applied = read("actions", "status = 'ok' AND action <> 'do_nothing'")
    per_round = applied.groupby("round").size().reindex(acted["round"], fill_value=0)
    frames.append(pd.DataFrame({"round": acted["round"].to_numpy(), "metric": "activity",
                                "value": acted["n_acting"].to_numpy(dtype=float)}))
    frames.append(pd.DataFrame({"round": per_round.index.to_numpy(), "metric": "engagement",
                                "value": per_round.to_numpy(dtype=float)}))
    out = pd.concat([f[["round", "metric", "value"]] for f in frames], ignore_index=True)
    out = out[out["metric"].isin(names)].astype({"round": np.int64, "value": float})
    order = {m: i for i, m in enumerate(names)}
    return out.sort_values(["round", "metric"], key=lambda s: s.map(order) if s.name ==
                           "metric" else s).reset_index(drop=True)


def outcomes(per_round: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """End-of-run values from per-round metrics (grouped by `keys`, e.g. arm and
    replicate): the last round's value for belief metrics, the mean over rounds 1..R for
    the rates (activity, engagement). Columns: keys, metric, value."""
    rate = per_round["metric"].isin(RUN_METRICS)
    last = per_round[~rate].sort_values("round").groupby([*keys, "metric"], sort=False) \
        .tail(1)
    rates = per_round[rate & (per_round["round"] >= 1)].groupby(
        [*keys, "metric"], sort=False)["value"].mean().reset_index()
    return pd.concat([last[[*keys, "metric", "value"]], rates], ignore_index=True)


# ---------------------------------------------------------------------- statistics


def bootstrap_interval(values: np.ndarray, level: float = LEVEL, resamples: int = RESAMPLES,
                       seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of a mean: `resamples` samples of n values drawn with
    replacement (`numpy.random.default_rng(seed)`, one `integers(0, n, (resamples, n))`
    draw), their means' (1 − level)/2 and (1 + level)/2 quantiles (numpy's default,
    linear). NaNs are dropped; (NaN, NaN) for fewer than two values."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size < 2:
        return math.nan, math.nan
    idx = np.random.default_rng(seed).integers(0, v.size, size=(resamples, v.size))
    means = v[idx].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def summarize_differences(d: np.ndarray, level: float = LEVEL) -> dict[str, float]:
    """n, mean, sd (n − 1), the bootstrap and the t interval of paired differences; the
    bootstrap interval only from MIN_BOOTSTRAP differences on, the sd and the t interval
    from two (NaN otherwise)."""
    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d)]
    boot = bootstrap_interval(d, level) if d.size >= MIN_BOOTSTRAP else (math.nan, math.nan)
    t = metrics.t_interval(d, level)
    return {"n": int(d.size), "mean_diff": float(d.mean()) if d.size else math.nan,
            "sd_diff": float(d.std(ddof=1)) if d.size > 1 else math.nan,
            "boot_low": boot[0], "boot_high": boot[1], "t_low": t[0], "t_high": t[1]}


def small_sample_note(n: int) -> str:
    """What cannot be estimated from `n` pairs, in words ("" when everything can)."""
    if n == 0:
        return ("n = 0: no mean, sd, interval or variance ratio (the metric is undefined, "
                "NaN, in every pair)")
    if n < 2:
        return f"n = {n}: no sd, interval or variance ratio (one pair shows no spread)"
    if n < MIN_BOOTSTRAP:
        return f"bootstrap n/a (n = {n}; it needs {MIN_BOOTSTRAP})"
    return ""


def small_sample_warnings(effects: pd.DataFrame) -> list[str]:
    """Warnings for an effects table whose rows rest on too few pairs (what `shoal
    experiment` prints and the report shows)."""
    out = []
    few = sorted({int(n) for n in effects["n"] if 2 <= n < MIN_BOOTSTRAP})
    if few:
        out.append(f"{'rows with ' if len(effects['n'].unique()) > 1 else ''}n = "
                   f"{', '.join(map(str, few))} paired replicates: no bootstrap interval "
                   f"(n/a; it needs at least {MIN_BOOTSTRAP}); the t interval is given, and "
                   "assumes the mean difference is roughly normal; more replicates "
                   "(experiment.replicates) give both")
    if (effects["n"] == 1).any():
        out.append("rows with n = 1 paired replicate: no sd, no interval and no variance "
                   "ratio can be estimated (n/a)")
    if (effects["n"] == 0).any():
        out.append("rows with n = 0: the metric is undefined (NaN) in every pair, e.g. the "
                   "bimodality coefficient of positions without spread; nothing can be "
                   "estimated (n/a)")
    return out


def pairing_variance(control: np.ndarray, treatment: np.ndarray) -> dict[str, float]:
    """What pairing by seed bought: the sample variance of the paired differences against
    var(control) + var(treatment), the variance of the difference of two independent
    runs; `pairing_ratio` is their ratio (below 1: pairing made the effect sharper)."""
    c, t = np.asarray(control, dtype=float), np.asarray(treatment, dtype=float)
    ok = np.isfinite(c) & np.isfinite(t)
    c, t = c[ok], t[ok]
    if c.size < 2:
        return dict.fromkeys(PAIRING_COLUMNS, math.nan)
    paired = float(np.var(t - c, ddof=1))
    vc, vt = float(np.var(c, ddof=1)), float(np.var(t, ddof=1))
    unpaired = vc + vt
    ratio = paired / unpaired if unpaired > 0 else math.nan
    return {"var_paired": paired, "var_control": vc, "var_treatment": vt,
            "var_unpaired": unpaired, "pairing_ratio": ratio}


def paired(values: pd.DataFrame, control: str, by: list[str]) -> pd.DataFrame:
    """Treatment rows side by side with the control's of the same replicate (and the same
    `by` keys, e.g. metric and round): columns arm, replicate, *by, control, treatment.
    Replicates where either arm is missing are left out."""
    base = values[values["arm"] == control].drop(columns="arm") \
        .rename(columns={"value": "control"})
    rest = values[values["arm"] != control].rename(columns={"value": "treatment"})
    return rest.merge(base, on=["replicate", *by], how="inner")


def paired_effects(values: pd.DataFrame, control: str, arms: list[str], names: list[str],
                   by: tuple[str, ...] = (), level: float = LEVEL) -> pd.DataFrame:
    """Per treatment arm, metric (and `by` keys, e.g. round): the summary of the paired
    differences (`summarize_differences`), the pairing variances (`pairing_variance`)
    and a `note` saying in words what too few pairs left undefined (`small_sample_note`).
    `values` has the columns arm, replicate, metric, *by, value."""
    cols = ["arm", "metric", *by, *SUMMARY_COLUMNS, *PAIRING_COLUMNS, "note"]
    pairs = paired(values[["arm", "replicate", "metric", *by, "value"]], control,
                   ["metric", *by])
    rows = []
    for key, group in pairs.groupby(["arm", "metric", *by], sort=False):
        c, t = group["control"].to_numpy(), group["treatment"].to_numpy()
        summary = summarize_differences(t - c, level)
        rows.append({**dict(zip(["arm", "metric", *by], key, strict=True)), **summary,
                     **pairing_variance(c, t), "note": small_sample_note(summary["n"])})
    out = pd.DataFrame(rows, columns=cols)
    arm_order = {a: i for i, a in enumerate(arms)}
    metric_order = {m: i for i, m in enumerate(names)}
    out = out.sort_values(["arm", "metric", *by], key=lambda s: s.map(arm_order)
                          if s.name == "arm" else s.map(metric_order) if s.name == "metric"
                          else s).reset_index(drop=True)
    return out.astype({"n": np.int64, **{c: float for c in cols[len(by) + 3:-1]},
                       "note": str})


# ---------------------------------------------------------------------- reading


def units_frame(spec: dict) -> pd.DataFrame:
    """One row per unit: unit, kind (base or arm), arm, replicate, seed, status, run
    (relative to the experiment folder), seconds, error."""
    cols = ["unit", "kind", "arm", "replicate", "seed", "status", "run", "seconds", "error"]
    return pd.DataFrame([{c: u.get(c) for c in cols} for u in spec["units"]], columns=cols)


class Experiment:
    """An experiment directory opened for analysis. DataFrames:

    - `units`: one row per unit (a base run or an arm of a replicate) and its status;
    - `metrics`: arm, replicate, seed, round, metric, value — every finished arm's
      metrics per round, over its full history;
    - `outcomes`: arm, replicate, seed, metric, value — the end-of-run values;
    - `effects`: per treatment arm and metric, the paired differences from the control
      at the end (n, mean_diff, sd_diff, boot_low/high, t_low/high), the pairing
      variances (var_paired, var_control, var_treatment, var_unpaired, pairing_ratio)
      and a `note` naming what too few pairs left undefined (NaN);
    - `effects_by_round`: the same per round;
    - `pairing`: the variance columns of `effects` alone.
    """

    def __init__(self, root: Path, spec: dict):
        self.root = root
        self.spec = spec
        self.units = units_frame(spec)
        done = self.units[(self.units["kind"] == "arm") & (self.units["status"] ==
                                                           "finished")]
        frames = [pd.read_parquet(root / u.unit / UNIT_METRICS_FILE)
                  .assign(arm=u.arm, replicate=int(u.replicate), seed=int(u.seed))
                  for u in done.itertuples()]
        cols = ["arm", "replicate", "seed", "round", "metric", "value"]
        per_round = pd.concat(frames, ignore_index=True)[cols] if frames else \
            pd.DataFrame({c: pd.Series(dtype=float if c == "value" else object)
                          for c in cols})
        self.metrics = self._ordered(per_round, ["arm", "replicate", "round", "metric"])
        self.outcomes = self._ordered(outcomes(per_round, ["arm", "replicate", "seed"]),
                                      ["arm", "replicate", "metric"])

    def __repr__(self) -> str:
        arms = self.units[self.units["kind"] == "arm"]
        return (f"<Experiment {self.root.name}: {len(self.arms)} arms × "
                f"{self.spec['replicates']} replicates, "
                f"{int((arms['status'] == 'finished').sum())}/{len(arms)} arm runs finished>")

    @property
    def arms(self) -> list[str]:
        """The arms in config order."""
        return list(self.spec["arms"])

    @property
    def control(self) -> str:
        """The control arm."""
        return self.spec["control"]

    @property
    def treatments(self) -> list[str]:
        """The arms compared with the control."""
        return [a for a in self.arms if a != self.control]

    @property
    def metric_names(self) -> list[str]:
        """The outcome metrics measured, in table order."""
        return list(self.spec["metrics"])

    @property
    def branch_round(self) -> int:
        """The round the arms of a replicate fork from their shared base run."""
        return int(self.spec["branch_round"])

    def _ordered(self, frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
        order = {"arm": {a: i for i, a in enumerate(self.arms)},
                 "metric": {m: i for i, m in enumerate(self.metric_names)}}
        return frame.sort_values(keys, key=lambda s: s.map(order[s.name]) if s.name in order
                                 else s).reset_index(drop=True)

    @cached_property
    def effects(self) -> pd.DataFrame:
        """Paired effects of each treatment arm at the end of the run (class docstring)."""
        return paired_effects(self.outcomes, self.control, self.arms, self.metric_names)

    @cached_property
    def effects_by_round(self) -> pd.DataFrame:
        """Paired effects per round (rounds up to the branch round share their history:
        every difference there is 0)."""
        return paired_effects(self.metrics, self.control, self.arms, self.metric_names,
                              by=("round",))

    @property
    def pairing(self) -> pd.DataFrame:
        """Per treatment arm and metric: what pairing by seed did to the variance."""
        return self.effects[["arm", "metric", "n", *PAIRING_COLUMNS]]

    def run(self, arm: str, replicate: int) -> Run:
        """One arm's run of one replicate (its full history), as `shoal.open_run` gives it."""
        if arm not in self.arms:
            raise InputError(f"{self.root.name}: no arm {arm!r}; arms: "
                             f"{', '.join(self.arms)}")
        replicates = int(self.spec["replicates"])
        if not isinstance(replicate, numbers.Integral) or not 0 <= replicate < replicates:
            raise InputError(f"{self.root.name}: no replicate {replicate!r}; replicates: "
                             f"0..{replicates - 1}")
        rows = self.units[(self.units["arm"] == arm) & (self.units["replicate"] == replicate)]
        if rows.empty or rows["status"].iloc[0] != "finished":
            status = "not run" if rows.empty else rows["status"].iloc[0]
            raise InputError(f"{self.root.name}: no finished run of arm {arm!r}, replicate "
                             f"{replicate} (it is {status})")
        return Run(self.root / rows["run"].iloc[0])

    def plot_effects(self, metrics: str | list[str] | None = None, interval: str = "boot",
                     path: str | Path | None = None) -> Figure:
        """The effect of each treatment arm over rounds with its 95% band (`interval`:
        "boot" or "t"), one panel per metric (`plots.effect_over_rounds`); `metrics`: one
        name or several (default: all the experiment measured)."""
        shown = [metrics] if isinstance(metrics, str) else list(metrics or self.metric_names)
        unknown = [m for m in shown if m not in self.metric_names]
        if unknown:
            raise InputError(f"metrics={metrics!r}: {', '.join(map(repr, unknown))} not "
                             f"measured; metrics: {', '.join(self.metric_names)}")
        if interval not in ("boot", "t"):
            raise InputError(f"interval={interval!r}: 'boot' (bootstrap) or 't'")
        return plots.effect_over_rounds(self.effects_by_round, shown, interval=interval,
                                        branch_round=self.branch_round, path=path)


def open_experiment(path: str | Path) -> Experiment:
    """Open an experiment directory (the one holding experiment.json); one still running
    shows the arm runs finished so far."""
    root = Path(path)
    if not (root / EXPERIMENT_FILE).is_file():
        raise InputError(f"{path}: not an experiment directory (no {EXPERIMENT_FILE})")
    return Experiment(root, json.loads((root / EXPERIMENT_FILE).read_text()))


# ---------------------------------------------------------------------- the tables and page


def write_tables(exp: Experiment) -> list[Path]:
    """metrics.csv (per round, long), effects.csv and effects_by_round.csv in the
    experiment folder, each replaced atomically; returns their paths."""
    paths = []
    for name, frame in ((METRICS_FILE, exp.metrics), (EFFECTS_FILE, exp.effects),
                        (EFFECTS_BY_ROUND_FILE, exp.effects_by_round)):
        path = exp.root / name
        tmp = path.with_name(path.name + ".tmp")
        frame.to_csv(tmp, index=False)
        tmp.replace(path)
        paths.append(path)
    return paths


def _missing(value: object) -> bool:
    """Whether a cell holds nothing (None, NaN: a pandas column's missing value)."""
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def _num(value: float | None, fmt: str = "{:+.4f}", missing: str = "n/a") -> str:
    return missing if _missing(value) else fmt.format(value)


def interval_text(low: float, high: float, n: int | None = None) -> str:
    """`[low, high]`, or "n/a (n = 2)" (without n: "n/a") when it is undefined."""
    if _missing(low) or _missing(high):
        return "n/a" if n is None else f"n/a (n = {n})"
    return f"[{low:+.4f}, {high:+.4f}]"


def effects_rows(effects: pd.DataFrame) -> list[list[str]]:
    """The effects table as text cells: arm, metric, n, mean diff, bootstrap CI, t CI,
    pairing variance ratio (what `shoal experiment` prints and the report shows); what
    cannot be estimated is "n/a (n = …)", and a ratio of two zero variances "n/a (no
    variance)"."""
    return [[r.arm, r.metric, str(r.n), _num(r.mean_diff),
             interval_text(r.boot_low, r.boot_high, r.n),
             interval_text(r.t_low, r.t_high, r.n),
             _num(r.pairing_ratio, "{:.3f}", f"n/a (n = {r.n})" if r.n < 2 else
                  "n/a (no variance)")] for r in effects.itertuples()]


EFFECT_HEADERS = ["arm", "metric", "n", "mean diff", f"{LEVEL:.0%} bootstrap CI",
                  f"{LEVEL:.0%} t CI", "var ratio paired/unpaired"]


def render_report(exp: Experiment) -> str:
    """A self-contained HTML page of an experiment: what was compared, the effects at the
    end with both intervals and the pairing variance ratio, the effects over rounds as
    bands, and every unit's run (CSS inline, plots as data: URIs, nothing loaded)."""
    spec = exp.spec
    units = exp.units
    arms_done = units[units["kind"] == "arm"]
    summary = kv_html([
        ("experiment", exp.root.name), ("config", spec.get("config")),
        ("status", spec.get("status")),
        ("arms", ", ".join(exp.arms)), ("control", exp.control),
        ("branch round", exp.branch_round),
        ("replicates", f"{spec['replicates']} (seeds {spec['seeds'][0]}..{spec['seeds'][-1]})"),
        ("arm runs finished", f"{int((arms_done['status'] == 'finished').sum())}/"
                              f"{len(arms_done)}"),
        ("bootstrap", f"{RESAMPLES} resamples, numpy default_rng({BOOTSTRAP_SEED})"),
    ])
    arms = table_html(["arm", "changes"], [[a, _changes(spec["arms"][a])] for a in exp.arms])
    effects = table_html(EFFECT_HEADERS, effects_rows(exp.effects), numeric=range(2, 7))
    effects += "".join(f"<p><strong>Warning:</strong> {html.escape(w)}.</p>"
                       for w in small_sample_warnings(exp.effects))
    by_round = exp.effects_by_round
    if by_round.empty:
        figure = "<p>No finished pairs yet.</p>"
    else:  # the bootstrap band where every round has one, else the t band, else none
        band = "boot" if (by_round["n"] >= MIN_BOOTSTRAP).all() else "t"
        what = {"boot": f"its {LEVEL:.0%} bootstrap band",
                "t": f"its {LEVEL:.0%} t band (too few pairs for a bootstrap band)"}[band] \
            if (by_round["n"] >= 2).all() else "no band (one pair has no spread)"
        figure = (f'<figure><img src="{png_uri(exp.plot_effects(interval=band))}" '
                  'alt="effects over rounds"><figcaption>Mean paired difference (treatment '
                  f'− control) per round with {what}; dashed: the branch round.'
                  '</figcaption></figure>')
    runs = table_html(["unit", "arm", "replicate", "seed", "status", "run", "seconds",
                       "error"],
                      [[u.unit, "(base run)" if u.kind == "base" else u.arm, u.replicate,
                        u.seed, u.status, "(none)" if _missing(u.run) else u.run,
                        _num(u.seconds, "{:.1f}", "(not run)" if u.status == "pending"
                             else "n/a"),
                        "" if _missing(u.error) else u.error]
                       for u in units.itertuples()], numeric=(2, 3, 6), text=(7,))
    sections = [("Summary", summary), ("Arms", arms), ("Effects at the end", effects),
                ("Effects over rounds", figure), ("Runs", runs)]
    body = "\n".join(f"<section>\n<h2>{title}</h2>\n{content}\n</section>"
                     for title, content in sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>Shoal experiment</title>
<style>{CSS}</style>
</head>
<body>
<main>
<h1>Shoal experiment</h1>
{body}
</main>
</body>
</html>
"""


def _changes(arm: dict) -> str:
    """An arm's plan in one line (what the fork machinery was asked)."""
    parts = list(arm.get("sets") or []) + list(arm.get("schedule") or [])
    parts += [f"add {json.dumps(e, sort_keys=True)}" for e in arm.get("interventions") or []]
    return "; ".join(parts) or "none (the config as it is)"


def write_report(exp: Experiment, path: str | Path | None = None) -> Path:
    """Write the experiment's HTML page (default: report.html in its folder) atomically."""
    path = Path(path) if path is not None else exp.root / REPORT_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_report(exp), encoding="utf-8")
    tmp.replace(path)
    return path

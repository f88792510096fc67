"""A sweep directory read for analysis: its members and their metrics, the summary per
grid point with 95% intervals over seeds, and every frame of the notebook API across the
finished members (`open_sweep`). `shoal sweep` (shoal.runs.sweep) makes these folders; the
layout and the metrics are described there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from shoal.analysis import metrics
from shoal.analysis.runs import Run, Runs
from shoal.core.errors import InputError
from shoal.store.lineage import read_table

SWEEP_FILE = "sweep.json"
SUMMARY_FILE = "summary.csv"
LEVEL = 0.95
STATS = ("mean", "sd", "ci95_low", "ci95_high", "n")

def member_metrics(run: str | Path) -> dict[str, float]:
    """The summary metrics of one run (see the module docstring; formulas of the belief
    statistics and the bimodality coefficient in `shoal.metrics`)."""
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
    95% t-interval over seeds (`<metric>.mean`, `.sd`, `.ci95_low`, `.ci95_high`) and the
    members they rest on, those where the metric is defined (`<metric>.n`: below n where
    it is NaN in some, e.g. the bimodality coefficient of a consensus)."""
    ok = members[members["status"] == "finished"]
    names = metric_names(members, grid_keys)
    rows = []
    for point, group in members.groupby("point", sort=True):
        row: dict[str, Any] = {"point": int(point)}
        row.update({k: group[k].iloc[0] for k in grid_keys})
        done = ok[ok["point"] == point]
        row["n"] = len(done)
        for m in names:
            values = done[m].to_numpy(dtype=float)
            mean, sd, low, high = seed_stats(values)
            row.update({f"{m}.mean": mean, f"{m}.sd": sd, f"{m}.ci95_low": low,
                        f"{m}.ci95_high": high, f"{m}.n": int(np.isfinite(values).sum())})
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
    columns `run`, `seed` and the grid keys first. `sweep.runs` is the `shoal.analysis.Runs`
    underneath; index it by run id for one member's `Run`."""

    def __init__(self, root: Path, spec: dict):
        self.root = root
        self.spec = spec
        self.members = members_frame(spec)
        self.summary = summarize_members(self.members, self.grid_keys)
        done = self.members[self.members["status"] == "finished"]
        self._labels = done[["run", "seed", *self.grid_keys]].reset_index(drop=True)
        self.runs = Runs([Run(root / r) for r in done["run"]], labels=list(done["run"]))

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
            raise AttributeError(f"a sweep has no {name!r} (nor has shoal.analysis.Runs)")
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

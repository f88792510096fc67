"""The notebook API: `open_run`, `open_runs` and `open_sweep` (exported by `sim`).

    from shoal import open_run, open_runs
    run = open_run("runs/<run_id>")      # or a run id under runs/
    run.beliefs                          # round, agent, topic, position, confidence
    run.polarization()                   # per round and topic
    both = open_runs([parent, fork])     # the same frames, with a `run` column

Reading a run loads neither the engine, nor Ray, nor an HTTP client.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from shoal.analysis.runs import Run, Runs
from shoal.analysis.sweeps import SWEEP_FILE, Sweep
from shoal.core.errors import InputError
from shoal.store.lineage import run_tree

# What marks an experiment directory (shoal.analysis.experiments.EXPERIMENT_FILE, which
# imports this module through the report: named here, not imported).
EXPERIMENT_FILE = "experiment.json"


def open_run(path: str | Path | Any) -> Run:
    """A run's trajectory as DataFrames: `path` is a run directory, a run id under
    `runs/`, a `Run`, or a `Simulation` (e.g. one just simulated in the notebook)."""
    if isinstance(path, str | Path) and (Path(path) / EXPERIMENT_FILE).is_file():
        raise InputError(f"{path}: an experiment directory, not a run; open it with "
                         f"open_experiment({str(path)!r}) (its .run(arm, replicate) is "
                         "one arm's run)")
    return Run(path)


def open_runs(paths: Iterable[str | Path | Any] | str | Path,
              labels: Sequence[str] | None = None) -> Runs | Sweep:
    """Several runs as one: `paths` lists run directories (or ids, or Run objects), or
    is one output folder, whose runs are all read (parents before their forks); a sweep
    directory opens as `open_sweep` does, with seed and grid columns. `labels`
    name the runs in the `run` column (default: their ids)."""
    if isinstance(paths, str | Path):
        folder = Path(paths)
        if (folder / SWEEP_FILE).is_file() and labels is None:  # seed and grid columns too
            return open_sweep(folder)
        if (folder / EXPERIMENT_FILE).is_file():  # its runs are one folder down, per unit
            raise InputError(f"{folder}: an experiment directory; open it with "
                             f"open_experiment({str(folder)!r}) (its .run(arm, replicate) "
                             "is one arm's run)")
        if (folder / "run.json").is_file():
            paths = [folder]
        else:
            paths = [e.dir.root for e in run_tree(folder)]
            if not paths:
                raise InputError(f"{folder}: no runs in this folder")
    runs = [p if isinstance(p, Run) else Run(p) for p in paths]
    if not runs:
        raise InputError("open_runs: no runs given; give run directories, or a folder of "
                         "runs")
    return Runs(runs, labels)


def open_sweep(path: str | Path) -> Sweep:
    """Open a sweep directory (the one holding sweep.json); a sweep still running shows
    the members finished so far."""
    root = Path(path)
    if not (root / SWEEP_FILE).is_file():
        raise InputError(f"{path}: not a sweep directory (no {SWEEP_FILE})")
    return Sweep(root, json.loads((root / SWEEP_FILE).read_text()))

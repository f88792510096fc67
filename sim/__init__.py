"""Shoal's engine. The notebook API is exported here:
`from sim import open_run, open_runs, open_sweep, open_experiment, Simulation`.

Names are imported on first use, so `import sim` costs nothing and reading a run never
loads the engine (only `Simulation` does; docs/architecture.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.analysis.experiments import open_experiment
    from sim.analysis.notebook import open_run, open_runs, open_sweep
    from sim.runs.simulation import Simulation

__all__ = ["Simulation", "open_experiment", "open_run", "open_runs", "open_sweep"]
_HOME = {"open_run": "sim.analysis.notebook", "open_runs": "sim.analysis.notebook",
         "open_sweep": "sim.analysis.notebook", "open_experiment": "sim.analysis.experiments",
         "Simulation": "sim.runs.simulation"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        import importlib

        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")

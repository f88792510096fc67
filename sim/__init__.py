"""Shoal's engine. The notebook API is exported here:
`from shoal import open_run, open_runs, open_sweep, open_experiment, Simulation`.

Names are imported on first use, so `import shoal` costs nothing and reading a run never
loads the engine (only `Simulation` does; docs/architecture.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shoal.analysis.experiments import open_experiment
    from shoal.analysis.notebook import open_run, open_runs, open_sweep
    from shoal.runs.simulation import Simulation

__all__ = ["Simulation", "open_experiment", "open_run", "open_runs", "open_sweep"]
_HOME = {"open_run": "shoal.analysis.notebook", "open_runs": "shoal.analysis.notebook",
         "open_sweep": "shoal.analysis.notebook", "open_experiment": "shoal.analysis.experiments",
         "Simulation": "shoal.runs.simulation"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        import importlib

        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'shoal' has no attribute {name!r}")

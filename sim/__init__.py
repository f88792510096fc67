"""Shoal's engine. The notebook API is exported here:
`from sim import open_run, open_runs, open_sweep`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.analysis import open_run, open_runs
    from sim.sweep import open_sweep

__all__ = ["open_run", "open_runs", "open_sweep"]
_HOME = {"open_run": "sim.analysis", "open_runs": "sim.analysis", "open_sweep": "sim.sweep"}


def __getattr__(name: str) -> Any:
    # Imported on first use, so `import sim.<module>` (the CLI, the engine) does not pay
    # for the analysis stack (pandas frames, matplotlib).
    if name in _HOME:
        import importlib

        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")

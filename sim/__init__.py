"""Shoal's engine. The notebook API is exported here: `from sim import open_run, open_runs`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.analysis import open_run, open_runs

__all__ = ["open_run", "open_runs"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so `import sim.<module>` (the CLI, the engine) does not pay
    # for the analysis stack (pandas frames, matplotlib).
    if name in __all__:
        from sim import analysis

        return getattr(analysis, name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")

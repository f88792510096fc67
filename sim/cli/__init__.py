"""The `shoal` command line (sim.cli.main)."""

from sim.cli.main import main

__all__ = ["main"]

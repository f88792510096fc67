"""The `shoal` command line (shoal.cli.main)."""

from shoal.cli.main import main

__all__ = ["main"]

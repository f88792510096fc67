"""The `shoal` command line (`shoal.cli.main`). This module stays light: the console
script's `run` imports the program itself, so a Ctrl-C while it loads ends it quietly."""

from __future__ import annotations

import sys


def run() -> None:
    """The `shoal` console script: `shoal.cli.main.main` with the process's arguments. A
    Ctrl-C before the command has started (while Python loads the program, or parses the
    arguments) exits 130 without a traceback, as one during the command does."""
    try:
        from shoal.cli.main import main

        code = main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)

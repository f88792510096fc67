"""Where the CLI writes: `console` (stderr: progress, messages, errors) and `out` (stdout:
results), a table printer that keeps whole lines when piped, and the progress bar."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

console = Console(stderr=True, soft_wrap=True)  # error lines stay whole for grep
out = Console()


def print_whole(table) -> None:
    """Print a table at the terminal's width, or with whole lines when output is piped
    (run ids are not cut, so the output can be grepped)."""
    (out if out.is_terminal else Console(width=240)).print(table)


class _NoProgress:
    """Stand-in for rich's Progress when --quiet."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, *a, **k):
        return 0

    def update(self, *a, **k):
        pass


def progress_bar(quiet: bool):
    """rich's progress bar for rounds, or a stand-in that shows nothing."""
    if quiet:
        return _NoProgress()
    return Progress(
        TextColumn("round"), MofNCompleteColumn(), BarColumn(),
        TextColumn("{task.fields[actions]:,} actions"), TimeElapsedColumn(),
        TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[llm]}"),
        console=console, transient=False,
    )



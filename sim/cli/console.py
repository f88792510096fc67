"""Where the CLI writes: `console` (stderr: progress, messages, errors) and `out` (stdout:
results), a table printer that keeps whole lines when piped, and the progress bar."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

# emoji=False: user text (a run's name, a path) with `:smile:` in it stays as typed
console = Console(stderr=True, soft_wrap=True, emoji=False)  # whole lines for grep
out = Console(emoji=False)


def print_whole(table) -> None:
    """Print a table at the terminal's width, or with whole lines when output is piped
    (run ids are not cut, so the output can be grepped)."""
    (out if out.is_terminal else Console(width=240, emoji=False)).print(table)


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
        TextColumn("round"), MofNCompleteColumn(), BarColumn(bar_width=16),
        TextColumn("{task.fields[actions]:,} actions"), TimeElapsedColumn(),
        TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[llm]}"),
        console=console, transient=False,
    )




class _Stop:
    """What Ctrl-C has asked of a run so far."""

    requested = False  # the first one: stop after the running round
    interrupted = False  # the second one: a KeyboardInterrupt was raised, once
    closing = False  # the run is being closed: Ctrl-C waits for that to end


@contextmanager
def stop_between_rounds() -> Iterator[_Stop]:
    """Turn the first Ctrl-C into a request to stop after the running round and the
    second into a KeyboardInterrupt (stop at once). After that, and once the block sets
    `closing`, Ctrl-C does nothing until the block ends: closing the run (its last round
    committed, the LLM calls in flight cancelled, their connections closed on their event
    loop) is short, and cut short it would leave asyncio's tracebacks and warnings behind."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame) -> None:
        if stop.interrupted or stop.closing:
            return
        if stop.requested:
            stop.interrupted = True
            raise KeyboardInterrupt
        stop.requested = True
        console.print("[yellow]stopping after this round[/] (Ctrl-C again to interrupt "
                      "at once)")

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service manager, `kill`, a job scheduler's time limit): the command
    stops as at a second Ctrl-C (what is committed stays, the run says how to resume it),
    and exits 143."""


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises `Terminated` in the main thread (where no
    handler of the program's own is set), instead of killing the process with nothing
    said and a run left marked `running`."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

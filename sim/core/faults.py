"""Crash points for testing recovery: `SHOAL_FAULT=<point>:<round>` kills the process with
SIGKILL when execution reaches that point in that round.

Points: `creating` (a new run directory complete under its temporary name, not yet
renamed; round 0), `mid_round` (decisions made, nothing applied), `mid_commit` (inside the
round's DuckDB transaction, some tables inserted), `after_commit` (committed, no checkpoint
yet), `mid_checkpoint` (log segment written, state not yet), `after_checkpoint`.

Points of the commands that ask things of a finished run, where `<round>` counts what
they have done: `analysing:N` (`shoal analyse`, its Nth section stored), `asking:0`
(`shoal interview`, the answers in, not stored), `surveying:N` (`shoal survey`, its Nth
wave stored), `experimenting:N` (`shoal experiment`, its Nth unit recorded as finished).

Unset in normal use; reading it costs one dictionary lookup per point.
"""

from __future__ import annotations

import os
import signal
from functools import cache

POINTS = ("creating", "mid_round", "mid_commit", "after_commit", "mid_checkpoint",
          "after_checkpoint")
COMMAND_POINTS = ("analysing", "asking", "surveying", "experimenting")


@cache
def _armed() -> tuple[str, int] | None:
    spec = os.environ.get("SHOAL_FAULT")
    if not spec:
        return None
    point, _, round_ = spec.partition(":")
    if point not in POINTS + COMMAND_POINTS or not round_.isdigit():
        raise ValueError(f"SHOAL_FAULT={spec!r}: expected <point>:<round>, point in "
                         f"{POINTS + COMMAND_POINTS}")
    return point, int(round_)


def crash_point(point: str, round_: int) -> None:
    """Die here (SIGKILL, no cleanup) if SHOAL_FAULT names this point and round."""
    armed = _armed()
    if armed is not None and armed == (point, round_):
        os.kill(os.getpid(), signal.SIGKILL)

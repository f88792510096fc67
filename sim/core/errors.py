"""Errors that the CLI turns into exit codes.

`InputError` (and its subclass `ConfigError`) means the user gave us something we cannot
use: a bad config, a missing file, an unknown run. The CLI prints it and exits 2. Anything
else that escapes is an internal error (exit 1).
"""

from __future__ import annotations

import errno


class InputError(Exception):
    """Bad user input (config, file, argument). Exit code 2."""


class ProviderDown(Exception):
    """Every LLM call of a round failed to reach its provider: the run stops at the round
    boundary (nothing of that round is applied) and can be resumed later."""


class ConfigError(InputError):
    """A config that does not validate; the message names the field path (and the line)."""

    def __init__(self, problems: list[str], source: str | None = None):
        self.problems = problems
        self.source = source
        head = f"{source}: " if source and len(problems) == 1 else ""
        if len(problems) == 1:
            msg = head + problems[0]
        else:
            where = f" in {source}" if source else ""
            msg = f"{len(problems)} problems{where}:\n" + "\n".join(f"  {p}" for p in problems)
        super().__init__(msg)


class NumericError(InputError):
    """A model produced numbers that are not finite (NaN, infinity): the round is dropped
    and the run stops, naming the rule; its parameters need changing."""


class StorageFull(InputError):
    """The disk ran out of space while a run wrote its files: the rounds committed before
    are safe, and `shoal resume` continues once space is freed."""


def out_of_space(exc: BaseException) -> bool:
    """Whether an error (an OSError, or a DuckDB error wrapping one) is a full disk."""
    return (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or \
        "no space left on device" in str(exc).lower()

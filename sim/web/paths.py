"""Which files and folders a config given to `shoal serve` or `shoal mcp` may name: only
those inside the served folder (docs/web.md, "No path leaves the folder").

A pasted config, a config of the folder with `--set` fields, a fork's `--set` fields and
added interventions may each name files a run reads (profiles, initial stances, an edge
list, graph documents, a tokenizer.json) or folders it reads and writes (a scenario, the
shared LLM cache, the output folder). They are checked here before anything opens them,
and a refusal names the field and the value as given, never what the path resolves to:
it reads the same whether an outside file exists or not.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shoal.config.model import Config

# The dotted fields that name a file or folder, matched at the end of a field path: inside
# a `set` intervention's values, an experiment arm's overrides or a fork's `--set`, the
# same field sits under a prefix (`interventions.2.values.llm.cache_dir`).
PATH_FIELD = re.compile(
    r"(?:^|\.)(?:population\.file|initial_stances\.file|graph\.file"
    r"|memory\.graph\.scenario|memory\.graph\.documents(?:\.\d+)?"
    r"|llm\.providers\.\d+\.tokenizer|llm\.cache_dir|output\.dir)$")

# The fields `load_config` resolves against the config's own folder (the others, read by
# the run's command, against its working folder: the served folder).
BESIDE_CONFIG = re.compile(r"^(?:population\.file|initial_stances\.file|graph\.file"
                           r"|memory\.graph\.scenario|memory\.graph\.documents\.\d+)$")


def leaves(data: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """Every value of a nested mapping/list as (dotted path, value), keys stripped as
    `--set` strips them."""
    if isinstance(data, dict):
        for key, value in data.items():
            part = str(key).strip()
            yield from leaves(value, f"{prefix}.{part}" if prefix else part)
    elif isinstance(data, list | tuple):
        for i, value in enumerate(data):
            yield from leaves(value, f"{prefix}.{i}" if prefix else str(i))
    else:
        yield prefix, data


def named_paths(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """The (field, path) pairs of `data` whose field names a file or folder."""
    out = []
    for dotted, value in leaves(data, prefix):
        if isinstance(value, bytes):  # (YAML's !!binary: pydantic reads it as text)
            value = os.fsdecode(value)
        if isinstance(value, str) and PATH_FIELD.search(dotted):
            out.append((dotted, value))
    return out


def config_paths(cfg: Config) -> list[tuple[str, str]]:
    """The (field, path) pairs of a validated config: its own file fields, and those in
    its interventions' and experiment arms' nested values."""
    return named_paths(cfg.model_dump(mode="python", exclude_none=True))


def leads_out(value: str, root: Path, bases: Sequence[Path]) -> bool:
    """Whether `value`, read as a path relative to any of `bases` (or absolute, or from
    `~`), resolves outside `root` (a resolved folder), symbolic links followed."""
    if "\x00" in value:
        return True
    try:
        given = {Path(value), Path(value).expanduser()}
        return any(not (p if p.is_absolute() else base / p).resolve().is_relative_to(root)
                   for p in given for base in bases)
    except (OSError, RuntimeError, ValueError):  # a loop of links, an unknown ~user
        return True


def outside(pairs: Iterable[tuple[str, str]], root: Path, config_dir: Path) -> list[str]:
    """The fields of `pairs` whose path leads outside `root`: read from `config_dir`
    where `load_config` resolves the field, else from it and from `root` (the working
    folder of the commands the server runs) alike."""
    return [field for field, value in pairs
            if leads_out(value, root, [config_dir] if BESIDE_CONFIG.match(field)
                         else [config_dir, root])]


def refusal(fields: list[str]) -> str:
    """The message refusing `fields` (no resolved path: nothing about what is outside)."""
    return "; ".join(f"{f}: names a file or folder outside the served folder (a config "
                     "given to the server may only name paths inside it)" for f in fields)

"""What a fork changes (docs/forks.md): the config fields that may change mid-run
(`--set`, `shoal.config.interventions.mutable`), the seed of the rounds after K, and the
schedule of interventions that have not fired by K: drop one (`--drop NAME|INDEX`), move
it (`--move NAME|INDEX=ROUND`), edit it (`--set interventions.N.field=...`), replace the
whole future schedule (`--set 'interventions=[...]'`), add entries (`--intervene FILE`).
Entries that fired by K are history and stay as they were. A fork on disk
(shoal.runs.fork) and a fork in memory (`Simulation.fork`) both derive their config here.
"""

from __future__ import annotations

import copy
import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from shoal.config import apply_overrides, parse_config
from shoal.config.interventions import MUTABLE_SECTIONS, mutable
from shoal.config.loading import Origin, shown_override
from shoal.config.model import Config
from shoal.config.platforms import mutable_fields
from shoal.config.yaml_text import load_yaml_text, read_yaml, yaml_value
from shoal.core.errors import InputError


@dataclass
class ForkPlan:
    """What a fork changes. `schedule` edits are `drop NAME|INDEX` and
    `move NAME|INDEX ROUND`; `interventions` are entries to add; `source` names where
    they came from (a file) in error messages; `labels` name sets that stand for a flag
    (`name=x` for `--name x`)."""

    sets: list[str] = field(default_factory=list)
    seed: int | None = None
    interventions: list[Any] = field(default_factory=list)
    schedule: list[str] = field(default_factory=list)
    source: str = "fork"
    labels: dict[str, str] = field(default_factory=dict)  # a set -> the flag that made it


def _platform(key: str) -> str:
    """The platform a dotted key is about (`<name>` if it names none)."""
    parts = key.split(".")
    return parts[1] if parts[0] == "platforms" and len(parts) > 1 else "<name>"


def load_interventions(path: Path | str) -> list[Any]:
    """Entries from a YAML file (`-`: standard input): a list, or a mapping with an
    `interventions` list."""
    if str(path) == "-":
        return interventions_of(sys.stdin.read(), "--intervene -")
    data, _ = read_yaml(path, "--intervene")
    return _entries(data, str(path))


def interventions_of(text: str, source: str) -> list[Any]:
    """Entries from YAML (or JSON) text; `source` names it in error messages."""
    data, _ = load_yaml_text(text, source)  # (as a file is read: no duplicate keys, ...)
    return _entries(data, source)


def _entries(data: Any, source: str) -> list[Any]:
    if isinstance(data, dict) and set(data) == {"interventions"}:
        data = data["interventions"]
    if not isinstance(data, list):
        raise InputError(f"{source}: expected a list of interventions (or a mapping with an "
                         "'interventions' list)")
    return data


def fork_config(parent: dict, k: int, plan: ForkPlan) -> tuple[Any, dict, dict[int, int]]:
    """The fork's config, a record of what changed, and where each of the parent's
    schedule entries that the fork keeps now sits (old index -> new index). Raises
    InputError or ConfigError naming the flag or field at fault."""
    data = copy.deepcopy(parent)  # overrides edit nested dicts in place
    schedule = Schedule(data.get("interventions") or [], k)
    plain = []
    for item in plan.sets:
        key = item.split("=", 1)[0].strip()
        if key == "interventions" or key.startswith("interventions."):
            schedule.set(item)
        elif key.split(".")[0] not in Config.model_fields:
            close = difflib.get_close_matches(key.split(".")[0], list(Config.model_fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"--set {key}: unknown field {key.split('.')[0]!r}{hint}")
        elif not mutable(key):
            raise InputError(f"--set {key}: cannot be changed in a fork (it only shaped "
                             f"round 0); changeable: {', '.join(MUTABLE_SECTIONS)}, "
                             f"platforms.{_platform(key)}.{{"
                             f"{','.join(mutable_fields(_platform(key)))}}}, and the "
                             "interventions that have not fired yet")
        else:
            plain.append(item)
    blame: dict[tuple[str, ...], str] = {}  # field path -> the argument that wrote it
    data = apply_overrides(data, plain, blame, plan.labels)
    rounds = data.get("rounds")
    if ("rounds",) in blame and type(rounds) is int and rounds <= k:
        raise InputError(f"{blame['rounds',]}: rounds must be after the fork round ({k}): "
                         f"the fork runs rounds {k + 1}..rounds")
    if type(rounds) is int and rounds <= k:  # (the parent's rounds: nothing left to run)
        raise InputError(f"--round {k}: the run has {rounds} rounds, so a fork from the end "
                         f"of round {k} would run none; add --set rounds=N with N > {k}")
    if plan.seed is not None:
        data["seed"] = plan.seed
        blame["seed",] = f"--seed {plan.seed}"
    for edit in plan.schedule:
        schedule.edit(edit)
    for j, entry in enumerate(plan.interventions):
        schedule.add(entry, f"{plan.source}: entry {j}")
    data["interventions"] = schedule.entries()
    blame.update(schedule.blame())
    cfg = parse_config(data, source=plan.source, overrides=blame)
    cfg._origin = Origin(plan.source, {}, blame)  # later problems name the argument too
    changes = {"sets": plain, "seed": plan.seed, "schedule": schedule.log,
               "added": len(plan.interventions)}
    return cfg, changes, schedule.index_map()


class Schedule:
    """The parent's schedule as a fork edits it: entries that fired by round `k` are
    fixed; the others may be dropped, moved, edited or replaced; new ones are added.
    Each entry keeps its index in the parent (None: added) and the argument that last
    changed it (named by problems with it)."""

    def __init__(self, entries: list[dict], k: int):
        self.k = k
        self.items: list[tuple[int | None, dict, str | None]] = [
            (i, e, None) for i, e in enumerate(copy.deepcopy(entries))]
        self.log: list[str] = []

    def fired(self, entry: dict) -> bool:
        """Whether an entry fired by the fork round (a round that is not a number has not:
        the config check names it)."""
        r = entry.get("round", 0) if isinstance(entry, dict) else None
        return type(r) is int and r <= self.k

    def find(self, ref: str, flag: str) -> int:
        """The position of the entry named `ref` (its `name`, or its index in the parent's
        schedule); InputError if none, or if it already fired."""
        for pos, (orig, entry, _) in enumerate(self.items):
            if (orig is not None and ref == str(orig)) or (
                    isinstance(entry, dict) and entry.get("name") == ref):
                if self.fired(entry):
                    raise InputError(f"{flag} {ref}: that intervention fired at round "
                                     f"{entry['round']}, before the fork at round {self.k}; "
                                     "it is history and stays")
                return pos
        names = [str((e.get("name") if isinstance(e, dict) else None) or i)
                 for i, e, _ in self.items if not self.fired(e)]
        raise InputError(f"{flag} {ref}: no such intervention after round {self.k}; "
                         f"scheduled after it: {', '.join(names) or 'none'}")

    def edit(self, edit: str) -> None:
        """`drop REF` or `move REF ROUND`."""
        parts = edit.split()
        if len(parts) == 2 and parts[0] == "drop":
            _, entry, _ = self.items.pop(self.find(parts[1], "--drop"))
            self.log.append(f"dropped {parts[1]} (round {entry['round']}, {entry['kind']})")
        elif len(parts) == 3 and parts[0] == "move" and parts[2].lstrip("-").isdigit():
            pos = self.find(parts[1], "--move")
            to = int(parts[2])
            if to <= self.k:
                raise InputError(f"--move {parts[1]}={to}: a fork at round {self.k} can only "
                                 f"schedule rounds after {self.k}")
            orig, entry, _ = self.items[pos]
            entry["round"] = to
            self.items[pos] = (orig, entry, f"--move {parts[1]}={to}")
            self.log.append(f"moved {parts[1]} to round {to}")
        else:
            raise InputError(f"schedule edit {edit!r}: expected 'drop NAME|INDEX' or "
                             "'move NAME|INDEX ROUND'")

    def set(self, item: str) -> None:
        """`interventions=[...]` (the future schedule replaced) or
        `interventions.N.field=value` (entry N edited; N its index in the parent)."""
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if len(parts) == 1:
            try:
                future = yaml_value(raw)
            except yaml.YAMLError as exc:
                problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
                raise InputError(f"--set {item!r}: the value is not valid YAML ({problem}); "
                                 "quote it") from None
            if not isinstance(future, list):
                raise InputError(f"--set {item!r}: the schedule must be a list")
            self.items = [(i, e, label) for i, e, label in self.items if self.fired(e)]
            for j, entry in enumerate(future):
                self.add(entry, f"--set interventions: entry {j}")
            self.log.append(f"future schedule replaced ({len(future)} entries)")
            return
        pos = self.find(parts[1], f"--set {key}:")
        if len(parts) < 3:
            raise InputError(f"--set {item!r}: name a field of the entry, e.g. "
                             f"interventions.{parts[1]}.round=12")
        label = f"--set {shown_override(item)}"
        edited = apply_overrides({"entry": self.items[pos][1]},
                                 [f"entry.{'.'.join(parts[2:])}={raw}"],
                                 labels={f"entry.{'.'.join(parts[2:])}={raw}": label})["entry"]
        if self.fired(edited):
            raise InputError(f"--set {key}: a fork at round {self.k} can only schedule "
                             f"rounds after {self.k}")
        self.items[pos] = (self.items[pos][0], edited, label)
        self.log.append(f"set {key} = {raw}")

    def add(self, entry: Any, where: str) -> None:
        """A new entry, which must come after the fork round."""
        if isinstance(entry, dict) and type(entry.get("round")) is int \
                and entry["round"] <= self.k:  # (not `true`: the config check names it)
            raise InputError(f"{where} is at round {entry['round']}; a fork at round "
                             f"{self.k} can only schedule rounds after {self.k}")
        self.items.append((None, copy.deepcopy(entry), where))

    def entries(self) -> list[dict]:
        """The fork's schedule."""
        return [e for _, e, _ in self.items]

    def blame(self) -> dict[tuple[str, ...], str]:
        """Schedule path (`interventions`, position) -> the argument that changed it."""
        return {("interventions", str(pos)): label
                for pos, (_, _, label) in enumerate(self.items) if label}

    def index_map(self) -> dict[int, int]:
        """Old index -> new index of the parent's entries the fork keeps."""
        return {orig: pos for pos, (orig, _, _) in enumerate(self.items) if orig is not None}


def describe_schedule(cfg, after: int) -> list[str]:
    """One line per intervention the config schedules after round `after`."""
    return [f"round {iv.round}: {iv.kind}" + (f" ({iv.name})" if iv.name else "")
            + f" [index {i}]" for i, iv in enumerate(cfg.interventions) if iv.round > after]

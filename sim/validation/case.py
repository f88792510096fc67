"""What a validation case is: the registry, the context a case runs in, and its result
(the checks it made, each with its target, tolerance and verdict)."""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from scipy import stats

from shoal.core.registry import Registry, load_plugins

CASES = Registry("validation case")
# Shoal's own cases (imported when the registry is first listed; plug-ins come after).
BUILTIN_CASES = ("shoal.validation.cases",)


def load_cases() -> list[str]:
    """Import Shoal's own cases and every plug-in; returns the registered names."""
    import importlib

    for module in BUILTIN_CASES:
        importlib.import_module(module)
    load_plugins()
    return CASES.names()


@dataclass(frozen=True)
class CaseContext:
    """Where and how a case runs.

    `out`: the case's own folder (its runs, plots and tables go there); `quick`: the
    reduced size CI runs (a case documents both sizes); `seed`: the first seed, replicate
    i uses `seed + i`; `replicates`: replicates asked for (None: the case's default);
    `agents`: "rule" or "llm"; `llm`: the sections (`llm`, and `memory` if given) laid
    over each scenario when `agents == "llm"`."""

    out: Path
    quick: bool = False
    seed: int = 0
    replicates: int | None = None
    agents: str = "rule"
    llm: dict[str, Any] | None = None

    def seeds(self, quick: int, full: int) -> list[int]:
        """The replicate seeds: `replicates` if given, else the case's own default for
        the size (`quick` or `full`)."""
        n = self.replicates or (quick if self.quick else full)
        return [self.seed + i for i in range(n)]

    def scenario(self, data: dict[str, Any], name: str | None = None) -> dict[str, Any]:
        """A copy of a config mapping that writes its runs under `out` (in `name`, if
        given), with the LLM sections laid over it when the agents are LLM agents."""
        data = copy.deepcopy(data)
        folder = self.out / name if name else self.out
        data["output"] = {**data.get("output", {}), "dir": str(folder)}
        if self.agents == "llm" and self.llm:
            for key, section in self.llm.items():
                data[key] = copy.deepcopy(section)
        return data


@dataclass
class Check:
    """One compared quantity: the simulated value (with its 95% interval over replicates
    when there are several), the target from the source, the tolerance as a sentence
    (what must hold), and whether it held."""

    measure: str
    simulated: float
    target: float | None
    tolerance: str
    passed: bool
    interval: tuple[float, float] | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["interval"] = list(self.interval) if self.interval else None
        return d


@dataclass
class CaseResult:
    """What a case found: its checks, the plots it wrote (file names in its folder), the
    seeds and replicates it ran, and its size in words."""

    case: str
    title: str
    source: str
    agents: str
    checks: list[Check]
    seeds: list[int]
    size: str
    plots: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """True when the case ran and every check held."""
        return self.error is None and bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def verdict(self) -> str:
        return "error" if self.error else "pass" if self.passed else "fail"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["checks"] = [c.to_dict() for c in self.checks]
        d["verdict"] = self.verdict
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CaseResult:
        d = {k: v for k, v in d.items() if k != "verdict"}
        checks = [Check(**{**c, "interval": tuple(c["interval"]) if c["interval"] else None})
                  for c in d.pop("checks")]
        return cls(checks=checks, **d)


class Case(ABC):
    """A validation case. Subclasses set `title`, `source` (the citation of the target)
    and `data` (the files of `shoal.validation.data` they read), and implement `run`."""

    title: ClassVar[str] = ""
    source: ClassVar[str] = ""
    data: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def run(self, ctx: CaseContext) -> CaseResult:
        """Run the case's scenario(s) under `ctx` and compare with the target."""

    def result(self, name: str, ctx: CaseContext, checks: list[Check], seeds: list[int],
               size: str, **extra: Any) -> CaseResult:
        """A CaseResult of this case under `ctx` (a shorthand for `run`)."""
        return CaseResult(case=name, title=self.title, source=self.source,
                          agents=ctx.agents, checks=checks, seeds=seeds, size=size, **extra)


def mean_interval(values: Any, level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """The mean of replicate values and its t-interval (NaN bounds for fewer than 2)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return math.nan, (math.nan, math.nan)
    m = float(x.mean())
    if len(x) < 2:
        return m, (math.nan, math.nan)
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return m, (m - half, m + half)

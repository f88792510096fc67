"""The memory diagnostic: does a fact planted at round P still reach agents at round C?

A planted fact can be lost at creation (no memory item carries it), retention (merged or
evicted away before C) or injection (retained, but not in the system text the agents
receive — trimmed by the budget, or shown to the wrong audience). The diagnostic plants a
distinctive fact as breaking news (pinned, the default) or as a news post (not pinned),
runs the config with compaction (in memory, unless `--out` keeps the run), then reports
each stage from the run's own logs and state, naming the first stage that failed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shoal.config import Config, apply_overrides, parse_config, resolved_dict
from shoal.core.errors import InputError
from shoal.engine.agent_context import context_for
from shoal.engine.interventions import begin_round
from shoal.runs.simulation import Simulation
from shoal.world.persistence import restore_world

DEFAULT_FACT = "The amber sundial was hidden inside the cracked teapot at the harbour cafe."
STAGES = ("created", "retained", "injected")


@dataclass
class StageResult:
    """Whether a stage holds, and the evidence."""

    stage: str
    ok: bool
    detail: str


@dataclass
class Diagnosis:
    """The outcome of one diagnostic run."""

    run_dir: Path | None  # None: the diagnostic ran in memory (no --out)
    fact: str
    plant_round: int
    check_round: int
    stages: list[StageResult] = field(default_factory=list)

    @property
    def first_failure(self) -> str | None:
        """The first stage that failed, or None if the fact reached the agents."""
        return next((s.stage for s in self.stages if not s.ok), None)

    @property
    def verdict(self) -> str:
        """'injected', or 'lost at <stage>'."""
        return "injected" if self.first_failure is None else f"lost at {self.first_failure}"


def key_terms(fact: str) -> list[str]:
    """The fact's distinctive words (the longest ones) used to recognise it in any text."""
    words = sorted({w.lower() for w in re.findall(r"[A-Za-z]{5,}", fact)}, key=len,
                   reverse=True)
    return words[:3]


def carries(text: str, terms: list[str]) -> bool:
    """Does `text` carry the fact (all key terms as whole words)?"""
    return all(re.search(rf"\b{re.escape(t)}\b", text, re.IGNORECASE) for t in terms)


def plant(cfg: Config, fact: str, plant_round: int, check_round: int, kind: str,
          group: str | None, out: Path | None) -> Config:
    """The config with the planted fact and enough rounds to check it."""
    data = resolved_dict(cfg)
    target = {"groups": [group]} if group else {}
    entry = ({"kind": "event", "round": plant_round, "text": fact, "target": target,
              "duration": 1} if kind == "event" else
             {"kind": "post", "round": plant_round, "platform": cfg.platforms.enabled()[0],
              "text": fact})
    data["interventions"] = [*data.get("interventions", []), entry]
    data = apply_overrides(data, [f"rounds={max(cfg.rounds, check_round)}",
                                  *([f"output.dir={out}"] if out is not None else [])])
    return parse_config(data)


def diagnose(cfg: Config, plant_round: int = 5, check_round: int = 50,
             fact: str = DEFAULT_FACT, kind: str = "event", group: str | None = None,
             out: Path | None = None, sample: int = 20) -> Diagnosis:
    """Run `cfg` with the fact planted and report created / retained / injected."""
    if not 1 <= plant_round < check_round:
        raise InputError(f"--plant-round {plant_round} must be >= 1 and before "
                         f"--check-round {check_round}")
    planted = plant(cfg, fact, plant_round, check_round, kind, group, out)
    with Simulation.create(planted, out=out) as sim:  # out None: in memory, nothing kept
        sim.run()
        return _stages(sim, fact, plant_round, check_round, group, sample)


def _stages(sim: Simulation, fact: str, plant_round: int, check_round: int,
            group: str | None, sample: int) -> Diagnosis:
    terms = key_terms(fact)
    result = Diagnosis(sim.dir.root if sim.dir else None, fact, plant_round, check_round)
    read = sim.reader().read

    items = read("memory", f"level = 'item' AND covers_from = {plant_round}")
    made = items[items["text"].map(lambda t: carries(t, terms))]
    result.stages.append(StageResult(
        "created", not made.empty,
        f"{len(made)} memory item(s) of round {plant_round} carry it "
        f"({', '.join(sorted(set(made['kind'])))})" if not made.empty else
        f"no memory item of round {plant_round} carries it ({len(items)} items recorded)"))

    world, _ = restore_world(sim.checkpoints, check_round - 1)
    begin_round(world, check_round)
    m = world.memory
    places = [f"pinned item {i.id}" for i in m.pinned if carries(i.text, terms)]
    if m.narrative is not None and carries(m.narrative.text, terms):
        places.append(f"narrative (rounds {m.narrative.rounds[0]}-{m.narrative.rounds[1]})")
    places += [f"summary of round {r}" for r, s in m.summaries.items()
               if s.status == "done" and carries(s.text, terms)]
    places += [f"item of round {r}" for r, its in m.items.items()
               for i in its if carries(i.text, terms)]
    unpinned = read("memory", "status = 'unpinned'")
    lost_pin = unpinned[unpinned["text"].map(lambda t: carries(t, terms))]
    result.stages.append(StageResult(
        "retained", bool(places),
        ("held in " + ", ".join(places)) if places else
        "merged or evicted away" + (f" (unpinned at round {int(lost_pin['round'].min())})"
                                    if not lost_pin.empty else "")))

    result.stages.append(_injection(world, check_round, terms, group, sample))
    m.close()
    return result


def _injection(world, round_: int, terms: list[str], group: str | None,
               sample: int) -> StageResult:
    """Build the check round's full context for a sample of the agents who should know."""
    should = world.alive.copy()
    if group:
        should &= world.population.group_mask([group])
    agents = np.nonzero(should)[0][:sample]
    if not len(agents):
        return StageResult("injected", False, "nobody should know it (empty audience)")
    platform = next(iter(world.platforms))
    got = sum(carries(context_for(world, agent, round_, platform).assembled.system, terms)
              for agent in agents.tolist())
    return StageResult("injected", got == len(agents),
                       f"in the system text of {got} of {len(agents)} agents who should "
                       f"know it, at round {round_}")

"""The contract of a non-social platform's engine (the prediction market's, a plug-in's):
the hooks the driver calls each round, with the optional ones doing nothing by default.

A platform that is not social names its engine in its spec (`PlatformSpec.engine`,
"module:Class", sim/platforms/spec.py); the world builds it from the platform's config
section. It sits with the world: its hooks read and change the world's state and return
the agents' actions (`agents.actions.ActionBatch`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from shoal.agents.actions import ActionBatch
from shoal.core.state import State

# What an engine's `begin_round` may publish to the social feeds: `publish(text, stance,
# rounds, key)` posts news on every social platform, pinned for `rounds` rounds (`key`: an
# engine's own number for the pinning); returns the post ids.
Publish = Callable[[str, dict[str, float], int, int], list[int]]


def engine_part(name: str) -> str:
    """How messages name the engine of platform `name` (`calling`'s `what`: an error a
    plug-in's engine raises in a hook names it, its module and the round)."""
    return f"engine of platform {name!r}"


class PlatformEngine(ABC):
    """What a non-social platform does in a round. The world builds it as
    `Engine(config_section, world)`; the driver calls each hook below, for every such
    platform in code order, at the point of the round named. `world` is the driver's world
    (shoal.world.World), `r` the round. Hooks with a body are optional: their defaults do
    nothing. State an engine keeps across rounds must be in `get_state`, so that a resume
    and a fork continue exactly (checked by `shoal.testing.check_platform`).

    Attributes the driver reads: `code` (its spec's code), `members` (bool [N]: who may
    act on it) and `participation` (the share of active members acting in a round).
    """

    code: int
    members: np.ndarray

    @property
    def participation(self) -> float:
        """The share of active members who act on it in a round (default: the config's)."""
        return float(getattr(self.cfg, "participation", 1.0))

    def reconfigure(self, cfg: Any) -> None:
        """New settings from a `set` intervention or a fork (after interventions fire)."""
        self.cfg = cfg

    def grow(self, n: int) -> None:
        """Agents joined: the population now has `n` (default: they are not members)."""
        self.members = np.concatenate([self.members, np.zeros(n - len(self.members), bool)])

    def begin_round(self, world: Any, r: int, publish: Publish) -> None:  # noqa: B027
        """Start of r, after the interventions fired: may publish news to the feeds."""

    @abstractmethod
    def decide(self, world: Any, r: int, agents: np.ndarray, llm_agents: np.ndarray
               ) -> ActionBatch:
        """The `ActionBatch` of its rule-decided acting `agents` (those not in
        `llm_agents`: LLM agents decide in their shards, with the platform's actions as
        tools and `context_sections` as their observation)."""

    @abstractmethod
    def apply(self, world: Any, r: int, actions: ActionBatch) -> np.ndarray:
        """Apply this platform's rows of the round's canonical batch (in order); the
        reason code (`shoal.core.vocabulary.Reason`) of each row."""

    def end_round(self, world: Any, r: int, shown: np.ndarray) -> None:  # noqa: B027
        """After the belief update; `shown`: the post ids every feed showed this round."""

    def context_sections(self, world: Any, agent: int, r: int, platform: str,
                         specs: dict[str, Any]) -> list[Any]:
        """Sections (`memory.context.Section`) for `agent`'s context on `platform`: on a
        social platform, what this platform shows there; on this one, the observation of
        an LLM agent acting on it. `specs`: the config's section settings by name."""
        return []

    def tables(self, world: Any, r: int) -> dict[str, pa.Table]:
        """Round r's rows of its own tables (declared in shoal.store.tables), by name; also
        called at round 0."""
        return {}

    @abstractmethod
    def get_state(self) -> State:
        """Its whole state, for a checkpoint."""

    @abstractmethod
    def set_state(self, state: State) -> None:
        """Take the state `get_state` returned (on a freshly built engine)."""

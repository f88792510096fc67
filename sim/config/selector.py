"""One way to pick agents, wherever a config picks some: a platform's members, the LLM
agents, an intervention's target, a market's traders.

A selector names explicit `ids`, and/or `groups`, and/or a seeded `fraction` of those;
every field left out means "no restriction", so an empty selector picks everyone. It is
resolved against the population by `sim.world.selection.select`, with one rule for every
user: an id outside the population or an unknown group is an error naming the field.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sim.config.base import Strict


class Selector(Strict):
    """Which agents: everyone (no field), explicit `ids`, named `groups`, and/or a seeded
    `fraction` of those."""

    ids: list[Annotated[int, Field(ge=0)]] | None = None
    groups: list[str] | None = None
    fraction: float | None = Field(default=None, gt=0, le=1)

    @property
    def everyone(self) -> bool:
        """Whether the selector restricts nothing."""
        return self.ids is None and self.groups is None and self.fraction is None

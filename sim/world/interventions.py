"""The intervention schedule as world state: which entries have fired, and the breaking-news
events still pinned to feeds. What each kind does when it fires is the engine's
(shoal.engine.interventions); this is what a checkpoint keeps, so a resume never fires an
entry twice and never skips one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shoal.config import Config
from shoal.core.state import State

NEWS_AUTHOR = -1  # the author id of posts by the platforms' news accounts


@dataclass
class ActiveEvent:
    """A breaking-news post pinned to the top of feeds until round `until` (inclusive)."""

    index: int
    post_ids: dict[int, int]  # platform code -> post id
    until: int
    target: np.ndarray | None  # bool [N] at firing time, None = everyone


class Interventions:
    """The schedule of a run and which entries have fired."""

    def __init__(self, cfg: Config, fired: set[int] | None = None,
                 events: list[ActiveEvent] | None = None):
        self.cfg = cfg
        self.fired: set[int] = set(fired or ())
        self.events: list[ActiveEvent] = list(events or ())

    def due(self, round_: int) -> list[int]:
        """Indices of entries due at `round_` that have not fired."""
        return [i for i, spec in enumerate(self.cfg.interventions)
                if spec.round == round_ and i not in self.fired]

    def active_events(self, round_: int) -> list[ActiveEvent]:
        """Events pinned during `round_`, newest first."""
        return [e for e in reversed(self.events) if e.until >= round_]

    def expire(self, round_: int) -> None:
        """Forget events whose last pinned round is before `round_`."""
        self.events = [e for e in self.events if e.until >= round_]

    # ---------------------------------------------------------------- state

    def renumber(self, new_index: dict[int, int]) -> None:
        """Follow a schedule whose entries moved (a fork dropped or added some): what fired
        and the pinned events keep their entries, now at `new_index[old]`."""
        self.fired = {new_index[i] for i in self.fired if i in new_index}
        for event in self.events:
            event.index = new_index.get(event.index, event.index)

    def get_state(self) -> State:
        """What fired, and the events still pinned (with their targets)."""
        meta = {"fired": sorted(self.fired), "events": [
            {"index": e.index, "post_ids": {str(k): v for k, v in e.post_ids.items()},
             "until": e.until, "targeted": e.target is not None} for e in self.events]}
        arrays = {f"event_target.{e.index}": e.target.copy() for e in self.events
                  if e.target is not None}
        return State(arrays=arrays, meta=meta)

    def set_state(self, state: State) -> None:
        """Take what fired and the pinned events of `state`."""
        meta, arrays = state.meta, state.arrays
        self.fired = set(meta.get("fired", []))
        self.events = [ActiveEvent(
            index=e["index"], post_ids={int(k): v for k, v in e["post_ids"].items()},
            until=e["until"],
            target=arrays[f"event_target.{e['index']}"].astype(bool) if e["targeted"] else None,
        ) for e in meta.get("events", [])]

"""The stances an agent read this round, as the exposure-driven modes of the rules use them."""

from __future__ import annotations

import numpy as np

from shoal.beliefs.exposure import ExposureHistory
from shoal.beliefs.rules.base import Exposures, UpdateContext, UpdateRule


def exposure_stances(exposures: Exposures, ctx: UpdateContext, skip_seen: bool = False
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Stance [A, M, T] of each exposure (0 where unaddressed) and the addressed mask.

    With `skip_seen`, posts the reader had already seen in an earlier round are masked out
    (the exposure history is recorded after the update, so "seen" means before this round).
    """
    stance, addressed = UpdateRule.stances(exposures, ctx)
    if skip_seen and ctx.history is not None and exposures.posts.size:
        addressed = addressed & ~seen_before(exposures, ctx.history)[:, :, None]
        stance = np.where(addressed, stance, 0.0)
    return stance, addressed


def unseen_feed(exposures: Exposures, ctx: UpdateContext, skip_seen: bool) -> np.ndarray:
    """The feed's post ids [A, M], with `skip_seen` those the reader had seen in an earlier
    round taken out (-1, as an empty slot)."""
    if skip_seen and ctx.history is not None and exposures.posts.size:
        return np.where(seen_before(exposures, ctx.history), -1, exposures.posts)
    return exposures.posts


def seen_before(exposures: Exposures, history: ExposureHistory) -> np.ndarray:
    """[A, M]: whether the reader had seen the item in an earlier round (the history is
    recorded after the update, so "seen" means before this round)."""
    valid = exposures.valid
    readers = np.broadcast_to(exposures.agents[:, None], exposures.posts.shape)
    seen = np.zeros(exposures.posts.shape, dtype=bool)
    seen[valid] = history.seen(readers[valid], exposures.posts[valid])
    return seen

"""Resolving a `Selector` (shoal.config.selector) against a population: the one resolver for
platform members, LLM agents and intervention targets."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shoal.agents.population import Population
from shoal.config.selector import Selector
from shoal.core.errors import InputError


def select(selector: Selector, population: Population, draws: Callable[[], np.random.Generator],
           where: str) -> np.ndarray:
    """Boolean mask [N] of the agents `selector` picks. `draws` gives the seeded generator
    of the fraction (drawn once per agent, only when a fraction is set); `where` is the
    selector's config path, named in errors: an id outside the population or a group the
    population does not have is an InputError."""
    n = population.size
    mask = np.ones(n, dtype=bool)
    if selector.ids is not None:
        ids = np.asarray(selector.ids, dtype=np.int64)
        bad = ids[ids >= n]
        if len(bad):
            raise InputError(f"{where}.ids: no agent {int(bad[0])} (the population has {n} "
                             f"agents, ids 0..{n - 1})")
        mask = np.zeros(n, dtype=bool)
        mask[ids] = True
    if selector.groups is not None:
        unknown = sorted(set(selector.groups) - set(population.group_names))
        if unknown:
            raise InputError(f"{where}.groups: unknown groups {unknown}; the population has "
                             f"{population.group_names}")
        mask &= population.group_mask(selector.groups)
    if selector.fraction is not None and selector.fraction < 1.0:
        mask &= draws().random(n) < selector.fraction
    return mask

"""Running a belief rule through the engine's API for many rounds, and reading the result.

The validation tests call rules exactly as the driver does (`sim/engine/update.py`, step 7): a
`BeliefState`, an `UpdateContext` with the run's counter RNG, the follow graph, the living
agents and the initial positions, and `rule.update(...)` once per round.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shoal.beliefs.rules import Exposures, UpdateContext, make_rule
from shoal.beliefs.state import BeliefState
from shoal.beliefs.trust import TrustStore
from shoal.config import BeliefRule
from shoal.core.counter_rng import CounterRNG
from shoal.core.follow_graph import FollowGraph
from shoal.core.posts import PostStore

NO_EXPOSURES = Exposures(np.empty(0, np.int64), np.empty((0, 0), np.int64),
                         np.empty((0, 0), np.int32), np.empty((0, 0), np.int32),
                         np.empty((0, 0)))


def rule_config(spec: dict) -> BeliefRule:
    """A validated `beliefs.update` section (the same union the YAML goes through)."""
    from pydantic import TypeAdapter

    return TypeAdapter(BeliefRule).validate_python(spec)


def to_shoal(x01: np.ndarray) -> np.ndarray:
    """Positions on the literature's [0, 1] scale mapped to Shoal's [-1, 1]."""
    return 2.0 * np.asarray(x01, dtype=np.float64) - 1.0


def to_unit(x: np.ndarray) -> np.ndarray:
    """Shoal positions mapped back to [0, 1]."""
    return (np.asarray(x) + 1.0) / 2.0


def run_rule(spec: dict, position: np.ndarray, rounds: int, seed: int = 0,
             confidence: np.ndarray | None = None, graph: FollowGraph | None = None,
             trust: TrustStore | None = None, until_still: float | None = None,
             until: Callable[[np.ndarray], bool] | None = None) -> tuple[np.ndarray, int]:
    """Run `rounds` rounds of the rule on [N, T] positions; returns (positions, rounds run).
    With `until_still`, stop early once a round moves no position by more than that; with
    `until`, once it holds for the positions after a round."""
    rule = make_rule(rule_config(spec))
    position = np.array(position, dtype=np.float64)
    n, t = position.shape
    beliefs = BeliefState(position, np.full((n, t), 0.5) if confidence is None
                          else np.array(confidence, dtype=np.float64))
    x0 = position.copy()
    rng = CounterRNG(seed)
    graph = graph if graph is not None else FollowGraph(n)
    trust = trust if trust is not None else TrustStore(0.5)
    posts = PostStore(t, 2)
    alive = np.ones(n, dtype=bool)
    engagement = np.zeros((n, t))
    for r in range(1, rounds + 1):
        before = beliefs.position.copy() if until_still is not None else None
        ctx = UpdateContext(round=r, posts=posts, trust=trust, history=None,
                            engagement=engagement, rng=rng, graph=graph, alive=alive,
                            initial_position=x0)
        rule.update(beliefs, NO_EXPOSURES, ctx)
        if before is not None and np.max(np.abs(beliefs.position - before)) <= until_still:
            return beliefs.position, r
        if until is not None and until(beliefs.position):
            return beliefs.position, r
    return beliefs.position, rounds


def clusters(x: np.ndarray, gap: float, min_share: float = 0.0) -> list[int]:
    """Sizes of the clusters of a 1-d sample: sorted values split where consecutive values
    are more than `gap` apart; clusters holding less than `min_share` of the sample (the
    'minor clusters' of Deffuant et al.) are left out."""
    xs = np.sort(np.asarray(x).ravel())
    cuts = np.nonzero(np.diff(xs) > gap)[0] + 1
    sizes = np.diff(np.concatenate([[0], cuts, [len(xs)]]))
    return [int(s) for s in sizes if s >= min_share * len(xs)]

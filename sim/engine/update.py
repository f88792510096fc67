"""Step 7 of a round: trust from who interacted with whom, then beliefs from what each agent
saw and the engagement its posts drew, then the exposure history (novelty next round)."""

from __future__ import annotations

import numpy as np

from shoal.beliefs.rules import Exposures, UpdateContext, UpdateRule
from shoal.core.counter_rng import CounterRNG
from shoal.core.errors import NumericError
from shoal.core.registry import calling
from shoal.core.vocabulary import TRUST_CAUSES
from shoal.core.workers import SERIAL, Workers
from shoal.engine.apply import Applied
from shoal.world.world import World


def update_trust(world: World, applied: Applied) -> None:
    """Add the round's trust deltas (summed per pair, clipped) and record, with each event,
    its pair's value after the round. Before beliefs: rules may weigh exposures by trust."""
    t = applied.trust
    world.trust.add(t["truster"], t["trustee"], t["delta"])
    t["value"] = world.trust.get(t["truster"], t["trustee"])


def update_beliefs(world: World, rule: UpdateRule, exposures: Exposures, applied: Applied,
                   round_: int, rng: CounterRNG, workers: Workers = SERIAL) -> None:
    """Apply the belief rule to the round's exposures and engagement (a range of agents
    per worker when the rule is `by_agent`), then remember what each agent saw."""
    ctx = UpdateContext(round=round_, posts=world.posts, trust=world.trust,
                        history=world.history, engagement=applied.engagement, rng=rng,
                        graph=next(iter(world.platforms.values())).graph, alive=world.alive,
                        initial_position=world.initial_position)
    with calling(f"belief rule {world.cfg.beliefs.update.rule!r}", rule, round_):
        if rule.by_agent:
            workers.over(len(exposures.agents),
                         lambda rows: rule.update(world.beliefs, exposures.take(rows), ctx))
        else:
            rule.update(world.beliefs, exposures, ctx)
    check_finite(world, applied, round_, workers)
    if world.history is not None:
        world.history.record(*exposures.flat(), round_)


def belief_problem(world: World, workers: Workers = SERIAL) -> str | None:
    """What is wrong with the beliefs, if anything: positions must be finite and in
    [-1, 1], confidences finite and in [0, 1] (None: all are). The check's pass over the
    values runs a range of agents per worker."""
    b = world.beliefs
    for what, values, low in (("positions", b.position, -1.0), ("confidences",
                                                               b.confidence, 0.0)):
        if not values.size:
            continue
        # (NaN propagates through min and max: one pass finds both)
        ends = workers.over(len(values), lambda rows, v=values: (v[rows].min(), v[rows].max()))
        lo, hi = np.min([e[0] for e in ends]), np.max([e[1] for e in ends])  # (NaN kept)
        if np.isfinite(lo) and np.isfinite(hi) and low <= lo and hi <= 1.0:
            continue
        bad = ~np.isfinite(values)
        how = "not finite"
        if not bad.any():
            bad, how = (values < low) | (values > 1.0), f"outside [{low:g}, 1]"
        agent, topic = (int(i) for i in np.argwhere(bad)[0])
        return (f"{int(bad.sum())} {what} {how} (first: agent {agent}, topic "
                f"{world.topics[topic]!r}: {float(values[agent, topic])!r})")
    return None


def check_finite(world: World, applied: Applied, round_: int,
                 workers: Workers = SERIAL) -> None:
    """Stop the run (before anything of the round is logged) if the update left a belief
    that is not a finite number in its range, or a trust value that is not finite: such
    a run's results are meaningless."""
    problem = belief_problem(world, workers)
    if problem is not None:
        raise NumericError(
            f"round {round_}: the belief rule {world.cfg.beliefs.update.rule!r} made "
            f"{problem}; check beliefs.update's parameters. Nothing of round {round_} was "
            "kept.")
    t = applied.trust
    bad = ~np.isfinite(t["value"])
    if bad.any():
        first = int(np.argmax(bad))
        pair = (t["truster"] == t["truster"][first]) & (t["trustee"] == t["trustee"][first])
        causes = sorted({TRUST_CAUSES[int(c)] for c in t["cause"][pair]})
        raise NumericError(
            f"round {round_}: trust became not finite for {int(bad.sum())} event(s) (first: "
            f"agent {int(t['truster'][first])} in agent {int(t['trustee'][first])}, from "
            f"{', '.join(causes)}); check beliefs.trust's deltas "
            f"({', '.join(f'beliefs.trust.{c}' for c in causes)}). Nothing of round "
            f"{round_} was kept.")

"""Feed items' features (author, kind, stance, votes, follows, trust) are gathered only
when the policy or the belief rule reads them (`Policy.reads_feed_features`,
`UpdateRule.uses_trust` / `uses_votes`): a run that skips them writes the same tables as
one that gathers them, and its views hold the features' defaults."""

from __future__ import annotations

import numpy as np
import pytest

from shoal.config import parse_config
from shoal.runs.simulation import Simulation
from shoal.testing import differing_tables, small_config


def _run(tmp_path, name: str, policy: dict, rule: dict, force: bool | None = None):
    data = small_config(policy=policy, beliefs={"update": rule},
                        output={"dir": str(tmp_path / name), "log_idle_actions": True})
    sim = Simulation.create(parse_config(data))
    with sim:
        driver = sim.driver()
        if force is not None:
            driver.feed_features = force
        skipped = not driver.feed_features
        sim.run()
    return sim.dir, skipped


@pytest.mark.parametrize("rule", [
    {"rule": "bounded_confidence", "epsilon": 0.4, "mu": 0.3},
    {"rule": "degroot"}, {"rule": "voter"},
], ids=lambda r: r["rule"])
def test_a_run_that_skips_the_features_writes_what_one_that_gathers_them_does(tmp_path, rule):
    post_only = {"engage_rate": 0.0, "post_rate": 0.3}
    skipping, skipped = _run(tmp_path, "skipping", post_only, rule)
    assert skipped  # nothing reads them: the driver does not gather them
    gathering, _ = _run(tmp_path, "gathering", post_only, rule, force=True)
    assert differing_tables(skipping.db, gathering.db) == []


@pytest.mark.parametrize(("policy", "rule"), [
    ({"engage_rate": 0.3}, {"rule": "bounded_confidence"}),  # the policy reads them
    ({"engage_rate": 0.0}, {"rule": "social_influence"}),  # the rule reads trust and votes
    ({"engage_rate": 0.0}, {"rule": "degroot", "weights": "trust"}),  # trust, by author
])
def test_features_are_gathered_when_something_reads_them(tmp_path, policy, rule):
    _, skipped = _run(tmp_path, "run", policy, rule)
    assert not skipped


def test_skipped_features_hold_their_defaults():
    from shoal.engine.observe import fill_view, new_view
    from shoal.world.world import build_world

    world = build_world(parse_config(small_config()))
    plat = next(iter(world.platforms))
    agents = np.arange(4, dtype=np.int64)
    view = new_view(world, plat, agents, 3)
    feed = np.array([[5, 4, -1]] * 4, np.int64)
    fill_view(world, view, slice(0, 4), feed, social=False, trust=False, features=False)
    np.testing.assert_array_equal(view.feed, feed)
    assert (view.author == -1).all() and (view.kind == -1).all()
    assert np.isnan(view.stance).all()
    assert (view.up == 0).all() and (view.down == 0).all()
    assert not view.follows_author.any() and not view.voted.any() and not view.reposted.any()
    assert (view.trust == world.trust.initial).all()

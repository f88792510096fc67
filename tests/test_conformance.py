"""The conformance kit (sim/testing.py) over every part Shoal registers itself: each
belief rule, recommender, policy, platform and intervention kind is deterministic across
shard counts, resumes and forks exactly, keeps its outputs finite and well formed. The
test plug-in's parts pass the same checks in tests/test_plugins.py."""

from __future__ import annotations

import pytest

from shoal.core.registry import (
    BELIEF_RULES,
    INTERVENTIONS,
    PLATFORMS,
    POLICIES,
    RECOMMENDERS,
    load_plugins,
)
from shoal.testing import (
    check_belief_rule,
    check_intervention,
    check_platform,
    check_policy,
    check_recommender,
)

load_plugins()


# every registered part of every family, with the kit's check for its family
PARTS = [(check, name) for registry, check in (
    (BELIEF_RULES, check_belief_rule), (RECOMMENDERS, check_recommender),
    (POLICIES, check_policy), (PLATFORMS, check_platform),
    (INTERVENTIONS, check_intervention)) for name in registry.names()]


@pytest.mark.slow
@pytest.mark.parametrize("check, name", PARTS,
                         ids=[f"{c.__name__.removeprefix('check_')}-{n}" for c, n in PARTS])
def test_every_part_passes_the_kit(check, name, tmp_path):
    check(name, tmp_path)


def test_the_kit_catches_a_recommender_that_forgets_its_state(tmp_path, monkeypatch):
    """A stateful recommender whose state is not checkpointed fails the resume check (the
    kit is not a check that cannot fail)."""
    import numpy as np

    from shoal.engine.recommenders import Recommender
    from shoal.testing import check_run, small_config

    class Forgetful(Recommender):
        """Shows the newest posts, skipping as many as it has built feeds before."""

        def __init__(self, cfg):
            self.calls = 0

        def feeds(self, ctx, agents):
            pool = ctx.window(3)[::-1]
            k, self.calls = ctx.platform.k, self.calls + 1
            pool = pool[self.calls % max(1, len(pool)):]
            out = np.full((len(agents), k), -1, np.int64)
            out[:, :min(k, len(pool))] = pool[:k]
            return out

    part = RECOMMENDERS.get("following")
    monkeypatch.setitem(RECOMMENDERS._parts, "following",
                        part.__class__(part.name, part.config, Forgetful, part.module, {}))
    platforms = {p: {"feed_size": 4} for p in ("twitter", "reddit")}
    with pytest.raises(AssertionError, match="stopped after round 2 and resumed"):
        check_run(small_config(platforms={
            name: {**v, "recommender": {"kind": "following"}}
            for name, v in platforms.items()}), tmp_path)


@pytest.mark.slow
def test_a_feed_with_empty_slots_between_its_items_passes_the_kit(tmp_path, monkeypatch):
    """-1 may stand in any slot of a feed (docs/plugins.md; the engine accepts it and the
    `exposures` view keeps each item's rank): the kit's feed check accepts such feeds."""
    import numpy as np

    from shoal.engine.recommenders import Recommender

    class Gappy(Recommender):
        """The newest posts of others, every other slot left empty."""

        def __init__(self, cfg):
            pass

        def feeds(self, ctx, agents):
            pool = ctx.window(3)[::-1]
            out = np.full((len(agents), ctx.platform.k), -1, np.int64)
            for row, agent in enumerate(agents):
                mine = pool[ctx.posts.author[pool] != agent][:ctx.platform.k]
                out[row, :len(mine)] = mine
            out[:, 1::2] = -1
            return out

    part = RECOMMENDERS.get("following")
    monkeypatch.setitem(RECOMMENDERS._parts, "following",
                        part.__class__(part.name, part.config, Gappy, part.module, {}))
    check_recommender("following", tmp_path)

"""The `cascades` validation case (repost cascades vs Twitter15/16): its data, its split,
the diffusion-path measure, and the case at quick size through the runner."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from shoal.analysis import metrics
from shoal.validation import data
from shoal.validation.cases.cascades import (
    DATA,
    KEEP,
    KS_MAX,
    derive,
    diffusion_posts,
    observed,
    split,
)
from shoal.validation.runner import validate


@pytest.fixture(scope="module")
def quick(ray_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("cascades")
    done = validate(["cascades"], out, quick=True)
    (result,) = done.results
    return result, out / "cascades-rule"


def test_the_shipped_data_is_the_registered_derivation():
    """The file checks against its hash, has the 198 cascades and only the kept columns,
    and deriving it again from itself changes no byte (the derivation keeps the source's
    cells as text)."""
    where = data.path(DATA.name)
    table = observed()
    assert list(table.columns) == list(KEEP) and len(table) == 198
    assert derive(where) == where.read_bytes()
    assert DATA.source_sha256 and DATA.derived and DATA.url.endswith("all_topics.csv")


def test_the_halves_alternate_within_each_category():
    train, test = split(observed())
    assert (len(train), len(test)) == (102, 96)  # six categories have an odd count
    per = train["topic_category"].value_counts() - test["topic_category"].value_counts()
    assert per.between(0, 1).all()
    assert not set(train["topic_name"]) & set(test["topic_name"])
    assert set(train["topic_category"]) == set(test["topic_category"])


def test_a_repost_of_a_repost_hangs_from_the_repost_it_was_made_from():
    """Shoal attaches every repost to its root; the diffusion tree hangs it from the feed
    item reposted (the chain root ← B ← C has depth 2, not a star of depth 1)."""
    posts = pd.DataFrame({
        "post_id": [0, 1, 2, 3], "platform": "twitter", "round": [0, 1, 2, 2],
        "author": [7, 8, 9, 10], "kind": ["post", "repost", "repost", "repost"],
        "parent_id": [pd.NA, 0, 0, 0], "root_id": [0, 0, 0, 0]})
    actions = pd.DataFrame({"action": ["repost"] * 3, "status": ["ok"] * 3,
                            "target_post": [0, 1, 2], "new_post_id": [1, 2, 3]})
    star = metrics.cascades(posts, kinds=["repost"]).iloc[0]
    chain = metrics.cascades(diffusion_posts(posts, actions), kinds=["repost"]).iloc[0]
    assert (star["depth"], star["max_breadth"]) == (1, 3)
    assert (chain["depth"], chain["max_breadth"], chain["users"]) == (3, 1, 4)


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_the_quick_case_reports_finite_checks_plots_and_trees(quick):
    result, folder = quick
    assert result.error is None and len(result.checks) == 3
    for check in result.checks:
        assert math.isfinite(check.simulated) and check.tolerance
    ks_scale, ks_depth = (c.simulated for c in result.checks[:2])
    assert 0 <= ks_scale <= 1 and 0 <= ks_depth <= 1
    # the verdicts follow the thresholds stated before the run
    assert [c.passed for c in result.checks[:2]] == [ks_scale <= KS_MAX, ks_depth <= KS_MAX]
    for plot in result.plots:
        assert (folder / plot).stat().st_size > 0
    cascades = pd.read_csv(folder / "heldout_cascades.csv")
    assert len(cascades) == 20  # every 5th held-out cascade, one replicate
    # tree invariants of each measured cascade: a broken measure breaks one of them
    assert (cascades["users"] >= 1).all()
    assert (cascades["max_breadth"] <= cascades["users"]).all()
    assert (cascades["depth"] <= cascades["users"] - 1).all()
    # diffusion paths, not stars: some repost was made from another repost
    assert cascades["depth"].max() >= 2
    assert (cascades["followers"] > 0).all()
    trials = pd.read_csv(folder / "calibration" / "trials.csv")
    assert len(trials) == 4 and np.isfinite(trials["distance"]).all()
    assert trials["distance"].between(0, 2).all()  # a sum of two KS distances

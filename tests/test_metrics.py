"""Metrics against values computed by hand on small fixtures (each derivation is in the
test's docstring), plus the large-sample behaviour each metric is known for."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from shoal.analysis import metrics

# ---------------------------------------------------------------------- fixtures


def beliefs_frame(rounds: dict[int, list[float]], topic: str = "t") -> pd.DataFrame:
    """beliefs rows: round -> positions of agents 0..n-1 on one topic."""
    return pd.DataFrame([{"round": r, "agent": a, "topic": topic, "position": x,
                          "confidence": 0.5}
                         for r, xs in rounds.items() for a, x in enumerate(xs)])


def tree_posts() -> pd.DataFrame:
    """A known cascade (post id: kind, author, round):

        0 post (10, r1)
        ├── 1 repost (11, r2)
        ├── 2 reply (12, r2)
        │   ├── 4 reply (10, r3)
        │   │   └── 6 quote (14, r4)
        │   └── 5 reply (13, r3)
        └── 3 quote (13, r2)

    plus 7, a post with no reactions, and 8, a reply whose parent (99) is not in the frame.
    """
    rows = [  # post_id, kind, author, round, parent_id, root_id
        (0, "post", 10, 1, None, 0), (1, "repost", 11, 2, 0, 0), (2, "reply", 12, 2, 0, 0),
        (3, "quote", 13, 2, 0, 0), (4, "reply", 10, 3, 2, 0), (5, "reply", 13, 3, 2, 0),
        (6, "quote", 14, 4, 4, 0), (7, "post", 15, 4, None, 7), (8, "reply", 16, 4, 99, 99),
    ]
    df = pd.DataFrame(rows, columns=["post_id", "kind", "author", "round", "parent_id",
                                     "root_id"])
    return df.assign(platform="twitter", parent_id=df["parent_id"].astype("Int64"))


# ---------------------------------------------------------------------- beliefs


def test_belief_stats_are_population_moments():
    """Round 0: positions -1, 0, 1: mean 0, var (1 + 0 + 1)/3 = 2/3."""
    stats = metrics.belief_stats(beliefs_frame({0: [-1, 0, 1], 1: [0.5, 0.5, 0.5]}))
    assert stats.columns.tolist() == ["round", "topic", "n", "mean", "var", "sd"]
    first = stats.iloc[0]
    assert (first["n"], first["mean"]) == (3, 0)
    assert first["var"] == pytest.approx(2 / 3)
    assert first["sd"] == pytest.approx(math.sqrt(2 / 3))
    assert stats.iloc[1]["var"] == 0


# ---------------------------------------------------------------------- polarization


def test_bimodality_coefficient_by_hand():
    """[0, 0, 0, 1]: mean 1/4; central moments m2 = 3/16, m3 = 3/32, m4 = 21/256, so
    g1 = m3/m2^1.5 = 2/√3, g2 = m4/m2² − 3 = −2/3; bias-adjusted G1 = g1·√12/2 = 2 and
    G2 = 3·(5·(−2/3) + 6)/2 = 4; BC = (4 + 1)/(4 + 3·9/2) = 5/17.5 = 2/7.
    [−1, −1, −1, 1, 1, 1]: m2 = m4 = 1, g1 = 0, g2 = −2, G2 = 5·(7·(−2) + 6)/12 = −10/3;
    BC = 1/(−10/3 + 3·25/12) = 12/35."""
    assert metrics.bimodality_coefficient([0, 0, 0, 1]) == pytest.approx(2 / 7)
    assert metrics.bimodality_coefficient([-1, -1, -1, 1, 1, 1]) == pytest.approx(12 / 35)
    assert math.isnan(metrics.bimodality_coefficient([0, 1, 2]))  # n < 4
    assert math.isnan(metrics.bimodality_coefficient([0.3] * 10))  # no spread


def test_a_consensus_up_to_rounding_has_no_bimodality_and_no_correlation():
    """Positions equal up to a unit in the last place (what averaging rules reach) have no
    spread: BC is NaN as for equal positions. Computed from the rounding of x − mean it
    was anything: 49 agents at 0.1 and one a unit in the last place above gave 1.83, above
    BC's bound of 1 (the same shape in whole numbers, [0]·49 + [1], has BC 0.9588: the
    value is the rounding's, not the data's). A real spread at the same level is kept:
    [0, 0, 0, 1]·1e-9 + 0.5 still gives 2/7."""
    consensus = np.full(50, 0.1)
    consensus[0] = np.nextafter(0.1, 1.0)
    assert math.isnan(metrics.bimodality_coefficient(consensus))
    ulps = 0.3 + np.spacing(0.3) * np.array([0, 1, 2, 0, 1, 2, 1, 0])
    assert math.isnan(metrics.bimodality_coefficient(ulps))
    assert metrics.bimodality_coefficient(0.5 + 1e-9 * np.array([0, 0, 0, 1])) == \
        pytest.approx(2 / 7, rel=1e-5)
    # the follower–followee correlation of a consensus is undefined, not ±1
    b = beliefs_frame({0: [0.1, np.nextafter(0.1, 1.0), 0.1, np.nextafter(0.1, 1.0)]})
    follows = pd.DataFrame([(0, "twitter", 0, 1, "init"), (0, "twitter", 1, 2, "init"),
                            (0, "twitter", 2, 3, "init")],
                           columns=["round", "platform", "follower", "followee", "op"])
    out = metrics.follower_followee_correlation(b, follows)
    assert out["n_edges"].tolist() == [3] and math.isnan(out["correlation"].iloc[0])


def test_bimodality_coefficient_matches_pandas_moments_and_its_threshold():
    """Same as (G1² + 1)/(G2 + 3(n−1)²/((n−2)(n−3))) with pandas' skew and kurt; above 5/9
    for a bimodal sample, below for a normal (1/3 in the limit), ≈ 5/9 for a uniform."""
    rng = np.random.default_rng(7)
    x = pd.Series(rng.normal(size=50))
    n = len(x)
    expected = (x.skew() ** 2 + 1) / (x.kurt() + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))
    assert metrics.bimodality_coefficient(x) == pytest.approx(expected)
    bimodal = np.concatenate([rng.normal(-0.6, 0.1, 2000), rng.normal(0.6, 0.1, 2000)])
    assert metrics.bimodality_coefficient(bimodal) > 5 / 9 + 0.2
    assert metrics.bimodality_coefficient(rng.normal(0, 0.3, 4000)) < 5 / 9 - 0.15
    assert metrics.bimodality_coefficient(rng.uniform(-1, 1, 20000)) == pytest.approx(
        5 / 9, abs=0.02)


def test_esteban_ray_two_point_closed_form():
    """Two groups, shares p and 1−p at distance d: P = K d p(1−p)(p^α + (1−p)^α).
    p = 1/2 at ±1, α = 1.6: 2·(1/4)·2·2^−1.6 = 2^−1.6 for any binning (bin means are the
    points themselves). p = 1/4 at ∓1/2, α = 1: 1·(3/16)·1 = 3/16. One point: 0."""
    camps = np.r_[np.full(500, -1.0), np.full(500, 1.0)]
    for bins in (2, 5, 20):
        assert metrics.esteban_ray(camps, alpha=1.6, bins=bins) == pytest.approx(2 ** -1.6)
    skewed = np.r_[np.full(25, -0.5), np.full(75, 0.5)]
    assert metrics.esteban_ray(skewed, alpha=1.0) == pytest.approx(3 / 16)
    assert metrics.esteban_ray(skewed, alpha=1.0, k=2.0) == pytest.approx(3 / 8)
    assert metrics.esteban_ray(np.full(10, 0.3)) == 0
    # α = 0: the mean absolute difference over ordered pairs, Σ π_i π_j |y_i − y_j|
    pts = np.array([-0.9, -0.1, 0.5, 0.9])
    gmd = np.abs(pts[:, None] - pts[None, :]).mean()
    assert metrics.esteban_ray(pts, alpha=0.0, bins=10) == pytest.approx(gmd)


def test_group_mean_distance_by_sign_column_and_mapping():
    """Positions −0.8, −0.4, 0, 0.2, 0.6. By sign: mean(−) = −0.6 (n 2), mean(+) = 0.4
    (n 2), the 0 in neither: distance 1.0. Mapping x = {0, 2, 4}, y = {1, 3}:
    mean x = (−0.8 + 0 + 0.6)/3 = −0.0667, mean y = (−0.4 + 0.2)/2 = −0.1: 1/30."""
    b = beliefs_frame({0: [-0.8, -0.4, 0.0, 0.2, 0.6]})
    out = metrics.group_mean_distance(b).iloc[0]
    assert (out["group_a"], out["group_b"], out["n_a"], out["n_b"]) == (
        "negative", "positive", 2, 2)
    assert (out["mean_a"], out["mean_b"]) == (pytest.approx(-0.6), pytest.approx(0.4))
    assert out["distance"] == pytest.approx(1.0)
    groups = {0: "x", 1: "y", 2: "x", 3: "y", 4: "x"}
    assert metrics.group_mean_distance(b, groups).iloc[0]["distance"] == pytest.approx(1 / 30)
    labelled = b.assign(side=b["agent"].map(groups))
    assert metrics.group_mean_distance(labelled, "side").iloc[0]["distance"] == \
        pytest.approx(1 / 30)
    with pytest.raises(ValueError, match="exactly two groups"):
        metrics.group_mean_distance(b, {0: "x", 1: "y", 2: "z"})


def test_polarization_table():
    """One row per round and topic with each measure as computed on its own."""
    rng = np.random.default_rng(1)
    xs = {0: rng.uniform(-1, 1, 200).tolist(), 1: rng.normal(0, 0.1, 200).clip(-1, 1).tolist()}
    b = pd.concat([beliefs_frame(xs, "a"), beliefs_frame(xs, "b")], ignore_index=True)
    pol = metrics.polarization(b)
    assert pol.columns.tolist() == ["round", "topic", "n", "mean", "sd", "bimodality",
                                    "esteban_ray", "group_distance"]
    assert len(pol) == 4
    row = pol[(pol["round"] == 0) & (pol["topic"] == "a")].iloc[0]
    assert row["bimodality"] == pytest.approx(metrics.bimodality_coefficient(xs[0]))
    assert row["esteban_ray"] == pytest.approx(metrics.esteban_ray(xs[0]))
    assert row["sd"] == pytest.approx(np.std(xs[0]))
    assert pol.loc[pol["round"] == 1, "sd"].max() < pol.loc[pol["round"] == 0, "sd"].min()


# ---------------------------------------------------------------------- echo chambers


def test_follower_followee_correlation_on_a_tiny_graph():
    """Agents 0..3 at −1, −0.5, 0.5, 1. Round 0 edges 0→1, 1→0, 2→3, 3→2 (2→3 on both
    platforms, counted once): pairs (x, y) = (−1, −.5), (−.5, −1), (.5, 1), (1, .5);
    means 0; Σxy = 2, Σx² = Σy² = 2.5: r = 0.8. Round 1: 0 unfollows 1 and follows 2:
    pairs (−.5, −1), (.5, 1), (1, .5), (−1, .5); x̄ = 0, ȳ = 0.25; Σdx·dy = 1,
    Σdx² = 2.5, Σdy² = 2.25: r = 1/√5.625 = 0.4216."""
    xs = [-1, -0.5, 0.5, 1]
    b = beliefs_frame({0: xs, 1: xs})
    follows = pd.DataFrame([
        (0, "twitter", 0, 1, "init"), (0, "twitter", 1, 0, "init"),
        (0, "twitter", 2, 3, "init"), (0, "reddit", 2, 3, "init"),
        (0, "twitter", 3, 2, "init"),
        (1, "twitter", 0, 1, "unfollow"), (1, "twitter", 0, 2, "follow"),
    ], columns=["round", "platform", "follower", "followee", "op"])
    out = metrics.follower_followee_correlation(b, follows)
    assert out["n_edges"].tolist() == [4, 4]
    assert out["correlation"].tolist() == [pytest.approx(0.8),
                                           pytest.approx(1 / math.sqrt(5.625))]
    edges = metrics.follow_edges(follows, 1, "twitter")
    assert sorted(zip(edges["follower"], edges["followee"], strict=True)) == [
        (0, 2), (1, 0), (2, 3), (3, 2)]
    reddit = metrics.follower_followee_correlation(b, follows, rounds=[0], platform="reddit")
    assert reddit["n_edges"].tolist() == [1] and math.isnan(reddit["correlation"].iloc[0])


def test_like_minded_share_uses_positions_before_the_round():
    """Agent 0 (−0.5) sees in round 1: post 0 by agent 1 (−0.2 at round 0), post 1 by
    agent 2 (0.4), post 2 by the news account (left out). Same sign: 1 of 2. Threshold
    0.5: |−0.5 + 0.2| = 0.3 yes, 0.9 no: 1/2; threshold 1: 2/2. Agent 1 flips to +0.9 at
    the end of round 1, which the round-1 exposures must not see."""
    b = beliefs_frame({0: [-0.5, -0.2, 0.4], 1: [-0.5, 0.9, 0.4]})
    posts = pd.DataFrame({"post_id": [0, 1, 2], "author": [1, 2, -1]})
    exposures = pd.DataFrame({"round": [1, 1, 1], "platform": "twitter", "agent": [0, 0, 0],
                              "post_id": [0, 1, 2], "rank": [0, 1, 2]})
    same = metrics.like_minded_share(exposures, posts, b)
    assert same[["round", "topic", "n", "like_minded"]].values.tolist() == [[1, "t", 2, 1]]
    assert same["share"].iloc[0] == 0.5
    assert metrics.like_minded_share(exposures, posts, b, threshold=0.5)["share"].iloc[0] \
        == 0.5
    assert metrics.like_minded_share(exposures, posts, b, threshold=1.0,
                                     by=("agent",))["share"].tolist() == [1.0]


# ---------------------------------------------------------------------- cascades


def test_cascade_metrics_of_a_known_tree():
    """The tree of `tree_posts`: n = 7; depths 0,1,1,1,2,2,3: depth 3, breadth per level
    1, 3, 2, 1: max breadth 3; users {10, 11, 12, 13, 14} = 5. Subtree sizes below each
    edge: 1 (post 1), 4 (post 2), 1 (3), 2 (4), 1 (5), 1 (6); Wiener index
    Σ s(n − s) = 6 + 12 + 6 + 10 + 6 + 6 = 46 over C(7, 2) = 21 pairs: ν = 46/21.
    Post 7 alone: size 1, depth 0, breadth 1, ν undefined. Post 8 hangs from a post that
    is not there: no cascade."""
    out = metrics.cascades(tree_posts()).set_index("root_id")
    assert out.index.tolist() == [0, 7]
    big = out.loc[0]
    assert (big["size"], big["users"], big["depth"], big["max_breadth"], big["last_round"]) \
        == (7, 5, 3, 3, 4)
    assert big["structural_virality"] == pytest.approx(46 / 21)
    assert (out.loc[7, "size"], out.loc[7, "depth"], out.loc[7, "max_breadth"]) == (1, 0, 1)
    assert math.isnan(out.loc[7, "structural_virality"])
    tree = metrics.cascade_tree(tree_posts(), 0)
    assert nx.average_shortest_path_length(tree.to_undirected()) == pytest.approx(46 / 21)
    assert sorted(tree.edges) == [(0, 1), (0, 2), (0, 3), (2, 4), (2, 5), (4, 6)]
    assert len(metrics.cascades(tree_posts(), min_size=2)) == 1


def test_star_chain_and_kind_filter():
    """A star of 3 reposts: W = 3·(1·3) = 9 over 6 pairs: ν = 1.5. A chain of 4: W =
    1·3 + 2·2 + 3·1 = 10 over 6: ν = 5/3. Reposts only in the known tree: root + post 1
    (post 6, a quote below a reply, goes with its parent): size 2, ν = 1."""
    star = pd.DataFrame({"post_id": [0, 1, 2, 3], "kind": ["post"] + ["repost"] * 3,
                         "author": [0, 1, 2, 3], "round": [1, 2, 2, 2],
                         "parent_id": pd.array([None, 0, 0, 0], dtype="Int64"),
                         "root_id": [0, 0, 0, 0], "platform": "twitter"})
    assert metrics.cascades(star)["structural_virality"].iloc[0] == pytest.approx(1.5)
    chain = star.assign(kind=["post", "reply", "reply", "reply"],
                        parent_id=pd.array([None, 0, 1, 2], dtype="Int64"))
    row = metrics.cascades(chain).iloc[0]
    assert (row["depth"], row["max_breadth"]) == (3, 1)
    assert row["structural_virality"] == pytest.approx(5 / 3)
    reposts = metrics.cascades(tree_posts(), kinds=["repost"]).set_index("root_id")
    assert (reposts.loc[0, "size"], reposts.loc[0, "depth"]) == (2, 1)
    assert reposts.loc[0, "structural_virality"] == pytest.approx(1.0)


def test_cascade_growth_counts_nodes_by_round():
    """Root 0: 1 node in round 1, +3 in round 2, +2 in round 3, +1 in round 4."""
    growth = metrics.cascade_growth(tree_posts(), top=1)
    assert growth[["round", "size"]].values.tolist() == [[1, 1], [2, 4], [3, 6], [4, 7]]
    assert metrics.cascade_growth(tree_posts(), roots=[7])["size"].tolist() == [1]


# ---------------------------------------------------------------------- herd effect


def test_herd_effect_by_arm_with_t_intervals():
    """Scores up − down: up arm 3 and 5 (mean 4, sd √2, t(0.975, 1) = 12.7062 so the
    interval is 4 ± 12.7062), control 1, down −2 and −2 (sd 0: a zero-width interval)."""
    posts = pd.DataFrame({"post_id": [1, 2, 3, 4, 5, 6], "seed_up": [1, 1, 0, 0, 0, 0],
                          "seed_down": [0, 0, 0, 1, 1, 0], "up": [4, 6, 1, 0, 1, 9],
                          "down": [1, 1, 0, 2, 3, 0]})
    out = metrics.herd_effect(posts, post_ids=[1, 2, 3, 4, 5]).set_index("arm")
    assert out.index.tolist() == ["up", "control", "down"]
    assert out["n"].tolist() == [2, 1, 2]
    assert out["mean_score"].tolist() == [4.0, 1.0, -2.0]
    assert out.loc["up", "ci_low"] == pytest.approx(4 - 12.7062047, abs=1e-6)
    assert out.loc["up", "ci_high"] == pytest.approx(4 + 12.7062047, abs=1e-6)
    assert math.isnan(out.loc["control", "ci_low"])
    assert out.loc["down", "ci_low"] == out.loc["down", "ci_high"] == -2
    assert metrics.herd_effect(posts, post_ids=[]).empty


def test_student_t_quantiles_match_tables():
    """t(0.975) for 1, 4, 30 df and the normal limit, from standard tables."""
    for df, value in ((1, 12.7062047), (4, 2.7764451), (30, 2.0422725), (1e7, 1.9599640)):
        assert metrics.student_t_quantile(0.975, df) == pytest.approx(value, abs=1e-6)
    assert metrics.student_t_quantile(0.025, 4) == pytest.approx(-2.7764451, abs=1e-6)
    assert metrics.student_t_quantile(0.5, 3) == pytest.approx(0, abs=1e-9)


# ---------------------------------------------------------------------- engagement


def test_gini_by_hand():
    """[0, 0, 0, 1]: Σ(2i − n − 1)x_(i)/(n Σx) = 3/4. [1, 2, 3, 4]: (−3 − 2 + 3 + 12)/40
    = 1/4 (= Σ|x_i − x_j| / (2n²μ) = 20/80). Equal values: 0."""
    assert metrics.gini([0, 0, 0, 1]) == 0.75
    assert metrics.gini([4, 3, 2, 1]) == pytest.approx(0.25)
    assert metrics.gini([2, 2, 2]) == 0
    assert math.isnan(metrics.gini([])) and math.isnan(metrics.gini([0, 0]))
    with pytest.raises(ValueError):
        metrics.gini([-1, 2])


def test_engagement_received_counts_agents_with_none():
    """Agent 0's posts got 3 + 1 upvotes (post 1's second one was seeded, not counted),
    1 downvote, 2 shares, 1 reply: 8; agent 1: 1 like; agent 2 never posted: 0; the news
    account's post is left out. Gini of [0, 1, 8]: (−2·0 + 0·1 + 2·8)/(3·9) = 16/27."""
    posts = pd.DataFrame({"post_id": [0, 1, 2, 3], "author": [0, 0, 1, -1],
                          "up": [3, 2, 1, 50], "down": [1, 0, 0, 0], "shares": [2, 0, 0, 9],
                          "replies": [0, 1, 0, 4], "seed_up": [0, 1, 0, 0],
                          "seed_down": [0, 0, 0, 0]})
    out = metrics.engagement_received(posts, agents=[0, 1, 2])
    assert out["agent"].tolist() == [0, 1, 2]
    assert out["engagement"].tolist() == [8, 1, 0]
    assert out[["up", "down", "shares", "replies"]].iloc[0].tolist() == [4, 1, 2, 1]
    assert out["posts"].tolist() == [2, 1, 0]
    assert metrics.engagement_gini(posts, [0, 1, 2]) == pytest.approx(16 / 27)


# ---------------------------------------------------------------------- several runs


def test_frames_with_a_run_column_are_computed_per_run():
    """Two runs in one frame: each run's statistics, with the run column first; mixing
    frames with and without it is an error."""
    a = beliefs_frame({0: [-1, 1]}).assign(run="A")
    b = beliefs_frame({0: [0, 0.5]}).assign(run="B")
    stats = metrics.belief_stats(pd.concat([a, b], ignore_index=True))
    assert stats.columns[0] == "run"
    assert stats[["run", "mean"]].values.tolist() == [["A", 0.0], ["B", 0.25]]
    with pytest.raises(ValueError, match="some frames have a 'run' column"):
        metrics.like_minded_share(pd.DataFrame({"run": [], "round": [], "agent": [],
                                                "post_id": []}),
                                  pd.DataFrame({"post_id": [], "author": []}), a)

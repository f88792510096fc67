"""Standard metrics of a run, as plain functions on the DataFrames of `shoal.analysis`.

Every function takes frames with the columns of the analysis API (`run.beliefs`,
`run.posts`, `run.follows`, `run.exposures`; see docs/analysis.md) and returns a DataFrame
(or a number). Frames from `open_runs` carry a `run` column; the functions that take frames
then compute per run and return a `run` column first. Each docstring gives the formula and
its source.

Conventions: positions are in [-1, 1]; variances and standard deviations are population
ones (ddof = 0) unless said otherwise; a statistic that is undefined for a group (too few
values, zero spread) is NaN, never an error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from functools import wraps
from typing import Any

import networkx as nx
import numpy as np
import pandas as pd

from shoal.store.schema import TEXT as TEXT  # (the text dtype, for the analyses)

ArrayLike = np.ndarray | pd.Series | list[float]

UP_ACTIONS = ("like", "upvote")
DOWN_ACTIONS = ("downvote",)
REPLY_ACTIONS = ("reply", "comment")
SHARE_KINDS = ("repost", "quote")  # a post of these kinds shares its parent


# ------------------------------------------------------------------- several runs


def per_run(func: Callable[..., pd.DataFrame]) -> Callable[..., pd.DataFrame]:
    """Apply `func` to each run separately when its first frame has a `run` column (frames
    from `open_runs`), and concatenate the results with `run` as their first column. Every
    other frame argument must then have a `run` column too."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> pd.DataFrame:
        frames = [a for a in (*args, *kwargs.values()) if isinstance(a, pd.DataFrame)]
        if not frames or "run" not in frames[0].columns:
            return func(*args, **kwargs)
        if any("run" not in f.columns for f in frames):
            raise ValueError(f"{func.__name__}: some frames have a 'run' column and some "
                             "do not; pass frames of the same runs")
        results = []
        for run in pd.unique(frames[0]["run"]):
            one = func(*[_only(a, run) for a in args],
                       **{k: _only(v, run) for k, v in kwargs.items()})
            results.append(one.assign(run=run)[["run", *one.columns]])
        return pd.concat(results, ignore_index=True)

    return wrapper


def _only(value: Any, run: Hashable) -> Any:
    """A frame's rows of one run (without the run column); anything else unchanged."""
    if isinstance(value, pd.DataFrame) and "run" in value.columns:
        return value[value["run"] == run].drop(columns="run").reset_index(drop=True)
    return value


# ------------------------------------------------------------------- beliefs


@per_run
def belief_stats(beliefs: pd.DataFrame) -> pd.DataFrame:
    """Per round and topic: the number of agents `n`, the mean position
    μ = (1/n) Σ x_i, the population variance σ² = (1/n) Σ (x_i − μ)² and σ.

    Columns: round, topic, n, mean, var, sd."""
    grouped = beliefs.groupby(["round", "topic"], sort=True)["position"]
    out = pd.DataFrame({"n": grouped.size(), "mean": grouped.mean(),
                        "var": grouped.var(ddof=0)})
    out["sd"] = np.sqrt(out["var"])
    return out.reset_index()


# ------------------------------------------------------------------- polarization


def bimodality_coefficient(x: ArrayLike) -> float:
    """Sarle's bimodality coefficient with its finite-sample correction:

        BC = (G1² + 1) / (G2 + 3 (n−1)² / ((n−2)(n−3)))

    where G1 is the sample skewness and G2 the sample excess kurtosis, both with the usual
    bias adjustment (SAS PROC UNIVARIATE; pandas `skew`, `kurt`):
    G1 = g1 √(n(n−1)) / (n−2), G2 = (n−1) ((n+1) g2 + 6) / ((n−2)(n−3)), with
    g1 = m3 / m2^{3/2}, g2 = m4 / m2² − 3 and m_k the k-th central sample moment.

    BC lies in (0, 1]. The uniform distribution has BC = 5/9 in the limit; values above 5/9
    suggest bimodality (a normal has 1/3, two equal point masses 1). Undefined (NaN) for
    n < 4 or no spread, a spread within rounding of the values included (`_no_spread`: a
    consensus reached by averaging differs by a few units in the last place, and its
    moments are the rounding's: 1.83 for one agent a unit above 49 others). Sources: SAS
    Institute, SAS/STAT User's Guide, PROC CLUSTER (Sarle); Pfister, Schwarz, Janczyk,
    Dale & Freeman (2013), "Good things peak in pairs: a note on the bimodality
    coefficient", Frontiers in Psychology 4:700."""
    v = np.asarray(x, dtype=float)
    v = v[~np.isnan(v)]
    n = v.size
    if n < 4 or _no_spread(v):
        return math.nan
    d = v - v.mean()
    m2, m3, m4 = (d**2).mean(), (d**3).mean(), (d**4).mean()
    g1, g2 = m3 / m2**1.5, m4 / m2**2 - 3.0
    skew = g1 * math.sqrt(n * (n - 1)) / (n - 2)
    kurt = (n - 1) * ((n + 1) * g2 + 6) / ((n - 2) * (n - 3))
    return float((skew**2 + 1) / (kurt + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3))))


# A spread this small relative to the values' magnitude is rounding, not a difference
# (the allowance beliefs/rules/config.py gives the rules' bounds).
SPREAD_TOLERANCE = 1e-12


def _no_spread(v: np.ndarray) -> bool:
    """Whether the values (NaN-free, at least one) have no spread beyond rounding:
    max − min ≤ SPREAD_TOLERANCE · max |x|. The central moments of values equal up to a few
    units in the last place are the rounding of `x − mean`, not a shape."""
    return bool(np.ptp(v) <= SPREAD_TOLERANCE * np.abs(v).max())


def esteban_ray(x: ArrayLike, alpha: float = 1.6, bins: int = 5,
                value_range: tuple[float, float] = (-1.0, 1.0), k: float = 1.0) -> float:
    """Esteban–Ray polarization of positions, on a binned distribution:

        P = K Σ_i Σ_j π_i^{1+α} π_j |y_i − y_j|

    The positions are put into `bins` equal-width bins over `value_range` (values outside
    go to the end bins); each non-empty bin i is a group with population share π_i and
    representative position y_i, the mean position of its members (so a distribution
    concentrated on a few points gives its exact value). α ∈ (0, α*], α* ≈ 1.6, sets the
    weight of group identification: α = 0 gives the Gini mean difference (Σ π_i π_j
    |y_i − y_j|); the default 1.6 is the most polarization-sensitive value the axioms
    allow. K = 1 by default; then two equal camps at distance d give P = d·2^{−1−α} (for
    α = 1.6 and camps at ±1: 0.33, the maximum over [−1, 1]), and one camp gives 0.
    The value depends on the binning: with many narrow bins a continuous distribution
    tends to 0 (each bin's share vanishes), so keep the bins few and meaningful; the
    default, 5 bins of width 0.4 on [−1, 1], reads positions as a five-point scale
    (strongly against … strongly for); a uniform distribution then gives 0.049.
    Source: Esteban & Ray (1994), "On the measurement of polarization", Econometrica
    62(4):819–851."""
    v = np.asarray(x, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return math.nan
    lo, hi = value_range
    idx = np.clip(((v - lo) / (hi - lo) * bins).astype(int), 0, bins - 1)
    counts = np.bincount(idx, minlength=bins)
    sums = np.bincount(idx, weights=v, minlength=bins)
    return esteban_ray_binned(counts, sums, alpha, k)


def esteban_ray_binned(counts: ArrayLike, sums: ArrayLike, alpha: float = 1.6,
                       k: float = 1.0) -> float:
    """`esteban_ray` from the bins already counted: each bin's number of positions and
    their sum (what a database can aggregate without shipping the positions)."""
    c, s = np.asarray(counts, dtype=float), np.asarray(sums, dtype=float)
    full = c > 0
    if not full.any():
        return math.nan
    share, y = c[full] / c.sum(), s[full] / c[full]
    distance = np.abs(y[:, None] - y[None, :])
    return float(k * np.sum(share[:, None] ** (1 + alpha) * share[None, :] * distance))


@per_run
def group_mean_distance(beliefs: pd.DataFrame,
                        groups: str | Mapping[int, Hashable] | pd.Series | None = None,
                        ) -> pd.DataFrame:
    """Per round and topic, the distance between the mean positions of two groups:
    |μ_a − μ_b|, μ_g the mean position of group g's agents.

    `groups`: None (default) splits by the sign of the position at that round (negative:
    group a, positive: group b; exact zeros belong to neither); a column name of `beliefs`
    (e.g. `group_name` after merging `agents`), or a mapping agent → label. With a column
    or a mapping there must be exactly two labels, taken in sorted order as a and b.
    Source: the difference-of-means polarization measure, e.g. DiMaggio, Evans & Bryson
    (1996), American Journal of Sociology 102(3); Bramson et al. (2017), "Understanding
    polarization", Philosophy of Science 84(1) ("group divergence").

    Columns: round, topic, group_a, group_b, n_a, n_b, mean_a, mean_b, distance."""
    b = beliefs[["round", "agent", "topic", "position"]].copy()
    if groups is None:
        b["group"] = np.where(b["position"] < 0, "negative",
                              np.where(b["position"] > 0, "positive", None))
        labels = ["negative", "positive"]
    else:
        if isinstance(groups, str):
            b["group"] = beliefs[groups].to_numpy()
        else:
            b["group"] = b["agent"].map(pd.Series(groups) if isinstance(groups, Mapping)
                                        else groups)
        labels = sorted(b["group"].dropna().unique().tolist())
        if len(labels) != 2:
            raise ValueError(f"group_mean_distance needs exactly two groups, got {labels}")
    b = b.dropna(subset=["group"])
    stats = b.groupby(["round", "topic", "group"])["position"].agg(["size", "mean"])
    stats = stats.reset_index()
    out = beliefs[["round", "topic"]].drop_duplicates().sort_values(["round", "topic"])
    for side, label in (("a", labels[0]), ("b", labels[1])):
        one = stats[stats["group"] == label].drop(columns="group")
        out = out.merge(one.rename(columns={"size": f"n_{side}", "mean": f"mean_{side}"}),
                        on=["round", "topic"], how="left")
        out[f"n_{side}"] = out[f"n_{side}"].fillna(0).astype(int)
    out["group_a"], out["group_b"] = labels
    out["distance"] = (out["mean_a"] - out["mean_b"]).abs()
    return out[["round", "topic", "group_a", "group_b", "n_a", "n_b", "mean_a", "mean_b",
                "distance"]].reset_index(drop=True)


@per_run
def polarization(beliefs: pd.DataFrame, alpha: float = 1.6, bins: int = 5) -> pd.DataFrame:
    """Per round and topic: n, mean, sd (population), the bimodality coefficient
    (`bimodality_coefficient`), Esteban–Ray polarization (`esteban_ray` with `alpha` and
    `bins`) and the distance between the means of the agents against and for
    (`group_mean_distance` by sign).

    Columns: round, topic, n, mean, sd, bimodality, esteban_ray, group_distance."""
    grouped = beliefs.groupby(["round", "topic"], sort=True)["position"]
    out = pd.DataFrame({
        "n": grouped.size(), "mean": grouped.mean(), "sd": grouped.std(ddof=0),
        "bimodality": grouped.apply(bimodality_coefficient),
        "esteban_ray": grouped.apply(lambda x: esteban_ray(x, alpha=alpha, bins=bins)),
    }).reset_index()
    distance = group_mean_distance(beliefs)[["round", "topic", "distance"]]
    return out.merge(distance.rename(columns={"distance": "group_distance"}),
                     on=["round", "topic"], how="left")


# ------------------------------------------------------------------- echo chambers


def follow_edges(follows: pd.DataFrame, at_round: int,
                 platform: str | None = None) -> pd.DataFrame:
    """The follow graph at the end of `at_round`, rebuilt from the `follows` log: an edge
    (platform, follower, followee) exists if its `init` and `follow` rows up to that round
    outnumber its `unfollow` rows (ops on one pair alternate, so the net count is 0 or 1).

    Columns: platform, follower, followee (one platform if `platform` is given)."""
    f = follows[follows["round"] <= at_round]
    if platform is not None:
        f = f[f["platform"] == platform]
    sign = np.where(f["op"].astype(str) == "unfollow", -1, 1)
    net = f.assign(net=sign).groupby(["platform", "follower", "followee"], sort=True,
                                     observed=True)["net"].sum()
    return net[net > 0].reset_index()[["platform", "follower", "followee"]]


def _position_cube(beliefs: pd.DataFrame, n_agents: int = 0
                   ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Positions as an array cube[round index, agent, topic] (NaN where an agent has no
    row), with its rounds (sorted) and topics (sorted). It holds one float per beliefs row
    at most (agents are dense ids), so it is never larger than the frame it comes from."""
    rounds = np.sort(beliefs["round"].unique())
    codes, topics = pd.factorize(beliefs["topic"], sort=True)
    agents = beliefs["agent"].to_numpy(np.int64)
    size = max(n_agents, int(agents.max(initial=-1)) + 1)
    cube = np.full((rounds.size, size, len(topics)), np.nan)
    cube[np.searchsorted(rounds, beliefs["round"].to_numpy()), agents, codes] = \
        beliefs["position"].to_numpy(float)
    return cube, rounds, [str(t) for t in topics]


@per_run
def follower_followee_correlation(beliefs: pd.DataFrame, follows: pd.DataFrame,
                                  rounds: Iterable[int] | None = None,
                                  platform: str | None = None) -> pd.DataFrame:
    """Stance correlation along follow edges: per round r and topic, Pearson's r between
    the follower's and the followee's positions at r over the edges of the follow graph at
    the end of r (`follow_edges`; a pair that follows on both platforms counts once unless
    `platform` picks one). r near 1: people follow the like-minded (an echo chamber);
    near 0: follows ignore stance. Source: Cinelli, De Francisci Morales, Galeazzi,
    Quattrociocchi & Starnini (2021), "The echo chamber effect on social media", PNAS
    118(9) (the follower–followee leaning correlation).

    `rounds`: default every round of `beliefs` (others are skipped). Columns: round,
    topic, n_edges (edges with both positions known), correlation."""
    f = follows if platform is None else follows[follows["platform"] == platform]
    f = f.sort_values("round", kind="stable")
    follower = f["follower"].to_numpy(np.int64)
    followee = f["followee"].to_numpy(np.int64)
    n = int(max(follower.max(initial=-1), followee.max(initial=-1),
                beliefs["agent"].max() if len(beliefs) else -1)) + 1
    cube, have, topics = _position_cube(beliefs, n)
    wanted = have if rounds is None else np.intersect1d(have, np.fromiter(rounds, np.int64))
    # The graph is replayed once, round by round: net count of each (platform, pair).
    plat = pd.factorize(f["platform"])[0].astype(np.int64)
    keys, inverse = np.unique((plat * n + follower) * n + followee, return_inverse=True)
    sign = np.where(f["op"].astype(str).to_numpy() == "unfollow", -1, 1)
    op_round = f["round"].to_numpy()
    net = np.zeros(keys.size, np.int64)
    done = 0
    rows = []
    for r in wanted:
        upto = int(np.searchsorted(op_round, r, side="right"))
        np.add.at(net, inverse[done:upto], sign[done:upto])
        done = upto
        pairs = np.unique(keys[net > 0] % (n * n))  # one edge per pair, any platform
        at = cube[int(np.searchsorted(have, r))]
        x, y = at[pairs // n], at[pairs % n]
        for t, topic in enumerate(topics):
            known = ~np.isnan(x[:, t]) & ~np.isnan(y[:, t])
            rows.append({"round": int(r), "topic": topic, "n_edges": int(known.sum()),
                         "correlation": _pearson(x[known, t], y[known, t])})
    out = pd.DataFrame(rows, columns=["round", "topic", "n_edges", "correlation"])
    return out.astype({"round": np.int64, "topic": TEXT, "n_edges": np.int64,
                       "correlation": float})


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r; NaN with fewer than two pairs or no spread (beyond rounding:
    `_no_spread`) on either side."""
    if x.size < 2 or _no_spread(x) or _no_spread(y):
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


@per_run
def like_minded_share(exposures: pd.DataFrame, posts: pd.DataFrame, beliefs: pd.DataFrame,
                      threshold: float | None = None,
                      by: tuple[str, ...] = ("round", "topic")) -> pd.DataFrame:
    """The share of feed items whose author is like-minded with the reader. An exposure
    (agent a sees in round r a post by author u) is like-minded on a topic if their
    positions x at the end of round r−1 (what both held when the feed was built: rounds
    are snapshots) have the same sign (x_a·x_u > 0, the default), or are closer than
    `threshold` (|x_a − x_u| < threshold). Posts of the news account (author −1) are left
    out. Share = like-minded exposures / exposures, per `by` (any of round, agent, topic,
    platform). Source: the exposure-homophily measure of Bakshy, Messing & Adamic (2015),
    "Exposure to ideologically diverse news and opinion on Facebook", Science 348(6239).

    Columns: *by, n (exposures), like_minded, share."""
    author = exposures["post_id"].map(posts.set_index("post_id")["author"])
    e = exposures.assign(author=author.fillna(-1).to_numpy(np.int64))
    e = e[e["author"] >= 0]
    n = int(max(e["author"].max() if len(e) else -1, e["agent"].max() if len(e) else -1)) + 1
    cube, have, topics = _position_cube(beliefs, n)
    before = e["round"].to_numpy() - 1  # positions at r−1 for an exposure in round r
    idx = np.searchsorted(have, before)
    found = idx < have.size
    found[found] = have[idx[found]] == before[found]
    e, idx = e[found], idx[found]
    x = cube[idx, e["agent"].to_numpy(np.int64)]  # (exposures, topics)
    y = cube[idx, e["author"].to_numpy(np.int64)]
    like = (x * y > 0) if threshold is None else (np.abs(x - y) < threshold)
    known = ~np.isnan(x) & ~np.isnan(y)
    keys = [c for c in by if c != "topic"]
    long = pd.concat([e[keys].assign(topic=topic, like=like[:, t])[known[:, t]]
                      for t, topic in enumerate(topics)]
                     or [pd.DataFrame(columns=[*keys, "topic", "like"])], ignore_index=True)
    grouped = long.groupby(list(by), sort=True, observed=True)["like"]
    out = pd.DataFrame({"n": grouped.size(), "like_minded": grouped.sum()}).reset_index()
    out["like_minded"] = out["like_minded"].astype(np.int64)
    out["share"] = out["like_minded"] / out["n"]
    return out


# ------------------------------------------------------------------- cascades


def _tree_arrays(posts: pd.DataFrame, kinds: Iterable[str] | None) -> pd.DataFrame:
    """Posts as tree nodes: id, parent position, depth, subtree size, root id. A node is
    dropped if its parent is not there (or, with `kinds`, is not of those kinds), with its
    whole subtree, so every kept node hangs from its root."""
    p = posts[["post_id", "platform", "round", "author", "kind", "parent_id", "root_id"]]
    p = p.sort_values("post_id").reset_index(drop=True)
    ids = p["post_id"].to_numpy(np.int64)
    parent_id = p["parent_id"].astype("Float64").fillna(-1).to_numpy(np.int64)
    is_root = p["root_id"].to_numpy(np.int64) == ids
    keep = is_root | (True if kinds is None else p["kind"].astype(str).isin(list(kinds))
                      .to_numpy())
    pos = np.searchsorted(ids, parent_id)
    pos = np.where((parent_id >= 0) & (pos < ids.size), pos, 0)
    has_parent = (parent_id >= 0) & (ids[pos] == parent_id)
    keep &= is_root | has_parent
    parent = np.where(is_root | ~has_parent, -1, pos)
    # A parent is older than its child (smaller id), so one sweep per tree level settles
    # both which nodes hang from a kept root and their depths.
    depth = np.zeros(ids.size, np.int64)
    for _ in range(ids.size + 1):
        linked = parent >= 0
        new_keep = is_root | (keep & linked & keep[np.maximum(parent, 0)])
        new_depth = np.where(linked, depth[np.maximum(parent, 0)] + 1, 0)
        if np.array_equal(new_keep, keep) and np.array_equal(new_depth, depth):
            break
        keep, depth = new_keep, new_depth
    size = np.ones(ids.size, np.int64)
    for d in range(int(depth[keep].max(initial=0)), 0, -1):
        at = keep & (depth == d)
        np.add.at(size, parent[at], size[at])
    parent_post = np.where(parent >= 0, ids[np.maximum(parent, 0)], -1)
    return p.assign(parent=parent, parent_post=parent_post, depth=depth, subtree=size)[keep]


@per_run
def cascades(posts: pd.DataFrame, kinds: Iterable[str] | None = None,
             min_size: int = 1) -> pd.DataFrame:
    """One row per root post (a post or event, `root_id == post_id`) with its cascade: the
    tree of posts below it through `parent_id` (reposts and quotes of it, replies and
    comments to it, and recursively), restricted to posts of `kinds` if given (e.g.
    `["repost"]` for the repost cascades OASIS measures). For a tree T of n nodes:

    - size = n (the root included); users = distinct authors in T (OASIS "scale");
    - depth = max over nodes of the root-to-node distance;
    - max_breadth = max over depths d of the number of nodes at depth d;
    - structural_virality ν(T) = (1 / (n(n−1))) Σ_{i≠j} d_ij, the mean shortest-path
      distance over all pairs of nodes of the undirected tree (NaN for n = 1), computed
      as the Wiener index W = Σ_edges s_e (n − s_e) over C(n, 2) pairs, s_e the node count
      below edge e. A star (broadcast) has ν → 2, a chain (person to person) ν ≈ n/3.

    Sources: Goel, Anderson, Hofman & Watts (2016), "The structural virality of online
    diffusion", Management Science 62(1):180–196; Wiener (1947), J. Am. Chem. Soc. 69(1);
    OASIS (Yang et al. 2024, arXiv:2411.11581) for scale, depth and max breadth.

    Columns: root_id, platform, round, author, kind, size, users, depth, max_breadth,
    structural_virality, last_round; sorted by size (largest first), then root_id."""
    t = _tree_arrays(posts, kinds)
    grouped = t.groupby("root_id", sort=True)
    roots = t[t["parent"] < 0].set_index("root_id")
    edges = t[t["parent"] >= 0]
    n = grouped.size()
    breadth = t.groupby(["root_id", "depth"]).size().groupby("root_id").max()
    pairs = n * (n - 1) / 2
    below = edges["subtree"].to_numpy(float)
    wiener = (pd.Series(below * (n.reindex(edges["root_id"]).to_numpy() - below),
                        index=edges["root_id"].to_numpy()).groupby(level=0).sum()
              .reindex(n.index, fill_value=0.0))
    out = pd.DataFrame({
        "platform": roots["platform"], "round": roots["round"], "author": roots["author"],
        "kind": roots["kind"], "size": n, "users": grouped["author"].nunique(),
        "depth": grouped["depth"].max(), "max_breadth": breadth,
        "structural_virality": (wiener / pairs).where(n > 1),
        "last_round": grouped["round"].max(),
    }).rename_axis("root_id").reset_index()
    out = out[out["size"] >= min_size]
    return out.sort_values(["size", "root_id"], ascending=[False, True],
                           ignore_index=True)


@per_run
def cascade_growth(posts: pd.DataFrame, roots: Iterable[int] | None = None, top: int = 5,
                   kinds: Iterable[str] | None = None) -> pd.DataFrame:
    """The size of cascades over rounds: per root and round r (from the root's round to
    the last round of `posts`), the number of nodes of its tree (`cascades`) created in
    rounds ≤ r. `roots`: the root post ids; default the `top` largest cascades.

    Columns: root_id, round, size."""
    t = _tree_arrays(posts, kinds)
    if roots is None:
        roots = cascades(posts, kinds).head(top)["root_id"].tolist()
    roots = list(roots)
    last = int(posts["round"].max()) if len(posts) else 0
    frames = []
    for root in roots:
        nodes = t[t["root_id"] == root]
        if nodes.empty:
            continue
        start = int(nodes["round"].min())
        counts = nodes.groupby("round").size().reindex(range(start, last + 1), fill_value=0)
        frames.append(pd.DataFrame({"root_id": root, "round": counts.index,
                                    "size": counts.cumsum().to_numpy()}))
    if not frames:
        return pd.DataFrame({"root_id": pd.Series(dtype=np.int64),
                             "round": pd.Series(dtype=np.int64),
                             "size": pd.Series(dtype=np.int64)})
    return pd.concat(frames, ignore_index=True)


def cascade_tree(posts: pd.DataFrame, root_id: int,
                 kinds: Iterable[str] | None = None) -> nx.DiGraph:
    """The cascade of one root as a networkx DiGraph (edges parent → child; node
    attributes author, kind, round, depth), e.g. to draw it or to check a metric."""
    t = _tree_arrays(posts, kinds)
    t = t[t["root_id"] == root_id]
    g = nx.DiGraph()
    for row in t.itertuples(index=False):
        g.add_node(int(row.post_id), author=int(row.author), kind=str(row.kind),
                   round=int(row.round), depth=int(row.depth))
        if row.parent_post >= 0:
            g.add_edge(int(row.parent_post), int(row.post_id))
    return g


# ------------------------------------------------------------------- herd effect


def initial_vote_arm(posts: pd.DataFrame) -> pd.Series:
    """Each post's treatment arm from its seeded votes: 'up' if seed_up > seed_down,
    'down' if seed_down > seed_up, 'control' otherwise."""
    up, down = posts["seed_up"].to_numpy(), posts["seed_down"].to_numpy()
    return pd.Series(np.where(up > down, "up", np.where(down > up, "down", "control")),
                     index=posts.index, name="arm")


@per_run
def herd_effect(posts: pd.DataFrame, post_ids: Iterable[int] | None = None,
                confidence: float = 0.95) -> pd.DataFrame:
    """The herd effect: final score S = up − down (seeded votes included, as in
    `post_stats`) of posts by initial-vote arm (`initial_vote_arm`), with the mean and its
    Student-t interval mean ± t_{(1+c)/2, n−1} · sd/√n (sd with ddof = 1). `post_ids`:
    the posts compared (default: all of `posts`; `Run.herd_effect` takes the posts
    injected by interventions). Sources: Muchnik, Aral & Taylor (2013), "Social influence
    bias: a randomized experiment", Science 341(6146):647–651; OASIS (Yang et al. 2024),
    §herd effect, which reports the same score by arm with a 95% t-interval.

    Columns: arm (up, control, down; those present), n, mean_score, sd, ci_low, ci_high."""
    p = posts if post_ids is None else posts[posts["post_id"].isin(list(post_ids))]
    scored = pd.DataFrame({"arm": initial_vote_arm(p), "score": p["up"] - p["down"]})
    rows = []
    for arm in ("up", "control", "down"):
        s = scored.loc[scored["arm"] == arm, "score"].to_numpy(float)
        if s.size == 0:
            continue
        low, high = t_interval(s, confidence)
        rows.append({"arm": arm, "n": s.size, "mean_score": s.mean(),
                     "sd": s.std(ddof=1) if s.size > 1 else math.nan,
                     "ci_low": low, "ci_high": high})
    out = pd.DataFrame(rows, columns=["arm", "n", "mean_score", "sd", "ci_low", "ci_high"])
    return out.astype({"arm": TEXT, "n": np.int64, "mean_score": float, "sd": float,
                       "ci_low": float, "ci_high": float})


def t_interval(values: ArrayLike, confidence: float = 0.95) -> tuple[float, float]:
    """The Student-t confidence interval of a mean: x̄ ± t_{(1+c)/2, n−1} · s/√n, s the
    sample standard deviation (ddof = 1). (NaN, NaN) for fewer than two values."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size < 2:
        return math.nan, math.nan
    half = student_t_quantile((1 + confidence) / 2, v.size - 1) * v.std(ddof=1) \
        / math.sqrt(v.size)
    return float(v.mean() - half), float(v.mean() + half)


def student_t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (no SciPy needed): the
    CDF F(t) = 1 − I_{df/(df+t²)}(df/2, 1/2)/2 for t ≥ 0 (I the regularized incomplete
    beta function, by its continued fraction; Press et al., Numerical Recipes, §6.4),
    inverted by bisection to 1e-12."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -student_t_quantile(1 - p, df)

    def cdf(t: float) -> float:
        return 1 - 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (Numerical Recipes betai)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1 - front * _betacf(b, a, 1 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                    -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


# ------------------------------------------------------------------- engagement


def gini(values: ArrayLike) -> float:
    """The Gini coefficient of non-negative values:

        G = Σ_i Σ_j |x_i − x_j| / (2 n² μ) = Σ_i (2i − n − 1) x_(i) / (n Σ x)

    with x_(1) ≤ … ≤ x_(n) sorted (the population form, without the n/(n−1) correction).
    0: all equal; (n−1)/n: one holds everything (Gini of [0, 0, 0, 1] = 0.75). NaN if
    empty or all zero. Source: Gini (1912), "Variabilità e mutabilità"; the sorted form as
    in Damgaard & Weiner (2000), Ecology 81(4):1139–1142."""
    v = np.sort(np.asarray(values, dtype=float))
    if v.size == 0 or v.sum() == 0:
        return math.nan
    if v[0] < 0:
        raise ValueError("gini needs non-negative values")
    i = np.arange(1, v.size + 1)
    return float(np.sum((2 * i - v.size - 1) * v) / (v.size * v.sum()))


@per_run
def engagement_received(posts: pd.DataFrame,
                        agents: Iterable[int] | pd.DataFrame | None = None) -> pd.DataFrame:
    """Engagement each agent received on its posts from other agents: likes and upvotes,
    downvotes, shares (reposts and quotes of the post) and replies and comments, seeded
    votes excluded. `agents`: the agents counted (ids, or a frame with `agent_id`), so
    those who received nothing count as 0; default the authors in `posts`. The news
    account (−1) is left out.

    Columns: agent, posts, up, down, shares, replies, engagement (their sum of the last
    four)."""
    p = posts[posts["author"] >= 0]
    received = pd.DataFrame({
        "posts": p.groupby("author").size(),
        "up": (p["up"] - p["seed_up"]).groupby(p["author"]).sum(),
        "down": (p["down"] - p["seed_down"]).groupby(p["author"]).sum(),
        "shares": p.groupby("author")["shares"].sum(),
        "replies": p.groupby("author")["replies"].sum(),
    })
    if agents is not None:
        ids = agents["agent_id"] if isinstance(agents, pd.DataFrame) else agents
        received = received.reindex(sorted(pd.unique(np.asarray(list(ids)))), fill_value=0)
    received = received.fillna(0).astype(np.int64)
    received["engagement"] = received[["up", "down", "shares", "replies"]].sum(axis=1)
    return received.rename_axis("agent").reset_index()


def engagement_gini(posts: pd.DataFrame,
                    agents: Iterable[int] | pd.DataFrame | None = None) -> float | pd.Series:
    """Engagement inequality: the Gini coefficient (`gini`) of the engagement each agent
    received (`engagement_received`). With a `run` column: one value per run (a Series)."""
    received = engagement_received(posts, agents)
    if "run" in received.columns:
        return received.groupby("run", sort=False)["engagement"].agg(gini)
    return gini(received["engagement"])

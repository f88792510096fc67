"""Validation case `cascades`: repost cascades against the 198 Twitter15/16 cascades OASIS
aligns with (Yang et al. 2024, arXiv:2411.11581, its `data/twitter_dataset/all_topics.csv`).

Each source post is seeded into a Twitter-like population (a directed preferential-
attachment follow graph) by one of its most-followed agents; the repost cascade below it
is measured as OASIS does (scale = distinct users, depth, maximum breadth), the repost
propensity is fitted on one half of the cascades (approximate Bayesian computation by
rejection with `shoal calibrate`'s prior draws and summary), and the distributions of
log scale and depth over the other, held-out half are compared with two-sample KS tests.

Shoal attaches every repost to its root post (`posts.parent_id`), as Twitter's API does;
the diffusion path OASIS measures ("B repost from A") is the feed item an agent reposted,
which the `actions` table keeps (`target_post`): `diffusion_posts` puts it back as the
repost's parent before `metrics.cascades` measures the trees.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from shoal.analysis import metrics
from shoal.analysis.runs import Run
from shoal.runs.calibrate import Param, draw, summarise
from shoal.runs.simulation import Simulation
from shoal.validation import data
from shoal.validation.case import CASES, Case, CaseContext, CaseResult, Check, mean_interval

OASIS_COMMIT = "46cdc8d31496b93706ce3d95d7eddc637c0678e2"
SOURCE_URL = (f"https://raw.githubusercontent.com/camel-ai/oasis/{OASIS_COMMIT}/"
              "data/twitter_dataset/all_topics.csv")
# What the case reads: no tweet or user ids, no start times.
KEEP = ("label", "source", "num_users", "max_depth", "source_tweet", "mean_time",
        "median_time", "max_time", "topic_category", "topic_name")
DATA = data.register(data.DataFile(
    name="twitter15_16_cascades.csv", url=SOURCE_URL,
    licence="Apache-2.0 (the OASIS repository, camel-ai/oasis); the tweets are from the "
            "Twitter15/16 rumour data sets (Ma, Gao & Wong 2017)",
    sha256="9b40aef3508477e7371dda0b5741b217da66811310bb74628eee5a148833fdea",
    derived="the columns " + ", ".join(KEEP) + " of all_topics.csv, in its row order, "
            "written by shoal.validation.cases.cascades.derive (tweet and user ids, start "
            "times and the index column dropped)",
    source_sha256="f0756df44e16c8a9b246fd72cb317f2c1ff8042a2579420938b8d8e2072aed57"))

# The thresholds, fixed before any run (docs/validation_cascades.md says why).
KS_MAX = 0.3            # held-out KS distance on log scale and on depth
CATEGORY_FACTOR = 2.0   # per-category median scale within this factor of the observed
CATEGORY_MIN = 4        # categories with at least this many held-out cascades are checked


def derive(source: str | Path | bytes) -> bytes:
    """The shipped file from OASIS's `all_topics.csv` (a path or its bytes): the columns
    of KEEP in the source's row order, as UTF-8 CSV with `\\n` line ends. Applied to the
    downloaded source (`python -m shoal.validation.data fetch`) it gives the shipped bytes
    again, which `DATA.sha256` checks."""
    raw = source if isinstance(source, bytes) else Path(source).read_bytes()
    frame = pd.read_csv(io.BytesIO(raw), dtype=str, keep_default_na=False)
    return frame[list(KEEP)].to_csv(index=False, lineterminator="\n").encode()


def observed() -> pd.DataFrame:
    """The 198 observed cascades (the shipped file, its hash checked)."""
    return pd.read_csv(data.path(DATA.name))


def split(cascades: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training and held-out halves: within each topic category, in file order, the 1st,
    3rd, 5th … cascade trains and the 2nd, 4th … is held out (every category in both)."""
    rank = cascades.groupby("topic_category", sort=False).cumcount()
    return cascades[rank % 2 == 0], cascades[rank % 2 == 1]


@dataclass(frozen=True)
class Scenario:
    """The population the sources are seeded into, and how many share a run.

    A run of `population` agents (Twitter only, a chronological feed of `feed_size`
    posts of followed accounts) on a directed preferential-attachment graph (each agent
    follows `m` earlier agents, chosen in proportion to their degree, so the earliest
    agents are the most followed), `rounds` rounds of `minutes_per_round` (the observed
    times are hours); `sources_per_run` sources are seeded at round 0, source j of a run
    by agent j (one of the run's most followed agents)."""

    population: int = 10_000
    m: int = 4
    rounds: int = 12
    minutes_per_round: int = 60
    feed_size: int = 10
    sources_per_run: int = 33

    def config(self, n_sources: int, values: dict[str, float]) -> dict[str, Any]:
        """The config mapping of one run with `n_sources` sources and `values` (dotted
        config keys, e.g. `policy.repost_weight`) set."""
        cfg: dict[str, Any] = {
            "name": "cascades", "rounds": self.rounds,
            "minutes_per_round": self.minutes_per_round,
            "population": {"size": self.population},
            "topics": [{"name": "news", "label": "the news", "keywords": ["news"]}],
            "activity": {"level": {"dist": "beta", "a": 2, "b": 4}, "hourly": "flat"},
            "platforms": {"twitter": {"feed_size": self.feed_size,
                                      "recommender": "following"},
                          "reddit": {"enabled": False}},
            "graph": {"kind": "preferential_attachment", "m": self.m, "mutual": False},
            "policy": {},
            "interventions": [{"kind": "posts", "name": "sources", "round": 0, "items": [
                {"platform": "twitter", "author": j, "text": f"source {j}"}
                for j in range(n_sources)]}],
        }
        for key, value in values.items():
            section, field = key.split(".", 1)
            cfg[section][field] = value
        return cfg


FULL = Scenario()
QUICK = FULL  # the quick size seeds fewer cascades (one run per half), not a smaller world
PARAMS = [Param("policy.repost_weight", 1.0, 100.0, log=True),
          Param("policy.engage_rate", 0.2, 1.0)]


def diffusion_posts(posts: pd.DataFrame, actions: pd.DataFrame) -> pd.DataFrame:
    """`posts` with each repost's parent set to the feed item it was made from (the root
    or another repost, from `actions.target_post`), so the trees are the diffusion paths
    OASIS measures instead of Shoal's stars (a repost's `parent_id` is its root)."""
    made = actions[(actions["action"] == "repost") & (actions["status"] == "ok")]
    source = made.set_index("new_post_id")["target_post"]
    out = posts.copy()
    is_repost = out["kind"] == "repost"
    out.loc[is_repost, "parent_id"] = (out.loc[is_repost, "post_id"].map(source)
                                       .fillna(out.loc[is_repost, "parent_id"]).to_numpy())
    return out


def measure(run: Run, hours_per_round: float) -> pd.DataFrame:
    """The seeded sources' repost cascades of one run, one row per source in seeding
    order: author, followers (at round 0), users (scale), depth, max_breadth, and
    median_hours (the median delay of its reposts; a repost made in round r, the source
    posted at round 0, counts as r − 0.5 rounds)."""
    fired = run.table("interventions")
    roots = [int(p) for e in fired[fired["kind"] == "posts"]["effect"] for p in e["post_ids"]]
    posts = diffusion_posts(run.posts, run.table("actions"))
    trees = metrics.cascades(posts, kinds=["repost"]).set_index("root_id").loc[roots]
    follows = run.follows
    followers = follows[(follows["round"] == 0)].groupby("followee").size()
    reposts = posts[(posts["kind"] == "repost") & posts["root_id"].isin(roots)]
    delay = ((reposts["round"] - 0.5) * hours_per_round).groupby(reposts["root_id"]).median()
    return pd.DataFrame({
        "root_id": roots, "author": trees["author"].to_numpy(),
        "followers": followers.reindex(trees["author"]).fillna(0).astype(int).to_numpy(),
        "users": trees["users"].to_numpy(), "depth": trees["depth"].to_numpy(),
        "max_breadth": trees["max_breadth"].to_numpy(),
        "median_hours": delay.reindex(roots).to_numpy()})


def simulate(ctx: CaseContext, scenario: Scenario, sources: pd.DataFrame,
             values: dict[str, float], seed: int, name: str | None) -> pd.DataFrame:
    """Seed `sources` (rows of the observed table) in runs of `scenario.sources_per_run`;
    run b has seed `seed * 1000 + b`. With `name` the runs are kept under ctx.out/name,
    else in memory. One row per source: its topic_name and category and its simulated
    cascade (`measure`)."""
    k = scenario.sources_per_run
    frames = []
    for b, start in enumerate(range(0, len(sources), k)):
        batch = sources.iloc[start:start + k]
        cfg = ctx.scenario(scenario.config(len(batch), values),
                           f"{name}/run{b}" if name else None)
        with Simulation.from_dict(cfg, seed=seed * 1000 + b,
                                  **({} if name else {"out": None})) as sim:
            sim.run()
            found = measure(Run(sim), scenario.minutes_per_round / 60)
        found.insert(0, "topic_category", batch["topic_category"].to_numpy())
        found.insert(0, "topic_name", batch["topic_name"].to_numpy())
        found.insert(0, "run", b)
        frames.append(found)
    return pd.concat(frames, ignore_index=True)


def ks(simulated: pd.DataFrame, target: pd.DataFrame) -> tuple[float, float]:
    """Two-sample KS distances (scipy.stats.ks_2samp) on log scale and on depth."""
    scale = stats.ks_2samp(np.log(simulated["users"].to_numpy(float)),
                           np.log(target["num_users"].to_numpy(float))).statistic
    depth = stats.ks_2samp(simulated["depth"].to_numpy(float),
                           target["max_depth"].to_numpy(float)).statistic
    return float(scale), float(depth)


def fit(ctx: CaseContext, scenario: Scenario, train: pd.DataFrame, trials: int,
        accept: float) -> tuple[dict[str, float], pd.DataFrame, list[str]]:
    """ABC rejection on the training half: draw i of PARAMS is `shoal calibrate`'s
    (`draw(PARAMS, ctx.seed, i)`); every draw runs the training sources with the same
    seeds (ctx.seed), its distance is KS(log scale) + KS(depth); the draws are summarised
    by `shoal calibrate`'s `summarise` (trials.csv and calibration.json in
    ctx.out/calibration). Returns the best draw's values, the estimates and notes."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {p.key: optuna.distributions.FloatDistribution(p.low, p.high, log=p.log)
             for p in PARAMS}
    study = optuna.create_study(study_name="cascades")
    for i in range(trials):
        values = draw(PARAMS, ctx.seed, i)
        sim = simulate(ctx, scenario, train, values, ctx.seed, None)
        d = sum(ks(sim, train))
        study.add_trial(optuna.trial.create_trial(params=values, distributions=dists,
                                                  value=d, user_attrs={"draw": i}))
    out = ctx.out / "calibration"
    out.mkdir(parents=True, exist_ok=True)
    result = summarise(study, PARAMS, accept, out)
    best = dict(zip(result.estimates["param"], result.estimates["best"], strict=True))
    return best, result.estimates, result.notes


def category_medians(sim: pd.DataFrame, obs: pd.DataFrame) -> pd.DataFrame:
    """Per topic category: held-out cascades, observed and simulated median scale and
    depth (the simulated over every replicate's cascades of that category's sources)."""
    o = obs.groupby("topic_category").agg(n=("num_users", "size"),
                                          scale_observed=("num_users", "median"),
                                          depth_observed=("max_depth", "median"))
    s = sim.groupby("topic_category").agg(scale_simulated=("users", "median"),
                                          depth_simulated=("depth", "median"))
    return o.join(s).reset_index()


def plot_cdfs(sim: pd.DataFrame, obs: pd.DataFrame, path: Path) -> None:
    """Empirical CDFs of scale (log axis) and depth, simulated vs observed (held out)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 3.4), layout="constrained")
    ax_scale, ax_depth = fig.subplots(1, 2)
    for values, label, color in ((obs["num_users"], "observed (Twitter15/16)", "C3"),
                                 (sim["users"], "simulated", "C0")):
        x = np.sort(values.to_numpy(float))
        ax_scale.step(x, np.arange(1, len(x) + 1) / len(x), where="post", color=color,
                      label=label)
    ax_scale.set_xscale("log")
    ax_scale.set_xlabel("scale (distinct users)")
    ax_scale.set_ylabel("share of cascades ≤ x")
    ax_scale.legend(fontsize=8)
    for values, color in ((obs["max_depth"], "C3"), (sim["depth"], "C0")):
        x = np.sort(values.to_numpy(float))
        ax_depth.step(x, np.arange(1, len(x) + 1) / len(x), where="post", color=color)
    ax_depth.set_xlabel("depth")
    fig.suptitle("Held-out repost cascades: simulated vs observed")
    fig.savefig(path, dpi=110)


def plot_categories(table: pd.DataFrame, path: Path) -> None:
    """Per-category median scale, simulated vs observed."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 3.4), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(table))
    ax.bar(x - 0.2, table["scale_observed"], 0.4, color="C3", label="observed")
    ax.bar(x + 0.2, table["scale_simulated"], 0.4, color="C0", label="simulated")
    ax.set_xticks(x, [f"{c} ({n})" for c, n in zip(table["topic_category"], table["n"],
                                                    strict=True)],
                  rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("median scale (held out)")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)


@CASES.register("cascades")
class Cascades(Case):
    """Repost cascades vs Twitter15/16: fit on half the cascades, compare the held-out
    half's distributions of log scale and depth (KS) and per-category medians."""

    title = "Repost cascades vs Twitter15/16 (scale, depth; held-out half)"
    source = ("Yang et al. (2024), OASIS: Open Agent Social Interaction Simulations with "
              "One Million Agents, arXiv:2411.11581 (its 198 Twitter15/16 cascades, "
              "data/twitter_dataset/all_topics.csv at commit " + OASIS_COMMIT[:7] + "); "
              "Ma, Gao & Wong (2017), Detect rumors in microblog posts using propagation "
              "structures via kernel learning, ACL 2017")
    data = (DATA.name,)

    def run(self, ctx: CaseContext) -> CaseResult:
        train, test = split(observed())
        scenario = QUICK if ctx.quick else FULL
        if ctx.quick:  # every 5th cascade of each half
            train, test = train.iloc[::5], test.iloc[::5]
        trials, accept = (4, 0.25) if ctx.quick else (24, 0.25)
        best, estimates, fit_notes = fit(ctx, scenario, train, trials, accept)
        seeds = [s + 1 for s in ctx.seeds(1, 3)]  # (ctx.seed itself made the fit's runs)
        sims, scale_d, depth_d = [], [], []
        for s in seeds:
            sim = simulate(ctx, scenario, test, best, s, f"heldout-s{s}").assign(seed=s)
            d_scale, d_depth = ks(sim, test)
            scale_d.append(d_scale)
            depth_d.append(d_depth)
            sims.append(sim)
        sim = pd.concat(sims, ignore_index=True)
        sim.to_csv(ctx.out / "heldout_cascades.csv", index=False)
        table = category_medians(sim, test)
        table.to_csv(ctx.out / "categories.csv", index=False)
        plot_cdfs(sim, test, ctx.out / "cdfs.png")
        plot_categories(table, ctx.out / "categories.png")

        checks = []
        for label, values, column in (("log scale", scale_d, "num_users"),
                                      ("depth", depth_d, "max_depth")):
            mean, interval = mean_interval(values)
            pooled = stats.ks_2samp(
                np.log(sim["users"]) if column == "num_users" else sim["depth"],
                np.log(test[column]) if column == "num_users" else test[column])
            checks.append(Check(
                f"KS distance, held-out {label} (simulated vs observed)", mean, 0.0,
                f"mean KS D over replicates ≤ {KS_MAX}", bool(mean <= KS_MAX),
                interval if len(values) > 1 else None,
                note=f"{len(test)} held-out cascades; pooled over replicates D = "
                     f"{pooled.statistic:.3f} (p = {pooled.pvalue:.2g})"))
        checked = table[table["n"] >= CATEGORY_MIN]
        ratio = np.abs(np.log(checked["scale_simulated"] / checked["scale_observed"]))
        worst = float(np.exp(ratio.max())) if len(checked) else math.nan
        checks.append(Check(
            f"per-category median scale, largest factor off (categories with ≥ "
            f"{CATEGORY_MIN} held-out cascades)", worst, 1.0,
            f"every checked category's simulated median within a factor {CATEGORY_FACTOR:g} "
            "of the observed", bool(len(checked) and worst <= CATEGORY_FACTOR),
            note=f"{len(checked)} categories checked"))

        fitted = ", ".join(f"{r.param} = {r.best:.4g} (median of accepted {r.estimate:.4g})"
                           for r in estimates.itertuples())
        delay = sim["median_hours"].median()
        obs_delay = test.loc[test["median_time"] >= 0, "median_time"].median()
        notes = [
            f"fitted on {len(train)} training cascades, {trials} prior draws "
            f"(best draw used): {fitted}",
            f"source authors' followers at round 0: median "
            f"{int(sim['followers'].median())}, range {int(sim['followers'].min())}–"
            f"{int(sim['followers'].max())}",
            f"median of the cascades' median repost delay: simulated {delay:.2f} h, "
            f"observed {obs_delay:.2f} h (not checked: one round is "
            f"{scenario.minutes_per_round} min)",
            "rule agents do not read a post's text, so per-category differences in the "
            "simulated medians are sampling noise; with --llm the text is read",
            *fit_notes,
        ]
        size = (f"{scenario.population:,} agents × {scenario.rounds} rounds of "
                f"{scenario.minutes_per_round} min, {scenario.sources_per_run} sources per "
                f"run; fit {len(train)} cascades × {trials} draws; held out {len(test)} "
                f"cascades × {len(seeds)} replicate(s)")
        return self.result("cascades", ctx, checks, seeds, size,
                           plots=["cdfs.png", "categories.png"], notes=notes)

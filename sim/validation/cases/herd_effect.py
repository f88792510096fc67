"""Validation case `herd_effect`: the asymmetry of herding on votes (Muchnik, Aral & Taylor
2013), run as a `shoal experiment`.

The scenario is `configs/herd_effect.yaml`: a Reddit-like forum of 3,000 rule-based agents
on two topics, 3 simulated hours per round, a hot-list feed. Each replicate runs a base run
of rounds 1..10 with the replicate's seed and forks it three ways at round 10 (the
experiment's `branch_round`); each arm injects the same 40 posts at round 11, written by
40 ordinary agents (20 per topic, stances spread over [−0.9, 0.9]), with one initial
upvote (`up`), no vote (`control`) or one initial downvote (`down`). The arms of a
replicate share the seed, so within a replicate they differ only by that vote.

Outcome per arm and replicate: the mean final score (upvotes − downvotes at round 20, the
seeded vote included, as Muchnik et al. count a comment's rating) of the 40 treated posts.
The checks compare, over replicates, (up − control) and (down − control) as a percentage
of the control's score with the study's +25% and "no lasting difference" (the crowd
corrected the negative treatment).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from shoal.agents.post_text import PostWriter
from shoal.analysis.runs import Run
from shoal.config.yaml_text import dump_yaml
from shoal.runs.experiment import plan_experiment, run_experiment, start_experiment
from shoal.validation.case import CASES, Case, CaseContext, CaseResult, Check, mean_interval

NAME = "herd_effect"
ARMS = ("up", "control", "down")
SEEDED = {"up": {"up": 1}, "control": None, "down": {"down": 1}}  # the initial vote
BRANCH_ROUND = 10  # the base run's last round; the posts come at round 11
ROUNDS = 20

# Muchnik, Aral & Taylor (2013): up-treated comments' mean final rating 25% above the
# control's; down-treated comments corrected by the crowd, not different from control.
UP_TARGET = 25.0
UP_BAND = (15.0, 35.0)  # the mean must fall here: ±10 points (see docs/validation.md)
DOWN_BOUND = 10.0  # equivalence margin: the interval must lie within ±this (% of control)
# and: up-treated comments were 32% more likely than the control's to get an up-vote
# from their first viewer: a chance per view (most viewers do not vote), measured here
# per showing in the round a post was first shown. The band was stated before the first
# run of this check, with the same ±10 points as the final score's. (Until 2026-12-06 it
# was measured as the share of up-votes among the votes of a post's first voted round,
# which at the control's 82% could not rise by more than 21%.)
FIRST_UP_TARGET = 32.0
FIRST_UP_BAND = (22.0, 42.0)

# configs/herd_effect.yaml, as a mapping (tests/test_validation_herd_effect.py checks that
# the two agree).
SCENARIO: dict[str, Any] = {
    "name": "herd",
    "seed": 2013,
    "rounds": ROUNDS,
    "minutes_per_round": 180,
    "start_time": "2026-01-05T08:00:00",
    "population": {"size": 3000},
    "topics": [
        {"name": "carbon_tax", "label": "the carbon tax",
         "keywords": ["carbon tax", "carbon levy"]},
        {"name": "nuclear_power", "label": "nuclear power",
         "keywords": ["nuclear power", "nuclear energy"]},
    ],
    "initial_stances": {"default": {"dist": "uniform"},
                        "confidence": {"dist": "beta", "a": 2, "b": 3}},
    "activity": {"level": {"dist": "beta", "a": 2, "b": 5}, "hourly": "flat"},
    "platforms": {
        "twitter": {"enabled": False},
        "reddit": {"feed_size": 10,
                   "recommender": {"kind": "popularity", "pool_size": 100,
                                   "window_rounds": 2}},
    },
    "graph": {"kind": "none"},
    "policy": {"post_rate": 0.08, "engage_rate": 0.8, "like_weight": 1.0,
               "downvote_weight": 0.8, "reply_weight": 0.2, "follow_weight": 0.0,
               "social_proof": 0.3, "correction": 0.75},
    "beliefs": {"update": "social_influence"},
}

# The 40 treated posts of configs/herd_effect/{up,control,down}.yaml: post i is written by
# agent 7 + 75·i, on the carbon tax (even i) or nuclear power (odd i), with this stance.
STANCES = (-0.41, 0.61, 0.74, -0.19, 0.14, -0.77, -0.48, -0.07, -0.02, 0.74,
           0.33, -0.88, 0.3, 0.08, 0.02, 0.18, 0.58, 0.32, 0.53, 0.11,
           0.32, -0.65, 0.55, -0.62, 0.56, -0.03, -0.03, 0.5, 0.86, -0.61,
           -0.82, 0.37, 0.46, -0.53, 0.38, -0.1, 0.01, -0.05, 0.31, -0.44)
TOPICS = ("carbon_tax", "nuclear_power")


@dataclass(frozen=True)
class Size:
    """A size of the case: replicates by default (the scenario is the same at both)."""

    replicates: int


QUICK = Size(replicates=6)
FULL = Size(replicates=20)


def treated_posts(arm: str) -> list[dict[str, Any]]:
    """The `posts` intervention of an arm: the 40 posts at round 11, with the arm's seeded
    vote. Texts state the stance in words (what LLM agents read; rule agents read the
    stance)."""
    labels = [t["label"] for t in SCENARIO["topics"]]
    stance = np.full((len(STANCES), len(TOPICS)), np.nan)
    stance[np.arange(len(STANCES)), np.arange(len(STANCES)) % 2] = STANCES
    # fixed draws for the wording (opener and reason), the same in every arm
    u = (np.arange(len(STANCES))[:, None] * np.array([0.37, 0.61, 0.13]) + 0.05) % 1.0
    texts = PostWriter(labels).posts(stance, u)
    items = []
    for i, (s, text) in enumerate(zip(STANCES, texts, strict=True)):
        item: dict[str, Any] = {"platform": "reddit", "author": 7 + 75 * i, "text": text,
                                "stance": {TOPICS[i % 2]: s}}
        seeded = SEEDED[arm]
        if seeded:
            item["votes"] = dict(seeded)
        items.append(item)
    return [{"kind": "posts", "round": BRANCH_ROUND + 1, "items": items}]


def scenario(replicates: int, seed: int) -> dict[str, Any]:
    """The experiment config: the scenario with three arms forked at round 10."""
    arms = {arm: {"interventions": {"add": treated_posts(arm)}} for arm in ARMS}
    return {**SCENARIO, "experiment": {
        "branch_round": BRANCH_ROUND, "replicates": replicates, "seed_base": seed,
        "control": "control", "arms": arms, "metrics": ["activity"]}}


def treated_score(run: Run, arm: str) -> float:
    """Mean final score (up − down, seeded vote included) of a fork's treated posts, read
    through `Run.herd_effect`; checks that the fork holds exactly the arm's 40 posts."""
    table = run.herd_effect()
    found = dict(zip(table["arm"].tolist(), table["n"].tolist(), strict=True))
    if found != {arm: len(STANCES)}:
        raise RuntimeError(f"{run.path}: expected {len(STANCES)} treated posts of arm "
                           f"{arm!r}, found {found}")
    return float(table["mean_score"].to_numpy()[0])


def first_view_up_rate(run: Run) -> float:
    """Of the showings of the treated posts in the round each was first shown (their
    first viewers: rounds are snapshots, so all of them saw only the seeded vote), the
    share whose viewer up-voted the post that round, pooled over the posts: Muchnik et
    al.'s chance of an up-vote per view, not per vote."""
    ids = run.treated_posts()
    shown = run.table("exposures")
    shown = shown.loc[shown["post_id"].isin(ids), ["round", "agent", "post_id"]]
    shown = shown.drop_duplicates()  # (one viewer, one post: once, whatever the platforms)
    shown = shown[shown["round"] == shown.groupby("post_id")["round"].transform("min")]
    a = run.actions
    up = a.loc[(a["status"] == "ok") & (a["action"] == "upvote") & a["target_post"].isin(ids),
               ["round", "agent", "target_post"]].rename(columns={"target_post": "post_id"})
    hit = shown.merge(up.drop_duplicates(), on=["round", "agent", "post_id"], how="left",
                      indicator=True)
    return float((hit["_merge"] == "both").mean()) if len(hit) else math.nan


def relative(treated: np.ndarray, control: np.ndarray) -> np.ndarray:
    """Per replicate, (treated − control) as a percentage of control; NaN where the
    control is not positive (no percentage of it means anything: 0 would give ±inf, a
    negative one the opposite sign), which the intervals then leave out."""
    treated, control = np.asarray(treated, float), np.asarray(control, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(control > 0, 100.0 * (treated - control) / control, np.nan)


@CASES.register(NAME)
class HerdEffect(Case):
    """Herd effect asymmetry on seeded votes (Muchnik, Aral & Taylor 2013)."""

    title = "Herd effect asymmetry"
    source = ("Muchnik, L., Aral, S., & Taylor, S. J. (2013). Social influence bias: a "
              "randomized experiment. Science 341(6146), 647–651. "
              "doi:10.1126/science.1240466")
    data = ()

    def run(self, ctx: CaseContext) -> CaseResult:
        seeds = ctx.seeds(QUICK.replicates, FULL.replicates)
        folder = ctx.out / "scenario"
        folder.mkdir(parents=True, exist_ok=True)
        cfg = ctx.scenario(scenario(len(seeds), seeds[0]))
        cfg.pop("output", None)  # the experiment places its runs (under ctx.out)
        config = folder / "herd_effect.yaml"
        config.write_text(dump_yaml(cfg, sort_keys=False, allow_unicode=True))
        root, spec = start_experiment(plan_experiment(config, out=ctx.out))
        done = run_experiment(root, spec)
        if done.experiment is None or done.failed:
            errors = "; ".join(f"{u['unit']}: {u.get('error')}" for u in done.failed)
            raise RuntimeError(f"the experiment did not finish: {errors}")
        exp = done.experiment
        runs = {arm: [exp.run(arm, i) for i in range(len(seeds))] for arm in ARMS}
        scores = {arm: np.array([treated_score(r, arm) for r in runs[arm]]) for arm in ARMS}
        firsts = {arm: np.array([first_view_up_rate(r) for r in runs[arm]])
                  for arm in ("up", "control")}
        _write_scores(ctx, seeds, scores, firsts)

        up, down = (relative(scores[a], scores["control"]) for a in ("up", "down"))
        checks = [*checks_of(up, down),
                  first_view_check(relative(firsts["up"], firsts["control"]))]
        notes = [f"experiment folder: {root.name}; per-replicate scores in scores.csv"]
        for what, control in (("mean final score", scores["control"]),
                              ("first viewers' up-vote rate", firsts["control"])):
            if (left := int(np.sum(~(control > 0)))):
                notes.append(f"{left} of {len(seeds)} replicates left out of the relative "
                             f"effects on the {what}: the control's is not positive")
        for arm in ARMS:
            m, (lo, hi) = mean_interval(scores[arm])
            notes.append(f"{arm}: mean final score {m:.2f} [{lo:.2f}, {hi:.2f}]")
        herding, (lo, hi) = mean_interval(scores["up"] - scores["control"] - 1.0)
        notes.append(f"up − control beyond the seeded vote itself: {herding:+.2f} "
                     f"[{lo:+.2f}, {hi:+.2f}] points")
        plot = "herd_effect.png"
        _plot(scores, up, down).savefig(ctx.out / plot, dpi=100, format="png")
        return self.result(NAME, ctx, checks, seeds,
                           f"{SCENARIO['population']['size']} agents, {len(seeds)} "
                           f"replicates × 3 arms, fork at round {BRANCH_ROUND} of "
                           f"{ROUNDS}, 40 treated posts",
                           plots=[plot], notes=notes)


def checks_of(up: np.ndarray, down: np.ndarray) -> list[Check]:
    """The two halves of the asymmetry, from the per-replicate relative effects (%)."""
    mu, iu = mean_interval(up)
    md, idn = mean_interval(down)
    # equivalence, not "no significant difference": more replicates make it easier to
    # show a small difference is small, never harder (a NaN interval fails)
    within = bool(idn[0] >= -DOWN_BOUND and idn[1] <= DOWN_BOUND)
    side = ("its interval excludes 0" if idn[0] > 0 or idn[1] < 0 else
            "its interval contains 0")
    return [
        Check(measure="up − control, % of control's mean final score",
              simulated=mu, target=UP_TARGET,
              tolerance=f"the mean over replicates lies in [{UP_BAND[0]:g}%, "
                        f"{UP_BAND[1]:g}%]",
              passed=bool(UP_BAND[0] <= mu <= UP_BAND[1]), interval=iu,
              note="Muchnik et al.: up-treated comments' mean final rating 25% higher"),
        Check(measure="down − control, % of control's mean final score",
              simulated=md, target=0.0,
              tolerance=f"the 95% interval lies within [−{DOWN_BOUND:g}%, "
                        f"+{DOWN_BOUND:g}%]",
              passed=within, interval=idn,
              note="Muchnik et al.: the crowd corrected down-treated comments; their "
                   f"final ratings did not differ from the control's ({side})"),
    ]


def first_view_check(first_up: np.ndarray) -> Check:
    """The first viewers' herding, from the per-replicate relative effects (%)."""
    m, interval = mean_interval(first_up)
    return Check(measure="up − control, % of control's up-vote rate per first viewer",
                 simulated=m, target=FIRST_UP_TARGET,
                 tolerance=f"the mean over replicates lies in [{FIRST_UP_BAND[0]:g}%, "
                           f"{FIRST_UP_BAND[1]:g}%]",
                 passed=bool(FIRST_UP_BAND[0] <= m <= FIRST_UP_BAND[1]), interval=interval,
                 note="Muchnik et al.: up-treated comments were 32% more likely to be "
                      "up-voted by their first viewer (per view, in the round each post "
                      "was first shown)")


def _write_scores(ctx: CaseContext, seeds: list[int], scores: dict[str, np.ndarray],
                  firsts: dict[str, np.ndarray]) -> None:
    """scores.csv: per replicate, its seed, each arm's mean final score, and the up and
    control arms' up-vote rate per first viewer (`first_view_up_<arm>`)."""
    with (ctx.out / "scores.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["replicate", "seed", *ARMS, *(f"first_view_up_{a}" for a in firsts)])
        for i, seed in enumerate(seeds):
            writer.writerow([i, seed, *(repr(float(scores[a][i])) for a in ARMS),
                             *(repr(float(firsts[a][i])) for a in firsts)])


def _plot(scores: dict[str, np.ndarray], up: np.ndarray, down: np.ndarray) -> Figure:
    """Left: the mean final score per arm with its 95% interval and the replicates;
    right: up and down relative to control (%) with the targets."""
    fig = Figure(figsize=(9, 4))
    left, right = fig.subplots(1, 2)
    colours = {"up": "tab:green", "control": "tab:grey", "down": "tab:red"}
    for x, arm in enumerate(ARMS):
        m, (lo, hi) = mean_interval(scores[arm])
        left.bar(x, m, color=colours[arm], alpha=0.5)
        if math.isfinite(lo):
            left.errorbar(x, m, yerr=[[m - lo], [hi - m]], color="black", capsize=6)
        jitter = np.linspace(-0.2, 0.2, len(scores[arm]))
        left.scatter(x + jitter, scores[arm], s=10, color=colours[arm], zorder=3)
    left.set_xticks(range(len(ARMS)), ARMS)
    left.set_ylabel("mean final score of the 40 treated posts")
    left.set_title("final score per arm (95% interval)")
    for x, (label, values, target) in enumerate((("up", up, UP_TARGET),
                                                 ("down", down, 0.0))):
        m, (lo, hi) = mean_interval(values)
        if math.isfinite(lo):
            right.errorbar(x, m, yerr=[[m - lo], [hi - m]], fmt="o", color=colours[label],
                           capsize=6, label=f"{label}: simulated")
        else:
            right.plot(x, m, "o", color=colours[label], label=f"{label}: simulated")
        right.plot([x - 0.3, x + 0.3], [target, target], "k--", lw=1)
    right.axhspan(*UP_BAND, xmin=0.0, xmax=0.5, color="tab:green", alpha=0.1)
    right.axhspan(-DOWN_BOUND, DOWN_BOUND, xmin=0.5, xmax=1.0, color="tab:red", alpha=0.1)
    right.axhline(0.0, color="grey", lw=0.5)
    right.set_xlim(-0.5, 1.5)
    right.set_xticks([0, 1], ["up − control", "down − control"])
    right.set_ylabel("% of the control's score")
    right.set_title("vs the study (dashed: target, band: tolerance)")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig

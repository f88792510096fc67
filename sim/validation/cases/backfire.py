"""Validation case `backfire`: a month of following a bot of the other side (Bail et al.
2018), run as a `shoal experiment`.

A two-party public (Republicans right of centre, Democrats left, on one `ideology` topic,
+1 = conservative) follows mostly its own side. The panel includes two bot accounts, a liberal
one every Republican follows and a conservative one every Democrat follows; they never act
by themselves (activity 0). The experiment's control arm runs the month as it is (the bots
stay silent: the panel is not treated); in the `bot` arm each bot posts the other side's
views once a day (a `posts` intervention authored by the bot: an ordinary post, read by
its followers like any post and moving them by the rule's peer formula), for 30 daily
rounds after two rounds without it. Each arm is its own run from round 0 with
the replicate's seed (`branch_round: 0`): a fork of a `social_influence` base run cannot
switch to `bounded_confidence` (the rebuilt checkpoint lacks the exposure history the base
kept), and pairing by seed needs no base run. The outcome, per party, is the paired
difference (bot − control, same seed) of the party's mean position at the end, in standard
deviations of the party's positions at round 0, signed so that a positive value is a move
towards the party's own side (backfire).

The checks apply to one documented setting of the `social_judgment` rule (Jager & Amblard
2005: assimilation within a latitude of acceptance, contrast beyond a latitude of
rejection; docs/beliefs_social_judgment.md), `JUDGMENT`, chosen once by a small search at
the quick size (docs/validation_backfire.md): which documented setting reproduces the
finding. The same treatment also runs under Shoal's default rule (`social_influence`,
calibrated defaults) and two other documented alternatives, MiroShark's constants
(`rate: 0.08, anchor: 0`) and `bounded_confidence`; their figures are notes, not checks.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from shoal.analysis.runs import Run
from shoal.config.yaml_text import dump_yaml
from shoal.runs.experiment import plan_experiment, run_experiment, start_experiment
from shoal.validation.case import CASES, Case, CaseContext, CaseResult, Check, mean_interval

NAME = "backfire"
TOPIC = "ideology"
PARTIES = ("rep", "dem")
SIDE = {"rep": 1.0, "dem": -1.0}  # the party's own side on the ideology axis
BOT_STANCE = 0.8  # the bots post the other side's views, strongly (|stance| ≥ 0.6)
BOT_NAME = {"rep": "liberal", "dem": "conservative"}  # the bot each party follows
PRE_ROUNDS = 2  # rounds before the bots start
BOT_ROUNDS = 30  # a month of daily rounds

# Bail et al. (2018): Republicans' shift towards conservatism, 0.11 to 0.59 SD of the
# ideology index (the range over their compliance models); Democrats: slightly more
# liberal, not significant.
REP_RANGE = (0.11, 0.59)

# The documented social_judgment setting the checks apply to (the same in the
# group_polarization case), chosen once by the search stated in docs/validation_backfire.md.
JUDGMENT: dict[str, Any] = {"rule": "social_judgment", "mu": 0.02, "acceptance": 0.4,
                            "rejection": 1.0, "reinforce": 0.002}
CHECKED = "judgment_"  # the setting (arm prefix) the checks read

# The rule settings the treatment runs under: the checked setting and, as notes, the
# default rule and the documented alternatives. Arm names: `<setting>control`,
# `<setting>bot`.
SETTINGS: dict[str, dict[str, Any] | None] = {
    CHECKED: JUDGMENT,
    "": None,  # beliefs.update as configured: the default rule
    "miroshark_": {"rule": "social_influence", "rate": 0.08, "anchor": 0},
    "bounded_": {"rule": "bounded_confidence"},
}
LABELS = {CHECKED: "social_judgment (μ {mu}, u {acceptance}, t {rejection}, ρ {reinforce}; "
                   "the checks)".format(**JUDGMENT),
          "": "default social_influence (not part of the verdict)",
          "miroshark_": "social_influence, MiroShark's constants (not part of the verdict)",
          "bounded_": "bounded_confidence (ε 0.3, μ 0.2; not part of the verdict)"}
SHORT = {CHECKED: "social_judgment\n(the checks)", "": "default rule",
         "miroshark_": "MiroShark's\nconstants", "bounded_": "bounded_confidence"}


@dataclass(frozen=True)
class Size:
    """A size of the case: agents (half per party) and default replicates."""

    agents: int
    replicates: int


QUICK = Size(agents=120, replicates=3)
FULL = Size(agents=400, replicates=16)


def bot_id(n: int, party: str) -> int:
    """The agent id of the bot the party's members follow (after the n panelists)."""
    return n + PARTIES.index(party)


def population(n: int, seed: int) -> list[dict[str, Any]]:
    """The two-party panel as `shoal` profile records: half Republicans around +0.5, half
    Democrats around −0.5 (sd 0.2, clipped), each following 8 of its own side, 2 of the
    other (a partisan follow graph) and the bot of the other side; then the two bots
    (group `bot`, activity 0: they only post when the treatment makes them)."""
    rng = np.random.default_rng(seed)
    party = np.array(["rep" if i < n // 2 else "dem" for i in range(n)])
    side = np.array([SIDE[p] for p in party])
    x = np.clip(0.5 * side + rng.normal(0.0, 0.2, n), -1.0, 1.0)
    records = []
    for i in range(n):
        own = np.flatnonzero((party == party[i]) & (np.arange(n) != i))
        other = np.flatnonzero(party != party[i])
        follows = [*rng.choice(own, 8, replace=False), *rng.choice(other, 2, replace=False)]
        records.append({"user_id": i, "name": f"panelist {i}", "group": str(party[i]),
                        "stances": {TOPIC: round(float(x[i]), 4)},
                        "following": [*sorted(int(f) for f in follows),
                                      bot_id(n, str(party[i]))]})
    for p in PARTIES:
        records.append({"user_id": bot_id(n, p), "name": f"{BOT_NAME[p]} bot",
                        "group": "bot", "activity": 0.0,
                        "stances": {TOPIC: -SIDE[p] * BOT_STANCE}, "following": []})
    return records


def bot_posts(n: int) -> list[dict[str, Any]]:
    """The treatment: each day of the month, each bot posts the other side's views once
    (an ordinary post by the bot account, shown to its followers like any post)."""
    return [{"kind": "posts", "round": r,
             "items": [{"platform": "twitter", "author": bot_id(n, p),
                        "text": f"I {'strongly oppose' if p == 'rep' else 'strongly support'}"
                                " conservative politics.",
                        "stance": {TOPIC: -SIDE[p] * BOT_STANCE}} for p in PARTIES]}
            for r in range(PRE_ROUNDS + 1, PRE_ROUNDS + BOT_ROUNDS + 1)]


def scenario(n: int, replicates: int, seed: int) -> dict[str, Any]:
    """The experiment config (population file name `panel.json`, beside it)."""
    arms: dict[str, Any] = {}
    for prefix, rule in SETTINGS.items():
        over = {"beliefs.update": rule} if rule else {}
        arms[f"{prefix}control"] = {"overrides": over} if over else {}
        arms[f"{prefix}bot"] = {**({"overrides": over} if over else {}),
                                "interventions": {"add": bot_posts(n)}}
    return {
        "name": NAME, "rounds": PRE_ROUNDS + BOT_ROUNDS, "minutes_per_round": 1440,
        "population": {"file": "panel.json"},
        "topics": [{"name": TOPIC, "label": "conservative politics",
                    "keywords": ["conservative politics", "conservatism"]}],
        "platforms": {"twitter": {"feed_size": 10, "recommender": "personalized"},
                      "reddit": {"enabled": False}},
        "graph": "profiles",
        "beliefs": {"update": "social_influence"},
        "experiment": {"branch_round": 0, "replicates": replicates,
                       "seed_base": seed, "control": "control", "arms": arms,
                       "metrics": [f"belief_mean.{TOPIC}", f"belief_sd.{TOPIC}"]},
    }


def party_positions(run: Run, parties: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions [rounds, agents] of a run on the topic, and the round numbers."""
    b = run.beliefs
    b = b[b["topic"] == TOPIC]
    table = b.pivot(index="round", columns="agent", values="position").sort_index()
    return table.to_numpy()[:, : len(parties)], table.index.to_numpy()


def exposure(run: Run, n: int) -> tuple[float, float]:
    """How far the treatment reached: the share of the n panelists who read at least one
    bot post, and how many bot posts those read on average (repeats counted)."""
    posts = run.posts
    bot = posts.loc[posts["author"] >= n, "post_id"]
    seen = run.table("exposures")
    seen = seen[seen["post_id"].isin(bot) & (seen["agent"] < n)]
    readers = seen["agent"].nunique()
    return readers / n, (len(seen) / readers if readers else 0.0)


def shifts(treated: np.ndarray, control: np.ndarray, parties: np.ndarray
           ) -> dict[str, np.ndarray]:
    """Per party, the paired shift over rounds: mean(treated − control) over the party's
    agents in SD units of the party's round-0 positions, positive towards its own side."""
    out = {}
    for p in PARTIES:
        cols = parties == p
        sd = float(control[0, cols].std(ddof=1))
        out[p] = SIDE[p] * (treated[:, cols] - control[:, cols]).mean(axis=1) / sd
    return out


@CASES.register(NAME)
class Backfire(Case):
    """Backfire under cross-cutting exposure (Bail et al. 2018)."""

    title = "Backfire under cross-cutting exposure"
    source = ("Bail, C. A., Argyle, L. P., Brown, T. W., Bumpus, J. P., Chen, H., "
              "Hunzaker, M. B. F., Lee, J., Mann, M., Merhout, F., & Volfovsky, A. (2018). "
              "Exposure to opposing views on social media can increase political "
              "polarization. PNAS 115(37), 9216–9221. doi:10.1073/pnas.1804840115")
    data = ()

    def run(self, ctx: CaseContext) -> CaseResult:
        size = QUICK if ctx.quick else FULL
        seeds = ctx.seeds(QUICK.replicates, FULL.replicates)
        folder = ctx.out / "scenario"
        folder.mkdir(parents=True, exist_ok=True)
        panel = population(size.agents, ctx.seed)
        (folder / "panel.json").write_text(json.dumps(panel))
        cfg = ctx.scenario(scenario(size.agents, len(seeds), seeds[0]))
        cfg.pop("output", None)  # the experiment places its runs (under ctx.out)
        config = folder / "backfire.yaml"
        config.write_text(dump_yaml(cfg, sort_keys=False))
        plan = plan_experiment(config, out=ctx.out)
        root, spec = start_experiment(plan)
        done = run_experiment(root, spec)
        if done.experiment is None or done.failed:
            errors = "; ".join(f"{u['unit']}: {u.get('error')}" for u in done.failed)
            raise RuntimeError(f"the experiment did not finish: {errors}")
        exp = done.experiment
        parties = np.array([r["group"] for r in panel])

        series: dict[str, dict[str, list[np.ndarray]]] = {
            pre: {p: [] for p in PARTIES} for pre in SETTINGS}
        rounds = np.arange(0)
        reached, readings = [], []
        for i in range(len(seeds)):
            for pre in SETTINGS:
                control, rounds = party_positions(exp.run(f"{pre}control", i), parties)
                bot_run = exp.run(f"{pre}bot", i)
                treated, _ = party_positions(bot_run, parties)
                if pre == CHECKED:
                    r, k = exposure(bot_run, size.agents)
                    reached.append(r)
                    readings.append(k)
                for p, s in shifts(treated, control, parties).items():
                    series[pre][p].append(s)
        end = {pre: {p: np.array([s[-1] for s in series[pre][p]]) for p in PARTIES}
               for pre in SETTINGS}

        checks = _checks(end[CHECKED])
        notes = [f"experiment folder: {root.name}; {len(seeds)} replicates × "
                 f"{len(spec['arms'])} arms, {size.agents} agents, "
                 f"{PRE_ROUNDS} + {BOT_ROUNDS} daily rounds",
                 f"exposure (social_judgment arms): {np.mean(reached):.0%} of the panelists read "
                 f"at least one bot post in the month; those read {np.mean(readings):.1f} "
                 "on average (the bots posted 30 each)"]
        for pre in SETTINGS:
            cells = []
            for p in PARTIES:
                m, (lo, hi) = mean_interval(end[pre][p])
                cells.append(f"{p} {m:+.3f} SD [{lo:+.3f}, {hi:+.3f}]")
            notes.append(f"{LABELS[pre]}: shift towards own side " + ", ".join(cells))
        plot = "backfire.png"
        _plot(series, end, rounds).savefig(ctx.out / plot, dpi=100, format="png")
        return self.result(NAME, ctx, checks, seeds,
                           f"{size.agents} agents, {len(seeds)} replicates, "
                           f"{len(SETTINGS) * 2} arms, {PRE_ROUNDS + BOT_ROUNDS} rounds",
                           plots=[plot], notes=notes)


def _checks(end: dict[str, np.ndarray]) -> list[Check]:
    """The two published results against the checked setting's shifts (SD units, positive
    towards the party's own side)."""
    rep, rep_ci = mean_interval(end["rep"])
    dem, dem_ci = mean_interval(end["dem"])
    lo, hi = REP_RANGE
    return [
        Check(measure="Republicans' shift after a month of a liberal bot (SD, + = more "
                      "conservative)",
              simulated=rep, target=(lo + hi) / 2,
              tolerance=f"the mean shift lies in the published range {lo} to {hi} SD "
                        "towards the own side (backfire)",
              passed=bool(lo <= rep <= hi), interval=rep_ci,
              note="Bail et al.: substantially more conservative, 0.11 to 0.59 SD"),
        Check(measure="Democrats' shift after a month of a conservative bot (SD, + = more "
                      "liberal)",
              simulated=dem, target=0.0,
              tolerance=f"slightly liberal or null: the 95% interval reaches 0 or above "
                        f"(not significantly towards the other side) and the mean is at "
                        f"most {hi} SD",
              passed=bool(math.isfinite(dem_ci[1]) and dem_ci[1] >= 0 and dem <= hi),
              interval=dem_ci,
              note="Bail et al.: slightly more liberal, not statistically significant"),
    ]


def _plot(series: dict[str, dict[str, list[np.ndarray]]],
          end: dict[str, dict[str, np.ndarray]], rounds: np.ndarray) -> Figure:
    """Left: each setting's end shift per party with its 95% interval and the published
    Republican range; right: the shift over rounds under the checked setting (solid) and
    the default rule (dashed)."""
    fig = Figure(figsize=(11, 4.2))
    left, right = fig.subplots(1, 2)
    left.axhspan(*REP_RANGE, color="tab:red", alpha=0.12, label="Bail et al.: Republicans")
    left.axhline(0, color="grey", lw=0.8)
    width = 0.35
    for j, p in enumerate(PARTIES):
        means, errs = [], []
        for pre in SETTINGS:
            m, (_lo, hi) = mean_interval(end[pre][p])
            means.append(m)
            errs.append(0.0 if not math.isfinite(hi) else hi - m)
        xs = np.arange(len(SETTINGS)) + (j - 0.5) * width
        left.bar(xs, means, width, yerr=errs, capsize=3,
                 color="tab:red" if p == "rep" else "tab:blue",
                 label="Republicans" if p == "rep" else "Democrats")
    left.set_xticks(np.arange(len(SETTINGS)), [SHORT[p] for p in SETTINGS], fontsize=7)
    left.set_ylabel("shift towards own side (SD of round-0 positions)")
    left.set_title("after a month of the other side's bot", fontsize=10)
    left.legend(fontsize=7)
    for pre, style, name in ((CHECKED, "-", "social_judgment"), ("", "--", "default")):
        for p in PARTIES:
            runs = np.array(series[pre][p])
            right.plot(rounds, runs.mean(axis=0), style,
                       color="tab:red" if p == "rep" else "tab:blue",
                       label=f"{'Republicans' if p == 'rep' else 'Democrats'}, {name}")
    right.axvline(PRE_ROUNDS, color="grey", ls=":", lw=0.8)
    right.axhline(0, color="grey", lw=0.8)
    right.set_xlabel("round (day)")
    right.set_title("mean shift over rounds", fontsize=10)
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig

"""Validation case `group_polarization`: like-minded discussion on OASIS's 196-user
population (`197_baoshou.csv`, `197_progressive.csv`), read for the direction of the shift.

OASIS (Yang et al. 2024) runs the same users and follow graph twice, once with every
persona written cautious ("baoshou", conservative: "I am not a risk-taker") and once
progressive ("open-minded ... supporting change and innovation"), asks each agent a
choice dilemma (should Helen, a writer, risk a new kind of novel?) and has an LLM judge,
agent by agent, whether its answer after t rounds is more extreme than its first one.
Group polarization (Myers & Lamm 1976) predicts that discussion among the like-minded
moves them further in the direction they already lean.

Shoal ships an anonymised derivation of the two files (agent index, following list,
activity, the file's leaning for each agent; no names, usernames or texts). The scenario
is one topic, `risk` (+1 = Helen should take the risk), initial positions leaning to the
file's side, and 30 rounds of discussion on the follow graph. Per file, the measures are
(a) the mean shift of the leaning agents in their initial direction and (b) OASIS's own
reading: the share of agents more extreme at the end than at round 0 minus the share less
extreme.

The checks apply to one documented setting of the `social_judgment` rule (`JUDGMENT`, the
same as in the backfire case; docs/beliefs_social_judgment.md), whose reinforcement term
(persuasive arguments) is the mechanism under test; the default rule runs too, at both
sizes, and its figures are notes, not part of the verdict.
"""

from __future__ import annotations

import ast
import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from shoal.analysis.runs import Run
from shoal.runs.simulation import Simulation
from shoal.validation import data
from shoal.validation.case import CASES, Case, CaseContext, CaseResult, Check, mean_interval

NAME = "group_polarization"
TOPIC = "risk"
OASIS_COMMIT = "46cdc8d31496b93706ce3d95d7eddc637c0678e2"
OASIS_RAW = f"https://raw.githubusercontent.com/camel-ai/oasis/{OASIS_COMMIT}/"
SOURCE_DIR = "data/twitter_dataset/group_polarization/"


@dataclass(frozen=True)
class Leaning:
    """One OASIS file: its name, the sentence its personas carry, and the side that
    sentence leans to on `risk` (−1 cautious, +1 risk-taking)."""

    name: str
    source: str
    marker: str
    side: float


LEANINGS = (
    Leaning("baoshou", "197_baoshou.csv", "I am not a risk-taker", -1.0),
    Leaning("progressive", "197_progressive.csv", "supporting change and innovation", 1.0),
)
DERIVED = {lean.name: f"oasis_197_{lean.name}.csv" for lean in LEANINGS}
DERIVATION = ("anonymised: one row per OASIS row (agent = row index), `following` = "
              "following_agentid_list (space-separated), `activity` = share of the 24 "
              "hourly activity_level labels that are 'active', `leaning` = the file's side "
              "(−1 baoshou, +1 progressive) where the row's user_char carries the file's "
              "persona sentence, else 0; names, usernames, descriptions, personas and tweets "
              "dropped (shoal.validation.cases.group_polarization.derive)")

for _lean, _sha, _src in (
        (LEANINGS[0], "c1bc04cc6673dcf4a7f1614d096ef7c9a5aa87dbb1010daddf6c76d0f34ac769",
         "42b6603a181754dfac6e575a0b5d7d2bcf5b7cf41de9356e6e75a2a796c3afdd"),
        (LEANINGS[1], "353c1c41683495fa7f0b031abb5dfa938a1b84d94e3b98f2b9ec20b7ea7cc490",
         "0469721cb806b88b8935a6d7990835a78048db213b4fbe3b4e15097937e2f57e")):
    data.register(data.DataFile(
        name=DERIVED[_lean.name], url=OASIS_RAW + SOURCE_DIR + _lean.source,
        licence="Apache-2.0 (camel-ai/oasis)", sha256=_sha, derived=DERIVATION,
        source_sha256=_src))

START = 0.5  # initial positions: side · START + N(0, SPREAD), clipped to [−1, 1]
SPREAD = 0.2
ROUNDS = 30  # OASIS's group_polarization.yaml: num_timesteps 30
SAME = 0.01  # |change| below this is "no obvious difference" (OASIS's judge: neutral)
# The documented social_judgment setting the checks apply to: the backfire case's (chosen
# there and here by one search, docs/validation_backfire.md).
JUDGMENT: dict[str, Any] = {"rule": "social_judgment", "mu": 0.02, "acceptance": 0.4,
                            "rejection": 1.0, "reinforce": 0.002}
JUDGMENT_LABEL = ("social_judgment (μ {mu}, u {acceptance}, t {rejection}, ρ {reinforce})"
                  .format(**JUDGMENT))
# Documented alternatives to the default rule, run at full size only and reported as notes:
# do any of them give group polarization?
ALTERNATIVES: dict[str, dict[str, Any]] = {
    "social_influence, MiroShark's constants": {"rule": "social_influence", "rate": 0.08,
                                                "anchor": 0},
    "bounded_confidence (ε 0.3, μ 0.2)": {"rule": "bounded_confidence"},
}


def derive(source: Path, lean: Leaning, out: Path) -> None:
    """Write the anonymised derivation of one OASIS file (see DERIVATION) to `out`."""
    df = pd.read_csv(source)
    with out.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["agent", "following", "activity", "leaning"])
        for i, row in enumerate(df.itertuples(index=False)):
            follows = ast.literal_eval(str(row.following_agentid_list))
            follows = [follows] if isinstance(follows, int) else list(follows)
            labels = ast.literal_eval(str(row.activity_level))
            activity = sum(label == "active" for label in labels) / len(labels)
            persona = row.user_char if isinstance(row.user_char, str) else ""
            leaning = int(lean.side) if lean.marker in persona else 0
            w.writerow([i, " ".join(str(int(a)) for a in follows), f"{activity:.4f}",
                        leaning])


def load(lean: Leaning) -> pd.DataFrame:
    """The shipped derivation of one file (hash-checked)."""
    df = pd.read_csv(data.path(DERIVED[lean.name]), keep_default_na=False)
    df["following"] = [[int(a) for a in str(s).split()] for s in df["following"]]
    return df


def profiles(df: pd.DataFrame, seed: int) -> list[dict[str, Any]]:
    """`shoal` profile records: the follow graph, activity and a position leaning to the
    agent's side (agents without the file's persona start around 0)."""
    rng = np.random.default_rng(seed)
    x = np.clip(df["leaning"].to_numpy() * START + rng.normal(0.0, SPREAD, len(df)), -1, 1)
    return [{"user_id": int(r.agent), "name": f"member {int(r.agent)}",
             "activity": float(r.activity), "stances": {TOPIC: round(float(x[i]), 4)},
             "following": [a for a in r.following if a != r.agent]}
            for i, r in enumerate(df.itertuples(index=False))]


def scenario(population: Path) -> dict[str, Any]:
    """The run config (the profile file written beside it)."""
    return {
        "name": NAME, "rounds": ROUNDS, "minutes_per_round": 60,
        "population": {"file": str(population), "format": "shoal"},
        "topics": [{"name": TOPIC, "label": "taking the risk",
                    "keywords": ["taking the risk", "the new novel"]}],
        "platforms": {"twitter": {"feed_size": 5, "recommender": "personalized"},
                      "reddit": {"enabled": False}},
        "graph": "profiles",
        "beliefs": {"update": "social_influence"},
    }


@dataclass
class Outcome:
    """One run's reading: the mean shift of the leaning agents towards their side, in
    position units and in SD of their round-0 positions, and OASIS's reading (share more
    extreme minus share less extreme)."""

    shift: float
    shift_sd: float
    more: float
    less: float


def outcome(run_root: Path, leaning: np.ndarray) -> tuple[Outcome, np.ndarray]:
    """Read a run: its Outcome and the leaning agents' mean shift per round."""
    b = Run(run_root).beliefs
    x = b[b["topic"] == TOPIC].pivot(index="round", columns="agent", values="position")
    x = x.sort_index().to_numpy()
    lean = leaning != 0
    toward = leaning[lean] * (x[:, lean] - x[0, lean])  # [rounds, leaning agents]
    end = toward[-1]
    sd = float(x[0, lean].std(ddof=1))
    return (Outcome(shift=float(end.mean()), shift_sd=float(end.mean()) / sd,
                    more=float((end > SAME).mean()), less=float((end < -SAME).mean())),
            toward.mean(axis=1))


@CASES.register(NAME)
class GroupPolarization(Case):
    """Group polarization on OASIS's 196-user population, both leanings."""

    title = "Group polarization (OASIS 196 users, cautious and progressive)"
    source = ("Yang, Z., Zhang, Z., Zheng, Z., et al. (2024). OASIS: Open Agent Social "
              "Interaction Simulations with One Million Agents. arXiv:2411.11581 (group "
              "polarization experiment, data/twitter_dataset/group_polarization); "
              "Myers, D. G., & Lamm, H. (1976). The group polarization phenomenon. "
              "Psychological Bulletin 83(4), 602–627")
    data = tuple(DERIVED.values())

    def run(self, ctx: CaseContext) -> CaseResult:
        seeds = ctx.seeds(3, 16)
        results, curves = _runs(ctx, seeds, JUDGMENT, "sj-")
        default, default_curves = _runs(ctx, seeds, None, "")
        notes = [f"the checks: {JUDGMENT_LABEL}",
                 "default social_influence (not part of the verdict): "
                 + _summary(default)]
        if not ctx.quick:
            for i, (label, rule) in enumerate(ALTERNATIVES.items()):
                alt, _ = _runs(ctx, seeds, rule, f"alt{i}-")
                notes.append(f"{label} (not part of the verdict): " + _summary(alt))
        checks = []
        for lean in LEANINGS:
            rs = results[lean.name]
            m, ci = mean_interval([o.shift for o in rs])
            msd, sdci = mean_interval([o.shift_sd for o in rs])
            net, netci = mean_interval([o.more - o.less for o in rs])
            side = "more cautious" if lean.side < 0 else "more risk-taking"
            checks.append(Check(
                measure=f"{lean.name}: mean shift of the leaning agents towards their "
                        f"side ({side}), position units",
                simulated=m, target=None,
                tolerance="group polarization: the shift is in the initial direction, its "
                          "95% interval above 0 (direction only: no sourced size)",
                passed=bool(math.isfinite(ci[0]) and ci[0] > 0), interval=ci,
                note=f"{JUDGMENT_LABEL}; in SD of round-0 positions: {msd:+.3f} "
                     f"[{sdci[0]:+.3f}, {sdci[1]:+.3f}]"))
            checks.append(Check(
                measure=f"{lean.name}: share more extreme minus share less extreme at "
                        f"round {ROUNDS} vs round 0 (OASIS's reading)",
                simulated=net, target=None,
                tolerance=f"more agents end more extreme than less extreme (change beyond "
                          f"±{SAME}): the 95% interval of the difference above 0",
                passed=bool(math.isfinite(netci[0]) and netci[0] > 0), interval=netci,
                note=f"{JUDGMENT_LABEL}; more {np.mean([o.more for o in rs]):.3f}, less "
                     f"{np.mean([o.less for o in rs]):.3f}"))
            notes.append(f"{lean.name}: {int((load(lean)['leaning'] != 0).sum())} of "
                         f"{len(load(lean))} agents carry the persona")
        plot = "group_polarization.png"
        _plot(curves, default_curves).savefig(ctx.out / plot, dpi=100, format="png")
        runs = 2 * len(seeds) * (2 if ctx.quick else 2 + len(ALTERNATIVES))
        return self.result(NAME, ctx, checks, seeds,
                           f"196 agents × 2 leanings, {len(seeds)} replicates, "
                           f"{ROUNDS} rounds, {runs} runs", plots=[plot], notes=notes)


def _summary(results: dict[str, list[Outcome]]) -> str:
    """One setting's figures per file: mean shift [95%] and more − less [95%]."""
    cells = []
    for lean in LEANINGS:
        m, ci = mean_interval([o.shift for o in results[lean.name]])
        net, nci = mean_interval([o.more - o.less for o in results[lean.name]])
        cells.append(f"{lean.name} shift {m:+.4f} [{ci[0]:+.4f}, {ci[1]:+.4f}], "
                     f"more − less {net:+.3f} [{nci[0]:+.3f}, {nci[1]:+.3f}]")
    return "; ".join(cells)


def _runs(ctx: CaseContext, seeds: list[int], rule: dict[str, Any] | None, prefix: str
          ) -> tuple[dict[str, list[Outcome]], dict[str, list[np.ndarray]]]:
    """Run both files for every seed (under `rule`, or the scenario's default rule): the
    outcomes and the mean-shift curves per file."""
    results: dict[str, list[Outcome]] = {lean.name: [] for lean in LEANINGS}
    curves: dict[str, list[np.ndarray]] = {lean.name: [] for lean in LEANINGS}
    for lean in LEANINGS:
        df = load(lean)
        leaning = df["leaning"].to_numpy(dtype=float)
        for seed in seeds:
            name = f"{prefix}{lean.name}-s{seed}"
            folder = ctx.out / name
            folder.mkdir(parents=True, exist_ok=True)
            pop = folder / "population.json"
            pd.DataFrame(profiles(df, seed)).to_json(pop, orient="records")
            base = scenario(pop)
            if rule is not None:
                base["beliefs"] = {"update": rule}
            with Simulation.from_dict(ctx.scenario(base, name), seed=seed) as sim:
                sim.run()
                root = sim.dir.root
            o, curve = outcome(root, leaning)
            results[lean.name].append(o)
            curves[lean.name].append(curve)
    return results, curves


def _plot(curves: dict[str, list[np.ndarray]], default: dict[str, list[np.ndarray]]
          ) -> Figure:
    """The leaning agents' mean shift towards their side over rounds, per file, under the
    checked setting (solid, band: replicate range) and the default rule (dashed)."""
    fig = Figure(figsize=(6.5, 4))
    ax = fig.subplots()
    for lean, color in zip(LEANINGS, ("tab:blue", "tab:orange"), strict=True):
        c = np.array(curves[lean.name])
        ax.plot(np.arange(c.shape[1]), c.mean(axis=0), color=color,
                label=f"{lean.name}, social_judgment")
        if len(c) > 1:
            ax.fill_between(np.arange(c.shape[1]), c.min(axis=0), c.max(axis=0),
                            color=color, alpha=0.2)
        d = np.array(default[lean.name])
        ax.plot(np.arange(d.shape[1]), d.mean(axis=0), "--", color=color,
                label=f"{lean.name}, default rule")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("round")
    ax.set_ylabel("mean shift towards own side")
    ax.set_title("group polarization: > 0 is more extreme (band: replicate range)",
                 fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig

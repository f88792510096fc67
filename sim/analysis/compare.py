"""Compare runs (typically a parent and its forks): beliefs, activity and engagement, and
the prediction markets' prices when the runs have markets.

Every run is read with its full history (the notebook's `Run`), so a fork compares
with its parent's rounds before the fork included. The first run is the reference; each
other run is compared with it over the rounds they both have (0..R, R the last round
common to all runs). `shoal compare` prints the tables and writes a PNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from rich.table import Table

from shoal.analysis.runs import Run
from shoal.core.errors import InputError
from shoal.store.run_dir import RunDir

# Applied actions counted as engagement, by the kind shown (actions of either platform).
ENGAGEMENT = {
    "posts": ("post",),
    "likes/upvotes": ("like", "upvote"),
    "reposts/quotes": ("repost", "quote"),
    "replies/comments": ("reply", "comment"),
    "downvotes": ("downvote",),
    "follows": ("follow",),
}
ACTIVITY = "acting agents"
LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass
class RunData:
    """What a comparison needs of one run (its full history)."""

    label: str
    dir: RunDir
    meta: dict
    fork_rounds: list[int]
    beliefs: pd.DataFrame  # round, agent, topic, position
    stats: pd.DataFrame  # index (round, topic); columns mean, sd (population sd)
    per_round: pd.DataFrame  # index round; ACTIVITY and one column per ENGAGEMENT kind
    prices: pd.DataFrame | None = None  # index round; a column per (market, outcome)

    @property
    def last_round(self) -> int:
        """The last round with data (0 if none ran yet)."""
        return int(self.per_round.index.max()) if len(self.per_round) else 0


@dataclass
class Comparison:
    """Runs, the rounds they share (0..last_round) and the topics compared."""

    runs: list[RunData]
    last_round: int
    topics: list[str]

    @property
    def reference(self) -> RunData:
        """The first run, which the others are compared with."""
        return self.runs[0]


def load_run(run: str | Path, label: str) -> RunData:
    """Read one run through the notebook's `Run` (its full history, a consistent snapshot:
    a run still being written, read from its live mirror, gives whole rounds only)."""
    data = Run(run)
    if data.dir is None:  # (a path always gives a run directory)
        raise InputError(f"{run}: not a run directory")
    per_round = activity_per_round(data)
    beliefs = data.beliefs[["round", "agent", "topic", "position"]]
    grouped = beliefs.groupby(["round", "topic"], sort=True)["position"]
    stats = pd.DataFrame({"mean": grouped.mean(), "sd": grouped.std(ddof=0)})
    return RunData(label=label, dir=data.dir, meta=data.meta, fork_rounds=data.fork_rounds,
                   beliefs=beliefs, stats=stats, per_round=per_round,
                   prices=price_paths(data))


def price_paths(run: Run) -> pd.DataFrame | None:
    """Each market outcome's price per round (columns (market, outcome)), or None for a
    run without markets."""
    rows = run.table("prices")
    if rows.empty:
        return None
    wide = rows.pivot_table(index="round", columns=["market", "outcome"], values="price")
    markets = run.table("markets")  # outcomes in the order the config lists them
    order = [(m, str(o)) for m, outcomes in zip(markets["market"], markets["outcomes"],
                                                strict=True) for o in outcomes]
    return wide[[c for c in order if c in wide.columns]]


def activity_per_round(run: Run) -> pd.DataFrame:
    """Acting agents and applied actions of each engagement kind, per completed round."""
    rounds = run.rounds[["round", "n_acting"]].set_index("round")
    actions = run.actions[run.actions["status"] == "ok"]
    kind_of = {a: kind for kind, names in ENGAGEMENT.items() for a in names}
    kinds = actions["action"].map(kind_of)
    counts = (actions.assign(kind=kinds).dropna(subset=["kind"])
              .groupby(["round", "kind"]).size().unstack(fill_value=0))
    table = rounds.rename(columns={"n_acting": ACTIVITY}).join(counts, how="left")
    return table.reindex(columns=[ACTIVITY, *ENGAGEMENT]).fillna(0).astype(float)


def compare_runs(runs: list[str | Path], topic: str | None = None) -> Comparison:
    """Load the runs (the first is the reference) and find what they share."""
    if len(runs) < 2:
        raise InputError("compare needs at least two runs")
    if len(runs) > len(LABELS):
        raise InputError(f"compare takes at most {len(LABELS)} runs")
    data = [load_run(run, LABELS[i]) for i, run in enumerate(runs)]
    topics = list(dict.fromkeys(t for d in data for t in d.stats.index.get_level_values(1)))
    if topic is not None:
        if topic not in topics:
            raise InputError(f"--topic {topic}: not a topic of these runs "
                             f"({', '.join(topics)})")
        topics = [topic]
    return Comparison(runs=data, last_round=min(d.last_round for d in data), topics=topics)


def first_difference(a: pd.DataFrame, b: pd.DataFrame, upto: int) -> int | None:
    """The first round <= upto at which any (agent, topic) position differs exactly
    (a row present in only one run counts as a difference); None if there is none."""
    keys = ["round", "agent", "topic"]
    a, b = a[a["round"] <= upto], b[b["round"] <= upto]
    both = a.merge(b, on=keys, how="outer", suffixes=("_a", "_b"), indicator=True)
    pa, pb = both["position_a"], both["position_b"]
    same = (both["_merge"] == "both") & ((pa == pb) | (pa.isna() & pb.isna()))
    rounds = both.loc[~same, "round"]
    return int(rounds.min()) if len(rounds) else None


def max_mean_gap(cmp: Comparison, run: RunData, topic: str) -> tuple[float, int | None]:
    """The largest |mean(run) − mean(reference)| of a topic over rounds 0..R, and where
    (NaN, None: one of the two has no beliefs on the topic, so nothing to compare)."""
    rounds = pd.RangeIndex(cmp.last_round + 1, name="round")
    gap = (_topic_stats(run, topic, rounds)["mean"]
           - _topic_stats(cmp.reference, topic, rounds)["mean"]).abs().dropna()
    if gap.empty:
        return math.nan, None
    if gap.max() == 0:
        return 0.0, None
    return float(gap.max()), int(gap.idxmax())


def _topic_stats(run: RunData, topic: str, rounds: pd.Index) -> pd.DataFrame:
    """mean and sd of one topic per round (NaN where the run has none)."""
    if topic not in run.stats.index.get_level_values("topic"):
        return pd.DataFrame(index=rounds, columns=["mean", "sd"], dtype=float)
    return run.stats.xs(topic, level="topic").reindex(rounds)


def per_round_means(cmp: Comparison, run: RunData) -> pd.Series:
    """Activity and engagement per round, averaged over rounds 1..R."""
    rows = run.per_round.loc[1:cmp.last_round]
    return rows.mean() if len(rows) else pd.Series(np.nan, index=run.per_round.columns)


# ---------------------------------------------------------------------- rendering


def _num(x: float, fmt: str = "{:+.3f}") -> str:
    return "—" if x is None or pd.isna(x) else fmt.format(x)


def _fork_of(cmp: Comparison, run: RunData) -> str:
    """"B @ 4": the parent (its label if compared, else its id) and the fork round."""
    info = run.meta.get("lineage") or {}
    if not info.get("parent_run_id"):
        return ""
    labels = {d.dir.run_id: d.label for d in cmp.runs}
    return f"{labels.get(info['parent_run_id'], info['parent_run_id'])} @ {info['fork_round']}"


def runs_table(cmp: Comparison) -> Table:
    """One row per run: id, parent and fork round, rounds done, first belief difference."""
    ref = cmp.reference
    table = Table(title="runs", box=None, title_justify="left")
    table.add_column("")
    table.add_column("run", no_wrap=True, min_width=max(len(d.dir.run_id) for d in cmp.runs))
    for col in ("fork of", "rounds", f"beliefs differ from {ref.label}"):
        table.add_column(col)
    for run in cmp.runs:
        if run is ref:
            first = ""
        else:
            r = first_difference(ref.beliefs, run.beliefs, cmp.last_round)
            first = "never" if r is None else f"from round {r}"
        table.add_row(run.label, run.dir.run_id, _fork_of(cmp, run),
                      f"{run.last_round}/{run.meta.get('rounds', '?')}", first)
    return table


def beliefs_table(cmp: Comparison) -> Table:
    """Per topic and run: mean and spread at round R, and the largest gap in means."""
    ref = cmp.reference
    table = Table(title=f"beliefs at round {cmp.last_round} (last common round)", box=None,
                  title_justify="left")
    for col in ("topic", "run", "mean", "Δ mean", "sd", "Δ sd", "max |Δ mean|", "at round"):
        table.add_column(col, justify="left" if col in ("topic", "run") else "right")
    at = pd.RangeIndex(cmp.last_round, cmp.last_round + 1)
    for topic in cmp.topics:
        base = _topic_stats(ref, topic, at).iloc[0]
        for run in cmp.runs:
            row = _topic_stats(run, topic, at).iloc[0]
            cells = [_num(row["mean"]), "", _num(row["sd"], "{:.3f}"), "", "", ""]
            if run is not ref:
                gap, where = max_mean_gap(cmp, run, topic)
                cells[1] = _num(row["mean"] - base["mean"])
                cells[3] = _num(row["sd"] - base["sd"])
                cells[4] = _num(gap, "{:.3f}")
                cells[5] = "—" if where is None else str(where)
            table.add_row(topic if run is ref else "", run.label, *cells)
    return table


def activity_table(cmp: Comparison) -> Table:
    """Acting agents and applied actions per round (means over rounds 1..R)."""
    ref = cmp.reference
    table = Table(title=f"per round, mean over rounds 1..{cmp.last_round}", box=None,
                  title_justify="left")
    table.add_column("")
    for run in cmp.runs:
        table.add_column(run.label, justify="right")
        if run is not ref:
            table.add_column(f"Δ {run.label}", justify="right")
    means = {run.label: per_round_means(cmp, run) for run in cmp.runs}
    for metric in (ACTIVITY, *ENGAGEMENT):
        cells = []
        for run in cmp.runs:
            value = means[run.label][metric]
            cells.append(_num(value, "{:.1f}"))
            if run is not ref:
                cells.append(_num(value - means[ref.label][metric], "{:+.1f}"))
        table.add_row(metric, *cells)
    return table


def markets_table(cmp: Comparison) -> Table | None:
    """Per market outcome and run: the price at round R, its difference from the
    reference, the largest difference and where, and the first round they differ."""
    ref = cmp.reference
    if ref.prices is None:
        return None
    table = Table(title=f"market prices at round {cmp.last_round}", box=None,
                  title_justify="left")
    for col in ("market", "outcome", "run", "price", "Δ price", "max |Δ price|", "at round",
                "first differs"):
        table.add_column(col, justify="left" if col in ("market", "outcome", "run")
                         else "right")
    rounds = pd.RangeIndex(cmp.last_round + 1)
    for market, outcome in ref.prices.columns:
        base = ref.prices[(market, outcome)].reindex(rounds)
        for run in cmp.runs:
            path = (run.prices[(market, outcome)].reindex(rounds)
                    if run.prices is not None and (market, outcome) in run.prices else
                    pd.Series(np.nan, index=rounds))
            cells = [_num(path.iloc[-1], "{:.3f}"), "", "", "", ""]
            if run is not ref:
                gap = (path - base).abs()
                differs = gap[gap > 0]
                cells[1] = _num(path.iloc[-1] - base.iloc[-1])
                cells[2] = _num(gap.max(), "{:.3f}")
                cells[3] = "—" if gap.isna().all() else str(int(gap.idxmax()))
                cells[4] = str(int(differs.index.min())) if len(differs) else "never"
            first = run is ref
            table.add_row(market if first else "", outcome if first else "", run.label,
                          *cells)
    return table


def comparison_tables(cmp: Comparison) -> list[Table]:
    """The tables `shoal compare` prints."""
    markets = markets_table(cmp)
    return [runs_table(cmp), beliefs_table(cmp), activity_table(cmp),
            *([markets] if markets is not None else [])]


def plot_path(out: str | Path | None, cmp: Comparison | None = None) -> Path:
    """Where `shoal compare` writes its plot: `out` (a .png in an existing folder), or by
    default `compare.png` next to the first run of `cmp` (in its output folder), numbered
    (`compare-2.png`, ...) rather than replacing a plot already there."""
    if out is not None:
        path = Path(out)
        if path.suffix.lower() != ".png":
            raise InputError(f"--out {out}: the plot is a PNG; give a .png file name")
        if not path.parent.is_dir():
            raise InputError(f"--out {out}: no such folder {path.parent}")
        return path
    if cmp is None:
        raise ValueError("plot_path: give `out`, or the comparison to write next to")
    folder = cmp.reference.dir.root.parent
    path, n = folder / "compare.png", 1
    while path.exists():
        n += 1
        path = folder / f"compare-{n}.png"
    return path


def plot_comparison(cmp: Comparison, path: str | Path) -> Path:
    """A PNG: per topic, mean ± sd per run over rounds; then acting agents per round.
    Dashed vertical lines mark fork rounds (labelled with the runs forked there)."""
    path = Path(path)
    shown: dict[str, str] = {}  # a panel per market: its first outcome's price
    prices = cmp.reference.prices
    for market, outcome in (prices.columns if prices is not None else []):
        shown.setdefault(market, outcome)
    n = len(cmp.topics) + 1 + len(shown)
    fig = Figure(figsize=(9, 2.8 * n), layout="constrained")  # Agg canvas, no pyplot state
    axes = fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0]
    styles = [(f"C{i % 10}", ("-", "--", ":", "-.")[i % 4]) for i in range(len(cmp.runs))]
    for ax, topic in zip(axes, cmp.topics, strict=False):
        for run, (color, style) in zip(cmp.runs, styles, strict=True):
            stats = _topic_stats(run, topic, pd.RangeIndex(run.last_round + 1))
            x = stats.index.to_numpy()
            ax.plot(x, stats["mean"], color=color, linestyle=style,
                    label=f"{run.label}: {run.dir.run_id}")
            ax.fill_between(x, stats["mean"] - stats["sd"], stats["mean"] + stats["sd"],
                            color=color, alpha=0.08, linewidth=0)
        ax.set_ylabel(f"{topic}\nmean ± sd")
    for ax, (market, outcome) in zip(axes[len(cmp.topics):], shown.items(), strict=False):
        for run, (color, style) in zip(cmp.runs, styles, strict=True):
            if run.prices is not None and (market, outcome) in run.prices:
                rows = run.prices[(market, outcome)]
                ax.plot(rows.index, rows.to_numpy(), color=color, linestyle=style)
        ax.set_ylabel(f"{market}\nprice of {outcome}")
        ax.set_ylim(0, 1)
    activity = axes[-1]
    for run, (color, style) in zip(cmp.runs, styles, strict=True):
        rows = run.per_round[ACTIVITY]
        activity.plot(rows.index, rows.to_numpy(), color=color, linestyle=style, marker=".")
    activity.set_ylabel("acting agents")
    activity.set_xlabel("round")
    _mark_forks(cmp, axes)
    axes[0].legend(loc="best", fontsize="small")
    fig.savefig(path, dpi=100)
    return path


def _mark_forks(cmp: Comparison, axes) -> None:
    """A dashed line at every round where a compared history passes to a fork, with the
    labels of the runs forked at that round."""
    forked: dict[int, list[str]] = {}
    for run in cmp.runs:
        for r in run.fork_rounds:
            forked.setdefault(r, [])
        if run.fork_rounds:
            forked[run.fork_rounds[-1]].append(run.label)
    for ax in axes:
        for r in forked:
            ax.axvline(r, color="0.4", linestyle="--", linewidth=0.8)
    for r, labels in forked.items():
        axes[0].annotate(f"fork: {', '.join(labels)}", (r, 1), xycoords=("data", "axes fraction"),
                         xytext=(3, -3), textcoords="offset points", va="top", fontsize="small")

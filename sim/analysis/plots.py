"""Standard plots of runs, from the frames of `shoal.analysis` and the tables of `shoal.metrics`.

Every function returns a matplotlib Figure drawn on the Agg canvas (no pyplot state, so it
works in scripts, tests and servers alike; a notebook shows it as the cell's value), and
saves a PNG when given `path`. Frames with a `run` column (from `open_runs`) get one line
(or one panel column) per run. The run comparison uses the look of `shoal compare`
(`sim.compare.plot_comparison`): a colour and a dash per run, mean ± sd bands, dashed
lines at fork rounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure

from shoal.analysis import metrics

DASHES = ("-", "--", ":", "-.")
MEASURES = {  # polarization column -> axis label
    "sd": "sd of positions",
    "bimodality": "bimodality coefficient",
    "esteban_ray": "Esteban–Ray",
    "group_distance": "|mean(+) − mean(−)|",
}


def save(fig: Figure, path: str | Path | None, dpi: int = 100) -> Figure:
    """Write `fig` as a PNG to `path` (if given) and return it."""
    if path is not None:
        fig.savefig(Path(path), dpi=dpi, format="png")
    return fig


def _runs(df: pd.DataFrame) -> list:
    """The run labels of a frame in order (one None when it has no run column)."""
    return list(pd.unique(df["run"])) if "run" in df.columns else [None]


def _of(df: pd.DataFrame, run: object) -> pd.DataFrame:
    return df if run is None else df[df["run"] == run]


def belief_distribution(beliefs: pd.DataFrame, bins: int = 40,
                        topics: Sequence[str] | None = None, title: str | None = None,
                        path: str | Path | None = None) -> Figure:
    """The distribution of positions over rounds: per topic (rows) and run (columns), a
    heatmap of the share of agents in each of `bins` position bins of [−1, 1] per round
    (square-root colour scale, so thin spread-out rounds stay visible next to a
    consensus), with the mean position as a white line."""
    topics = list(topics) if topics is not None else list(pd.unique(beliefs["topic"]))
    runs = _runs(beliefs)
    fig = Figure(figsize=(4.5 * len(runs) + 1.5, 2.6 * len(topics)), layout="constrained")
    axes = fig.subplots(len(topics), len(runs), sharex=True, sharey=True, squeeze=False)
    edges = np.linspace(-1, 1, bins + 1)
    image = None
    norm = PowerNorm(0.5, vmin=0, vmax=1)
    for j, run in enumerate(runs):
        b = _of(beliefs, run)
        last = int(b["round"].max()) if len(b) else 0
        for i, topic in enumerate(topics):
            ax = axes[i, j]
            t = b[b["topic"] == topic]
            counts, _, _ = np.histogram2d(t["position"], t["round"],
                                          bins=[edges, np.arange(last + 2) - 0.5])
            share = counts / np.maximum(counts.sum(axis=0, keepdims=True), 1)
            image = ax.imshow(share, origin="lower", aspect="auto", cmap="viridis",
                              extent=(-0.5, last + 0.5, -1, 1), norm=norm)
            mean = t.groupby("round")["position"].mean()
            ax.plot(mean.index, mean.to_numpy(), color="white", linewidth=1.2,
                    label="mean")
            if j == 0:
                ax.set_ylabel(f"{topic}\nposition")
            if i == 0 and run is not None:
                ax.set_title(str(run), fontsize="small")
            if i == len(topics) - 1:
                ax.set_xlabel("round")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="share of agents")
    if title:
        fig.suptitle(title, fontsize="medium")
    return save(fig, path)


def polarization_over_time(pol: pd.DataFrame, measures: Sequence[str] = tuple(MEASURES),
                           title: str | None = None,
                           path: str | Path | None = None) -> Figure:
    """Polarization measures over rounds (from `metrics.polarization`): one panel per
    measure, one line per topic (and run). The bimodality panel marks 5/9, the value of a
    uniform distribution, above which a distribution is read as bimodal."""
    fig = Figure(figsize=(8, 2.2 * len(measures)), layout="constrained")
    axes = fig.subplots(len(measures), 1, sharex=True, squeeze=False)[:, 0]
    series = [(run, topic) for run in _runs(pol)
              for topic in pd.unique(_of(pol, run)["topic"])]
    for k, (run, topic) in enumerate(series):
        rows = _of(pol, run)
        rows = rows[rows["topic"] == topic].sort_values("round")
        label = topic if run is None else f"{run} · {topic}"
        for ax, measure in zip(axes, measures, strict=True):
            ax.plot(rows["round"], rows[measure], color=f"C{k % 10}",
                    linestyle=DASHES[k // 10 % 4], label=label)
    for ax, measure in zip(axes, measures, strict=True):
        ax.set_ylabel(MEASURES.get(measure, measure))
        if measure == "bimodality":
            ax.axhline(5 / 9, color="0.4", linestyle="--", linewidth=0.8)
    axes[-1].set_xlabel("round")
    axes[0].legend(loc="best", fontsize="small")
    if title:
        fig.suptitle(title, fontsize="medium")
    return save(fig, path)


def cascade_growth(growth: pd.DataFrame, title: str | None = None,
                   path: str | Path | None = None) -> Figure:
    """Cascade size over rounds (from `metrics.cascade_growth`), one line per root post."""
    fig = Figure(figsize=(8, 3.5), layout="constrained")
    ax = fig.subplots()
    keys = ["run", "root_id"] if "run" in growth.columns else ["root_id"]
    for k, (key, rows) in enumerate(growth.groupby(keys, sort=False)):
        key = key if isinstance(key, tuple) else (key,)
        label = f"post {key[-1]}" if len(key) == 1 else f"{key[0]}: post {key[-1]}"
        ax.step(rows["round"], rows["size"], where="post", color=f"C{k % 10}",
                linestyle=DASHES[k // 10 % 4], label=f"{label} (n={rows['size'].iloc[-1]})")
    ax.set_xlabel("round")
    ax.set_ylabel("cascade size (posts)")
    if len(growth):
        ax.legend(loc="upper left", fontsize="small")
    if title:
        fig.suptitle(title, fontsize="medium")
    return save(fig, path)


def compare_runs(beliefs: pd.DataFrame, fork_rounds: Mapping[str, Sequence[int]] | None = None,
                 topics: Sequence[str] | None = None, title: str | None = None,
                 path: str | Path | None = None) -> Figure:
    """Runs compared (frames of `open_runs`, with a run column): per topic, each run's
    mean position ± sd over rounds. `fork_rounds` (run → the rounds its history passes to
    a fork, as `Run.fork_rounds`) draws a dashed line at each run's own fork round."""
    if "run" not in beliefs.columns:
        beliefs = beliefs.assign(run="run")
    stats = metrics.belief_stats(beliefs)
    topics = list(topics) if topics is not None else list(pd.unique(stats["topic"]))
    runs = _runs(beliefs)
    fig = Figure(figsize=(9, 2.8 * len(topics)), layout="constrained")
    axes = fig.subplots(len(topics), 1, sharex=True, squeeze=False)[:, 0]
    for ax, topic in zip(axes, topics, strict=True):
        for k, run in enumerate(runs):
            rows = stats[(stats["run"] == run) & (stats["topic"] == topic)]
            x, mean, sd = rows["round"].to_numpy(), rows["mean"].to_numpy(), rows["sd"]
            color = f"C{k % 10}"
            ax.plot(x, mean, color=color, linestyle=DASHES[k % 4], label=str(run))
            ax.fill_between(x, mean - sd, mean + sd, color=color, alpha=0.08, linewidth=0)
        ax.set_ylabel(f"{topic}\nmean ± sd")
    axes[-1].set_xlabel("round")
    _mark_forks(axes, fork_rounds or {})
    axes[0].legend(loc="best", fontsize="small")
    if title:
        fig.suptitle(title, fontsize="medium")
    return save(fig, path)


def _mark_forks(axes: Sequence[Axes], fork_rounds: Mapping[str, Sequence[int]]) -> None:
    """A dashed line at each run's own fork round, labelled with the runs forked there."""
    forked: dict[int, list[str]] = {}
    for run, rounds in fork_rounds.items():
        if rounds:
            forked.setdefault(int(rounds[-1]), []).append(str(run))
    for ax in axes:
        for r in forked:
            ax.axvline(r, color="0.4", linestyle="--", linewidth=0.8)
    for r, runs in forked.items():
        axes[0].annotate(f"fork: {', '.join(runs)}", (r, 1), xycoords=("data", "axes fraction"),
                         xytext=(3, -3), textcoords="offset points", va="top",
                         fontsize="small")


def price_paths(prices: pd.DataFrame, interventions: Sequence[int] = (),
                fork_rounds: Sequence[int] = (), path: str | Path | None = None) -> Figure:
    """Per market, the price of each outcome over rounds (a `prices` table); dotted
    lines mark the rounds interventions fired, dashed grey ones fork rounds."""
    markets = list(pd.unique(prices["market"]))
    fig = Figure(figsize=(9, 2.6 * max(len(markets), 1)), layout="constrained")
    axes = fig.subplots(max(len(markets), 1), 1, sharex=True, squeeze=False)[:, 0]
    for ax, market in zip(axes, markets, strict=False):
        rows = prices[prices["market"] == market]
        for outcome in pd.unique(rows["outcome"]):
            line = rows[rows["outcome"] == outcome].sort_values("round")
            ax.plot(line["round"], line["price"], label=str(outcome))
        for r in interventions:
            ax.axvline(r, color="C3", linestyle=":", linewidth=1.0)
        for r in fork_rounds:
            ax.axvline(r, color="0.4", linestyle="--", linewidth=0.8)
        ax.set_ylim(0, 1)
        ax.set_ylabel(f"{market}\nprice")
        ax.legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("round")
    return save(fig, path)


def effect_over_rounds(effects: pd.DataFrame, metrics_shown: Sequence[str] | None = None,
                       interval: str = "boot", branch_round: int | None = None,
                       title: str | None = None, path: str | Path | None = None) -> Figure:
    """An experiment's paired effects over rounds (`Experiment.effects_by_round`): one
    panel per metric, per treatment arm its mean difference from the control as a line
    and its interval (`interval`: "boot" for the bootstrap columns, "t" for the t ones)
    as a band; a zero line, and a dashed line at the branch round."""
    if interval not in ("boot", "t"):
        raise ValueError(f"interval must be 'boot' or 't', got {interval!r}")
    shown = list(metrics_shown) if metrics_shown is not None else \
        list(pd.unique(effects["metric"]))
    arms = list(pd.unique(effects["arm"]))
    cols = min(2, max(1, len(shown)))
    rows = -(-len(shown) // cols)
    fig = Figure(figsize=(5.2 * cols, 2.6 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, squeeze=False).ravel()
    for ax, metric in zip(axes, shown, strict=False):
        for k, arm in enumerate(arms):
            arm_rows = effects[(effects["arm"] == arm) & (effects["metric"] == metric)]
            x = arm_rows["round"].to_numpy()
            color = f"C{k % 10}"
            ax.plot(x, arm_rows["mean_diff"], color=color, linestyle=DASHES[k % 4],
                    label=arm)
            ax.fill_between(x, arm_rows[f"{interval}_low"], arm_rows[f"{interval}_high"],
                            color=color, alpha=0.18, linewidth=0)
        ax.axhline(0, color="0.3", linewidth=0.7)
        if branch_round is not None:
            ax.axvline(branch_round, color="0.4", linestyle="--", linewidth=0.8)
        ax.set_title(metric, fontsize="medium")
        ax.set_ylabel("treatment − control")
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    for ax in axes[max(0, len(shown) - cols):len(shown)]:
        ax.set_xlabel("round")
    if arms:
        axes[0].legend(loc="best", fontsize="small")
    if title:
        fig.suptitle(title, fontsize="medium")
    return save(fig, path)

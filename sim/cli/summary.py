"""The one-screen summary printed after a run, computed from its DuckDB file."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
from rich.console import Group
from rich.table import Table
from rich.text import Text

from shoal.analysis.fidelity import summary_lines as fidelity_lines
from shoal.store.checkpoints import CheckpointError, CheckpointStore
from shoal.store.llm_usage import ModeOutcomes, Usage, outcomes_by_mode, token_drift

STOPPED = "round_stopped"  # `llm_calls.outcome` of the calls of a round that stopped


def _checkpoints_line(store: CheckpointStore) -> str:
    """Kept states, total sizes, and the per-round cost (from the kept states' metadata)."""
    rounds = store.available()
    if not rounds:
        return "none"
    logs, states = store.size_bytes()
    metas, damaged = [], []
    for r in [r for r in rounds if r > 0] or rounds[:1]:
        try:
            metas.append(store.meta(r))
        except CheckpointError:  # (a resume passed over it: the run is whole)
            damaged.append(str(r))
    line = (f"{len(rounds)} kept (rounds {rounds[0]}..{rounds[-1]}), logs {logs / 1e6:.1f} MB "
            f"+ states {states / 1e6:.1f} MB")
    if metas:
        ms = sum(m["ms"] for m in metas) / len(metas)
        per = sum(m["log_bytes"] + m["state_bytes"] for m in metas) / len(metas)
        line += f"; per round {per / 1e3:,.0f} kB in {ms:.0f} ms"
    if damaged:
        line += f"; damaged: round {', '.join(damaged)}"
    return line


def summarize(root: Path, wall_seconds: float | None = None, rounds_run: int | None = None
              ) -> Group:
    """Counts, activity by action, belief change per topic, timing, file and checkpoint
    sizes of the run directory `root`. The throughput counts the `rounds_run` rounds of
    `wall_seconds` (default: every round of the run)."""
    db = Path(root) / "trajectory.duckdb"
    con = duckdb.connect(str(db), read_only=True)
    try:
        run_id, seed = con.execute("SELECT run_id, seed FROM run").fetchone()
        n_agents = con.execute("SELECT count(*) FROM agents").fetchone()[0]
        rounds, steps, exposures = con.execute(
            "SELECT count(*), coalesce(sum(n_acting), 0), coalesce(sum(n_exposures), 0) "
            "FROM rounds").fetchone()
        compute_ms = con.execute(
            "SELECT coalesce(sum(ms_schedule + ms_observe + ms_context + ms_decide + ms_apply "
            "+ ms_update "
            "+ ms_log), 0) FROM rounds").fetchone()[0]
        acts = con.execute(
            "SELECT platform::VARCHAR, action::VARCHAR, count(*) FILTER (WHERE status = 'ok'), "
            "count(*) FILTER (WHERE status <> 'ok') FROM actions GROUP BY platform, action "
            "ORDER BY platform, action"
        ).fetchall()
        beliefs = con.execute(
            "SELECT topic, round, avg(position), stddev_pop(position), avg(confidence) "
            "FROM beliefs WHERE round IN (0, (SELECT max(round) FROM beliefs)) "
            "GROUP BY ALL ORDER BY topic, round").fetchall()
        n_posts = con.execute("SELECT count(*) FROM posts").fetchone()[0]
        cols = [c for c in ("round", "agent", "platform", "status", "outcome",
                            "fallback_reason", "prompt_tokens", "completion_tokens", "cache",
                            "saved_usd", "wait_ms", "output", "counted_prompt_tokens",
                            "cached_tokens") if c in _columns(con, "llm_calls")]
        calls = con.execute(f"SELECT {', '.join(cols)} FROM llm_calls").df()
        # The calls of a round that stopped (no answer at all) stay logged, but that round
        # was dropped and run again: its calls neither failed a turn nor fell back one.
        stopped = _text(calls, "outcome") == STOPPED
        usage = Usage.of(calls[~stopped])
        spent = Usage.of(calls)  # tokens of every request sent, the stopped ones too
        counted = f" FILTER (WHERE outcome IS DISTINCT FROM '{STOPPED}')" \
            if "outcome" in cols else ""
        cost, latency = con.execute(f"SELECT coalesce(sum(cost_usd), 0), coalesce("
                                    f"median(latency_ms){counted}, 0) FROM llm_calls"
                                    ).fetchone()
        waited = (con.execute("SELECT count(*) FILTER (WHERE wait_ms > 0), "
                              "coalesce(sum(wait_ms), 0) FROM llm_calls").fetchone()
                  if "wait_ms" in cols else (0, 0.0))
        markets = _markets(con)
    finally:
        con.close()

    head = Table.grid(padding=(0, 2))
    head.add_row("run", f"[bold]{run_id}[/]")
    head.add_row("agents × rounds", f"{n_agents:,} × {rounds}   (seed {seed})")
    head.add_row("posts, exposures", f"{n_posts:,} posts, {exposures:,} feed items shown")
    secs = wall_seconds if wall_seconds is not None else compute_ms / 1e3
    ran = rounds if rounds_run is None else rounds_run
    rate = (n_agents * ran) / secs if secs > 0 and ran else float("nan")
    head.add_row("time", f"{secs:.1f} s wall, {rate:,.0f} agent-steps/s "
                         f"({steps:,} agent-rounds acted)")
    size = db.stat().st_size + (db.with_suffix(".duckdb.wal").stat().st_size
                                if db.with_suffix(".duckdb.wal").exists() else 0)
    head.add_row("trajectory", Text(f"{db}  ({size / 1e6:.1f} MB)"))  # a path: not markup
    head.add_row("checkpoints", _checkpoints_line(CheckpointStore(Path(root) / "checkpoints")))
    if spent.requests:
        retried = f" ({usage.requests:,} HTTP requests)" if usage.retries else ""
        head.add_row("LLM calls", f"{usage.calls:,} calls{retried}, {usage.failed:,} failed, "
                                  f"{usage.invalid:,} invalid replies; {usage.turns:,} turns, "
                                  f"{usage.fallbacks:,} fell back; median latency "
                                  f"{latency:.0f} ms")
        if stopped.any():
            rounds = sorted({int(r) for r in calls.loc[stopped, "round"].dropna()})
            head.add_row("LLM stopped", f"{int(stopped.sum()):,} requests of round(s) "
                                        f"{', '.join(map(str, rounds))}, which got no answer "
                                        "and stopped the run: nothing of them was applied "
                                        "(not counted above; their tokens and cost are)")
        head.add_row("LLM tokens, cost", f"{spent.prompt_tokens:,} prompt + "
                                         f"{spent.completion_tokens:,} completion tokens, "
                                         f"about ${cost:.4f}")
        for line in _mode_lines(calls):
            head.add_row("LLM output", line)
        drift = token_drift(calls)
        if drift is not None:
            ours, theirs = drift
            head.add_row("LLM token count", f"Shoal counted {ours:,} prompt tokens where the "
                         f"server counted {theirs:,} (drift {ours / max(1, theirs) - 1:+.1%})")
        cached = pd.to_numeric(calls.get("cached_tokens"), errors="coerce").sum() \
            if "cached_tokens" in calls else 0
        if cached:
            head.add_row("LLM prefix cache", f"the server reused {int(cached):,} of "
                         f"{spent.prompt_tokens:,} prompt tokens from its cache "
                         f"({cached / max(1, spent.prompt_tokens):.0%})")
        if usage.cache_hits or usage.cache_misses:
            head.add_row("LLM cache", f"{usage.cache_hits:,} hits, {usage.cache_misses:,} "
                                      f"misses; saved about ${usage.saved_usd:.4f}")
        if waited[0]:
            head.add_row("LLM limits", f"{waited[0]:,} requests waited for an endpoint's "
                                       f"limits, {waited[1] / 1e3:.1f} s in all")

    # LLM agents' fidelity (stances against beliefs, text, refusals; none for rule runs)
    for label, line in fidelity_lines(db):
        head.add_row(label, line)

    act_table = Table(title="actions", title_justify="left", box=None, padding=(0, 1))
    for col in ("platform", "action", "applied", "rejected"):
        act_table.add_column(col, justify="right" if col in ("applied", "rejected") else "left")
    for platform, action, ok, bad in acts:
        act_table.add_row(platform, action, f"{ok:,}", f"{bad:,}" if bad else "")

    bel = Table(title="beliefs (first → last round)", title_justify="left", box=None,
                padding=(0, 1))
    for col in ("topic", "mean", "spread (sd)", "confidence"):
        bel.add_column(col)
    by_topic: dict[str, list] = {}
    for topic, _, mean, sd, conf in beliefs:
        by_topic.setdefault(topic, []).append((mean, sd, conf))
    for topic, rows in by_topic.items():
        first, last = rows[0], rows[-1]
        bel.add_row(topic, f"{first[0]:+.2f} → {last[0]:+.2f}", f"{first[1]:.2f} → {last[1]:.2f}",
                    f"{first[2]:.2f} → {last[2]:.2f}")
    parts = [head, Text(""), act_table, Text(""), bel, Text("")]
    if markets:
        mk = Table(title="markets (price first → last round)", title_justify="left", box=None,
                   padding=(0, 1))
        for col in ("market", "outcome", "price", "volume", "resolved"):
            mk.add_column(col, justify="right" if col == "volume" else "left")
        for market, outcome, first, last, volume, resolved in markets:
            mk.add_row(market, outcome, f"{first:.2f} → {last:.2f}", f"{volume:,.0f}",
                       "✓" if resolved == outcome else "")
        parts += [mk, Text("")]
    return Group(*parts)


def _text(df: pd.DataFrame, col: str) -> pd.Series:
    """A text column with missing values (or a missing column) as ""."""
    return df[col].fillna("").astype(str) if col in df else pd.Series("", index=df.index)


def _columns(con, table: str) -> set[str]:
    """The columns a table of the file has (older runs lack newer ones)."""
    return {c for (c,) in con.execute("SELECT column_name FROM information_schema.columns "
                                      "WHERE table_name = ?", [table]).fetchall()}


def _markets(con) -> list[tuple]:
    """Per market outcome: first and last price, volume, and the resolved outcome (none
    for runs without markets, or written before Shoal had them)."""
    try:
        return con.execute(
            "SELECT p.market, p.outcome, arg_min(price, round), arg_max(price, round), "
            "sum(volume), any_value(r.outcome) FROM prices p LEFT JOIN (SELECT market, "
            "outcome FROM payouts WHERE agent = -1) r USING (market) GROUP BY ALL "
            "ORDER BY p.market, min(rowid)").fetchall()
    except duckdb.CatalogException:
        return []


def open_hint(root: Path) -> str:
    """How to open the run's trajectory in Python (print it unwrapped: the path must stay
    whole to be copied)."""
    return f"open it: duckdb.connect({str(Path(root) / 'trajectory.duckdb')!r}, read_only=True)"


def _mode_lines(calls) -> list[str]:
    """One line per output mode: the turns asked in it and how they ended."""
    return [_mode_line(m) for m in outcomes_by_mode(calls)]


def _mode_line(m: ModeOutcomes) -> str:
    fell = sum(m.fallbacks.values())
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(m.fallbacks.items(),
                                                       key=lambda kv: -kv[1])[:3])
    refused = f"; the server refused {m.refusals}" if m.refusals else ""
    return (f"{m.mode}: {m.turns:,} turns, {m.valid:,} valid at once, {m.repaired:,} "
            f"repaired, {fell:,} fell back" + (f" ({reasons})" if fell else "") + refused)

"""`shoal analyse` and batch `shoal interview --agents`: parsing and printing (the work is
in shoal.analyst and shoal.runs.interview, imported when a command runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from shoal.cli.console import console, out, print_whole
from shoal.core.errors import InputError


def add_parser(sub) -> None:
    """Register `shoal analyse`."""
    p = sub.add_parser("analyse", aliases=["analyze"],
                       help="an LLM analyst writes a report on a run, every claim cited "
                            "and checked")
    p.add_argument("run", help="run directory (or run id under runs/)")
    p.add_argument("--question", help="a question the report must answer")
    p.add_argument("--compare", nargs="+", metavar="RUN", default=[],
                   help="runs to compare with (e.g. forks), labelled B, C, ...")
    p.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: the run's "
                                      "provider; 'loopback' for a dry run)")
    p.add_argument("--model", help="the model (default: the run's)")
    p.add_argument("--api-key-env", help="NAME of the environment variable holding the key")
    p.add_argument("--tool-calls", type=int, default=8, metavar="N",
                   help="tool calls per section (default: 8)")
    p.add_argument("--deadline", type=float, default=300.0, metavar="SECONDS",
                   help="time allowed per section (default: 300)")
    p.add_argument("--parallel", type=int, default=4, metavar="K",
                   help="sections written at once (default: 4)")
    p.add_argument("--query-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="time allowed one SQL query of the analyst (default: 30)")
    p.add_argument("--memory-limit", type=int, default=1024, metavar="MB",
                   help="memory the analyst's queries may use (default: 1024)")
    p.add_argument("--out", metavar="FILE.md",
                   help="the Markdown (default: <analysis id>.md in the run directory)")
    p.add_argument("--retry-section", nargs="?", const="unfinished", metavar="SECTION",
                   help="write again the unfinished sections of an analysis (or the one "
                        "named), keeping the finished ones")
    p.add_argument("--analysis", metavar="ID",
                   help="the analysis to retry or delete (default: the latest)")
    p.add_argument("--list", action="store_true", help="list the run's analyses")
    p.add_argument("--delete", metavar="ID", help="delete an analysis and its whole trace")
    p.set_defaults(func=cmd_analyse)


def cmd_analyse(args: argparse.Namespace) -> int:
    """`shoal analyse RUN`."""
    from shoal.analyst.analyst import (
        AnalysisInterrupted,
        Settings,
        analyse,
        delete_analysis,
        retry_sections,
    )

    if args.list:
        return _list(args.run)
    if args.delete:
        steps = delete_analysis(args.run, args.delete)
        console.print(f"deleted analysis {args.delete} ({steps} steps)")
        return 0
    if args.analysis and not args.retry_section:
        raise InputError(f"--analysis {args.analysis}: names the analysis to retry or "
                         "delete; give --retry-section (or --delete ID)")
    settings = Settings(args.tool_calls, args.deadline, args.parallel,
                        query_timeout_s=args.query_timeout, memory_limit_mb=args.memory_limit)
    settings.check()
    if args.out and not args.out.lower().endswith(".md"):
        raise InputError(f"--out {args.out}: the analysis is Markdown; give a .md file name")
    if args.out and not Path(args.out).resolve().parent.is_dir():  # before anything is paid
        raise InputError(f"--out {args.out}: no such folder {Path(args.out).parent}")
    try:
        if args.retry_section:
            result = retry_sections(args.run, args.analysis, args.retry_section,
                                    args.base_url, args.model, args.api_key_env, settings,
                                    args.out)
        else:
            result = analyse(args.run, args.question, args.compare, args.base_url,
                             args.model, args.api_key_env, settings, args.out)
    except AnalysisInterrupted as exc:
        console.print(f"[yellow]interrupted[/]: {escape(str(exc))}", highlight=False)
        return 130
    table = Table(box=None)
    for col in ("section", "attempt", "status", "tool calls", "error"):
        table.add_column(col)
    for r in result.sections.sort_values("position").itertuples():
        kept = " (kept)" if r.section_id in result.reused else ""
        table.add_row(escape(r.section_id), f"{r.attempt}{kept}", r.status,
                      str(r.tool_calls), escape(_shown(r.error))[:80])
    print_whole(table)
    out.print(f"analysis {result.analysis_id}: {result.status}; {result.claims} claims, "
              f"{result.unverified} unverified; cost ${result.cost_usd:.4f}; "
              f"{result.seconds:.1f} s", highlight=False)
    console.print(f"markdown → {escape(str(result.markdown))}; `shoal report` shows it "
                  "with its evidence")
    return 0 if result.status == "done" else 4


def _list(run: str) -> int:
    from shoal.analysis.analyses import analyses
    from shoal.store.run_dir import open_run_dir

    df = analyses(open_run_dir(run).db)
    if df.empty:
        console.print("no analyses")
        return 0
    table = Table(box=None)
    for col in ("analysis", "created", "status", "sections", "claims", "unverified", "model",
                "question"):
        table.add_column(col)
    for r in df.itertuples():
        table.add_row(r.analysis_id, f"{r.created_at:%Y-%m-%d %H:%M}", r.status,
                      _shown(r.sections), _shown(r.claims), _shown(r.unverified),
                      escape(_shown(r.model)),
                      escape(_shown(r.question, "(no question)"))[:60])
    print_whole(table)
    return 0


def _shown(value: object, missing: str = "") -> str:
    """A listed value: empty (or `missing`) where the row has none, never `nan`."""
    import pandas as pd

    if value is None or value is pd.NA or value is pd.NaT or (
            isinstance(value, float) and value != value):
        return missing
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) or missing


def interview_many(args: argparse.Namespace) -> int:
    """`shoal interview RUN --agents SELECTOR "question"`."""
    from shoal.runs.interview import interview_agents

    if args.concurrency is not None and args.concurrency < 1:
        raise InputError(f"--concurrency {args.concurrency}: at least 1")
    if args.deadline is not None and not args.deadline > 0:
        raise InputError(f"--deadline {args.deadline:g}: must be positive")
    # (the selector's text: its id ranges are checked against the population before
    # they are expanded)
    batch = interview_agents(args.run, args.agents, args.question, args.round,
                             args.base_url, args.model, args.api_key_env, args.concurrency,
                             args.deadline)
    rows = batch.rows
    ok = rows[rows["status"] == "ok"]
    table = Table(box=None)
    for col in ("agent", "status", "answer"):
        table.add_column(col, overflow="fold")
    for r in rows.itertuples():
        table.add_row(str(r.agent), r.status, escape(r.answer or r.error))
    print_whole(table)
    where = ("kept in the run's `interviews` table" if batch.stored
             else "NOT kept: the run is being written")
    out.print(f"batch {batch.batch_id}: {len(ok)}/{len(rows)} answered as of the end of round "
              f"{batch.round}; {int(rows['prompt_tokens'].sum()):,} prompt + "
              f"{int(rows['completion_tokens'].sum()):,} completion tokens, "
              f"${rows['cost_usd'].sum():.4f}; {batch.seconds:.1f} s; {where}",
              highlight=False)
    return 0 if len(ok) == len(rows) else 3

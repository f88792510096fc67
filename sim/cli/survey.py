"""`shoal survey RUN`: the LLM respondents of a run's surveys answer, and the results."""

from __future__ import annotations

import argparse
import math

from rich.markup import escape
from rich.table import Table

from shoal.cli.console import console, out, print_whole
from shoal.core.errors import InputError


def add_parser(sub) -> None:
    """Register `shoal survey`."""
    p = sub.add_parser("survey", help="the LLM respondents of a run's surveys answer; print "
                                      "scale scores, alpha, abstention and change")
    p.add_argument("run", help="run directory (or run id under runs/)")
    p.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: the run's "
                                      "provider; 'loopback' for a dry run)")
    p.add_argument("--model", help="the model (default: the run's)")
    p.add_argument("--api-key-env", help="NAME of the environment variable holding the key")
    p.add_argument("--concurrency", type=int, help="calls in flight (default: the provider's)")
    p.add_argument("--results-only", action="store_true",
                   help="ask nobody; print the results of what was answered")
    p.set_defaults(func=cmd_survey)


def cmd_survey(args: argparse.Namespace) -> int:
    """`shoal survey RUN`."""
    from shoal.analysis.notebook import open_run

    if args.concurrency is not None and args.concurrency < 1:
        raise InputError(f"--concurrency {args.concurrency}: at least 1")
    run = open_run(args.run)
    if not run.config.get("surveys"):
        raise InputError(f"{run.run_id}: the run's config has no surveys")
    if not args.results_only and (run.config.get("llm") or args.base_url):
        from shoal.surveys.asking import survey_llm_agents

        asked = survey_llm_agents(args.run, args.base_url, args.model, args.api_key_env,
                                  args.concurrency).asked
        for r in asked.itertuples():
            what = "already answered" if r.skipped else (
                f"{r.answered}/{r.agents} LLM agents answered")
            console.print(f"{r.survey} wave {r.wave} (round {r.round}): {what}")
        run = open_run(args.run)
    _samples(run.meta.get("surveys") or [])
    _print("scale scores (reverse-coded items, listwise) and Cronbach's alpha",
           run.survey_scales())
    _print("within-respondent change between waves (95% t interval)", run.survey_change())
    ab = run.survey_abstention()
    _print("abstention by wave", ab.groupby(["survey", "wave", "round"], as_index=False)[
        ["asked", "abstained"]].sum().assign(rate=lambda d: d["abstained"] / d["asked"]))
    return 0


def _samples(samples: list[dict]) -> None:
    """Each survey's sample as drawn when the run started (run.json), and a warning for
    one that is smaller than the size asked for."""
    if not samples:
        return
    out.print("[bold]samples (drawn when the run started)[/]")
    table = Table(box=None)
    for col in ("survey", "size asked", "pool", "drawn"):
        table.add_column(col, justify="left" if col == "survey" else "right")
    for s in samples:
        table.add_row(s["survey"], "all" if s["size"] is None else str(s["size"]),
                      str(s["pool"]), str(s["drawn"]))
    print_whole(table)
    for s in samples:
        if s["size"] is not None and s["size"] > s["pool"]:
            console.print(f"[yellow]warning[/]: survey {escape(s['survey'])}: {s['size']} "
                          f"respondents asked for, but only {s['pool']} agents could be "
                          f"drawn; the sample is all {s['pool']} of them", highlight=False)


def _print(title: str, df) -> None:
    out.print(f"[bold]{title}[/]")
    if df.empty:
        out.print("  (none)")
        return
    table = Table(box=None)
    for col in df.columns:
        table.add_column(str(col), justify="right" if df[col].dtype.kind in "fi" else "left")
    for row in df.itertuples(index=False):  # (what cannot be estimated: the note says why)
        table.add_row(*(("n/a" if math.isnan(v) else f"{v:.3f}") if isinstance(v, float)
                        else str(v) for v in row))
    print_whole(table)

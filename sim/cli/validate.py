"""`shoal validate [CASE...]`: run the validation cases and print their verdicts."""

from __future__ import annotations

import argparse
from datetime import datetime

from rich.markup import escape
from rich.table import Table

from shoal.cli.console import console, out, print_whole


def add_parser(sub) -> None:
    """Register `shoal validate`."""
    p = sub.add_parser("validate", help="hold the simulation against real data and "
                                        "published effects (docs/validation.md)")
    p.add_argument("cases", nargs="*", metavar="CASE", help="cases to run (default: all)")
    p.add_argument("--list", action="store_true", help="list the cases and their sources")
    p.add_argument("--quick", action="store_true",
                   help="the reduced size CI runs (fewer agents, rounds and replicates)")
    p.add_argument("--out", metavar="DIR",
                   help="folder for the runs, results.csv, results.json and index.html "
                        "(default: runs/validation-<time>)")
    p.add_argument("--llm", metavar="CONFIG",
                   help="also run every case with LLM agents: a YAML file whose `llm:` "
                        "(and `memory:`) sections are laid over each case's scenario")
    p.add_argument("--seed", type=int, default=0, help="first seed (default: 0)")
    p.add_argument("--replicates", type=int, metavar="N",
                   help="replicates per case (default: each case's own)")
    p.add_argument("--parallel", type=int, metavar="K", help="cases at once (default: CPUs)")
    p.add_argument("--address", help="Ray cluster address ('auto' joins a running cluster)")
    p.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    """`shoal validate`: exit 0 when every case passes, 1 when one fails."""
    from shoal.validation.case import CASES, CaseResult
    from shoal.validation.runner import select, validate

    if args.list:
        table = Table(box=None)
        for col in ("case", "title", "source"):
            table.add_column(col, overflow="fold")
        for name in select(args.cases):
            impl = CASES.get(name).impl
            table.add_row(name, impl.title, impl.source)
        print_whole(table)
        return 0

    def on_case(result: CaseResult, done: int, total: int) -> None:
        colour = {"pass": "green", "fail": "red", "error": "yellow"}[result.verdict]
        console.print(f"  [{done}/{total}] {escape(result.case)} ({result.agents} agents): "
                      f"[{colour}]{result.verdict}[/] in {result.seconds:.0f} s",
                      highlight=False)

    folder = args.out or f"runs/validation-{datetime.now():%Y%m%d-%H%M%S}"
    if args.address:  # before anything is made: no cluster there, nothing written
        from shoal.engine.executors import probe_ray_address

        probe_ray_address(args.address)
    done = validate(args.cases, folder, args.quick, args.seed, args.replicates, args.llm,
                    args.parallel, args.address, on_case)
    table = Table(box=None)
    for col in ("case", "agents", "measure", "simulated", "target", "must hold", ""):
        table.add_column(col, overflow="fold")
    for r in done.results:
        if r.error:
            table.add_row(r.case, r.agents, "", "", "", escape(r.error), "[yellow]error[/]")
        for c in r.checks:
            shown = f"{c.simulated:.4g}" + (
                f" [{c.interval[0]:.3g}, {c.interval[1]:.3g}]" if c.interval else "")
            table.add_row(r.case, r.agents, escape(c.measure), shown,
                          "—" if c.target is None else f"{c.target:.4g}", escape(c.tolerance),
                          "[green]pass[/]" if c.passed else "[red]FAIL[/]")
    print_whole(table)
    passed = sum(r.passed for r in done.results)
    out.print(f"{passed} of {len(done.results)} case runs pass; {done.seconds:.0f} s",
              highlight=False)
    console.print(f"results → {done.out} (results.csv, results.json, index.html)")
    return 0 if done.passed else 1

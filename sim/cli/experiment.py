"""`shoal experiment CONFIG` and `shoal experiment --resume DIR`: run a config's
experiment section (docs/experiments.md) and print the paired effects."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from shoal.cli.console import console, out, print_whole
from shoal.core.errors import InputError


def add_parser(sub) -> None:
    """The `experiment` command (its module is light: the work is imported when it
    runs)."""
    p = sub.add_parser("experiment", help="run a config's experiment: arms compared in "
                                          "pairs over replicates, on Ray")
    p.add_argument("config", nargs="?", help="YAML config file with an experiment section")
    p.add_argument("--resume", metavar="DIR",
                   help="continue a stopped experiment: finished units are kept, the others "
                        "run again (no CONFIG then)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field, e.g. --set experiment.replicates=4 "
                        "(repeatable)")
    p.add_argument("--rounds", type=int, help="override the number of rounds")
    p.add_argument("--out", default="runs",
                   help="folder for the experiment directory (default: runs)")
    p.add_argument("--parallel", type=int, metavar="K",
                   help="runs at once (default: the Ray cluster's CPUs)")
    p.add_argument("--address", help="Ray cluster address ('auto' joins a running cluster)")
    p.add_argument("--quiet", action="store_true", help="no line per finished run")
    p.set_defaults(func=cmd_experiment)


def effects_table(rows: list[list[str]], headers: list[str]) -> Table:
    """The effects as a table: one row per treatment arm and metric."""
    table = Table(box=None)
    for i, head in enumerate(headers):
        table.add_column(head, justify="right" if i >= 2 else "left")
    for row in rows:
        table.add_row(*row)
    return table


def cmd_experiment(args: argparse.Namespace) -> int:
    """Plan (or reopen) an experiment, run its units on Ray, print the effects."""
    from shoal.analysis.experiments import (
        EFFECT_HEADERS,
        EXPERIMENT_FILE,
        effects_rows,
        small_sample_warnings,
    )
    from shoal.runs.experiment import (
        plan_experiment,
        reopen_experiment,
        run_experiment,
        start_experiment,
    )

    if args.parallel is not None and args.parallel < 1:  # (before anything is written)
        raise InputError(f"--parallel {args.parallel}: must be >= 1")
    if args.address:  # (no cluster there: nothing planned, nothing written)
        from shoal.engine.executors import probe_ray_address

        probe_ray_address(args.address)
    if args.resume is not None:
        if args.config is not None or args.set or args.rounds is not None:
            raise InputError("--resume DIR continues an experiment as it was planned; give "
                             "no CONFIG, --set or --rounds with it")
        root, spec, kept = reopen_experiment(args.resume)
        total = len(spec["units"])
        console.print(f"resume experiment [bold]{escape(root.name)}[/]: {kept} of {total} runs "
                      "finished" + (", the others run now" if kept < total else
                                    "; nothing is left to run"))
    else:
        if args.config is None:
            raise InputError("give a CONFIG (with an experiment section), or --resume DIR")
        sets = list(args.set or [])
        if args.rounds is not None:
            sets.append(f"rounds={args.rounds}")
        plan = plan_experiment(args.config, sets, args.out)
        spec = plan.spec
        arms = len(spec["arms"])
        n = spec["replicates"]
        bases = n if spec["branch_round"] > 0 else 0
        console.print(f"experiment [bold]{plan.root.name}[/]: {arms} arms × {n} "
                      f"replicate(s), branching at round {spec['branch_round']} = "
                      f"{bases + arms * n} runs → {escape(str(plan.root))}", highlight=False)
        _warn(plan.notes)
        root, spec = start_experiment(plan)

    def on_unit(record: dict, done: int, total: int) -> None:
        if args.quiet and record["status"] == "finished":
            return
        what = f"replicate {record['replicate']} (seed {record['seed']}), " + (
            f"arm {record['arm']}" if record["kind"] == "arm" else "base run")
        if record["status"] == "finished":
            console.print(f"  [{done}/{total}] {what} → {record['run']} "
                          f"({record['seconds']:.1f} s)", highlight=False, markup=False)
        else:
            console.print(f"  [{done}/{total}] {what}: [red]failed[/]: "
                          f"{escape(str(record['error']))}", highlight=False)

    try:
        result = run_experiment(root, spec, parallel=args.parallel, address=args.address,
                                on_unit=on_unit)
    except KeyboardInterrupt:
        console.print("[yellow]stopped[/]; continue with: shoal experiment --resume "
                      f"{escape(str(root))}",
                      highlight=False)
        raise
    exp = result.experiment
    out.print(f"paired effects at the end (treatment − control arm {exp.control!r}, same "
              f"seed; n replicates per row); var ratio = var(paired differences) / "
              f"(var(treatment) + var(control))", highlight=False, soft_wrap=True)
    print_whole(effects_table(effects_rows(exp.effects), EFFECT_HEADERS))
    ratios = exp.effects["pairing_ratio"].dropna()
    if len(ratios):
        out.print(f"pairing variance ratio: median {ratios.median():.3f} (range "
                  f"{ratios.min():.3f}..{ratios.max():.3f})", highlight=False)
    _warn(small_sample_warnings(exp.effects))
    units = spec["units"]
    console.print(f"{len(units) - len(result.failed)}/{len(units)} runs in "
                  f"{result.seconds:.1f} s; tables and report → {root} "
                  f"({', '.join(p.name for p in result.files)})", highlight=False)
    if result.failed:
        console.print(f"[red]{len(result.failed)} run(s) failed[/] (see {EXPERIMENT_FILE}); "
                      f"after fixing the cause: shoal experiment --resume {root}",
                      highlight=False)
        return 2 if all(u.get("input_error") for u in result.failed) else 1
    return 0


def _warn(notes: list[str]) -> None:
    for note in notes:
        console.print(f"[yellow]warning[/]: {escape(note)}", highlight=False)

"""`shoal sweep`: plan and run a sweep, print its summary table."""

from __future__ import annotations

import pandas as pd
from rich.markup import escape
from rich.table import Table

from shoal.analysis.sweeps import LEVEL, SUMMARY_FILE, SWEEP_FILE
from shoal.cli.console import console, out, print_whole
from shoal.core.errors import InputError
from shoal.engine.executors import probe_ray_address
from shoal.runs.sweep import plan_sweep, reopen_sweep, run_sweep


def summary_table(summary: pd.DataFrame, grid_keys: list[str]) -> Table:
    """Metrics as rows, grid points as columns; each cell mean ± half-width of the 95%
    t-interval, and "(n = k)" when it rests on fewer members than the point's n (the
    metric is NaN in the others)."""
    table = Table(box=None)
    table.add_column("metric")
    for row in summary.itertuples(index=False):
        values = dict(zip(summary.columns, row, strict=True))
        head = ", ".join(f"{k}={values[k]}" for k in grid_keys) or "all members"
        table.add_column(head, justify="right")
    metrics = [c[: -len(".mean")] for c in summary.columns if c.endswith(".mean")]
    for m in metrics:
        cells = []
        for _, r in summary.iterrows():
            mean, low, high = r[f"{m}.mean"], r[f"{m}.ci95_low"], r[f"{m}.ci95_high"]
            k = r.get(f"{m}.n", r["n"])  # (a summary.csv written before the column)
            fewer = f" (n = {int(k)})" if pd.notna(k) and k < r["n"] else ""
            if pd.isna(mean):
                cells.append("—")
            elif pd.isna(low):
                cells.append(f"{mean:.3f}{fewer}")
            else:
                cells.append(f"{mean:.3f} ± {(high - low) / 2:.3f}{fewer}")
        table.add_row(m, *cells)
    return table


def sweep(args) -> int:
    """`shoal sweep CONFIG --seeds N [--grid key=v1,v2 ...]`, or `shoal sweep --resume
    DIR`."""
    resumed = None
    if args.resume is not None:
        if args.config is not None or args.seeds is not None or args.grid or args.set \
                or args.rounds is not None:
            raise InputError("--resume DIR continues a sweep as it was planned; give no "
                             "CONFIG, --seeds, --grid, --set or --rounds with it")
        plan, resumed, kept = reopen_sweep(args.resume)
        if args.address:
            probe_ray_address(args.address)
        total = len(plan.members)
        console.print(f"resume sweep [bold]{escape(plan.root.name)}[/]: {kept} of {total} "
                      "members finished" + (", the others run now" if kept < total else
                                            "; nothing is left to run"), highlight=False)
    else:
        if args.config is None or args.seeds is None:
            raise InputError("give a CONFIG and --seeds N, or --resume DIR")
        sets, labels = list(args.set or []), {}
        if args.rounds is not None:
            sets.append(f"rounds={args.rounds}")
            labels[sets[-1]] = f"--rounds {args.rounds}"
        plan = plan_sweep(args.config, args.seeds, args.seed_base, args.grid, sets, args.out,
                          labels)
        if args.address:  # before the plan is announced: no cluster there, no sweep
            probe_ray_address(args.address)
        console.print(f"sweep [bold]{plan.root.name}[/]: {len(plan.points)} grid point(s) × "
                      f"{len(plan.seeds)} seed(s) = {len(plan.members)} runs → "
                      f"{escape(str(plan.root))}")

    def on_member(record: dict, done: int, total: int) -> None:
        if args.quiet and record["status"] == "finished":
            return
        grid = ", ".join(f"{k}={v}" for k, v in record["grid"].items())
        what = f"seed {record['seed']}" + (f", {grid}" if grid else "")
        if record["status"] == "finished":
            console.print(f"  [{done}/{total}] {what} → {record['run']} "
                          f"({record['seconds']:.1f} s)", highlight=False)
        else:
            console.print(f"  [{done}/{total}] {what}: [red]failed[/]: {record['error']}",
                          highlight=False, markup=True)

    try:
        result = run_sweep(plan, parallel=args.parallel, address=args.address,
                           on_member=on_member, resumed=resumed)
    except KeyboardInterrupt:
        console.print(f"[yellow]stopped[/]; continue with: shoal sweep --resume "
                      f"{escape(str(plan.root))}", highlight=False)
        raise
    n = ", ".join(sorted({str(int(v)) for v in result.summary["n"]}))
    out.print(f"mean ± half-width of the {LEVEL:.0%} t-interval over seeds (n = {n} per "
              "grid point)", highlight=False)
    print_whole(summary_table(result.summary, list(plan.grid)))
    console.print(f"{len(plan.members) - len(result.failed)}/{len(plan.members)} members in "
                  f"{result.seconds:.1f} s; summary → {result.root / SUMMARY_FILE}")
    if result.failed:
        console.print(f"[red]{len(result.failed)} member(s) failed[/] (see {SWEEP_FILE}); "
                      f"after fixing the cause: shoal sweep --resume {escape(str(result.root))}",
                      highlight=False)
        return 2 if all(m.get("input_error") for m in result.failed) else 1
    return 0

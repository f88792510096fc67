"""`shoal calibrate CONFIG --target DATA --param KEY=LOW:HIGH[:log]`: parse and print."""

from __future__ import annotations

import argparse
import math

from rich.markup import escape
from rich.table import Table

from shoal.cli.console import console, out, print_whole


def add_parser(sub) -> None:
    """Register `shoal calibrate`."""
    p = sub.add_parser("calibrate", help="fit config parameters to an observed time series "
                                         "(ABC rejection on Ray)")
    p.add_argument("config", help="YAML config file")
    p.add_argument("--target", required=True, metavar="DATA.csv",
                   help="a CSV file of rows round, metric, value (metrics: mean|sd|"
                        "bimodality|support|retest.<topic>); read once and copied to --out")
    p.add_argument("--param", action="append", required=True, metavar="KEY=LOW:HIGH[:log]",
                   help="a config field to fit and its prior range (repeatable)")
    p.add_argument("--trials", type=int, default=64, help="parameter draws (default: 64)")
    p.add_argument("--seeds", type=int, default=2, help="runs per draw, averaged (default: 2)")
    p.add_argument("--accept", type=float, default=0.1,
                   help="share of draws closest to the target kept (default: 0.1)")
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed and the first run "
                                                       "seed (default: 0)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field for every run (repeatable)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder for the study, target.csv (the target's copy), trials.csv, "
                        "calibrated.yaml and fit.png (rerun with the same folder to resume)")
    p.add_argument("--parallel", type=int, metavar="K", help="draws at once (default: CPUs)")
    p.add_argument("--address", help="Ray cluster address ('auto' joins a running cluster)")
    p.add_argument("--no-plot", action="store_true", help="do not write fit.png")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    """`shoal calibrate`."""
    from shoal.runs.calibrate import calibrate, parse_param, plot_fit

    params = [parse_param(p) for p in args.param]
    if args.address:  # before anything is made: no cluster there, nothing written
        from shoal.engine.executors import probe_ray_address

        probe_ray_address(args.address)

    def on_trial(done: int, total: int, d: float) -> None:
        console.print(f"  [{done}/{total}] distance {d:.4g}", highlight=False)

    result = calibrate(args.config, args.target, params, args.out, args.trials, args.seeds,
                       args.accept, args.set, args.seed, args.parallel, args.address,
                       on_trial)
    kept = result.accepted
    table = Table(box=None)
    for col in ("parameter", "estimate (median)", "90% interval", "best draw", "prior"):
        table.add_column(col)
    for r in result.estimates.itertuples():
        interval = f"{r.low:.4g} – {r.high:.4g}" if math.isfinite(r.low) else \
            f"n/a ({kept} accepted draw{'s' if kept != 1 else ''})"
        table.add_row(r.param, f"{r.estimate:.4g}", interval,
                      f"{r.best:.4g}", f"{r.prior_low:g} – {r.prior_high:g}"
                      + (" (log)" if r.log else ""))
    print_whole(table)
    out.print(f"{len(result.trials)} draws, {kept} accepted; best distance "
              f"{result.trials['distance'].min():.4g}; {result.seconds:.1f} s", highlight=False)
    for note in result.notes:
        console.print(f"[yellow]warning[/]: {escape(note)}", highlight=False)
    if not args.no_plot:  # (the rows calibrate read: the target file is not read again)
        best = dict(zip(result.estimates["param"], result.estimates["best"], strict=True))
        plot_fit(args.config, args.set or [], best, result.target, args.seeds, args.seed,
                 result.out / "fit.png")
    console.print(f"results → {escape(str(result.out))} (calibrated.yaml, trials.csv, "
                  "calibration.json, target.csv"
                  + ("" if args.no_plot else ", fit.png") + ")")
    return 0

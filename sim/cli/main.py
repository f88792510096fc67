"""The `shoal` command line.

Exit codes: 0 done; 2 bad config or input (the message names the field, file or line);
3 an LLM provider gave no answer; 4 an analysis finished only in part (`shoal analyse`);
5 the planted fact was lost (`shoal diagnose-memory`); 1 internal error (one line; `--debug`
shows the traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import errno
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

import duckdb
from rich.markup import escape

from shoal.cli.console import (
    Terminated,
    console,
    out,
    print_whole,
    progress_bar,
    stop_between_rounds,
    terminate_as_interrupt,
)
from shoal.cli.knowledge import add_parsers as add_graph_parsers
from shoal.config import load_config, resolved_dict
from shoal.config.loading import locate, override_value
from shoal.config.yaml_text import dump_yaml
from shoal.core.errors import InputError, ProviderDown, out_of_space
from shoal.store.run_dir import engine_version

if TYPE_CHECKING:
    from shoal.runs.estimate import ProviderEstimate

FACT_LOST = 5  # `shoal diagnose-memory`: the planted fact did not reach the agents


def _overrides(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """CLI flags as `--set`-style overrides, so they validate like the YAML, and how a
    message names each one (the flag as typed: `--rounds 0`, not `--set rounds=0`)."""
    sets = list(args.set or [])
    labels: dict[str, str] = {}
    for flag, key in (("executor", "executor.kind"), ("shards", "executor.shards"),
                      ("address", "executor.address"), ("placement", "executor.placement"),
                      ("seed", "seed"),
                      ("rounds", "rounds"), ("out", "output.dir"), ("name", "name")):
        value = getattr(args, flag, None)
        if value is not None:
            # Text flags are quoted: `--out 2024` is a folder name, not a number.
            shown = (override_value(value) if flag in ("executor", "address", "placement", "out",
                                                   "name")
                     else value)
            sets.append(f"{key}={shown}")
            labels[sets[-1]] = f"--{flag} {value}"
    if getattr(args, "address", None) and not getattr(args, "executor", None):
        sets.append("executor.kind=ray")  # --address only makes sense on Ray
        labels[sets[-1]] = f"--address {args.address}"
    return sets, labels


def _load(args: argparse.Namespace):
    """The config of `args.config` with the command line's overrides applied."""
    return load_config(args.config, *_overrides(args))


def cmd_check(args: argparse.Namespace) -> int:
    """Validate a config and print it with every default filled in."""
    from shoal.engine.interventions import check_settings

    cfg = _load(args)
    try:  # (each `set` entry's values, validated as the run applies them)
        check_settings(cfg)
    except InputError as exc:
        raise locate(cfg, exc) from None
    # (as it is: rich would wrap a line longer than the terminal, breaking the YAML, and
    # takes time quadratic in the text's length)
    sys.stdout.write(dump_yaml(resolved_dict(cfg), sort_keys=False))
    sys.stdout.flush()
    console.print(f"[green]ok[/]: {escape(str(args.config))} is valid")
    for note in cfg.notes():  # valid, but not what it says (a sample larger than its pool)
        console.print(f"[yellow]warning[/]: {escape(str(locate(cfg, InputError(note))))}",
                      highlight=False)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run a simulation from a config, with a progress bar and a final summary."""
    from shoal.runs.simulation import Simulation

    cfg = _load(args)
    start = time.perf_counter()
    try:
        sim = Simulation.create(cfg)
    except InputError as exc:  # found against the population: point into the config too
        raise locate(cfg, exc) from None
    console.print(f"run [bold]{sim.run_id}[/] → {escape(str(sim.dir.root))}")
    for note in sim.notes:
        console.print(f"[yellow]note[/]: {escape(note)}", highlight=False)
    return _drive(sim, args.quiet, start)


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue a run from its last checkpointed round."""
    from shoal.runs.simulation import Simulation

    start = time.perf_counter()
    shards = args.shards
    if shards is not None and shards not in ("auto", "per_node") and not (
            shards.isdigit() and int(shards) >= 1):
        # checked before the run is reopened (resuming truncates it to its checkpoint)
        raise InputError(f"--shards {shards}: must be a whole number >= 1, 'auto' or "
                         "'per_node'")
    sim = Simulation.resume(args.run)
    for note in sim.notes:
        console.print(f"[yellow]warning[/]: {escape(note)}", highlight=False)
    if sim.finished:
        sim.close()
        console.print(f"{sim.run_id} is finished (all {sim.cfg.rounds} rounds ran); nothing "
                      "to resume")
        return 0
    for flag, field in (("executor", "kind"), ("shards", "shards"), ("address", "address"),
                        ("placement", "placement")):
        value = getattr(args, flag)
        if value is not None:  # where agents run never changes the results
            setattr(sim.cfg.executor, field, int(value) if value.isdigit() else value)
    console.print(f"resume [bold]{sim.run_id}[/] from round {sim.round}")
    return _drive(sim, args.quiet, start)


def cmd_fork(args: argparse.Namespace) -> int:
    """Fork a run at a checkpointed round, with changes, and run the fork."""

    from shoal.runs.fork import fork_run
    from shoal.runs.fork_plan import ForkPlan, describe_schedule, load_interventions

    start = time.perf_counter()
    added = load_interventions(args.intervene) if args.intervene else []
    edits = [f"drop {ref}" for ref in args.drop or []]
    for item in args.move or []:
        ref, sep, to = item.rpartition("=")
        if not sep or not ref:
            raise InputError(f"--move {item!r}: expected NAME|INDEX=ROUND")
        if not to.strip().lstrip("-").isdigit():
            raise InputError(f"--move {item!r}: the round must be an integer, got {to!r}")
        edits.append(f"move {ref} {to}")
    plan = ForkPlan(sets=list(args.set or []), seed=args.seed, interventions=added,
                    schedule=edits,
                    source=("stdin" if args.intervene == "-" else args.intervene) or "fork")
    sim = fork_run(args.run, args.round, plan, out=args.out, name=args.name)
    console.print(f"fork [bold]{sim.run_id}[/] of {sim.meta['lineage']['parent_run_id']} at "
                  f"round {args.round} → {escape(str(sim.dir.root))}")
    schedule = describe_schedule(sim.cfg, args.round)
    console.print(f"interventions after round {args.round}: "
                  + ("; ".join(schedule) if schedule else "none"), markup=False,
                  highlight=False)  # entries read "[index N]": not markup
    if args.no_run:
        sim.close()
        return 0
    return _drive(sim, args.quiet, start)


def cmd_runs(args: argparse.Namespace) -> int:
    """List the runs of an output folder as a lineage tree (forks under their parents)."""
    from pathlib import Path

    from rich.table import Table

    from shoal.store.lineage import run_tree
    from shoal.store.run_dir import clean_unfinished

    entries = run_tree(args.folder)
    unfinished = clean_unfinished(args.folder)
    if not entries and (Path(args.folder) / "run.json").is_file():  # a run, not a folder
        entries = [e for e in run_tree(Path(args.folder).resolve().parent)
                   if e.dir.root.name == Path(args.folder).resolve().name]
    if not entries:
        console.print(f"no runs in {escape(str(args.folder))}")
        _print_unfinished(args.folder, unfinished)
        return 0
    table = Table(box=None)
    table.add_column("run", no_wrap=True,
                     min_width=max(2 * e.depth + len(e.dir.run_id) for e in entries))
    for col in ("forked", "status", "rounds", "created"):
        table.add_column(col)
    for e in entries:
        name = "  " * (e.depth - 1) + "└ " + e.dir.run_id if e.depth else e.dir.run_id
        forked = ""
        if e.parent_run_id == e.dir.run_id:
            forked = f"from itself at round {e.fork_round}"
        elif e.parent_run_id is not None:
            forked = f"at round {e.fork_round}" if e.depth else \
                f"from {e.parent_run_id} at round {e.fork_round}"
        created = str(e.meta.get("created_at", ""))[:19].replace("T", " ")
        done = "?" if e.rounds_done is None else e.rounds_done
        table.add_row(name, forked, e.status, f"{done}/{e.meta.get('rounds', '?')}", created)
    print_whole(table)
    for e in entries:
        if e.problem is not None:
            console.print(f"[yellow]warning[/]: {escape(e.problem)}", highlight=False)
    _print_unfinished(args.folder, unfinished)
    return 0


def _print_unfinished(folder: str, unfinished) -> None:
    """What `shoal runs` found of run directories whose making did not finish."""
    where = f"{folder.rstrip('/')}/"
    for name in unfinished.removed:
        console.print(f"removed {escape(where + name)}: a run directory whose making was "
                      "stopped (its process died before it was whole; nothing of it is a "
                      "run)", highlight=False)
    for name in unfinished.left:
        console.print(f"[yellow]could not remove[/] {escape(where + name)}: a run directory "
                      "whose making was stopped; delete it", highlight=False)
    for name in unfinished.in_progress:
        console.print(f"being made now: {escape(where + name)} (listed once it is whole)",
                      highlight=False)


def cmd_compare(args: argparse.Namespace) -> int:
    """Compare runs with the first: beliefs, first divergence, activity; write a plot."""
    from shoal.analysis.compare import (
        compare_runs,
        comparison_tables,
        plot_comparison,
        plot_path,
    )

    cmp = compare_runs(args.runs, topic=args.topic)
    path = plot_path(args.out, cmp)  # (checked before anything is printed)
    replaced = path.exists()
    for table in comparison_tables(cmp):
        print_whole(table)
        out.print()
    plot_comparison(cmp, path)
    console.print(f"plot → {escape(str(path))}" + (" (replaced the file there, as --out asked)"
                                      if replaced else ""), highlight=False)
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print the exact system text and observation of an agent in a round."""
    from shoal.runs.inspect import inspect_agent
    from shoal.store.run_dir import open_run_dir

    own = open_run_dir(args.run).run_id
    items = inspect_agent(args.run, args.agent, args.round, args.platform)
    if items and items[0].run_id != own:
        console.print(f"round {args.round} of {own}'s history belongs to {items[0].run_id}, "
                      f"the run it was forked from (its own rounds start after round "
                      f"{items[0].fork_round}): shown from {items[0].run_id}",
                      highlight=False)
    for item in items:
        a = item.assembled
        how = "got" if item.acted else "would get (it did not act there this round)"
        check = "" if item.feed_matches_log is None else (
            "; feed matches the exposures table" if item.feed_matches_log
            else "; WARNING: feed differs from the exposures table")
        console.print(f"[bold]agent {args.agent}, round {args.round}, {item.platform}[/]: "
                      f"the context it {how}{check}")
        tokens = ", ".join(f"{k} {v}" for k, v in a.tokens.items()
                           if k not in ("system", "observation", "total"))
        console.print(f"tokens: {a.tokens['total']} of the budget {item.budget} "
                      f"(system {a.tokens['system']}, observation "
                      f"{a.tokens['observation']}); per section: {tokens}")
        if a.trimmed:
            console.print(f"trimmed: {len(a.trimmed)} line(s): " + "; ".join(
                f"{t.section} ({t.reason})" for t in a.trimmed[:10]))
        # The exact text, unwrapped: a display line break would look like a line of it.
        out.print("=== SYSTEM ===", markup=False)
        out.print(a.system, markup=False, highlight=False, soft_wrap=True)
        out.print("=== OBSERVATION ===", markup=False)
        out.print(a.observation, markup=False, highlight=False, soft_wrap=True)
    return 0


def cmd_interview(args: argparse.Namespace) -> int:
    """Ask one agent (--agent) or many (--agents) a question as they were at a round."""
    if (args.agent is None) == (args.agents is None):
        raise InputError("give --agent ID (one agent) or --agents SELECTOR (many)")
    if args.agents is not None:
        from shoal.cli.analyse import interview_many

        return interview_many(args)
    from shoal.runs.interview import interview

    result = interview(args.run, args.agent, args.question, args.round, args.base_url,
                       args.model, args.api_key_env)
    console.print(f"[bold]agent {result.agent}[/] as of the end of round {result.round} "
                  f"({escape(result.provider)}: {escape(result.model)}; system text "
                  f"{result.context.tokens['system']} tokens)")
    if args.show_context:
        out.print("=== SYSTEM ===", markup=False)
        out.print(result.context.system, markup=False, highlight=False)
        out.print("=== QUESTION ===", markup=False)
        out.print(result.question, markup=False, highlight=False)
        out.print("=== ANSWER ===", markup=False)
    if result.status != "ok":
        console.print(f"[red]no answer[/]: {escape(result.status)}: {escape(result.error)}",
                      highlight=False)
        return 3
    out.print(result.answer, markup=False, highlight=False)
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
    """Predict a config's LLM calls, tokens and cost with a dry run."""
    from shoal.runs.estimate import estimate

    if args.completion_tokens < 1:
        raise InputError(f"--completion-tokens {args.completion_tokens}: a typical "
                         "completion is at least 1 token")
    cfg = _load(args)
    try:
        est = estimate(cfg, args.completion_tokens)
    except InputError as exc:
        raise locate(cfg, exc) from None
    out.print(f"{cfg.name}: {est.rounds} rounds; predicted LLM use (dry run: rule decisions, "
              f"contexts measured, nothing sent; took {est.seconds:.1f} s)", highlight=False)
    for p in est.providers:
        out.print(f"provider {p.provider} ({p.model}): {p.agents:,} agents, {p.calls:,} calls\n"
                  f"  prompt tokens      {p.prompt_tokens:,} (per call: median "
                  f"{p.prompt_p50:,.0f}, max {p.prompt_max:,})\n"
                  f"  counted with       {_counted_by(p)}\n"
                  f"  completion tokens  {p.completion_typical:,} typical "
                  f"({args.completion_tokens}/call) to {p.completion_max:,} (max_tokens)\n"
                  f"  cost               ${p.cost_typical:,.4f} typical to ${p.cost_max:,.4f}",
                  highlight=False)
        if p.fallback:  # the server was asked and could not count: say why, go on
            console.print(f"[yellow]warning[/]: provider {escape(p.provider)}: prompt tokens "
                          f"counted with cl100k and the margin: {escape(p.fallback)}",
                          highlight=False)
    console.print("One call per LLM agent turn; repair and HTTP retries come on top.")
    return 0


def _counted_by(p: ProviderEstimate) -> str:
    """Whose tokens an estimate's prompt counts are, and their ratio to cl100k's."""
    who = {"server": "the server's tokenizer", "tokenizer.json": "the tokenizer.json"}.get(
        p.counter, "cl100k and the margin")
    return f"{who} ({p.ratio:.2f} per cl100k token)"


def cmd_diagnose_memory(args: argparse.Namespace) -> int:
    """Plant a fact, run with compaction, report created / retained / injected."""
    from pathlib import Path

    from shoal.runs.memory_diagnostic import DEFAULT_FACT, diagnose

    cfg = _load(args)
    try:
        result = diagnose(cfg, args.plant_round, args.check_round, args.fact or DEFAULT_FACT,
                          args.plant_as, args.group, Path(args.out) if args.out else None)
    except InputError as exc:
        raise locate(cfg, exc) from None
    console.print(f"planted at round {result.plant_round} as {escape(args.plant_as)}: "
                  f"{escape(repr(result.fact))}; checked at round {result.check_round}; run "
                  f"{escape(str(result.run_dir or '(in memory; --out keeps it)'))}")
    for stage in result.stages:
        mark = "[green]yes[/]" if stage.ok else "[red]no[/]"
        console.print(f"  {stage.stage:9} {mark}  {escape(stage.detail)}")
    out.print(f"verdict: {result.verdict}", markup=False)
    return 0 if result.first_failure is None else FACT_LOST


def _drive(sim, quiet: bool, start: float) -> int:
    """Run the remaining rounds with a progress bar, then print the summary; always close
    the simulation. Ctrl-C stops at the end of the running round, committed and
    checkpointed, and says how to continue; a second Ctrl-C abandons the running round
    (its LLM calls cancelled) and says which round was kept. Either way the simulation is
    closed whole (further Ctrl-Cs wait for it) and the exit code is 130."""
    from shoal.cli.summary import open_hint, summarize

    first = sim.round
    interrupted: KeyboardInterrupt | None = None
    with stop_between_rounds() as stop:
        try:
            with progress_bar(quiet) as progress:
                task = progress.add_task("rounds", total=sim.cfg.rounds,
                                         completed=sim.round, actions=0, llm="")
                totals = {"actions": 0, "calls": 0, "failed": 0, "fallbacks": 0}

                def on_round(stats) -> None:
                    totals["actions"] += stats.n_actions
                    totals["calls"] += stats.n_llm_calls
                    totals["failed"] += stats.n_llm_failed
                    totals["fallbacks"] += stats.n_llm_fallbacks
                    # Failures only where they fit: elapsed time and ETA must show at 80
                    # columns (the summary has the full counts).
                    llm = (f"{totals['calls']:,} calls" if totals["calls"] else "") + "".join(
                        f", {totals[k]:,} {k}" for k in ("failed", "fallbacks")
                        if totals[k] and console.width >= 100)
                    progress.update(task, completed=stats.round, actions=totals["actions"],
                                    llm=llm)

                sim.dir.stop_request.unlink(missing_ok=True)  # (an old request is not ours)
                while not sim.finished and not stop.requested:
                    on_round(sim.step())
                    if sim.dir.stop_request.exists():  # asked to stop from `shoal serve`
                        sim.dir.stop_request.unlink(missing_ok=True)
                        stop.requested = True
                stop.closing = True  # (a Ctrl-C from here on would only cut the close short)
                sim.flush()
        except KeyboardInterrupt as exc:
            interrupted = exc
        finally:
            stop.closing = True
            sim.close()
    if interrupted:
        kept = sim.checkpoints.latest()
        how = "terminated[/] (SIGTERM)" if isinstance(interrupted, Terminated) else \
            "interrupted[/]"
        console.print(f"[yellow]{how}: the round in progress was abandoned; round "
                      f"{kept} is the last one kept (committed and checkpointed); continue "
                      f"with: shoal resume {escape(str(sim.dir.root))}")
        return 143 if isinstance(interrupted, Terminated) else 130
    if not sim.finished:
        console.print(f"[yellow]stopped[/] after round {sim.round} (committed and "
                      f"checkpointed); continue with: shoal resume {escape(str(sim.dir.root))}")
        return 130
    out.print(summarize(sim.dir.root, time.perf_counter() - start, sim.round - first))
    out.print(open_hint(sim.dir.root), soft_wrap=True, style="dim", markup=False,
              highlight=False)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """`shoal report RUN [--out FILE.html]`."""
    from shoal.analysis.report import write_report

    path = write_report(args.run, args.out)
    console.print(f"report → {escape(str(path))} ({path.stat().st_size / 1e3:,.0f} kB)")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """`shoal sweep CONFIG --seeds N [--grid key=v1,v2 ...]`."""
    from shoal.cli.sweep import sweep

    return sweep(args)


def cmd_import(args: argparse.Namespace) -> int:
    """`shoal import miroshark|mirofish DIR --out SCENARIO_DIR [--force]`."""
    from shoal.runs.importer import import_simulation

    rep = import_simulation(args.source, args.dir, args.out, force=args.force)
    console.print(f"imported {rep.agents} agents, {rep.rounds} rounds, platforms "
                  f"{', '.join(rep.platforms)}, {rep.interventions} interventions → {rep.out}",
                  highlight=False)
    for note in rep.notes:
        console.print(f"[yellow]note[/]: {escape(note)}", highlight=False)
    console.print(f"what each source field became: {rep.out / 'IMPORT.md'}; next: shoal run "
                  f"{rep.out / 'config.yaml'}", markup=False, highlight=False)
    return 0


def _add_config_flags(p: argparse.ArgumentParser, runs: bool = True) -> None:
    """The config and its overrides; with `runs`, also where it runs and writes (commands
    that write nothing and run no agents do not take flags they would ignore)."""
    p.add_argument("config", help="YAML config file")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field, e.g. --set population.size=500 (repeatable)")
    p.add_argument("--seed", type=int, help="override the seed")
    p.add_argument("--rounds", type=int, help="override the number of rounds")
    if not runs:
        return
    p.add_argument("--executor", choices=["local", "ray"], help="where agents decide")
    p.add_argument("--shards", help="number of agent shards ('auto': one per CPU; 'per_node')")
    p.add_argument("--address", help="Ray cluster address ('auto' joins a running cluster)")
    p.add_argument("--placement", choices=["spread", "pack"],
                   help="how Ray shards are placed on a cluster's nodes (docs/cluster.md)")
    p.add_argument("--out", help="output folder for run directories (default: runs)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with all subcommands."""
    parser = argparse.ArgumentParser(prog="shoal", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"shoal {engine_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run a simulation")
    _add_config_flags(p)
    p.add_argument("--name", help="name of the run (the prefix of its run id; default: the "
                                  "config's name)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("resume", help="continue a run from its last checkpoint")
    p.add_argument("run", help="run directory (or run id under runs/)")
    p.add_argument("--executor", choices=["local", "ray"], help="where agents decide")
    p.add_argument("--shards", help="number of agent shards ('auto': one per CPU; 'per_node')")
    p.add_argument("--address", help="Ray cluster address ('auto' joins a running cluster)")
    p.add_argument("--placement", choices=["spread", "pack"],
                   help="how Ray shards are placed on a cluster's nodes (docs/cluster.md)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("fork", help="start a counterfactual run from a round of another")
    p.add_argument("run", help="parent run directory (or run id under runs/)")
    p.add_argument("--round", type=int, required=True, help="fork from the end of this round")
    p.add_argument("--intervene", metavar="FILE",
                   help="YAML list of interventions to add after the fork round (- reads "
                        "it from standard input)")
    p.add_argument("--drop", action="append", metavar="NAME|INDEX",
                   help="remove an intervention scheduled after the fork round (its name, "
                        "or its index in the parent's schedule; repeatable)")
    p.add_argument("--move", action="append", metavar="NAME|INDEX=ROUND",
                   help="move an intervention scheduled after the fork round (repeatable)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="change a parameter for the fork (repeatable); "
                        "'interventions=[...]' replaces the schedule after the fork round")
    p.add_argument("--seed", type=int, help="a new seed for the rounds after the fork")
    p.add_argument("--out", help="output folder (default: the parent's)")
    p.add_argument("--name", help="name of the fork run (default: the parent's)")
    p.add_argument("--no-run", action="store_true", help="create the fork but do not run it")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_fork)

    p = sub.add_parser("runs", help="list the runs of an output folder as a lineage tree")
    p.add_argument("folder", nargs="?", default="runs", help="output folder (default: runs)")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("compare", help="compare runs (e.g. a parent and its forks)")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run directories (or run ids under runs/); the first is the reference")
    p.add_argument("--out", metavar="FILE.png",
                   help="PNG to write (default: compare.png next to the first run, "
                        "numbered rather than replacing one there)")
    p.add_argument("--topic", help="compare only this topic")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("inspect", help="print the context an agent got in a round")
    p.add_argument("run", help="run directory (or run id under runs/)")
    p.add_argument("--agent", type=int, required=True)
    p.add_argument("--round", type=int, required=True)
    p.add_argument("--platform", help="one platform only (default: every platform the agent is on)")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("diagnose-memory",
                       help="plant a fact and report whether memory carries it to later rounds",
                       description="Plant a fact and report whether memory carries it to "
                                   "later rounds. Exit code 0: the fact reached the agents; "
                                   f"{FACT_LOST}: it was lost (the stage is named).")
    _add_config_flags(p)
    p.add_argument("--plant-round", type=int, default=5)
    p.add_argument("--check-round", type=int, default=50)
    p.add_argument("--fact", help="the text to plant (a distinctive sentence)")
    p.add_argument("--plant-as", choices=["event", "post"], default="event",
                   help="breaking news (pinned) or a news post (not pinned)")
    p.add_argument("--group", help="plant it for one group only (event)")
    p.set_defaults(func=cmd_diagnose_memory)

    p = sub.add_parser("interview", help="ask agents a question, as they were at a round")
    p.add_argument("run", help="run directory (or run id under runs/)")
    p.add_argument("question", help="the question, in quotes")
    p.add_argument("--agent", type=int, help="one agent's id")
    p.add_argument("--agents", metavar="SELECTOR",
                   help="many agents: all, ids (0-199,250), group:NAME[,NAME], or a YAML "
                        "selector such as '{groups: [skeptics], fraction: 0.5}'")
    p.add_argument("--concurrency", type=int, help="calls in flight (default: the provider's)")
    p.add_argument("--deadline", type=float, metavar="SECONDS",
                   help="stop waiting for answers after this long (the batch's deadline)")
    p.add_argument("--round", type=int,
                   help="the agent as of the end of this round (default: the last one)")
    p.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: the run's "
                                      "provider; 'loopback' for a dry run)")
    p.add_argument("--model", help="the model to ask (default: the run's)")
    p.add_argument("--api-key-env", help="NAME of the environment variable holding the key")
    p.add_argument("--show-context", action="store_true",
                   help="print the system text the agent was given")
    p.set_defaults(func=cmd_interview)

    p = sub.add_parser("estimate", help="predict a config's LLM calls, tokens and cost")
    _add_config_flags(p, runs=False)
    p.add_argument("--completion-tokens", type=int, default=60,
                   help="typical completion tokens per call (default: 60)")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("llm-serve", help="run Shoal's loopback OpenAI-compatible LLM server")
    from shoal.llm.server import add_arguments, serve

    add_arguments(p)
    p.set_defaults(func=serve)

    from shoal.cli.llm_check import add_parser as add_llm_check_parser  # (a light module)

    add_llm_check_parser(sub)

    # analysis commands register here (report, sweep)
    # (their modules load pandas and matplotlib, so they are imported only when run)
    p = sub.add_parser("report", help="write a self-contained HTML report of a run")
    p.add_argument("run", help="run directory (or run id under runs/)")
    p.add_argument("--out", metavar="FILE.html",
                   help="where to write it (default: report.html in the run directory)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("sweep", help="run a config over seeds (and a grid) in parallel on Ray")
    p.add_argument("config", nargs="?", help="YAML config file")
    p.add_argument("--seeds", type=int, metavar="N",
                   help="members per grid point, seeds seed-base..seed-base+N-1 (required "
                        "with CONFIG)")
    p.add_argument("--resume", metavar="DIR",
                   help="continue a stopped sweep: finished members are kept, interrupted "
                        "ones resumed, the others run (no CONFIG, --seeds, --grid, --set "
                        "or --rounds then)")
    p.add_argument("--seed-base", type=int, default=0, help="first seed (default: 0)")
    p.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                   help="a config field and its values; several --grid make a product")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field for every member (repeatable)")
    p.add_argument("--rounds", type=int, help="override the number of rounds")
    p.add_argument("--out", default="runs", help="folder for the sweep directory (default: runs)")
    p.add_argument("--parallel", type=int, metavar="K",
                   help="members running at once (default: the Ray cluster's CPUs)")
    p.add_argument("--address", help="Ray cluster address ('auto' joins a running cluster)")
    p.add_argument("--quiet", action="store_true", help="no per-member lines")
    p.set_defaults(func=cmd_sweep)

    from shoal.cli.analyse import add_parser as add_analyse_parser  # (a light module)
    from shoal.cli.calibrate import add_parser as add_calibrate_parser  # (a light module)
    from shoal.cli.experiment import add_parser as add_experiment_parser  # (a light module)
    from shoal.cli.survey import add_parser as add_survey_parser  # (a light module)
    from shoal.cli.validate import add_parser as add_validate_parser  # (a light module)

    add_analyse_parser(sub)
    add_survey_parser(sub)
    add_calibrate_parser(sub)

    add_experiment_parser(sub)
    add_validate_parser(sub)

    from shoal.cli.serve import add_parsers as add_serve_parsers  # (a light module)

    add_serve_parsers(sub)

    p = sub.add_parser("import", help="turn a MiroShark or MiroFish simulation folder into "
                                      "a Shoal scenario folder")
    p.add_argument("source", choices=["miroshark", "mirofish"], help="where the folder is from")
    p.add_argument("dir", help="the simulation folder (simulation_config.json and profiles)")
    p.add_argument("--out", required=True, metavar="SCENARIO_DIR",
                   help="folder to write config.yaml, profiles and IMPORT.md to")
    p.add_argument("--force", action="store_true",
                   help="write into a non-empty --out (replaces the imported files)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("check", help="validate a config and print it resolved")
    _add_config_flags(p)
    p.add_argument("--name", help="name of the run (the prefix of its run id; default: the "
                                  "config's name)")
    p.set_defaults(func=cmd_check)
    add_graph_parsers(sub)
    _debug_anywhere(sub)
    return parser


def _debug_anywhere(sub: argparse._SubParsersAction) -> None:
    """`--debug` after the command too (`shoal run X --debug`), as the error messages
    suggest it: every subcommand takes it (set only when given, so `shoal --debug run X`
    still counts)."""
    for p in dict.fromkeys(sub.choices.values()):  # (aliases repeat a parser)
        if "--debug" not in p._option_string_actions:
            p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                           help="show tracebacks on errors")
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                _debug_anywhere(action)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `shoal` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    with terminate_as_interrupt():
        code = _guarded(args.func, args, args.debug)
    if argv is None and threading.current_thread() is threading.main_thread():
        # The `shoal` command has ended and said so: a late Ctrl-C (a second one while
        # the run closed, one during the interpreter's exit) must not turn its exit
        # status into a death by signal.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


def _check_paths(args: argparse.Namespace) -> None:
    """Path flags that name nothing: `--out ''` would write into the current folder."""
    out_flag = getattr(args, "out", None)
    if isinstance(out_flag, str) and not out_flag.strip():
        raise InputError(f"--out {out_flag!r}: empty; give a folder or file name")


def _guarded(func: Callable[[argparse.Namespace], int], args, debug: bool) -> int:
    try:
        _check_paths(args)
        return func(args)
    except InputError as exc:
        console.print(f"[red]error[/]: {escape(str(exc))}", highlight=False)
        return 2
    except ProviderDown as exc:
        console.print(f"[red]stopped[/]: {escape(str(exc))}", highlight=False)
        return 3
    except Terminated:
        console.print("[yellow]terminated[/] (SIGTERM)")
        return 143
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]")
        return 130
    except duckdb.InterruptException:  # Ctrl-C while DuckDB ran a statement
        console.print("[yellow]interrupted[/]")
        return 130
    except OSError as exc:
        if debug:
            traceback.print_exc()
        if exc.filename is None or exc.errno not in _PATH_ERRNOS:
            return _no_space(exc, args) if out_of_space(exc) else _internal(exc, debug)
        # a file or folder the command was told to use (an --out on a read-only disk, in
        # a folder it may not write, under a file): the user's to fix, not a bug
        where = f"{exc.filename} → {exc.filename2}" if exc.filename2 else str(exc.filename)
        console.print(f"[red]error[/]: {escape(where)}: {escape(exc.strerror or str(exc))}",
                      highlight=False)
        return 2
    except Exception as exc:
        if debug:
            traceback.print_exc()
        if (damage := _damaged_file(exc, args)) is not None:  # (a read no library named)
            console.print(f"[red]error[/]: {escape(damage)}", highlight=False)
            return 2
        return _no_space(exc, args) if out_of_space(exc) else _internal(exc, debug)


# errors of a path itself (its permissions, its kind, its disk), not of Shoal's code
_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR,
                errno.ENOSPC, errno.ENAMETOOLONG, errno.EDQUOT, errno.ENOENT, errno.EEXIST}


def _no_space(exc: Exception, args: argparse.Namespace) -> int:
    """A full disk met by a write no check named (a report, a scenario, a fork's files):
    the user's to fix, exit 2, naming the file the error names, else the --out, else the
    file a library's message names."""
    named = re.search(r'file "([^"]+)"', str(exc))
    where = (exc.filename if isinstance(exc, OSError) else None) \
        or getattr(args, "out", None) or (named.group(1) if named else None)
    console.print("[red]error[/]: no space left on the device"
                  + (f" of {escape(str(where))}" if where else "")
                  + "; free some space, then run the command again", highlight=False)
    return 2


def _internal(exc: Exception, debug: bool) -> int:
    """An error no check foresaw: one line, exit 1."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    console.print(f"[red]internal error[/]: {type(exc).__name__}: {escape(first)}"
                  + ("" if debug else "  (run with --debug for the traceback)"),
                  highlight=False)
    return 1


def _damaged_file(exc: Exception, args: argparse.Namespace) -> str | None:
    """The message for a DuckDB error that says a file is damaged, naming the run's
    trajectory file (None for any other error). The libraries name the file where they
    read one; this catches a read that did not."""
    if not type(exc).__module__.lstrip("_").startswith("duckdb"):
        return None
    from shoal.store.trajectory import damage_reason, damaged

    reason = damage_reason(exc)
    if reason is None:
        return None
    run = getattr(args, "run", None)
    if not isinstance(run, str):
        return f"a trajectory file is damaged ({reason})"
    from pathlib import Path

    folder = Path(run) if Path(run).is_dir() else Path("runs") / run
    return damaged(folder / "trajectory.duckdb", reason)


if __name__ == "__main__":
    sys.exit(main())

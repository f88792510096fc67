"""How long each thread holds the GIL in a round of workload W: the floor under a round
that more driver threads cannot lower.

    .venv/bin/python bench/gil.py                         # N = 1,000,000, 8 rounds, 2 workers
    .venv/bin/python bench/gil.py --n 100000 --workers 4

The driver's worker threads (shoal.core.workers) run agent ranges side by side because
numpy releases the GIL inside its loops; whatever holds the GIL (Python code, string and
object handling, the few numpy functions that keep it, such as `np.repeat`) runs one
thread at a time, wherever it is. `RoundStats.cpu_ms` splits CPU by code (serial or in
ranges), not by the GIL, so Amdahl's bound from it (bench/scaling.py) is an upper bound.
This bench samples the GIL's holder with py-spy (`record --gil --threads`, a sampling
profiler that reads the process from outside: `pip install py-spy`) while W's rounds run
(it attaches once the world is built and round 0 written, and stops when the last
round's tables are), and reports per round the milliseconds each group of threads held
it: the driver's thread (by phase), the worker threads (by range function), the writer
thread, and the others. Their sum G is a floor for a round on any number of threads, and
T(round) / G bounds what more threads can give this run.

py-spy needs to read the measured process's memory (ptrace): in a container without
CAP_SYS_PTRACE it fails and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(n: int, rounds: int, workers: int, spy: str, rate: int, raw: Path) -> None:
    """The measured process: W's rounds (bench/scaling.py's run) sampled by py-spy
    attached to this process once the world is built and round 0 written (building a
    million agents is not a round), its result as JSON."""
    sys.path.insert(0, str(HERE))
    from scaling import run_w

    @contextmanager
    def sampled(sim):
        sim.writer.flush()  # round 0's tables and checkpoint: before the samples
        proc = subprocess.Popen(
            [spy, "record", "--pid", str(os.getpid()), "--gil", "--threads", "--rate",
             str(rate), "--format", "raw", "--output", str(raw)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        said = proc.stdout.readline() if proc.stdout else ""  # "Sampling process ..."
        if "Sampling" not in said:
            proc.kill()
            sys.exit(f"py-spy did not start: {said}{proc.communicate()[0]}")
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)  # py-spy writes its samples and exits
            proc.communicate(timeout=120)

    print("RESULT " + json.dumps(run_w(n, rounds, "local", workers, around=sampled)),
          flush=True)


def _frame_name(frame: str) -> str:
    return frame.split(" (")[0]


def gil_by_group(raw: Path) -> dict[str, Counter]:
    """py-spy raw samples (one stack per line with its count) grouped: the driver's
    thread (by phase), workers (by range function), writer, other threads. Threads are
    told apart by their stacks (py-spy does not name threads started after it attached,
    as the worker pool's are)."""
    groups: dict[str, Counter] = {k: Counter() for k in ("driver", "workers", "writer",
                                                          "other")}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        thread, *frames = stack.split(";")
        n = int(count)
        names = [_frame_name(f) for f in frames]
        if frames and frames[0].startswith("<module>"):  # the main thread: the driver
            phase = "between rounds"  # (the run's loop: the run's meta, the next round)
            if "RoundDriver.step" in names:
                i = names.index("RoundDriver.step")
                phase = names[i + 1] if i + 1 < len(names) else "step"
                if phase == "_GeneratorContextManager.__exit__":
                    phase = "phase bookkeeping"
            groups["driver"][phase.removeprefix("RoundDriver.")] += n
        elif "shoal-worker" in thread or "_worker" in names:  # (a pool's thread)
            where = [j for j, f in enumerate(frames) if "core/workers.py" in f]
            fn = names[where[0] + 1] if where and where[0] + 1 < len(names) else "(pool)"
            groups["workers"][re.sub(r"\.<locals>", "", fn)] += n
        elif "shoal-writer" in thread or "RoundWriter._loop" in names:
            groups["writer"][names[-1] if names else "?"] += n
        else:
            name = thread.split(": ", 1)[1] if ": " in thread else thread
            groups["other"]["shoal-shards" if "LoopThread._main" in names else name] += n
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=int, default=200, help="samples a second")
    parser.add_argument("--raw", type=Path, help="also keep py-spy's samples in this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        sys.exit("bench/gil.py needs py-spy: pip install py-spy")
    if args.child:
        child(args.n, args.rounds, args.workers, spy, args.rate, args.raw)
        return
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "gil.txt"
        run = subprocess.run(
            [sys.executable, __file__, "--child", "--n", str(args.n), "--rounds",
             str(args.rounds), "--workers", str(args.workers), "--rate", str(args.rate),
             "--raw", str(raw)],
            capture_output=True, text=True)
        result = next((json.loads(line[7:]) for line in run.stdout.splitlines()
                       if line.startswith("RESULT ")), None)
        if run.returncode or result is None or not raw.exists():
            sys.exit(f"py-spy or the run failed (exit {run.returncode}):\n"
                     f"{(run.stdout + run.stderr)[-2000:]}")
        groups = gil_by_group(raw)
        if args.raw:
            shutil.copyfile(raw, args.raw)
    per_round = 1e3 / args.rate / args.rounds  # ms a round per sample
    held = {g: per_round * sum(c.values()) for g, c in groups.items()}
    floor = sum(held.values())
    report = {
        "n": args.n, "rounds": args.rounds, "workers": args.workers, "rate": args.rate,
        "round_ms": result["phase_ms"]["round"],
        "agent_steps_per_s": result["agent_steps_per_s"],
        "gil_ms_per_round": {g: round(v, 1) for g, v in held.items()},
        "gil_floor_ms": round(floor, 1),
        "round_over_floor": round(result["phase_ms"]["round"] / floor, 2) if floor else None,
        "top": {g: {k: round(per_round * v, 1) for k, v in c.most_common(8)}
                for g, c in groups.items()},
        "cpu_ms": result["cpu_ms"],
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

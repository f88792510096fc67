"""Throughput of this checkout against another checkout of Shoal, in the same run.

Each version runs the same configs through its own CLI in a subprocess with its own source
first on `PYTHONPATH` (a checkout from before the `shoal` namespace: its tree and `python -m
sim.cli`; one after it: a tree of links named as the installed package, and `python -m
shoal.cli`), alternating versions so that both
see the same machine load; the figure is the rate of the rounds after the first
(agent-steps per second from the `rounds` table's commit times, so start-up, round 0 and
the first round's warm-up are outside it). Medians over `--repeat` pairs; the ratio is
this checkout's rate over the other's.

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/versions.py --other /tmp/before
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CASES = {  # name: (config, overrides)
    "W, N=100,000, 6 rounds": (HERE / "configs" / "workload_w.yaml",
                               ["population.size=100000", "rounds=6"]),
    "quick start, 10,000 agents, 10 rounds": (ROOT / "configs" / "quickstart.yaml",
                                              ["population.size=10000", "rounds=10"]),
}


# the folders installed as sub-packages of `shoal` (pyproject.toml's package-dir)
SUBPACKAGES = {"agents": "agents", "memory": "memory", "beliefs": "beliefs"}


def entry(tree: Path, links: Path) -> tuple[str, Path]:
    """The CLI module of the checkout at `tree` and the folder to put first on the path."""
    if "shoal.agents" not in (tree / "pyproject.toml").read_text():
        return "sim.cli", tree  # (before the namespace: the folders are the packages)
    package = links / "shoal"
    if not package.exists():  # the installed layout, as links into the checkout
        package.mkdir(parents=True)
        for item in (tree / "sim").iterdir():
            (package / item.name).symlink_to(item)
        for folder, name in SUBPACKAGES.items():
            (package / name).symlink_to(tree / folder)
    return "shoal.cli", links


def rate(tree: Path, config: Path, overrides: list[str]) -> float:
    """Agent-steps per second of rounds 2..R of one run by the checkout at `tree`."""
    with tempfile.TemporaryDirectory(prefix="shoal-bench-") as out:
        sets = [a for o in overrides for a in ("--set", o)]
        module, path = entry(tree, Path(out) / "links")
        env = {**os.environ, "PYTHONPATH": str(path)}
        subprocess.run([sys.executable, "-m", module, "run", str(config), *sets,
                        "--executor", "local", "--out", str(Path(out) / "runs"), "--quiet"],
                       cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        (run,) = (Path(out) / "runs").iterdir()
        con = duckdb.connect(str(run / "trajectory.duckdb"), read_only=True)
        try:
            n = con.execute("SELECT count(*) FROM agents").fetchone()[0]
            rounds, seconds = con.execute(
                "SELECT count(*) - 1, epoch(max(wall_time) - min(wall_time)) FROM rounds "
                "WHERE round >= 1").fetchone()
        finally:
            con.close()
    return n * rounds / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", required=True, type=Path,
                        help="another checkout of Shoal (e.g. a git worktree)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name, (config, overrides) in CASES.items():
        this, other = [], []
        for _ in range(args.repeat):
            other.append(rate(args.other.resolve(), config, overrides))
            this.append(rate(ROOT, config, overrides))
        a, b = statistics.median(this), statistics.median(other)
        print(f"{name}: this {a:,.0f} agent-steps/s, other {b:,.0f}; this ÷ other "
              f"{a / b:.2f}  (this: {', '.join(f'{x:,.0f}' for x in this)}; other: "
              f"{', '.join(f'{x:,.0f}' for x in other)})", flush=True)


if __name__ == "__main__":
    main()

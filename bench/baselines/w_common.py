"""What every baseline of workload W shares (spec: docs/workload_w.md).

The initial state, the shared post draws and the summary of the final positions must be
computed identically by every implementation, so they live here once. The benchmark driver
(`main`) is shared too, so every baseline times exactly the same thing: the R rounds,
including the per-round mean-position record, but not building the initial state or the
implementation's own data structures from it, and not the final summary.

Runs under the project's Python (numpy/plain) and under the Mesa venv (Python 3.12); numpy
is its only dependency.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

D = 20  # out-degree of the follow graph (min(D, N-1))
P = 0.1  # probability that an agent posts in a round
K = 10  # feed length
EPS = 0.3  # confidence bound
MU = 0.2  # step size
GAP = 0.05  # cluster-splitting gap


def initial_state(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    """Return `(x0, follows, rng)`: start positions, the (n, d) followee matrix, and the
    generator they came from, left where the spec leaves it (numpy uses it for its own
    post draws, so those do not repeat the uniforms behind x0)."""
    rng = np.random.default_rng(seed)
    x0 = rng.uniform(-1, 1, n)
    d = min(D, n - 1)
    rows = np.arange(n)
    if n - 1 > 4 * d:
        follows = rng.integers(0, n - 1, (n, d))
        follows += follows >= rows[:, None]  # skip i itself
        bad = _rows_with_duplicates(follows)
        while bad.size:  # redraw all bad rows at once, same generator, until none is left
            redrawn = rng.integers(0, n - 1, (bad.size, d))
            follows[bad] = redrawn + (redrawn >= bad[:, None])
            bad = _rows_with_duplicates(follows)
    else:
        follows = np.empty((n, d), dtype=np.int64)
        for i in range(n):
            row = rng.choice(n - 1, d, replace=False)
            follows[i] = row + (row >= i)
    return x0, follows, rng


def _rows_with_duplicates(a: np.ndarray) -> np.ndarray:
    s = np.sort(a, axis=1)
    return np.flatnonzero((s[:, 1:] == s[:, :-1]).any(axis=1))


def shared_post_mask(n: int, rounds: int, seed: int) -> np.ndarray:
    """The `--shared-draws` post decisions: row t-1 says who posts in round t."""
    return np.random.default_rng([seed, 1]).random((rounds, n)) < P


def summarize(x: np.ndarray) -> dict[str, object]:
    """clusters, mean_abs_x and x_sha of the final positions (agent-id order)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    return {
        "clusters": 1 + int(np.count_nonzero(np.diff(np.sort(x)) > GAP)),
        "mean_abs_x": float(np.abs(x).mean()),
        "x_sha": hashlib.sha256(x.tobytes()).hexdigest()[:16],
    }


class Args(NamedTuple):
    n: int
    rounds: int
    seed: int
    feed: str
    shared_draws: bool
    repeat: int


class Run(NamedTuple):
    """One run of an implementation: timed seconds, final positions, fallback-read share."""

    seconds: float
    x: np.ndarray
    fallback_read_frac: float | None


def parse_args(description: str) -> Args:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--feed", choices=["pull", "push"], default="pull")
    ap.add_argument(
        "--shared-draws",
        action="store_true",
        help="take post decisions from default_rng([seed, 1]) (correctness check, not timing)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs; `seconds` is their median")
    a = ap.parse_args()
    if a.n < 1 or a.rounds < 1 or a.repeat < 1:
        ap.error("--n, --rounds and --repeat must be >= 1")
    return Args(a.n, a.rounds, a.seed, a.feed, a.shared_draws, a.repeat)


def main(impl: str, run: Callable[[Args], Run], description: str) -> None:
    """Parse the CLI, run `repeat` times and print one JSON line.

    `seconds` is the median over the repeats of the timed part of `run` (the R rounds; the
    initial state and the data structures built from it are excluded). Every repeat computes
    the same trajectory, so the outputs are taken from the last one.
    """
    args = parse_args(description)
    runs = [run(args) for _ in range(args.repeat)]
    seconds = statistics.median(r.seconds for r in runs)
    last = runs[-1]
    out = {
        "impl": impl,
        "feed": args.feed,
        "n": args.n,
        "rounds": args.rounds,
        "seed": args.seed,
        "shared_draws": args.shared_draws,
        "repeat": args.repeat,
        "seconds": seconds,
        "agent_steps_per_s": args.n * args.rounds / seconds,
        **summarize(last.x),
        "fallback_read_frac": last.fallback_read_frac,
    }
    print(json.dumps(out), flush=True)

"""Check that every workload-W baseline computes the same trajectory.

Runs w_numpy, w_plain and w_mesa with `--shared-draws` for both feeds at a few small sizes
and asserts bit-identical final positions (`x_sha`) and the same `fallback_read_frac`. At the
smallest sizes it also compares against `reference`, a brute-force transcription of the spec
that rebuilds every feed from the full post history, so the three cannot agree on a shared
mistake in the ring buffers, inboxes or fallback bound.

Usage: python bench/baselines/check_w_agree.py   (Mesa venv: run setup_mesa_venv.sh first)
Exits non-zero on any disagreement.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from w_common import EPS, MU, K, initial_state, shared_post_mask, summarize

HERE = Path(__file__).resolve().parent
MESA_PYTHON = HERE.parent / ".venv-mesa" / "bin" / "python"
# (n, rounds, seed); the first covers the row-by-row follow-graph rule (N-1 <= 4d).
SIZES = [(50, 30, 1), (200, 20, 0), (2000, 5, 0), (1000, 100, 0)]
REFERENCE_MAX_WORK = 10_000  # n * rounds up to which the brute-force reference also runs


def reference(n: int, rounds: int, seed: int) -> tuple[str, float]:
    """Workload W word for word from the spec: returns (x_sha, fallback_read_frac)."""
    x0, follows, _ = initial_state(n, seed)
    mask = shared_post_mask(n, rounds, seed)
    x = x0.tolist()
    posts: list[tuple[int, int, float]] = []  # (key, author, value)
    fallback_reads = 0
    for t in range(1, rounds + 1):
        posts += [(t * n + i, i, x[i]) for i in range(n) if mask[t - 1, i]]
        for i in range(n):
            followed = set(follows[i].tolist())
            feed = sorted(p for p in posts if p[1] in followed)[-K:]
            if len(feed) < K:
                fallback_reads += 1
                others = [p for p in sorted(posts, reverse=True) if p[1] != i and p not in feed]
                feed = sorted(feed + others[: K - len(feed)])
            for _, _, v in feed:
                if abs(v - x[i]) < EPS:
                    x[i] = x[i] + MU * (v - x[i])
    return str(summarize(x)["x_sha"]), fallback_reads / (n * rounds)


def run_impl(python: Path | str, impl: str, n: int, rounds: int, seed: int, feed: str) -> dict:
    cmd = [
        str(python),
        str(HERE / f"w_{impl}.py"),
        "--n",
        str(n),
        "--rounds",
        str(rounds),
        "--seed",
        str(seed),
        "--feed",
        feed,
        "--shared-draws",
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    if not MESA_PYTHON.exists():
        print(f"missing {MESA_PYTHON}: run bench/baselines/setup_mesa_venv.sh", file=sys.stderr)
        return 2
    pythons = {"numpy": sys.executable, "plain": sys.executable, "mesa": MESA_PYTHON}
    failures = 0
    for n, rounds, seed in SIZES:
        results = {
            f"{impl}/{feed}": run_impl(py, impl, n, rounds, seed, feed)
            for impl, py in pythons.items()
            for feed in ("pull", "push")
        }
        seen = {(r["x_sha"], r["fallback_read_frac"]) for r in results.values()}
        if n * rounds <= REFERENCE_MAX_WORK:
            seen.add(reference(n, rounds, seed))
        ok = len(seen) == 1
        failures += not ok
        label = "ok  " if ok else "FAIL"
        print(
            f"{label} n={n} rounds={rounds} seed={seed}: {sorted(seen)}"
            + ("" if n * rounds > REFERENCE_MAX_WORK else " (incl. reference)")
        )
        if not ok:
            for name, r in results.items():
                print(f"     {name}: {r['x_sha']} fallback={r['fallback_read_frac']}")
    print("all implementations agree" if not failures else f"{failures} size(s) disagree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Belief-update cost of every rule: time per 100,000 exposures (mode `exposures`) and per
100,000 interactions (the direct modes), all measured in the same run, with ratios to the
cheapest rule of each column.

- exposures: 10,000 readers × 10 feed items = 100,000 exposures per update, 2 topics, 30 %
  of (post, topic) stances unaddressed, a history in which half the exposures were seen
  (social_influence reads it for novelty), trust per exposure.
- pairs: 200,000 agents, one topic: a random matching = 100,000 encounters per update.
- neighbours: 100,000 agents following 20 accounts each (workload W's graph), one topic:
  100,000 agent updates (one partner each, or the average over the followees).
- complete: 100,000 agents, one topic.
- `algorithmic_bias` in modes pairs and complete draws partners over everyone, O(N²): it
  runs with 2,000 agents (1,000 nominal encounters in mode pairs, of which the
  conflict-free subset interacts) and its time is scaled to 100,000 at that size (the
  per-interaction cost grows linearly with N).

Each cell is the median of `--repeat` updates (after one warm-up) on fresh copies of the
same state.

    .venv/bin/python bench/belief_rules.py            # about 15 seconds
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import datetime
from pathlib import Path

import numpy as np
from pydantic import TypeAdapter

from shoal.beliefs.exposure import ExposureHistory
from shoal.beliefs.rules import Exposures, UpdateContext, make_rule
from shoal.beliefs.state import BeliefState
from shoal.beliefs.trust import TrustStore
from shoal.config import BeliefRule
from shoal.core.counter_rng import CounterRNG
from shoal.core.follow_graph import FollowGraph
from shoal.core.posts import NewPosts, PostStore

ROOT = Path(__file__).resolve().parents[1]
UNIT = 100_000

RULES = {  # name → the `beliefs.update` section (mode is added per column)
    "social_influence": {"rule": "social_influence"},
    "bounded_confidence": {"rule": "bounded_confidence"},
    "deffuant": {"rule": "deffuant", "epsilon": 0.6},
    "hegselmann_krause": {"rule": "hegselmann_krause", "epsilon": 0.6},
    "degroot": {"rule": "degroot"},
    "degroot (trust weights)": {"rule": "degroot", "weights": "trust"},
    "friedkin_johnsen": {"rule": "friedkin_johnsen"},
    "voter": {"rule": "voter"},
    "algorithmic_bias": {"rule": "algorithmic_bias", "epsilon": 0.6, "gamma": 1.0},
}
DIRECT_ONLY_EXPOSURES = {"social_influence", "bounded_confidence"}


def exposure_case(seed: int = 0) -> tuple[BeliefState, Exposures, UpdateContext]:
    """100,000 exposures of 10,000 readers to 20,000 posts on 2 topics."""
    rng = np.random.default_rng(seed)
    n, t, n_posts, width = 20_000, 2, 20_000, 10
    posts = PostStore(t, 2)
    stance = rng.uniform(-1, 1, (n_posts, t))
    stance[rng.random((n_posts, t)) < 0.3] = np.nan
    posts.append(NewPosts(platform=np.zeros(n_posts, np.int8),
                          author=rng.integers(0, n, n_posts).astype(np.int32),
                          kind=np.zeros(n_posts, np.int8), parent=np.full(n_posts, -1),
                          stance=stance, text=[""] * n_posts), 1)
    readers = np.sort(rng.choice(n, 10_000, replace=False))
    feed = np.sort(rng.integers(0, n_posts, (len(readers), width)), axis=1)
    exp = Exposures(readers, feed, rng.integers(0, 20, feed.shape).astype(np.int32),
                    rng.integers(0, 5, feed.shape).astype(np.int32),
                    rng.uniform(0, 1, feed.shape))
    history = ExposureHistory()
    fa, fp = exp.flat()
    half = rng.random(len(fa)) < 0.5
    history.record(fa[half], fp[half], 1)
    beliefs = BeliefState(rng.uniform(-1, 1, (n, t)), rng.uniform(0, 1, (n, t)))
    ctx = UpdateContext(round=2, posts=posts, trust=TrustStore(0.5), history=history,
                        engagement=rng.integers(-3, 4, (n, t)).astype(np.float64),
                        rng=CounterRNG(seed), graph=FollowGraph(n), alive=np.ones(n, bool),
                        initial_position=beliefs.position.copy())
    return beliefs, exp, ctx


def direct_case(n: int, degree: int = 20, seed: int = 0
                ) -> tuple[BeliefState, Exposures, UpdateContext]:
    """n agents on one topic, each following `degree` random accounts, some trust."""
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(n), degree)
    dst = rng.integers(0, n, n * degree)
    keep = src != dst
    graph = FollowGraph(n, src[keep], dst[keep])
    trust = TrustStore(0.5)
    s, d = graph.edge_arrays()
    some = rng.random(len(s)) < 0.1
    trust.add(s[some], d[some], rng.uniform(-0.4, 0.4, some.sum()))
    beliefs = BeliefState(rng.uniform(-1, 1, (n, 1)), rng.uniform(0, 1, (n, 1)))
    empty = Exposures(np.empty(0, np.int64), np.empty((0, 0), np.int64),
                      np.empty((0, 0), np.int32), np.empty((0, 0), np.int32),
                      np.empty((0, 0)))
    ctx = UpdateContext(round=2, posts=PostStore(1, 2), trust=trust, history=None,
                        engagement=np.zeros((n, 1)), rng=CounterRNG(seed), graph=graph,
                        alive=np.ones(n, bool), initial_position=beliefs.position.copy())
    return beliefs, empty, ctx


def median_ms(spec: dict, case: tuple, repeat: int) -> float:
    """Median wall time (ms) of one update on fresh copies of the case's beliefs."""
    rule = make_rule(TypeAdapter(BeliefRule).validate_python(spec))
    beliefs, exp, ctx = case
    times = []
    for i in range(repeat + 1):  # the first update warms caches up and is not counted
        b = BeliefState(beliefs.position.copy(), beliefs.confidence.copy())
        t0 = time.perf_counter()
        rule.update(b, exp, ctx)
        if i:
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def main() -> None:
    """Measure every (rule, mode) cell and print a table; rows saved in bench/results/."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    cases = {
        "exposures": (exposure_case(), 1.0),
        "pairs": (direct_case(2 * UNIT), 1.0),
        "neighbours": (direct_case(UNIT), 1.0),
        "complete": (direct_case(UNIT, degree=1), 1.0),
    }
    small = direct_case(2_000, degree=1)
    rows = []
    for name, base in RULES.items():
        row = {"rule": name}
        for mode, (case, scale) in cases.items():
            if name in DIRECT_ONLY_EXPOSURES and mode != "exposures":
                continue
            if name.endswith("(trust weights)") and mode == "complete":
                continue  # complete mode weights everyone equally
            spec = dict(base) if name in DIRECT_ONLY_EXPOSURES else {**base, "mode": mode}
            if name == "algorithmic_bias" and mode in ("complete", "pairs"):
                # The biased draw over everyone is O(N²): measure at 2,000 agents.
                case, scale = small, UNIT / (1_000 if mode == "pairs" else 2_000)
            row[mode] = median_ms(spec, case, args.repeat) * scale
        rows.append(row)
        print(json.dumps(row), flush=True)
    modes = list(cases)
    cheapest = {m: min(r[m] for r in rows if m in r) for m in modes}
    print("\n| rule | " + " | ".join(f"{m} (ms)" for m in modes) + " |")
    print("|---|" + "---:|" * len(modes))
    for r in rows:
        cells = [f"{r[m]:.1f} ({r[m] / cheapest[m]:.1f}×)" if m in r else "—" for m in modes]
        print(f"| {r['rule']} | " + " | ".join(cells) + " |")
    out = ROOT / "bench" / "results" / f"belief_rules-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"machine": platform.platform(), "numpy": np.__version__,
                               "repeat": args.repeat, "rows": rows}, indent=1))
    print(f"\nrows saved in {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

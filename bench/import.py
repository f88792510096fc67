"""What `shoal import` costs as the population grows: CPU seconds to import generated
MiroShark simulation folders of several sizes, and the ratio between sizes a factor 10
apart (linear work gives about 10).

The folder is what MiroShark writes before a run (OASIS formats): `simulation_config.json`
with one `agent_configs` entry per agent (stance, sentiment bias, active hours, influence
weight), `twitter_profiles.csv`, `reddit_profiles.json` (every agent on both platforms)
and `polymarket_profiles.json`; three hot topics, two seed posts, two scheduled events.
The generator is seeded, so a size always gives the same folder. Timing covers
`import_simulation` only (reading, mapping, writing and validating the scenario), in this
process, CPU time (`time.process_time`), best of `--repeats`.

    .venv/bin/python bench/import.py                     # 1k, 10k, 100k; about 2 minutes
    .venv/bin/python bench/import.py --sizes 5000 10000 20000
    .venv/bin/python bench/import.py --generate 100000 DIR   # only write a folder
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shoal.runs.importer import import_simulation  # noqa: E402

STANCES = ("strongly_supportive", "supportive", "neutral", "observer", "opposing",
           "strongly_opposing")
TYPES = ("Person", "Student", "MediaOutlet", "NGO", "GovernmentAgency", "Company")


def generate(n: int, folder: Path, seed: int = 0) -> Path:
    """Write a MiroShark simulation folder of `n` agents into `folder`; return it."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    configs, reddit, poly = [], [], []
    with open(folder / "twitter_profiles.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["user_id", "name", "username", "user_char", "description"])
        for i in range(n):
            kind = rng.choice(TYPES)
            name = f"Agent {i}"
            bio = f"A {kind.lower()} in Harbour City. Has opinions about the port."
            persona = f"{name} is a {kind.lower()} who follows the port debate closely."
            w.writerow([i, name, f"agent{i}", f"{bio} {persona}", bio])
            start = rng.randrange(0, 12)
            configs.append({
                "agent_id": i, "entity_uuid": f"uuid-{i:08d}", "entity_name": name,
                "entity_type": kind, "activity_level": round(rng.uniform(0.1, 0.9), 2),
                "posts_per_hour": round(rng.uniform(0.1, 2.0), 2),
                "comments_per_hour": round(rng.uniform(0.1, 2.0), 2),
                "active_hours": list(range(start, start + rng.randrange(4, 12))),
                "response_delay_min": 5, "response_delay_max": 60,
                "sentiment_bias": round(rng.uniform(-1, 1), 2),
                "stance": rng.choice(STANCES),
                "influence_weight": round(rng.lognormvariate(0, 1), 3),
            })
            reddit.append({
                "user_id": i, "username": f"agent{i}", "name": name, "bio": bio,
                "persona": persona, "karma": rng.randrange(0, 10000),
                "created_at": "2026-03-02", "age": rng.randrange(18, 80),
                "gender": rng.choice(("female", "male", "other")), "mbti": "ISTJ",
                "country": "Portugal", "profession": kind,
                "interested_topics": ["Public policy"],
            })
            poly.append({"user_id": i, "name": f"agent{i}", "description": bio,
                         "risk_tolerance": rng.choice(("low", "medium", "high")),
                         "user_profile": persona})
    sim = {
        "simulation_id": f"bench_{n}", "project_id": "proj_bench", "graph_id": "graph_bench",
        "simulation_requirement": "Simulate how Harbour City reacts to the port expansion.",
        "time_config": {
            "total_simulation_hours": 72, "minutes_per_round": 60,
            "agents_per_hour_min": max(1, n // 100), "agents_per_hour_max": max(2, n // 20),
            "peak_hours": [19, 20, 21, 22], "peak_activity_multiplier": 1.5,
            "off_peak_hours": [0, 1, 2, 3, 4, 5], "off_peak_activity_multiplier": 0.05,
            "morning_hours": [6, 7, 8], "morning_activity_multiplier": 0.4,
            "work_hours": list(range(9, 19)), "work_activity_multiplier": 0.7,
        },
        "agent_configs": configs,
        "event_config": {
            "initial_posts": [
                {"content": "The port expansion vote is next week.", "poster_type": "Person",
                 "poster_agent_id": 1 % n},
                {"content": "Dredging will wreck the seagrass beds.", "poster_type": "NGO",
                 "poster_agent_id": 2 % n},
            ],
            "scheduled_events": [
                {"trigger_hour": 14, "content": "Leaked report: the fishery would close."},
                {"trigger_hour": 40, "title": "Council delays the vote",
                 "content": "The vote moves to next month.", "duration_hours": 3},
            ],
            "hot_topics": ["port expansion", "dredging", "marine life"],
            "narrative_direction": "Jobs versus the bay.",
        },
        "twitter_config": {"platform": "twitter", "recency_weight": 0.4,
                           "popularity_weight": 0.3, "relevance_weight": 0.3,
                           "viral_threshold": 10, "echo_chamber_strength": 0.5},
        "reddit_config": {"platform": "reddit", "recency_weight": 0.3,
                          "popularity_weight": 0.4, "relevance_weight": 0.3,
                          "viral_threshold": 15, "echo_chamber_strength": 0.6},
        "llm_model": "qwen-plus", "llm_base_url": "https://llm.example.com/v1",
    }
    (folder / "simulation_config.json").write_text(json.dumps(sim), encoding="utf-8")
    (folder / "reddit_profiles.json").write_text(json.dumps(reddit), encoding="utf-8")
    (folder / "polymarket_profiles.json").write_text(json.dumps(poly), encoding="utf-8")
    return folder


def cpu_seconds(src: Path, out: Path, repeats: int) -> float:
    """The least CPU time of `repeats` imports of `src` into `out` (replaced each time)."""
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        import_simulation("miroshark", src, out, force=True)
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    """Generate, import and report CPU seconds per size and the ratios."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000],
                    help="numbers of profiles (default: 1k, 10k, 100k)")
    ap.add_argument("--repeats", type=int, default=1, help="imports per size; the best counts")
    ap.add_argument("--generate", nargs=2, metavar=("N", "DIR"),
                    help="only write a folder of N profiles into DIR")
    args = ap.parse_args()
    if args.generate:
        print(generate(int(args.generate[0]), Path(args.generate[1])))
        return
    times: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="shoal-import-bench-") as tmp:
        # A first small import loads the modules it needs lazily: not timed.
        import_simulation("miroshark", generate(100, Path(tmp) / "warm"), Path(tmp) / "w")
        for n in sorted(args.sizes):
            src = generate(n, Path(tmp) / f"src_{n}")
            times[n] = cpu_seconds(src, Path(tmp) / f"out_{n}", args.repeats)
            print(f"{n:>9,} profiles  {times[n]:8.2f} CPU-s  "
                  f"{times[n] / n * 1e6:7.1f} CPU-µs per profile", flush=True)
    for n, t in times.items():
        if n % 10 == 0 and n // 10 in times and times[n // 10] > 0:
            print(f"time({n:,}) / time({n // 10:,}) = {t / times[n // 10]:.1f}  "
                  "(linear ≈ 10)")
    sizes = sorted(times)
    for a, b in itertools.pairwise(sizes):
        if b // a != 10 or b % a:
            print(f"time({b:,}) / time({a:,}) = {times[b] / times[a]:.2f}  "
                  f"(linear ≈ {b / a:.2f})")


if __name__ == "__main__":
    main()

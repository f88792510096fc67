"""Context assembly: time per agent turn, and tokens per turn over rounds.

Runs the quick-start model with every acting agent's context assembled
(`memory.context.build_for: all`) and reads back the `rounds` and `context` tables:

- time per turn = ms_context / assembled turns, against a baseline measured in the same
  run: one tiktoken encode of the same finished texts (the least any budgeted assembly must
  do is count the tokens of what it sends);
- tokens per turn (mean and max of the system text + observation, and of the memory
  section) at rounds 1, 10, 25, 50, 100: flat once memory has filled, within the budget.

    .venv/bin/python bench/context.py            # 300 agents, 100 rounds (~1 minute)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import duckdb

from shoal.config import load_config
from shoal.memory.tokens import encoding
from shoal.runs.inspect import inspect_agent
from shoal.runs.simulation import Simulation

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    """Run, then report timings and token curves as JSON lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--budget", type=int, default=2500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(ROOT / "configs" / "quickstart.yaml", [
            f"population.size={args.agents}", f"rounds={args.rounds}",
            "memory.context.build_for=all", f"memory.context.budget_tokens={args.budget}",
            f"output.dir={out}"])
        run = Simulation.create(cfg)
        try:
            run.run()
        finally:
            run.close()
        con = duckdb.connect(str(run.dir.db), read_only=True)
        ms_context, turns = con.execute(
            "SELECT sum(r.ms_context), (SELECT count(*) FROM context WHERE section = 'total') "
            "FROM rounds r").fetchone()
        curve = con.execute("""
            SELECT round, avg(tokens) FILTER (WHERE section = 'total'),
                   max(tokens) FILTER (WHERE section = 'total'),
                   avg(tokens) FILTER (WHERE section = 'memory'), max(budget)
            FROM context WHERE round IN (1, 10, 25, 50, 100, 200) GROUP BY round
            ORDER BY round""").fetchall()
        sample = con.execute("SELECT agent, platform, round FROM context WHERE section = "
                             "'total' AND round % 10 = 5 LIMIT 200").fetchall()
        con.close()
        # Baseline: encode the finished texts of a sample of turns (rebuilt by inspect).
        texts = []
        for agent, platform, rnd in sample:
            (got,) = inspect_agent(str(run.dir.root), agent, rnd, platform)
            texts += [got.assembled.system, got.assembled.observation]
        enc = encoding()
        t = time.perf_counter()
        for text in texts:
            enc.encode_ordinary(text)
        encode_ms = 1e3 * (time.perf_counter() - t) / (len(texts) / 2)
    per_turn = ms_context / turns
    print(json.dumps({"agents": args.agents, "rounds": args.rounds, "turns": turns,
                      "assembly_ms_per_turn": per_turn,
                      "encode_final_text_ms_per_turn": encode_ms,
                      "assembly_over_encode": per_turn / encode_ms}))
    for rnd, mean, top, memory, budget in curve:
        print(json.dumps({"round": rnd, "tokens_mean": mean, "tokens_max": top,
                          "memory_tokens_mean": memory, "budget": budget}))


if __name__ == "__main__":
    main()

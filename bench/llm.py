"""LLM agents at scale: round time against the ideal, engine CPU per call, prompt tokens.

1,000 LLM agents act every round (everyone active, Twitter only) against Shoal's loopback
server (a separate process) answering after 50 ms, with a concurrency limit of 128. The
ideal round is calls / concurrency x latency: what a client that did nothing but wait
would need. Reported per run:

- round time / ideal, and the decide step alone / ideal (the decide step is the calls;
  the rest of a round is feeds, context assembly, apply, update and logging);
- a baseline in the same run: the same number of calls with the same concurrency through
  the same chat model (`sim.llm.chat.chat_model`), one prompt body replayed, no engine:
  what this machine's HTTP stack and server reach;
- engine CPU time per call (this process only; the server runs in its own process);
- prompt tokens per call (context total, tiktoken) at rounds 1, 10, 25, 50, 100: flat,
  within the budget.

With `--cache-replay`, instead: the same workload run twice, recording its answers
(`llm.cache: record`) and then replaying them (`llm.cache: replay`, the endpoint pointing
nowhere, no loopback server started): whole-run and decide-step times of both, and the
ratio.

    .venv/bin/python bench/llm.py                 # 1,000 agents x 100 rounds (~4 minutes)
    .venv/bin/python bench/llm.py --rounds 10     # a quick look
    .venv/bin/python bench/llm.py --rounds 10 --cache-replay
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path

import duckdb

from sim.config import load_config
from sim.llm.chat import ChatRequest, chat_model
from sim.runs.simulation import Simulation

ROOT = Path(__file__).resolve().parents[1]


def cpu_seconds() -> float:
    """User + system CPU of this process (all its threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def overrides(args: argparse.Namespace, out: str) -> list[str]:
    """The LLM quick start turned into the benchmark workload."""
    return [f"population.size={args.agents}", f"rounds={args.rounds}", "population.groups=[]",
            "activity.level=1.0", "activity.hourly=flat", "platforms.reddit.enabled=false",
            "llm.agents.fraction=1.0", f"llm.providers.0.concurrency={args.concurrency}",
            f"llm.providers.0.loopback.latency_ms={args.latency_ms}",
            "llm.providers.0.timeout_s=60", "llm.round_deadline_s=600",
            f"memory.context.budget_tokens={args.budget}", "interventions=[]",
            "checkpoints.keep_last=2", f"output.dir={out}", f"executor.kind={args.executor}",
            f"executor.shards={args.shards}"]


def timed_run(cfg) -> tuple[float, float, int, Path]:
    """Wall seconds of a whole run (executor and servers started before the clock), the
    seconds of its decide steps, its LLM calls, and its run directory."""
    run = Simulation.create(cfg)
    try:
        run.driver()
        start = time.perf_counter()
        run.run()
        wall = time.perf_counter() - start
    finally:
        run.close()
    con = duckdb.connect(str(run.dir.db), read_only=True)
    decide, calls = con.execute("SELECT (SELECT sum(ms_decide) FROM rounds) / 1e3, "
                                "(SELECT count(*) FROM llm_calls)").fetchone()
    con.close()
    return wall, decide, calls, run.dir.root


def cache_replay(args: argparse.Namespace) -> dict:
    """The workload recorded, then replayed from its answers: times and ratios."""
    config = ROOT / "configs" / "llm_quickstart.yaml"
    with tempfile.TemporaryDirectory() as out:
        sets = overrides(args, out)
        off_wall, off_decide, _, _ = timed_run(load_config(config, sets))
        rec_wall, rec_decide, calls, root = timed_run(
            load_config(config, [*sets, "llm.cache=record"]))
        rep_wall, rep_decide, rep_calls, _ = timed_run(load_config(
            config, [*sets, "llm.cache=replay", f"llm.cache_dir={root / 'llm_cache'}",
                     "llm.providers.0.base_urls=[http://127.0.0.1:9/v1]"]))
    return {"mode": "cache replay vs recorded run", "agents": args.agents,
            "rounds": args.rounds, "calls": calls, "replayed_calls": rep_calls,
            "latency_ms": args.latency_ms, "concurrency": args.concurrency,
            "no_cache_run_s": round(off_wall, 2), "recorded_run_s": round(rec_wall, 2),
            "replay_run_s": round(rep_wall, 2), "run_speedup": round(rec_wall / rep_wall, 1),
            "no_cache_decide_s": round(off_decide, 2),
            "recorded_decide_s": round(rec_decide, 2), "replay_decide_s": round(rep_decide, 2),
            "decide_speedup": round(rec_decide / rep_decide, 1)}


def baseline(url: str, body: dict, calls: int, concurrency: int, provider) -> float:
    """Seconds for `calls` replays of one request through the chat model at `concurrency`."""
    client = chat_model(provider, [url], concurrency)
    request = ChatRequest(messages=body["messages"], tools=body.get("tools"),
                          tool_choice=body.get("tool_choice"), seed=body.get("seed"))

    async def go() -> float:
        await asyncio.gather(*(client.chat(request, key=i) for i in range(concurrency)))
        start = time.perf_counter()
        await asyncio.gather(*(client.chat(request, key=i) for i in range(calls)))
        elapsed = time.perf_counter() - start
        await client.close()
        return elapsed

    return asyncio.run(go())


def main() -> None:
    """Run the workload and print the results as JSON lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--budget", type=int, default=2500)
    ap.add_argument("--executor", choices=["local", "ray"], default="local")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--cache-replay", action="store_true",
                    help="time a recorded run and its replay from the response cache")
    args = ap.parse_args()
    if args.cache_replay:
        print(json.dumps(cache_replay(args), indent=1))
        return
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(ROOT / "configs" / "llm_quickstart.yaml", overrides(args, out))
        run = Simulation.create(cfg)
        marks: list[tuple[int, float, float]] = []
        try:
            run.driver()  # starts the executor and the loopback server before timing
            start_wall, start_cpu = time.perf_counter(), cpu_seconds()
            run.run(on_round=lambda s: marks.append(
                (s.round, time.perf_counter(), cpu_seconds())))
            wall, cpu = time.perf_counter() - start_wall, cpu_seconds() - start_cpu
            url = run.engine.endpoints.urls(cfg.llm.providers[0])[0]
            received = json.loads(__import__("httpx").get(
                url.replace("/v1", "/_shoal/requests"), timeout=30).text)["requests"]
            body = received[-1]["request"]
            base_s = baseline(url, body, args.agents, args.concurrency,
                              cfg.llm.providers[0])
        finally:
            run.close()
        con = duckdb.connect(str(run.dir.db), read_only=True)
        per_round = con.execute("""
            SELECT r.round, r.ms_decide, r.ms_context, c.calls, c.failed
            FROM rounds r JOIN (SELECT round, count(*) AS calls,
                                       count(*) FILTER (WHERE status <> 'ok') AS failed
                                FROM llm_calls GROUP BY round) c USING (round)
            ORDER BY r.round""").fetchall()
        tokens = con.execute("""
            SELECT round, avg(tokens), max(tokens), max(budget) FROM context
            WHERE section = 'total' AND round IN (1, 10, 25, 50, 100) GROUP BY round
            ORDER BY round""").fetchall()
        con.close()
    latency = args.latency_ms / 1e3
    calls = sum(r[3] for r in per_round)
    ideal = sum(r[3] / args.concurrency * latency for r in per_round)
    decide = sum(r[1] for r in per_round) / 1e3
    # The second half alone: memory and feeds filled, the client's pools warm.
    half = args.rounds // 2
    ends = {r: t for r, t, _ in marks}
    round_steady = ends[args.rounds] - ends[half] if half else 0.0
    ideal_steady = sum(r[3] / args.concurrency * latency for r in per_round if r[0] > half)
    ideal_base = args.agents / args.concurrency * latency
    results = {
        "executor": f"{args.executor} x{args.shards}", "agents": args.agents,
        "rounds": args.rounds, "calls": calls,
        "failed_calls": sum(r[4] for r in per_round), "latency_ms": args.latency_ms,
        "concurrency": args.concurrency,
        "round_s_mean": round(wall / args.rounds, 3),
        "ideal_round_s": round(ideal / args.rounds, 3),
        "ideal_over_round": round(ideal / wall, 3),
        "ideal_over_decide": round(ideal / decide, 3),
        "ideal_over_round_second_half": round(ideal_steady / round_steady, 3)
        if round_steady else None,
        "baseline_client_s": round(base_s, 3), "ideal_over_baseline": round(ideal_base / base_s, 3),
        "engine_cpu_ms_per_call": round(1e3 * cpu / calls, 3),
        "context_ms_per_call": round(sum(r[2] for r in per_round) / calls, 3),
        "prompt_tokens": [{"round": r, "mean": round(m, 1), "max": mx, "budget": b}
                          for r, m, mx, b in tokens],
    }
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

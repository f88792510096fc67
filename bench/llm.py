"""LLM agents at scale: round time against the ideal, engine CPU per call, prompt tokens.

1,000 LLM agents act every round (everyone active, Twitter only) against Shoal's loopback
server (a separate process) answering after 50 ms, with a concurrency limit of 128. The
ideal round is calls / concurrency x latency: what a client that did nothing but wait
would need. Reported per run:

- round time / ideal, and the decide step alone / ideal (the decide step is the calls;
  the rest of a round is feeds, context assembly, apply, update and logging);
- a baseline in the same run: the same number of calls with the same concurrency through
  the same chat model (`shoal.llm.chat.chat_model`), one prompt body replayed, no engine:
  what this machine's HTTP stack and server reach;
- engine CPU time per call (this process only; the server runs in its own process), and
  the driver's own CPU per call (`rounds.driver_cpu_ms`: its main thread, so without the
  shards' event loop thread, nor the Ray actors);
- the decide step against the client-only baseline (1 = the calls cost what HTTP alone
  costs);
- prompt tokens per call (context total, tiktoken) at rounds 1, 10, 25, 50, 100: flat,
  within the budget;
- prompt prefix reuse from round 3 on: the share of prompt tokens equal to the start of
  the agent's previous prompt (`rounds.prefix_reuse`), and the share the loopback
  server's prefix cache reported cached (`llm_calls.cached_tokens` over its
  `prompt_tokens`, which count the tools too), per round at 3, 10, 25, 50, 100 and
  their mean over rounds >= 3; and what the measure costs a turn, against a baseline in
  the same run: encoding both whole prompts and comparing their tokens, on the same
  consecutive prompts (the last 5,000 requests the server recorded).

With `--cache-replay`, instead: the same workload run twice, recording its answers
(`llm.cache: record`) and then replaying them (`llm.cache: replay`, the endpoint pointing
nowhere, no loopback server started): whole-run and decide-step times of both, and the
ratio.

    .venv/bin/python bench/llm.py                 # 1,000 agents x 100 rounds (~4 minutes)
    .venv/bin/python bench/llm.py --rounds 10     # a quick look
    .venv/bin/python bench/llm.py --rounds 10 --cache-replay
    .venv/bin/python bench/llm.py --rounds 10 --executor ray --shards 2 --contexts shards
    .venv/bin/python bench/llm.py --agents 10000 --rounds 3 --cluster   # 3-node test cluster

With `--cluster`: the 3-node Ray test cluster (tests/cluster.py: a head and two workers on
this machine, one CPU each) is started, and the benchmark runs once per `--legs` context
mode in a child process joining it (`executor.shards=auto`: 3 shards, spread).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from shoal.config import load_config
from shoal.engine.executors import new_event_loop
from shoal.llm.chat import ChatRequest, chat_model
from shoal.runs.simulation import Simulation

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
            f"executor.shards={args.shards}", f"executor.contexts={args.contexts}",
            *([f"executor.address={json.dumps(args.address)}"] if args.address else [])]


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


def prefix_reuse(con) -> dict:
    """From round 3 on: the measured prefix reuse share per round (rounds.prefix_reuse)
    and the share of the server's prompt tokens it reported cached, at a few rounds and
    as means over every round >= 3."""
    rows = con.execute("""
        SELECT r.round, r.prefix_reuse, c.cached / c.prompt
        FROM rounds r JOIN (SELECT round, sum(cached_tokens)::DOUBLE AS cached,
                                   sum(prompt_tokens) FILTER (WHERE cached_tokens IS NOT NULL)
                                   AS prompt
                            FROM llm_calls GROUP BY round) c USING (round)
        WHERE r.round >= 3 ORDER BY r.round""").fetchall()
    if not rows:
        return {}
    return {
        "prefix_reuse_mean_rounds_3_plus": round(sum(r[1] for r in rows) / len(rows), 3),
        "server_cached_share_mean_rounds_3_plus": round(
            sum(r[2] or 0 for r in rows) / len(rows), 3),
        "prefix_reuse": [{"round": r, "reuse": round(x, 3),
                          "server_cached_share": round(c, 3) if c is not None else None}
                         for r, x, c in rows if r in (3, 10, 25, 50, 100)]}


def measure_cost(received: list[dict]) -> dict:
    """Milliseconds a turn of the prefix reuse measure (memory/prefix_reuse.py) and of the
    naive way (encode both whole prompts, compare token by token), on the consecutive
    prompts of the agents in the server's record; the two must agree."""
    import re

    from shoal.memory.prefix_reuse import PrefixReuse
    from shoal.memory.tokens import encoding

    def pieces(text: str) -> list[str]:  # the assembled pieces (split at section headers)
        parts = text.split("\n\n## ")
        parts = [p if i == 0 else "## " + p for i, p in enumerate(parts)]
        return [p + "\n\n" for p in parts[:-1]] + parts[-1:]

    prompts = []
    for entry in received:
        messages = (entry.get("request") or {}).get("messages") or []
        if len(messages) != 2:
            continue
        system, user = messages[0]["content"], messages[1]["content"]
        who = re.search(r"\(@([\w.\-]+)\)", system)
        if who:
            prompts.append((who.group(1), pieces(system) + pieces(user), system, user))
    enc = encoding()
    memo = PrefixReuse()
    agents = {a: i for i, a in enumerate(dict.fromkeys(a for a, _, _, _ in prompts))}
    start = time.perf_counter()
    fast = [memo.measure(agents[a], p) for a, p, _, _ in prompts]
    fast_s = time.perf_counter() - start
    previous: dict[str, list[int]] = {}
    naive = []
    start = time.perf_counter()
    for a, _, system, user in prompts:
        tokens = enc.encode_ordinary(system) + enc.encode_ordinary(user)
        n = 0
        for x, y in zip(tokens, previous.get(a, []), strict=False):
            if x != y:
                break
            n += 1
        naive.append(n)
        previous[a] = tokens
    naive_s = time.perf_counter() - start
    return {"measure_turns": len(prompts), "measure_agrees_with_naive": fast == naive,
            "measure_ms_per_turn": round(1e3 * fast_s / max(1, len(prompts)), 3),
            "naive_ms_per_turn": round(1e3 * naive_s / max(1, len(prompts)), 3)}


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

    with asyncio.Runner(loop_factory=new_event_loop) as runner:  # the shards' loop kind
        return runner.run(go())


def loop_kind() -> str:
    """Which event loop the in-process shards (and the baseline) use: uvloop or asyncio."""
    loop = new_event_loop()
    loop.close()
    return type(loop).__module__.split(".")[0]


def on_cluster(args: argparse.Namespace) -> None:
    """Start the 3-node test cluster; run the benchmark in a child process joining it,
    once per context mode of `--legs`."""
    sys.path.insert(0, str(ROOT))
    from tests.cluster import ray_cluster

    with ray_cluster() as cluster:
        for mode in args.legs.split(","):
            cmd = [sys.executable, __file__, "--agents", str(args.agents), "--rounds",
                   str(args.rounds), "--concurrency", str(args.concurrency), "--latency-ms",
                   str(args.latency_ms), "--budget", str(args.budget), "--executor", "ray",
                   "--shards", "auto", "--contexts", mode, "--address", cluster.address]
            done = subprocess.run(cmd, env=cluster.env, capture_output=True, text=True)
            if done.returncode:
                print(done.stderr[-3000:], file=sys.stderr)
                raise SystemExit(done.returncode)
            print(f"# 3-node test cluster, contexts: {mode}")
            print(done.stdout, flush=True)


def main() -> None:
    """Run the workload and print the results as JSON lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--budget", type=int, default=2500)
    ap.add_argument("--executor", choices=["local", "ray"], default="local")
    ap.add_argument("--shards", default="1", help="a count, or auto")
    ap.add_argument("--contexts", choices=["driver", "shards", "auto"], default="auto",
                    help="executor.contexts: where the LLM agents' contexts are built")
    ap.add_argument("--address", help="executor.address: a Ray cluster to join")
    ap.add_argument("--cluster", action="store_true",
                    help="run on the 3-node test cluster (tests/cluster.py)")
    ap.add_argument("--legs", default="driver,shards",
                    help="with --cluster: the context modes to run, in order")
    ap.add_argument("--cache-replay", action="store_true",
                    help="time a recorded run and its replay from the response cache")
    args = ap.parse_args()
    if args.cluster:
        on_cluster(args)
        return
    if args.cache_replay:
        print(json.dumps(cache_replay(args), indent=1))
        return
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(ROOT / "configs" / "llm_quickstart.yaml", overrides(args, out))
        run = Simulation.create(cfg)
        marks: list[tuple[int, float, float]] = []
        try:
            in_shards = run.driver().in_shards  # starts the executor and the server first
            start_wall, start_cpu = time.perf_counter(), cpu_seconds()
            run.run(on_round=lambda s: marks.append(
                (s.round, time.perf_counter(), cpu_seconds())))
            wall, cpu = time.perf_counter() - start_wall, cpu_seconds() - start_cpu
            url = run.engine.endpoints.urls(cfg.llm.providers[0])[0]
            received = json.loads(__import__("httpx").get(
                url.replace("/v1", "/_shoal/requests"), timeout=30).text)["requests"]
            body = received[-1]["request"]
            cost = measure_cost(received)
            base_s = baseline(url, body, args.agents, args.concurrency,
                              cfg.llm.providers[0])
        finally:
            run.close()
        con = duckdb.connect(str(run.dir.db), read_only=True)
        per_round = con.execute("""
            SELECT r.round, r.ms_decide, r.ms_context, c.calls, c.failed, r.driver_cpu_ms
            FROM rounds r JOIN (SELECT round, count(*) AS calls,
                                       count(*) FILTER (WHERE status <> 'ok') AS failed
                                FROM llm_calls GROUP BY round) c USING (round)
            ORDER BY r.round""").fetchall()
        tokens = con.execute("""
            SELECT round, avg(tokens), max(tokens), max(budget) FROM context
            WHERE section = 'total' AND round IN (1, 10, 25, 50, 100) GROUP BY round
            ORDER BY round""").fetchall()
        reuse = prefix_reuse(con)
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
        "executor": f"{args.executor} x{args.shards}" + (" (cluster)" if args.address else ""),
        "event_loop": loop_kind(),
        "contexts": args.contexts, "in_shards": in_shards, "agents": args.agents,
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
        "baseline_over_decide": round(base_s * len(per_round) / decide, 3),
        "engine_cpu_ms_per_call": round(1e3 * cpu / calls, 3),
        "driver_cpu_ms_per_call": round(sum(r[5] for r in per_round) / calls, 3),
        "context_ms_per_call": round(sum(r[2] for r in per_round) / calls, 3),
        "prompt_tokens": [{"round": r, "mean": round(m, 1), "max": mx, "budget": b}
                          for r, m, mx, b in tokens],
        **reuse, **cost,
    }
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

"""`shoal serve` speed: the API's latency on a large run's pages, the run page's first paint
in a real browser, and what a watching browser costs the run it watches.

    .venv/bin/python bench/web.py                        # 100,000 agents x 24 rounds
    .venv/bin/python bench/web.py --config configs/large.yaml --rounds 10   # 1,000,000

Parts (each a ratio against a baseline measured in the same run, as bench/README.md asks):

- api: p50/p95 of each endpoint a run page calls (series, posts, network, agent, run), 20
  requests each after one warm-up, against `shoal serve` in its own process; baseline: the
  same aggregates through the notebook API (`open_run(...)`, pandas), once.
- paint: the run page in Debian's Chromium (Playwright, through its executable path) until
  its first belief chart is drawn; baseline: the static report of the same run (`shoal
  report`) opened as a file, until loaded.
- live: the same config run twice with its live mirror on, once with a client that follows
  the event stream and refetches the series on every round (what the run page does), once
  without; ratio of the rounds' wall times.
Results go to bench/results/web-<time>.json and are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def shoal(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "shoal", *args], check=True, capture_output=True,
                          text=True, **kw)


def make_run(config: Path, out: Path, sets: list[str]) -> tuple[Path, float]:
    """Run `config` into `out` with its live mirror; the run directory and its seconds."""
    start = time.perf_counter()
    shoal("run", str(config), "--out", str(out), "--quiet", "--set",
          "output.live_parquet=true", *[a for s in sets for a in ("--set", s)])
    took = time.perf_counter() - start
    (run,) = [p for p in out.iterdir() if (p / "run.json").is_file()]
    return run, took


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`shoal serve FOLDER` in its own process on 127.0.0.1."""

    def __init__(self, folder: Path):
        self.port = free_port()
        self.proc = subprocess.Popen([PY, "-m", "shoal", "serve", str(folder), "--port",
                                      str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(self.url + "/api/info", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def quantiles(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {"p50_ms": statistics.median(ms), "p95_ms": ms[max(0, round(0.95 * len(ms)) - 1)],
            "n": len(ms)}


def part_api(folder: Path, run: Path, repeats: int) -> dict:
    """Latency of each endpoint a run page calls, and the notebook baseline."""
    served = Served(folder)
    out: dict[str, dict] = {}
    rid = run.name
    paths = {"run": f"/api/runs/{rid}", "series": f"/api/runs/{rid}/series",
             "posts": f"/api/runs/{rid}/posts?limit=20",
             "network": f"/api/runs/{rid}/network?max_nodes=2000",
             "agent": f"/api/runs/{rid}/agents/0"}
    try:
        with httpx.Client(base_url=served.url, timeout=600) as c:
            for name, path in paths.items():
                t = time.perf_counter()
                c.get(path).raise_for_status()  # the first request: cold (nothing kept)
                cold = time.perf_counter() - t
                times = []
                for _ in range(repeats):
                    t = time.perf_counter()
                    r = c.get(path)
                    times.append(time.perf_counter() - t)
                    r.raise_for_status()
                out[name] = {"cold_ms": cold * 1000, **quantiles(times),
                             "bytes": len(r.content)}
    finally:
        served.close()
    from shoal.analysis.notebook import open_run

    t = time.perf_counter()
    nb = open_run(run)
    nb.belief_stats()
    nb.polarization()
    out["notebook_baseline"] = {"seconds": time.perf_counter() - t,
                                "what": "open_run + belief_stats + polarization (pandas)"}
    out["series_p95_over_notebook"] = (out["series"]["p95_ms"] / 1000
                                       / out["notebook_baseline"]["seconds"])
    return out


def part_paint(folder: Path, run: Path, tmp: Path) -> dict:
    """The run page until its first belief chart is drawn, and the static report."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return {"skipped": "Debian's chromium is not installed"}
    report = tmp / "report.html"
    shoal("report", str(run), "--out", str(report))
    served = Served(folder)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            times, base = [], []
            for _ in range(3):
                t = time.perf_counter()
                page.goto(f"{served.url}/#/run/{run.name}")
                page.wait_for_selector("[id^=chart-beliefs-][data-rounds]", timeout=600_000)
                times.append(time.perf_counter() - t)
                page.goto("about:blank")
                t = time.perf_counter()
                page.goto(report.as_uri(), wait_until="load")
                base.append(time.perf_counter() - t)
                page.goto("about:blank")
            browser.close()
    finally:
        served.close()
    return {"run_page_first_chart_ms": [t * 1000 for t in times],  # cold, then warm
            "static_report_load_ms": [t * 1000 for t in base],
            "cold_ratio": times[0] / statistics.median(base),
            "warm_ratio": statistics.median(times[1:]) / statistics.median(base)}


def rounds_seconds(run: Path) -> float:
    """Wall time from the end of round 1 to the end of the last round (the rounds a
    watcher can slow: process start-up and round 0 left out)."""
    import duckdb

    con = duckdb.connect(str(run / "trajectory.duckdb"), read_only=True)
    try:
        (span,) = con.execute("SELECT epoch(max(wall_time) - min(wall_time)) FROM rounds "
                              "WHERE round >= 1").fetchone()
    finally:
        con.close()
    return float(span)


def part_live(config: Path, sets: list[str], tmp: Path, pairs: int = 2) -> dict:
    """Rounds' wall time with and without a client following the run live, alternated."""
    plain, watched, fetched, latency = [], [], [0], []
    for i in range(pairs):
        run, _ = make_run(config, tmp / f"live-off-{i}", sets)
        plain.append(rounds_seconds(run))
        folder = tmp / f"live-on-{i}"
        folder.mkdir()
        served = Served(folder)
        stop = threading.Event()

        seen: dict[int, datetime] = {}  # round -> when its event reached the client

        def watch(url: str = served.url, stop: threading.Event = stop,
                  seen: dict[int, datetime] = seen) -> None:
            # what the run page does: follow the events, refetch the series on each round
            with httpx.Client(base_url=url, timeout=600) as c, \
                    contextlib.suppress(httpx.HTTPError):  # (the server goes at the end)
                while not stop.is_set():
                    runs = c.get("/api/runs").json()["runs"]
                    if not runs:
                        time.sleep(0.05)
                        continue
                    rid = runs[0]["run_id"]
                    with c.stream("GET", f"/api/runs/{rid}/events") as ev:
                        for line in ev.iter_lines():
                            if stop.is_set():
                                return
                            if not line.startswith("data:"):
                                continue
                            done = json.loads(line[5:])["rounds_done"]
                            seen.setdefault(done, datetime.now())
                            if c.get(f"/api/runs/{rid}/series").status_code == 200:
                                fetched[0] += 1

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            run, _ = make_run(config, folder, sets)
            watched.append(rounds_seconds(run))
            ends = round_ends(run)
            latency += [(at - ends[r]).total_seconds() for r, at in seen.items()
                        if r in ends and r >= 1]
        finally:
            stop.set()
            served.close()
    return {"unwatched_s": plain, "watched_s": watched,
            "ratio": statistics.median(watched) / statistics.median(plain),
            "series_fetched": fetched[0],
            # from a round's end in the writer to its event at the client
            "event_latency": quantiles(latency) if latency else None}


def round_ends(run: Path) -> dict[int, datetime]:
    """Each round's `wall_time`: when the writer finished it (the same clock as ours)."""
    import duckdb

    con = duckdb.connect(str(run / "trajectory.duckdb"), read_only=True)
    try:
        return dict(con.execute("SELECT round, wall_time FROM rounds").fetchall())
    finally:
        con.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    ap.add_argument("--agents", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--parts", default="api,paint,live")
    ap.add_argument("--tmp", default="/tmp/shoal-bench-web")
    args = ap.parse_args(argv)
    tmp = Path(args.tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    sets = [f"population.size={args.agents}", f"rounds={args.rounds}"]
    config = Path(args.config)
    parts = args.parts.split(",")
    result: dict = {"config": config.name, "agents": args.agents, "rounds": args.rounds,
                    "when": datetime.now().isoformat(timespec="seconds")}
    out = ROOT / "bench" / "results" / f"web-{datetime.now():%Y%m%d-%H%M%S}.json"
    if {"api", "paint"} & set(parts):
        folder = tmp / "served"
        folder.mkdir()
        run, took = make_run(config, folder, sets)
        result["run_s"] = took
        if "api" in parts:
            result["api"] = part_api(folder, run, args.repeats)
            out.write_text(json.dumps(result, indent=2))
        if "paint" in parts:
            result["paint"] = part_paint(folder, run, tmp)
            out.write_text(json.dumps(result, indent=2))
    if "live" in parts:
        result["live"] = part_live(config, sets, tmp)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

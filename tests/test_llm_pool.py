"""Endpoint pools: least-loaded routing over a provider's base URLs, limits per endpoint
(requests and tokens per minute, Retry-After), and the circuit breaker; `shoal llm-serve
--servers N` starting a pool of loopback servers.

The servers run in this process, so their own request logs (arrival times) are the
evidence of what each endpoint was sent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
import yaml

from shoal.config.llm import BreakerConfig, EndpointConfig
from shoal.core.errors import ConfigError
from shoal.llm.pool import FAILED, NEUTRAL, OK, EndpointPool
from shoal.llm.server import Faults, serve_in_thread
from tests.conftest import CONFIGS, ROOT
from tests.helpers import make_config, query, read_table, run_config, tables_differ

RPM = 300  # per endpoint: 5 requests a second, at most 5 banked
ARRIVAL_SLACK_S = 0.5  # how far apart in time the server may log requests sent together


class FakeClock:
    """A monotonic clock for a pool that moves only when the pool sleeps or the test says
    so: waits are exact and none is spent. It starts far from 0, as a real one does."""

    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)  # still yield to the loop, as a real sleep does

    def pool(self, *args, **kwargs) -> EndpointPool:
        """An EndpointPool reading this clock."""
        return EndpointPool(*args, clock=self, sleep=self.sleep, **kwargs)


def pool_dict(endpoints: list, size: int = 100, rounds: int = 3) -> dict:
    """The LLM quick start, shrunk, its provider a pool of `endpoints`."""
    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    data.update(rounds=rounds)
    data["population"]["size"] = size
    provider = data["llm"]["providers"][0]
    del provider["base_urls"]
    provider.update(endpoints=endpoints, max_retries=4, timeout_s=10, concurrency=16)
    data["llm"]["agents"]["fraction"] = 0.5
    data["interventions"][0]["round"] = 2
    return data


def _log(server) -> list[dict]:
    return httpx.get(server.url.replace("/v1", "/_shoal/requests"), timeout=30
                     ).json()["requests"]


@pytest.fixture(scope="module")
def servers():
    """A plain endpoint, one answering 20% of requests with 429, and a slow one."""
    started = [serve_in_thread(faults=Faults(latency_ms=20), seed=0),
               serve_in_thread(faults=Faults(latency_ms=20, rate_limit_rate=0.2,
                                             retry_after_s=0.3), seed=0),
               serve_in_thread(faults=Faults(latency_ms=400), seed=0)]
    yield started
    for s in started:
        s.stop()


@pytest.mark.slow
def test_a_pool_spreads_calls_within_each_endpoints_limits(servers, tmp_path):
    """Every request is logged with its endpoint; each endpoint's requests stay within
    its rpm (from the servers' own logs); waits for the limits are logged; and what the
    agents decided is what a single plain endpoint gives (routing changes where, never
    what: the loopback answer is a function of the body)."""
    data = pool_dict([{"url": s.url, "rpm": RPM} for s in servers])
    run = run_config(make_config(data, tmp_path / "pool"))
    db = run.dir.db
    urls = {s.url for s in servers}
    by_url = dict(query(db, "SELECT base_url, count(*) FROM llm_calls GROUP BY ALL"))
    assert set(by_url) == urls  # every row names its endpoint, and each got some
    assert query(db, "SELECT count(*) FROM llm_calls WHERE http_status = 429")[0][0] > 0
    assert query(db, "SELECT count(*) FROM llm_calls WHERE wait_ms > 0")[0][0] > 0
    rate, banked = RPM / 60, max(1.0, RPM / 60)
    for server in servers:
        times = sorted(e["time"] for e in _log(server))
        assert len(times) == by_url[server.url]
        # Every window [t_i, t_j]: at most its share, +1. The times are the server's, taken
        # when its thread (in this process, beside the run's) got to each request: on busy
        # cores arrivals sent apart can be logged together, so a window is allowed
        # ARRIVAL_SLACK_S more of the rate (a limiter that did not limit sends hundreds a
        # second here, far beyond it).
        for i in range(len(times)):
            for j in range(i, len(times)):
                allowed = banked + rate * (times[j] - times[i] + ARRIVAL_SLACK_S) + 1
                assert j - i + 1 <= allowed, (server.url, i, j)
    # The same decisions as through one plain endpoint.
    plain = serve_in_thread(seed=0)
    try:
        ref = run_config(make_config(pool_dict([plain.url]), tmp_path / "plain"))
    finally:
        plain.stop()
    assert tables_differ(ref.dir.db, db) in ([], ["llm_calls"])
    decided = ["round", "agent", "platform", "call", "outcome", "prompt_tokens",
               "completion_tokens", "fallback_reason"]
    ours, theirs = (read_table(d, "llm_calls") for d in (db, ref.dir.db))
    ours = ours[ours["outcome"] != "retried"][decided]
    assert ours.sort_values(decided).reset_index(drop=True).equals(
        theirs[decided].sort_values(decided).reset_index(drop=True))


@pytest.mark.slow
def test_the_breaker_takes_out_a_failing_endpoint(tmp_path):
    """One endpoint answers 500 to everything: after `failures` in a row it is out (for a
    cool-down longer than the run), and the run completes on the other two with no turn
    lost to it."""
    good = [serve_in_thread(faults=Faults(latency_ms=20), seed=0) for _ in range(2)]
    bad = serve_in_thread(faults=Faults(error_rate=1.0), seed=0)
    try:
        data = pool_dict([good[0].url, bad.url, good[1].url])
        data["llm"]["providers"][0]["breaker"] = {"failures": 3, "cooldown_s": 600}
        run = run_config(make_config(data, tmp_path))
        failed = len(_log(bad))
    finally:
        for s in (*good, bad):
            s.stop()
    db = run.dir.db
    assert [r for (r,) in query(db, "SELECT round FROM rounds ORDER BY 1")] == [1, 2, 3]
    assert 3 <= failed <= 3 + 16  # the failures that tripped it, and those already in flight
    assert query(db, f"SELECT count(*) FROM llm_calls WHERE base_url = '{bad.url}' AND "
                     "round > 1")[0][0] == 0
    assert query(db, "SELECT count(*) FROM llm_calls WHERE outcome <> 'retried' AND "
                     "status <> 'ok'")[0][0] == 0  # every call got its answer elsewhere


def test_a_tripped_endpoint_is_probed_once_and_restored():
    """The breaker's states, on the pool itself: out after N failures in a row (while
    another endpoint serves), one probe after the cool-down, back on success; the last
    endpoint in service is never taken out."""
    clock = FakeClock()

    async def go() -> None:
        pool = clock.pool(["http://a", "http://b"], breaker=BreakerConfig(
            failures=2, cooldown_s=0.25))
        for _ in range(2):
            a, _ = await pool.acquire(0, 10)
            assert a.url == "http://a"  # agent 0's own, while the pool is idle
            pool.release(a, FAILED)
        assert pool.out() == ["http://a"]
        for _ in range(3):
            e, _ = await pool.acquire(0, 10)
            assert e.url == "http://b"
            pool.release(e, FAILED)  # b fails too, but it is the last one in service
        assert pool.out() == ["http://a"]
        e, _ = await pool.acquire(1, 10)
        pool.release(e, OK)  # b answers again
        clock.advance(0.125)  # a is still cooling down: agent 0 goes to b
        assert pool.out() == ["http://a"]
        e, waited = await pool.acquire(0, 10)
        assert e.url == "http://b" and waited == 0.0
        pool.release(e, OK)
        clock.advance(0.125)  # a's cool-down is over, to the tick: one probe at a time
        assert pool.out() == []
        probe, _ = await pool.acquire(0, 10)
        assert probe.url == "http://a" and probe.probing
        other, _ = await pool.acquire(0, 10)
        assert other.url == "http://b"  # a is being probed
        pool.release(probe, OK)
        pool.release(other, OK)
        assert pool.out() == [] and pool.endpoints[0].failures == 0

    asyncio.run(go())


def test_least_loaded_routing_and_limits_on_the_pool():
    """A busy endpoint is passed over for an idle one (ties: the caller's own first); an
    endpoint whose bucket is empty makes the caller wait for it or go elsewhere; a
    Retry-After pauses an endpoint, a caller with nowhere else to go waiting exactly as
    long as the limits say."""
    clock = FakeClock()

    async def go() -> None:
        pool = clock.pool(["http://a", "http://b", "http://c"],
                          [EndpointConfig(url="http://a", rpm=60), None, None])
        first, _ = await pool.acquire(1, 10)
        second, _ = await pool.acquire(1, 10)
        third, _ = await pool.acquire(1, 10)
        assert [first.url, second.url, third.url] == ["http://b", "http://c", "http://a"]
        for e in (first, second, third):
            pool.release(e, OK)
        # a's bucket (1 a second, 1 banked) is empty: agent 0 goes to b at once
        e, waited = await pool.acquire(0, 10)
        assert e.url == "http://b" and waited == 0.0
        pool.release(e, NEUTRAL, retry_after=0.3)  # b says 429, Retry-After 0.3 s
        e2, _ = await pool.acquire(1, 10)
        assert e2.url == "http://c"  # b is paused
        pool.release(e2, OK)
        only = clock.pool(["http://a"], [EndpointConfig(url="http://a", rpm=120)])
        start = clock()
        waits = []
        for _ in range(4):  # 2 a second, 2 banked: the 3rd and 4th wait 0.5 s each
            e, waited = await only.acquire(0, 10)
            only.release(e, OK)
            waits.append(waited)
        assert waits == [0.0, 0.0, 0.5, 0.5] and clock() - start == 1.0
        e, _ = await only.acquire(0, 10)
        only.release(e, NEUTRAL, retry_after=2.0)  # a 429 on the only endpoint
        e, waited = await only.acquire(0, 10)
        assert waited == 2.0  # the pause, longer than the bucket's 0.5 s, is what it waits
        only.release(e, OK)

    asyncio.run(go())


def test_bad_pool_settings_are_named_by_path(tmp_path):
    for change, message in (
            ({"endpoints": [{"url": "http://x/v1", "rpm": 0}]},
             r"llm\.providers\.0\.endpoints\.0\.rpm: must be > 0"),
            ({"endpoints": [{"url": "http://x/v1", "tpm": -5}]},
             r"llm\.providers\.0\.endpoints\.0\.tpm: must be > 0"),
            ({"endpoints": [{"url": "ftp://x"}]},
             r"llm\.providers\.0\.endpoints\.0\.url: must be http\(s\) URLs"),
            ({"base_urls": ["http://y/v1"], "endpoints": ["http://x/v1"]},
             r"llm\.providers\.0\.endpoints: must list the same URLs as base_urls"),
            ({"endpoints": ["http://x/v1"], "breaker": {"failures": -1}},
             r"llm\.providers\.0\.breaker\.failures: must be >= 0")):
        data = pool_dict(["http://x/v1"])
        data["llm"]["providers"][0].pop("endpoints")
        data["llm"]["providers"][0].update(change)
        with pytest.raises(ConfigError, match=message):
            make_config(data, tmp_path)


def test_duplicate_urls_in_a_pool_are_refused_by_path(tmp_path):
    """Issue 26 item 14: the same endpoint twice in a pool (as written, with a trailing
    slash or another case of host, `loopback` twice) is refused when the config is read,
    naming the second one's path and the first's; distinct endpoints pass."""
    for field, urls, message in (
            ("base_urls", ["http://x:8000/v1", "http://y:8000/v1", "http://x:8000/v1"],
             r"llm\.providers\.0\.base_urls\.2: http://x:8000/v1 is already in the pool "
             r"\(base_urls\.0\)"),
            ("base_urls", ["http://GPU-1:8000/v1/", "http://gpu-1:8000/v1"],
             r"llm\.providers\.0\.base_urls\.1: .* is already in the pool"),
            ("base_urls", ["loopback", "loopback"],
             r"llm\.providers\.0\.base_urls\.1: loopback is already in the pool"),
            ("endpoints", ["http://x/v1", {"url": "http://x/v1", "rpm": 60}],
             r"llm\.providers\.0\.endpoints\.1\.url: http://x/v1 is already in the pool "
             r"\(endpoints\.0\.url\)")):
        data = pool_dict(["http://x/v1"])
        provider = data["llm"]["providers"][0]
        provider.pop("endpoints")
        provider[field] = urls
        with pytest.raises(ConfigError, match=message):
            make_config(data, tmp_path)
    data = pool_dict(["http://x:8000/v1", "http://x:8001/v1", "http://x:8000/v2"])
    assert len(make_config(data, tmp_path).llm.providers[0].base_urls) == 3


def test_llm_serve_starts_a_pool(tmp_path):
    """`shoal llm-serve --servers 3` with a latency and a 429 rate per server: three URLs,
    each with its own faults (the 429s seen, the latencies as each server says it has
    them: a timed request would be a wall-clock check); a list of the wrong length is
    refused."""
    ready = tmp_path / "urls"
    proc = subprocess.Popen(
        [sys.executable, "-m", "shoal.cli", "llm-serve", "--port", "0", "--servers", "3",
         "--latency-ms", "10,10,300", "--rate-limit-rate", "0,1,0", "--ready-file",
         str(ready)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # an xdist worker ignores SIGINT, and a child inherits that: as from a terminal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        urls = ready.read_text().splitlines()
        assert len(urls) == 3 and len(set(urls)) == 3
        assert all(u.startswith("http://127.0.0.1:") for u in urls)
        body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
        statuses = [httpx.post(f"{url}/chat/completions", json=body, timeout=10).status_code
                    for url in urls]
        assert statuses == [200, 429, 200]
    finally:
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # (a deadline, not a measure)
    assert [ln for ln in err.splitlines() if ln.startswith("loopback")] == [
        f"loopback LLM server 0 on {urls[0]} (latency_ms=10)",
        f"loopback LLM server 1 on {urls[1]} (latency_ms=10, rate_limit_rate=1)",
        f"loopback LLM server 2 on {urls[2]} (latency_ms=300)"]
    bad = subprocess.run([sys.executable, "-m", "shoal.cli", "llm-serve", "--port", "0",
                          "--servers", "3", "--latency-ms", "10,20"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--latency-ms: 2 values for 3 servers" in bad.stderr

"""Endpoint pools: which of a provider's base URLs takes the next request.

A request goes to the endpoint with the fewest requests in flight among those ready now
(ties: the caller's own endpoint, `key % n`, then the next ones, so an agent keeps to one
while the pool is idle). An endpoint is not ready while its token buckets (requests and
tokens per minute) are empty, while it is paused by a `Retry-After`, or while its circuit
breaker has it out: after `breaker.failures` failures in a row (5xx, timeouts, no
connection, unreadable answers) it is out for `breaker.cooldown_s`, then one request
probes it, and an answer puts it back. The breaker never takes out the last endpoint in
service: with nowhere else to go, requests keep trying it (and its failures are the
calls' own). Routing never changes what is asked, only where.

One pool per chat model, that is per shard and provider, used from one event loop; the
limits are split evenly over the shards.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from shoal.config.llm import BreakerConfig, EndpointConfig

# Outcomes of a request, for the breaker: an answer, a failure of the endpoint, or neither
# (429, a 4xx for the request itself, a cancelled request).
OK, FAILED, NEUTRAL = "ok", "failed", "neutral"
_POLL_S = 0.02  # how often to look again while the only candidates are being probed


@dataclass
class TokenBucket:
    """`per_minute` units a minute, at most one second's worth (and at least one unit)
    banked. A request larger than the bucket goes when it is full and leaves it in debt,
    so the rate holds on average."""

    per_minute: float
    level: float = field(init=False)
    stamp: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.rate = self.per_minute / 60.0
        self.capacity = max(1.0, self.rate)
        self.level = self.capacity

    def _fill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def ready_in(self, amount: float, now: float) -> float:
        """Seconds until `amount` may be taken (0: now)."""
        self._fill(now)
        need = min(amount, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def take(self, amount: float, now: float) -> None:
        """Take `amount` (negative: give back); the level may go below zero."""
        self._fill(now)
        self.level -= amount


@dataclass
class Endpoint:
    """One base URL of the pool and its state."""

    url: str
    rpm: TokenBucket | None = None
    tpm: TokenBucket | None = None
    in_flight: int = 0
    paused_until: float = 0.0  # Retry-After
    failures: int = 0  # in a row
    out_until: float = 0.0  # taken out by the breaker until then (half-open after)
    probing: bool = False  # the one request of a half-open endpoint is in flight

    def ready_in(self, tokens: float, now: float) -> float | None:
        """Seconds until this endpoint can take a request of `tokens` (None: not before
        a probe in flight comes back)."""
        if self.out_until and self.out_until <= now and self.probing:
            return None
        waits = [self.paused_until - now, self.out_until - now]
        if self.rpm is not None:
            waits.append(self.rpm.ready_in(1, now))
        if self.tpm is not None:
            waits.append(self.tpm.ready_in(tokens, now))
        return max(0.0, *waits)


class EndpointPool:
    """The endpoints of one provider for one caller (a shard's chat model). `clock` and
    `sleep` are the time the limits and the breaker read and how a caller waits for an
    endpoint: the real ones, or a test's fake clock (exact waits, none spent)."""

    def __init__(self, urls: list[str], limits: list[EndpointConfig | None] | None = None,
                 breaker: BreakerConfig | None = None, shards: int = 1,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep):
        limits = limits if limits is not None and len(limits) == len(urls) else [None] * len(urls)
        share = max(1, shards)
        self.clock, self.sleep = clock, sleep
        now = clock()
        self.endpoints = [
            Endpoint(url, TokenBucket(lim.rpm / share, stamp=now) if lim and lim.rpm else None,
                     TokenBucket(lim.tpm / share, stamp=now) if lim and lim.tpm else None)
            for url, lim in zip(urls, limits, strict=True)]
        self.breaker = breaker or BreakerConfig()

    async def acquire(self, key: int, tokens: float, avoid: str | None = None
                      ) -> tuple[Endpoint, float]:
        """The endpoint for a request of about `tokens` tokens (`avoid`: the endpoint the
        previous attempt failed on, passed over if another is usable), once it is ready,
        and the seconds spent waiting for it. Release it with `release`."""
        start = self.clock()
        waited = False
        while True:
            now = self.clock()
            chosen, delay = self._pick(key, tokens, avoid, now)
            if chosen is not None:
                if chosen.rpm is not None:
                    chosen.rpm.take(1, now)
                if chosen.tpm is not None:
                    chosen.tpm.take(tokens, now)
                chosen.in_flight += 1
                chosen.probing = bool(chosen.out_until)  # half-open: this is the probe
                return chosen, (now - start) if waited else 0.0
            waited = True
            await self.sleep(delay)

    def _pick(self, key: int, tokens: float, avoid: str | None, now: float
              ) -> tuple[Endpoint | None, float]:
        n = len(self.endpoints)
        order = [self.endpoints[(key + i) % n] for i in range(n)]
        waits = [(e, e.ready_in(tokens, now)) for e in order]
        if avoid is not None and any(w is not None and e.url != avoid and e.out_until <= now
                                     for e, w in waits):
            waits = [(e, w) for e, w in waits if e.url != avoid]
        ready = [e for e, w in waits if w == 0.0]
        if ready:
            return min(ready, key=lambda e: e.in_flight), 0.0  # ties: the order above
        known = [w for _, w in waits if w is not None]
        return None, min(known) if known else _POLL_S

    def release(self, endpoint: Endpoint, outcome: str, retry_after: float | None = None,
                tokens_used: float | None = None, tokens_taken: float = 0.0) -> None:
        """A request on `endpoint` ended (`outcome`: OK, FAILED or NEUTRAL); `retry_after`
        pauses the endpoint; `tokens_used` (the server's count) corrects the estimate
        taken from its token bucket."""
        now = self.clock()
        endpoint.in_flight -= 1
        if endpoint.tpm is not None and tokens_used is not None:
            endpoint.tpm.take(tokens_used - tokens_taken, now)
        if retry_after:
            endpoint.paused_until = max(endpoint.paused_until, now + retry_after)
        probe, endpoint.probing = endpoint.probing, False
        if outcome == OK:
            endpoint.failures, endpoint.out_until = 0, 0.0
        elif outcome == FAILED:
            endpoint.failures += 1
            tripped = probe or endpoint.failures >= self.breaker.failures
            if self.breaker.failures and tripped and self._another_in_service(endpoint, now):
                endpoint.out_until = now + self.breaker.cooldown_s

    def _another_in_service(self, endpoint: Endpoint, now: float) -> bool:
        return any(e is not endpoint and e.out_until <= now for e in self.endpoints)

    def out(self) -> list[str]:
        """The URLs the breaker has out of service now."""
        now = self.clock()
        return [e.url for e in self.endpoints if e.out_until > now]

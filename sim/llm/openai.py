"""An OpenAI-compatible chat-completions client for one shard.

One `httpx.AsyncClient` per shard and provider (connection reuse), an asyncio semaphore
holding this shard's share of the provider's concurrency, a timeout per call, and retries
with exponential backoff and jitter on 429, 5xx, timeouts and connection errors, honouring
`Retry-After`. Several base URLs form a pool (`shoal.llm.pool`): least-loaded routing, limits
per endpoint, a circuit breaker; a retry moves to another endpoint. The API key is read
from the environment variable the config names, sent only in the Authorization header, and
redacted from every error text.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import random
import ssl
import time
from typing import Any

import httpx
import orjson

from shoal.config.llm import ProviderConfig
from shoal.core.registry import CHAT_MODELS
from shoal.llm.chat import Attempt, ChatModel, ChatReply, ChatRequest
from shoal.llm.endpoints import LOOPBACK
from shoal.llm.metadata import FIELD, LOOPBACK_MODEL
from shoal.llm.pool import FAILED, NEUTRAL, OK, EndpointPool

RETRYABLE = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_REPLY_BYTES = 16 * 2**20  # no answer of an OpenAI-compatible API is this long
_TOO_LONG = f"an answer over {MAX_REPLY_BYTES // 2**20} MB (not read on)"


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS settings (certifi's CA bundle), built once per process."""
    return httpx.create_ssl_context()


class StripedTransport(httpx.AsyncBaseTransport):
    """httpx's transport as one single-connection pool per concurrent call.

    httpcore's pool rescans every connection (and asks each socket whether it expired)
    for every queued request (httpx issue #3215), so one pool of 128 connections spends
    more CPU on bookkeeping than on HTTP. Each request goes to the pool with the fewest
    requests in flight, which with the shard's semaphore is an idle one: no queueing, no
    rescans, connections still reused. Measured against the loopback server at 128
    concurrent: one pool of 128 served 68 calls/s; with 50 ms latency, 2,000 calls took
    2.0-2.5 s through pools of 8 used in turn and 1.5 s this way (the ideal is 0.78 s).
    """

    def __init__(self, connections: int):
        n = max(1, connections)
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        tls = _tls_context()  # one for all pools: building one loads the CA bundle (21 ms)
        self._pools = [httpx.AsyncHTTPTransport(limits=limits, verify=tls) for _ in range(n)]
        self._busy = [0] * n

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        i = self._busy.index(min(self._busy))
        self._busy[i] += 1
        try:
            return await self._pools[i].handle_async_request(request)
        finally:
            self._busy[i] -= 1

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


def sends_field(provider: ProviderConfig) -> bool:
    """Whether requests to `provider` carry the `shoal` field (shoal.llm.metadata): as its
    `shoal_field` says, else only when it is the loopback server (every base URL
    `loopback`, or its model `shoal-loopback`, the one a `shoal llm-serve` started apart
    lists). Other servers may refuse unknown fields (OpenAI does) or log each one."""
    if provider.shoal_field is not None:
        return provider.shoal_field
    return provider.model == LOOPBACK_MODEL or all(u == LOOPBACK for u in provider.base_urls)


@CHAT_MODELS.register("openai", config=ProviderConfig)
class OpenAIChat(ChatModel):
    """An OpenAI-compatible chat-completions endpoint (or several), for one shard."""

    def __init__(self, provider: ProviderConfig, base_urls: list[str], concurrency: int,
                 seed: int = 0, shards: int = 1):
        self.provider = provider
        self.base_urls = base_urls
        same = len(base_urls) == len(provider.base_urls)  # (an interview may use another)
        self.pool = EndpointPool(base_urls, [provider.limits(i) for i in range(len(base_urls))]
                                 if same else None, provider.breaker, shards)
        self.concurrency = max(1, concurrency)
        self._key = os.environ.get(provider.api_key_env) if provider.api_key_env else None
        self._rng = random.Random(seed)
        self._sem: asyncio.Semaphore | None = None
        self._http: StripedTransport | None = None
        # What every request carries, built once: the headers (as bytes), the timeouts,
        # each endpoint's parsed URL.
        self._headers = [(b"Content-Type", b"application/json"),
                         (b"User-Agent", b"shoal"), (b"Accept", b"application/json")]
        if self._key:
            self._headers.append((b"Authorization", f"Bearer {self._key}".encode()))
        self._timeout = httpx.Timeout(provider.timeout_s).as_dict()
        self._targets: dict[str, httpx.URL] = {}
        self._field = sends_field(provider)  # the `shoal` field: the loopback server's

    def _client(self) -> StripedTransport:
        # Created lazily inside the running loop (a Ray actor and a test loop differ).
        # Requests go to the transport itself, not through an `httpx.AsyncClient`: the
        # client's per-request work (merging URLs, headers and cookies, the auth and
        # redirect loops, storing the response's cookies) is not needed for one POST to a
        # known URL, and cost about a fifth of a call's CPU (bench/README.md).
        if self._http is None:
            self._http = StripedTransport(self.concurrency)
            self._sem = asyncio.Semaphore(self.concurrency)
        return self._http

    async def _post(self, http: StripedTransport, url: str, content: bytes, attempt: int
                    ) -> tuple[httpx.Response, bytes | None]:
        """POST `content` to the endpoint's /chat/completions: the response and its body,
        read whole (None: the body grew past MAX_REPLY_BYTES, and was not read on)."""
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = httpx.URL(f"{url}/chat/completions")
        request = httpx.Request("POST", target, content=content, headers=[
            *self._headers, (b"X-Shoal-Attempt", str(attempt).encode())],
            extensions={"timeout": self._timeout})
        response = await http.handle_async_request(request)
        try:
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():  # (decoded: a gzip bomb is caught)
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_REPLY_BYTES:
                    return response, None
        finally:
            await response.aclose()
        return response, b"".join(chunks)

    def redact(self, text: str) -> str:
        """`text` with the API key (and any long piece of it) removed."""
        return redact_key(text, self._key)

    def _backoff(self, attempt: int) -> float:
        return min(10.0, 0.25 * 2**attempt) * self._rng.uniform(0.5, 1.5)

    def body(self, request: ChatRequest) -> dict:
        """The JSON body of a request: the provider's model and sampling settings unless
        the request sets them, then the provider's `extra_body`."""
        body = super().body(request)
        body.update(self.provider.extra_body)
        return body

    async def chat(self, request: ChatRequest, key: int = 0,
                   attempts: list[Attempt] | None = None) -> ChatReply:
        """POST /chat/completions with retries; never raises for network or HTTP errors.
        Every request is recorded in `attempts` when it ends (see `ChatModel.chat`)."""
        http = self._client()
        assert self._sem is not None
        result = ChatReply(None, "unreachable",
                           attempts=attempts if attempts is not None else [])
        # orjson: about a tenth of the stdlib's CPU per body, and encoded once for retries.
        content = orjson.dumps(self.body(request))
        tokens = len(content) / 4  # about a token per 4 bytes: what the tpm bucket is charged
        if self._field and request.meta is not None:
            # The `shoal` field, last: the bytes before it are the body every other server
            # is sent (orjson writes no whitespace, so this is the object with the field).
            content = b"%s,%s:%s}" % (content[:-1], orjson.dumps(FIELD),
                                      orjson.dumps(request.meta))
        async with self._sem:
            start = time.perf_counter()  # latency excludes waiting for a concurrency slot
            avoid = None
            for attempt in range(self.provider.max_retries + 1):
                endpoint, waited = await self.pool.acquire(key, tokens, avoid)
                url = endpoint.url
                sent = time.perf_counter()
                now = Attempt(url, "unreachable", wait_ms=1e3 * waited)
                result.retries = attempt
                retry_after = None
                outcome = FAILED
                try:
                    response, body = await self._post(http, url, content, attempt)
                except httpx.TimeoutException as exc:
                    now.status, now.error = "timeout", (
                        f"no answer within {self.provider.timeout_s:g} s")
                    _not_sent(now, exc)
                except httpx.TransportError as exc:
                    now.error = self.redact(f"{type(exc).__name__}: {exc}")[:300]
                    _not_sent(now, exc)
                except asyncio.CancelledError:  # the round's deadline: it was sent all the same
                    now.status, now.error = "cancelled", "round deadline passed"
                    self.pool.release(endpoint, NEUTRAL, tokens_taken=tokens)
                    self._ended(result, now, sent)
                    raise
                else:
                    now.http_status = response.status_code
                    if response.status_code == 200:
                        self._parse(now, body)
                        used = (now.prompt_tokens or 0) + (now.completion_tokens or 0)
                        self.pool.release(endpoint, OK if now.status == "ok" else FAILED,
                                          tokens_used=used or None, tokens_taken=tokens)
                        self._ended(result, now, sent)
                        result.latency_ms = 1e3 * (time.perf_counter() - start)
                        return result
                    now.status = "http_error"
                    said = _TOO_LONG if body is None else body[:300].decode("utf-8", "replace")
                    now.error = self.redact(f"HTTP {response.status_code}: {printable(said)}")
                    retry_after = _seconds(response.headers.get("Retry-After"))
                    if response.status_code < 500:  # the request's problem or a rate limit
                        outcome = NEUTRAL
                self.pool.release(endpoint, outcome, retry_after, tokens_taken=tokens)
                self._ended(result, now, sent)
                if now.http_status is not None and now.http_status not in RETRYABLE:
                    break
                avoid = url
                if attempt < self.provider.max_retries and retry_after is None:
                    # (a Retry-After pauses the endpoint in the pool instead: the retry
                    # waits for it, or goes to another endpoint at once)
                    await asyncio.sleep(self._backoff(attempt))
        result.latency_ms = 1e3 * (time.perf_counter() - start)
        return result

    @staticmethod
    def _ended(result: ChatReply, attempt: Attempt, sent: float) -> None:
        """Record a finished request; the reply takes its outcome (the last one decides)."""
        attempt.latency_ms = 1e3 * (time.perf_counter() - sent)
        result.attempts.append(attempt)
        result.status, result.http_status, result.error = (attempt.status,
                                                           attempt.http_status, attempt.error)
        result.base_url, result.message = attempt.base_url, attempt.message
        result.prompt_tokens, result.completion_tokens = (attempt.prompt_tokens,
                                                          attempt.completion_tokens)
        result.cached_tokens = attempt.cached_tokens

    def _parse(self, attempt: Attempt, body: bytes | None) -> None:
        """Read a 200 response's body into the attempt. The API key is removed from
        everything the server said before anything reads it (an echoed key never reaches a
        post)."""
        if body is None:
            attempt.status, attempt.error = "bad_response", f"unexpected response: {_TOO_LONG}"
            return
        # (bytes as they came: decoding them to text first is only needed to redact a key)
        text = self.redact(body.decode("utf-8", "replace")) if self._key else body
        try:
            data = read_json(text)
            message = data["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError("the message is not an object")
        except (ValueError, KeyError, IndexError, TypeError):
            attempt.status = "bad_response"
            shown = printable(self.redact(body[:200].decode("utf-8", "replace")))
            attempt.error = f"unexpected response: {shown}"
            return
        # counts a server got wrong (a string, a negative number) are counts it did not give
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        attempt.prompt_tokens = token_count(usage.get("prompt_tokens"))
        attempt.completion_tokens = token_count(usage.get("completion_tokens"))
        attempt.cached_tokens = _cached_tokens(usage, data.get("timings"))
        attempt.status, attempt.message = "ok", message

    async def close(self) -> None:
        """Close the connections."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def read_json(body: bytes | str) -> Any:
    """A server's JSON answer, read as Shoal's client and `shoal llm-check` both read it:
    with orjson; when orjson refuses it, again with numbers JSON does not allow (NaN,
    Infinity, -Infinity, and numbers beyond a double, such as 1e999) taken as null, so a
    server's unreadable count is a count not given rather than the loss of its answer.
    Numbers inside strings (a message's content, a tool call's arguments) are text and
    stay as sent. Raises orjson.JSONDecodeError (a ValueError) for anything else
    orjson refuses."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as refused:
        # (only a body orjson refused pays for this second, slower parse)
        try:
            text = body.decode("utf-8") if isinstance(body, bytes) else body
            value = json.loads(text, parse_constant=_no_number, parse_float=_double,
                               parse_int=_integer)
            # The stdlib accepts more than these numbers (a lone surrogate escape, for
            # one): orjson reads the result once more, so the answer kept is what orjson
            # reads with those numbers null, and anything else it refuses stays refused.
            return orjson.loads(json.dumps(value, allow_nan=False))
        except (ValueError, RecursionError):
            raise refused from None


def _no_number(_: str) -> None:
    """NaN, Infinity, -Infinity: not numbers JSON has (read as null)."""
    return None


def _double(text: str) -> float | None:
    """A number with a fraction or an exponent as orjson reads it: a double, or null
    where it is beyond one (1e999, which orjson refuses)."""
    value = float(text)
    return value if math.isfinite(value) else None


def _integer(text: str) -> int | float | None:
    """A whole number as orjson reads it: an int within 64 bits, else a double (or null
    beyond one)."""
    if len(text) <= 20:  # (no int() of a long string: the stdlib limits its digits)
        value = int(text)
        if -2**63 <= value < 2**64:
            return value
    return _double(text)


def redact_key(text: str, key: str | None) -> str:
    """`text` with `key` (and its last 8 characters, for a long key) removed."""
    if key:
        text = text.replace(key, "***")
        if len(key) > 12:
            text = text.replace(key[-8:], "***")
    return text


def printable(text: str) -> str:
    """A server's text as it may be shown in a terminal or a log: control characters
    (escape sequences, NUL, bells) written as escapes."""
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


def token_count(value: Any) -> int | None:
    """`value` if it is a whole number >= 0 (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _cached_tokens(usage: dict, timings: object = None) -> int | None:
    """The prompt tokens a server served from its prefix cache, as OpenAI reports them
    (`usage.prompt_tokens_details.cached_tokens`; vLLM too, with prefix caching and its
    prompt-token details enabled), else as llama.cpp's server does (`timings.cache_n`);
    None when the server does not say."""
    details = usage.get("prompt_tokens_details")
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    if value is None and isinstance(timings, dict):
        value = timings.get("cache_n")
    return token_count(value)


def _not_sent(attempt: Attempt, exc: httpx.HTTPError) -> None:
    """A request whose connection was never made (refused, no route, the connect timed
    out) sent no prompt: it is recorded with 0 prompt tokens, so it costs nothing, rather
    than with Shoal's count of a prompt no server received and could not have billed."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        attempt.prompt_tokens = 0


def _seconds(retry_after: str | None) -> float | None:
    """A Retry-After header in seconds (at most a minute; None without a usable one)."""
    try:
        return min(60.0, max(0.0, float(retry_after))) if retry_after else None
    except ValueError:  # an HTTP date: not worth parsing for a rate limit
        return None

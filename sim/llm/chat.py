"""The one interface every use of a chat model goes through: agents' turns, memory
summaries, interviews, and whatever comes later (extraction, the analyst).

A `ChatModel` takes a `ChatRequest` (messages, tools, sampling options) and returns a
`ChatReply` (the message, the usage, what happened on the wire), never raising for a
network or HTTP failure: a failed call is a reply with a status and an error. Models are
registered parts (`shoal.core.registry.CHAT_MODELS`; Shoal's own is `openai`, any
OpenAI-compatible endpoint, the loopback server included); `chat_model` builds the one a
provider config names. `cost` is the one price formula and `call_rows` the one shape of
`llm_calls` rows (one per HTTP request), whoever made the call.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from shoal.config.llm import ProviderConfig
from shoal.core.loop_thread import LoopThread
from shoal.core.registry import CHAT_MODELS

T = TypeVar("T")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


@dataclass
class ChatRequest:
    """One chat call. Options left at None take the provider's settings. `meta` is what
    the call is about as data (`shoal.llm.metadata`): sent as the body's `shoal` field to
    the providers that take it, never part of the response cache's key."""

    messages: list[dict]
    tools: list[dict] | None = None
    tool_choice: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    meta: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None  # e.g. a JSON schema the answer must match


@dataclass
class Attempt:
    """One HTTP request of a call, however it ended."""

    base_url: str
    status: str  # ok | http_error | timeout | unreachable | bad_response | cancelled
    http_status: int | None = None
    error: str = ""
    prompt_tokens: int | None = None  # the server's count, when it sent one
    completion_tokens: int | None = None
    latency_ms: float = 0.0
    message: dict | None = None  # the answer (status ok)
    wait_ms: float = 0.0  # waiting for the endpoint's limits (rpm, tpm, Retry-After)
    cache: str = "off"  # off | miss (asked the cache, then the endpoint) | hit (no request)
    # prompt tokens the server took from its prefix cache, when it says so
    # (usage.prompt_tokens_details.cached_tokens)
    cached_tokens: int | None = None


@dataclass
class ChatReply:
    """What one logical call (its retries included) came to; `attempts` lists every HTTP
    request it made, the last one being the one that decided the call."""

    message: dict | None
    status: str  # ok | http_error | timeout | unreachable | bad_response | cancelled
    http_status: int | None = None
    error: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float = 0.0
    retries: int = 0
    base_url: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    cached_tokens: int | None = None  # of the prompt, from the server's prefix cache

    @property
    def text(self) -> str:
        """The reply's text, reasoning blocks removed ("" without an answer)."""
        return strip_reasoning((self.message or {}).get("content") or "")


class ChatModel(ABC):
    """A chat-completions endpoint (or several) used by one process or shard."""

    provider: ProviderConfig

    @abstractmethod
    async def chat(self, request: ChatRequest, key: int = 0,
                   attempts: list[Attempt] | None = None) -> ChatReply:
        """Send a request (retrying as the provider allows); `key` is the caller's own
        endpoint among the provider's, preferred while they are equally busy. Each HTTP
        request is appended to `attempts` (given, or the reply's own list) when it ends,
        also when the call is cancelled while it waits for an answer (then as
        `cancelled`)."""

    def body(self, request: ChatRequest) -> dict:
        """What is sent for `request`: the provider's model and sampling settings unless
        the request sets them (the response cache's key is made of it; a model that sends
        the `shoal` field adds it to this when it sends)."""
        p = self.provider
        body: dict = {"model": p.model,
                      "temperature": p.temperature if request.temperature is None
                      else request.temperature,
                      "max_tokens": p.max_tokens if request.max_tokens is None
                      else request.max_tokens}
        if request.seed is not None:
            body["seed"] = request.seed
        if request.tools:
            body["tools"] = request.tools
            body["tool_choice"] = request.tool_choice or "auto"
        if request.response_format:
            body["response_format"] = request.response_format
        body["messages"] = request.messages
        return body

    async def close(self) -> None:  # noqa: B027 (most models hold nothing to close)
        """Release connections."""

    def redact(self, text: str) -> str:
        """`text` with any secret of this model removed."""
        return text


def chat_model(provider: ProviderConfig, base_urls: list[str] | None = None,
               concurrency: int | None = None, seed: int = 0, shards: int = 1) -> ChatModel:
    """The registered chat model for `provider` (its `kind`), calling `base_urls` (default:
    the provider's) with at most `concurrency` calls in flight (default: the provider's),
    as one of `shards` callers sharing the endpoints' limits evenly."""
    cls = CHAT_MODELS.get(provider.kind).impl
    return cls(provider, list(base_urls or provider.base_urls),
               concurrency or provider.concurrency, seed=seed, shards=shards)


def cost(provider: ProviderConfig, prompt_tokens: int, completion_tokens: int) -> float:
    """Estimated cost in USD of a call, at the provider's prices per million tokens."""
    return (prompt_tokens * provider.price_prompt_per_mtok
            + completion_tokens * provider.price_completion_per_mtok) / 1e6


def call_rows(reply: ChatReply | list[Attempt], provider: ProviderConfig, *, round_: int,
              agent: int | None, platform: str, call: int = 1,
              section_tokens: dict[str, int] | None = None, estimated_prompt_tokens: int = 0,
              outcome: str = "", reused_tokens: int | None = None,
              output: str | None = None) -> list[dict[str, Any]]:
    """The `llm_calls` rows of a call: one per HTTP request it made (`retries` is the
    request's number, 0 first), `outcome` on the last. Prompt tokens are the server's
    count, else our own count of what was sent: a request that got no answer was still
    sent, and its cost is counted as if its prompt was billed (one whose connection was
    never made says 0 prompt tokens: nothing was sent). An answer from the response
    cache is one row that cost nothing (`cost_usd` 0) and saved its price (`saved_usd`).
    `cached_tokens` is what the server said it had in its prefix cache (None if it did not
    say); `reused_tokens`, of an agent's turn, the prompt tokens equal to the start of its
    previous prompt (the same on every request of the turn)."""
    attempts = reply.attempts if isinstance(reply, ChatReply) else reply
    rows = []
    for i, a in enumerate(attempts):
        prompt = a.prompt_tokens if a.prompt_tokens is not None else estimated_prompt_tokens
        completion = a.completion_tokens or 0
        price = cost(provider, int(prompt), completion)
        hit = a.cache == "hit"
        rows.append({
            "round": round_, "agent": agent, "platform": platform, "provider": provider.name,
            "model": provider.model, "base_url": a.base_url, "call": call,
            "status": a.status, "http_status": a.http_status,
            "prompt_tokens": int(prompt), "completion_tokens": int(completion),
            "section_tokens": json.dumps(section_tokens or {}), "latency_ms": a.latency_ms,
            "retries": i, "error": a.error,
            "outcome": outcome if i == len(attempts) - 1 else "retried",
            "fallback_reason": "", "cost_usd": 0.0 if hit else price,
            "cache": a.cache, "saved_usd": price if hit else 0.0, "wait_ms": a.wait_ms,
            "cached_tokens": a.cached_tokens, "reused_tokens": reused_tokens,
            "output": output, "counted_prompt_tokens": estimated_prompt_tokens or None})
    return rows


class SyncChat:
    """A chat model for synchronous callers (a background worker thread): its own event
    loop in its own thread, so the model's connections live on one loop for its life and
    are closed on it (shoal.core.loop_thread)."""

    def __init__(self, model: ChatModel):
        self.model = model
        self._loop = LoopThread("shoal-chat")
        self._closed = False

    def chat(self, request: ChatRequest, key: int = 0) -> ChatReply:
        """The reply to `request` (blocking, at most as long as every retry may take)."""
        p = self.model.provider
        attempts: list[Attempt] = []
        try:
            return self._loop.run(self.model.chat(request, key, attempts),
                                  p.timeout_s * (p.max_retries + 1) + 60.0)
        except TimeoutError:  # (the call was cancelled: its request is in `attempts`)
            return ChatReply(None, "timeout", error="no answer within the call's deadline",
                             attempts=attempts)

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """The result of `coroutine` (which uses the model), run on the model's loop."""
        return self._loop.run(coroutine, timeout_s)

    def close(self) -> None:
        """Close the model on its loop (after cancelling any call still running) and stop
        the loop."""
        if self._closed:
            return
        self._closed = True
        self._loop.close(self.model.close)


@dataclass
class CallLog:
    """`llm_calls` rows made outside a round's turns (by a background worker), kept until
    the driver logs them with the round. Thread-safe."""

    rows: list[dict] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, row: dict) -> None:
        """Keep a row."""
        with self._lock:
            self.rows.append(row)

    def drain(self, round_: int) -> list[dict]:
        """The rows kept so far, stamped with the round that logs them; forgets them."""
        with self._lock:
            rows, self.rows = self.rows, []
        for row in rows:
            row["round"] = round_
        return rows


def strip_reasoning(text: str) -> str:
    """`text` without `<think>` blocks (or everything up to an unmatched `</think>`)."""
    text = _THINK.sub("", text)
    if "</think>" in text.lower():  # an unclosed opening tag upstream: keep what follows
        text = re.split(r"</think>", text, flags=re.IGNORECASE)[-1]
    return text.strip()


def response_format(schema: dict[str, Any], name: str = "action") -> dict[str, Any]:
    """The `response_format` asking for an answer matching `schema`."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def json_objects(text: str) -> Iterator[Any]:
    """Every top-level {...} substring of a model's text that parses as JSON, in order
    (an answer asked for as JSON may come wrapped in prose or a code fence)."""
    depth, start, in_str, escaped = 0, -1, False, False
    for i, ch in enumerate(text):
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                with contextlib.suppress(json.JSONDecodeError):
                    yield json.loads(text[start:i + 1])

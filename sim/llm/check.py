"""`shoal llm-check URL`: probe an OpenAI-compatible endpoint and say what Shoal will use.

Each check sends one small request and reads the answer as it came, status and body:
a plain chat completion; a tool call (`tool_choice` "required", then "auto"); constrained
JSON (`response_format` json_schema, then json_object); the usage; the prefix cache (the
same long prompt twice: `usage.prompt_tokens_details.cached_tokens`, or llama.cpp's
`timings.cache_n`); a tokenizer (`POST {root}/tokenize`, llama.cpp's and vLLM's forms,
against tiktoken's cl100k count); the context length (llama.cpp's `GET {root}/props`, else
`max_model_len` and the like on the `GET {base}/models` entry); latency and throughput at
a few concurrencies. `decide` turns the findings into what Shoal will use: the output mode
(tools, else json_schema, else text), the token counter (the server's, else tiktoken
with the measured ratio as a margin) and a concurrency.

The probe talks HTTP itself (httpx) rather than through `shoal.llm.openai`: it needs the
raw status and body of every answer, routes other than chat completions, and no retries.
Like Shoal's client it reads the key from the environment variable named, sends it only
in the Authorization header, ignores proxy settings from the environment, removes the key
from everything it reports, and reads JSON as the client does (`read_json`). Only the chat
check is fatal: an endpoint that cannot be reached, is not OpenAI-compatible, answers
with more than 16 MB or refuses the key is an `InputError` (exit 2), one that times out
or answers 429/5xx a `ProviderDown` (exit 3); every other check records what it saw and
the probe goes on.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

import httpx
from pydantic import ValidationError

from shoal.config.llm import ProviderConfig, shown_name
from shoal.core.errors import InputError, ProviderDown
from shoal.llm.endpoints import LOOPBACK, Endpoints
from shoal.llm.openai import MAX_REPLY_BYTES, printable, read_json, redact_key, token_count

# A finding's status.
YES = "yes"
NO = "no"  # the server answered, but not with what was asked
REFUSED = "refused"  # the server answered the request with an HTTP error
NOT_REPORTED = "not reported"
UNKNOWN = "unknown"
FAILED = "failed"  # no usable answer (timeout, connection lost, 429)

CHECKS = ("chat", "tools", "json_schema", "json_object", "usage", "cached_tokens",
          "tokenize", "context_length")  # the rows of the table, in order

SYSTEM = "You are a member of an online community. Follow the instructions exactly."
CHAT_PROMPT = "Reply with the single word: ready."
TOOL_NAME = "post"  # a Shoal action, with the argument every post has
TOOL_PARAMETERS = {"type": "object", "required": ["text"], "properties": {
    "text": {"type": "string", "description": "the post's text"}}}
TOOL = {"type": "function", "function": {
    "name": TOOL_NAME, "description": "Publish a short post on the platform.",
    "parameters": TOOL_PARAMETERS}}
TOOL_PROMPT = "Use the post tool to publish: I read about the carbon levy today."
# The shape of a Shoal action in JSON: strict mode needs every property required and no
# others (OpenAI's rule for `strict: true`).
SCHEMA = {"type": "object", "properties": {
    "action": {"type": "string", "enum": ["post", "do_nothing"]},
    "reason": {"type": "string"}},
    "required": ["action", "reason"], "additionalProperties": False}
JSON_PROMPT = ("Decide whether to post today. Answer with a JSON object with the keys "
               "`action` (\"post\" or \"do_nothing\") and `reason` (a short sentence).")
# The text whose tokens are counted, by the server and by tiktoken: posts as agents write
# them (a hashtag, a number, a URL, another language).
SAMPLE = ("Honestly, the carbon levy costs my family about 12 euros a month, and the rebate "
          "covers most of it. #climate People keep asking, so: I support it, though the "
          "rollout was clumsy. Details at https://example.org/levy-faq?lang=en. Ça coûte "
          "un peu plus cher, mais c'est juste. What do my neighbours think?\n")
# SAMPLE x 16: about 1,230 cl100k tokens. OpenAI caches prompts from 1,024 tokens on; a
# longer prompt would not fit a small server's context (2,048 or 4,096 per slot) in every
# tokenizer, and takes a minute on a CPU.
LONG_REPEATS = 16
PROBE_MAX_TOKENS = 256  # room for a short answer (and a reasoning model's preamble)
BENCH_MAX_TOKENS = 16  # throughput requests: short answers, so the levels are quick


@dataclass
class Finding:
    """What one check found: a status (yes, no, refused, not reported, unknown, failed),
    a line saying what was seen, and the numbers behind it."""

    status: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def works(self) -> bool:
        """Whether the capability is there."""
        return self.status == YES


@dataclass
class Load:
    """Latency and throughput at one concurrency: `requests` sent with at most
    `concurrency` in flight."""

    concurrency: int
    requests: int
    ok: int
    seconds: float
    median_ms: float | None
    requests_per_s: float | None
    completion_tokens_per_s: float | None
    errors: list[str] = field(default_factory=list)


@dataclass
class Decision:
    """What Shoal will use with the endpoint, and why (one reason per setting)."""

    output: str  # tools | json_schema | text
    token_counter: str  # server | tiktoken
    token_margin: float | None  # tiktoken's counts times this (None with the server's)
    concurrency: int
    reasons: dict[str, str] = field(default_factory=dict)


@dataclass
class CheckReport:
    """Everything `shoal llm-check` found about an endpoint."""

    url: str
    model: str
    model_source: str  # "--model", or where the model name came from
    checks: dict[str, Finding]
    load: list[Load]
    decision: Decision

    def as_dict(self) -> dict[str, Any]:
        """The report as plain data (`--json`)."""
        return asdict(self)


@dataclass(frozen=True)
class CheckOptions:
    """How hard to probe: the concurrencies measured, requests per level (at least the
    level), and the timeout of each request."""

    concurrency: tuple[int, ...] = (1, 2, 4)
    requests: int = 8
    timeout_s: float = 60.0


TOO_LONG = f"more than {MAX_REPLY_BYTES // 2**20} MB"  # an answer past the cap


@dataclass
class Reply:
    """One HTTP exchange as it came: `status` None when no answer came (`error` says
    why), `data` the JSON body (None when it was not JSON, or JSON null: `is_json` tells
    them apart), `text` the body's start, `too_long` when the body grew past
    MAX_REPLY_BYTES (it was not read on)."""

    status: int | None
    data: Any = None
    text: str = ""
    error: str = ""
    seconds: float = 0.0
    is_json: bool = False
    too_long: bool = False

    @property
    def ok(self) -> bool:
        """HTTP 200 with a JSON object."""
        return self.status == 200 and isinstance(self.data, dict)

    def message(self) -> dict[str, Any] | None:
        """The first choice's message of a chat completion (None when there is none)."""
        try:
            message = self.data["choices"][0]["message"]
        except (TypeError, KeyError, IndexError):
            return None
        return message if isinstance(message, dict) else None

    def said(self) -> str:
        """What went wrong, in a line: the transport error, else the HTTP status and the
        server's own message."""
        if self.status is None:
            return self.error
        if self.too_long:
            return f"HTTP {self.status} with {TOO_LONG} (not read on)"
        body = self.data
        text = self.text
        if isinstance(body, dict):
            err = body.get("error", body.get("detail", body.get("message")))
            if isinstance(err, dict):
                err = err.get("message", err)
            if err is not None:
                text = err if isinstance(err, str) else json.dumps(err)
        text = " ".join(str(text).split())
        return f"HTTP {self.status}" + (f": {_cut(text, 160)}" if text else "")


def _cut(text: str, most: int = 60) -> str:
    """`text` on one line, at most `most` characters."""
    text = " ".join(text.split())
    return text if len(text) <= most else text[:most - 1] + "…"


class Endpoint:
    """The endpoint under test: its base URL (…/v1), its server root (the base URL
    without a trailing /v1, where llama.cpp and vLLM serve /tokenize and /props), the
    model, and an HTTP client carrying the key."""

    def __init__(self, base: str, model: str, key: str | None, client: httpx.AsyncClient):
        self.base = base.rstrip("/")
        self.root = self.base.removesuffix("/v1")
        self.model = model
        self.key = key
        self.client = client

    def redact(self, text: str) -> str:
        """`text` without the key (or a long piece of it), as Shoal's client redacts."""
        return redact_key(text, self.key)

    async def send(self, method: str, url: str, body: dict[str, Any] | None = None) -> Reply:
        """One request; never raises for a network error (the reply says what happened).
        The body's text is redacted before anything reads it."""
        start = time.perf_counter()
        limit = self.client.timeout.read or 60.0
        try:
            # the whole answer within the timeout (httpx's bounds each read: a server
            # sending a byte a second would never time out) and within MAX_REPLY_BYTES
            status, raw = await asyncio.wait_for(self._receive(method, url, body), limit)
        except (httpx.TimeoutException, TimeoutError):
            return Reply(None, error=f"no answer within {limit:g} s",
                         seconds=time.perf_counter() - start)
        except httpx.HTTPError as exc:
            return Reply(None, error=self.redact(f"{type(exc).__name__}: {exc}")[:200],
                         seconds=time.perf_counter() - start)
        seconds = time.perf_counter() - start
        if raw is None:  # (the server did answer: not a transport error)
            return Reply(status, seconds=seconds, too_long=True)
        text = self.redact(raw.decode("utf-8", "replace"))
        try:  # as Shoal's client reads it, so what the probe accepts a run accepts
            data, is_json = read_json(text), True
        except ValueError:  # (not JSON; JSON nested beyond reason)
            data, is_json = None, False
        return Reply(status, data, printable(text[:300]), seconds=seconds, is_json=is_json)

    async def _receive(self, method: str, url: str, body: dict[str, Any] | None
                       ) -> tuple[int, bytes | None]:
        """The status and body of one request (None: the body grew past the cap)."""
        async with self.client.stream(method, url, json=body) as response:
            raw = bytearray()
            async for chunk in response.aiter_bytes():
                raw += chunk
                if len(raw) > MAX_REPLY_BYTES:
                    return response.status_code, None
            return response.status_code, bytes(raw)

    async def chat(self, messages: list[dict[str, str]], max_tokens: int = PROBE_MAX_TOKENS,
                   **extra: Any) -> Reply:
        """POST a chat completion of `messages` (temperature 0) with `extra` fields."""
        body = {"model": self.model, "messages": messages, "temperature": 0,
                "max_tokens": max_tokens, **extra}
        return await self.send("POST", f"{self.base}/chat/completions", body)


def _messages(user: str, system: str = SYSTEM) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _refusal(reply: Reply, what: str) -> Finding:
    """A request for `what` that got no 200: refused (the server said no), or failed
    (no answer, rate limited, or an answer past the cap: nothing learnt)."""
    if reply.status is None or reply.status == 429 or reply.too_long:
        return Finding(FAILED, f"{what}: {reply.said()}")
    return Finding(REFUSED, f"{what}: {reply.said()}", {"http_status": reply.status})


# --- the checks ----------------------------------------------------------------------------


async def list_models(ep: Endpoint) -> Reply:
    """`GET {base}/models`; a server that cannot be reached at all stops the probe here."""
    what = f"GET {ep.base}/models"
    reply = await ep.send("GET", what[4:])
    if reply.status is None:
        _unreachable(ep, reply, what)
    if reply.status in (401, 403):
        _key_refused(ep, reply, what)
    return reply


def listed_models(reply: Reply) -> list[dict[str, Any]]:
    """The entries of a `/models` answer (`data`: [{id, ...}]), [] for anything else."""
    entries = reply.data.get("data") if reply.ok else None
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)] \
        if isinstance(entries, list) else []


def _unreachable(ep: Endpoint, reply: Reply, what: str) -> NoReturn:
    """Raise the error of a request that got no answer."""
    if reply.error.startswith("no answer within"):
        raise ProviderDown(f"llm-check {ep.base}: {what}: {reply.error}")
    raise InputError(f"llm-check {ep.base}: cannot connect ({reply.error}); is the server "
                     "running, and is the URL its base URL (…/v1)?")


def _v1_hint(ep: Endpoint) -> str:
    """A hint for a 404: most servers serve the API under /v1."""
    return "" if ep.base.endswith("/v1") else " (is /v1 missing from the URL?)"


def _key_refused(ep: Endpoint, reply: Reply, what: str) -> NoReturn:
    """Raise the error of a request refused for its key (401, 403)."""
    hint = ("it needs an API key: name its variable with --api-key-env" if not ep.key
            else "check the key in the variable --api-key-env names")
    raise InputError(f"llm-check {ep.base}: {what} was refused ({reply.said()}); {hint}")


async def check_chat(ep: Endpoint) -> tuple[Finding, Reply]:
    """A plain chat completion. Raises InputError when the endpoint cannot be reached, is
    not OpenAI-compatible or refuses the request, ProviderDown when it times out or
    answers 429/5xx: without chat there is nothing to probe."""
    what = f"POST {ep.base}/chat/completions"
    reply = await ep.chat(_messages(CHAT_PROMPT))
    if reply.status is None:
        _unreachable(ep, reply, what)
    status = reply.status or 0
    if status == 429 or status >= 500:
        raise ProviderDown(f"llm-check {ep.base}: {what} answered {reply.said()}")
    if status in (401, 403):
        _key_refused(ep, reply, what)
    if status == 404:
        raise InputError(f"llm-check {ep.base}: not an OpenAI-compatible endpoint: {what} "
                         f"answered {reply.said()}{_v1_hint(ep)}")
    if status != 200:
        raise InputError(f"llm-check {ep.base}: {what} (model {ep.model!r}) was refused: "
                         f"{reply.said()}")
    if reply.too_long:
        raise InputError(f"llm-check {ep.base}: {what}: the server answered with {TOO_LONG} "
                         "(HTTP 200), more than any chat completion; not read on")
    message = reply.message()
    if message is None:
        raise InputError(f"llm-check {ep.base}: not an OpenAI-compatible endpoint: {what} "
                         f"answered 200 with {_no_message(reply)} ({_cut(reply.text)!r})")
    choice = reply.data["choices"][0]
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    model = reply.data.get("model")
    content = message.get("content")
    detail = (f"HTTP 200 in {reply.seconds:.2f} s; the server says model {model!r}; "
              f"finish_reason {finish}")
    if finish == "length":
        detail += " (cut at max_tokens: a reasoning model may need more)"
    return Finding(YES, detail, {"http_status": 200, "model": model, "finish_reason": finish,
                                 "content": _cut(content, 80) if isinstance(content, str)
                                 else None, "seconds": round(reply.seconds, 3)}), reply


def _no_message(reply: Reply) -> str:
    """What a 200 answer without a chat completion's message holds instead, said by the
    first part of `choices[0].message` that is missing or of the wrong type."""
    if not reply.is_json:
        return "a body that is not JSON"
    data = reply.data
    if not isinstance(data, dict):
        return f"JSON that is {_kind(data)}, not an object"
    if "choices" not in data:
        return "JSON without choices"
    choices = data["choices"]
    if not isinstance(choices, list):
        return f"JSON whose choices is {_kind(choices)}, not an array"
    if not choices:
        return "JSON whose choices is an empty array"
    if not isinstance(choices[0], dict):
        return f"JSON whose choices[0] is {_kind(choices[0])}, not an object"
    if "message" not in choices[0]:
        return "JSON whose choices[0] has no message"
    return f"JSON whose choices[0].message is {_kind(choices[0]['message'])}, not an object"


def _kind(value: Any) -> str:
    """The JSON type of a parsed value, as a phrase."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    kinds = ((str, "a string"), ((int, float), "a number"), (list, "an array"),
             (dict, "an object"))
    return next((name for types, name in kinds if isinstance(value, types)), "a value")


def check_usage(reply: Reply) -> Finding:
    """Whether a completion carried `usage.prompt_tokens` and `completion_tokens`."""
    usage = reply.data.get("usage") if reply.ok else None
    usage = usage if isinstance(usage, dict) else {}
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if token_count(prompt) and token_count(completion) is not None:
        return Finding(YES, f"prompt {prompt}, completion {completion} tokens",
                       {"prompt_tokens": prompt, "completion_tokens": completion})
    return Finding(NOT_REPORTED, "the answer has no usage.prompt_tokens/completion_tokens "
                   "(Shoal then estimates tokens and cost)")


async def check_tools(ep: Endpoint) -> Finding:
    """One tool offered with `tool_choice: "required"` (then "auto", for servers that
    refuse "required"): yes when a tool call of that tool comes back with arguments that
    parse and match its parameters."""
    tried: list[str] = []
    for choice in ("required", "auto"):
        reply = await ep.chat(_messages(TOOL_PROMPT), tools=[TOOL], tool_choice=choice)
        if reply.status != 200 or reply.too_long:
            finding = _refusal(reply, f"tool_choice {choice}")
            tried.append(finding.detail)
            if finding.status == REFUSED:
                continue  # "required" is newer than tools: try "auto"
            return Finding(finding.status, "; ".join(tried), finding.data)
        found = _tool_call(reply.message(), choice)
        if tried:
            found.detail += f" (after {'; '.join(tried)})"
        return found
    return Finding(REFUSED, "; ".join(tried))


def _tool_call(message: dict[str, Any] | None, choice: str) -> Finding:
    """The finding of a 200 answer to the tool request."""
    data: dict[str, Any] = {"tool_choice": choice}
    if message is None:
        return Finding(NO, "answered 200 without a message", data)
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        content = message.get("content")
        return Finding(NO, "answered without tool_calls (content "
                       f"{_cut(str(content))!r}): the model wrote no call, or the server "
                       "did not parse it (vLLM needs --enable-auto-tool-choice and "
                       "--tool-call-parser, llama.cpp --jinja)", data)
    function = calls[0].get("function") if isinstance(calls[0], dict) else None
    function = function if isinstance(function, dict) else {}
    name, args = function.get("name"), function.get("arguments")
    if isinstance(args, str):  # (the protocol's form; some servers send an object)
        try:
            args = json.loads(args)
        except ValueError:
            return Finding(NO, f"tool call arguments are not JSON: {_cut(args)!r}", data)
    if name != TOOL_NAME:
        return Finding(NO, f"called {name!r}, not the tool offered ({TOOL_NAME!r})", data)
    problem = schema_problem(args, TOOL_PARAMETERS)
    if problem or not isinstance(args, dict):
        return Finding(NO, f"tool call arguments do not match the parameters: {problem}", data)
    return Finding(YES, f"{TOOL_NAME}(text={_cut(args['text'], 40)!r}) with tool_choice "
                   f"{choice}", data)


async def check_json_schema(ep: Endpoint) -> Finding:
    """`response_format` json_schema (strict) with a small object schema: yes when the
    content parses as JSON and matches the schema."""
    fmt = {"type": "json_schema",
           "json_schema": {"name": "action", "strict": True, "schema": SCHEMA}}
    reply = await ep.chat(_messages(JSON_PROMPT), response_format=fmt)
    return _json_answer(reply, "json_schema", SCHEMA)


async def check_json_object(ep: Endpoint) -> Finding:
    """`response_format` json_object: yes when the content parses as a JSON object."""
    reply = await ep.chat(_messages(JSON_PROMPT), response_format={"type": "json_object"})
    return _json_answer(reply, "json_object", {"type": "object"})


def _json_answer(reply: Reply, kind: str, schema: dict[str, Any]) -> Finding:
    """The finding of a request for constrained JSON."""
    if reply.status != 200 or reply.too_long:
        return _refusal(reply, f"response_format {kind}")
    message = reply.message()
    content = message.get("content") if message else None
    if not isinstance(content, str) or not content.strip():
        return Finding(NO, "answered with no content")
    try:
        value = json.loads(content)
    except ValueError:
        return Finding(NO, f"the content is not JSON: {_cut(content)!r}")
    problem = schema_problem(value, schema)
    if problem:
        return Finding(NO, f"JSON that does not match the schema: {problem}")
    return Finding(YES, f"parsed and matched: {_cut(json.dumps(value), 70)}")


def schema_problem(value: Any, schema: dict[str, Any]) -> str | None:
    """Why `value` does not match `schema` (None when it does): the `jsonschema` library
    when it is installed, else the checks this probe's schemas need (an object, its
    required keys, its properties' types and enums, no other keys when so declared)."""
    try:
        import jsonschema
    except ImportError:
        return _small_schema_problem(value, schema)
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        return _cut(exc.message, 100)
    return None


_TYPES: dict[str, type | tuple[type, ...]] = {"object": dict, "string": str, "array": list,
                                              "boolean": bool, "number": (int, float),
                                              "integer": int}


def _small_schema_problem(value: Any, schema: dict[str, Any]) -> str | None:
    if not isinstance(value, _TYPES.get(schema.get("type", "object"), object)):
        return f"not {schema.get('type')}: {_cut(json.dumps(value), 40)}"
    if not isinstance(value, dict):
        return None
    props = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in value]
    if missing:
        return f"missing {', '.join(missing)}"
    if schema.get("additionalProperties") is False and set(value) - set(props):
        return f"unexpected {', '.join(sorted(set(value) - set(props)))}"
    for key, sub in props.items():
        if key in value:
            if not isinstance(value[key], _TYPES.get(sub.get("type", ""), object)):
                return f"{key}: not {sub.get('type')}"
            if "enum" in sub and value[key] not in sub["enum"]:
                return f"{key}: {value[key]!r} is not one of {sub['enum']}"
    return None


def long_messages(nonce: str) -> list[dict[str, str]]:
    """The long prompt of the cache check: a fresh nonce first (so the first call finds
    nothing cached, whatever ran before), then SAMPLE many times."""
    return _messages(f"Round {nonce}. Reply with the single word: ok. The feed:\n"
                     + SAMPLE * LONG_REPEATS)


async def check_cached(ep: Endpoint) -> Finding:
    """The same long prompt twice: the prompt tokens the second call was served from the
    server's prefix cache (`usage.prompt_tokens_details.cached_tokens`, llama.cpp's
    `timings.cache_n`, DeepSeek's `usage.prompt_cache_hit_tokens`). `data` keeps the long
    call's prompt tokens (for the token ratio)."""
    messages = long_messages(secrets.token_hex(4))
    first = await ep.chat(messages, max_tokens=BENCH_MAX_TOKENS)
    if not first.ok:  # (too long for the context, or too slow: the repeat says nothing)
        return _refusal(first, "the long prompt")
    second = await ep.chat(messages, max_tokens=BENCH_MAX_TOKENS)
    if not second.ok:
        return _refusal(second, "the repeated prompt")
    usage = second.data.get("usage") if isinstance(second.data.get("usage"), dict) else {}
    data: dict[str, Any] = {"prompt_tokens": token_count(usage.get("prompt_tokens"))}
    cached, where = _cached(second.data)
    if cached is None:
        return Finding(NOT_REPORTED, "no usage.prompt_tokens_details.cached_tokens, "
                       "timings.cache_n or usage.prompt_cache_hit_tokens in the answer (vLLM "
                       "reports it with --enable-prompt-tokens-details, SGLang with "
                       "--enable-cache-report)", data)
    before, _ = _cached(first.data) if first.ok else (None, "")
    data.update(cached_tokens=cached, first_call=before, source=where)
    of = f" of {data['prompt_tokens']:,}" if data["prompt_tokens"] else ""
    detail = (f"{cached:,}{of} prompt tokens cached on the repeat ({where}; first call: "
              f"{before if before is not None else '?'})")
    if cached == 0:
        return Finding(NO, detail + ": prefix caching is off, or the cache was not ready "
                       "yet (hosted APIs cache on a best-effort basis: probe again)", data)
    return Finding(YES, detail, data)


def _cached(data: dict[str, Any]) -> tuple[int | None, str]:
    """Cached prompt tokens of an answer and the field that said so."""
    usage = data.get("usage")
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    if isinstance(details, dict) and token_count(details.get("cached_tokens")) is not None:
        return details["cached_tokens"], "usage.prompt_tokens_details.cached_tokens"
    timings = data.get("timings")
    if isinstance(timings, dict) and token_count(timings.get("cache_n")) is not None:
        return timings["cache_n"], "timings.cache_n"
    if isinstance(usage, dict) and token_count(usage.get("prompt_cache_hit_tokens")) is not None:
        return usage["prompt_cache_hit_tokens"], "usage.prompt_cache_hit_tokens"  # DeepSeek
    return None, ""


async def check_tokenize(ep: Endpoint, count: Callable[[str], int] | None) -> Finding:
    """The server's token count of SAMPLE from `POST {root}/tokenize`: llama.cpp's form
    (`{"content": text}`) first, then vLLM's (`{"model", "prompt"}`), with tiktoken's
    cl100k count of the same text and their ratio."""
    url = f"{ep.root}/tokenize"
    forms = [("llama.cpp", {"content": SAMPLE, "add_special": False}),
             ("vLLM", {"model": ep.model, "prompt": SAMPLE, "add_special_tokens": False})]
    said = []
    for form, body in forms:
        reply = await ep.send("POST", url, body)
        tokens = reply.data.get("tokens") if reply.ok else None
        if isinstance(tokens, list):
            n = len(tokens)
            ours = count(SAMPLE) if count else None
            data = {"form": form, "url": url, "server_tokens": n, "tiktoken_tokens": ours,
                    "ratio": round(n / ours, 3) if ours else None}
            ratio = f", ratio {data['ratio']:.2f}" if ours else ""
            return Finding(YES, f"{n} tokens (tiktoken cl100k: {ours}{ratio}) from POST "
                           f"{url} ({form} form)", data)
        said.append(f"{form} form: {reply.said() if not reply.ok else 'no tokens in 200'}")
        if reply.status in (None, 404, 405):
            break  # no such route: the other form will not find one either
    return Finding(NO, f"POST {url}: " + "; ".join(said), {"url": url})


def usage_ratio(chat: Reply, cached: Finding, count: Callable[[str], int] | None
                ) -> float | None:
    """The server's tokens per cl100k token, from the usage of two prompts of different
    lengths (the chat check's and the cache check's): the difference of their prompt
    tokens over the difference of tiktoken's counts, so the chat template's own tokens
    cancel out. None when either did not report usage."""
    short = check_usage(chat).data.get("prompt_tokens")
    long = cached.data.get("prompt_tokens")
    if count is None or not short or not long:
        return None
    ours = sum(count(m["content"]) for m in long_messages("00000000")) - \
        sum(count(m["content"]) for m in _messages(CHAT_PROMPT))
    theirs = long - short
    return round(theirs / ours, 3) if ours > 0 and theirs > 0 else None


async def check_context(ep: Endpoint, models: Reply) -> Finding:
    """The context length: llama.cpp's `GET {root}/props`
    (`default_generation_settings.n_ctx`, or `n_ctx`), else the model's entry of `GET
    {base}/models` (`max_model_len`: vLLM, SGLang; `context_length`: OpenRouter)."""
    props = await ep.send("GET", f"{ep.root}/props")
    if props.ok:
        settings = props.data.get("default_generation_settings")
        for where, value in (("default_generation_settings.n_ctx",
                              settings.get("n_ctx") if isinstance(settings, dict) else None),
                             ("n_ctx", props.data.get("n_ctx"))):
            if token_count(value):
                return Finding(YES, f"{value:,} tokens (GET {ep.root}/props: {where})",
                               {"tokens": value, "source": f"props {where}"})
    entries = listed_models(models)
    entry = next((e for e in entries if e["id"] == ep.model), entries[0] if len(entries) == 1
                 else None)
    for key in ("max_model_len", "context_length", "context_window", "max_context_length"):
        value = entry.get(key) if entry else None
        if token_count(value):
            return Finding(YES, f"{value:,} tokens (GET {ep.base}/models: {key})",
                           {"tokens": value, "source": f"models {key}"})
    return Finding(UNKNOWN, f"neither GET {ep.root}/props nor the model's entry of GET "
                   f"{ep.base}/models says it")


async def measure(ep: Endpoint, concurrency: int, requests: int) -> Load:
    """`requests` short completions (at least `concurrency` of them) with at most
    `concurrency` in flight: median latency, requests/s and completion tokens/s."""
    n = max(requests, concurrency)
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> Reply:
        async with gate:  # (a distinct prompt each: no response cache answers for it)
            return await ep.chat(_messages(f"Count from {i} to {i + 5}, digits only."),
                                 max_tokens=BENCH_MAX_TOKENS)

    start = time.perf_counter()
    replies = await asyncio.gather(*(one(i) for i in range(n)))
    seconds = time.perf_counter() - start
    ok = [r for r in replies if r.ok and r.message() is not None]
    errors = sorted({r.said() for r in replies if r not in ok})
    completion = [check_usage(r).data.get("completion_tokens") for r in ok]
    tokens = sum(c for c in completion if c) if all(c is not None for c in completion) \
        else None
    return Load(concurrency, n, len(ok), round(seconds, 3),
                round(1e3 * statistics.median(r.seconds for r in ok), 1) if ok else None,
                round(len(ok) / seconds, 2) if ok else None,
                round(tokens / seconds, 1) if ok and tokens is not None else None, errors)


# --- the decision ----------------------------------------------------------------------------


def decide(checks: dict[str, Finding], load: list[Load]) -> Decision:
    """What Shoal will use: the output mode (tools if tool calls work, else json_schema if
    constrained JSON works, else text), the token counter (the server's tokenizer if it
    answers, else tiktoken with the measured ratio as a margin) and a concurrency."""
    tools, schema = checks["tools"], checks["json_schema"]
    reasons: dict[str, str] = {}
    if tools.works:
        output = "tools"
        reasons["output"] = (f"a parsed tool call came back (tool_choice "
                             f"{tools.data.get('tool_choice')})")
    elif schema.works:
        output = "json_schema"
        reasons["output"] = (f"tool calls {tools.status}; a json_schema response_format came "
                             "back as JSON matching the schema")
    else:
        output = "text"
        reasons["output"] = (f"tool calls {tools.status}, json_schema {schema.status}: Shoal "
                             "asks for JSON in the text and repairs what does not parse")
    tokenize = checks["tokenize"]
    ratio = tokenize.data.get("ratio")
    margin: float | None = None
    if tokenize.works:
        counter = "server"
        reasons["token_counter"] = ("the server's /tokenize answers: budgets in the model's "
                                    "own tokens" + (f" ({ratio:.2f} per cl100k token)"
                                                    if ratio else ""))
    else:
        counter = "tiktoken"
        if ratio:
            margin = math.ceil(ratio * 100) / 100  # (rounded up: a budget errs short)
            source = tokenize.data.get("ratio_from", "the server's tokenizer")
            reasons["token_counter"] = (f"no tokenize endpoint; {source} counts {ratio:.2f} "
                                        f"tokens per cl100k token: margin {margin:.2f}")
        else:
            margin = 1.0
            reasons["token_counter"] = ("no tokenize endpoint and no usage to measure a "
                                        "ratio: cl100k counts as they are (margin 1.00)")
    concurrency, why = suggest_concurrency(load)
    reasons["concurrency"] = why
    return Decision(output, counter, margin, concurrency, reasons)


def suggest_concurrency(load: list[Load]) -> tuple[int, str]:
    """The lowest concurrency measured whose throughput is within 10% of the best of the
    levels that answered every request, and why."""
    clean = [lv for lv in load if lv.ok == lv.requests and lv.requests_per_s]
    if not clean:
        return 1, "no concurrency level answered every request: 1, until it does"
    best = max(clean, key=lambda lv: lv.requests_per_s or 0.0)
    pick = min((lv for lv in clean if (lv.requests_per_s or 0) >= 0.9 * (best.requests_per_s
                                                                          or 0)),
               key=lambda lv: lv.concurrency)
    why = f"{pick.requests_per_s:,.1f} requests/s at {pick.concurrency} in flight, " + (
        "the most measured" if pick is best else f"within 10% of the best measured "
        f"({best.requests_per_s:,.1f} at {best.concurrency})")
    top = max(clean, key=lambda lv: lv.concurrency)
    below = [lv for lv in clean if lv.concurrency < top.concurrency]
    if pick is top and below and (top.requests_per_s or 0) > 1.2 * max(
            lv.requests_per_s or 0 for lv in below):
        why += ("; throughput still rose at the highest level tried: measure higher ones "
                f"(--concurrency {top.concurrency},{2 * top.concurrency},"
                f"{4 * top.concurrency})")
    failed = [lv for lv in load if lv.ok < lv.requests]
    if failed:
        why += "; " + "; ".join(f"at {lv.concurrency}: {lv.requests - lv.ok} of "
                                f"{lv.requests} failed ({', '.join(lv.errors[:2])})"
                                for lv in failed)
    return pick.concurrency, why


# --- the probe ---------------------------------------------------------------------------------


async def probe(base: str, model: str | None, key: str | None, options: CheckOptions,
                count: Callable[[str], int] | None = None,
                progress: Callable[[str], None] | None = None) -> CheckReport:
    """Every check against `base`, in turn, then the throughput levels and the decision.
    `model` None: the first the server lists. `count`: tiktoken's cl100k counter (the
    caller's; this layer does not load it). `progress` is told what starts."""
    say = progress or (lambda _: None)
    limits = httpx.Limits(max_connections=max(options.concurrency) + 2)
    headers = {"User-Agent": "shoal", "Accept": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    # trust_env=False: as Shoal's client, which takes no proxy from the environment
    async with httpx.AsyncClient(timeout=options.timeout_s, limits=limits, headers=headers,
                                 trust_env=False) as client:
        ep = Endpoint(base, model or "", key, client)
        models = await list_models(ep)
        source = "--model"
        if not model:
            ids = [e["id"] for e in listed_models(models)]
            if not ids:
                seen = "listed no models" if models.ok else f"answered {models.said()}"
                hint = _v1_hint(ep) if models.status == 404 else ""
                raise InputError(f"llm-check {ep.base}: GET {ep.base}/models {seen}{hint}; "
                                 "give the model with --model")
            ep.model = ep.redact(ids[0])
            source = ("the server's only model" if len(ids) == 1 else
                      f"the first of the {len(ids)} the server lists; choose with --model")
        say(f"probing {ep.base}, model {ep.model}: chat, tools, JSON, usage, cache, "
            "tokenizer, context length")
        checks: dict[str, Finding] = {}
        checks["chat"], chat = await check_chat(ep)
        checks["tools"] = await check_tools(ep)
        checks["json_schema"] = await check_json_schema(ep)
        checks["json_object"] = await check_json_object(ep)
        checks["usage"] = check_usage(chat)
        checks["cached_tokens"] = await check_cached(ep)
        checks["tokenize"] = await check_tokenize(ep, count)
        if not checks["tokenize"].works:
            ratio = usage_ratio(chat, checks["cached_tokens"], count)
            if ratio:
                checks["tokenize"].data.update(ratio=ratio, ratio_from="the usage")
                checks["tokenize"].detail += f"; the usage says {ratio:.2f} per cl100k token"
        checks["context_length"] = await check_context(ep, models)
        load = []
        for level in options.concurrency:
            say(f"concurrency {level}: {max(options.requests, level)} requests")
            load.append(await measure(ep, level, options.requests))
        return CheckReport(base, ep.model, source, checks, load, decide(checks, load))


def parse_concurrency(text: str) -> tuple[int, ...]:
    """`--concurrency 1,2,4` as whole numbers >= 1 (InputError naming the flag)."""
    try:
        levels = tuple(int(part) for part in text.split(","))
    except ValueError:
        levels = ()
    if not levels or min(levels) < 1 or max(levels) > 4096:
        raise InputError(f"--concurrency {text}: expected whole numbers >= 1 separated by "
                         "commas, e.g. 1,2,4 (at most 4096)")
    return tuple(sorted(set(levels)))


def check_endpoint(url: str, model: str | None = None, api_key_env: str | None = None,
                   options: CheckOptions | None = None,
                   count: Callable[[str], int] | None = None,
                   progress: Callable[[str], None] | None = None) -> CheckReport:
    """Validate the inputs as a provider's are (a URL carrying credentials, a key given
    for a variable name: refused without being shown), read the key, start a loopback
    server for `loopback`, and probe. Raises InputError for bad input and for an endpoint
    that cannot be reached or is not OpenAI-compatible, ProviderDown for one that times
    out or fails (5xx, 429)."""
    options = options or CheckOptions()
    if options.requests < 1:
        raise InputError(f"--requests {options.requests}: must be at least 1")
    if not (options.timeout_s > 0 and math.isfinite(options.timeout_s)):
        raise InputError(f"--timeout {options.timeout_s:g}: must be a number of seconds > 0")
    try:  # the rules a provider's fields follow, so the flags cannot carry a key either
        provider = ProviderConfig(name="llm-check", base_urls=[url],
                                  model=model or "(listed by the server)",
                                  api_key_env=api_key_env)
    except ValidationError as exc:
        raise InputError(_flag_problems(exc)) from None
    local = provider.base_urls == [LOOPBACK]
    key = None
    if api_key_env and not local:
        key = os.environ.get(api_key_env)
        if not key:
            raise InputError(f"--api-key-env: the environment variable "
                             f"{shown_name(api_key_env)} is not set; export it")
    endpoints = Endpoints()
    try:
        base = endpoints.urls(provider)[0]
        report = asyncio.run(probe(base, model, key, options, count, progress))
    finally:
        endpoints.stop()
    if local:
        report.url = f"loopback ({base})"
    return report


def _flag_problems(exc: ValidationError) -> str:
    """A refused flag said by its name (URL, --model, --api-key-env); values never shown."""
    flags = {"base_urls": "URL", "model": "--model", "api_key_env": "--api-key-env"}
    said = []
    for e in exc.errors():
        text = e["msg"].removeprefix("Value error, ")
        flag = flags.get(str(e["loc"][0]), "") if e["loc"] else ""
        said.append(f"{flag}: {text}" if flag else text)
    return "; ".join(said)

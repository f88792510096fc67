"""Shoal's loopback LLM server: an OpenAI-compatible chat-completions endpoint for dry
runs and tests, deterministic, with configurable latency and fault injection.

`shoal llm-serve --port 8765` (or `base_urls: [loopback]` in a config, which starts one
for the run; `--servers 3 --latency-ms 50,50,400` starts a pool). Replies are a pure
function of the request body and the seed: the same prompts give the same actions, on any
executor, across a resume, whichever endpoint of a pool answers. Faults are drawn per
attempt (the client's `X-Shoal-Attempt` header), so a retry can meet a different one.

What a request is about (an agent's turn and what its feed shows, an interview and the
agent's beliefs, a survey's items, a summary, an extraction, the analyst's run facts) is
read from its `shoal` field (`shoal.llm.metadata`), which Shoal's client sends to this
server, never from the prompt's wording: rewording a prompt changes no answer's meaning.
Of the rest of a request only the generic fields are read: the tools (what may be called),
the messages' roles (a repair, the analyst's tool results). Replies exercise every action
the tools allow, using real post ids and usernames; without tools they are JSON in text
(sometimes fenced, sometimes after a `<think>` block), or prose for an interview. Faults:
HTTP 500, a stall longer than the client's timeout, a malformed tool call, 429 with
Retry-After, an empty reply (reasoning models). Requests are recorded (GET
/_shoal/requests) so tests can read exactly what an agent was sent.

Each server also reports what a prefix cache would have reused, as vLLM's automatic prefix
caching does (`usage.prompt_tokens_details.cached_tokens`): the prompt as the server sees
it (the tools, then each message) cut into blocks of 16 tokens, each block's hash chained
with its predecessor's, a bounded LRU cache of block hashes; the cached tokens are those
of the leading blocks already in it. Its "tokens" are 4 characters, as its usage counts
them. Only the usage depends on what was asked before; the reply never does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import sys
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path

import orjson

from shoal.core.files import write_text
from shoal.core.language import Templates, templates
from shoal.llm.loopback_analyst import analyst_reply
from shoal.llm.metadata import (
    ANALYST,
    EXTRACTION,
    FIELD,
    INTERVIEW,
    LOOPBACK_MODEL,
    SUMMARY,
    SURVEY,
    without_field,
)

WEIGHTS = {"post": 0.2, "like": 0.22, "upvote": 0.22, "repost": 0.1, "quote": 0.07,
           "reply": 0.1, "comment": 0.12, "downvote": 0.06, "follow": 0.07, "unfollow": 0.02,
           "do_nothing": 0.08, "buy": 0.5, "sell": 0.3}
# The words of the replies are the `loopback.*` templates of the language the `shoal`
# field names (shoal.core.language; English without one). English, for reference:
PHRASES = list(templates().items("loopback.phrases"))
BOUNDS = (0.6, 0.2, -0.2, -0.6, -2.0)  # a position >= bound takes that bin's verb
VERBS = list(zip(BOUNDS, templates().items("loopback.verbs"), strict=True))
REASONS = list(templates().items("loopback.reasons"))


@dataclass
class Faults:
    """Probabilities (per request) of each injected fault, and the latency."""

    latency_ms: float = 0.0
    error_rate: float = 0.0
    timeout_rate: float = 0.0
    timeout_sleep_s: float = 30.0
    malformed_rate: float = 0.0
    rate_limit_rate: float = 0.0
    retry_after_s: float = 1.0
    empty_rate: float = 0.0
    burst_every_s: float = 0.0  # every N seconds...
    burst_length_s: float = 0.0  # ...answer 429 to everything for this long
    reject_tools: bool = False  # answer 400 to requests with tools (models without them)
    reject_schema: bool = False  # answer 400 to requests with a response_format


BLOCK_TOKENS = 16  # tokens per block of the prefix cache (vLLM's default block size)
CHARS_PER_TOKEN = 4  # the loopback server's tokens: 4 characters (as its usage counts)
CONTEXT_LENGTH = 32_768  # what the loopback server says its context length is
PREFIX_CACHE_BLOCKS = 65_536  # blocks kept (about a million tokens), least recently used go


class PrefixCache:
    """A prefix cache's bookkeeping, as vLLM's automatic prefix caching keeps it: blocks
    of `BLOCK_TOKENS` tokens, identified by a hash chained with the previous block's (a
    block is reused only after the same prefix), at most `blocks` of them, least
    recently used evicted first. Not thread-safe: one server's event loop uses it."""

    def __init__(self, blocks: int = PREFIX_CACHE_BLOCKS):
        self.blocks = blocks
        self._lru: OrderedDict[bytes, None] = OrderedDict()

    def admit(self, text: str) -> int:
        """Tokens of `text`'s leading blocks that were already cached; then every full
        block of `text` is cached (the most recently used)."""
        width = BLOCK_TOKENS * CHARS_PER_TOKEN
        digest = b""
        hit, leading = 0, True
        for start in range(0, len(text) - width + 1, width):
            block = text[start:start + width].encode("utf-8", "surrogatepass")
            digest = hashlib.blake2b(digest + block, digest_size=16).digest()
            if leading and digest in self._lru:
                hit += BLOCK_TOKENS
            else:
                leading = False
            self._lru[digest] = None
            self._lru.move_to_end(digest)
        while len(self._lru) > self.blocks:
            self._lru.popitem(last=False)
        return hit


def prompt_text(request: dict) -> str:
    """A request's prompt as the loopback server caches it: the tools (as JSON), then each
    message's role and content, in order."""
    parts = [orjson.dumps(request["tools"]).decode()] if request.get("tools") else []
    for m in request.get("messages", []):
        content = m.get("content")
        parts.append(f"<|{m.get('role', '')}|>" + (content if isinstance(content, str)
                                                    else orjson.dumps(content).decode()))
    return "".join(parts)


class LoopbackState:
    """Configuration, the request log and the prefix cache. `key`, if set, is the API key
    every request must bear (to test that clients send one); it is never logged."""

    def __init__(self, faults: Faults, seed: int, record: Path | None, keep: int = 5000,
                 key: str | None = None, script: dict | None = None,
                 prefix_blocks: int = PREFIX_CACHE_BLOCKS):
        self.faults, self.seed, self.record, self.key = faults, seed, record, key
        self.script = script
        self.prefix = PrefixCache(prefix_blocks)
        self.requests: deque[dict] = deque(maxlen=keep)
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.served = 0
        # `shoal llm-serve` says once that a request came without the `shoal` field (its
        # client is not Shoal's, or Shoal was not told this is the loopback server)
        self.hint_unmarked = False

    def log(self, entry: dict) -> None:
        with self.lock:
            self.requests.append(entry)
            self.served += 1
            if self.record is not None:
                with open(self.record, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")


def _rng(body: bytes, attempt: str, seed: int) -> random.Random:
    digest = hashlib.sha256(body + attempt.encode() + str(seed).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def _words(meta: dict) -> Templates:
    """The templates of the language the `shoal` field names (`language`; English when
    it names none, or one without templates)."""
    tag = meta.get("language")
    try:
        return templates(tag) if isinstance(tag, str) else templates()
    except ValueError:
        return templates()


def _sentence(text: str) -> str:
    """`text` with its first letter up (a phrase may start with a lower-case verb)."""
    return text[:1].upper() + text[1:]


def _text(rng: random.Random, topics: list[str], words: Templates | None = None
          ) -> tuple[str, dict]:
    """A post's text and stance: a stance on a topic, in `words`' language (the draws are
    the same in every language)."""
    words = words or templates()
    topic = rng.choice(topics) if topics else "this"
    x = round(rng.uniform(-1, 1), 2)
    verb = next(v for b, v in zip(BOUNDS, words.items("loopback.verbs"), strict=True)
                if x >= b)
    text = rng.choice(words.items("loopback.phrases")).format(
        verb=verb, topic=topic.replace("_", " "),
        reason=rng.choice(words.items("loopback.reasons")))
    return _sentence(text), ({topic: x} if topics else {})


def decide(request: dict, meta: dict, rng: random.Random) -> tuple[str, dict]:
    """An action name and arguments for an agent's turn, exercising every allowed action,
    from what the `shoal` field says the agent is shown (`meta`; {} without one): its
    feed's post ids and authors, the markets and their outcomes, the topics. The choices
    are the request's tools, or without tools the platform's actions."""
    tools = request.get("tools") or []
    names = [t["function"]["name"] for t in tools] or [
        n for n in WEIGHTS if n in (meta.get("actions") or _schema_actions(request))]
    # A repair (the model has answered once already) shows no feed: its last message says
    # what was wrong, so the answer is one that needs none.
    repair = any(m.get("role") == "assistant" for m in request.get("messages", []))
    feed = [] if repair else [(int(p["post"]), str(p["author"]))
                              for p in meta.get("feed") or ()]
    markets = {} if repair else {str(m): [str(o) for o in outcomes]
                                 for m, outcomes in (meta.get("markets") or {}).items()}
    topics = [str(t) for t in meta.get("topics") or ()]
    usable = [n for n in names if n in WEIGHTS and (
        feed or n in ("post", "do_nothing") or (markets and n in ("buy", "sell")))]
    if not usable:
        return "do_nothing", {"reason": "nothing to do"}
    name = rng.choices(usable, weights=[WEIGHTS[n] for n in usable])[0]
    args: dict = {}
    if name in ("like", "upvote", "downvote", "repost", "quote", "reply", "comment"):
        args["post_id"] = rng.choice(feed)[0]
    if name in ("follow", "unfollow"):
        args["username"] = rng.choice(feed)[1]
    if name in ("post", "quote", "reply", "comment"):
        text, stance = _text(rng, topics, _words(meta))
        args["text"] = text
        if stance and rng.random() < 0.7:  # sometimes leave the stance to be estimated
            args["stance"] = stance
    if name in ("buy", "sell"):  # one in eight is more than the trader has
        market = rng.choice(sorted(markets))
        args = {"market": market, "outcome": rng.choice(markets[market] or ["yes"]),
                "amount": round(rng.uniform(1, 20), 2) if rng.random() > 0.125 else 10**6}
    if name == "do_nothing":
        args["reason"] = "not much to add today"
    return name, args


def reply(request: dict, rng: random.Random, malformed: bool, empty: bool,
          script: dict | None = None) -> dict:
    """The assistant message for a request (`script`: the analyst's scripted replies).
    What the request is about comes from its `shoal` field, never from its wording: a
    request without one is answered as a turn when it has tools, else as a question to
    someone of no known views."""
    meta = request.get(FIELD)
    meta = meta if isinstance(meta, dict) else {}
    kind = meta.get("kind")
    if kind == SUMMARY:  # the LLM summariser
        return {"role": "assistant", "content": _summary(meta)}
    if kind == EXTRACTION:  # graph memory's LLM extractor
        return _record_facts(str(meta.get("text") or ""), rng)
    if kind == ANALYST:
        return analyst_reply(request, meta, rng, script)
    if kind == SURVEY:
        return {"role": "assistant", "content": json.dumps(_survey_answers(meta))}
    if kind == INTERVIEW or (kind is None and not request.get("tools")
                             and not _constrained(request)):
        return {"role": "assistant", "content": _interview_answer(meta)}
    name, args = decide(request, meta, rng)
    tools = request.get("tools")
    if malformed:
        if rng.random() < 0.5:
            args = "{'post_id': oops"  # not JSON
        else:
            args = {**args, "post_id": 10**9} if "post_id" in args else {"username": "nobody"}
    payload = args if isinstance(args, str) else json.dumps(args)
    if empty:
        if rng.random() < 0.5:
            return {"role": "assistant", "content": "", "reasoning_content":
                    "I thought about it. " + (json.dumps({"action": name, **args})
                                              if isinstance(args, dict) else payload)}
        return {"role": "assistant", "content": None}
    if tools:
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{rng.randrange(10**9)}", "type": "function",
            "function": {"name": name, "arguments": payload}}]}
    text = json.dumps({"action": name, **args}) if isinstance(args, dict) else payload
    if _constrained(request):  # a server decoding to a schema writes the JSON alone
        return {"role": "assistant", "content": text}
    style = rng.random()
    if style < 0.3:
        text = f"```json\n{text}\n```"
    elif style < 0.5:
        text = f"<think>Let me look at my feed first.</think>\n{text}"
    return {"role": "assistant", "content": text}


def _schema_actions(request: dict) -> list[str]:
    """The actions a request's JSON schema allows (its branches' `action` constants)."""
    fmt = request.get("response_format")
    try:
        branches = fmt["json_schema"]["schema"]["anyOf"]
        return [str(b["properties"]["action"]["const"]) for b in branches]
    except (KeyError, TypeError):
        return []


def _constrained(request: dict) -> bool:
    """Does the request ask for JSON (`response_format` json_schema or json_object)?"""
    fmt = request.get("response_format")
    return isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object")


def tokenize(body: bytes) -> tuple[int, dict, dict]:
    """The loopback server's tokens of a text, as llama.cpp (`{"content": ...}`) and vLLM
    (`{"prompt": ...}`) answer `POST /tokenize`: one token per 4 characters (as its usage
    counts them), each an id drawn from its characters."""
    try:
        request = orjson.loads(body)
        text = request.get("content", request.get("prompt"))
        if not isinstance(text, str):
            raise TypeError
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        return 400, {"error": {"message": "expected {\"content\": TEXT}"}}, {}
    tokens = [int.from_bytes(hashlib.blake2b(text[i:i + CHARS_PER_TOKEN].encode(),
                                             digest_size=2).digest(), "big")
              for i in range(0, len(text), CHARS_PER_TOKEN)]
    return 200, {"tokens": tokens, "count": len(tokens),
                 "max_model_len": CONTEXT_LENGTH}, {}


def _summary(meta: dict) -> str:
    """A compaction's "summary": the first line of what it was given (written in the run's
    language already: round memory's items are), or that nothing happened, in the
    language the `shoal` field names."""
    lines = (ln for t in meta.get("texts") or () for ln in str(t).splitlines())
    return next((ln for ln in lines if ln.strip()), _words(meta)("summarizer.nothing"))[:400]


# The loopback's own words for a stance and a confidence (`shoal.llm.metadata`), in the
# first person (`loopback.stances`, `loopback.confidences`; English here, for reference),
# and the position a stance stands for in a survey answer.
STANCE_WORDS = {k.rpartition(".")[2]: v for k, v in templates().texts.items()
                if k.startswith("loopback.stances.")}
CONFIDENCE_WORDS = {k.rpartition(".")[2]: v for k, v in templates().texts.items()
                    if k.startswith("loopback.confidences.")}
POSITIONS = {"strongly_support": 0.8, "support": 0.4, "undecided": 0.0, "oppose": -0.4,
             "strongly_oppose": -0.8}


def _view(belief: dict, words: Templates | None = None) -> str:
    """A belief in the first person: "I support it; I am fairly confident"."""
    words = words or templates()
    stance, confidence = belief.get("stance"), belief.get("confidence")
    return words("loopback.view", stance=words.get(f"loopback.stances.{stance}", words(
        "loopback.stances.undecided")), confidence=words.get(
        f"loopback.confidences.{confidence}", words("loopback.confidences.not_sure")))


def _interview_answer(meta: dict) -> str:
    """An interview answer in the first person, from the beliefs the agent's system text
    states (so answers differ by agent), in the agent's language."""
    words = _words(meta)
    beliefs = meta.get("beliefs") or []
    if not beliefs:
        return words("loopback.no_view")
    said = words.text("loopback.sep").join(
        words("loopback.about", about=b.get("about"), view=_view(b, words)) for b in beliefs)
    name = words("loopback.i_am", name=meta["name"]) if meta.get("name") else ""
    return words("loopback.answer", name=name, said=said)


def _survey_answers(meta: dict) -> dict:
    """A questionnaire answered from the beliefs the agent's system text states (strongly
    oppose −0.8 … strongly support 0.8): Likert and numeric items as rule-based
    respondents answer without noise; a choice is the listed option at that position."""
    views = {b.get("about"): b for b in meta.get("beliefs") or []}
    words = _words(meta)

    def position(about: str | None) -> float:
        return POSITIONS.get((views.get(about) or {}).get("stance"), 0.0)

    out: dict = {}
    for it in meta.get("items") or []:
        item, kind = it.get("id"), it.get("kind")
        x = position(it.get("about"))
        if kind == "likert":
            k = int(it.get("points") or 5)
            z = -x if it.get("reverse") else x
            out[item] = int(min(k, max(1, (z + 1) / 2 * k // 1 + 1)))
        elif kind == "numeric":
            lo, hi = (float(v) for v in it.get("range") or (0.0, 100.0))
            out[item] = round(lo + (hi - lo) * (x + 1) / 2, 2)
        elif kind in ("single", "multiple"):
            # the options as listed (assumed ordered from against to for): the one at
            # the agent's position
            options = [str(o) for o in it.get("options") or ()]
            pick = options[round((x + 1) / 2 * (len(options) - 1))] if options else None
            out[item] = pick if kind == "single" else [pick] if pick else []
        else:
            first = next(iter(views.values()), None)
            out[item] = _sentence(words("loopback.view_sentence", view=_view(first, words))) \
                if first else words("loopback.no_mind")
    return out


_NAME = re.compile(r"\b[A-Z][\w'’-]*(?:\s+(?:of|the|for)?\s*[A-Z][\w'’-]*)*")
_SIDES = (("oppos", "opposes"), ("reject", "opposes"), ("critici", "opposes"),
          ("support", "supports"), ("back", "supports"), ("welcom", "supports"),
          ("propos", "proposes"), ("announc", "proposes"))


def _record_facts(text: str, rng: random.Random) -> dict:
    """A `record_facts` call for the text an extraction request reads: capitalised names
    as entities, and per sentence naming two of them a fact between the first two (its
    predicate from the verb, else "related to"). Deterministic, like every reply."""
    skip = {"The", "A", "An", "I", "It", "This", "We", "They"}
    entities, facts = [], []
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        names = [n for n in _NAME.findall(sentence) if n not in skip]
        for n in names:
            if n not in [e["name"] for e in entities]:
                entities.append({"name": n, "type": "organisation" if len(n.split()) > 1
                                 else "name"})
        if len(names) >= 2:
            low = sentence.lower()
            predicate = next((p for cue, p in _SIDES if cue in low), "related to")
            facts.append({"subject": names[0], "predicate": predicate, "object": names[1],
                          "sentence": sentence.strip()})
    args = json.dumps({"entities": entities, "facts": facts})
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{rng.randrange(10**9)}", "type": "function",
        "function": {"name": "record_facts", "arguments": args}}]}


class LoopbackServer:
    """A small asyncio HTTP/1.1 server (keep-alive, Content-Length bodies): the
    OpenAI-compatible routes plus the recording endpoints. asyncio rather than threads, so
    hundreds of concurrent connections and injected latencies cost no threads."""

    def __init__(self, state: LoopbackState):
        self.state = state
        self.connections: set[asyncio.StreamWriter] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection until the client closes it."""
        self.connections.add(writer)
        try:
            while True:
                head = await reader.readline()
                if not head:
                    break
                method, path = head.decode("latin-1").split(" ")[:2]
                headers = {}
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    key, _, value = line.decode("latin-1").partition(":")
                    headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length") or 0))
                status, payload, extra = await self.route(method, path, headers, body)
                data = orjson.dumps(payload)
                lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}",
                         "Content-Type: application/json", f"Content-Length: {len(data)}",
                         *(f"{k}: {v}" for k, v in extra.items())]
                writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # a client that went away (e.g. after an injected timeout)
        finally:
            self.connections.discard(writer)
            writer.close()

    async def route(self, method: str, path: str, headers: dict, body: bytes
                    ) -> tuple[int, dict, dict]:
        """Status, JSON payload and extra headers for one request."""
        state = self.state
        if method == "GET" and path.rstrip("/").endswith("/models"):
            return 200, {"object": "list", "data": [{"id": LOOPBACK_MODEL, "object": "model",
                                                      "max_model_len": CONTEXT_LENGTH}]}, {}
        if method == "GET" and path.rstrip("/") == "/props":  # as llama.cpp's server says it
            return 200, {"default_generation_settings": {"n_ctx": CONTEXT_LENGTH}}, {}
        if method == "GET" and path.startswith("/_shoal/requests"):
            with state.lock:
                return 200, {"requests": list(state.requests)}, {}
        if method == "GET" and path.startswith("/_shoal/health"):
            return 200, {"ok": True, "served": state.served}, {}
        if method == "POST" and path.startswith("/_shoal/reset"):
            with state.lock:
                state.requests.clear()
            return 200, {"ok": True}, {}
        if method == "POST" and path.rstrip("/") in ("/tokenize", "/v1/tokenize"):
            return tokenize(body)
        if not (method == "POST" and path.rstrip("/").endswith("/chat/completions")):
            return 404, {"error": {"message": f"no route {method} {path}"}}, {}
        attempt = headers.get("x-shoal-attempt", "0")
        refused = {"time": time.time(), "attempt": attempt, "request": None}
        if state.key and headers.get("authorization") != f"Bearer {state.key}":
            state.log({**refused, "fault": "401"})
            return 401, {"error": {"message": "invalid API key"}}, {}
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            state.log({**refused, "fault": "400"})
            return 400, {"error": {"message": "request body is not JSON"}}, {}
        if state.faults.reject_tools and "tools" in request:
            state.log({**refused, "fault": "400"})
            return 400, {"error": {"message": "this model does not support tools"}}, {}
        if state.faults.reject_schema and "response_format" in request:
            state.log({**refused, "fault": "400"})
            return 400, {"error": {"message": "response_format is not supported"}}, {}
        if FIELD in request:  # the answer is drawn from the body as other servers see it
            body = orjson.dumps(without_field(request))
        elif state.hint_unmarked:
            state.hint_unmarked = False
            unused = " and --script is not used for it" if state.script else ""
            print(f"note: a request without the `{FIELD}` field: it is answered knowing "
                  f"nothing of the agent or its feed{unused}; have Shoal ask for the model "
                  f"{LOOPBACK_MODEL} or set the provider's shoal_field: true (docs/llm.md)",
                  file=sys.stderr, flush=True)
        return await self.complete(request, body, attempt)

    async def complete(self, request: dict, body: bytes, attempt: str
                       ) -> tuple[int, dict, dict]:
        """A chat completion, or an injected fault. `body`: the request's bytes without
        the `shoal` field (Shoal's client writes it last, after the bytes every other
        server is sent), which the faults and the reply are drawn from."""
        state, f = self.state, self.state.faults
        # Faults and the delay are drawn per attempt (a retry can meet another fault); the
        # answer is a function of the body alone, whichever attempt or endpoint (with
        # whatever latency) gives it.
        faults = _rng(body, attempt, state.seed)
        draw = faults.random()
        rng = _rng(body, "0", state.seed)
        rng.random()  # (as the first attempt's draw: answers without latency are unchanged)
        entry = {"time": time.time(), "attempt": attempt, "request": request}
        elapsed = time.monotonic() - state.started
        in_burst = f.burst_every_s > 0 and (elapsed % f.burst_every_s) < f.burst_length_s
        if in_burst or draw < f.rate_limit_rate:
            state.log({**entry, "fault": "429"})
            return 429, {"error": {"message": "rate limited"}}, {
                "Retry-After": f"{f.retry_after_s:g}"}
        draw -= f.rate_limit_rate
        if draw < f.error_rate:
            state.log({**entry, "fault": "500"})
            return 500, {"error": {"message": "injected server error"}}, {}
        draw -= f.error_rate
        stalled = draw < f.timeout_rate
        if stalled:  # logged when the stall starts, once (the client may give up)
            state.log({**entry, "fault": "timeout"})
            await asyncio.sleep(f.timeout_sleep_s)
        draw -= f.timeout_rate
        malformed = 0 <= draw < f.malformed_rate
        empty = f.malformed_rate <= draw < f.malformed_rate + f.empty_rate
        if f.latency_ms:
            await asyncio.sleep(max(0.0, faults.gauss(f.latency_ms, f.latency_ms * 0.1)) / 1000)
        message = reply(request, rng, malformed, empty, state.script)
        # Usage as a provider would report it, estimated cheaply (4 characters a token):
        # exact counting here would cost the test server more CPU than the engine spends.
        prompt = sum(len(m.get("content") or "") for m in request.get("messages", [])) // 4
        prompt += len(orjson.dumps(request.get("tools") or "")) // 4
        completion = max(1, len(orjson.dumps(message)) // 4)
        cached = min(prompt, state.prefix.admit(prompt_text(request)))
        if not stalled:
            state.log({**entry, "fault": "malformed" if malformed else "empty" if empty
                       else None, "reply": message})
        return 200, {
            "id": f"chatcmpl-{rng.randrange(10**12)}", "object": "chat.completion",
            "model": request.get("model", "shoal-loopback"),
            "choices": [{"index": 0, "message": message, "finish_reason":
                         "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached}}}, {}


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            429: "Too Many Requests", 500: "Internal Server Error"}


class RunningServer:
    """A loopback server on its own event loop in a background thread (tests)."""

    def __init__(self, host: str, port: int, state: LoopbackState):
        self.state = state
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        box: dict = {}

        self._handler = LoopbackServer(state)

        async def start() -> None:
            box["server"] = await asyncio.start_server(
                self._handler.handle, host, port, backlog=1024)
            ready.set()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(start())
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="shoal-loopback", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the loopback LLM server did not start")
        self._server = box["server"]
        self.host, self.port = self._server.sockets[0].getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}/v1"

    def stop(self) -> None:
        """Close the server, drop its open connections (clients see the server gone, as
        when a real one dies) and stop its loop."""
        async def shutdown() -> None:
            self._server.close()
            for writer in list(self._handler.connections):
                writer.transport.abort()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        self._thread.join(5)


def serve_in_thread(host: str = "127.0.0.1", port: int = 0, faults: Faults | None = None,
                    seed: int = 0, record: Path | None = None, key: str | None = None,
                    script: dict | None = None,
                    prefix_blocks: int = PREFIX_CACHE_BLOCKS) -> RunningServer:
    """Start a loopback server in this process; `.url` is its base URL (…/v1)."""
    return RunningServer(host, port, LoopbackState(faults or Faults(), seed, record, key=key,
                                                   script=script, prefix_blocks=prefix_blocks))


class LoopbackProcess:
    """A loopback server in a child process (so it does not compete with the driver for
    the GIL), for configs whose provider says `base_urls: [loopback]`."""

    def __init__(self, seed: int = 0, faults: Faults | None = None, timeout_s: float = 30.0):
        import subprocess
        import tempfile

        ready = Path(tempfile.mkdtemp(prefix="shoal-loopback-")) / "url"
        options = [f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')}={v}"
                   for k, v in dataclasses.asdict(faults or Faults()).items() if v is not False]
        # `--parent-pid`: the server stops when this process is gone, even if it was
        # killed (SIGKILL runs no cleanup that could stop it).
        # In a process group of its own: a terminal's Ctrl-C goes to the run alone (which
        # stops the server when done with it), not to a server still importing, which
        # it would kill before it could ignore it.
        self.process = subprocess.Popen(
            [sys.executable, "-m", "shoal.llm.server", "--port", "0", "--seed", str(seed),
             "--ready-file", str(ready), "--parent-pid", str(os.getpid()), *options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0)
        deadline = time.monotonic() + timeout_s
        try:
            while not ready.exists():
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the loopback LLM server did not start")
                time.sleep(0.05)
            self.url = ready.read_text()
        except BaseException:  # (Ctrl-C while it starts too: it stops with us)
            self.stop()
            raise
        finally:
            shutil.rmtree(ready.parent, ignore_errors=True)

    def stop(self) -> None:
        """Terminate the child."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except Exception:  # still alive: make sure it goes
                self.process.kill()


PER_SERVER = ("latency_ms", "error_rate", "timeout_rate", "timeout_sleep_s", "malformed_rate",
              "rate_limit_rate", "retry_after_s", "empty_rate", "burst_every_s",
              "burst_length_s")  # options that take one value per server


def _numbers(text: str) -> list[float]:
    """One number, or one per server separated by commas."""
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or numbers separated by "
                                         f"commas, got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The `shoal llm-serve` options. The fault and latency options take one value for
    every server, or a comma-separated value per server (`--servers 3 --latency-ms
    50,50,400`)."""
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765,
                   help="0 picks a free port; with --servers N, ports PORT..PORT+N-1")
    p.add_argument("--servers", type=int, default=1,
                   help="how many servers to start (an endpoint pool), each on its own port")
    p.add_argument("--seed", type=int, default=0, help="seeds the replies")
    each = " (one value, or one per server: 50,50,400)"
    p.add_argument("--latency-ms", type=_numbers, default=[0.0],
                   help="mean answer delay" + each)
    p.add_argument("--error-rate", type=_numbers, default=[0.0],
                   help="share answered HTTP 500" + each)
    p.add_argument("--timeout-rate", type=_numbers, default=[0.0],
                   help="share that stall for --timeout-sleep-s (longer than the client waits)")
    p.add_argument("--timeout-sleep-s", type=_numbers, default=[30.0])
    p.add_argument("--malformed-rate", type=_numbers, default=[0.0],
                   help="share of replies with broken or impossible tool calls")
    p.add_argument("--rate-limit-rate", type=_numbers, default=[0.0],
                   help="share answered 429 with Retry-After" + each)
    p.add_argument("--retry-after-s", type=_numbers, default=[1.0])
    p.add_argument("--empty-rate", type=_numbers, default=[0.0],
                   help="share of empty replies (reasoning models: content in reasoning_content)")
    p.add_argument("--burst-every-s", type=_numbers, default=[0.0],
                   help="every N seconds, answer 429 to everything...")
    p.add_argument("--burst-length-s", type=_numbers, default=[0.0], help="...for this long")
    p.add_argument("--reject-tools", action="store_true",
                   help="answer 400 to requests with tools, as servers without tool support do")
    p.add_argument("--reject-schema", action="store_true",
                   help="answer 400 to requests with a response_format, as servers without "
                        "constrained decoding do")
    p.add_argument("--record", help="append every request and reply to this JSONL file "
                                    "(with several servers: FILE.0.jsonl, FILE.1.jsonl, ...)")
    p.add_argument("--ready-file", help="write the base URL(s) here once listening, one a line")
    p.add_argument("--script", metavar="FILE",
                   help="JSON of scripted analyst replies (see sim/llm/loopback_analyst.py)")
    p.add_argument("--prefix-cache-blocks", type=int, default=PREFIX_CACHE_BLOCKS,
                   help=f"blocks of {BLOCK_TOKENS} tokens the prefix cache keeps per server "
                        "(the least recently used go first)")
    p.add_argument("--require-key-env", metavar="NAME",
                   help="answer 401 unless requests bear the key in this environment variable")
    p.add_argument("--parent-pid", type=int, metavar="PID",
                   help="stop when process PID is no longer this server's parent (the run "
                        "that started it has ended, however it ended); Ctrl-C is left to "
                        "that process")


def faults_from(args: argparse.Namespace, servers: int = 1) -> list[Faults]:
    """Each server's faults from parsed `llm-serve` options (ValueError naming the option
    whose list does not have one value or one per server)."""
    out = []
    for i in range(servers):
        values = {}
        for f in dataclasses.fields(Faults):
            value = getattr(args, f.name)
            if f.name in PER_SERVER:
                value = value if isinstance(value, list) else [value]
                if len(value) not in (1, servers):
                    raise ValueError(f"--{f.name.replace('_', '-')}: {len(value)} values for "
                                     f"{servers} servers; give one, or one per server")
                value = value[i if len(value) > 1 else 0]
                flag = f"--{f.name.replace('_', '-')} {value:g}"
                if not math.isfinite(value):
                    raise ValueError(f"{flag}: must be a finite number")
                if f.name.endswith("_rate") and not 0 <= value <= 1:
                    raise ValueError(f"{flag}: a share, between 0 and 1")
                if value < 0:
                    raise ValueError(f"{flag}: must be >= 0")
            values[f.name] = value
        out.append(Faults(**values))
    return out


def _record_path(record: str | None, i: int, servers: int) -> Path | None:
    if record is None:
        return None
    path = Path(record)
    return path if servers == 1 else path.with_name(f"{path.stem}.{i}{path.suffix or '.jsonl'}")


def _described(faults: Faults) -> str:
    """The settings of a server that differ from the defaults, for its line."""
    default = Faults()
    changed = [f"{f.name}={getattr(faults, f.name):g}" for f in dataclasses.fields(Faults)
               if f.name in PER_SERVER and getattr(faults, f.name) != getattr(default, f.name)]
    return f" ({', '.join(changed)})" if changed else ""


MAX_SERVERS = 1024  # one process's servers (each holds a listening socket)


def serve(args: argparse.Namespace) -> int:
    """Run the server(s) in the foreground until interrupted (with `--parent-pid`: until
    the parent stops it, or is gone)."""
    if args.parent_pid is not None:
        # A terminal's Ctrl-C goes to the whole process group, this child of a run
        # included; the run handles it (it stops after its round, with calls to this server
        # in flight) and stops the server when it is done with it.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    key = None
    if args.require_key_env:
        key = os.environ.get(args.require_key_env)
        if not key:
            print(f"error: --require-key-env: {args.require_key_env} is not set",
                  file=sys.stderr)
            return 2
    script = None
    if args.script:
        try:
            script = json.loads(Path(args.script).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"error: --script {args.script}: {exc}", file=sys.stderr)
            return 2
        if not isinstance(script, dict):
            print(f"error: --script {args.script}: a JSON object of lists is expected",
                  file=sys.stderr)
            return 2
    n = args.servers
    if not 1 <= n <= MAX_SERVERS:
        print(f"error: --servers {n}: 1 to {MAX_SERVERS:,}", file=sys.stderr)
        return 2
    if args.parent_pid is not None and args.parent_pid < 1:
        print(f"error: --parent-pid {args.parent_pid}: a process id is at least 1",
              file=sys.stderr)
        return 2
    if args.record is not None and not Path(args.record).resolve().parent.is_dir():
        print(f"error: --record {args.record}: no such folder {Path(args.record).parent}",
              file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535 - (n - 1 if args.port else 0):
        print(f"error: --port {args.port}: a port is 0..65535 (0: any free one)"
              + (f"; {n} servers need {n} ports from it" if n > 1 else ""), file=sys.stderr)
        return 2
    if args.prefix_cache_blocks < 1:
        print(f"error: --prefix-cache-blocks {args.prefix_cache_blocks}: must be at least 1",
              file=sys.stderr)
        return 2
    try:
        faults = faults_from(args, n)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    states = [LoopbackState(faults[i], args.seed, _record_path(args.record, i, n), key=key,
                            script=script, prefix_blocks=args.prefix_cache_blocks)
              for i in range(n)]
    for state in states:
        state.hint_unmarked = True

    async def main() -> None:
        servers, urls = [], []
        for i, state in enumerate(states):
            port = args.port + i if args.port else 0
            try:
                server = await asyncio.start_server(LoopbackServer(state).handle, args.host,
                                                    port, backlog=1024)
            except OSError as exc:  # port taken, host not ours: the user's to fix
                print(f"error: --host {args.host} --port {port}: {exc.strerror or exc}",
                      file=sys.stderr)
                raise SystemExit(2) from None
            host, bound = server.sockets[0].getsockname()[:2]
            servers.append(server)
            urls.append(f"http://{host}:{bound}/v1")
        if args.ready_file:  # written whole, then renamed: the reader never sees half
            write_text(args.ready_file, "\n".join(urls))
        for i, url in enumerate(urls):
            which = f" {i}" if n > 1 else ""
            print(f"loopback LLM server{which} on {url}"
                  + (_described(faults[i]) if n > 1 else ""), file=sys.stderr, flush=True)
        serving = asyncio.gather(*(s.serve_forever() for s in servers))
        if args.parent_pid is None:
            await serving
            return
        await _orphaned(args.parent_pid)
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        if args.ready_file:  # (a parent killed before it read the file left it behind)
            ready = Path(args.ready_file)
            ready.unlink(missing_ok=True)
            if ready.parent.name.startswith("shoal-loopback-"):
                shutil.rmtree(ready.parent, ignore_errors=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0


async def _orphaned(parent: int, every_s: float = 0.5) -> None:
    """Return once `parent` is no longer this process's parent: it ended and this process
    was handed to another (init, a subreaper). Polling the parent id works wherever the
    server was started from, a thread included, which a parent-death signal does not."""
    while os.getppid() == parent:
        await asyncio.sleep(every_s)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Shoal's loopback LLM server")
    add_arguments(parser)
    sys.exit(serve(parser.parse_args()))

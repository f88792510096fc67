"""How an LLM agent's action is asked for: the provider's `output` mode.

- `tools`: the platform's actions as tools (OpenAI function calling).
- `json_schema`: one JSON object, its shape fixed by `response_format` with the action
  schema below (the form vLLM, SGLang, llama.cpp, Ollama and OpenAI accept). Servers
  decode to the schema, so even a very small model writes a parseable action; the schema
  also names the posts of the agent's feed and the accounts it shows, so the ids it
  writes exist.
- `text`: JSON asked for in words (`json_instructions`), for servers with neither.
- `auto`: one of these, picked once per run by `probe` (a tool call that parses, else a
  schema-constrained answer that parses, else text).

The JSON-schema answer leaves out the self-reported stance (a schema with optional
numeric fields is where small models go wrong most); a post's stance is then estimated
from its text, as for any answer without one.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from typing import Any, Literal

from shoal.agents.llm_tools import (
    ACTIONS,
    TRADES,
    json_instructions,
    parse_reply,
    platform_actions,
    tools,
)
from shoal.config.llm import ProviderConfig
from shoal.core.errors import InputError
from shoal.core.files import write_text
from shoal.llm.cache import CachedChat, CacheSpec, ResponseCache
from shoal.llm.chat import ChatModel, ChatRequest, SyncChat, chat_model, response_format
from shoal.llm.endpoints import LOOPBACK
from shoal.llm.metadata import TURN, meta
from shoal.memory.model_tokens import ModelTokens, measure, request_text
from shoal.memory.tokens import count

Output = Literal["tools", "json_schema", "text"]
MODES: tuple[str, ...] = ("tools", "json_schema", "text")
TEXT_LIMIT = 280  # characters of a post, reply or comment in a schema-constrained answer


def action_schema(platform: str, feed: list[int], accounts: list[str],
                  markets: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """A JSON schema of one action on `platform`: one branch per action the agent can
    take now (no post ids without a feed), each with the action's arguments required and
    no others; `feed` and `accounts` bound the ids and usernames it may name."""
    markets = markets or {}
    branches = []
    for name in platform_actions(platform):
        _, required, _ = ACTIONS[name]
        props: dict[str, Any] = {"action": {"const": name}}
        if "post_id" in required:
            if not feed:
                continue
            props["post_id"] = {"enum": sorted(set(feed))}
        if "username" in required:
            if not accounts:
                continue
            props["username"] = {"enum": sorted(set(accounts))}
        if "text" in required:
            props["text"] = {"type": "string", "minLength": 1, "maxLength": TEXT_LIMIT}
        if name in TRADES:
            if not markets:
                continue
            props["market"] = {"enum": sorted(markets)}
            props["outcome"] = {"enum": sorted({o for outs in markets.values() for o in outs})}
            props["amount"] = {"type": "number"}
        branches.append({"type": "object", "properties": props, "required": list(props),
                         "additionalProperties": False})
    return {"anyOf": branches}


async def probe(model: ChatModel) -> tuple[Output, str]:
    """The output mode to use with `model` and why: a tool call that parses to a known
    action, else a schema-constrained answer that does, else text. Two requests at most,
    each the same every run (so a response cache records and replays them)."""
    turn = meta(TURN, agent=0, username="probe", round=0, platform="twitter",
                actions=["post", "do_nothing"], topics=[], feed=[], markets={})
    messages = [{"role": "system", "content": "You are a person using a social network."},
                {"role": "user", "content": "Your feed is empty. Write a short post about "
                 "your day, or do nothing."}]
    request = ChatRequest(messages=messages, tools=_probe_tools(), tool_choice="auto",
                          temperature=0.0, seed=0, meta=turn)
    reply = await model.chat(request)
    if reply.status in ("unreachable", "timeout") or (reply.http_status or 0) in (401, 403):
        # nothing learnt about what the model can do: not a choice to keep for the run
        provider = model.provider
        where = reply.base_url or ", ".join(provider.base_urls)
        if reply.http_status in (401, 403):
            key = (f"the key in ${provider.api_key_env} (api_key_env)" if provider.api_key_env
                   else "the key: this provider sends none (set api_key_env)")
            remedy = f"check {key}"
        else:
            remedy = "start the server or correct base_urls"
        raise InputError(f"llm.providers: {provider.name}: output: auto could not probe "
                         f"{where}: {model.redact(reply.error)}; {remedy}, or set output: "
                         "tools | json_schema | text")
    why_not = _usable(reply.status, reply.message, reply.error, tool_call=True)
    if not why_not:
        return "tools", "a tool call came back and parsed"
    schema = {"anyOf": [b for b in action_schema("twitter", [], [])["anyOf"]
                        if b["properties"]["action"]["const"] in ("post", "do_nothing")]}
    request = ChatRequest(messages=messages, temperature=0.0, seed=0, meta=turn,
                          response_format=response_format(schema))
    reply = await model.chat(request)
    also_not = _usable(reply.status, reply.message, reply.error)
    if not also_not:
        return "json_schema", f"tools did not work ({why_not}); a schema-constrained " \
                              "answer parsed"
    return "text", f"tools did not work ({why_not}); nor did json_schema ({also_not})"


def resolve(providers: list[ProviderConfig], urls: dict[str, list[str]],
            known: dict[str, str], cache: CacheSpec | None = None, seed: int = 0
            ) -> dict[str, str]:
    """`known` with the mode of every `output: auto` provider not in it yet, probed (a run
    keeps what it found at its start: resume and forks use the same). The probe's
    requests go through the run's response cache when it has one, so a replay meets the
    answers its recording got."""
    found = dict(known)
    for provider in providers:
        if provider.output != "auto" or provider.name in found or provider.name not in urls:
            continue
        model: ChatModel = chat_model(provider, urls[provider.name], 1, seed=seed)
        if cache is not None:
            model = CachedChat(model, ResponseCache(cache, "probe"))
        sync = SyncChat(model)
        try:
            mode, why = sync.run(probe(model), 2 * provider.timeout_s *
                                 (provider.max_retries + 1) + 60)
        finally:
            sync.close()
            if isinstance(model, CachedChat):
                model.cache.close()
        print(f"llm: provider {provider.name}: output {mode} ({why})", file=sys.stderr)
        found[provider.name] = mode
    return found


def added_text(mode: str, platform: str, topics: list[str], languages: Iterable[str] = ("en",)
               ) -> str:
    """What a request in `mode` adds to an agent's context on `platform`, as text (for
    counting), in the longest of `languages`: the tools as JSON, else the JSON
    instructions. (A response format's schema is not prompt text: llama.cpp, vLLM and
    SGLang turn it into a grammar for decoding.)"""
    texts = [request_text(tools(platform, topics, lang), "") if mode == "tools"
             else json_instructions(platform, topics, lang) for lang in sorted(set(languages))]
    return max(texts, key=count)


def count_tokens(providers: list[ProviderConfig], urls: dict[str, list[str]],
                 outputs: dict[str, str], known: dict[str, ModelTokens], texts: list[str],
                 platforms: list[str], topics: list[str], cache: CacheSpec | None = None,
                 languages: Iterable[str] = ("en",)) -> dict[str, ModelTokens]:
    """`known` with how every other provider's model counts
    (shoal.memory.model_tokens), measured on `texts` (samples of the run's own text) and
    on what its requests add in the run's `languages`. With a response cache, what was
    measured is kept beside the answers, and a replay counts as its recording did (it has
    no server to ask)."""
    found = dict(known)
    kept = kept_tokens(cache)
    for p in providers:
        if p.name in found:
            continue
        if cache is not None and cache.mode == "replay" and p.name in kept:
            found[p.name] = kept[p.name]
            continue
        mode = outputs.get(p.name, "tools") if p.output == "auto" else p.output
        base = next((u for u in urls.get(p.name, []) if u != LOOPBACK), None)
        found[p.name] = measure(p, base, texts, {pl: added_text(mode, pl, topics, languages)
                                                 for pl in platforms})
    return found


MIN_CONTEXT = 200  # cl100k tokens a context needs at the least (the budget's own minimum)


def check_budget(budget: int, found: dict[str, ModelTokens]) -> None:
    """InputError when `memory.context.budget_tokens` leaves a provider's requests less
    than `MIN_CONTEXT` tokens of context once what they add is counted."""
    for name, m in found.items():
        if m.budget(budget) < MIN_CONTEXT:
            need = math.ceil(MIN_CONTEXT * m.ratio) + max(m.overhead.values(), default=0)
            raise InputError(
                f"memory.context.budget_tokens: {budget} leaves no room for the context: "
                f"requests to provider {name} add {max(m.overhead.values(), default=0)} "
                f"tokens (tool definitions or instructions, the chat template; counted by "
                f"{m.counter}); the budget covers the whole request, so raise it to at "
                f"least {need}")


def keep_tokens(cache: CacheSpec | None, found: dict[str, ModelTokens] | None) -> None:
    """Keep the run's token measures in its response cache's folder, beside the answers a
    replay will read (once the run's directory exists)."""
    if cache is None or cache.mode == "replay" or cache.write_dir is None or not found:
        return
    cache.write_dir.mkdir(parents=True, exist_ok=True)
    kept = kept_tokens(cache)
    write_text(cache.write_dir / TOKENS_FILE, json.dumps(
        {**{k: v.to_dict() for k, v in kept.items()},
         **{k: v.to_dict() for k, v in found.items()}}, indent=1, sort_keys=True))


TOKENS_FILE = "model_tokens.json"  # in a response cache's folder: how its models counted


def kept_tokens(cache: CacheSpec | None) -> dict[str, ModelTokens]:
    """The token measures kept in a response cache's folders (its own first)."""
    if cache is None:
        return {}
    out: dict[str, ModelTokens] = {}
    for folder in reversed([d for d in (cache.write_dir, *cache.read_dirs) if d is not None]):
        path = folder / TOKENS_FILE
        try:
            data = json.loads(path.read_text()) if path.is_file() else {}
            out.update({k: ModelTokens.from_dict(v) for k, v in data.items()})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"{path}: not a token measure Shoal wrote ({exc})") from exc
    return out


def _probe_tools() -> list[dict]:
    return [t for t in tools("twitter", []) if t["function"]["name"] in ("post", "do_nothing")]


def _usable(status: str, message: dict | None, error: str, tool_call: bool = False) -> str:
    """'' when a reply holds a `post` or `do_nothing` action (as a tool call, if
    `tool_call`), else what was wrong."""
    if status != "ok" or message is None:
        return f"{status}: {error}"[:200]
    if tool_call and not message.get("tool_calls"):
        return "the answer was text, not a tool call"
    parsed, why = parse_reply(message)
    if parsed is None:
        return why
    if parsed.name not in ("post", "do_nothing"):
        return f"answered with an unknown action {parsed.name!r}"
    if parsed.name == "post" and not str(parsed.args.get("text", "")).strip():
        return "a post without text"
    return ""

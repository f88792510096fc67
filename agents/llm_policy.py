"""LLM decisions for a shard's LLM agents, with every failure survived and recorded.

Each LLM agent acting on a platform makes one call (the driver assembled its system text
and observation); the reply is parsed tolerantly and validated against the agent's feed
and the accounts that exist; an invalid reply gets one repair retry that says what was
wrong; after that the configured fallback applies (the agent's rule-based decision, or
doing nothing) and the reason is recorded. Calls run concurrently under the shard's share
of each provider's concurrency limit; when the round deadline passes, stragglers are
cancelled and fall back. Every call, its tokens per section, latency, retries, status and
cost becomes a row of the `llm_calls` table.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field, replace

import numpy as np

from shoal.agents.actions import ActionBatch
from shoal.agents.llm_output import action_schema
from shoal.agents.llm_tools import (
    WRITES,
    Parsed,
    Valid,
    json_instructions,
    parse_reply,
    platform_actions,
    tools,
    validate,
)
from shoal.agents.observation import PlatformView, Prompt
from shoal.beliefs.stance import estimate_stance
from shoal.config import Config
from shoal.core.errors import InputError
from shoal.core.loop_thread import cancel_all
from shoal.core.registry import PluginError, calling, from_shoal
from shoal.core.vocabulary import SOURCE, STANCE_METHOD, ActionType
from shoal.llm.cache import CacheCorrupt, CachedChat, CacheMiss, ResponseCache
from shoal.llm.chat import (
    Attempt,
    ChatModel,
    ChatReply,
    ChatRequest,
    call_rows,
    chat_model,
    response_format,
)
from shoal.llm.metadata import TURN, meta
from shoal.memory.model_tokens import ModelTokens


@dataclass
class Turn:
    """One LLM agent's turn on one platform: its `llm_calls` rows so far (one per HTTP
    request, recorded as each ends, so a turn cut off by the deadline keeps them), and
    how it ended."""

    row: int  # row in the view
    valid: Valid | None = None
    reason: str = ""  # why it fell back ("" if it did not)
    calls: list[dict] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)  # of the call in flight
    n_calls: int = 0  # logical calls made (the first, a retry without tools, a repair)


class LLMPolicy:
    """Decides for the LLM agents of one shard."""

    def __init__(self, cfg: Config, usernames: list[str], n_shards: int,
                 base_urls: dict[str, list[str]], cache: ResponseCache | None = None,
                 outputs: dict[str, str] | None = None):
        assert cfg.llm is not None
        self.cfg = cfg
        self.llm = cfg.llm
        self.topics = [t.name for t in cfg.topics]
        self.topic_specs = cfg.topics
        self.usernames = {u: i for i, u in enumerate(usernames)}
        self.markets = {m.id: m.outcome_names() for _, p in cfg.platforms.items()
                        for m in getattr(p, "markets", ())}  # what trades may name
        self._tool_defs: dict[tuple[str, str], list[dict]] = {}
        self.json_only: set[str] = set()  # providers that refused tools: JSON in text
        self.outputs = dict(outputs or {})  # `output: auto` as the run resolved it
        self.model_tokens: dict[str, ModelTokens] = {}  # how each model counts (the run's)
        self.cache = cache
        self.clients: dict[str, ChatModel] = {}
        for p in self.llm.providers:
            model = chat_model(p, base_urls.get(p.name, p.base_urls),
                               math.ceil(p.concurrency / n_shards), seed=cfg.seed,
                               shards=n_shards)
            self.clients[p.name] = CachedChat(model, cache) if cache is not None else model

    def _tools(self, platform: str, language: str) -> list[dict]:
        """The platform's tool definitions in `language` (built once; they never change
        in a run)."""
        key = (platform, language)
        if key not in self._tool_defs:
            self._tool_defs[key] = tools(platform, self.topics, language)
        return self._tool_defs[key]

    def mode(self, provider: str) -> str:
        """The output mode this provider's turns use now: its config's, `auto` as the run
        resolved it, `text` once the server refused tools or a schema."""
        if provider in self.json_only:
            return "text"
        output = self.llm.provider(provider).output
        return self.outputs.get(provider, "tools") if output == "auto" else output

    def _request(self, prompt: Prompt, platform: str, agent: int, round_: int,
                 feed: set[int]) -> ChatRequest:
        mode = self.mode(prompt.provider)
        language = (prompt.meta or {}).get("language", "en")
        user = prompt.observation
        tools_ = fmt = None
        if mode == "tools":
            tools_ = self._tools(platform, language)
        else:
            user = f"{user}\n\n{json_instructions(platform, self.topics, language)}"
        turn = self._meta(prompt, platform, agent, round_)
        if mode == "json_schema":
            accounts = [str(p["author"]) for p in (prompt.meta or {}).get("feed", [])
                        if p.get("author") in self.usernames
                        and self.usernames[p["author"]] != agent]
            fmt = response_format(action_schema(platform, sorted(feed), accounts,
                                                turn.get("markets") or {}))
        return ChatRequest(
            messages=[{"role": "system", "content": prompt.system},
                      {"role": "user", "content": user}],
            tools=tools_, tool_choice="auto" if tools_ else None,
            seed=(self.cfg.seed * 1_000_003 + round_ * 7919 + agent) % 2**31,
            meta=turn, response_format=fmt)

    def _meta(self, prompt: Prompt, platform: str, agent: int, round_: int) -> dict:
        """The turn as data (the `shoal` field): who acts, where, what it may do, and what
        its prompt shows (the posts of its feed, the markets and their outcomes)."""
        shown = prompt.meta or {}
        return meta(TURN, agent=agent, username=shown.get("username"), round=round_,
                    platform=platform, actions=platform_actions(platform),
                    topics=self.topics, feed=shown.get("feed", []),
                    markets={m: self.markets[m] for m in shown.get("markets", [])
                             if m in self.markets},
                    **({"language": shown["language"]} if "language" in shown else {}))

    def _record(self, turn: Turn, view: PlatformView, round_: int, mode: str) -> None:
        """The rows of the call in flight (its requests so far) into the turn's rows,
        each with the output `mode` it asked in."""
        prompt = view.prompts[turn.row]
        sent = sum(v for k, v in prompt.section_tokens.items() if k in ("system", "observation"))
        counting = self.model_tokens.get(prompt.provider)
        if counting is not None:  # in the model's tokens, with what the request adds
            sent = counting.prompt(sent, view.name)
        turn.calls += call_rows(turn.attempts, self.llm.provider(prompt.provider),
                                round_=round_, agent=int(view.agents[turn.row]),
                                platform=view.name, call=turn.n_calls,
                                section_tokens=prompt.section_tokens,
                                estimated_prompt_tokens=sent,
                                reused_tokens=prompt.reused_tokens, output=mode)
        turn.attempts = []

    async def _turn(self, view: PlatformView, turn: Turn, round_: int) -> Turn:
        row = turn.row
        prompt = view.prompts[row]
        agent = int(view.agents[row])
        feed = {int(p) for p in view.feed[row] if p >= 0}
        client = self.clients[prompt.provider]
        request = self._request(prompt, view.name, agent, round_, feed)
        calls = turn.calls
        why = ""
        repaired = False
        while True:  # the call, once more without tools if they are refused, one repair
            turn.n_calls += 1
            model = getattr(client, "inner", client)  # (the model itself, under its cache)
            what = f"chat model {type(model).__name__} of provider {prompt.provider!r}"
            try:
                with calling(what, model, round_):
                    result = await client.chat(request, agent, turn.attempts)
            except CacheMiss as miss:
                raise _named(miss, agent, round_, view.name, turn.n_calls) from None
            if not from_shoal(model) and (not isinstance(result, ChatReply)
                                          or not turn.attempts):
                raise PluginError(f"round {round_}: the {what} "
                                  + (f"returned {type(result).__name__}, not a ChatReply"
                                     if not isinstance(result, ChatReply) else
                                     "recorded no attempt (chat() must append each request "
                                     "it made to `attempts`)"))
            self._record(turn, view, round_, _mode(request))
            if result.status != "ok":
                refused = refusal(request, result)
                if refused:
                    # A server without tool support (vLLM without a tool parser, Ollama
                    # models without tools, llama.cpp without --jinja) or without
                    # constrained decoding: JSON in text from now on, for this provider,
                    # for the rest of the run.
                    self.json_only.add(prompt.provider)
                    calls[-1]["outcome"] = refused
                    request = self._request(prompt, view.name, agent, round_, feed)
                    continue
                turn.reason = result.status
                return turn
            parsed, why = parse_reply(result.message)
            valid = None
            if parsed is not None:
                valid, why = validate(parsed, view.name, feed, self.usernames, agent,
                                      self.topics, self.markets)
            if valid is not None:
                calls[-1]["outcome"] = parsed.name
                turn.valid = valid
                return turn
            calls[-1]["outcome"] = "invalid"
            calls[-1]["error"] = why
            if repaired:
                turn.reason = f"invalid: {why}"
                return turn
            repaired = True
            request = replace(request, messages=[
                *request.messages, _echo(result.message, parsed),
                {"role": "user", "content": f"That was not a possible action: {why}. Reply "
                                            "again with exactly one action."}])

    async def decide(self, view: PlatformView, rule: ActionBatch, round_: int
                     ) -> tuple[ActionBatch, list[dict]]:
        """Replace the rule rows of this view's LLM agents with their LLM decisions (or
        their fallbacks). `rule` is the rule-based batch of the same view."""
        rows = [i for i, p in enumerate(view.prompts or []) if p is not None]
        if not rows:
            return rule, []
        turns = {i: Turn(i) for i in rows}
        tasks = [asyncio.ensure_future(self._turn(view, turns[i], round_)) for i in rows]
        try:
            done, pending = await asyncio.wait(tasks, timeout=self.llm.round_deadline_s)
        except BaseException:  # the round itself was cancelled (Ctrl-C): so are its calls,
            await cancel_all(tasks)  # and they end here, not destroyed pending with the loop
            raise
        await cancel_all(pending)  # stragglers: cancelled, they fall back
        # a replay's miss, a cache that cannot write: the run stops (every task's error
        # is taken, so none is reported later as never retrieved)
        failed = {t: t.exception() for t in tasks if t in done}
        stopped = [e for e in failed.values() if isinstance(e, InputError)]
        if stopped:
            raise stopped[0]
        for task, turn in zip(tasks, turns.values(), strict=True):
            if (error := failed.get(task)) is not None and not turn.reason:
                # (an error of Shoal's own: the agent falls back, and the reason says why)
                turn.reason = f"error: {type(error).__name__}: {error}"[:300]
        for turn in turns.values():
            mode = self.mode(view.prompts[turn.row].provider)
            if turn.attempts:  # cut off with a request in flight: its rows all the same
                self._record(turn, view, round_, mode)
            if turn.valid is None and not turn.reason:
                turn.reason = "deadline"
            if not turn.calls:  # cut off before a request went out: one row says so
                turn.n_calls = 1
                turn.attempts = [Attempt("", "not_sent", error="the round deadline passed "
                                         "before the request was sent")]
                self._record(turn, view, round_, mode)
                turn.calls[-1]["prompt_tokens"] = turn.calls[-1]["cost_usd"] = 0
        return self._merge(view, rule, [turns[i] for i in rows])

    def _merge(self, view: PlatformView, rule: ActionBatch, turns: list[Turn]
               ) -> tuple[ActionBatch, list[dict]]:
        n_topics = len(self.topics)
        llm_agents = {int(view.agents[t.row]) for t in turns}
        keep = np.array([int(a) not in llm_agents for a in rule.agent], dtype=bool)
        base = rule.take(np.nonzero(keep)[0])
        base.meta = {"source": np.zeros(len(base), np.int8),
                     "stance_method": np.zeros(len(base), np.int8)}
        rows, calls = [], []
        for turn in turns:
            agent = int(view.agents[turn.row])
            if turn.valid is not None:
                rows.append(self._row(turn.valid, agent, view))
                outcome = "llm"
            elif self.llm.fallback == "rule":
                mine = np.nonzero((rule.agent == agent) & (rule.slot == 0))[0]
                fallback = rule.take(mine)
                fallback.meta = {"source": np.full(len(mine), SOURCE["fallback_rule"], np.int8),
                                 "stance_method": np.zeros(len(mine), np.int8)}
                rows.append(fallback)
                outcome = "fallback_rule"
            else:
                rows.append(self._row(Valid(ActionType.DO_NOTHING), agent, view,
                                      source="fallback_nothing"))
                outcome = "fallback_nothing"
            for c in turn.calls:
                c["fallback_reason"] = turn.reason
            turn.calls[-1]["outcome"] = turn.calls[-1]["outcome"] or outcome
            calls += turn.calls
        return ActionBatch.concat([base, *rows], n_topics), calls

    def _row(self, v: Valid, agent: int, view: PlatformView, source: str = "llm"
             ) -> ActionBatch:
        stance = np.full((1, len(self.topics)), np.nan)
        method = "data"
        name = v.action.name.lower()
        if name in WRITES:
            if v.stance:
                for topic, value in v.stance.items():
                    stance[0, self.topics.index(topic)] = value
                method = "self_report"
            else:
                stance[0], method = estimate_stance(v.text, self.topic_specs)
        if v.action == ActionType.REPOST:
            method = "data"  # the engine copies the root's stance
        trade = {"market": np.array([v.market], np.int16),
                 "outcome": np.array([v.outcome], np.int8),
                 "amount": np.array([v.amount], np.float64)} if v.market >= 0 else {}
        return ActionBatch(
            agent=np.array([agent], np.int32), platform=np.array([view.platform], np.int8),
            action=np.array([int(v.action)], np.int8),
            target_post=np.array([v.post_id], np.int64),
            target_agent=np.array([v.target_agent], np.int32), stance=stance, text=[v.text],
            slot=np.zeros(1, np.int8),
            meta={"source": np.array([SOURCE[source]], np.int8),
                  "stance_method": np.array([STANCE_METHOD[method]], np.int8), **trade})

    async def close(self) -> None:
        """Close every client (and the response cache's writer)."""
        for client in self.clients.values():
            await client.close()
        if self.cache is not None:
            self.cache.close()


def _named(miss: CacheMiss, agent: int, round_: int, platform: str, call: int) -> CacheMiss:
    """A replay's miss, said with the request it is about."""
    if isinstance(miss, CacheCorrupt):  # an answer found but not trusted
        return miss.named(agent, round_, platform, call)
    looked = ", ".join(str(p) for p in miss.searched) or "no folder (an in-memory run)"
    return CacheMiss(f"llm.cache: replay, and the cache has no answer for agent {agent}'s "
                     f"request in round {round_} ({platform}, call {call}; request key "
                     f"{miss.key[:12]}); looked in {looked}. Record the answers first "
                     "(llm.cache: record or auto), or point llm.cache_dir at the llm_cache "
                     "folder of the run that recorded them", miss.key, miss.searched)


def tools_refused(result: ChatReply) -> bool:
    """Did the server reject the request because of its tools (HTTP 400/422/500 whose
    error names them)?"""
    return result.http_status in (400, 422, 500) and "tool" in result.error.lower()


_SCHEMA_WORDS = ("response_format", "json_schema", "schema", "grammar")


def refusal(request: ChatRequest, result: ChatReply) -> str:
    """'tools_refused' or 'schema_refused' when the server rejected what the request asked
    the answer to be (its tools, its response format), else ''."""
    if request.tools and tools_refused(result):
        return "tools_refused"
    if (request.response_format and result.http_status in (400, 422, 500)
            and any(w in result.error.lower() for w in _SCHEMA_WORDS)):
        return "schema_refused"
    return ""


def _mode(request: ChatRequest) -> str:
    """The output mode a request asks in."""
    return "tools" if request.tools else "json_schema" if request.response_format else "text"


def _echo(message: dict | None, parsed: Parsed | None) -> dict:
    """The model's invalid answer, as the assistant turn of the repair conversation (as
    plain text: some servers reject a tool call without its tool result)."""
    if message and message.get("content"):
        return {"role": "assistant", "content": message["content"]}
    if parsed is not None:
        return {"role": "assistant", "content": json.dumps({"action": parsed.name,
                                                            **parsed.args})}
    return {"role": "assistant", "content": "(no answer)"}

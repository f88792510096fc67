"""`shoal interview`: ask agents a question, each as it was at the end of a round.

Everything comes from the run directory: the world at the end of round R is restored from
its checkpoint (persona, beliefs, trust, round memory, digest, graph memory, the events
running), each agent's system text is assembled with the run's own context settings, and
the question is the user message. Only the answers need an LLM: the run's provider for
each agent (its `loopback` server is started again if the run used one), or any endpoint
given on the command line. The process that ran the simulation need not exist any more.

Many agents are asked at once (the provider's concurrency, an optional deadline for the
whole batch, and a `stop` that ends it early); every answer is kept in the run's
`interviews` table with the hash of the exact context it was asked in, its tokens and its
cost. A selector given as text (`--agents`) is checked against the population before
its id ranges are expanded, so `0-100000000` is an error naming the population's size,
not a list of a hundred million ids.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from shoal.config import Config
from shoal.config.llm import ProviderConfig
from shoal.config.selector import Selector, parse_selector
from shoal.core.counter_rng import CounterRNG
from shoal.core.errors import InputError
from shoal.core.faults import crash_point
from shoal.engine.agent_context import context_for
from shoal.llm.chat import Attempt, ChatReply, ChatRequest, chat_model, cost
from shoal.llm.endpoints import Endpoints
from shoal.llm.metadata import INTERVIEW, meta
from shoal.memory.context import Assembled
from shoal.memory.tokens import count
from shoal.runs.simulation import world_at
from shoal.store.lineage import being_written
from shoal.store.run_dir import RunDir, open_run_dir
from shoal.store.traces import AnalysisStore
from shoal.world.selection import select

_SAMPLE = 0x1E7E  # the stream of a selector's fraction, for interviews


@dataclass
class Interview:
    """A question, the context it was asked in, and the answer."""

    agent: int
    round: int
    question: str
    context: Assembled
    provider: str
    model: str
    answer: str
    status: str  # the call's status: ok, timeout, http_error, ..., deadline, stopped
    error: str


@dataclass
class InterviewBatch:
    """The answers of one batch (`rows`: one per agent, as stored in `interviews`)."""

    batch_id: str
    round: int
    question: str
    interviews: list[Interview]
    rows: pd.DataFrame
    stored: bool  # False when the run was being written (nothing could be saved)
    seconds: float


class NoProvider(InputError):
    """Nothing to ask: the run has no LLM providers and no endpoint was given."""


def provider_for(cfg: Config, name: str | None, base_url: str | None, model: str | None,
                 api_key_env: str | None, label: str = "interview") -> ProviderConfig:
    """The endpoint to ask: the command line's (a provider called `label`), else the run's
    provider `name` (default: the LLM agents' provider)."""
    if base_url:
        if not model and cfg.llm is None:
            raise InputError("--model is needed with --base-url (the run has no LLM config)")
        fallback = cfg.llm.providers[0] if cfg.llm else None
        try:
            return ProviderConfig(name=label, base_urls=[base_url],
                                  model=model or fallback.model,
                                  api_key_env=api_key_env or (fallback and fallback.api_key_env))
        except ValidationError as exc:
            raise InputError(_flag_problems(exc)) from None
    if cfg.llm is None:
        raise NoProvider("the run has no LLM providers: pass --base-url and --model (for a "
                         "dry run, --base-url loopback)")
    provider = cfg.llm.provider(name or cfg.llm.agents.provider)
    changes = {k: v for k, v in (("model", model), ("api_key_env", api_key_env)) if v}
    if not changes:
        return provider
    try:  # validated as the config is (a key given as --model is refused, not sent)
        return type(provider).model_validate({**provider.model_dump(), **changes})
    except ValidationError as exc:
        raise InputError(_flag_problems(exc)) from None


def _flag_problems(exc: ValidationError) -> str:
    """A provider's refusal said by the flags that set its fields (--base-url, --model,
    --api-key-env); the values are never shown."""
    said = []
    for e in exc.errors():
        text = e["msg"].removeprefix("Value error, ")
        flag = str(e["loc"][0]).replace("_", "-").rstrip("s") if e["loc"] else ""
        said.append(f"--{flag}: {text}" if flag else text)
    return "; ".join(said)


def context_hash(context: Assembled) -> str:
    """The hash of the exact text an agent was asked in."""
    return hashlib.sha256(context.system.encode("utf-8")).hexdigest()[:16]


def interview_agents(run: str, agents: Selector | list[int] | str, question: str,
                     round_: int | None = None, base_url: str | None = None,
                     model: str | None = None, api_key_env: str | None = None,
                     concurrency: int | None = None, deadline_s: float | None = None,
                     batch_id: str | None = None, store: AnalysisStore | None = None,
                     stop: Callable[[], bool] | None = None) -> InterviewBatch:
    """Ask the agents `agents` picks (a selector, its `--agents` text, or ids) of `run` a
    question, each as it was at the end of `round_` (default: the last checkpointed
    round); keep the answers (through `store` when the caller holds the run's file open).
    The batch ends at `deadline_s`, or when `stop()` turns true (checked every 0.1 s)."""
    started = time.perf_counter()
    if not question.strip():
        raise InputError("the question is empty")
    text = agents if isinstance(agents, str) else None
    if text is not None:  # its syntax now; id ranges once the population is known
        agents = None if _id_ranges(text) else parse_selector(text)
    run_dir = open_run_dir(run)
    world = _world(run_dir, round_)
    if agents is None:
        _check_ranges(text, world.n_agents)
        agents = parse_selector(text)
    ids = _agent_ids(world, agents)
    providers = world.llm_providers()
    chosen = {a: provider_for(world.cfg, providers.get(a), base_url, model, api_key_env)
              for a in ids}
    world.memory.boundary(world.round + 1)  # what the agents remember after round R
    contexts = {a: context_for(world, a, world.round + 1).assembled for a in ids}
    world.memory.close()
    replies = ask_all(chosen, contexts, question, world.cfg.seed, concurrency, deadline_s,
                      stop)
    batch_id = batch_id or f"iv-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    interviews, rows = [], []
    asked_at = datetime.now()
    for a in ids:
        p, reply, context = chosen[a], replies[a], contexts[a]
        answer, status, error = answer_of(reply)
        prompt = (reply.prompt_tokens if reply.prompt_tokens is not None
                  else context.tokens["system"] + count(question))
        completion = reply.completion_tokens or 0
        interviews.append(Interview(a, world.round, question, context, p.name, p.model,
                                    answer, status, error))
        rows.append({"batch_id": batch_id, "asked_at": asked_at, "round": world.round,
                     "agent": a, "question": question, "answer": answer, "status": status,
                     "error": error, "context_hash": context_hash(context),
                     "context_tokens": context.tokens["system"], "provider": p.name,
                     "model": p.model, "prompt_tokens": int(prompt),
                     "completion_tokens": int(completion),
                     "cost_usd": cost(p, int(prompt), int(completion)) if reply.attempts
                     else 0.0, "latency_ms": reply.latency_ms})
    stored = store is not None or not being_written(run_dir)
    crash_point("asking", 0)  # (the batch is stored in one transaction, or not at all)
    if stored:
        (store or AnalysisStore(run_dir.db)).insert("interviews", rows)
    return InterviewBatch(batch_id, world.round, question, interviews, pd.DataFrame(rows),
                          stored, time.perf_counter() - started)


def interview(run: str, agent: int, question: str, round_: int | None = None,
              base_url: str | None = None, model: str | None = None,
              api_key_env: str | None = None) -> Interview:
    """Ask `agent` of `run`, as it was at the end of `round_`, a question."""
    return interview_agents(run, [agent], question, round_, base_url, model,
                            api_key_env).interviews[0]


def _world(run_dir: RunDir, round_: int | None):
    kept = run_dir.checkpoints.available()
    if not kept:
        raise InputError(f"{run_dir.run_id}: the run has no checkpoint yet")
    return world_at(run_dir, kept[-1] if round_ is None else round_, "--round")


def _id_ranges(text: str) -> list[tuple[int, int]]:
    """The id ranges of an `--agents` text of ids and ranges (`0-199,250`), as
    `parse_selector` reads them; [] for any other selector."""
    from shoal.config.selector import id_ranges

    return id_ranges(text) or []


def _check_ranges(text: str, n: int) -> None:
    """Every id of an `--agents` text inside the population (before ranges expand)."""
    top = max(hi for _, hi in _id_ranges(text))
    if top >= n:
        raise InputError(f"--agents.ids: no agent {top} (the population has {n} agents, "
                         f"ids 0..{n - 1})")


def _agent_ids(world, agents: Selector | list[int]) -> list[int]:
    """The ids asked, in order (a selector resolved against the population, alive
    agents only)."""
    n = world.n_agents
    if isinstance(agents, Selector):
        mask = select(agents, world.population,
                      lambda: CounterRNG(world.cfg.seed).generator(_SAMPLE), "--agents")
        ids = np.flatnonzero(mask & world.alive).tolist()
        if not ids:
            raise InputError("--agents: the selector picks no agent")
        return ids
    bad = [a for a in agents if not 0 <= a < n]
    if bad:
        raise InputError(f"--agent {bad[0]}: no such agent (agents 0..{n - 1})")
    return list(dict.fromkeys(agents))


def asked(agent: int, context: Assembled, kind: str = INTERVIEW, **fields: Any
          ) -> dict[str, Any]:
    """The `shoal` field of a question to `agent` in `context` (shoal.llm.metadata): who
    is asked, in which round, and the beliefs its system text states; `fields` add what
    the question is (a survey's items)."""
    shown = context.meta
    # (an agent not speaking English says its language; English requests are unchanged)
    language = {"language": shown["language"]} if "language" in shown else {}
    return meta(kind, agent=agent, round=shown.get("round"), name=shown.get("name"),
                beliefs=shown.get("beliefs", []), **language, **fields)


def ask_all(providers: dict[int, ProviderConfig], contexts: dict[int, Assembled],
            question: str | dict[int, str], seed: int, concurrency: int | None,
            deadline_s: float | None, stop: Callable[[], bool] | None = None,
            about: Callable[[int, Assembled], dict[str, Any]] = asked,
            formats: dict[int, dict[str, Any]] | None = None
            ) -> dict[int, ChatReply]:
    """Every agent's reply; calls not answered by the deadline are `deadline` replies,
    those cut short by `stop()` are `stopped` replies. `question`: one for everyone, or
    each agent's own (a survey in the agent's language). `about(agent, context)`: the
    request's `shoal` field (default: an interview's). `formats`: the `response_format`
    of an agent's request, where the answer must match a schema."""
    endpoints = Endpoints(seed)

    async def run_all() -> dict[int, ChatReply]:
        models = {}
        for p in {p.name: p for p in providers.values()}.values():
            models[p.name] = chat_model(p, endpoints.urls(p), concurrency=concurrency,
                                        seed=seed)
        attempts: dict[int, list[Attempt]] = {a: [] for a in providers}
        tasks = {a: asyncio.create_task(models[providers[a].name].chat(
            ChatRequest(messages=[{"role": "system", "content": contexts[a].system},
                                  {"role": "user", "content": question if isinstance(
                                      question, str) else question[a]}],
                        meta=about(a, contexts[a]),
                        response_format=(formats or {}).get(a)), a, attempts[a]))
            for a in providers}
        try:
            stopped = await _wait(set(tasks.values()), deadline_s, stop)
            out = {}
            for a, task in tasks.items():
                if task.done() and not task.cancelled() and task.exception() is None:
                    out[a] = task.result()
                elif task.done() and not task.cancelled():  # it failed: not the deadline
                    exc = task.exception()
                    out[a] = ChatReply(None, "error", error=f"{type(exc).__name__}: {exc}",
                                       attempts=attempts[a])
                else:
                    task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            for a in tasks:  # cut by the deadline (or stopped): its requests were sent
                if a not in out and stopped:
                    out[a] = ChatReply(None, "stopped", error="the batch was stopped "
                                       "before this answer came", attempts=attempts[a])
                elif a not in out:
                    out[a] = ChatReply(None, "deadline", error="no answer before the "
                                       f"batch's deadline ({deadline_s:g} s)",
                                       attempts=attempts[a])
            return out
        finally:
            for m in models.values():
                await m.close()

    try:
        return asyncio.run(run_all())
    finally:
        endpoints.stop()


async def _wait(pending: set, deadline_s: float | None, stop: Callable[[], bool] | None
                ) -> bool:
    """Wait for the tasks until the deadline; whether `stop()` ended the wait first."""
    loop = asyncio.get_running_loop()
    end = None if deadline_s is None else loop.time() + deadline_s
    while pending:
        left = None if end is None else max(0.0, end - loop.time())
        if stop is not None:  # (looked at every 0.1 s)
            left = 0.1 if left is None else min(left, 0.1)
        _, pending = await asyncio.wait(pending, timeout=left)
        if stop is not None and stop():
            return True
        if end is not None and loop.time() >= end:
            break
    return False


def answer_of(reply: ChatReply) -> tuple[str, str, str]:
    """(answer, status, error) of a reply."""
    if reply.status != "ok":
        return "", reply.status, reply.error
    if not reply.text:
        return "", "empty", "the model returned no answer text"
    return reply.text, "ok", ""

"""`shoal interview`: ask an agent a question, as it was at the end of a round.

Everything comes from the run directory: the world at the end of round R is restored from
its checkpoint (persona, beliefs, trust, round memory, digest, the events running), the
agent's system text is assembled with the run's own context settings, and the question
is the user message. Only the answer needs an LLM: the run's provider for that agent (its
`loopback` server is started again if the run used one), or any endpoint given on the
command line. The process that ran the simulation need not exist any more.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pydantic import ValidationError

from memory.context import Assembled
from sim.config.llm import ProviderConfig
from sim.core.errors import InputError
from sim.engine.agent_context import context_for
from sim.llm.chat import ChatRequest, chat_model
from sim.llm.endpoints import Endpoints
from sim.runs.simulation import world_at
from sim.store.run_dir import open_run_dir


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
    status: str  # the call's status: ok, timeout, http_error, ...
    error: str


def interview_context(run: str, agent: int, round_: int | None) -> tuple[object, Assembled]:
    """The restored world at the end of `round_` (default: the last checkpointed round)
    and the agent's interview system text in it."""
    run_dir = open_run_dir(run)
    kept = run_dir.checkpoints.available()
    if not kept:
        raise InputError(f"{run}: the run has no checkpoint yet")
    round_ = kept[-1] if round_ is None else round_
    world = world_at(run_dir, round_, "--round")
    if not 0 <= agent < world.n_agents:
        raise InputError(f"--agent {agent}: no such agent (agents 0..{world.n_agents - 1})")
    world.memory.boundary(round_ + 1)  # what the agent remembers after round R
    context = context_for(world, agent, round_ + 1).assembled
    world.memory.close()
    return world, context


def interview_provider(world, agent: int, base_url: str | None, model: str | None,
                       api_key_env: str | None) -> ProviderConfig:
    """The endpoint to ask: the command line's, else the run's provider for the agent."""
    if base_url:
        if not model and world.cfg.llm is None:
            raise InputError("--model is needed with --base-url (the run has no LLM config)")
        fallback = world.cfg.llm.providers[0] if world.cfg.llm else None
        try:
            return ProviderConfig(name="interview", base_urls=[base_url],
                                  model=model or fallback.model,
                                  api_key_env=api_key_env or (fallback and fallback.api_key_env))
        except ValidationError as exc:
            problems = "; ".join(f"--{str(e['loc'][0]).replace('_', '-').rstrip('s')}: "
                                 f"{e['msg'].removeprefix('Value error, ')}"
                                 for e in exc.errors())
            raise InputError(problems) from None
    if world.cfg.llm is None:
        raise InputError("the run has no LLM providers: pass --base-url and --model (for a "
                         "dry run, --base-url loopback)")
    name = world.llm_providers().get(agent, world.cfg.llm.agents.provider)
    provider = world.cfg.llm.provider(name)
    if model:
        provider = provider.model_copy(update={"model": model})
    if api_key_env:
        provider = provider.model_copy(update={"api_key_env": api_key_env})
    return provider


def ask(provider: ProviderConfig, context: Assembled, question: str, seed: int
        ) -> tuple[str, str, str]:
    """One chat call (with the provider's retries): (answer, status, error)."""
    endpoints = Endpoints(seed)
    request = ChatRequest(messages=[{"role": "system", "content": context.system},
                                    {"role": "user", "content": question}])

    async def call():
        model = chat_model(provider, endpoints.urls(provider), concurrency=1, seed=seed)
        try:
            return await model.chat(request)
        finally:
            await model.close()

    try:
        reply = asyncio.run(call())
    finally:
        endpoints.stop()
    if reply.status != "ok":
        return "", reply.status, reply.error
    if not reply.text:
        return "", "empty", "the model returned no answer text"
    return reply.text, "ok", ""


def interview(run: str, agent: int, question: str, round_: int | None = None,
              base_url: str | None = None, model: str | None = None,
              api_key_env: str | None = None) -> Interview:
    """Ask `agent` of `run`, as it was at the end of `round_`, a question."""
    if not question.strip():
        raise InputError("the question is empty")
    world, context = interview_context(run, agent, round_)
    provider = interview_provider(world, agent, base_url, model, api_key_env)
    answer, status, error = ask(provider, context, question, world.cfg.seed)
    return Interview(agent, world.round, question, context, provider.name, provider.model,
                     answer, status, error)

"""`shoal estimate CONFIG`: the LLM calls, tokens and cost of a config, before any call.

The config is run dry, in memory: every agent decides by rule, and every
LLM agent's context is assembled exactly as in the real run (same budget, same sections)
and measured, but never sent. A call's prompt is that context plus the tool definitions
(or the JSON instructions) the provider would be sent, in the model's tokens as the run
would count them (shoal.memory.model_tokens: a tokenizer.json, or the server's tokenize endpoint
when the provider's base URL answers, else tiktoken with its margin). Completion tokens cannot be
measured without a model: they are given as a typical figure and as the `max_tokens`
ceiling. Repair retries and HTTP retries add calls on top; the real run's feeds also
differ from a rule-driven run's, so treat the numbers as the order of magnitude they are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd

from shoal.config import Config
from shoal.core.errors import InputError
from shoal.runs.simulation import Simulation

TYPICAL_COMPLETION = 60  # a tool call with a short post: ~40-90 tokens in practice


@dataclass
class ProviderEstimate:
    """Predicted use of one provider over the whole run."""

    provider: str
    model: str
    calls: int
    agents: int
    prompt_tokens: int
    prompt_p50: float
    prompt_max: int
    completion_typical: int  # calls × TYPICAL_COMPLETION
    completion_max: int  # calls × max_tokens
    cost_typical: float
    cost_max: float
    counter: str = "tiktoken"  # whose tokens: server | tokenizer.json | tiktoken (× margin)
    ratio: float = 1.0  # the model's tokens per cl100k token, as measured or assumed
    fallback: str = ""  # why the margin stands in for the server's count ("" if it does not)


@dataclass
class Estimate:
    """The prediction for a config, and how long the dry run took."""

    rounds: int
    providers: list[ProviderEstimate]
    seconds: float


def estimate(cfg: Config, completion_tokens: int = TYPICAL_COMPLETION) -> Estimate:
    """Dry-run `cfg` and predict its LLM calls, tokens and cost per provider."""
    if cfg.llm is None:
        raise InputError(f"{cfg.name}: the config has no `llm` section: no LLM calls to "
                         "estimate")
    start = time.perf_counter()
    dry = cfg.model_copy(deep=True)
    dry.checkpoints.keep_last = 1
    dry.executor.kind = "local"
    with Simulation.create(dry, out=None, dry_llm=True) as sim:
        sim.run()
        providers = sim.world.llm_providers()
        counting = dict(sim.world.model_tokens)  # the run's counter: the model's tokens
        turns = sim.reader().read("context", "section = 'total'")[
            ["platform", "agent", "tokens"]]
    turns = turns[turns["agent"].isin(list(providers))]
    turns["provider"] = turns["agent"].map(providers)
    out = []
    for p in cfg.llm.providers:
        mine = turns[turns["provider"] == p.name]
        model = counting[p.name]
        prompt = pd.Series([model.prompt(int(n), str(pl)) for n, pl in
                            zip(mine["tokens"], mine["platform"], strict=True)],
                           index=mine.index, dtype="int64")
        calls = len(mine)
        typical, ceiling = calls * completion_tokens, calls * p.max_tokens
        total = int(prompt.sum())

        def cost(completion: int, p=p, total=total) -> float:
            return (total * p.price_prompt_per_mtok
                    + completion * p.price_completion_per_mtok) / 1e6

        out.append(ProviderEstimate(
            p.name, p.model, calls, int(mine["agent"].nunique()), total,
            float(prompt.median()) if calls else 0.0, int(prompt.max()) if calls else 0,
            typical, ceiling, cost(typical), cost(ceiling), model.counter, model.ratio,
            model.fallback))
    return Estimate(cfg.rounds, out, time.perf_counter() - start)

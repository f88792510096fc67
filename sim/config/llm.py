"""The `llm:` section: the chat-model endpoints (providers), which agents use them, and
what happens when a call fails. A provider's `kind` names a registered chat model
(`sim.core.registry.CHAT_MODELS`; Shoal's own is `openai`, any OpenAI-compatible
endpoint), whose config model derives from `ProviderConfig`."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sim.config.base import Strict, part
from sim.config.selector import Selector
from sim.core.registry import CHAT_MODELS


class LoopbackConfig(Strict):
    """Latency and injected faults of the loopback server started for a provider whose
    `base_urls` is `[loopback]` (rates are per request; docs/llm.md)."""

    latency_ms: float = Field(default=0.0, ge=0)
    error_rate: float = Field(default=0.0, ge=0, le=1)
    timeout_rate: float = Field(default=0.0, ge=0, le=1)
    timeout_sleep_s: float = Field(default=30.0, gt=0)
    malformed_rate: float = Field(default=0.0, ge=0, le=1)
    rate_limit_rate: float = Field(default=0.0, ge=0, le=1)
    retry_after_s: float = Field(default=1.0, ge=0)
    empty_rate: float = Field(default=0.0, ge=0, le=1)
    burst_every_s: float = Field(default=0.0, ge=0)
    burst_length_s: float = Field(default=0.0, ge=0)
    reject_tools: bool = False  # 400 to requests with tools, like a model without them


class ProviderConfig(Strict):
    """An OpenAI-compatible chat-completions endpoint (vLLM, Ollama, llama.cpp, OpenAI,
    DeepSeek, OpenRouter, ...). `api_key_env` is the *name* of the environment variable
    holding the key; the key itself never appears in a config, a log or a run directory.
    `base_urls: [loopback]` starts Shoal's own loopback server for the run."""

    kind: Literal["openai"] = "openai"
    name: str = "default"
    base_urls: list[str] = Field(min_length=1)
    model: str
    api_key_env: str | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=10)
    concurrency: int = Field(default=64, ge=1)
    tools: Literal["native", "json"] = "native"
    temperature: float = Field(default=0.7, ge=0, le=2)
    max_tokens: int = Field(default=400, gt=0)
    price_prompt_per_mtok: float = Field(default=0.0, ge=0)
    price_completion_per_mtok: float = Field(default=0.0, ge=0)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    loopback: LoopbackConfig = Field(default_factory=LoopbackConfig)

    @field_validator("base_urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        for url in v:
            if url != "loopback" and not re.match(r"^https?://", url):
                raise ValueError(f"must be http(s) URLs or 'loopback', got {url!r}")
        return [u.rstrip("/") for u in v]

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v):
            raise ValueError("must be the NAME of an environment variable (e.g. "
                             "OPENAI_API_KEY), not the key itself")
        return v


class LLMAgentsConfig(Selector):
    """Which agents are LLM-driven (the rest stay rule-based): a selector (`ids`,
    `groups`, and/or a seeded `fraction` of those); `provider` by default, `by_group` a
    provider per group."""

    provider: str = "default"
    by_group: dict[str, str] = Field(default_factory=dict)


class LLMConfig(Strict):
    """LLM agents: providers, who uses them, and what happens when a call fails."""

    providers: list[part(CHAT_MODELS)] = Field(min_length=1)
    agents: LLMAgentsConfig = Field(default_factory=LLMAgentsConfig)
    fallback: Literal["rule", "nothing"] = "rule"
    round_deadline_s: float = Field(default=120.0, gt=0)
    summarizer_provider: str | None = None

    @model_validator(mode="after")
    def _names(self):
        names = [p.name for p in self.providers]
        if len(set(names)) != len(names):
            raise ValueError(f"provider names must be unique, got {names}")
        wanted = {self.agents.provider, *self.agents.by_group.values()}
        if self.summarizer_provider:
            wanted.add(self.summarizer_provider)
        missing = sorted(wanted - set(names))
        if missing:
            raise ValueError(f"unknown providers {missing}; providers are {names}")
        return self

    def provider(self, name: str) -> ProviderConfig:
        """The provider named `name`."""
        return next(p for p in self.providers if p.name == name)

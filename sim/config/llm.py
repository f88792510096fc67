"""The `llm:` section: the chat-model endpoints (providers), which agents use them, and
what happens when a call fails. A provider's `kind` names a registered chat model
(`sim.core.registry.CHAT_MODELS`; Shoal's own is `openai`, any OpenAI-compatible
endpoint), whose config model derives from `ProviderConfig`."""

from __future__ import annotations

import os
import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from sim.config.base import Strict, part
from sim.config.selector import Selector
from sim.core.errors import InputError
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


class EndpointConfig(Strict):
    """One base URL of a provider's pool with its own limits: requests and tokens per
    minute (prompt plus completion; unset: no limit), spread evenly over the shards. A
    bare URL is an endpoint without limits."""

    url: str
    rpm: float | None = Field(default=None, gt=0)
    tpm: float | None = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _bare_url(cls, data: Any) -> Any:
        return {"url": data} if isinstance(data, str) else data

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return check_urls([v])[0]


class BreakerConfig(Strict):
    """The circuit breaker of a provider's pool: an endpoint failing `failures` times in a
    row (5xx, timeouts, no connection) is taken out for `cooldown_s`, then probed with one
    request and put back if it answers. `failures: 0` turns it off."""

    failures: int = Field(default=5, ge=0)
    cooldown_s: float = Field(default=30.0, gt=0)


class ProviderConfig(Strict):
    """An OpenAI-compatible chat-completions endpoint (vLLM, Ollama, llama.cpp, OpenAI,
    DeepSeek, OpenRouter, ...). `api_key_env` is the *name* of the environment variable
    holding the key; the key itself never appears in a config, a log or a run directory.
    `base_urls: [loopback]` starts Shoal's own loopback server for the run. `endpoints`
    names the same URLs with per-endpoint limits (`base_urls` may then be left out)."""

    kind: Literal["openai"] = "openai"
    name: str = "default"
    base_urls: list[str] = Field(min_length=1)
    endpoints: list[EndpointConfig] = Field(default_factory=list)
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
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

    @model_validator(mode="before")
    @classmethod
    def _urls_of_endpoints(cls, data: Any) -> Any:
        # `endpoints` alone names the pool: its URLs are the base URLs.
        if isinstance(data, dict) and data.get("endpoints") and not data.get("base_urls"):
            eps = data["endpoints"]
            if isinstance(eps, list) and all(isinstance(e, dict | str) for e in eps):
                data = {**data, "base_urls": [e if isinstance(e, str) else e.get("url")
                                              for e in eps]}
        return data

    @field_validator("base_urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        return check_urls(v)

    @model_validator(mode="after")
    def _endpoints_match(self):
        if self.endpoints and [e.url for e in self.endpoints] != self.base_urls:
            raise ValueError("endpoints: must list the same URLs as base_urls, in the same "
                             "order (or leave base_urls out)")
        return self

    def limits(self, index: int) -> EndpointConfig | None:
        """The limits of the provider's `index`-th base URL (None: no limit)."""
        return self.endpoints[index] if index < len(self.endpoints) else None

    @field_validator("api_key_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and (not _ENV_NAME.match(v) or looks_like_a_key(v)):
            raise ValueError("must be the NAME of an environment variable (e.g. "
                             "OPENAI_API_KEY), not the key itself (the value is not shown)")
        return v

    @field_validator("extra_body")
    @classmethod
    def _no_secrets(cls, v: dict[str, Any]) -> dict[str, Any]:
        for path in secret_fields(v):
            raise ValueError(f"{path}: looks like a credential; keys come only from "
                             "api_key_env (the value is not shown)")
        return v


def check_urls(urls: list[str]) -> list[str]:
    """Base URLs without their trailing slash; ValueError for one that is not http(s) or
    'loopback', or carries credentials (which are never shown)."""
    for url in urls:
        if url == "loopback":
            continue
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            secret = "@" in url or _SECRET_QUERY.search(parts.query)
            shown = f", got {url!r}" if not secret else ""
            raise ValueError(f"must be http(s) URLs or 'loopback'{shown}")
        if parts.username or parts.password or _SECRET_QUERY.search(parts.query):
            raise ValueError("a base URL must not carry credentials (user:password@, "
                             "?key=...): give the key through api_key_env (the URL is "
                             "not shown)")
    return [u.rstrip("/") for u in urls]


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# (`token(?!s)`: max_tokens and the like are counts, not credentials)
_SECRET_NAME = re.compile(r"(api[_-]?key|secret|token(?!s)|password|passwd|authorization|^key$"
                          r"|^auth$|credential)", re.IGNORECASE)
_SECRET_QUERY = re.compile(r"(^|&)(api[_-]?key|key|token|secret|access[_-]?token)=",
                           re.IGNORECASE)
_KEY_PREFIXES = ("sk-", "sk_", "gsk_", "xai-", "hf_", "ghp_", "AIza", "pk_", "rk_")


def looks_like_a_key(name: str) -> bool:
    """Whether a supposed variable name is rather a secret: a known key prefix, or long,
    mixed-case or lowercase with digits (variable names are short and upper case)."""
    if name.startswith(_KEY_PREFIXES):
        return True
    return len(name) >= 24 and any(c.islower() for c in name) and any(c.isdigit()
                                                                     for c in name)


def shown_name(name: str) -> str:
    """A variable name for a message, or a placeholder when it might be a key."""
    return name if re.fullmatch(r"[A-Z][A-Z0-9_]{0,63}", name) else "(the name given)"


def is_secret_name(name: str) -> bool:
    """Whether a field name says it holds a credential (api_key, token, secret, ...)."""
    return bool(_SECRET_NAME.search(name))


def secret_fields(data: Any, path: str = "") -> list[str]:
    """Paths of fields of a mapping (nested) whose name says they hold a credential."""
    out = []
    if isinstance(data, dict):
        for key, value in data.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and _SECRET_NAME.search(key):
                out.append(here)
            out += secret_fields(value, here)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += secret_fields(value, f"{path}.{i}")
    return out


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
    cache: Literal["off", "record", "replay", "auto"] = "off"
    cache_dir: str | None = None  # a folder shared by runs (default: the run's llm_cache/)

    @field_validator("cache", mode="before")
    @classmethod
    def _cache_off(cls, v: Any) -> Any:
        return "off" if v is False else v  # YAML reads a bare `off` as false

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


def check_api_keys(cfg) -> None:
    """Every provider that names a key variable finds it set (InputError otherwise), so a
    missing key stops a run before it starts, not as 401s in round 1."""
    for i, p in enumerate(cfg.llm.providers if cfg.llm else []):
        if p.api_key_env and set(p.base_urls) != {"loopback"} and not os.environ.get(
                p.api_key_env):
            raise InputError(f"llm.providers.{i}.api_key_env: the environment variable "
                             f"{shown_name(p.api_key_env)} is not set; export it (the key "
                             "itself never goes in the config)")

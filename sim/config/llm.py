"""The `llm:` section: the chat-model endpoints (providers), which agents use them, and
what happens when a call fails. A provider's `kind` names a registered chat model
(`shoal.core.registry.CHAT_MODELS`; Shoal's own is `openai`, any OpenAI-compatible
endpoint), whose config model derives from `ProviderConfig`."""

from __future__ import annotations

import os
import re
from typing import Annotated, Any, Literal, Protocol, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from shoal.config.base import PartOf, Strict
from shoal.config.selector import Selector
from shoal.core.errors import InputError
from shoal.core.registry import CHAT_MODELS


def _no_key(value: str) -> str:
    """`value`, or ValueError (not showing it) when it holds something key-shaped
    (`holds_a_key`, below; defined here because the models' annotations name it)."""
    if holds_a_key(value):
        raise ValueError(_KEY_REFUSAL)
    return value


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
    reject_schema: bool = False  # 400 to requests with a response_format, likewise


class EndpointConfig(Strict):
    """One base URL of a provider's pool with its own limits: requests and tokens per
    minute (prompt plus completion; unset: no limit), spread evenly over the shards. A
    bare URL is an endpoint without limits."""

    model_config = ConfigDict(hide_input_in_errors=True)

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
        return check_urls([_no_key(v)])[0]


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

    # pydantic's own text of an error shows the input (a key, for a refused one): not here
    model_config = ConfigDict(hide_input_in_errors=True)

    kind: Literal["openai"] = "openai"
    name: str = "default"
    # (each URL checked on its own, so a refusal names `base_urls.N`)
    base_urls: list[Annotated[str, AfterValidator(_no_key)]] = Field(min_length=1)
    endpoints: list[EndpointConfig] = Field(default_factory=list)
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    model: str
    api_key_env: str | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=10)
    concurrency: int = Field(default=64, ge=1)
    # How an agent's action is asked for (shoal.agents.llm_output): as tool calls, as JSON
    # constrained by a schema (`response_format`), as JSON asked for in words, or `auto`:
    # probed once per run. (`tools: native | json`, its older form, is still read.)
    output: Literal["auto", "tools", "json_schema", "text"] = "tools"
    # Whose tokens budgets are in (shoal.memory.model_tokens): `auto` (the server's tokenize
    # endpoint when it has one, else tiktoken with a margin), `server`, `tiktoken`, or
    # the path of a Hugging Face tokenizer.json.
    tokenizer: str = "auto"
    temperature: float = Field(default=0.7, ge=0, le=2)
    max_tokens: int = Field(default=400, gt=0)
    price_prompt_per_mtok: float = Field(default=0.0, ge=0)
    price_completion_per_mtok: float = Field(default=0.0, ge=0)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    loopback: LoopbackConfig = Field(default_factory=LoopbackConfig)
    # Whether requests carry the `shoal` field (structured metadata for the loopback
    # server, shoal.llm.metadata); None: only to the loopback server.
    shoal_field: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _tools_is_output(cls, data: Any) -> Any:
        # `tools: native | json` (before `output` existed) is `output: tools | text`.
        if isinstance(data, dict) and "tools" in data:
            data = dict(data)
            legacy = data.pop("tools")
            mode = {"native": "tools", "json": "text"}.get(legacy) if isinstance(
                legacy, str) else None
            if mode is None:
                raise ValueError(f"tools: {legacy!r} is not one of native, json (or write "
                                 "output: tools | json_schema | text | auto)")
            if data.get("output", mode) != mode:
                raise ValueError(f"tools: {legacy} and output: {data['output']} disagree; "
                                 "write only output")
            data["output"] = mode
        return data

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, v: str) -> str:
        if v not in ("auto", "server", "tiktoken") and not v.endswith(".json"):
            raise ValueError(f"{v!r}: expected auto, server, tiktoken or the path of a "
                             "tokenizer.json")
        return v

    @model_validator(mode="before")
    @classmethod
    def _urls_of_endpoints(cls, data: Any) -> Any:
        # `endpoints` alone names the pool: its URLs are the base URLs.
        if isinstance(data, dict) and data.get("endpoints") and not data.get("base_urls"):
            eps = data["endpoints"]
            if isinstance(eps, list) and all(isinstance(e, dict | str) for e in eps):
                urls = [e if isinstance(e, str) else e.get("url") for e in eps]
                # (a URL holding a key is refused once, at `endpoints.N.url` where it was
                # written, not again at the base_urls derived from it)
                data = {**data, "base_urls": [
                    "loopback" if isinstance(u, str) and holds_a_key(u) else u for u in urls]}
        return data

    @field_validator("base_urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        return check_urls(v)

    @model_validator(mode="after")
    def _endpoints_match(self) -> Self:
        if self.endpoints and [e.url for e in self.endpoints] != self.base_urls:
            raise ValueError("endpoints: must list the same URLs as base_urls, in the same "
                             "order (or leave base_urls out)")
        return self

    @model_validator(mode="after")
    def _distinct_endpoints(self) -> Self:
        # The same server twice in a pool would get twice its share of the requests, and
        # its limits and breaker would be counted twice over.
        seen: dict[str, int] = {}
        for i, url in enumerate(self.base_urls):
            first = seen.setdefault(_same_server(url), i)
            if first != i:
                field = "endpoints.{}.url" if self.endpoints else "base_urls.{}"
                raise ValueError(f"{field.format(i)}: {url} is already in the pool "
                                 f"({field.format(first)}); each endpoint of a pool must be "
                                 "a different server")
        return self

    @field_validator("name", "model")
    @classmethod
    def _not_a_key(cls, v: str) -> str:
        return _no_key(v)

    @model_validator(mode="after")
    def _no_keys_elsewhere(self) -> Self:
        # Fields a chat-model plug-in adds to its provider's config (ours are checked
        # field by field above, so their refusals name their own paths).
        for name in type(self).model_fields:
            if name not in _CHECKED:
                for path in key_fields(getattr(self, name), name):
                    raise ValueError(f"{path}: {_KEY_REFUSAL}")
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
        for path in key_fields(v):  # `user: sk-...`: a key under an innocent name
            raise ValueError(f"{path}: {_KEY_REFUSAL}")
        return v


# Checked by their own validators: the rest of a provider's fields (a plug-in's) are
# scanned by `_no_keys_elsewhere`.
_CHECKED = {"kind", "name", "base_urls", "endpoints", "model", "api_key_env", "extra_body"}


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
_WORD = re.compile(r"[A-Za-z0-9_\-]+")  # a key's characters: sk-proj-..., hf_...
_RUN = re.compile(r"[A-Za-z0-9]+")
_HEX = re.compile(r"[0-9a-f]+")
_KEY_REFUSAL = ("looks like an API key; keys come only from the environment variable "
                "api_key_env names (the value is not shown)")
# (`token(?!s)`: max_tokens and the like are counts, not credentials)
_SECRET_NAME = re.compile(r"(api[_-]?key|secret|token(?!s)|password|passwd|authorization|^key$"
                          r"|^auth$|credential)", re.IGNORECASE)
_SECRET_QUERY = re.compile(r"(^|&)(api[_-]?key|key|token|secret|access[_-]?token)=",
                           re.IGNORECASE)
_KEY_PREFIXES = ("sk-", "sk_", "gsk_", "xai-", "hf_", "ghp_", "gho_", "github_pat_", "AIza",
                 "pk_", "rk_", "r8_", "tgp_", "nvapi-", "pplx-", "csk-", "glpat-", "eyJ")


def looks_like_a_key(name: str) -> bool:
    """Whether a supposed variable name is rather a secret: a known key prefix, or long,
    mixed-case or lowercase with digits (variable names are short and upper case)."""
    if name.startswith(_KEY_PREFIXES):
        return True
    return len(name) >= 24 and any(c.islower() for c in name) and any(c.isdigit()
                                                                     for c in name)


def holds_a_key(text: str) -> bool:
    """Whether free text (a URL, a model name, a value sent with every request) holds
    something key-shaped: `looks_like_a_key` applied to its words (a known prefix, at
    least 16 characters in all) and to their letters-and-digits runs (long, lowercase
    with digits). A hexadecimal run under 40 characters is an id, not taken for a key
    (Cloudflare's account ids are 32 in its endpoints' paths); names such as
    Meta-Llama-3.1-8B-Instruct are words between separators, each short."""
    for word in _WORD.findall(text):
        if len(word) >= 16 and word.startswith(_KEY_PREFIXES):
            return True
        for run in _RUN.findall(word):
            if looks_like_a_key(run) and not (len(run) < 40 and _HEX.fullmatch(run)):
                return True
    return False


def key_fields(data: Any, path: str = "") -> list[str]:
    """Paths of the string values of a field (nested mappings and lists) that hold
    something key-shaped (`holds_a_key`); mapping keys are checked as values are."""
    out = []
    if isinstance(data, str):
        if data != "loopback" and holds_a_key(data):
            out.append(path)
    elif isinstance(data, dict):
        for key, value in data.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and holds_a_key(key):
                out.append(path or "(a field name)")
            out += key_fields(value, here)
    elif isinstance(data, list | tuple):
        for i, value in enumerate(data):
            out += key_fields(value, f"{path}.{i}" if path else str(i))
    elif hasattr(data, "model_dump"):  # a plug-in's nested section
        out += key_fields(data.model_dump(), path)
    return out


def _same_server(url: str) -> str:
    """A base URL as compared for duplicates: scheme and host in lower case."""
    parts = urlsplit(url)
    return url if url == "loopback" else parts._replace(
        scheme=parts.scheme.lower(), netloc=parts.netloc.lower()).geturl().rstrip("/")


def shown_name(name: str) -> str:
    """A variable name for a message, or a placeholder when it might be a key."""
    return name if re.fullmatch(r"[A-Z][A-Z0-9_]{0,63}", name) else "(the name given)"


def is_secret_name(name: str) -> bool:
    """Whether a field name says it holds a credential (api_key, token, secret, ...). A
    name ending in `_env` (`api_key_env`) holds the name of the variable that holds it,
    which is not hidden (a key given there by mistake is, being key-shaped)."""
    return bool(_SECRET_NAME.search(name)) and not name.lower().endswith("_env")


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

    providers: list[Annotated[Any, PartOf(CHAT_MODELS)]] = Field(min_length=1)
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
    def _names(self) -> Self:
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


class _HasLLM(Protocol):
    """What `check_api_keys` reads of a config (shoal.config.model.Config, which imports
    this module, so it cannot be named here)."""

    @property
    def llm(self) -> LLMConfig | None: ...


def check_api_keys(cfg: _HasLLM) -> None:
    """Every provider that names a key variable finds it set (InputError otherwise), so a
    missing key stops a run before it starts, not as 401s in round 1."""
    for i, p in enumerate(cfg.llm.providers if cfg.llm else []):
        if p.api_key_env and set(p.base_urls) != {"loopback"} and not os.environ.get(
                p.api_key_env):
            raise InputError(f"llm.providers.{i}.api_key_env: the environment variable "
                             f"{shown_name(p.api_key_env)} is not set; export it (the key "
                             "itself never goes in the config)")


CHAT_MODELS.config_base = ProviderConfig  # (a plug-in's config model derives from it)

"""Budgets in the model's own tokens.

Shoal assembles every context counting with tiktoken's cl100k_base (`shoal.memory.tokens`):
exact, offline and fast. A model counts with its own tokenizer, and a request carries more
than the context (tool definitions or a schema, the chat template). So a run measures,
once at its start, for each provider:

- `ratio`: the model's tokens per cl100k token on texts of this run (its agents'
  personas, in their language, and a fixed sample), counted by the server's tokenize
  endpoint (llama.cpp, vLLM), a Hugging Face `tokenizer.json` given as the provider's
  `tokenizer`, or, without either, taken as `MARGIN`;
- `overhead`: the model's tokens of what a request adds to the context on each platform.

A context's budget in cl100k tokens is then `(budget - overhead) / ratio`, and Shoal's own
count of a request is `cl100k tokens * ratio + overhead`, recorded in
`llm_calls.counted_prompt_tokens` beside the server's `prompt_tokens` (the summary reports
the drift). The measure is kept in the run's checkpoint, so a resume or a fork assembles
the same contexts.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from shoal.config.llm import ProviderConfig
from shoal.core.errors import InputError
from shoal.memory.tokens import count

# Model tokens per cl100k token when the model's tokenizer cannot be asked: the largest
# ratio measured on Shoal's English contexts among the tokenizers we could run here
# (docs/llm.md, "Token counts"), rounded up.
MARGIN = 1.25
TEMPLATE_TOKENS = 16  # a chat template's tokens around a system and a user message
SAMPLE = ("You are a person on a social network. You read your feed, react to posts, and "
          "write your own in your own voice. Your views on the topics below move with what "
          "you see and whom you trust. 3 new replies since your last turn; the feed is "
          "newest first.")


@dataclass(frozen=True)
class ModelTokens:
    """How one provider's model counts, relative to cl100k (see the module's text)."""

    counter: str  # server | tokenizer.json | tiktoken
    ratio: float
    overhead: dict[str, int] = field(default_factory=dict)  # by platform
    # Why the margin stands in for a server that was asked (`tokenizer: auto`): its URL and
    # what went wrong, for `shoal estimate` to say. Not part of the measure: not compared,
    # not kept (a checkpoint holds what was counted, not how a server failed).
    fallback: str = field(default="", compare=False)

    def budget(self, budget: int) -> int:
        """A context budget of `budget` model tokens, in cl100k tokens, whatever the
        platform (its largest overhead taken off)."""
        overhead = max(self.overhead.values(), default=0)
        return max(1, math.floor((budget - overhead) / self.ratio))

    def prompt(self, cl100k_tokens: int, platform: str) -> int:
        """The model's tokens of a request whose context has `cl100k_tokens`."""
        return math.ceil(cl100k_tokens * self.ratio) + self.overhead.get(platform, 0)

    def to_dict(self) -> dict:
        """As kept in a checkpoint."""
        data = asdict(self)
        del data["fallback"]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ModelTokens:
        """As read back from a checkpoint."""
        return cls(str(data["counter"]), float(data["ratio"]),
                   {str(k): int(v) for k, v in data.get("overhead", {}).items()})


def server_root(base_url: str) -> str:
    """The server's root URL: its OpenAI base URL without the trailing `/v1`."""
    return base_url[:-3] if base_url.endswith("/v1") else base_url


MAX_REPLY_BYTES = 16 * 2**20  # a token list this long is not an answer


def _post_json(http: httpx.Client, url: str, body: dict, deadline: float) -> object:
    """The JSON of a 200 answer to a POST, None for any other answer; TimeoutError when it
    has not all come by `deadline` (httpx's timeout bounds each read, not the whole)."""
    with http.stream("POST", url, json=body) as r:
        raw = bytearray()
        for chunk in r.iter_bytes():
            raw += chunk
            if time.monotonic() > deadline:
                raise TimeoutError(url)
            if len(raw) > MAX_REPLY_BYTES:
                return None
        if r.status_code != 200:
            return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # (not JSON; JSON nested beyond reason)
        return None


def server_count(base_url: str, model: str, texts: list[str], timeout_s: float = 30.0
                 ) -> list[int] | None:
    """Each text's tokens by the server's `POST /tokenize` (llama.cpp's form, then
    vLLM's); None when it has no such endpoint."""
    return _server_count(base_url, model, texts, timeout_s)[0]


def _server_count(base_url: str, model: str, texts: list[str], timeout_s: float
                  ) -> tuple[list[int] | None, str]:
    """`server_count`, and when it is None, why: the URL asked and the error met, or that
    it answered without a token list."""
    url = f"{server_root(base_url)}/tokenize"
    with httpx.Client(timeout=timeout_s) as http:
        for body in ({"content": ""}, {"model": model, "prompt": ""}):
            key = "content" if "content" in body else "prompt"
            counts = []
            try:
                for text in texts:
                    data = _post_json(http, url, {**body, key: text},
                                      time.monotonic() + timeout_s)
                    tokens = data.get("tokens") if isinstance(data, dict) else None
                    if not isinstance(tokens, list):
                        break
                    counts.append(len(tokens))
            except TimeoutError:
                return None, f"{url} gave no whole answer within {timeout_s:g} s"
            except httpx.HTTPError as exc:
                return None, f"{url} could not be asked ({type(exc).__name__}: " \
                             f"{str(exc) or 'no detail'})"
            if len(counts) == len(texts):
                return counts, ""
    return None, f"{url} answered without a token list (the server has no tokenize endpoint)"


def file_count(path: str, texts: list[str]) -> list[int]:
    """Each text's tokens by a Hugging Face `tokenizer.json` (the `tokenizers` library)."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise InputError(f"tokenizer: {path}: counting with a tokenizer.json needs the "
                         "`tokenizers` package (pip install tokenizers)") from exc
    if not Path(path).expanduser().is_file():
        raise InputError(f"tokenizer: {path}: no such file")
    try:
        tok = Tokenizer.from_file(str(Path(path).expanduser()))
    except Exception as exc:  # the library raises its own untyped errors
        raise InputError(f"tokenizer: {path}: not a tokenizer.json ({exc})") from exc
    return [len(tok.encode(t, add_special_tokens=False).ids) for t in texts]


def measure(provider: ProviderConfig, base_url: str | None, texts: list[str],
            requests: dict[str, str]) -> ModelTokens:
    """The model's counting for `provider`: `texts` are samples of the run's own text,
    `requests` what a request adds to the context on each platform (its tools or schema
    and instructions, as text)."""
    samples = [SAMPLE, *[t for t in texts if t.strip()]]
    extra = list(requests.values())
    counts: list[int] | None = None
    how, why = provider.tokenizer, ""
    if how.endswith(".json"):
        counts, counter = file_count(how, samples + extra), "tokenizer.json"
    elif how in ("auto", "server") and base_url is not None:
        counts, why = _server_count(base_url, provider.model, samples + extra, 30.0)
        counter = "server"
        if counts is None and how == "server":
            raise InputError(f"llm.providers: {provider.name}: tokenizer: server, but "
                             f"{server_root(base_url)}/tokenize did not answer ({why})")
    if counts is None:
        ratio = MARGIN
        return ModelTokens("tiktoken", ratio, {p: math.ceil(count(r) * ratio) +
                                               TEMPLATE_TOKENS for p, r in requests.items()},
                           fallback=why)
    ours = sum(count(t) for t in samples)
    ratio = max(1.0, math.ceil(100 * sum(counts[:len(samples)]) / max(1, ours)) / 100)
    overhead = {p: n + TEMPLATE_TOKENS
                for p, n in zip(requests, counts[len(samples):], strict=True)}
    return ModelTokens(counter, ratio, overhead)


def request_text(tools: list[dict] | None, instructions: str) -> str:
    """What a request adds to its context, as text: the tool definitions as JSON, or the
    instructions for a JSON answer."""
    return json.dumps(tools) if tools else instructions

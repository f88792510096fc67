"""Compaction by an LLM (`memory.summarizer: llm`, `llm.summarizer_provider`).

The same map-reduce as the extractive summariser: every chunk of a round's items (at most
`input_tokens`) is summarised by one call, then the chunk summaries are combined by one
more; a merge folds round lines into the narrative. Outputs are cut to their token caps.
Calls go through the chat interface (the provider's retries and timeout) synchronously on
the compaction worker's background thread, so the round loop never waits; each is a row
of `llm_calls` (platform `memory`). A call that fails raises: the job stays pending, is
recorded with its error and retried at a later boundary, like any compaction job.

The instructions are the `summarizer.*` templates of the run's language (`language`,
`population.language`): round memory is written once for everyone in it, so its summaries
are too. A request in another language than English carries it in the `shoal` field.
"""

from __future__ import annotations

from typing import Literal

from shoal.config.base import Strict
from shoal.core.language import DEFAULT, Templates, templates
from shoal.core.registry import SUMMARIZERS
from shoal.llm.chat import CallLog, ChatRequest, SyncChat, call_rows, chat_model
from shoal.llm.endpoints import LOOPBACK
from shoal.llm.metadata import SUMMARY, meta
from shoal.memory.compaction import Item, Summarizer, chunks
from shoal.memory.tokens import count, truncate

MARKER = "Shoal memory compaction"  # (the same in every language: it names the call)


class LLMSummarizerConfig(Strict):
    """Summaries written by the chat model `llm.summarizer_provider` names."""

    kind: Literal["llm"] = "llm"


class LLMSummarizer(Summarizer):
    """Summaries written by a chat model (through the chat interface: its retries and
    timeouts, one `llm_calls` row per call in `calls`)."""

    deterministic = False
    name = "llm"

    def __init__(self, provider, input_tokens: int, summary_tokens: int,
                 narrative_tokens: int):
        self.provider = provider  # a ProviderConfig
        self.base_urls = list(provider.base_urls)  # `loopback` is replaced by the run
        self.input_tokens = input_tokens
        self.summary_tokens = summary_tokens
        self.narrative_tokens = narrative_tokens
        self.calls = CallLog()  # rows for `llm_calls`, drained by the driver each round
        self._chat: SyncChat | None = None
        self._n = 0

    def _ask(self, system: str, user: str, max_tokens: int, what: str,
             texts: list[str]) -> str:
        """The model's text for one call (`texts`: what it summarises or merges, as data,
        for the `shoal` field)."""
        if LOOPBACK in self.base_urls:
            raise RuntimeError("the summariser's loopback server is not running")
        if self._chat is None:
            self._chat = SyncChat(chat_model(self.provider, self.base_urls, concurrency=1))
        # (English requests carry exactly what they always did: no `language`)
        language = {} if self.language == DEFAULT else {"language": self.language}
        request = ChatRequest(messages=[{"role": "system", "content": system},
                                        {"role": "user", "content": user}],
                              temperature=0.0, max_tokens=max(64, 2 * max_tokens),
                              meta=meta(SUMMARY, texts=texts, **language))
        reply = self._chat.chat(request, key=self._n)
        self._n += 1
        for row in call_rows(reply, self.provider, round_=0, agent=None, platform="memory",
                             estimated_prompt_tokens=count(system) + count(user),
                             outcome=what if reply.status == "ok" else ""):
            self.calls.add(row)
        if reply.status != "ok":
            raise RuntimeError(f"compaction call to {reply.base_url} failed: {reply.status}: "
                               f"{reply.error[:200]}")
        if not reply.text:
            raise RuntimeError(f"compaction call to {reply.base_url} returned no text")
        return reply.text

    def close(self) -> None:
        """Close the connection (the worker is done with it)."""
        if self._chat is not None:
            self._chat.close()
            self._chat = None

    @property
    def words(self) -> Templates:
        """The templates of the run's language."""
        return templates(self.language)

    def summarize_round(self, header: str, items: list[Item]) -> str:
        t = self.words
        system = f"{MARKER}. " + t("summarizer.round", n=max(10, self.summary_tokens * 3 // 4))
        parts = [self._ask(system, "\n".join(
            f"- {i.text}" for i in group), self.summary_tokens, "summary",
            [i.text for i in group]) for group in chunks(items, self.input_tokens)]
        if len(parts) > 1:  # reduce the chunk summaries to one
            parts = [self._ask(system, "\n".join(parts), self.summary_tokens, "summary",
                               parts)]
        body = parts[0] if parts else t("summarizer.nothing")
        return truncate(f"{header} {body}", self.summary_tokens)

    def merge(self, previous: str, lines: list[str]) -> str:
        t = self.words
        system = f"{MARKER}. " + t("summarizer.merge", n=max(20, self.narrative_tokens * 3 // 4))
        user = (t("summarizer.story", story=previous or t("summarizer.no_story")) + "\n"
                + t("summarizer.newer") + "\n" + "\n".join(f"- {ln}" for ln in lines))
        texts = [previous, *lines] if previous else list(lines)
        return truncate(self._ask(system, user, self.narrative_tokens, "merge", texts),
                        self.narrative_tokens)


@SUMMARIZERS.register("llm", config=LLMSummarizerConfig)
def llm_summarizer(cfg: LLMSummarizerConfig, memory, llm) -> LLMSummarizer:
    """The LLM summariser for a `memory` config, calling `llm.summarizer_provider`."""
    provider = llm.provider(llm.summarizer_provider)  # the config checked it exists
    return LLMSummarizer(provider, memory.input_tokens, memory.summary_tokens,
                         memory.narrative_tokens)

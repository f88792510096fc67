"""The graph extractors as registered parts (`memory.graph.extractor`): their config
models, and factories that import the extractor itself only when a run uses one (the
offline extractor's patterns take a tenth of a second to compile; every process that reads
a config would pay it otherwise)."""

from __future__ import annotations

from typing import Literal

from shoal.config.base import Strict
from shoal.core.errors import InputError
from shoal.core.registry import EXTRACTORS


class OfflineConfig(Strict):
    """The offline extractor (no settings beyond its name)."""

    kind: Literal["offline"] = "offline"


class LLMExtractorConfig(Strict):
    """Extraction by the chat model of `provider` (default: the first of `llm.providers`)."""

    kind: Literal["llm"] = "llm"
    provider: str | None = None


@EXTRACTORS.register("offline", config=OfflineConfig)
def offline_extractor(cfg: OfflineConfig, llm=None):
    """The offline extractor (memory/knowledge/extract.py)."""
    from shoal.memory.knowledge.extract import OfflineExtractor

    return OfflineExtractor()


@EXTRACTORS.register("llm", config=LLMExtractorConfig)
def llm_extractor(cfg: LLMExtractorConfig, llm):
    """The LLM extractor of a config: its `provider`, else the first of `llm.providers`."""
    from shoal.memory.knowledge.llm_extractor import LLMExtractor

    if llm is None or not llm.providers:
        raise InputError("memory.graph.extractor: 'llm' needs an llm section with a provider")
    provider = llm.provider(cfg.provider) if cfg.provider else llm.providers[0]
    return LLMExtractor(provider)

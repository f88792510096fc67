"""Counting LLM usage from rows of the `llm_calls` table: the one definition the round
stats, the run summary and the report share.

A row is one HTTP request. A *call* is a logical request of a turn (the first ask, the ask
again without tools, the repair), which may take several HTTP requests: every request of
a call but its last says `outcome = 'retried'`. A *turn* is one LLM agent deciding on one
platform in one round; all its rows carry the turn's fallback reason when it fell back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Usage:
    """What a set of `llm_calls` rows adds up to."""

    requests: int = 0  # HTTP requests (rows)
    calls: int = 0  # logical calls (their last request)
    retries: int = 0  # requests sent again after a failed one (requests - calls)
    failed: int = 0  # calls that ended without an answer
    invalid: int = 0  # calls answered with no usable action
    turns: int = 0  # agent decisions on a platform
    fallbacks: int = 0  # turns decided by the fallback
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hits: int = 0  # answered by the response cache (no request sent)
    cache_misses: int = 0  # asked of the cache, then of the endpoint
    saved_usd: float = 0.0  # what the hits would have cost

    @classmethod
    def of(cls, rows: pd.DataFrame | list[dict[str, Any]]) -> Usage:
        """The usage of `rows` (a DataFrame of `llm_calls` or its row dicts)."""
        df = pd.DataFrame(rows) if isinstance(rows, list) else rows
        if df.empty:
            return cls()
        outcome = _text(df, "outcome")
        last = outcome != "retried"
        status = _text(df, "status")
        turn_rows = df[df["agent"].notna()] if "agent" in df else df.iloc[0:0]
        key = [c for c in ("round", "agent", "platform") if c in df]
        fell = turn_rows[_text(turn_rows, "fallback_reason") != ""]
        return cls(
            requests=len(df), calls=int(last.sum()), retries=int((~last).sum()),
            failed=int((last & (status != "ok") & (status != "")).sum()),
            invalid=int((outcome == "invalid").sum()),
            turns=len(turn_rows.drop_duplicates(key)) if key else len(turn_rows),
            fallbacks=len(fell.drop_duplicates(key)) if key else len(fell),
            prompt_tokens=int(_numbers(df, "prompt_tokens").sum()),
            completion_tokens=int(_numbers(df, "completion_tokens").sum()),
            cache_hits=int((last & (_text(df, "cache") == "hit")).sum()),
            cache_misses=int((last & (_text(df, "cache") == "miss")).sum()),
            saved_usd=float(_numbers(df, "saved_usd").sum()),
        )


def _text(df: pd.DataFrame, col: str) -> pd.Series:
    """A text column with missing values as "" (a missing column: all "")."""
    if col not in df:
        return pd.Series("", index=df.index)
    return df[col].fillna("").astype(str)


def _numbers(df: pd.DataFrame, col: str) -> pd.Series:
    """A numeric column with missing values as 0."""
    if col not in df:
        return pd.Series(0, index=df.index)
    return pd.to_numeric(df[col], errors="coerce").fillna(0)

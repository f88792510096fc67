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


@dataclass(frozen=True)
class ModeOutcomes:
    """How the agents' turns asked in one output mode (shoal.agents.llm_output) ended."""

    mode: str
    turns: int  # turns whose first call asked in this mode
    valid: int  # a valid action from the first answer
    repaired: int  # a valid action after the repair retry
    fallbacks: dict[str, int]  # turns that fell back, by reason
    refusals: int  # answers the server refused to give in this mode (tools, schema)


def outcomes_by_mode(rows: pd.DataFrame) -> list[ModeOutcomes]:
    """Per output mode, what the agents' turns came to (`rows`: `llm_calls` rows)."""
    if rows.empty or "output" not in rows:
        return []
    turns = rows[rows["agent"].notna() & rows["output"].notna()]
    turns = turns[_text(turns, "outcome") != "round_stopped"]
    out = []
    key = ["round", "agent", "platform"]
    for mode, group in turns.groupby(turns.groupby(key)["output"].transform("first")):
        per_turn = group.assign(
            invalid=_text(group, "outcome") == "invalid",
            refused=_text(group, "outcome").isin(["tools_refused", "schema_refused"]),
        ).groupby(key)
        invalid = per_turn["invalid"].any()
        refused = per_turn["refused"].any()
        reason = per_turn["fallback_reason"].agg(lambda s: next((r for r in s if r), ""))
        fell = reason[reason != ""]
        out.append(ModeOutcomes(
            str(mode), len(reason), int(((reason == "") & ~invalid).sum()),
            int(((reason == "") & invalid).sum()),
            {str(r): int(n) for r, n in fell.value_counts().items()}, int(refused.sum())))
    return out


def token_drift(rows: pd.DataFrame) -> tuple[int, int] | None:
    """(Shoal's count, the server's) of the prompt tokens of the answered requests that
    have both; None when none has (a server that reports no usage)."""
    if rows.empty or "counted_prompt_tokens" not in rows:
        return None
    both = rows[(_text(rows, "status") == "ok") & rows["counted_prompt_tokens"].notna()
                & (_text(rows, "cache") != "hit")]
    if both.empty:
        return None
    return int(both["counted_prompt_tokens"].sum()), int(both["prompt_tokens"].sum())

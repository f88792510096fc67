"""What every use of a chat model shares (policies, summaries, interviews)."""

from __future__ import annotations

import re

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """`text` without `<think>` blocks (or everything up to an unmatched `</think>`)."""
    text = _THINK.sub("", text)
    if "</think>" in text.lower():  # an unclosed opening tag upstream: keep what follows
        text = re.split(r"</think>", text, flags=re.IGNORECASE)[-1]
    return text.strip()

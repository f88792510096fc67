"""Which topics a free text is about: keyword match on word boundaries, case-insensitive.

MiroShark matched any topic word as a substring ("ai" matched "again"); here a keyword
must stand as whole words.
"""

from __future__ import annotations

import re

import numpy as np


class TopicMatcher:
    """Matches texts against each topic's keywords (and label)."""

    def __init__(self, keywords: list[list[str]]):
        self._patterns = [
            re.compile(r"\b(?:" + "|".join(re.escape(k) for k in sorted(kws, key=len,
                                                                           reverse=True))
                       + r")\b", re.IGNORECASE)
            for kws in keywords
        ]

    @classmethod
    def from_config(cls, topics) -> TopicMatcher:
        """From the config's topic specs (name, label and keywords all count)."""
        return cls([
            sorted({t.name.replace("_", " "), t.label or "", *t.keywords} - {""})
            for t in topics
        ])

    def match(self, text: str) -> np.ndarray:
        """Boolean mask [T]: topics the text mentions."""
        return np.array([bool(p.search(text)) for p in self._patterns], dtype=bool)

    def spans(self, text: str) -> list[list[tuple[int, int]]]:
        """Per topic, the (start, end) character spans of its mentions in `text`."""
        return [[m.span() for m in p.finditer(text)] for p in self._patterns]

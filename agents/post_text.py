"""Short post texts for rule-based agents that state their stance in words.

LLM agents will read these, so the wording follows fixed stance bins and the exact stance
travels with the post as data. Texts are assembled from precomputed sentences by array
indexing, so writing tens of thousands of posts per round costs milliseconds.
"""

from __future__ import annotations

import numpy as np

from shoal.beliefs.render import STANCE_BINS, stance_bin

_SIGN_OF_BIN = (1, 1, 0, -1, -1)
OPENERS = ("", "Honestly, ", "Let me be clear: ", "Thinking about it more, ",
           "For the record, ", "Hot take: ", "After reading the news today, ")
REASONS = {
    1: ("The benefits clearly outweigh the costs.", "It is long overdue.",
        "The evidence keeps pointing the same way.", "It will help people like me.",
        "We should have done this years ago."),
    0: ("I need to see more evidence before I decide.", "Both sides have a point.",
        "It depends on the details.", "I'm still reading up on it."),
    -1: ("The costs fall on the wrong people.", "It is a bad idea, plain and simple.",
         "The evidence does not support it.", "It will hurt people like me.",
         "Nobody asked the people who pay for it."),
}


class PostWriter:
    """Writes stance statements for a fixed list of topic labels."""

    def __init__(self, labels: list[str]):
        width = max(len(r) for r in REASONS.values())
        self.sentences = np.empty((len(labels), len(STANCE_BINS), width), dtype=object)
        self.n_reasons = np.array([len(REASONS[s]) for s in _SIGN_OF_BIN])
        for t, label in enumerate(labels):
            for b, (_, verb) in enumerate(STANCE_BINS):
                reasons = REASONS[_SIGN_OF_BIN[b]]
                for j in range(width):
                    self.sentences[t, b, j] = f"I {verb} {label}. {reasons[j % len(reasons)]}"

    def statements(self, topic: np.ndarray, position: np.ndarray, u: np.ndarray) -> np.ndarray:
        """One sentence per row: topic index, position, a uniform draw picking the reason."""
        b = stance_bin(position)
        j = np.minimum((u * self.n_reasons[b]).astype(np.int64), self.n_reasons[b] - 1)
        return self.sentences[topic, b, j]

    def posts(self, stance: np.ndarray, u: np.ndarray) -> list[str]:
        """Texts of new posts with stances [n, T] (nan: topic not addressed); `u` is [n, 3]:
        opener, first-topic reason, second-topic reason. Topics appear in index order."""
        n = len(stance)
        if not n:
            return []
        addressed = ~np.isnan(stance)
        order = np.argsort(~addressed, axis=1, kind="stable")  # addressed topics first
        t1, t2 = order[:, 0], order[:, 1] if stance.shape[1] > 1 else order[:, 0]
        rows = np.arange(n)
        has2 = addressed.sum(axis=1) > 1
        opener = np.array(OPENERS, dtype=object)[
            np.minimum((u[:, 0] * len(OPENERS)).astype(np.int64), len(OPENERS) - 1)]
        text = opener + self.statements(t1, stance[rows, t1], u[:, 1])
        if has2.any():
            second = self.statements(t2[has2], stance[has2, t2[has2]], u[has2, 2])
            text[has2] = text[has2] + " " + second
        return text.tolist()

    def response(self, kind: str, target_user: str, agree: bool, topics: list[int],
                 positions: list[float], u: np.ndarray) -> str:
        """A reply, quote or comment reacting to someone else's post."""
        body = " ".join(self.statements(np.array([t]), np.array([p]), np.array([uu]))[0]
                        for t, p, uu in zip(topics, positions, u[1:], strict=False))
        if kind == "quote":
            return f"{'Exactly this.' if agree else 'Not convinced by this.'} {body}"
        lead = "I agree." if agree else "I disagree."
        return f"@{target_user} {lead} {body}" if kind == "reply" else f"{lead} {body}"

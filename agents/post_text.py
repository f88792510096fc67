"""Short post texts for rule-based agents that state their stance in words.

LLM agents will read these, so the wording follows fixed stance bins and the exact stance
travels with the post as data (nothing reads the text back to find it). Texts are
assembled from precomputed sentences by array indexing, so writing tens of thousands of
posts per round costs milliseconds.

The words are the `posts.*` templates of the writer's language (shoal.core.language):
openers, a stance sentence per bin and reasons per side. Every language has lists of the
same lengths, so the same draws pick the same opener, stance and reason in any of them.
"""

from __future__ import annotations

import numpy as np

from shoal.beliefs.render import STANCE_BINS, stance_bin
from shoal.core.language import DEFAULT, templates

_SIGN_OF_BIN = (1, 1, 0, -1, -1)
_SIDES = {1: "support", 0: "undecided", -1: "oppose"}  # `posts.reasons.<side>`


class PostWriter:
    """Writes stance statements for a fixed list of topic labels, in `language` (a BCP 47
    tag; its templates' language, English by default)."""

    def __init__(self, labels: list[str], language: str = DEFAULT):
        words = templates(language)
        self.language = words.tag
        stances = words.items("posts.stances")
        reasons = {s: words.items(f"posts.reasons.{side}") for s, side in _SIDES.items()}
        self.sep = words("posts.sep")
        self.openers = np.array(words.items("posts.openers"), dtype=object)
        self.agree = (words("posts.disagree"), words("posts.agree"))
        self.quote = (words("posts.quote_disagree"), words("posts.quote_agree"))
        self.reply = words.text("posts.reply")
        width = max(len(r) for r in reasons.values())
        self.sentences = np.empty((len(labels), len(STANCE_BINS), width), dtype=object)
        self.n_reasons = np.array([len(reasons[s]) for s in _SIGN_OF_BIN])
        for t, label in enumerate(labels):
            for b in range(len(STANCE_BINS)):
                stance = stances[b].format(topic=label)
                side = reasons[_SIGN_OF_BIN[b]]
                for j in range(width):
                    self.sentences[t, b, j] = f"{stance}{self.sep}{side[j % len(side)]}"

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
        k = len(self.openers)
        opener = self.openers[np.minimum((u[:, 0] * k).astype(np.int64), k - 1)]
        text = opener + self.statements(t1, stance[rows, t1], u[:, 1])
        if has2.any():
            second = self.statements(t2[has2], stance[has2, t2[has2]], u[has2, 2])
            text[has2] = text[has2] + self.sep + second
        return text.tolist()

    def response(self, kind: str, target_user: str, agree: bool, topics: list[int],
                 positions: list[float], u: np.ndarray) -> str:
        """A reply, quote or comment reacting to someone else's post."""
        body = self.sep.join(
            self.statements(np.array([t]), np.array([p]), np.array([uu]))[0]
            for t, p, uu in zip(topics, positions, u[1:], strict=False))
        if kind == "quote":
            return f"{self.quote[agree]}{self.sep}{body}"
        text = f"{self.agree[agree]}{self.sep}{body}"
        return self.reply.format(user=target_user, text=text) if kind == "reply" else text

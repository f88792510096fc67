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
from shoal.core.keys import unique_sorted
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
        self._made: dict[int, str] = {}  # joined opener + sentence, by `_opened`'s code
        for t, label in enumerate(labels):
            for b in range(len(STANCE_BINS)):
                stance = stances[b].format(topic=label)
                side = reasons[_SIGN_OF_BIN[b]]
                for j in range(width):
                    self.sentences[t, b, j] = f"{stance}{self.sep}{side[j % len(side)]}"

    def statements(self, topic: np.ndarray, position: np.ndarray, u: np.ndarray) -> np.ndarray:
        """One sentence per row: topic index, position, a uniform draw picking the reason."""
        b, j = self._pick(position, u)
        return self.sentences[topic, b, j]

    def _pick(self, position: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stance bin and reason index per row."""
        b = stance_bin(position)
        return b, np.minimum((u * self.n_reasons[b]).astype(np.int64), self.n_reasons[b] - 1)

    def posts(self, stance: np.ndarray, u: np.ndarray) -> list[str]:
        """Texts of new posts with stances [n, T] (nan: topic not addressed); `u` is [n, 3]:
        opener, first-topic reason, second-topic reason. Topics appear in index order."""
        return self.post_texts(stance, u).tolist()

    def post_texts(self, stance: np.ndarray, u: np.ndarray) -> np.ndarray:
        """`posts` as an object array. Each distinct opener and first sentence is joined
        once (and kept), so a round's texts are mostly gathered from a table: string
        concatenation holds the GIL, which the decision threads share."""
        n = len(stance)
        if not n:
            return np.empty(0, object)
        addressed = ~np.isnan(stance)
        order = np.argsort(~addressed, axis=1, kind="stable")  # addressed topics first
        t1, t2 = order[:, 0], order[:, 1] if stance.shape[1] > 1 else order[:, 0]
        rows = np.arange(n)
        has2 = addressed.sum(axis=1) > 1
        k = len(self.openers)
        text = self._opened(np.minimum((u[:, 0] * k).astype(np.int64), k - 1), t1,
                            *self._pick(stance[rows, t1], u[:, 1]))
        if has2.any():
            second = self.statements(t2[has2], stance[has2, t2[has2]], u[has2, 2])
            text[has2] = text[has2] + self.sep + second
        return text

    def _opened(self, opener: np.ndarray, topic: np.ndarray, b: np.ndarray, j: np.ndarray
                ) -> np.ndarray:
        """Opener + sentence (topic, bin, reason) per row, each distinct one made once."""
        _, n_bins, width = self.sentences.shape
        code = ((opener * len(self.sentences) + topic) * n_bins + b) * width + j
        distinct = unique_sorted(code)
        made = self._made
        for c in distinct.tolist():
            if c not in made:
                o, rest = divmod(c, len(self.sentences) * n_bins * width)
                t, rest = divmod(rest, n_bins * width)
                made[c] = self.openers[o] + self.sentences[(t, *divmod(rest, width))]
        table = np.array([made[c] for c in distinct.tolist()], dtype=object)
        where = np.empty(int(distinct[-1]) + 1, np.int64)  # (only its used pages are touched)
        where[distinct] = np.arange(len(distinct))
        return table[where[code]]

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

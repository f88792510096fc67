"""How much of an LLM agent's prompt repeats the start of its previous prompt: the part a
server's prefix cache could reuse (docs/llm.md, "Prompts a server can cache").

A prompt is its system text followed by its observation (the user message), tokenised
with cl100k_base (memory/tokens.py) each on its own, as a chat template tokenises
messages. The reused tokens of a turn are the length of the longest common prefix of its
token sequence and the sequence of the same agent's previous turn (any platform, any
earlier round): an exact count of whole tokens, not an estimate from characters. The
first turn of an agent reuses nothing.

It stays cheap: an assembled context comes in pieces (`Assembled.pieces`) whose tokens,
one piece after the other, are the prompt's tokens; pieces equal to the previous
prompt's are counted from the token-count cache without being compared token by token.
The first piece that differs is cut the same way into lines: cl100k's pre-tokenizer ends a
piece of text after a line break followed by a character that is not white space (a
newline run is never joined to what follows it), so the tokens of a text are those of
such lines one after the other. Equal lines are counted from the cache too, and only from
the first line that differs on are both prompts tokenised, lazily, up to the first token
that differs (checked against encoding both whole prompts in tests/test_prompt_prefix.py
and bench/llm.py). What is kept per agent is its previous prompt's pieces,
which the checkpoint saves (`get_state`), so a resumed or forked run measures what an
uninterrupted one does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from shoal.core.state import State, decode_texts, encode_texts
from shoal.memory.tokens import count, encoding

_LINE = re.compile(r"(?<=\n)(?=\S)")  # where cl100k always ends a piece of text


def reused_tokens(previous: Sequence[str], pieces: Sequence[str]) -> int:
    """Length of the longest common prefix of the cl100k tokens of `previous` and of
    `pieces` (each a prompt in pieces whose tokens concatenate)."""
    n, k = _common(previous, pieces)
    if k == len(pieces) or k == len(previous):
        return n  # one prompt is the other's start, piece for piece
    # The first differing piece, line by line; then the rest, token by token.
    old, new = _LINE.split(previous[k]), _LINE.split(pieces[k])
    m, j = _common(old, new)
    rest_new = [*new[j:], *pieces[k + 1:]]
    rest_old = [*old[j:], *previous[k + 1:]]
    n += m
    for a, b in zip(_tokens(rest_new), _tokens(rest_old), strict=False):
        if a != b:
            break
        n += 1
    return n


def _common(a: Sequence[str], b: Sequence[str]) -> tuple[int, int]:
    """Tokens of the texts `a` and `b` share at their start, text for text, and how many."""
    n = k = 0
    while k < len(a) and k < len(b) and a[k] == b[k]:
        n += count(a[k])
        k += 1
    return n, k


def _tokens(pieces: Sequence[str]) -> Iterator[int]:
    """The tokens of pieces, one piece at a time (encoded only when reached)."""
    enc = encoding()
    return chain.from_iterable(map(enc.encode_ordinary, pieces))


@dataclass
class PromptUsage:
    """The prompts sent in a round (by the driver, or by a shard that built them): turns,
    their tokens, and the tokens equal to the start of each agent's previous prompt."""

    turns: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0

    def measure(self, prefixes: PrefixReuse, agent: int, pieces: Sequence[str],
                tokens: int) -> int:
        """Measure a prompt's reuse (it becomes the agent's previous one) and count it;
        the reused tokens."""
        reused = prefixes.measure(agent, pieces)
        self.turns += 1
        self.prompt_tokens += tokens
        self.reused_tokens += reused
        return reused

    def add(self, other: PromptUsage) -> None:
        """Count another's prompts too (a shard's, into the round's)."""
        self.turns += other.turns
        self.prompt_tokens += other.prompt_tokens
        self.reused_tokens += other.reused_tokens


class PrefixReuse:
    """Each LLM agent's previous prompt (in pieces), and the reuse of the next one."""

    def __init__(self) -> None:
        self.previous: dict[int, tuple[str, ...]] = {}

    def measure(self, agent: int, pieces: Sequence[str]) -> int:
        """Tokens of this prompt of `agent` equal to the start of its previous prompt
        (0 for its first); the prompt becomes its previous one."""
        pieces = tuple(pieces)
        before = self.previous.get(agent)
        self.previous[agent] = pieces
        return 0 if before is None else reused_tokens(before, pieces)

    def remember(self, agent: int, pieces: Sequence[str] | None) -> None:
        """Take `pieces` as `agent`'s previous prompt (None: it has none), as measured
        elsewhere (a shard that built the prompt, or the driver before it)."""
        if pieces is None:
            self.previous.pop(agent, None)
        else:
            self.previous[agent] = tuple(pieces)

    def get_state(self) -> State:
        """Every agent's previous prompt: its pieces, each distinct piece stored once
        (agents of a round share their round memory and much else)."""
        agents = sorted(self.previous)
        ids: dict[str, int] = {}
        index = [ids.setdefault(p, len(ids)) for a in agents for p in self.previous[a]]
        blob, ends = encode_texts(list(ids))
        return State(arrays={
            "agent": np.asarray(agents, np.int64),
            "n_pieces": np.asarray([len(self.previous[a]) for a in agents], np.int32),
            "piece": np.asarray(index, np.int32), "text": blob, "text_ends": ends})

    def set_state(self, state: State) -> None:
        """Inverse of `get_state`."""
        a = state.arrays
        texts = decode_texts(a["text"], a["text_ends"])
        pieces = [texts[i] for i in a["piece"].tolist()]
        counts = a["n_pieces"].tolist()
        ends = np.cumsum(counts, dtype=np.int64).tolist()
        self.previous = {agent: tuple(pieces[end - n:end]) for agent, n, end in
                         zip(a["agent"].tolist(), counts, ends, strict=True)}

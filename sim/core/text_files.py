"""Reading a user's text file (an edge list, a stance file) with errors that name it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shoal.core.errors import InputError


def read_user_text(path: Path, what: str, hint: str) -> str:
    """The UTF-8 text of `path` (a BOM is dropped). A file that cannot be read, is not
    UTF-8 or holds NUL bytes (a binary file) is an InputError naming the file, saying it
    is meant to be `what`, with `hint` on how to fix it."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start} cannot be decoded); "
                         f"{hint}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the {what}: {exc.strerror}") from None
    if "\x00" in text:
        raise InputError(f"{path}: not a text file (it holds NUL bytes); {hint}")
    return text


class DuplicateKey(Exception):
    """A JSON object that gives a key twice (json.loads would silently keep the last)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads`'s object_pairs_hook for a user's file: DuplicateKey (the key) where an
    object gives a key twice."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out

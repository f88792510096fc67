"""Files written whole or not at all: a reader (another process, a notebook, a resume
after a crash) sees the old file or the new one, never half of one.

Every file Shoal replaces while others may read it goes through `replacing`: the writer
writes a hidden temporary sibling, which is renamed over the file when it is complete (a
rename within a folder is atomic) and removed if the writing fails (a full disk leaves no
stray half file)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary sibling of `path` for any writer (text, Parquet, DuckDB's COPY, numpy);
    renamed over `path` when the block ends, removed if it raises."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename is not None and Path(exc.filename) == tmp:
            # the error names the file the user asked for, not our temporary sibling
            raise type(exc)(exc.errno, exc.strerror, str(path)) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8), whole or not at all."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def not_a_file(path: str | Path) -> str | None:
    """Why `path` cannot be read as a file, in a few words, or None if it is a regular
    file: missing, a folder, or a pipe or device (which exists, so 'not found' would
    mislead; and read once it is gone, or blocks without a writer)."""
    p = Path(path)
    if p.is_file():
        return None
    if p.is_dir():
        return "a folder, not a file"
    if special(p):
        return "not a regular file (a pipe or device)"
    return "file not found"


def special(path: str | Path) -> bool:
    """Whether `path` exists but is neither a regular file nor a folder (a pipe, a
    device, a socket): found by stat, which does not block on a pipe as open would."""
    p = Path(path)
    return p.exists() and not p.is_file() and not p.is_dir()

"""The validation cases' data: files shipped in `shoal/validation/data/`, each with the
public source it came from, its licence and its SHA-256. A file is read only after its
hash checks, so a case never runs on data that changed under it.

`python -m shoal.validation.data fetch [--to DIR]` downloads each file again from its
public source and checks it against the same hash (for users who want to see that the
shipped copy is the published one); `... check` checks the shipped copies."""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

from shoal.core.errors import InputError

FOLDER = Path(__file__).with_name("data")


@dataclass(frozen=True)
class DataFile:
    """One shipped file: its name in `FOLDER`, where it was published, under which
    licence, and its SHA-256. `derived`: how the shipped file was made from the source
    when it is not a byte copy (then `fetch` checks the source's own hash, `source_sha256`)."""

    name: str
    url: str
    licence: str
    sha256: str
    derived: str = ""
    source_sha256: str = ""


FILES: dict[str, DataFile] = {}


def register(file: DataFile) -> DataFile:
    """Declare a shipped file (a case module does, for the files it reads)."""
    FILES[file.name] = file
    return file


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def path(name: str) -> Path:
    """The checked path of a shipped file (InputError if it is missing or changed)."""
    file = FILES.get(name)
    if file is None:
        raise InputError(f"no validation data file {name!r}; known: "
                         f"{', '.join(sorted(FILES)) or 'none'}")
    where = FOLDER / name
    if not where.is_file():
        raise InputError(f"{where}: the validation data file is missing (reinstall Shoal, "
                         f"or fetch it: python -m shoal.validation.data fetch)")
    found = sha256(where)
    if found != file.sha256:
        raise InputError(f"{where}: SHA-256 {found} is not the published file's "
                         f"{file.sha256}; the data changed, so no case reads it")
    return where


def fetch(to: Path) -> list[str]:
    """Download every file from its public source into `to` and check its hash (the
    cases must be loaded: they declare the files); returns one line per file."""
    import httpx

    to.mkdir(parents=True, exist_ok=True)
    lines = []
    for file in FILES.values():
        body = httpx.get(file.url, follow_redirects=True, timeout=60).raise_for_status().content
        want = file.source_sha256 or file.sha256
        got = hashlib.sha256(body).hexdigest()
        if got != want:
            raise InputError(f"{file.url}: SHA-256 {got}, expected {want}")
        saved = to / Path(file.url).name
        saved.write_bytes(body)
        lines.append(f"{file.name}: {file.url} checks ({want[:12]}…) → {saved}"
                     + (f"; shipped derived: {file.derived}" if file.derived else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shoal.validation.data")
    sub = p.add_subparsers(dest="what", required=True)
    sub.add_parser("check", help="check the shipped files' hashes")
    f = sub.add_parser("fetch", help="download the files from their public sources")
    f.add_argument("--to", default="validation-data", help="folder (default: validation-data)")
    args = p.parse_args(argv)
    # run as `python -m`, this file is `__main__`: the cases register their files in the
    # module `shoal.validation.data`, so read them there
    from shoal.validation import data
    from shoal.validation.case import load_cases

    try:
        load_cases()
        if args.what == "fetch":
            print("\n".join(data.fetch(Path(args.to))))
        else:
            for name, file in sorted(data.FILES.items()):
                data.path(name)
                print(f"{name}: ok ({file.sha256[:12]}…, {file.licence}, {file.url})")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

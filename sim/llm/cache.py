"""The LLM response cache: answers kept by the exact request that was sent, so a resumed
run, a fork or a replay does not pay for an answer twice.

The key is the sha256 of the request body as sent (model, messages, tools, tool choice,
sampling options, seed, `extra_body`) in canonical JSON; the endpoint is not part of it.
An entry is the answer (the message and its usage) and the HTTP requests it took. Entries
live in a folder of JSONL files, one file per writing process and shard
(`<run_id>.<writer>.<pid>.jsonl`), so writers never share a file; a line is written,
flushed and fsynced before its answer is used, so a run killed mid-round keeps every answer
it got (a line torn by the kill is skipped when read).

Modes (`llm.cache`): `record` asks the endpoint and stores every answer, reading back only
the answers of its own lineage (this run's: a resumed run re-uses what it already paid
for; and those of the runs it was forked from); `auto` reads every answer it finds (other
runs' in a shared `cache_dir` too), asking only on a miss; `replay` only reads, and a miss
stops the run (`CacheMiss`). An answer this run stored
before a crash is given back as the request it was (its rows of `llm_calls` say what was
paid, as the lost ones did); any other found answer is a hit, one row that cost nothing.

Every entry carries `sum`, the sha256 of the rest of the entry (its request key, its
answer, what the answer cost) in canonical JSON. An entry is checked when it is about to
be used: one that does not match its sum, one written before entries had one, and a key
two entries of the folders read answer differently are refused (`CacheCorrupt`, naming
the files and lines; the run stops before the round is applied). The sum guards against
accidental edits, damage and entries swapped between requests; it is no signature: whoever
can write the folder can write entries that check (docs/llm.md, the trust model).
`python -m shoal.llm.cache --stamp FOLDER` adds sums to the entries of an older Shoal, for a
folder one trusts.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import hashlib
import os
import queue
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from shoal.config.llm import LLMConfig, ProviderConfig
from shoal.core.errors import InputError, StorageFull, out_of_space
from shoal.llm.chat import Attempt, ChatModel, ChatReply, ChatRequest

CACHE_FOLDER = "llm_cache"  # in a run directory
MODES = ("record", "replay", "auto")
_KEPT = ("base_url", "status", "http_status", "error", "prompt_tokens", "completion_tokens",
         "latency_ms", "wait_ms", "cache", "cached_tokens")  # what an entry keeps of each request
# Refusals of the request itself (a server without tool support says 400 or 422) are
# answers too: the same request gets them again, and a replay must meet them to switch
# to JSON in text as the recorded run did. Other failures are not kept.
_KEPT_REFUSALS = (400, 422)


class CacheMiss(InputError):
    """`llm.cache: replay` and the cache has no answer for a request (`key`), in the
    folders `searched`. (The message is the one argument, so it pickles: a Ray shard's
    miss reaches the driver whole.)"""

    def __init__(self, message: str, key: str = "", searched: list[Path] | tuple = ()):
        super().__init__(message)
        self.key = key
        self.searched = list(searched)


class CacheCorrupt(CacheMiss):
    """The cache has an answer for a request but it cannot be trusted (`detail` says
    where and why: a checksum that does not match, two different answers, an entry
    without a checksum); in any mode the run stops, as for a replay's miss."""

    def __init__(self, message: str, key: str = "", searched: list[Path] | tuple = (),
                 detail: str = "", advice: str = ""):
        super().__init__(message, key, searched)
        self.detail = detail or message
        self.advice = advice

    def named(self, agent: int, round_: int, platform: str, call: int) -> CacheCorrupt:
        """The same refusal, said with the request it is about."""
        return CacheCorrupt(
            f"llm.cache: the cached answer to agent {agent}'s request in round {round_} "
            f"({platform}, call {call}; request key {self.key[:12]}) cannot be trusted: "
            f"{self.detail}. Nothing of round {round_} was applied; {self.advice}",
            self.key, self.searched, self.detail, self.advice)


class CacheFull(StorageFull):
    """No space left on the device of the cache's folder; `device_of` says which (the run
    says it instead of its own directory)."""

    def __init__(self, message: str, device_of: str = ""):
        super().__init__(message)
        self.device_of = device_of


_UNTRUSTED = ("remove the file (or its line) you do not trust, or point llm.cache_dir at "
              "a folder only trusted runs write (docs/llm.md, the response cache)")
_UNSTAMPED = ("if you trust that folder, `python -m shoal.llm.cache --stamp FOLDER` adds the "
              "checksums; otherwise record the answers again (llm.cache: record)")


def entry_sum(entry: dict) -> str:
    """An entry's checksum: sha256 of its canonical JSON (keys sorted), `sum` left out."""
    body = {k: v for k, v in entry.items() if k != "sum"}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _answer(entry: dict) -> tuple:
    """What an entry answers (what a run uses of it): two entries of one key that differ
    here disagree; their costs and timings may differ."""
    return (entry.get("status"), entry.get("http_status"), entry.get("error"),
            orjson.dumps(entry.get("message"), option=orjson.OPT_SORT_KEYS))


@dataclass(frozen=True)
class _Where:
    """Where an entry is: its file, byte range and line (1-based), and whether this run
    stored it before this process."""

    path: Path
    offset: int
    length: int
    line: int
    own: bool

    def __str__(self) -> str:
        return f"line {self.line} of {self.path}"


@dataclass(frozen=True)
class CacheSpec:
    """Where a run's cache is written and read (picklable: Ray shards get it)."""

    mode: str  # record | replay | auto
    run_id: str
    write_dir: Path | None  # None: kept in memory only (an in-memory run, no cache_dir)
    read_dirs: tuple[Path, ...] = ()  # the caches of the runs it was forked from
    lineage_runs: tuple[str, ...] = ()  # their run ids (what `record` may read)


def cache_spec(llm: LLMConfig | None, run_id: str, run_root: Path | None,
               ancestors: Sequence[Path] = ()) -> CacheSpec | None:
    """The cache of a run (None when `llm.cache` is off): its own folder in `run_root`, or
    the shared `llm.cache_dir`, and the folders of the run directories it descends from
    (`ancestors`, whose folder names are their run ids). InputError naming `llm.cache_dir` when that
    cannot be a folder of answers."""
    if llm is None or llm.cache == "off":
        return None
    if llm.cache_dir is not None:
        shared = Path(llm.cache_dir).expanduser()
        if shared.exists() and not shared.is_dir():
            raise InputError(f"llm.cache_dir: {llm.cache_dir} is a file, not a folder")
        if llm.cache == "replay" and not shared.is_dir():
            raise InputError(f"llm.cache_dir: {llm.cache_dir}: no such folder; with "
                             "llm.cache: replay it must hold recorded answers (a run's "
                             f"{CACHE_FOLDER}/ folder)")
        write = shared
    else:
        write = run_root / CACHE_FOLDER if run_root is not None else None
    reads = tuple(Path(a) / CACHE_FOLDER for a in ancestors if Path(a) / CACHE_FOLDER != write)
    return CacheSpec(llm.cache, run_id, write, reads, tuple(Path(a).name for a in ancestors))


def request_key(body: dict) -> str:
    """The cache key of a request body: sha256 of its canonical JSON (keys sorted)."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


class ResponseCache:
    """One writer's view of a cache: an index of the entries it may read (loaded once),
    the entries it stored since, and a thread that writes and fsyncs new entries in
    batches (one fsync for every entry waiting)."""

    def __init__(self, spec: CacheSpec, writer: str = "s0"):
        self.spec = spec
        self.mode = spec.mode
        self.path = (spec.write_dir / f"{spec.run_id}.{writer}.{os.getpid()}.jsonl"
                     if spec.write_dir is not None and spec.mode != "replay" else None)
        self._index: dict[str, _Where] = {}
        # keys that entries of the folders read answer differently: where each one is
        self._conflicts: dict[str, list[_Where]] = {}
        self._fresh: dict[str, dict] = {}  # stored by this process
        self._files: dict[Path, int] = {}  # descriptors of the files read, kept open
        for folder in [*spec.read_dirs, *([spec.write_dir] if spec.write_dir else [])]:
            self._load(folder)
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None

    @property
    def searched(self) -> list[Path]:
        """The folders this cache reads."""
        return [*([self.spec.write_dir] if self.spec.write_dir else []), *self.spec.read_dirs]

    def _load(self, folder: Path) -> None:
        """Index the entries of a folder's files (record: only its lineage's), noting the
        keys two entries answer differently."""
        if not folder.is_dir():
            return
        lineage = {self.spec.run_id, *self.spec.lineage_runs}
        for path in sorted(folder.glob("*.jsonl")):
            if self.mode == "record" and path.name.split(".")[0] not in lineage:
                continue
            with open(path, "rb") as f:
                offset = 0
                for number, line in enumerate(f, 1):
                    length = len(line)
                    if line.endswith(b"\n"):  # (a line torn by a kill has no end)
                        try:
                            head = orjson.loads(line)
                            key, run = head["key"], head["run"]
                        except (orjson.JSONDecodeError, KeyError, TypeError):
                            key = run = None
                        if isinstance(key, str) and (self.mode != "record" or run in lineage):
                            here = _Where(path, offset, length, number, run == self.spec.run_id)
                            self._add(key, here, head)
                    offset += length

    def _add(self, key: str, here: _Where, entry: dict) -> None:
        """Index an entry; a key already indexed with another answer is a conflict."""
        before = self._index.get(key)
        if before is not None:
            try:
                same = _answer(self._read(before)) == _answer(entry)
            except (OSError, orjson.JSONDecodeError, AttributeError):
                same = False
            if not same:
                self._conflicts.setdefault(key, [before]).append(here)
        self._index[key] = here

    def _read(self, where: _Where) -> dict:
        fd = self._files.get(where.path)
        if fd is None:
            fd = self._files[where.path] = os.open(where.path, os.O_RDONLY)
        return orjson.loads(os.pread(fd, where.length, where.offset))

    def _checked(self, key: str, where: _Where) -> dict:
        """The entry at `where`, or CacheCorrupt when it does not check."""
        try:
            entry = self._read(where)
        except (OSError, orjson.JSONDecodeError):
            entry = None
        if not isinstance(entry, dict) or entry.get("key") != key:
            problem, advice = "can no longer be read (the file changed)", _UNTRUSTED
        elif "sum" not in entry:
            problem = "was written before cache entries carried a checksum (an older Shoal)"
            advice = _UNSTAMPED
        elif entry["sum"] != entry_sum(entry):
            problem = ("does not match its checksum: it was edited or damaged after it was "
                       "written")
            advice = _UNTRUSTED
        else:
            return entry
        raise CacheCorrupt(f"{where} {problem}", key, [where.path], f"{where} {problem}",
                           advice)

    def get(self, key: str) -> tuple[dict, bool] | None:
        """The entry for `key` and whether this run stored it before this process (then
        its requests were paid for, and their rows lost with the process); None if none.
        CacheCorrupt for an entry that does not check, or a key answered differently."""
        if key in self._fresh:
            return self._fresh[key], False
        found = self._index.get(key)
        if found is None:
            return None
        if key in self._conflicts:
            places = self._conflicts[key]
            for where in places:  # a damaged one is said as such
                self._checked(key, where)
            listed = " and ".join(str(w) for w in places)
            detail = f"{listed} give different answers to the same request"
            raise CacheCorrupt(detail, key, sorted({w.path for w in places}), detail,
                               _UNTRUSTED)
        return self._checked(key, found), found.own

    async def put(self, key: str, entry: dict) -> None:
        """Store an entry (with its checksum); returns once it is on disk (fsynced)."""
        entry = {"key": key, "run": self.spec.run_id, **entry}
        entry["sum"] = entry_sum(entry)
        self._fresh[key] = entry
        if self.path is None:
            return
        if self._thread is None:
            self._queue = queue.Queue()
            self._thread = threading.Thread(target=self._write_loop, name="shoal-llm-cache",
                                            daemon=True)
            self._thread.start()
        done: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((orjson.dumps(entry) + b"\n", done))
        await asyncio.wrap_future(done)

    def _write_loop(self) -> None:
        assert self._queue is not None and self.path is not None
        fd, failed = None, None
        while True:
            batch = [self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            stop = any(item is None for item in batch)
            batch = [item for item in batch if item is not None]
            if batch and failed is None:
                try:
                    if fd is None:
                        self.path.parent.mkdir(parents=True, exist_ok=True)
                        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                        _fsync_dir(self.path.parent)  # the new file's name is durable too
                    lines = [line for line, _ in batch]
                    try:
                        _append_whole(fd, lines)
                    except OSError as exc:
                        if not out_of_space(exc) or len(lines) == 1:
                            raise
                        # the group did not fit: keep as many whole answers as do, one
                        # by one, so that a resume asks the server for fewer again
                        for line in lines:
                            _append_whole(fd, [line])
                except OSError as exc:
                    failed = self._write_error(exc)
            for _, done in batch:
                # its caller may have stopped waiting (the run stopping): atomically, a
                # cancelled future is left alone and any other can no longer be cancelled
                if not done.set_running_or_notify_cancel():
                    continue
                if failed is None:
                    done.set_result(None)
                else:
                    done.set_exception(failed)
            if stop:
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                return

    def _write_error(self, exc: OSError) -> InputError:
        """What a failed write is said as: the folder whose disk is full, or why the
        file cannot be written."""
        assert self.path is not None
        if out_of_space(exc):
            return CacheFull(f"no space left on the device of {self.path.parent} (the LLM "
                             "cache)", f"{self.path.parent} (the LLM cache)")
        return InputError(f"the LLM cache cannot write {self.path}: {exc.strerror or exc}")

    def close(self) -> None:
        """Stop the writer thread (everything stored is on disk already) and close the
        files read."""
        if self._thread is not None and self._queue is not None:
            self._queue.put(None)
            self._thread.join(10)
            self._thread = None
        for fd in self._files.values():
            os.close(fd)
        self._files.clear()


def _append_whole(fd: int, lines: list[bytes]) -> None:
    """Append `lines` and fsync, or leave the file as it was: no torn line is left behind
    when the disk fills (the file keeps the whole entries stored before)."""
    size = os.fstat(fd).st_size
    try:
        _write_all(fd, b"".join(lines))
        os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def _write_all(fd: int, data: bytes) -> None:
    """Write all of `data` (os.write may write part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # (some filesystems refuse to fsync a directory)
    finally:
        os.close(fd)


class CachedChat(ChatModel):
    """A chat model behind the response cache: a found answer is given back at once, a
    missing one is asked of the model (not in `replay`: `CacheMiss`) and stored before it
    is returned."""

    def __init__(self, inner: ChatModel, cache: ResponseCache):
        self.inner = inner
        self.provider: ProviderConfig = inner.provider
        self.cache = cache

    def body(self, request: ChatRequest) -> dict:
        """What the model sends for `request`."""
        return self.inner.body(request)

    def redact(self, text: str) -> str:
        """`text` without the model's secrets."""
        return self.inner.redact(text)

    async def close(self) -> None:
        """Close the model's connections."""
        await self.inner.close()

    async def chat(self, request: ChatRequest, key: int = 0,
                   attempts: list[Attempt] | None = None) -> ChatReply:
        """The cached answer, or the model's (stored before it is returned)."""
        attempts = attempts if attempts is not None else []
        start = time.perf_counter()
        digest = request_key(self.inner.body(request))
        found = self.cache.get(digest)
        if found is not None:
            entry, own = found
            return _replayed(entry, own, attempts, 1e3 * (time.perf_counter() - start))
        if self.cache.mode == "replay":
            raise CacheMiss(f"the LLM cache has no answer for request {digest[:12]}", digest,
                            self.cache.searched)
        first = len(attempts)
        try:
            reply = await self.inner.chat(request, key, attempts)
        finally:  # (also when the round's deadline cancels the call)
            for a in attempts[first:]:
                a.cache = "miss"
        if reply.status == "ok" or (reply.status == "http_error"
                                    and reply.http_status in _KEPT_REFUSALS):
            await self.cache.put(digest, {
                "status": reply.status, "error": reply.error, "message": reply.message,
                "usage": {"prompt_tokens": reply.prompt_tokens,
                          "completion_tokens": reply.completion_tokens,
                          "cached_tokens": reply.cached_tokens},
                "http_status": reply.http_status, "latency_ms": reply.latency_ms,
                "attempts": [{k: v for k, v in asdict(a).items() if k in _KEPT}
                             for a in attempts[first:]]})
        return reply


def _replayed(entry: dict, own: bool, attempts: list[Attempt], ms: float) -> ChatReply:
    """The reply an entry gives: the requests it took, as they were (`own`: this run paid
    for them before it was interrupted), or one request-free hit."""
    message, usage = entry["message"], entry.get("usage") or {}
    if own:
        made = [Attempt(**a) for a in entry["attempts"]]
        made[-1].message = message
        latency = entry.get("latency_ms", 0.0)
    else:
        last = entry["attempts"][-1] if entry.get("attempts") else {}
        made = [Attempt(last.get("base_url", ""), entry.get("status", "ok"),
                        entry.get("http_status"), error=entry.get("error", ""),
                        prompt_tokens=usage.get("prompt_tokens"),
                        completion_tokens=usage.get("completion_tokens"), latency_ms=ms,
                        message=message, cache="hit",
                        cached_tokens=usage.get("cached_tokens"))]
        latency = ms
    attempts.extend(made)
    final = made[-1]
    return ChatReply(message, final.status, final.http_status, error=final.error,
                     prompt_tokens=final.prompt_tokens,
                     completion_tokens=final.completion_tokens, latency_ms=latency,
                     retries=len(made) - 1, base_url=final.base_url, attempts=attempts,
                     cached_tokens=final.cached_tokens)


def stamp(folder: Path) -> tuple[int, int]:
    """Add checksums to the entries of `folder` that have none (written by an older
    Shoal), for a folder one trusts: each file is rewritten whole and renamed into place.
    Returns (entries stamped, lines left as they were: unreadable, or with a checksum
    already)."""
    stamped = kept = 0
    for path in sorted(Path(folder).glob("*.jsonl")):
        out = []
        changed = False
        for line in path.read_bytes().splitlines(keepends=True):
            try:
                entry = orjson.loads(line) if line.endswith(b"\n") else None
            except orjson.JSONDecodeError:
                entry = None
            if isinstance(entry, dict) and "key" in entry and "sum" not in entry:
                entry["sum"] = entry_sum(entry)
                out.append(orjson.dumps(entry) + b"\n")
                stamped += 1
                changed = True
            else:
                out.append(line)
                kept += 1
        if changed:
            tmp = path.with_name(path.name + ".stamping")
            with open(tmp, "wb") as f:
                f.write(b"".join(out))
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(path)
            _fsync_dir(path.parent)
    return stamped, kept


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Shoal's LLM response cache")
    parser.add_argument("--stamp", metavar="FOLDER", required=True,
                        help="add checksums to the entries an older Shoal wrote in FOLDER "
                             "(only for a folder you trust)")
    args = parser.parse_args()
    if not Path(args.stamp).is_dir():
        print(f"error: --stamp {args.stamp}: no such folder", file=sys.stderr)
        sys.exit(2)
    done, left = stamp(Path(args.stamp))
    print(f"{args.stamp}: {done} entries stamped, {left} lines left as they were")

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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from sim.config.llm import LLMConfig, ProviderConfig
from sim.core.errors import InputError, StorageFull, out_of_space
from sim.llm.chat import Attempt, ChatModel, ChatReply, ChatRequest

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
        # key -> (file, offset, length, stored by this run before this process)
        self._index: dict[str, tuple[Path, int, int, bool]] = {}
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
        """Index the entries of a folder's files (record: only its lineage's)."""
        if not folder.is_dir():
            return
        lineage = {self.spec.run_id, *self.spec.lineage_runs}
        for path in sorted(folder.glob("*.jsonl")):
            if self.mode == "record" and path.name.split(".")[0] not in lineage:
                continue
            with open(path, "rb") as f:
                offset = 0
                for line in f:
                    length = len(line)
                    if line.endswith(b"\n"):  # (a line torn by a kill has no end)
                        try:
                            head = orjson.loads(line)
                            key, run = head["key"], head["run"]
                        except (orjson.JSONDecodeError, KeyError, TypeError):
                            key = run = None
                        if key and (self.mode != "record" or run in lineage):
                            self._index[key] = (path, offset, length, run == self.spec.run_id)
                    offset += length

    def get(self, key: str) -> tuple[dict, bool] | None:
        """The entry for `key` and whether this run stored it before this process (then
        its requests were paid for, and their rows lost with the process); None if none."""
        if key in self._fresh:
            return self._fresh[key], False
        found = self._index.get(key)
        if found is None:
            return None
        path, offset, length, own = found
        fd = self._files.get(path)
        if fd is None:
            fd = self._files[path] = os.open(path, os.O_RDONLY)
        return orjson.loads(os.pread(fd, length, offset)), own

    async def put(self, key: str, entry: dict) -> None:
        """Store an entry; returns once it is on disk (fsynced)."""
        entry = {"key": key, "run": self.spec.run_id, **entry}
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
        f = None
        while True:
            batch = [self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            stop = any(item is None for item in batch)
            batch = [item for item in batch if item is not None]
            try:
                if f is None and batch:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    f = open(self.path, "ab")  # noqa: SIM115 (open for the thread's life)
                    _fsync_dir(self.path.parent)  # the new file's name is durable too
                if batch:
                    f.write(b"".join(line for line, _ in batch))
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                error = (StorageFull(f"no space left on the device of {self.path.parent} "
                                     "(the LLM cache)") if out_of_space(exc) else
                         InputError(f"the LLM cache cannot write {self.path}: "
                                    f"{exc.strerror or exc}"))
                for _, done in batch:
                    done.set_exception(error)
            else:
                for _, done in batch:
                    done.set_result(None)
            if stop:
                if f is not None:
                    f.close()
                return

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

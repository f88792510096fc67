"""Checkpoints: everything needed to continue a run from the end of any round.

A checkpoint is made of components' states (shoal.core.state): the world composes them, this
module only writes and reads them. A checkpoint of round K has two parts, under
`runs/<id>/checkpoints/`:

- `log/round-K.npz` (+ `round-K.<component>.<table>.parquet` for tables, e.g. the agents
  who joined, + `round-K.meta.json` for JSON changes: round memory, digests,
  notifications): what round K *changed* in the journaled components (posts and their
  texts, counter increments, votes, reposts, follows, trust values set, exposures, memory
  items and summaries), and `log/round-K.json`, the checksums of those files. Logs are
  never rewritten, so each round costs what it changed, not what the run has accumulated.
- `state/round-K/`: the state of the other components at the end of round K (beliefs,
  membership, the living agents, pinned events, market books, the effective config), with
  its checksum, written to a temporary folder and renamed, so it appears whole or not at
  all. It is the commit point: round K is checkpointed iff this folder exists.

Restoring round K reads the state of K and the logs of rounds 0..K. Retention
(`checkpoints.every`, `keep_last`) prunes old state folders; logs stay, so any retained
state can be restored. Files of format 4 (Shoal 0.1: flat array names) are read and
upgraded on the fly, and format 5 (memory, digests and notifications kept whole in every
state) is read as it is, so runs made by earlier releases resume and fork.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shoal.core.faults import crash_point
from shoal.core.files import replacing
from shoal.core.registry import PluginError
from shoal.core.state import State, json_default
from shoal.store.npz import write_npz

FORMAT = 6  # bump when what a checkpoint holds changes; 4 and 5 are still read
READS = (4, 5, 6)
_NAME = re.compile(r"^round-(\d{6})$")


def _round_name(r: int) -> str:
    return f"round-{r:06d}"


def retained(rounds: list[int], every: int, keep_last: int | None) -> set[int]:
    """The checkpointed `rounds` (ascending) whose states are kept: round 0, the latest, and
    the multiples of `every` (only the last `keep_last` of those, if set)."""
    if not rounds:
        return set()
    wanted = [r for r in rounds if r % every == 0 and r != 0]
    if keep_last is not None:
        wanted = wanted[-keep_last:]
    return {0, rounds[-1], *wanted}

class CheckpointError(Exception):
    """A checkpoint that cannot be read (missing, damaged or inconsistent files)."""


@dataclass
class Checkpoint:
    """One round's checkpoint: its log segment, the state at its end, and metadata."""

    round: int
    log: dict[str, State]
    state: dict[str, State]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckpointStats:
    """Size and time of one round's checkpoint."""

    round: int
    log_bytes: int
    state_bytes: int
    ms: float


# ---------------------------------------------------------------------- file forms


def _flatten(components: dict[str, State]) -> dict[str, np.ndarray]:
    return {f"{name}/{key}": value for name, s in components.items()
            for key, value in s.arrays.items()}


def _unflatten(arrays: dict[str, np.ndarray]) -> dict[str, State]:
    out: dict[str, State] = {}
    for key, value in arrays.items():
        name, _, sub = key.partition("/")
        out.setdefault(name, State()).arrays[sub] = value
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


class CheckpointStore:
    """Reads and writes the checkpoints of one run directory."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.log_dir = self.root / "log"
        self.state_dir = self.root / "state"

    # ------------------------------------------------------------------ writing

    def write(self, cp: Checkpoint, every: int = 1, keep_last: int | None = None
              ) -> CheckpointStats:
        """Write round K's log segment, then its state (the commit point), then prune."""
        t = time.perf_counter()
        log_bytes = self.write_log(cp.round, cp.log)
        crash_point("mid_checkpoint", cp.round)
        state_bytes = self.write_state(cp.round, cp.state, cp.meta, log_bytes, t)
        self.prune(every, keep_last)
        return CheckpointStats(cp.round, log_bytes, state_bytes,
                               1e3 * (time.perf_counter() - t))

    def write_log(self, round_: int, log: dict[str, State]) -> int:
        """Write a round's log segment and its checksums; returns its size."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        name = _round_name(round_)
        files = {f"{name}.npz": _flatten(log)}
        sums = {}
        for fname, arrays in files.items():
            path = self.log_dir / fname
            self._atomic(path, lambda tmp, a=arrays: self._npz(tmp, a))
            sums[fname] = _sha256(path)
        for comp, s in log.items():
            for table_name, table in s.tables.items():
                path = self.log_dir / f"{name}.{comp}.{table_name}.parquet"
                self._atomic(path, lambda tmp, t=table: pq.write_table(t, tmp))
                sums[path.name] = _sha256(path)
        metas = {comp: s.meta for comp, s in log.items() if s.meta}
        if metas:
            path = self.log_dir / f"{name}.meta.json"
            self._atomic(path, lambda tmp: tmp.write_text(json.dumps(
                metas, default=json_default)))
            sums[path.name] = _sha256(path)
        manifest = self.log_dir / f"{name}.json"
        self._atomic(manifest, lambda tmp: tmp.write_text(json.dumps(
            {"format": FORMAT, "round": round_, "sha256": sums})))
        return sum((self.log_dir / f).stat().st_size for f in sums)

    def write_state(self, round_: int, state: dict[str, State], meta: dict[str, Any],
                    log_bytes: int = 0, started: float | None = None) -> int:
        """Write (or replace) the state of a round atomically; returns its size."""
        started = time.perf_counter() if started is None else started
        self.state_dir.mkdir(parents=True, exist_ok=True)
        name = _round_name(round_)
        tmp_dir = self.state_dir / f".{name}.tmp"
        shutil.rmtree(tmp_dir, ignore_errors=True)
        tmp_dir.mkdir()
        state_bytes = self._npz(tmp_dir / "state.npz", _flatten(state))
        full = {**meta, "format": FORMAT, "round": round_,
                "components": {k: s.meta for k, s in state.items()},
                "sha256": _sha256(tmp_dir / "state.npz"),
                "log_bytes": log_bytes, "state_bytes": state_bytes,
                "ms": 1e3 * (time.perf_counter() - started)}
        (tmp_dir / "meta.json").write_text(_meta_json(full, state))
        _fsync_dir(tmp_dir)
        final = self.state_dir / name
        shutil.rmtree(final, ignore_errors=True)  # a stale folder from an aborted attempt
        os.replace(tmp_dir, final)
        _fsync_dir(self.state_dir)
        return state_bytes

    @staticmethod
    def _npz(path: Path, arrays: dict[str, np.ndarray]) -> int:
        with open(path, "wb") as f:
            write_npz(f, arrays)
            f.flush()
            os.fsync(f.fileno())
        return path.stat().st_size

    @staticmethod
    def _atomic(path: Path, write: Callable[..., object]) -> None:
        # `write` is called with the temporary path (typed `...`: mypy cannot infer the
        # callers' lambdas whose default arguments bind loop variables)
        with replacing(path) as tmp:
            write(tmp)

    def prune(self, every: int, keep_last: int | None) -> None:
        """Drop state folders not retained: keep round 0, the latest, and the rounds that
        are multiples of `every` (only the last `keep_last` of those, if set)."""
        rounds = self.available()
        keep = retained(rounds, every, keep_last)
        for r in rounds:
            if r not in keep:
                shutil.rmtree(self.state_dir / _round_name(r), ignore_errors=True)

    # ------------------------------------------------------------------ reading

    def available(self) -> list[int]:
        """Rounds with a complete state folder, ascending."""
        if not self.state_dir.is_dir():
            return []
        out = []
        for p in self.state_dir.iterdir():
            m = _NAME.match(p.name)
            if m and (p / "meta.json").is_file():
                out.append(int(m.group(1)))
        return sorted(out)

    def latest(self) -> int | None:
        """The last checkpointed round, or None."""
        rounds = self.available()
        return rounds[-1] if rounds else None

    def meta(self, r: int) -> dict[str, Any]:
        """The state metadata of round r."""
        path = self.state_dir / _round_name(r) / "meta.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{path}: cannot be read: {exc}") from None

    def read_state(self, r: int) -> tuple[dict[str, State], dict[str, Any]]:
        """The components' states at the end of round r, and the checkpoint's metadata."""
        meta = self.meta(r)
        fmt = meta.get("format", 1)
        if fmt not in READS:
            raise CheckpointError(f"the checkpoint of round {r} was written by another "
                                  f"version of Shoal (format {fmt}; this version reads "
                                  f"formats {', '.join(map(str, READS))})")
        path = self.state_dir / _round_name(r) / "state.npz"
        if "sha256" in meta and _sha256(path) != meta["sha256"]:
            raise CheckpointError(f"{path}: damaged (its checksum does not match)")
        try:
            arrays = _load_npz(path)
        except (OSError, ValueError, EOFError) as exc:
            raise CheckpointError(f"{path}: cannot be read: {exc}") from None
        if fmt == 4:
            return _state_from_v4(arrays, meta), meta
        state = _unflatten(arrays)
        for name, m in meta.get("components", {}).items():
            state.setdefault(name, State()).meta = m
        return state, meta

    def read_logs(self, upto: int) -> list[dict[str, State]]:
        """The log segments of rounds 0..upto, in order (each must exist and be intact)."""
        return [self.read_log(r) for r in range(upto + 1)]

    def read_log(self, r: int) -> dict[str, State]:
        """The log segment of round r."""
        name = _round_name(r)
        path = self.log_dir / f"{name}.npz"
        if not path.is_file():
            raise CheckpointError(f"checkpoint log for round {r} is missing: {path}")
        manifest = self.log_dir / f"{name}.json"
        try:
            sums = json.loads(manifest.read_text())["sha256"] if manifest.is_file() else {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{manifest}: damaged, cannot be read ({type(exc).__name__}: "
                                  f"{exc})") from None
        for fname, digest in sums.items():
            if _sha256(self.log_dir / fname) != digest:
                raise CheckpointError(f"{self.log_dir / fname}: damaged (its checksum "
                                      "does not match)")
        try:
            arrays = _load_npz(path)
            if arrays and not any("/" in k for k in arrays):
                pop = self.log_dir / f"{name}.population.parquet"
                return _log_from_v4(r, arrays, pq.read_table(pop) if pop.is_file() else None)
            log = _unflatten(arrays)
            for table in self.log_dir.glob(f"{name}.*.parquet"):
                _, comp, table_name, _ = table.name.split(".")
                log.setdefault(comp, State()).tables[table_name] = pq.read_table(table)
            metas = self.log_dir / f"{name}.meta.json"
            if metas.is_file():
                for comp, m in json.loads(metas.read_text()).items():
                    log.setdefault(comp, State()).meta = m
        except (OSError, ValueError, EOFError) as exc:
            raise CheckpointError(f"{path}: cannot be read: {exc}") from None
        return log

    def truncate_after(self, r: int) -> None:
        """Forget everything after round r (logs, states, temporaries): used on resume."""
        for folder in (self.log_dir, self.state_dir):
            if not folder.is_dir():
                continue
            for p in folder.iterdir():
                m = re.match(r"^\.?round-(\d{6})", p.name)
                if p.name.endswith(".tmp") or (m and int(m.group(1)) > r):
                    if p.is_dir():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink(missing_ok=True)

    def size_bytes(self) -> tuple[int, int]:
        """Total bytes of (logs, retained states)."""
        def total(folder: Path) -> int:
            return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) \
                if folder.is_dir() else 0
        return total(self.log_dir), total(self.state_dir)

    def link_logs_into(self, other: CheckpointStore, upto: int) -> None:
        """Give `other` (a fork) the logs of rounds 0..upto by hard links where possible
        (files are never modified in place, so sharing them is safe)."""
        other.log_dir.mkdir(parents=True, exist_ok=True)
        for p in sorted(self.log_dir.iterdir()):
            m = _NAME.match(p.name.split(".")[0])
            if m and int(m.group(1)) <= upto and not p.name.endswith(".tmp"):
                _link_or_copy(p, other.log_dir / p.name)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _fsync_dir(path: Path) -> None:
    """Make a rename durable (POSIX: fsync the directory)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- format 4


def _log_from_v4(round_: int, a: dict[str, np.ndarray], population: pa.Table | None
                 ) -> dict[str, State]:
    """A format-4 log segment (flat names, one follows table for every platform) as
    components."""
    posts = {k.removeprefix("posts."): v for k, v in a.items() if k.startswith("posts.")}
    posts.update({k: v for k, v in a.items() if k.startswith("counters.")})
    out = {"posts": State(arrays=posts)}
    if "trust.keys" in a:
        out["trust"] = State(arrays={"keys": a["trust.keys"], "values": a["trust.values"]})
    if "exposures.keys" in a:
        keys = a["exposures.keys"]
        out["history"] = State(arrays={"keys": keys,
                                       "rounds": np.full(len(keys), round_, np.int32)})
    codes = {int(k.split(".")[1]) for k in a if k.startswith(("votes.", "reposts."))}
    if "follows.platform" in a:
        codes |= set(np.unique(a["follows.platform"]).astype(int).tolist())
    for code in sorted(codes):
        mine = a["follows.platform"] == code if "follows.platform" in a else None
        empty = np.empty(0, np.int64)
        out[f"platform.{code}"] = State(arrays={
            "votes": a.get(f"votes.{code}", empty), "reposts": a.get(f"reposts.{code}", empty),
            "follower": a["follows.follower"][mine] if mine is not None else empty,
            "followee": a["follows.followee"][mine] if mine is not None else empty,
            "op": a["follows.op"][mine] if mine is not None else np.empty(0, np.int8)})
    if population is not None:
        out["population"] = State(tables={"agents": population})
    return out


def _state_from_v4(a: dict[str, np.ndarray], meta: dict[str, Any]) -> dict[str, State]:
    """A format-4 state (flat names, component metadata at the top level) as components."""
    return {
        "beliefs": State(arrays={"position": a["position"], "confidence": a["confidence"]}),
        "world": State(arrays={k: a[k] for k in ("alive", "joined", "last_means",
                                                  "initial_position")}),
        "membership": State(arrays={k.split(".")[1]: v for k, v in a.items()
                                    if k.startswith("members.")}),
        "interventions": State(arrays={k: v for k, v in a.items()
                                       if k.startswith("event_target.")},
                               meta=meta.get("interventions", {})),
        "memory": State(arrays={k: v for k, v in a.items() if k.startswith("audience.")},
                        meta=meta.get("memory", {})),
        "digest": State(meta=meta.get("digest", {})),
        "notifications": State(meta=meta.get("notifications", {})),
    }


class MemoryCheckpoints:
    """Checkpoints held in memory, for a simulation without a run directory (`out=None`):
    the same interface as `CheckpointStore`, the same retention; `save_into` writes them
    to a run directory's store. States and logs are never modified once written, so a
    fork can share them."""

    def __init__(self) -> None:
        self.logs: dict[int, dict[str, State]] = {}
        self.states: dict[int, tuple[dict[str, State], dict[str, Any]]] = {}

    def write(self, cp: Checkpoint, every: int = 1, keep_last: int | None = None
              ) -> CheckpointStats:
        """Keep round K's log segment and state, then prune like `CheckpointStore`."""
        t = time.perf_counter()
        self.logs[cp.round] = cp.log
        self.write_state(cp.round, cp.state, cp.meta)
        self.prune(every, keep_last)
        return CheckpointStats(cp.round, sum(s.nbytes() for s in cp.log.values()),
                               sum(s.nbytes() for s in cp.state.values()),
                               1e3 * (time.perf_counter() - t))

    def write_state(self, round_: int, state: dict[str, State], meta: dict[str, Any],
                    *_: object) -> int:
        """Keep (or replace) the state of a round."""
        self.states[round_] = (state, {**meta, "format": FORMAT, "round": round_,
                                       "log_bytes": 0, "state_bytes": 0, "ms": 0.0})
        return sum(s.nbytes() for s in state.values())

    def prune(self, every: int, keep_last: int | None) -> None:
        """Forget states not retained (the rule of `CheckpointStore.prune`)."""
        rounds = self.available()
        for r in set(rounds) - retained(rounds, every, keep_last):
            del self.states[r]

    def available(self) -> list[int]:
        """Rounds with a state, ascending."""
        return sorted(self.states)

    def latest(self) -> int | None:
        """The last checkpointed round, or None."""
        return max(self.states) if self.states else None

    def meta(self, r: int) -> dict[str, Any]:
        """The state metadata of round r."""
        return self.states[r][1]

    def read_state(self, r: int) -> tuple[dict[str, State], dict[str, Any]]:
        """The components' states at the end of round r, and its metadata."""
        if r not in self.states:
            raise CheckpointError(f"no checkpoint of round {r} in memory")
        return self.states[r]

    def read_logs(self, upto: int) -> list[dict[str, State]]:
        """The log segments of rounds 0..upto."""
        missing = [r for r in range(upto + 1) if r not in self.logs]
        if missing:
            raise CheckpointError(f"checkpoint log for round {missing[0]} is missing")
        return [self.logs[r] for r in range(upto + 1)]

    def truncate_after(self, r: int) -> None:
        """Forget everything after round r."""
        for store in (self.logs, self.states):
            for k in [k for k in store if k > r]:
                del store[k]

    def share_into(self, other: MemoryCheckpoints, upto: int) -> None:
        """Give `other` (a fork) the logs of rounds 0..upto (shared, never modified)."""
        other.logs.update({r: log for r, log in self.logs.items() if r <= upto})

    def save_into(self, store: CheckpointStore) -> None:
        """Write every log segment and kept state to a run directory's store."""
        for r in sorted(self.logs):
            store.write_log(r, self.logs[r])
        for r, (state, meta) in sorted(self.states.items()):
            keep = {k: v for k, v in meta.items()
                    if k not in ("format", "round", "log_bytes", "state_bytes", "ms")}
            store.write_state(r, state, keep)


def _meta_json(full: dict[str, Any], state: dict[str, State]) -> str:
    """A checkpoint's meta.json text. Numpy scalars are saved as their Python values;
    anything else JSON cannot hold is an error naming the component whose state holds it
    (saved as its str(), it would come back as a string)."""
    try:
        return json.dumps(full, default=json_default)
    except (TypeError, ValueError):
        for name, s in state.items():
            try:
                json.dumps(s.meta, default=json_default)
            except (TypeError, ValueError) as exc:
                kind, _, key = name.partition(".")
                part = {"recommender": f"the recommender of the platform with code {key}",
                        "engine": f"the engine of platform {key!r}"}.get(kind, "a part")
                raise PluginError(f"the state of {name!r} ({part}) cannot be kept in a "
                                  f"checkpoint (its get_state's meta must hold JSON values): "
                                  f"{exc}") from exc
        raise


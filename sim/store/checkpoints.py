"""Checkpoints: everything needed to continue a run from the end of any round.

A checkpoint of round K has two parts, under `runs/<id>/checkpoints/`:

- `log/round-K.npz` (+ `round-K.population.parquet` when agents joined): what round K
  *added* to the append-only structures — new posts with their texts, counter increments,
  votes, reposts, follow-graph changes, trust values set, exposures. Logs are never
  rewritten, so each round costs what it added, not the size of the world.
- `state/round-K/`: the small mutable state at the end of round K — beliefs, membership,
  the living agents, active events, fired interventions, the effective config — written
  to a temporary folder and renamed, so it appears whole or not at all. It is the commit
  point: round K is checkpointed iff this folder exists.

Restoring round K loads the state of K and replays the logs of rounds 0..K; derived
indexes (per-author buffers, inboxes) are rebuilt from posts and the graph. Retention
(`checkpoints.every`, `keep_last`) prunes old state folders; logs stay, so any retained
state can be restored.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sim.core.faults import crash_point
from sim.core.keys import unique_sorted

_NAME = re.compile(r"^round-(\d{6})$")
FORMAT = 4  # bump when what a checkpoint holds changes; older ones are refused clearly


def _round_name(r: int) -> str:
    return f"round-{r:06d}"


def encode_texts(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Texts as one UTF-8 byte array plus end offsets (npz holds them without pickle)."""
    encoded = [t.encode("utf-8") for t in texts]
    ends = np.cumsum([len(b) for b in encoded], dtype=np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), ends


def decode_texts(blob: np.ndarray, ends: np.ndarray) -> list[str]:
    """Inverse of `encode_texts`."""
    if not len(ends):
        return []
    raw = blob.tobytes()
    starts = np.concatenate(([0], ends[:-1]))
    return [raw[a:b].decode("utf-8") for a, b in zip(starts.tolist(), ends.tolist(),
                                                     strict=True)]


@dataclass
class RoundDelta:
    """What one round added to the append-only parts of the world."""

    round: int
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    population: pa.Table | None = None  # agents that joined this round (round 0: all)

    def bytes(self) -> int:
        """Payload size, for the summary."""
        return int(sum(a.nbytes for a in self.arrays.values()))


@dataclass
class Snapshot:
    """The mutable state at the end of a round (arrays + JSON-able metadata)."""

    round: int
    arrays: dict[str, np.ndarray]
    meta: dict


@dataclass
class CheckpointStats:
    """Size and time of one round's checkpoint."""

    round: int
    log_bytes: int
    state_bytes: int
    ms: float


class CheckpointStore:
    """Reads and writes the checkpoints of one run directory."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.log_dir = self.root / "log"
        self.state_dir = self.root / "state"

    # ------------------------------------------------------------------ writing

    def write(self, delta: RoundDelta, snapshot: Snapshot, every: int = 1,
              keep_last: int | None = None) -> CheckpointStats:
        """Write round K's log segment, then its state (the commit point), then prune."""
        t = time.perf_counter()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        name = _round_name(delta.round)
        log_bytes = self._atomic_npz(self.log_dir / f"{name}.npz", delta.arrays)
        if delta.population is not None:
            path = self.log_dir / f"{name}.population.parquet"
            tmp = path.with_name(path.name + ".tmp")
            pq.write_table(delta.population, tmp)
            os.replace(tmp, path)
            log_bytes += path.stat().st_size
        crash_point("mid_checkpoint", delta.round)
        state_bytes = self.write_state(snapshot, log_bytes, t)
        self.prune(every, keep_last)
        return CheckpointStats(delta.round, log_bytes, state_bytes,
                               1e3 * (time.perf_counter() - t))

    def write_state(self, snapshot: Snapshot, log_bytes: int = 0,
                    started: float | None = None) -> int:
        """Write (or replace) the state of a round atomically; returns its size."""
        started = time.perf_counter() if started is None else started
        self.state_dir.mkdir(parents=True, exist_ok=True)
        name = _round_name(snapshot.round)
        tmp_dir = self.state_dir / f".{name}.tmp"
        shutil.rmtree(tmp_dir, ignore_errors=True)
        tmp_dir.mkdir()
        state_bytes = self._plain_npz(tmp_dir / "state.npz", snapshot.arrays)
        meta = {**snapshot.meta, "format": FORMAT, "round": snapshot.round,
                "log_bytes": log_bytes, "state_bytes": state_bytes,
                "ms": 1e3 * (time.perf_counter() - started)}
        (tmp_dir / "meta.json").write_text(json.dumps(meta, default=str))
        _fsync_dir(tmp_dir)
        final = self.state_dir / name
        shutil.rmtree(final, ignore_errors=True)  # a stale folder from an aborted attempt
        os.replace(tmp_dir, final)
        _fsync_dir(self.state_dir)
        return state_bytes

    def _plain_npz(self, path: Path, arrays: dict[str, np.ndarray]) -> int:
        with open(path, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        return path.stat().st_size

    def _atomic_npz(self, path: Path, arrays: dict[str, np.ndarray]) -> int:
        tmp = path.with_name(path.name + ".tmp")
        size = self._plain_npz(tmp, arrays)
        os.replace(tmp, path)
        return size

    def prune(self, every: int, keep_last: int | None) -> None:
        """Drop state folders not retained: keep round 0, the latest, and the rounds that
        are multiples of `every` (only the last `keep_last` of those, if set)."""
        rounds = self.available()
        if not rounds:
            return
        wanted = [r for r in rounds if r % every == 0 and r != 0]
        if keep_last is not None:
            wanted = wanted[-keep_last:]
        keep = {0, rounds[-1], *wanted}
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

    def meta(self, r: int) -> dict:
        """The state metadata of round r."""
        return json.loads((self.state_dir / _round_name(r) / "meta.json").read_text())

    def snapshot(self, r: int) -> Snapshot:
        """The state of round r."""
        with np.load(self.state_dir / _round_name(r) / "state.npz") as z:
            arrays = {k: z[k] for k in z.files}
        return Snapshot(r, arrays, self.meta(r))

    def deltas(self, upto: int) -> list[RoundDelta]:
        """The log segments of rounds 0..upto, in order (each must exist)."""
        out = []
        for r in range(upto + 1):
            name = _round_name(r)
            path = self.log_dir / f"{name}.npz"
            if not path.is_file():
                raise FileNotFoundError(f"checkpoint log for round {r} is missing: {path}")
            with np.load(path) as z:
                arrays = {k: z[k] for k in z.files}
            pop_path = self.log_dir / f"{name}.population.parquet"
            population = pq.read_table(pop_path) if pop_path.is_file() else None
            out.append(RoundDelta(r, arrays, population))
        return out

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


# ---------------------------------------------------------------------- replay helpers


def last_value_per_key(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For keys listed in time order (repeats allowed), each key once with its last value."""
    if not len(keys):
        return keys.astype(np.int64), values
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    last = np.ones(len(k), dtype=bool)
    last[:-1] = k[1:] != k[:-1]
    return k[last], v[last]


def concat(parts: list[np.ndarray], dtype) -> np.ndarray:
    """Concatenate (an empty list gives an empty array of `dtype`)."""
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype)


def union_keys(parts: list[np.ndarray]) -> np.ndarray:
    """Sorted distinct keys of several arrays."""
    return unique_sorted(concat(parts, np.int64))

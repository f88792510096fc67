"""A run's full history across forks, and the runs of an output folder as a tree.

A fork's trajectory file holds only the rounds after its fork round; the rounds before
belong to its parent (and, for a fork of a fork, to the parent's parent). `lineage(run)`
lists those runs root first, each with the part of its rows that belongs to the history:
rounds up to the fork round, posts with ids below the post count at the fork round (post
ids are dense). `read_table(run, table)` reads a table through that chain as one
DataFrame, in a stable order.

Trajectory files are opened read-only and closed after each read. A file held by a
running writer cannot be opened at all (DuckDB's lock); then the run's live Parquet mirror
(`output.live_parquet: true`) is read instead.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pandas as pd

from shoal.core.errors import InputError
from shoal.store.checkpoints import CheckpointError
from shoal.store.knowledge import GRAPH_TABLES, SCENARIO_DIR, GraphReader
from shoal.store.live_mirror import LiveMirror
from shoal.store.run_dir import RunDir, meta_problem, open_run_dir
from shoal.store.schema import schema
from shoal.store.tables import TABLES, TableSpec, file_tables
from shoal.store.trajectory import damage_reason, damaged, header_damage, trajectory_problem


@dataclass(frozen=True)
class Segment:
    """A run directory and which of its rows belong to a history: rounds up to
    `last_round` and posts with ids below `n_posts` (None: all of them). `dir` is None
    only for the run a `LiveRun` is writing, read through its own connection: every
    segment `lineage` gives has a directory."""

    dir: RunDir | None
    last_round: int | None = None
    n_posts: int | None = None

    def condition(self, spec: TableSpec) -> str | None:
        """The SQL filter selecting this segment's rows of a table (None: all rows); a
        table that is not inherited is read from the run's own file only."""
        if spec.lineage != "inherit":
            return None
        return spec.upto(self.last_round, self.n_posts)


def parent_dir(child: RunDir, info: dict[str, Any]) -> RunDir:
    """The parent of a fork: `parent_path` from its lineage, or the parent's id in the
    fork's own output folder if that path moved."""
    candidates = [child.root.parent / info["parent_run_id"]]
    if info.get("parent_path"):
        candidates.insert(0, Path(info["parent_path"]))
    for path in candidates:
        if (path / "run.json").is_file():
            return open_run_dir(path)
    shown = " nor ".join(str(p) for p in candidates)
    raise InputError(f"{child.run_id}: its parent run {info['parent_run_id']} is not at "
                     f"{shown}")


def lineage(run: str | Path) -> list[Segment]:
    """The runs that make up `run`'s history, root first, the run itself last."""
    run_dir = open_run_dir(run)
    chain = [Segment(run_dir)]
    seen = {run_dir.root.resolve()}
    last_round: int | None = None
    n_posts: int | None = None
    info = run_dir.read_meta().get("lineage") or {}
    while info.get("parent_run_id"):
        # An ancestor contributes no more than any fork below it took.
        last_round = _smaller(last_round, _count(run_dir, info, "fork_round"))
        n_posts = _smaller(n_posts, _count(run_dir, info, "parent_posts"))
        run_dir = parent_dir(run_dir, info)
        if run_dir.root.resolve() in seen:
            raise InputError(f"{run}: its lineage loops back to {run_dir.run_id}")
        seen.add(run_dir.root.resolve())
        chain.append(Segment(run_dir, last_round, n_posts))
        info = run_dir.read_meta().get("lineage") or {}
    return chain[::-1]


def _smaller(a: int | None, b: int) -> int:
    return b if a is None else min(a, b)


def _count(run_dir: RunDir, info: dict[str, Any], key: str) -> int:
    """A whole number >= 0 of a fork's lineage in run.json (InputError naming the file and
    field if it is anything else: the history cannot be cut without it)."""
    value = info.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{run_dir.meta}: lineage.{key}: must be a whole number >= 0, got "
                         f"{value!r}; the run's history before its fork cannot be read")
    return value


def fork_rounds(run: str | Path) -> list[int]:
    """The rounds at which `run`'s history passes from one run to the next (root first)."""
    return [s.last_round for s in lineage(run)[:-1] if s.last_round is not None]


class MissingTableError(InputError):
    """No file of the run's lineage has the table (runs made before it existed);
    `tables`: the tables its files do have."""

    def __init__(self, message: str, tables: Iterable[str] = ()):
        super().__init__(message)
        self.tables = sorted(tables)


def read_table(run: str | Path, table: str, where: str | None = None) -> pd.DataFrame:
    """The full history of `table` for `run`: its ancestors' rows before each fork, then
    its own, sorted by round and the table's natural key. `where` is an extra SQL filter.
    `run`, `topics` and `agents` are the run's own rows (a fork has complete copies)."""
    return _history(str(run), lineage(run), table, where)


def _history(name: str, segments: list[Segment], table: str, where: str | None,
             own: Callable[[], duckdb.DuckDBPyConnection] | None = None) -> pd.DataFrame:
    """A table's rows through `segments`, root first; `own`, if given, connects to the
    last segment (a run this process is writing). The run's own file is read first: its
    declaration of the table says whether the ancestors' rows belong to the history."""
    frames: list[pd.DataFrame] = []
    tables: set[str] = set()
    for i in range(len(segments) - 1, -1, -1):
        read = _read_segment(segments[i], table, where,
                             own if i == len(segments) - 1 else None)
        tables |= read.tables
        if read.spec is not None:
            assert read.rows is not None  # a segment whose file has the table read its rows
            frames.append(read.rows)
        spec = read.spec or TABLES.get(table)
        if spec is not None and spec.lineage != "inherit":
            break
    if not frames:  # no segment has the table: a run older than it, or a typo
        if table in TABLES:
            raise MissingTableError(f"{name}: the trajectory has no table {table!r} "
                                    "(written by an older version of Shoal)", tables)
        raise MissingTableError(f"{name}: unknown table {table!r}; the trajectory's "
                                f"tables: {', '.join(sorted(tables))}", tables)
    frames = [f for f in frames[::-1] if len(f)] or frames[:1]
    return pd.concat(frames, ignore_index=True)


@dataclass
class _Read:
    """One segment's rows of a table, its declaration there (None: the file has no such
    table) and the names of the file's tables."""

    rows: pd.DataFrame | None
    spec: TableSpec | None
    tables: set[str]


def _read_segment(segment: Segment, table: str, where: str | None,
                  own: Callable[[], duckdb.DuckDBPyConnection] | None = None) -> _Read:
    """One segment's rows of a table, in its declared order. `own`: a connection to use
    instead of opening the segment's file."""
    if own is not None:
        opened = _own(own)
    else:
        # only a LiveRun's own segment has no directory, and it is read through `own`
        assert segment.dir is not None
        opened = _connect(segment.dir, table)
    with opened as con:
        try:
            specs = file_tables(con)
            spec = specs.get(table)
            if spec is None:
                return _Read(None, None, set(specs))
            conditions = [c for c in (segment.condition(spec), where and f"({where})") if c]
            sql = f"SELECT * FROM {table}"
            if conditions:
                sql += " WHERE " + " AND ".join(conditions)
            return _Read(con.sql(f"{sql} ORDER BY {spec.order}").df(), spec, set(specs))
        except duckdb.Error as exc:  # a block whose bytes changed, a file cut short
            if segment.dir is None or (reason := damage_reason(exc)) is None:
                raise
            raise InputError(damaged(segment.dir.db, reason)) from None


@contextmanager
def _own(connect: Callable[[], duckdb.DuckDBPyConnection]
         ) -> Iterator[duckdb.DuckDBPyConnection]:
    con = connect()
    try:
        yield con
    finally:
        con.close()


@contextmanager
def _connect(run_dir: RunDir, table: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection to a run's trajectory, or to its live mirror (for `table`)
    when a writer holds the file."""
    try:
        con = duckdb.connect(str(run_dir.db), read_only=True)
    except duckdb.Error as exc:
        if not held_by_writer(exc):
            raise InputError(trajectory_problem(run_dir.db, exc)) from None
        con = _live_connection(run_dir, table)
    try:
        yield con
    finally:
        con.close()


def held_by_writer(exc: duckdb.Error) -> bool:
    """Whether opening a file failed because a writer has it: another process (a lock
    error) or this one (a connection with another configuration)."""
    text = str(exc).lower()
    return "lock" in text or "different configuration" in text


def _live_connection(run_dir: RunDir, table: str) -> duckdb.DuckDBPyConnection:
    """An in-memory database with the run's schema (as the mirror keeps it), `table`
    filled from the mirror."""
    mirror = LiveMirror(run_dir.root)
    if not mirror.root.is_dir():
        raise InputError(f"run {run_dir.run_id} is being written; set output.live_parquet: "
                         "true to read it while it runs, or wait for it to finish")
    con = duckdb.connect()
    con.execute(mirror.schema() or schema(run_dir.platform_names(), known=True, plain=True))
    if any((mirror.root / table).glob("round=*.parquet")):
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM "
                    "read_parquet($glob, hive_partitioning = false)",
                    {"glob": mirror.glob(table)})
    return con


class ForkInfo:
    """Where a run comes from, read from its `run.json` (`meta`)."""

    if TYPE_CHECKING:  # declared read-only: a subclass gives it as a field or a property
        @property
        def meta(self) -> dict[str, Any]: ...

    @property
    def parent_run_id(self) -> str | None:
        """The id of the run this one was forked from (None for a root)."""
        return (self.meta.get("lineage") or {}).get("parent_run_id")

    @property
    def fork_round(self) -> int | None:
        """The round this run was forked at (None for a root)."""
        return (self.meta.get("lineage") or {}).get("fork_round")


@dataclass(frozen=True)
class RunEntry(ForkInfo):
    """A run in an output folder's tree; `depth` 0 for runs whose parent is not there."""

    dir: RunDir
    meta: dict[str, Any]
    depth: int
    status: str  # see `run_status`
    rounds_done: int | None  # the last checkpointed round (what a resume continues from)
    problem: str | None = None  # what makes it `damaged`, or a lineage that loops


def runs_folder(folder: str | Path, what: str = "the output folder") -> Path:
    """`folder` as a folder of runs, or an InputError saying what it is instead (empty,
    a file, missing); `what` names it in the message."""
    if not str(folder).strip():
        raise InputError(f"{what} is empty; give the folder that holds the runs (e.g. runs)")
    root = Path(folder)
    if root.is_file():
        raise InputError(f"{folder}: is a file, not a folder; give {what} that holds the "
                         "runs")
    if not root.is_dir():
        raise InputError(f"{folder}: no such folder")
    return root


def _links_out(path: Path, inside: Path) -> bool:
    """Whether `path`, an entry of the folder `inside`, is a link out of it (or a loop
    of links, which leads nowhere), or its run.json is one (which would be read)."""
    try:
        return (path.resolve().parent != inside
                or not (path / "run.json").resolve().is_relative_to(inside))
    except (OSError, RuntimeError):
        return True


def run_tree(folder: str | Path, within: bool = False) -> list[RunEntry]:
    """The runs under an output folder, depth first: each root (oldest first), then its
    forks below it. A run whose run.json or trajectory is damaged is listed with the status
    `damaged` and the `problem`; a run whose lineage loops (its parent is itself, or one
    of its forks) is listed as a root with the `problem`; folders without a run.json are
    not runs. `within`: leave out (and do not read) links that lead out of the folder."""
    root = runs_folder(folder)
    # (hidden folders are run directories still being made, or left by a killed creator:
    # `shoal.store.run_dir.clean_unfinished`)
    inside = root.resolve()
    metas = {p.name: meta for p in sorted(root.iterdir())
             if not p.name.startswith(".")
             and not (within and _links_out(p, inside))
             and (meta := _read_meta(p)) is not None}

    def parent_of(run_id: str) -> str | None:
        parent = (metas[run_id].get("lineage") or {}).get("parent_run_id")
        return parent if parent in metas else None

    loops: dict[str, str] = {}  # runs whose chain of parents comes back to a run of it
    for run_id in metas:
        chain, at = [run_id], parent_of(run_id)
        while at is not None and at not in chain:
            chain.append(at)
            at = parent_of(at)
        if at is not None:
            loops[run_id] = at
    children: dict[str | None, list[str]] = defaultdict(list)
    for run_id in metas:
        children[None if run_id in loops else parent_of(run_id)].append(run_id)

    def created(run_id: str) -> tuple[str, str]:
        return str(metas[run_id].get("created_at", "")), run_id

    entries: list[RunEntry] = []

    def visit(run_id: str, depth: int) -> None:
        run_dir, meta = RunDir(root / run_id), metas[run_id]
        latest = run_dir.checkpoints.latest()
        problem = run_problem(run_dir)
        if problem is None and run_id in loops:
            parent = parent_of(run_id)
            problem = f"{run_dir.meta}: lineage loops: " + (
                "its parent is itself" if parent == run_id else
                f"its parent {parent} leads back to {loops[run_id]}")
        entries.append(RunEntry(run_dir, meta, depth, run_status(run_dir, meta),
                                meta.get("rounds_done") if latest is None else latest,
                                problem))
        for child in sorted(children[run_id], key=created):
            visit(child, depth + 1)

    for run_id in sorted(children[None], key=created):
        visit(run_id, 0)
    return entries


def run_problem(run_dir: RunDir) -> str | None:
    """Why a run is `damaged` (its run.json or its trajectory file), as far as can be seen
    without reading the trajectory's tables; None if nothing is seen."""
    try:
        run_dir.read_meta()
    except InputError as exc:
        return str(exc)
    if not run_dir.db.is_file():
        return f"{run_dir.db}: missing"
    if (why := header_damage(run_dir.db)) is not None:
        return damaged(run_dir.db, why)
    return None


def run_status(run_dir: RunDir, meta: dict[str, Any]) -> str:
    """run.json's status, except that: a run whose run.json or trajectory is damaged is
    `damaged`; a run marked running (or resumed) whose trajectory no process holds was
    `interrupted` (`shoal resume` continues it), or `finished` if its last round is
    checkpointed (it was killed after that: `shoal resume` then marks it finished)."""
    if run_problem(run_dir) is not None:
        return "damaged"
    status = str(meta.get("status", "?"))
    if status in ("running", "resumed") and not being_written(run_dir):
        return "finished" if _all_checkpointed(run_dir) else "interrupted"
    return status


def _all_checkpointed(run_dir: RunDir) -> bool:
    """Whether the last configured round (as the effective config of the newest
    checkpoint says: an intervention may change it) has its checkpoint."""
    store = run_dir.checkpoints
    latest = store.latest()
    if latest is None:
        return False
    try:
        return latest >= int(store.meta(latest)["config"]["rounds"])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return False


def being_written(run_dir: RunDir) -> bool:
    """Whether a writer (another process, or an open run in this one) holds the run's
    trajectory file."""
    try:
        duckdb.connect(str(run_dir.db), read_only=True).close()
    except (duckdb.IOException, duckdb.ConnectionException) as exc:
        return held_by_writer(exc)
    except duckdb.Error:  # (a damaged file: no writer holds it)
        return False
    return False


def _read_meta(path: Path) -> dict[str, Any] | None:
    """run.json of a folder, None if it has none (not a run), `{"status": "damaged"}` if it
    does not parse, or if it is gone from a folder that holds a trajectory (a run that lost
    it: listed as damaged, not passed over)."""
    if not (path / "run.json").is_file():
        return {"status": "damaged"} if (path / "trajectory.duckdb").is_file() else None
    try:
        meta = json.loads((path / "run.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        meta = None
    if not isinstance(meta, dict) or meta_problem(meta) is not None:
        return {"status": "damaged"}
    return meta


class LiveRun:
    """A run this process is writing (a `Simulation`), read like a run directory: its own
    rows through `connect` (a new cursor on its database, on disk or in memory, after
    every submitted round is committed), its ancestors' from their files (`ancestors`:
    the lineage segments before it; none for a simulation held in memory)."""

    def __init__(self, run_id: str, connect: Callable[[], duckdb.DuckDBPyConnection],
                 meta: Callable[[], dict[str, Any]], config: Callable[[], dict[str, Any]],
                 ancestors: list[Segment] | None = None, path: Path | None = None):
        self.run_id = run_id
        self.connect = connect
        self.meta = meta
        self.config = config
        self.ancestors = ancestors or []
        self.path = path  # its run directory (None: in memory)

    def read(self, table: str, where: str | None = None) -> pd.DataFrame:
        """A table's rows through the lineage (with an extra SQL filter), in the order
        `read_table` gives."""
        return _history(self.run_id, [*self.ancestors, Segment(None)], table, where,
                        self.connect)


def graph_reader(path: str | Path) -> GraphReader:
    """The graph memory of a run directory (through its lineage: a fork reads its
    parent's rows up to the fork round) or of a scenario folder (its `graph/`)."""
    scenario = Path(path) / SCENARIO_DIR
    if scenario.is_dir() or scenario.with_name(f"{SCENARIO_DIR}.old").is_dir():
        return GraphReader.of_scenario(path)  # (the second: a write killed mid-way)
    tables = {}
    for name in GRAPH_TABLES:
        with suppress(MissingTableError):  # written before Shoal had graph memory
            tables[name] = read_table(path, name)
    return GraphReader(tables)

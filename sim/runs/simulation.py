"""`Simulation`: a simulation you build, step, look at, fork and save — in a notebook cell
by cell, or from the command line (`shoal run` drives the same object).

    sim = Simulation.from_yaml("configs/quickstart.yaml", seed=3, out=None)  # in memory
    sim.step()                        # one round
    sim.run(10)                       # ten more (or, without a number, to the last round)
    sim.state.beliefs                 # the world now, as DataFrames
    what_if = sim.fork(5, sets=["beliefs.update.rate=0.02"])   # in memory, from round 5
    open_run(sim).polarization()      # the trajectory so far (sim.open_run)
    sim.save("runs/my-run")           # a normal run directory (resume, fork, report...)

With `out` a folder (the default: the config's `output.dir`) the simulation is a run
directory from the start: `runs/<run_id>/` with config, trajectory and checkpoints, made
whole or not at all. With `out=None` the trajectory goes to an in-memory DuckDB and the
checkpoints stay in memory; `open_run(sim)` reads it. Every input is checked before
anything is written.
"""

from __future__ import annotations

import contextlib
import numbers
import os
import shutil
import warnings
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import duckdb
import numpy as np
import pyarrow as pa

from shoal.agents import llm_output
from shoal.agents.llm_output import check_budget
from shoal.agents.profiles import USERNAME_CHARS, profile_fixes_table, repeated_ids, username_fixes
from shoal.config import Config, config_hash, load_config, parse_config, resolved_dict
from shoal.config.llm import check_api_keys
from shoal.core.errors import InputError, NumericError, ProviderDown, StorageFull, out_of_space
from shoal.core.faults import crash_point
from shoal.core.registry import PluginError
from shoal.engine.driver import RoundDriver, RoundStats
from shoal.engine.executors import Executor, make_executor
from shoal.engine.interventions import (
    Fired,
    check_against_population,
    check_settings,
    fire_due,
)
from shoal.engine.round_log import (
    agents_table,
    beliefs_table,
    initial_follows_table,
    interventions_table,
    llm_calls_table,
    posts_tables,
    topics_table,
)
from shoal.llm.cache import CacheMiss, CacheSpec, cache_spec
from shoal.llm.endpoints import Endpoints
from shoal.runs.fork_plan import ForkPlan, fork_config
from shoal.store.checkpoints import CheckpointError, CheckpointStore, MemoryCheckpoints
from shoal.store.lineage import LiveRun, MissingTableError, Segment, lineage, read_table
from shoal.store.live_mirror import LiveMirror
from shoal.store.run_dir import (
    RunDir,
    clean_unfinished,
    creating_path,
    engine_version,
    lock_creation,
    new_run_id,
    open_run_dir,
)
from shoal.store.tables import file_tables
from shoal.store.trajectory import TrajectoryStore, trajectory_problem
from shoal.store.writer import RoundWriter
from shoal.surveys.responses import check_samples, sample_notes, sample_sizes, survey_table
from shoal.world.frames import WorldFrames
from shoal.world.knowledge import build_graph_memory, use_outputs
from shoal.world.persistence import checkpoint, restore_world
from shoal.world.world import World, build_world, check_memory

if TYPE_CHECKING:
    import pandas as pd

    from shoal.analysis.runs import Run

CONFIGURED = "config"  # `out` default: the config's output.dir


def run_row(cfg: Config, run_id: str, lineage: dict[str, Any]) -> dict[str, Any]:
    """The `run` table's single row: identity, config, engine and lineage (empty for a
    root run)."""
    return {
        "run_id": run_id, "name": cfg.name, "created_at": datetime.now(),
        "seed": cfg.seed, "engine_version": engine_version(), "config_hash": config_hash(cfg),
        "config": resolved_dict(cfg), "topics": cfg.topic_names,
        "parent_run_id": lineage.get("parent_run_id"), "fork_round": lineage.get("fork_round"),
        "lineage": lineage,
    }


def world_at(run_dir: RunDir, round_: int, flag: str = "--round", cfg: Config | None = None
             ) -> World:
    """The world of a run directory at the end of a kept round (InputError naming `flag`
    when the round has no checkpoint, or the checkpoint cannot be read)."""
    kept = run_dir.checkpoints.available()
    if round_ not in kept:
        shown = ", ".join(map(str, kept)) or "none"
        raise InputError(f"{flag} {round_}: {run_dir.run_id} has no checkpoint of round "
                         f"{round_}; kept rounds: {shown}")
    try:
        return restore_world(run_dir.checkpoints, round_, cfg)[0]
    except CheckpointError as exc:
        raise InputError(f"{run_dir.run_id}: {exc}") from None


class Simulation:
    """One simulation: its world, where it writes (a run directory, or memory), and the
    driver that runs its rounds."""

    def __init__(self, world: World, trajectory: TrajectoryStore,
                 checkpoints: CheckpointStore | MemoryCheckpoints, meta: dict[str, Any],
                 run_dir: RunDir | None = None, engine: Engine | None = None):
        self.world = world
        self.trajectory = trajectory
        self.checkpoints = checkpoints
        self.dir = run_dir
        self.meta = meta  # run.json's content (mirrored to the file for a run directory)
        self.engine = engine  # made on first use when not given
        self.writer: RoundWriter | None = None
        self._driver: RoundDriver | None = None
        self._closed = False
        self._broken: str | None = None  # why a round stopped part-way (the world is not a round's)
        self.notes: list[str] = []  # what the user should know (a damaged checkpoint skipped)
        self.cache_parents: list[Path] = []  # run directories whose LLM answers it may read

    # ------------------------------------------------------------------ making

    @classmethod
    def from_yaml(cls, path: str | Path, *, seed: int | None = None, out: Any = CONFIGURED,
                  overrides: Iterable[str] = ()) -> Simulation:
        """A new simulation of a YAML config (`overrides`: `key=value` like `--set`)."""
        sets = [*_strings("overrides", overrides),
                *([f"seed={seed}"] if seed is not None else [])]
        return cls.create(load_config(path, sets), out=out)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, seed: int | None = None, out: Any = CONFIGURED
                  ) -> Simulation:
        """A new simulation of a config given as a mapping (as the YAML would be)."""
        if not isinstance(data, dict):
            raise InputError(f"from_dict: the config must be a mapping (as the YAML would "
                             f"be), got {type(data).__name__}")
        data = {**data, **({"seed": seed} if seed is not None else {})}
        return cls.create(parse_config(data), out=out)

    @classmethod
    def create(cls, cfg: Config, out: Any = CONFIGURED, lineage: dict[str, Any] | None = None,
               dry_llm: bool = False) -> Simulation:
        """Build round 0 (every input checked first, the executor and any loopback server
        started), then its run directory under `out` (the config's `output.dir` by
        default; None: in memory). `dry_llm`: LLM agents' contexts are built, but they
        decide by rule and nothing is sent (`shoal estimate`)."""
        check_api_keys(cfg)
        check_memory(cfg)
        world = build_world(cfg, knowledge=False)  # (graph memory: once outputs are resolved)
        check_settings(cfg)
        check_against_population(cfg, world)
        check_samples(world)
        samples = sample_sizes(world)  # recorded in run.json; a sample cut short is noted
        fired = fire_due(world, 0)  # posts seeded at round 0
        lineage = lineage or {}
        run_id = new_run_id(cfg.name)
        folder = None if out is None else Path(cfg.output.dir if out == CONFIGURED else out)
        cache = None if dry_llm else cache_spec(cfg.llm, run_id,
                                                folder / run_id if folder else None)
        # (a cluster that cannot be joined: no directory)
        engine = Engine.start(world, dry_llm, cache)
        try:
            # Round 0 of graph memory reads the documents: its LLM extractor asks in the
            # output modes Engine.start resolved (`auto`), as the agents will.
            world.knowledge = build_graph_memory(cfg, world.outputs)
            if folder is None:
                store = TrajectoryStore(":memory:", cfg.platforms.names())
                _write_setup(store, world, run_id, lineage, fired)
                checkpoints = MemoryCheckpoints()
                checkpoints.write(checkpoint(world))
                sim = cls(world, store, checkpoints, _new_meta(cfg, run_id, lineage, 0),
                          engine=engine)
                sim.notes = _setup_notes(world) + sample_notes(samples)
                return sim

            def fill(store: TrajectoryStore, checkpoints: CheckpointStore, run_id: str
                     ) -> None:
                _write_setup(store, world, run_id, lineage, fired)
                checkpoints.write(checkpoint(world))

            run_dir = _make_run_dir(folder, cfg, lineage, fill, run_id=run_id,
                                    meta={"surveys": samples} if samples else None)
            llm_output.keep_tokens(cache, world.model_tokens)
        except BaseException:
            engine.stop()
            raise
        store = TrajectoryStore(run_dir.db)
        if cfg.output.live_parquet:
            LiveMirror(run_dir.root).start(store, cfg.platforms.names())
        sim = cls(world, store, run_dir.checkpoints, run_dir.read_meta(), run_dir, engine)
        sim.notes = _setup_notes(world) + sample_notes(samples)
        return sim

    @classmethod
    def resume(cls, path: str | Path) -> Simulation:
        """Reopen a run directory at its last intact checkpoint, discarding anything
        written after it. A damaged checkpoint (its checksum does not match, or it cannot
        be read) is passed over for the newest intact one, and `notes` says so. Everything
        is checked before anything is changed."""
        run_dir = open_run_dir(path)
        kept = run_dir.checkpoints.available()
        if not kept:
            raise InputError(f"{path}: the run has no checkpoint to resume from; start it "
                             "again")
        notes, world = [], None
        for r in reversed(kept):
            try:
                world = restore_world(run_dir.checkpoints, r)[0]
                break
            except CheckpointError as exc:
                notes.append(f"the checkpoint of round {r} is damaged ({exc})")
        if world is None:
            raise InputError(f"{path}: no checkpoint can be restored: " + "; ".join(notes))
        if notes:
            notes.append(f"resuming from round {world.round}, the newest intact checkpoint")
        check_api_keys(world.cfg)
        last = world.round
        try:
            store = TrajectoryStore(run_dir.db)  # fails if another process holds the run
        except (StorageFull, duckdb.Error) as exc:  # (replaying its WAL needs room)
            raise _no_room_to_resume(run_dir, last, exc) or exc from None
        try:
            store.verify()  # every block read once: damage is found before anything changes
            meta = run_dir.read_meta()
            if last < world.cfg.rounds or notes:  # a finished, intact run is left untouched
                store.truncate_after(last, world.posts.n)
                run_dir.checkpoints.truncate_after(last)
                LiveMirror(run_dir.root).truncate_after(last)
                run_dir.write_meta(status="resumed", rounds_done=last)
            elif meta.get("status") != "finished":  # killed after its last checkpoint
                notes.append(f"run.json said {meta.get('status')!r}, but all "
                             f"{world.cfg.rounds} rounds are committed and checkpointed: "
                             "marked finished")
                run_dir.write_meta(status="finished", rounds_done=last,
                                   finished_at=datetime.now().isoformat())
        except (OSError, duckdb.Error) as exc:
            with contextlib.suppress(Exception):
                store.abandon()
            raise _no_room_to_resume(run_dir, last, exc) or exc from None
        except BaseException:
            with contextlib.suppress(Exception):
                store.abandon()
            raise
        sim = cls(world, store, run_dir.checkpoints, run_dir.read_meta(), run_dir)
        sim.notes = notes
        return sim

    # ------------------------------------------------------------------ running

    @property
    def cfg(self) -> Config:
        """The effective config (interventions may change it)."""
        return self.world.cfg

    @property
    def round(self) -> int:
        """The last completed round (0: the initial state)."""
        return self.world.round

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.meta["run_id"]

    @property
    def finished(self) -> bool:
        """Whether every configured round has run."""
        return self.world.round >= self.cfg.rounds

    def driver(self) -> RoundDriver:
        """The round driver (the engine and the writer start on first use)."""
        if self._driver is None:
            if self.engine is None:
                self.engine = Engine.start(self.world, cache=self._cache())
            if self.writer is None:
                mirror = (LiveMirror(self.dir.root) if self.dir and self.cfg.output.live_parquet
                          else None)
                self.writer = RoundWriter(self.trajectory, mirror, self.world.round)
            # (MemoryCheckpoints has CheckpointStore's interface; RoundDriver names only
            # CheckpointStore in its annotation)
            self._driver = RoundDriver(self.world, self.engine.executor, self.writer,
                                       cast(CheckpointStore, self.checkpoints),
                                       on_checkpoint=self._checkpointed,
                                       send_prompts=not self.engine.dry_llm)
        return self._driver

    @property
    def executor(self) -> Executor | None:
        """Where agents decide (None until the engine starts)."""
        return self.engine.executor if self.engine else None

    def _cache(self) -> CacheSpec | None:
        """The LLM response cache of this run as it is now (resumed, or forked in memory):
        its own folder and those of the runs it descends from."""
        own = self.dir.root if self.dir is not None else None
        ancestors = (_roots(lineage(own)[:-1]) if own is not None
                     else self.cache_parents)
        return cache_spec(self.cfg.llm, self.run_id, own, ancestors)

    def _checkpointed(self, round_: int) -> None:
        self._write_meta(rounds_done=round_)

    def _write_meta(self, **fields: Any) -> None:
        self.meta.update(fields)
        if self.dir is not None:
            self.dir.write_meta(**fields)

    def _check_open(self) -> None:
        """A closed simulation has no engine or writer left, and one whose round stopped
        part-way holds a world of no round: say so, and how to go on."""
        if self._broken is not None and not self._closed:
            where = (f"Simulation.resume({str(self.dir.root)!r}) continues from its last "
                     "checkpoint" if self.dir is not None else "it was held in memory: make "
                     "a new Simulation")
            raise InputError(f"{self.run_id}: {self._broken}; the world in memory is not "
                             f"that of any round: {where}")
        if not self._closed:
            return
        if self.dir is None:
            raise InputError(f"{self.run_id} is closed, and it was held in memory: it is "
                             "gone; make a new Simulation (save one before closing it to "
                             "keep it)")
        raise InputError(f"{self.run_id} is closed: Simulation.resume({str(self.dir.root)!r}) "
                         "reopens it to run on")

    def step(self) -> RoundStats:
        """Run the next round (its tables are committed in the background: `flush`)."""
        self._check_open()
        if self.finished:
            raise InputError(f"{self.run_id}: all {self.cfg.rounds} rounds have run")
        driver = self.driver()
        if self.meta.get("status") != "running":
            executor = self.executor
            assert executor is not None  # driver() started the engine
            self._write_meta(status="running", executor=executor.kind,
                             shards=executor.n_shards,
                             **({"placement": self.cfg.executor.placement}
                                if executor.kind == "ray" else {}))
        try:
            stats = driver.step()
        except (ProviderDown, NumericError, CacheMiss, PluginError) as exc:
            # the round is dropped: stop
            self._broken = f"round {self.round + 1} stopped part-way ({exc})"
            self.flush()
            self._write_meta(status="stopped", stopped_reason=str(exc))
            raise
        except StorageFull as exc:
            self._broken = f"round {self.round + 1} stopped part-way ({exc})"
            self._stopped_for(exc)
            raise
        except BaseException as exc:
            self._broken = f"round {self.round + 1} stopped part-way ({type(exc).__name__})"
            raise
        if self.finished:
            self.flush()
            self._write_meta(status="finished", rounds_done=self.round,
                             finished_at=datetime.now().isoformat())
        return stats

    def run(self, rounds: int | None = None,
            on_round: Callable[[RoundStats], None] | None = None) -> RoundsRun:
        """Run `rounds` more rounds (default: to the last configured one); returns their
        stats (a list, shown in one line). Asked for more rounds than remain, it runs to
        the last one and warns (`RoundsWarning`). `on_round(stats)` after each."""
        self._check_open()
        if rounds is not None and (isinstance(rounds, bool)
                                   or not isinstance(rounds, numbers.Integral) or rounds < 0):
            raise InputError(f"run({rounds!r}): the number of rounds must be a whole number "
                             ">= 0 (or None: to the last round)")
        last = self.cfg.rounds if rounds is None else min(self.cfg.rounds,
                                                          self.round + rounds)
        if rounds is not None and self.round + rounds > last:
            left = last - self.round
            warnings.warn(f"run({rounds}): {self.run_id} has {left} round(s) left of its "
                          f"{self.cfg.rounds}" + (f"; running rounds {self.round + 1}.."
                                                  f"{last}" if left else "; nothing to run"),
                          RoundsWarning, stacklevel=2)
        stats = RoundsRun()
        while self.round < last:
            stats.append(self.step())
            if on_round is not None:
                on_round(stats[-1])
        self.flush()
        return stats

    def flush(self) -> None:
        """Wait until every round run so far is committed and checkpointed."""
        if self.writer is not None:
            try:
                self.writer.flush()
            except StorageFull as exc:
                self._stopped_for(exc)
                raise

    def _stopped_for(self, exc: StorageFull) -> None:
        """A full disk stopped the run: say what is safe and how to continue (and try to
        record it: run.json may not fit either)."""
        where = self.dir.root if self.dir is not None else "memory"
        last = self.checkpoints.latest()
        full = getattr(exc, "device_of", None) or where  # (the LLM cache's own folder)
        exc.args = (f"no space left on the device of {full}: round {last} is the last "
                    "round saved whole, and safe; free some space, then "
                    f"`shoal resume {where}` continues the run",)
        with contextlib.suppress(OSError):
            self._write_meta(status="stopped", stopped_reason=str(exc))

    def close(self) -> None:
        """Commit what is pending, then release the writer, executor, store and any
        loopback server (an in-memory trajectory is gone after this: `save` it first)."""
        full: StorageFull | None = None
        try:
            if self.writer is not None:
                self.writer.close()
        except StorageFull as exc:
            full = exc
        finally:
            self.writer = None
            if self.engine is not None:
                self.engine.stop()
                self.engine = None
            assert self.world.memory is not None  # World.__post_init__ makes round memory
            self.world.memory.close()
            if self.world.knowledge is not None:  # its thread, its extractor's connections
                self.world.knowledge.close()
            closed, self._closed = self._closed, True
            if not closed:
                try:
                    self.trajectory.close()
                except StorageFull as exc:
                    full = full or exc
        if full is not None:
            self._stopped_for(full)
            raise full

    def __enter__(self) -> Simulation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ looking

    @property
    def state(self) -> WorldFrames:
        """The world as it is now, as DataFrames (beliefs, posts, follows, agents)."""
        return WorldFrames(self.world)

    def reader(self) -> RunDir | LiveRun:
        """What `open_run` reads: while the simulation is open, its own database (this
        process holds the file) with its ancestors' files; once closed, its directory."""
        if self._closed:
            if self.dir is None:
                raise InputError(self._gone())
            return self.dir
        self.flush()
        ancestors = lineage(self.dir.root)[:-1] if self.dir is not None else []
        return LiveRun(self.run_id, self._cursor, lambda: dict(self.meta),
                       lambda: resolved_dict(self.cfg), ancestors,
                       self.dir.root if self.dir else None)

    def _gone(self) -> str:
        return (f"{self.run_id} was held in memory and is closed: save it before closing "
                "to keep it")

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection to the trajectory for a reader (`open_run(sim)`): a cursor on the
        simulation's own while it is open; once closed, the file read-only (a `Run` made
        while it was open still reads, e.g. after `refresh()`), or an InputError for one
        held in memory."""
        if self._closed:
            if self.dir is None:
                raise InputError(self._gone())
            try:
                return duckdb.connect(str(self.dir.db), read_only=True)
            except duckdb.Error as exc:
                raise InputError(trajectory_problem(self.dir.db, exc)) from None
        self.flush()
        return self.trajectory.con.cursor()

    def open_run(self) -> Run:
        """The notebook API's view of this simulation's trajectory (`shoal.open_run`)."""
        from shoal.analysis.notebook import open_run

        return open_run(self)

    # ------------------------------------------------------------------ forking, saving

    def fork(self, at: int | None = None, *, sets: Iterable[str] = (), seed: int | None = None,
             interventions: list[dict[str, Any]] | None = None, schedule: Iterable[str] = ()
             ) -> Simulation:
        """A counterfactual from the end of round `at` (default: now), in memory: the same
        world, with config changes (`sets`: `key=value`), a new `seed`, interventions
        added, and the schedule edited (`schedule`: `drop NAME|INDEX`, `move NAME|INDEX
        ROUND`), as `shoal fork` does. The fork's trajectory starts with this one's rounds
        0..at, so `open_run(fork)` shows its whole history."""
        self.flush()
        at = self.round if at is None else at
        if not isinstance(at, numbers.Integral) or isinstance(at, bool):  # (numpy's too)
            raise InputError(f"fork at {at!r}: a round is a whole number (an int)")
        at = int(at)
        sets, schedule = _strings("sets", sets), _strings("schedule", schedule)
        if interventions is not None and not (isinstance(interventions, list) and all(
                isinstance(i, dict) for i in interventions)):
            raise InputError("interventions: a list of mappings, each one intervention as "
                             "the config's `interventions:` entries are")
        if at not in self.checkpoints.available():
            raise InputError(f"fork at {at}: no checkpoint of round {at}; kept rounds: "
                             f"{', '.join(map(str, self.checkpoints.available()))}")
        parent_cfg = self.checkpoints.meta(at)["config"]
        cfg, changes, renumber = fork_config(parent_cfg, at, ForkPlan(
            sets=list(sets), seed=seed, interventions=interventions or [],
            schedule=list(schedule)))
        # (MemoryCheckpoints has CheckpointStore's interface; restore_world names only
        # CheckpointStore in its annotation)
        world, _ = restore_world(cast(CheckpointStore, self.checkpoints), at, cfg)
        assert world.interventions is not None  # World.__post_init__ makes the schedule
        world.interventions.renumber(renumber)
        check_against_population(cfg, world)
        check_api_keys(cfg)
        run_id = new_run_id(cfg.name)
        origin = {"forked_from": self.run_id, "fork_round": at, "changes": changes}
        store = TrajectoryStore(":memory:", cfg.platforms.names())
        _copy_prefix(self.reader(), store, at, world.posts.n)
        store.con.execute("DELETE FROM run")
        store.write_run({**run_row(cfg, run_id, {}), "lineage": origin})
        checkpoints = MemoryCheckpoints()
        if isinstance(self.checkpoints, MemoryCheckpoints):
            self.checkpoints.share_into(checkpoints, at)
        else:
            checkpoints.logs.update(enumerate(self.checkpoints.read_logs(at)))
        cp = checkpoint(world)
        checkpoints.write_state(at, cp.state, cp.meta)
        meta = {**_new_meta(cfg, run_id, {}, at), "origin": origin}
        fork = Simulation(world, store, checkpoints, meta)
        fork.cache_parents = (_roots(lineage(self.dir.root)) if self.dir
                              else list(self.cache_parents))  # (its LLM answers are reused)
        return fork

    def save(self, path: str | Path) -> Path:
        """Write this simulation as a normal run directory at `path` (which must not
        exist): config, run.json, trajectory and checkpoints; it can then be resumed,
        forked, reported on. Returns the directory."""
        self.flush()
        final = Path(path)
        if final.exists():
            raise InputError(f"{final}: exists already; save to a new path")
        if self.dir is not None:  # already on disk: a copy
            shutil.copytree(self.dir.root, final)
            return final
        reader = self.reader()
        # (held in memory: open, reader() is its LiveRun; closed, reader() raised)
        assert isinstance(reader, LiveRun)

        def fill(store: TrajectoryStore, checkpoints: CheckpointStore, run_id: str) -> None:
            for table in file_tables(store.con):
                rows = _rows_or_none(reader, table)
                if rows is not None and len(rows):
                    store.insert(table, pa.Table.from_pandas(rows, preserve_index=False))
            # a simulation without a run directory keeps its checkpoints in memory
            assert isinstance(self.checkpoints, MemoryCheckpoints)
            self.checkpoints.save_into(checkpoints)

        _make_run_dir(final.parent, self.cfg, {}, fill, run_id=final.name,
                      meta={k: v for k, v in self.meta.items() if k != "run_id"})
        return final


# ---------------------------------------------------------------------- helpers


class RoundsWarning(UserWarning):
    """`Simulation.run(n)` was asked for more rounds than the run has left."""


class RoundsRun(list[RoundStats]):
    """The stats of the rounds one `Simulation.run` call ran (a list of `RoundStats`),
    shown in one line: a notebook cell that ends with `sim.run(...)` prints a summary, not
    a list of every round."""

    def __repr__(self) -> str:
        if not self:
            return "<no rounds run>"
        return (f"<{len(self)} round(s) run: {self[0].round}..{self[-1].round}, "
                f"{sum(s.n_actions for s in self):,} actions>")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's display
        printer.text(repr(self))


def _no_room_to_resume(run_dir: RunDir, last: int, exc: BaseException
                       ) -> StorageFull | None:
    """A full disk met while a resume prepared the run, as the error that says so (None
    for any other error): the run is as it was, round `last` is safe."""
    if not (isinstance(exc, StorageFull) or out_of_space(exc)):
        return None
    return StorageFull(f"no space left on the device of {run_dir.root}, so the run cannot "
                       f"be resumed yet: round {last} is the last round saved whole, and "
                       f"safe; free some space, then `shoal resume {run_dir.root}` "
                       "continues the run")


class Engine:
    """What runs a simulation's agents: the executor and the LLM endpoints it calls
    (loopback servers it started are stopped with it)."""

    def __init__(self, executor: Executor, endpoints: Endpoints, dry_llm: bool):
        self.executor = executor
        self.endpoints = endpoints
        self.dry_llm = dry_llm

    @classmethod
    def start(cls, world: World, dry_llm: bool = False, cache: CacheSpec | None = None
              ) -> Engine:
        """Resolve the providers' endpoints (starting loopback servers), give the LLM
        summariser its provider's, and make the executor the config asks for, its LLM
        agents behind `cache` if given. A replay asks no endpoint for agents' turns, so
        only the summariser's provider is resolved (no loopback server for the agents)."""
        cfg = world.cfg
        endpoints = Endpoints(cfg.seed)
        try:
            if dry_llm or cfg.llm is None:
                urls = {}
            elif cache is not None and cache.mode == "replay":
                urls = {p.name: endpoints.urls(p) for p in cfg.llm.providers
                        if p.name == cfg.llm.summarizer_provider}
            else:
                urls = endpoints.all(cfg.llm)
            if urls and cfg.llm is not None and (cache is None or cache.mode != "replay"):
                world.outputs = llm_output.resolve(cfg.llm.providers, urls, world.outputs,
                                                   cache, cfg.seed)
            elif cfg.llm is not None and cache is not None:  # a replay: as recorded
                world.outputs = llm_output.resolve(
                    cfg.llm.providers, {p.name: list(p.base_urls) for p in cfg.llm.providers},
                    world.outputs, cache, cfg.seed)
            if cfg.llm is not None and world.model_tokens is not None:
                # (a dry run or a replay asks a server it was given)
                given = urls or {p.name: list(p.base_urls) for p in cfg.llm.providers}
                world.model_tokens = llm_output.count_tokens(
                    cfg.llm.providers, given, world.outputs, world.model_tokens,
                    list(world.population.persona[:64]), list(cfg.platforms.enabled()),
                    [t.name for t in cfg.topics], cache, world.population.language or ["en"])
                check_budget(cfg.memory.context.budget_tokens, world.model_tokens)
            if world.knowledge is not None:  # (resumed or forked: extraction goes on)
                use_outputs(world.knowledge.extractor, world.outputs)
            assert world.memory is not None  # World.__post_init__ makes round memory
            summarizer = world.memory.summarizer
            # (urls is empty without an LLM config: the first branch above)
            if (urls and cfg.llm is not None and cfg.llm.summarizer_provider
                    and hasattr(summarizer, "base_urls")):
                summarizer.base_urls = urls[cfg.llm.summarizer_provider]
            return cls(make_executor(cfg, world.population, urls, cache), endpoints, dry_llm)
        except BaseException:
            endpoints.stop()
            raise

    def stop(self) -> None:
        """Release the executor (and the Ray connection it opened) and the servers."""
        try:
            self.executor.close()
        finally:
            self.endpoints.stop()


_FIX_NOTES = {
    "normalised": f"were changed to the documented character set ({USERNAME_CHARS})",
    "duplicate": "repeated (ignoring case) an earlier row's username, so got a suffix",
    "derived": "were empty, so were made from the name and agent id",
}


def _setup_notes(world: World) -> list[str]:
    """What the user should know about how the inputs were taken: groups that got no
    agent, one note per kind of username fix (count and an example; all of them are in
    `profile_fixes`) and one for repeated user_ids."""
    pop = world.population
    notes = world.cfg.empty_group_notes()
    fixes = username_fixes(pop)
    for kind, what in _FIX_NOTES.items():
        rows = [r for r in fixes if r[3] == kind]
        if rows:
            i, original, value, _ = rows[0]
            shown = "(empty)" if original is None else repr(original)
            notes.append(f"{len(rows)} username(s) of the profile file {what}, e.g. agent "
                         f"{i}: {shown} -> {value!r}; every change is in the table "
                         "profile_fixes")
    repeats = repeated_ids(pop)
    if repeats:
        sid, agents = next(iter(repeats.items()))
        notes.append(f"{len(repeats)} user_id value(s) of the profile file repeat, e.g. "
                     f"{sid!r} on agents {', '.join(map(str, agents))}; agents are known by "
                     "their row (as in OASIS), the user_id is kept as source_id")
    return notes


def _new_meta(cfg: Config, run_id: str, lineage: dict[str, Any], rounds_done: int
              ) -> dict[str, Any]:
    return {"run_id": run_id, "name": cfg.name, "config_hash": config_hash(cfg),
            "created_at": datetime.now().isoformat(), "engine": engine_version(),
            "status": "created", "rounds_done": rounds_done, "rounds": cfg.rounds,
            "lineage": lineage}


def _make_run_dir(folder: Path, cfg: Config, lineage: dict[str, Any],
                  fill: Callable[[TrajectoryStore, CheckpointStore, str], object],
                  run_id: str | None = None, meta: dict[str, Any] | None = None,
                  rounds_done: int | None = None) -> RunDir:
    """A new run directory under `folder`, made whole or not at all: it is built under a
    hidden temporary name (config, trajectory filled by `fill`, checkpoints, run.json
    last), locked while it is made, and renamed into place; any failure removes it. Such
    folders that a killed process left in `folder` are removed first."""
    run_id = run_id or new_run_id(cfg.name)
    if folder.exists() and not folder.is_dir():
        # (output.dir: `locate` names --out or the config line that set it)
        raise InputError(f"output.dir: {folder} is a file, not a folder")
    final = RunDir(folder / run_id)
    tmp = RunDir(creating_path(folder, run_id))
    clean_unfinished(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.root.mkdir()
    except FileExistsError:
        raise InputError(f"{tmp.root}: exists already") from None
    except OSError as exc:
        raise InputError(f"output.dir: cannot create a run directory in {folder}: "
                         f"{exc.strerror or exc}") from None
    lock = None
    try:
        lock = lock_creation(tmp.root)
        tmp.config.write_text(_yaml(resolved_dict(cfg)))
        store = TrajectoryStore(tmp.db, cfg.platforms.names())
        try:
            fill(store, tmp.checkpoints, run_id)
        finally:
            store.close()
        done = rounds_done if rounds_done is not None else (tmp.checkpoints.latest() or 0)
        tmp.write_meta(**{**_new_meta(cfg, run_id, lineage, done), **(meta or {}),
                          "run_id": run_id})
        if final.root.exists():
            raise InputError(f"{final.root}: exists already")
        crash_point("creating", 0)
        os.rename(tmp.root, final.root)
    except BaseException:
        shutil.rmtree(tmp.root, ignore_errors=True)
        raise
    finally:
        if lock is not None:
            os.close(lock)
    return final


def _yaml(data: dict[str, Any]) -> str:
    from shoal.config.yaml_text import dump_yaml

    return dump_yaml(data, sort_keys=False)


def _setup_tables(world: World, fired: Fired) -> dict[str, pa.Table]:
    cfg, knowledge = world.cfg, world.knowledge
    calls = knowledge.calls(0) if knowledge is not None else []  # reading the documents
    return {
        "topics": topics_table(cfg),
        "agents": agents_table(world, np.arange(world.n_agents)),
        "beliefs": beliefs_table(world, 0),
        "follows": initial_follows_table(world),
        **posts_tables(world, np.asarray(fired.post_ids, np.int64), fired.counters),
        "interventions": interventions_table(fired.rows),
        "profile_fixes": profile_fixes_table(world.population),
        **{k: v for engine in world.engines.values() for k, v in engine.tables(world, 0).items()},
        **(knowledge.drain_tables(0) if knowledge is not None else {}),
        **({"llm_calls": llm_calls_table(calls)} if calls else {}),
        **({"survey_responses": surveys} if (surveys := survey_table(
            world, 0, set(world.llm_providers()))) is not None else {}),
    }


def _write_setup(store: TrajectoryStore, world: World, run_id: str, lineage: dict[str, Any],
                 fired: Fired) -> None:
    """Round 0 in one transaction: run row, topics, agents, initial beliefs and graph,
    seeded posts and the interventions that made them."""
    store.con.execute("BEGIN TRANSACTION")
    store.write_run(run_row(world.cfg, run_id, lineage))
    for name, table in _setup_tables(world, fired).items():
        store.insert(name, table)
    store.con.execute("COMMIT")


def _rows_or_none(reader: LiveRun | RunDir, table: str, where: str | None = None
                  ) -> pd.DataFrame | None:
    """The rows of `table` through the run's lineage (a simulation this process holds, or
    a closed one's directory), or None if the run (or an ancestor) was written by a
    version of Shoal without that table: it has no rows of it to copy."""
    try:
        if isinstance(reader, RunDir):
            return read_table(reader.root, table, where)
        return reader.read(table, where)
    except MissingTableError:
        return None


def _roots(segments: list[Segment]) -> list[Path]:
    """The run directories of lineage segments."""
    roots = []
    for s in segments:
        assert s.dir is not None  # every segment `lineage` gives has a directory
        roots.append(s.dir.root)
    return roots


def _copy_prefix(reader: LiveRun | RunDir, store: TrajectoryStore, at: int,
                 n_posts: int) -> None:
    """Rows of rounds 0..at (posts with ids below `n_posts`) from a run into `store`, of
    every table a fork reads of its parent (as each table's declaration says)."""
    for spec in file_tables(store.con).values():
        if spec.lineage == "none":
            continue
        rows = _rows_or_none(reader, spec.name, spec.upto(at, n_posts))
        if rows is not None and len(rows):
            store.insert(spec.name, pa.Table.from_pandas(rows, preserve_index=False))


def _strings(name: str, values: Iterable[str]) -> list[str]:
    """`values` as a list of strings; a lone string is refused (it would be read as its
    characters: `sets="rounds=3"` as `r`, `o`, ...)."""
    if isinstance(values, str | bytes):
        raise InputError(f"{name}: a list of strings, e.g. [{values!r}], not one string")
    out = list(values)
    if not all(isinstance(v, str) for v in out):
        raise InputError(f"{name}: every item must be a string, got {out!r}"[:300])
    return out

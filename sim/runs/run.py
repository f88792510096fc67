"""A run's lifecycle: validate everything, create `runs/<run_id>/`, run rounds, summarise.

All user input is checked (config, profile and edge-list files, graph sizes) before the run
directory exists, so a bad input leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import yaml

from sim.config import Config, config_hash, resolved_dict
from sim.core.errors import InputError, ProviderDown
from sim.engine.driver import RoundDriver, RoundStats
from sim.engine.executors import Executor, make_executor
from sim.engine.interventions import Fired, check_against_population, check_settings, fire_due
from sim.engine.round_log import (
    agents_table,
    beliefs_table,
    initial_follows_table,
    interventions_table,
    posts_tables,
    topics_table,
)
from sim.llm.endpoints import Endpoints
from sim.store.live_mirror import LiveMirror
from sim.store.run_dir import RunDir, engine_version, new_run_id, open_run_dir
from sim.store.trajectory import TrajectoryStore
from sim.store.writer import RoundWriter
from sim.world.checkpoint import CheckpointError, checkpoint, restore_world
from sim.world.world import World, build_world


@dataclass
class Run:
    """A prepared run: world built, directory created, store open."""

    cfg: Config
    world: World
    dir: RunDir
    store: TrajectoryStore
    executor: Executor | None = None
    writer: RoundWriter | None = None
    endpoints: Endpoints = field(init=False)  # where LLM calls go (loopback servers it starts)
    dry_llm: bool = False  # build LLM agents' contexts but decide by rule (`shoal estimate`)

    def __post_init__(self) -> None:
        self.endpoints = Endpoints(self.cfg.seed)

    def driver(self) -> RoundDriver:
        """A driver over this run (creates the executor and the writer on first use)."""
        if self.executor is None:
            urls = {} if self.dry_llm else self._llm_urls()
            self.executor = make_executor(self.cfg, self.world.population, urls)
        if self.writer is None:
            mirror = LiveMirror(self.dir.root) if self.cfg.output.live_parquet else None
            self.writer = RoundWriter(self.store, mirror)
        return RoundDriver(self.world, self.executor, self.writer, self.dir.checkpoints,
                           on_checkpoint=lambda r: self.dir.write_meta(rounds_done=r),
                           send_prompts=not self.dry_llm)

    def _llm_urls(self) -> dict[str, list[str]]:
        """Providers' base URLs (`loopback`: a server started for the run); the LLM
        summariser, if any, gets its provider's."""
        out = self.endpoints.all(self.cfg.llm)
        summarizer = self.world.memory.summarizer
        if self.cfg.llm is not None and self.cfg.llm.summarizer_provider \
                and hasattr(summarizer, "base_urls"):
            summarizer.base_urls = out[self.cfg.llm.summarizer_provider]
        return out

    def close(self) -> None:
        """Commit what is pending, then release writer, executor, store and any loopback."""
        try:
            if self.writer is not None:
                self.writer.close()
                self.writer = None
        finally:
            if self.executor is not None:
                self.executor.close()
                self.executor = None
            self.world.memory.close()
            self.store.close()
            self.endpoints.stop()


def check_api_keys(cfg: Config) -> None:
    """Every provider that names a key variable finds it set (InputError otherwise), so a
    missing key stops a run before it starts, not as 401s in round 1."""
    for i, p in enumerate(cfg.llm.providers if cfg.llm else []):
        if p.api_key_env and set(p.base_urls) != {"loopback"} and not os.environ.get(
                p.api_key_env):
            raise InputError(f"llm.providers.{i}.api_key_env: the environment variable "
                             f"{p.api_key_env} is not set; export it (the key itself never "
                             "goes in the config)")


def create_run(cfg: Config, lineage: dict | None = None) -> Run:
    """Build round 0 (may raise InputError), then create the run directory and its store."""
    # Every input check happens here, before anything is written.
    check_api_keys(cfg)
    world = build_world(cfg)
    check_settings(cfg)
    check_against_population(cfg, world)
    fired = fire_due(world, 0)  # posts seeded at round 0
    out = Path(cfg.output.dir)
    run_dir = RunDir(out / new_run_id(cfg.name))
    run_dir.root.mkdir(parents=True, exist_ok=False)
    try:
        run_dir.config.write_text(yaml.safe_dump(resolved_dict(cfg), sort_keys=False))
        store = TrajectoryStore(run_dir.db, cfg.platforms.names())
        _write_setup(store, world, run_dir, lineage or {}, fired)
        run_dir.checkpoints.write(checkpoint(world))
        run_dir.write_meta(run_id=run_dir.run_id, name=cfg.name, config_hash=config_hash(cfg),
                           created_at=datetime.now().isoformat(), engine=engine_version(),
                           status="created", rounds_done=0, rounds=cfg.rounds,
                           lineage=lineage or {})
    except BaseException:
        shutil.rmtree(run_dir.root, ignore_errors=True)
        raise
    return Run(cfg=cfg, world=world, dir=run_dir, store=store)


def run_row(cfg: Config, run_dir: RunDir, lineage: dict) -> dict:
    """The `run` table's single row: identity, config, engine and lineage (empty for a
    root run)."""
    return {
        "run_id": run_dir.run_id, "name": cfg.name, "created_at": datetime.now(),
        "seed": cfg.seed, "engine_version": engine_version(), "config_hash": config_hash(cfg),
        "config": resolved_dict(cfg), "topics": cfg.topic_names,
        "parent_run_id": lineage.get("parent_run_id"), "fork_round": lineage.get("fork_round"),
        "lineage": lineage,
    }


def _write_setup(store: TrajectoryStore, world: World, run_dir: RunDir, lineage: dict,
                 fired: Fired) -> None:
    """Round 0 in one transaction: run row, topics, agents, initial beliefs and graph,
    seeded posts and the interventions that made them."""
    cfg = world.cfg
    store.con.execute("BEGIN TRANSACTION")
    store.write_run(run_row(cfg, run_dir, lineage))
    tables = {
        "topics": topics_table(cfg),
        "agents": agents_table(world, np.arange(world.n_agents)),
        "beliefs": beliefs_table(world, 0),
        "follows": initial_follows_table(world),
        **posts_tables(world, np.asarray(fired.post_ids, np.int64), fired.counters),
        "interventions": interventions_table(fired.rows),
    }
    for name, table in tables.items():
        store.insert(name, table)
    store.con.execute("COMMIT")
    if cfg.output.live_parquet:
        LiveMirror(run_dir.root).write(0, tables)


def run_rounds(run: Run, on_round: Callable[[RoundStats], None] | None = None) -> list[RoundStats]:
    """Run the remaining rounds of a prepared run, updating run.json as it goes."""
    driver = run.driver()
    stats = []
    run.dir.write_meta(status="running", executor=run.executor.kind,
                       shards=run.executor.n_shards)
    while run.world.round < run.cfg.rounds:
        try:
            s = driver.step()
        except ProviderDown as exc:
            run.writer.flush()
            run.dir.write_meta(status="stopped", stopped_reason=str(exc))
            raise
        stats.append(s)
        if on_round is not None:
            on_round(s)
    run.writer.flush()
    run.dir.write_meta(status="finished", rounds_done=run.world.round,
                       finished_at=datetime.now().isoformat())
    return stats


def resume_run(path: str | Path) -> Run:
    """Reopen a run at its last checkpointed round, discarding anything written after it."""
    run_dir = open_run_dir(path)
    store = run_dir.checkpoints
    last = store.latest()
    if last is None:
        raise InputError(f"{path}: the run has no checkpoint to resume from; start it again")
    try:
        world, _ = restore_world(store, last)
    except CheckpointError as exc:
        raise InputError(f"{path}: {exc}") from None
    cfg = world.cfg
    check_api_keys(cfg)
    db = TrajectoryStore(run_dir.db)
    db.truncate_after(last, world.posts.n)
    store.truncate_after(last)
    LiveMirror(run_dir.root).truncate_after(last)
    run_dir.write_meta(status="resumed", rounds_done=last)
    return Run(cfg=cfg, world=world, dir=run_dir, store=db)


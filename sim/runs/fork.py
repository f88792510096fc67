"""Counterfactual forks on disk: a new run that starts from a parent's checkpoint of
round K, with the changes of a `ForkPlan` (shoal.runs.fork_plan).

A fork on disk gets its own run directory with the parent's checkpoint logs of rounds
0..K hard-linked in (the parent's files stay byte for byte as they were), its own state of
K, and a trajectory file that holds rounds K+1.. only. Its lineage (parent id and path,
fork round, parent post count at K, the changes) is in run.json and the `run` table;
`shoal.store.lineage` reads a fork with its parent's prefix. Everything is validated before
anything is written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shoal.config import ConfigError, parse_config, upgrade_saved
from shoal.config.llm import check_api_keys
from shoal.config.loading import locate, override_value
from shoal.core.errors import InputError
from shoal.engine.agent_history import newly_tracked, rebuild_history
from shoal.engine.interventions import check_against_population
from shoal.engine.round_log import agents_table, topics_table
from shoal.llm.cache import cache_spec
from shoal.runs.fork_plan import ForkPlan, fork_config
from shoal.runs.simulation import (
    Engine,
    Simulation,
    _make_run_dir,
    run_row,
    world_at,
)
from shoal.store.checkpoints import CheckpointError
from shoal.store.lineage import lineage as lineage_of
from shoal.store.live_mirror import LiveMirror
from shoal.store.run_dir import RunDir, new_run_id, open_run_dir
from shoal.store.trajectory import TrajectoryStore
from shoal.world.persistence import checkpoint


def fork_run(parent: str | Path, fork_round: int, plan: ForkPlan | None = None,
             out: str | Path | None = None, name: str | None = None) -> Simulation:
    """Create a fork of `parent` at `fork_round` in its own run directory (next to the
    parent unless `out` says otherwise); returns it ready to run."""
    plan = plan or ForkPlan()
    parent_dir = open_run_dir(parent)
    store = parent_dir.checkpoints
    if fork_round not in store.available():
        shown = ", ".join(str(r) for r in store.available()) or "none"
        branch = parent_dir.read_meta().get("lineage") or {}
        at = branch.get("fork_round")
        if type(at) is int and 0 <= fork_round < at and branch.get("parent_run_id"):
            # its rounds up to `at` are its parent's: that run's checkpoints hold them
            raise InputError(f"--round {fork_round}: {parent_dir.run_id} is a fork from the "
                             f"end of round {at} of {branch['parent_run_id']}, which holds "
                             f"the rounds before: fork that run at round {fork_round}")
        raise InputError(f"--round {fork_round}: {parent_dir.run_id} has no checkpoint of "
                         f"round {fork_round}; kept rounds: {shown}")
    try:
        meta = store.meta(fork_round)
    except CheckpointError as exc:
        raise InputError(f"{parent_dir.run_id}: {exc}") from None
    # --name and --out as quoted sets (`--name 2024` is a name, not a number), named as
    # the flags they are when something is wrong with them
    labels = dict(plan.labels)
    sets = list(plan.sets)
    if name is not None:
        sets.append(f"name={override_value(str(name))}")
        labels[sets[-1]] = f"--name {name}"
    folder = out if out is not None else parent_dir.root.parent
    sets.append(f"output.dir={override_value(str(folder))}")
    # a flag the user typed, else what the folder is (not a --set nobody typed)
    labels[sets[-1]] = (f"--out {out}" if out is not None
                        else f"the fork's folder {folder} (its parent's; --out DIR for another)")
    try:
        cfg, changes, renumber = fork_config(upgrade_saved(meta["config"]), fork_round,
                                             ForkPlan(sets, plan.seed, plan.interventions,
                                                      plan.schedule, plan.source, labels))
    except ConfigError as exc:
        raise InputError(str(exc)) from None
    world = world_at(parent_dir, fork_round, "--round", cfg)
    world.interventions.renumber(renumber)
    try:
        check_against_population(cfg, world)
        check_api_keys(cfg)
    except InputError as exc:  # the argument (--intervene file, --set) that made the field
        raise locate(cfg, exc) from None
    # Agents the fork starts tracking (more LLM agents, build_for: all) get the digest and
    # notifications they would have had, rebuilt from the parent's actions.
    rebuild_history(str(parent_dir.root), world,
                    newly_tracked(world, parse_config(upgrade_saved(meta["config"]))),
                    fork_round + 1, world.digest, world.notifications)
    parent_meta = parent_dir.read_meta()
    lineage = {"parent_run_id": parent_dir.run_id,
               "parent_path": str(parent_dir.root.resolve()), "fork_round": fork_round,
               "parent_posts": world.posts.n, "root_run_id":
                   parent_meta.get("lineage", {}).get("root_run_id", parent_dir.run_id),
               "changes": changes}
    run_id = new_run_id(cfg.name)
    try:  # the fork reads the LLM answers of the runs it comes from, and writes its own
        cache = cache_spec(cfg.llm, run_id, Path(cfg.output.dir) / run_id,
                           [s.dir.root for s in lineage_of(parent_dir.root)])
    except InputError as exc:
        raise locate(cfg, exc) from None
    engine = Engine.start(world, cache=cache)

    def fill(db: TrajectoryStore, checkpoints, run_id: str) -> None:
        db.con.execute("BEGIN TRANSACTION")
        db.write_run(run_row(cfg, run_id, lineage))
        db.insert("topics", topics_table(cfg))
        db.insert("agents", agents_table(world, np.arange(world.n_agents)))
        db.con.execute("COMMIT")
        # The logs of rounds 0..K are shared; the state of K is the fork's own, written
        # with the fork's config and schedule, so a resume of the fork keeps its changes.
        store.link_logs_into(checkpoints, fork_round)
        cp = checkpoint(world)  # (its log part is empty: restored journals start empty)
        checkpoints.write_state(cp.round, cp.state, cp.meta)

    try:
        run_dir: RunDir = _make_run_dir(Path(cfg.output.dir), cfg, lineage, fill,
                                        run_id=run_id, rounds_done=fork_round)
    except InputError as exc:
        engine.stop()
        raise locate(cfg, exc) from None
    except BaseException:
        engine.stop()
        raise
    store = TrajectoryStore(run_dir.db)
    if cfg.output.live_parquet:  # a running fork's own static tables, for live readers
        LiveMirror(run_dir.root).start(store, cfg.platforms.names())
    return Simulation(world, store, run_dir.checkpoints, run_dir.read_meta(), run_dir, engine)

"""Counterfactual forks: a new run that starts from a parent's checkpoint of round K.

The fork gets its own run directory with the parent's checkpoint logs of rounds 0..K and
state of K hard-linked in (never copied into or modified: the parent's files stay byte
for byte as they were), a config derived from the parent's effective config at K plus the
requested changes (`--set`, `--seed`, interventions from a file, all validated before
anything is written), and a trajectory file that holds rounds K+1.. only. Its lineage
(parent id and path, fork round, parent post count at K, the changes) is in run.json and
the `run` table; `sim.lineage` reads a fork with its parent's prefix.
"""

from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.config import ConfigError, apply_overrides, config_hash, parse_config, resolved_dict
from sim.config.interventions import MUTABLE_SECTIONS, mutable
from sim.config.platforms import MUTABLE_FIELDS
from sim.core.errors import InputError
from sim.engine.agent_history import newly_tracked, rebuild_history
from sim.engine.interventions import check_against_population, check_settings
from sim.engine.round_log import agents_table, topics_table
from sim.runs.run import Run, check_api_keys, run_row
from sim.store.live_mirror import LiveMirror
from sim.store.run_dir import RunDir, engine_version, new_run_id, open_run_dir
from sim.store.trajectory import TrajectoryStore
from sim.world.checkpoint import CheckpointError, checkpoint, restore_world


def _load_interventions(path: Path) -> list[Any]:
    """Entries from a YAML file: a list, or a mapping with an `interventions` list."""
    if not path.is_file():
        raise InputError(f"--intervene {path}: file not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise InputError(f"{path}{line}: malformed YAML: {exc}") from None
    if isinstance(data, dict) and set(data) == {"interventions"}:
        data = data["interventions"]
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a list of interventions (or a mapping with an "
                         "'interventions' list)")
    return data


def fork_config(parent_cfg_dict: dict, fork_round: int, sets: list[str],
                seed: int | None, intervene: Path | None) -> tuple[Any, dict]:
    """The fork's config and a record of what changed (raises InputError/ConfigError)."""
    data = copy.deepcopy(parent_cfg_dict)  # overrides edit nested dicts in place
    for item in sets:
        key = item.split("=", 1)[0].strip()
        if not mutable(key):
            raise InputError(f"--set {key}: cannot be changed in a fork (it only shaped "
                             f"round 0); changeable: {', '.join(MUTABLE_SECTIONS)}, and "
                             f"platforms.<name>.{{{','.join(MUTABLE_FIELDS)}}}")
    data = apply_overrides(data, list(sets))
    if seed is not None:
        data["seed"] = seed
    added = _load_interventions(intervene) if intervene else []
    base = len(data.get("interventions", []))
    data["interventions"] = list(data.get("interventions", [])) + added
    source = str(intervene) if intervene else "fork"
    cfg = parse_config(data, source=source)
    for j in range(base, len(cfg.interventions)):
        if cfg.interventions[j].round <= fork_round:
            raise InputError(f"{source}: intervention {j - base} is at round "
                             f"{cfg.interventions[j].round}; a fork at round {fork_round} "
                             f"can only schedule rounds after {fork_round}")
    if cfg.rounds <= fork_round:
        raise InputError(f"rounds: the fork starts after round {fork_round} but the run has "
                         f"{cfg.rounds} rounds; pass --set rounds=N with N > {fork_round}")
    check_settings(cfg)
    changes = {"set": list(sets), "seed": seed, "interventions": added,
               "intervene_file": str(intervene) if intervene else None}
    return cfg, changes


def fork_run(parent: str | Path, fork_round: int, sets: list[str] | None = None,
             seed: int | None = None, intervene: str | Path | None = None,
             out: str | Path | None = None, name: str | None = None) -> Run:
    """Create a fork of `parent` at `fork_round`; returns it ready to run."""
    parent_dir = open_run_dir(parent)
    store = parent_dir.checkpoints
    available = store.available()
    if fork_round not in available:
        shown = ", ".join(str(r) for r in available) or "none"
        raise InputError(f"--round {fork_round}: {parent_dir.run_id} has no checkpoint of "
                         f"round {fork_round} (kept: {shown})")
    meta = store.meta(fork_round)
    sets = list(sets or [])
    if name is not None:
        sets.append(f"name={name}")
    # Forks live next to their parent unless told otherwise.
    sets.append(f"output.dir={out if out is not None else parent_dir.root.parent}")
    try:
        cfg, changes = fork_config(meta["config"], fork_round, sets, seed,
                                   Path(intervene) if intervene else None)
    except ConfigError as exc:
        raise InputError(str(exc)) from None
    try:
        world, _ = restore_world(store, fork_round, cfg)
    except CheckpointError as exc:
        raise InputError(f"{parent_dir.run_id}: {exc}") from None
    check_against_population(cfg, world)
    check_api_keys(cfg)
    # Agents the fork starts tracking (more LLM agents, build_for: all) get the digest and
    # notifications they would have had, rebuilt from the parent's actions.
    rebuild_history(str(parent_dir.root), world,
                    newly_tracked(world, parse_config(meta["config"])), fork_round + 1,
                    world.digest, world.notifications)

    parent_meta = parent_dir.read_meta()
    lineage = {"parent_run_id": parent_dir.run_id,
               "parent_path": str(parent_dir.root.resolve()), "fork_round": fork_round,
               "parent_posts": world.posts.n, "root_run_id":
                   parent_meta.get("lineage", {}).get("root_run_id", parent_dir.run_id),
               "changes": changes}
    run_dir = RunDir(Path(cfg.output.dir) / new_run_id(cfg.name))
    run_dir.root.mkdir(parents=True, exist_ok=False)
    try:
        run_dir.config.write_text(yaml.safe_dump(resolved_dict(cfg), sort_keys=False))
        db = TrajectoryStore(run_dir.db, cfg.platforms.names())
        _write_fork_setup(db, world, run_dir, lineage)
        if cfg.output.live_parquet:  # a running fork's own static tables, for live readers
            LiveMirror(run_dir.root).write(0, {"topics": topics_table(cfg), "agents":
                                               agents_table(world, np.arange(world.n_agents))})
        # The logs of rounds 0..K are shared; the state of K is the fork's own, written with
        # the fork's config and schedule, so a resume of the fork keeps its changes.
        store.link_logs_into(run_dir.checkpoints, fork_round)
        cp = checkpoint(world)  # (its log part is empty: restored journals start empty)
        run_dir.checkpoints.write_state(cp.round, cp.state, cp.meta)
        run_dir.write_meta(run_id=run_dir.run_id, name=cfg.name, config_hash=config_hash(cfg),
                           created_at=datetime.now().isoformat(), engine=engine_version(),
                           status="created", rounds_done=fork_round, rounds=cfg.rounds,
                           lineage=lineage)
    except BaseException:
        import shutil

        shutil.rmtree(run_dir.root, ignore_errors=True)
        raise
    return Run(cfg=cfg, world=world, dir=run_dir, store=db)


def _write_fork_setup(db: TrajectoryStore, world, run_dir: RunDir, lineage: dict) -> None:
    """The fork's own rows: its run row (with lineage), topics and the agents as of K."""
    cfg = world.cfg
    db.con.execute("BEGIN TRANSACTION")
    db.write_run(run_row(cfg, run_dir, lineage))
    db.insert("topics", topics_table(cfg))
    db.insert("agents", agents_table(world, np.arange(world.n_agents)))
    db.con.execute("COMMIT")

"""A run directory on disk: its paths, its `run.json`, and how one is found by path or id.

    runs/<run_id>/
        config.yaml          the resolved config
        run.json             id, config hash, status, rounds done, lineage
        trajectory.duckdb    the trajectory (sim.store.trajectory)
        checkpoints/         logs and states (sim.store.checkpoints)
"""

from __future__ import annotations

import json
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import yaml

from sim.core.errors import InputError
from sim.store.checkpoints import CheckpointStore

DB_NAME = "trajectory.duckdb"
_META_LOCK = threading.Lock()


def engine_version() -> str:
    """The installed shoal version."""
    try:
        return version("shoal")
    except PackageNotFoundError:
        return "0+unknown"


@dataclass
class RunDir:
    """Paths of a run directory."""

    root: Path

    @property
    def run_id(self) -> str:
        """The run's id (its folder name)."""
        return self.root.name

    @property
    def db(self) -> Path:
        """The DuckDB trajectory file."""
        return self.root / DB_NAME

    @property
    def config(self) -> Path:
        """The resolved config (YAML)."""
        return self.root / "config.yaml"

    @property
    def meta(self) -> Path:
        """run.json: id, hash, status, lineage."""
        return self.root / "run.json"

    @property
    def checkpoints(self) -> CheckpointStore:
        """The run's checkpoint store."""
        return CheckpointStore(self.root / "checkpoints")

    def write_meta(self, **fields) -> None:
        """Merge fields into run.json (atomic replace; the writer thread updates it too)."""
        with _META_LOCK:
            data = json.loads(self.meta.read_text()) if self.meta.exists() else {}
            data.update(fields)
            tmp = self.meta.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=2, default=str))
            tmp.replace(self.meta)

    def read_meta(self) -> dict:
        """run.json as a dict (InputError naming the file if it is damaged)."""
        try:
            meta = json.loads(self.meta.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InputError(f"{self.meta}: damaged ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:120]}); the run cannot be used "
                             "as it is") from None
        if not isinstance(meta, dict):
            raise InputError(f"{self.meta}: damaged (not a JSON object)")
        return meta

    def platform_names(self) -> list[str]:
        """The run's platforms (enabled or not), in code order, as its config lists them."""
        cfg = yaml.safe_load(self.config.read_text()) or {}
        return list(cfg.get("platforms") or {})


def new_run_id(name: str) -> str:
    """`<name>-<YYYYmmdd-HHMMSS>-<6 hex>`: sortable by creation; 16M suffixes a second,
    so runs created in parallel (sweeps, forks) do not collide."""
    return f"{name}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def open_run_dir(path: str | Path) -> RunDir:
    """A run directory given by path (or by id under runs/), checked to look like one."""
    p = Path(path)
    if not p.is_dir() and (Path("runs") / p).is_dir():
        p = Path("runs") / p
    run_dir = RunDir(p)
    if not p.is_dir():
        raise InputError(f"{path}: no such run directory")
    if not run_dir.meta.is_file() or not run_dir.db.is_file():
        raise InputError(f"{path}: not a Shoal run directory (no run.json or {DB_NAME})")
    run_dir.read_meta()  # a damaged run.json is found before anything touches the run
    return run_dir

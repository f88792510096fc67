"""A run directory on disk: its paths, its `run.json`, and how one is found by path or id.

    runs/<run_id>/
        config.yaml          the resolved config
        run.json             id, config hash, status, rounds done, lineage
        trajectory.duckdb    the trajectory (shoal.store.trajectory)
        checkpoints/         logs and states (shoal.store.checkpoints)

A run directory is made under a hidden name, `.<run_id>.creating`, and renamed into place
once whole. The process making it holds an exclusive lock (flock) on that folder until the
rename, so a hidden folder whose lock is free was left by a process that died while making
it: `clean_unfinished` removes those.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import yaml

from shoal.core.errors import InputError
from shoal.core.files import write_text
from shoal.store.checkpoints import CheckpointStore

DB_NAME = "trajectory.duckdb"
CREATING = ".creating"  # the suffix of a run directory being made (after a leading ".")
EMPTY_GRACE_S = 60.0  # an empty one this young may be between its mkdir and its lock
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

    def write_meta(self, **fields: Any) -> None:
        """Merge fields into run.json (atomic replace; the writer thread updates it too)."""
        with _META_LOCK:
            data = json.loads(self.meta.read_text()) if self.meta.exists() else {}
            data.update(fields)
            # (a full disk: run.json stays as it was, no stray half file)
            write_text(self.meta, json.dumps(data, indent=2, default=str))

    def read_meta(self) -> dict[str, Any]:
        """run.json as a dict (InputError naming the file if it is damaged)."""
        try:
            meta = json.loads(self.meta.read_text())
        except FileNotFoundError:
            raise InputError(f"{self.meta}: missing; the run cannot be used as it is (its "
                             "trajectory and checkpoints are still there)") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InputError(f"{self.meta}: damaged ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:120]}); the run cannot be used "
                             "as it is") from None
        if not isinstance(meta, dict):
            raise InputError(f"{self.meta}: damaged (not a JSON object)")
        if (problem := meta_problem(meta)) is not None:
            raise InputError(f"{self.meta}: damaged ({problem}); the run cannot be used as it "
                             "is")
        return meta

    def read_config(self) -> dict[str, Any]:
        """The run's resolved config (config.yaml) as a dict: the one reader of it (an
        InputError naming the file if it is damaged)."""
        try:
            data = yaml.safe_load(self.config.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise InputError(f"{self.config}: cannot be read: {str(exc).splitlines()[0]}"
                             ) from None
        if not isinstance(data, dict):
            raise InputError(f"{self.config}: damaged (not a mapping)")
        return data

    @property
    def stop_request(self) -> Path:
        """A file asking the process running this run to stop after its running round
        (`shoal serve`'s stop button; the run's own Ctrl-C does the same)."""
        return self.root / "stop.request"

    def platform_names(self) -> list[str]:
        """The run's platforms (enabled or not), in code order, as its config lists them."""
        return list(self.read_config().get("platforms") or {})


def meta_problem(meta: dict[str, Any]) -> str | None:
    """What is wrong with run.json's `lineage` (which every reader of a fork's history
    follows), or None: an object, if there, whose parent id and path are text."""
    info = meta.get("lineage")
    if info is None:
        return None
    if not isinstance(info, dict):
        return f"lineage is a {type(info).__name__}, not an object"
    for key in ("parent_run_id", "parent_path"):
        value = info.get(key)
        if value is not None and not isinstance(value, str):
            return f"lineage.{key} is a {type(value).__name__}, not text"
    return None


def is_run_dir(path: Path) -> bool:
    """Whether a folder is a run directory (it holds run.json or a trajectory)."""
    return (path / "run.json").is_file() or (path / DB_NAME).is_file()


def new_run_id(name: str) -> str:
    """`<name>-<YYYYmmdd-HHMMSS>-<6 hex>`: sortable by creation; 16M suffixes a second,
    so runs created in parallel (sweeps, forks) do not collide."""
    return f"{name}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def open_run_dir(path: str | Path) -> RunDir:
    """A run directory given by path (or by id under runs/), checked to look like one: a
    run.json that parses and a trajectory file whose header is whole (InputError naming
    what is wrong)."""
    p = Path(path)
    if not p.is_dir() and (Path("runs") / p).is_dir():
        p = Path("runs") / p
    run_dir = RunDir(p)
    if not p.is_dir():
        if p.is_file() and p.suffix.lower() in (".yaml", ".yml"):
            raise InputError(f"{path}: a config file, not a run directory; run it with "
                             f"`shoal run {path}`, then give the run's directory")
        raise InputError(f"{path}: no such run directory")
    if is_creating(p):
        raise InputError(f"{path}: not a run: a run directory whose making did not finish "
                         "(the process making it was stopped, or is still at it); "
                         f"`shoal runs {p.parent}` removes it once nothing is making it; "
                         "run the command that made it again")
    has_meta, has_db = run_dir.meta.is_file(), run_dir.db.is_file()
    if not has_meta and not has_db:
        raise InputError(f"{path}: not a Shoal run directory (no run.json or {DB_NAME})")
    if not has_db:
        raise InputError(f"{run_dir.db}: missing; the run cannot be read without its "
                         "trajectory: restore the file from a copy, or run the config again")
    run_dir.read_meta()  # a missing or damaged run.json is found before anything changes
    from shoal.store.trajectory import damaged, header_damage  # (DuckDB: loaded when used)

    if (why := header_damage(run_dir.db)) is not None:
        raise InputError(damaged(run_dir.db, why))
    return run_dir


# ---------------------------------------------------------------------- being made


def creating_path(folder: Path, run_id: str) -> Path:
    """Where a run directory is made before it is renamed to `folder/run_id`."""
    return folder / f".{run_id}{CREATING}"


def is_creating(path: Path) -> bool:
    """Whether a path is the hidden name of a run directory being made."""
    return path.name.startswith(".") and path.name.endswith(CREATING)


def lock_creation(root: Path) -> int:
    """Take the lock that says `root` is being made by this process; returns the file
    descriptor that holds it (close it once the folder is renamed or removed: the kernel
    releases it too if the process dies)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # (a cleaner may hold it for a moment: wait)
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass
class Unfinished:
    """The hidden folders of run directories being made in an output folder: those left
    by a process that died making them (removed, or still there if removing failed) and
    those a live process is making now."""

    removed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    in_progress: list[str] = field(default_factory=list)


def clean_unfinished(folder: str | Path) -> Unfinished:
    """Remove the run directories of `folder` whose making was stopped: a hidden
    `.<run_id>.creating` folder whose lock no process holds. One whose lock is held is
    being made now and stays; so does an empty one younger than a minute (its maker may
    not have locked it yet)."""
    found = Unfinished()
    root = Path(folder)
    if not root.is_dir():
        return found
    for path in sorted(root.iterdir()):
        if not is_creating(path):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:  # renamed into place (or removed) meanwhile, or not a folder
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                found.in_progress.append(path.name)
                continue
            try:
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    continue  # renamed into place, and another folder took the name
            except FileNotFoundError:
                continue
            if not os.listdir(fd) and time.time() - os.fstat(fd).st_mtime < EMPTY_GRACE_S:
                found.in_progress.append(path.name)
                continue
            shutil.rmtree(path, ignore_errors=True)  # (still holding its lock)
            (found.left if path.exists() else found.removed).append(path.name)
        finally:
            os.close(fd)
    return found

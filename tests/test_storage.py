"""A disk that fills up mid-run: the run stops as a user error saying which round is safe
and how to resume, and resuming once there is space gives the tables of a run that never
stopped."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from shoal.cli.main import main
from shoal.store.run_dir import RunDir
from tests.conftest import write_config
from tests.helpers import small_disk as mounted
from tests.helpers import tables_differ

ROUNDS = 12

pytestmark = pytest.mark.slow  # a run filling a small disk, then resumed


@pytest.fixture
def small_config(tmp_path, quickstart_dict) -> Path:
    """The quick start shrunk: its run directory (about 5 MB) outgrows a 3 MB disk."""
    return write_config(tmp_path / "c.yaml", {**quickstart_dict, "rounds": ROUNDS,
                                              "population": {"size": 300}})


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MB tmpfs (needs root; skipped otherwise), unmounted afterwards."""
    with mounted(tmp_path, "3m") as mount:
        yield mount


def test_full_disk_stops_then_resume_gives_identical_tables(tmp_path, small_config,
                                                            small_disk, capsys):
    """`shoal run` onto a 3 MB disk exits 2 saying the disk is full, which round is safe
    and the `shoal resume` command; with space added, that command finishes the run and
    its tables equal those of a run written where there was room."""
    assert main(["run", str(small_config), "--out", str(tmp_path / "ref"), "--quiet"]) == 0
    (reference,) = (tmp_path / "ref").iterdir()
    capsys.readouterr()

    assert main(["run", str(small_config), "--out", str(small_disk), "--quiet"]) == 2
    err = capsys.readouterr().err
    (run_dir,) = small_disk.iterdir()
    assert f"no space left on the device of {run_dir}" in err
    safe = re.search(r"round (\d+) is the last round saved whole, and safe", err)
    assert safe, err
    assert 0 < int(safe[1]) < ROUNDS  # it stopped mid-run, not before or after
    assert f"`shoal resume {run_dir}` continues the run" in err
    assert int(safe[1]) in RunDir(run_dir).checkpoints.available()

    grown = subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)],
                           capture_output=True)
    if grown.returncode != 0:  # no remount: move the run where there is room instead
        run_dir = Path(shutil.copytree(run_dir, tmp_path / "moved" / run_dir.name))
    assert main(["resume", str(run_dir), "--quiet"]) == 0
    assert tables_differ(reference / "trajectory.duckdb", run_dir / "trajectory.duckdb") == []


def test_resume_while_the_disk_is_still_full_exits_2_and_changes_nothing(
        tmp_path, small_config, small_disk, capsys):
    """issue 26 item 12: `shoal resume` of a run stopped by a full disk, with the disk
    still full, exits 2 saying so (which round is safe, the command to run once there is
    room), not 1 with a bare OSError; run.json still says stopped, and no stray file is
    left."""
    assert main(["run", str(small_config), "--out", str(small_disk), "--quiet"]) == 2
    (run_dir,) = small_disk.iterdir()
    before = sorted(p.name for p in run_dir.iterdir())
    capsys.readouterr()

    assert main(["resume", str(run_dir), "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"no space left on the device of {run_dir}, so the run cannot be resumed yet" in err
    assert f"`shoal resume {run_dir}` continues the run" in err
    assert "internal error" not in err and "Errno" not in err
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["status"] == "stopped"
    assert sorted(p.name for p in run_dir.iterdir()) == before

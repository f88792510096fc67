"""Checkpoints and resume: a restored world equals the live one bit for bit, and a run
killed (SIGKILL) anywhere resumes to exactly the tables of an uninterrupted run."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from shoal.cli.main import main
from shoal.runs.simulation import Simulation
from shoal.world.persistence import restore_world
from tests.conftest import write_config
from tests.helpers import kill_then_resume, make_config, run_cli, run_config, tables_differ

ROUNDS = 14


@pytest.fixture(scope="module")
def small_dict(tmp_path_factory) -> dict:
    """The quick start, smaller and shorter (same features: both platforms, all actions,
    social influence with trust and novelty)."""
    import yaml

    from tests.conftest import CONFIGS

    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update(rounds=ROUNDS, population={"size": 400, "groups": [
        {"name": "activists", "fraction": 0.1}]},
        memory={"context": {"build_for": "all"}, "recent_rounds": 3})
    return data


@pytest.fixture(scope="module")
def reference_db(tmp_path_factory, small_dict) -> Path:
    """An uninterrupted run to compare against."""
    out = tmp_path_factory.mktemp("ref")
    path = write_config(out / "c.yaml", small_dict)
    assert main(["run", str(path), "--out", str(out / "runs"), "--quiet"]) == 0
    (run_dir,) = (out / "runs").iterdir()
    return run_dir / "trajectory.duckdb"


def _world_arrays(world) -> dict[str, object]:
    """Every piece of mutable state, for an exact comparison."""
    out = {"round": world.round, "position": world.beliefs.position,
           "confidence": world.beliefs.confidence, "alive": world.alive,
           "trust.keys": world.trust.keys, "trust.values": world.trust.values,
           "history.keys": world.history.keys, "history.last": world.history.last_round,
           "texts": world.posts.text, "n_agents": world.n_agents}
    for name in ("platform", "author", "round", "kind", "parent", "root", "stance", "up",
                 "down", "shares", "replies"):
        out[f"posts.{name}"] = getattr(world.posts, name)
    for plat in world.platforms.values():
        for key in ("members", "recent", "inbox"):
            out[f"{plat.name}.{key}"] = getattr(plat, key)
        out[f"{plat.name}.edges"] = plat.graph.edges.keys
        out[f"{plat.name}.votes"] = plat.votes.keys
        out[f"{plat.name}.reposts"] = plat.reposts.keys
    return out


def test_restored_world_equals_live_world(tmp_path, small_dict):
    """After 10 rounds, restoring the round-10 checkpoint rebuilds every array exactly,
    including the derived indexes (author buffers, inboxes)."""
    cfg = make_config({**small_dict, "rounds": 10}, tmp_path)
    run = Simulation.create(cfg)
    try:
        run.run()
    finally:
        run.close()
    live = _world_arrays(run.world)
    restored, _ = restore_world(run.dir.checkpoints, 10)
    again = _world_arrays(restored)
    assert live.keys() == again.keys()
    for key, value in live.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(value, again[key], err_msg=key)
        else:
            assert value == again[key], key
    assert run.world.posts.n > 300 and len(run.world.trust) > 100


@pytest.mark.parametrize("fault", ["mid_round:4", "mid_commit:6", "after_commit:8",
                                   "mid_checkpoint:10", "after_checkpoint:12"])
@pytest.mark.slow
def test_sigkill_then_resume_gives_identical_tables(tmp_path, small_dict, reference_db, fault):
    """SIGKILL at a crash point (inside a round, inside the DuckDB transaction, between
    the commit and the checkpoint, inside the checkpoint, after it), then `shoal resume`:
    every table equals the uninterrupted run's."""
    path = write_config(tmp_path / "c.yaml", small_dict)
    run_dir = kill_then_resume(path, tmp_path / "runs", fault)
    assert tables_differ(reference_db, run_dir / "trajectory.duckdb") == []


def _last_logged(out: Path) -> int:
    """The newest round whose checkpoint log (its checksums, written last) is under
    `out`'s run directory; -1 before there is one."""
    names = (p.name for p in out.glob("*/checkpoints/log/round-*.json"))
    return max((int(m[1]) for n in names if (m := re.fullmatch(r"round-(\d{6})\.json", n))),
               default=-1)


def _kill_once_past(proc: subprocess.Popen, out: Path, round_: int) -> None:
    """SIGKILL `proc` once it has logged a round past `round_`: wherever in the rounds it
    then is (it goes on while this polls), not by a fixed sleep, which on a loaded machine
    can end before the process reaches the rounds. A process that ended first is left."""
    deadline = time.monotonic() + 300  # generous: a hang guard, not a speed check
    while proc.poll() is None and _last_logged(out) <= round_:
        assert time.monotonic() < deadline, f"no round past {round_} within the deadline"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
def test_sigkill_at_random_moments(tmp_path, small_dict, reference_db):
    """Kill the process from outside at two arbitrary moments in the rounds (the run's,
    then the resume's), resume each time."""
    path = write_config(tmp_path / "c.yaml", small_dict)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "shoal.cli", "run", str(path), "--out",
                             str(out), "--quiet"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _kill_once_past(proc, out, 2)
    (run_dir,) = out.iterdir()
    second = subprocess.Popen([sys.executable, "-m", "shoal.cli", "resume", str(run_dir),
                               "--quiet"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    _kill_once_past(second, out, _last_logged(out))  # once the resume has made progress
    final = run_cli(["resume", str(run_dir), "--quiet"])
    assert final.returncode == 0, final.stderr
    assert tables_differ(reference_db, run_dir / "trajectory.duckdb") == []


def test_retention_keeps_what_was_asked(tmp_path, small_dict):
    """every: 4, keep_last: 2 keeps round 0, the last round and the last two multiples of
    4; logs of every round stay, so those states can still be restored."""
    run = run_config(make_config({**small_dict, "rounds": 13,
                                  "checkpoints": {"every": 4, "keep_last": 2}}, tmp_path))
    store = run.dir.checkpoints
    assert store.available() == [0, 8, 12, 13]
    world, _ = restore_world(store, 8)
    assert world.round == 8 and world.posts.n > 0


def test_resume_errors_exit_2(tmp_path, capsys):
    """Resuming something that is not a run is a clear input error."""
    assert main(["resume", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["resume", str(tmp_path / "empty")]) == 2
    assert "not a Shoal run directory" in capsys.readouterr().err


def test_resume_of_a_finished_run_is_a_no_op(tmp_path, small_dict, reference_db):
    """A finished run resumes to itself: nothing is rerun or duplicated."""
    cfg = make_config({**small_dict, "rounds": 3}, tmp_path)
    run = Simulation.create(cfg)
    try:
        run.run()
    finally:
        run.close()
    before = run.dir.db.stat().st_size
    assert main(["resume", str(run.dir.root), "--quiet"]) == 0
    import duckdb

    con = duckdb.connect(str(run.dir.db), read_only=True)
    assert con.execute("SELECT count(*), max(round) FROM rounds").fetchone() == (3, 3)
    con.close()
    assert before > 0


def _copy_of(reference_db: Path, tmp_path: Path) -> Path:
    """A copy of the finished reference run directory, to damage."""
    import shutil

    return Path(shutil.copytree(reference_db.parent, tmp_path / reference_db.parent.name))


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(("where", "damage"), [
    (f"state/round-{ROUNDS:06d}/state.npz", _flip_middle_byte),
    (f"state/round-{ROUNDS:06d}/state.npz", _truncate),
    (f"log/round-{ROUNDS:06d}.npz", _flip_middle_byte),
], ids=["state-flipped", "state-truncated", "log-flipped"])
def test_damaged_newest_checkpoint_falls_back(tmp_path, reference_db, where, damage, capsys):
    """A byte flipped in, or the tail cut off, the newest checkpoint of a finished run:
    `shoal resume` says the checkpoint is damaged, resumes from the newest intact one (the
    round before), reruns the last round, and ends with the reference run's tables."""
    run_dir = _copy_of(reference_db, tmp_path)
    damage(run_dir / "checkpoints" / where)
    assert main(["resume", str(run_dir), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"the checkpoint of round {ROUNDS} is damaged" in err
    assert f"resuming from round {ROUNDS - 1}, the newest intact checkpoint" in err
    assert tables_differ(reference_db, run_dir / "trajectory.duckdb") == []


def test_a_damaged_older_checkpoint_does_not_fail_a_resume_that_succeeded(
        tmp_path, reference_db, capsys):
    """An older checkpoint's meta.json cut short, and the newest checkpoint damaged:
    `shoal resume` resumes from the round before and finishes (exit 0, the reference
    tables), and its summary says which checkpoint is damaged instead of failing with an
    internal error after the run had finished."""
    run_dir = _copy_of(reference_db, tmp_path)
    _truncate(run_dir / "checkpoints" / f"state/round-{ROUNDS:06d}/state.npz")
    _truncate(run_dir / "checkpoints" / "state/round-000001/meta.json")
    assert main(["resume", str(run_dir)]) == 0
    out = capsys.readouterr()
    assert "internal error" not in out.err, out.err
    assert "damaged: round 1" in " ".join(out.out.split()), out.out
    assert tables_differ(reference_db, run_dir / "trajectory.duckdb") == []


def test_garbage_run_json_exits_2_and_touches_nothing(tmp_path, reference_db, capsys):
    """run.json that is not JSON: resume exits 2 naming the file, and the trajectory and
    every checkpoint file are byte for byte what they were."""
    import hashlib

    run_dir = _copy_of(reference_db, tmp_path)
    (run_dir / "run.json").write_bytes(b"\x00{not json at all")

    def digests() -> dict[str, str]:
        return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(run_dir.rglob("*")) if p.is_file()}

    before = digests()
    assert main(["resume", str(run_dir), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{run_dir / 'run.json'}: damaged" in err
    assert digests() == before


@pytest.mark.parametrize("lineage", ["x", [1], {"parent_run_id": 5},
                                     {"parent_run_id": "p", "parent_path": ["a"]}])
def test_a_run_json_with_a_wrong_lineage_is_damaged_not_an_internal_error(
        tmp_path, reference_db, capsys, lineage):
    """run.json's `lineage` of the wrong shape (found by a hostile-input sweep: resume,
    fork, report and `shoal runs` of the whole folder failed with AttributeError, resume
    after rewriting run.json): resume and fork exit 2 naming the file and the field, and
    touch nothing; `shoal runs` lists the run as damaged beside the others."""
    import hashlib
    import json

    run_dir = _copy_of(reference_db, tmp_path)
    meta = json.loads((run_dir / "run.json").read_text())
    meta["lineage"] = lineage
    (run_dir / "run.json").write_text(json.dumps(meta))

    def digests() -> dict[str, str]:
        return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(run_dir.rglob("*")) if p.is_file()}

    before = digests()
    for argv in (["resume", str(run_dir), "--quiet"],
                 ["fork", str(run_dir), "--round", "1", "--quiet"]):
        assert main(argv) == 2, argv
        err = " ".join(capsys.readouterr().err.split())
        assert f"{run_dir / 'run.json'}: damaged (lineage" in err, err
        assert "internal error" not in err
    assert digests() == before
    assert main(["runs", str(tmp_path)]) == 0
    assert "damaged" in capsys.readouterr().out


def test_a_components_numpy_numbers_come_back_as_numbers(tmp_path):
    """A part's state meta holding numpy scalars reads back as the numbers (not their
    text, which a fork would then add to an int); a value JSON cannot hold is an error
    naming the component, not a string saved in its place."""
    import threading

    from shoal.core.registry import PluginError
    from shoal.core.state import State
    from shoal.store.checkpoints import CheckpointStore

    store = CheckpointStore(tmp_path)
    part = State(meta={"calls": np.int64(3), "weight": np.float32(0.5), "n": [np.int32(2)]})
    store.write_state(1, {"my_part": part}, {})
    state, _ = store.read_state(1)
    assert state["my_part"].meta == {"calls": 3, "weight": 0.5, "n": [2]}
    assert type(state["my_part"].meta["calls"]) is int
    with pytest.raises(PluginError, match=r"'my_part'.*lock"):
        store.write_state(2, {"my_part": State(meta={"lock": threading.Lock()})}, {})

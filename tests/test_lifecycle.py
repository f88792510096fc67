"""A run's lifecycle at its edges (issue 26): what a kill while a run directory is made,
or after its last checkpoint, leaves and what `shoal runs` and `shoal resume` then say; a
damaged trajectory file refused by every command that opens it; and a resumed LLM run's
summary counting what its tables hold."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import yaml

from shoal import open_run
from shoal.cli.main import main
from shoal.core.errors import InputError
from shoal.store.run_dir import clean_unfinished, lock_creation
from tests.conftest import CONFIGS
from tests.helpers import run_cli

ROUNDS = 3


def small_config(folder: Path) -> Path:
    """The quick start shrunk to 50 agents and 3 rounds, written into `folder`."""
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update(rounds=ROUNDS)
    data["population"]["size"] = 50
    data["activity"]["min_active"] = 5
    path = folder / "small.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def files(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder`, by relative path."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run of the small config (local executor)."""
    folder = tmp_path_factory.mktemp("finished")
    out = folder / "runs"
    assert main(["run", str(small_config(folder)), "--out", str(out), "--quiet",
                 "--executor", "local"]) == 0
    (run,) = out.iterdir()
    return run


# ---------------------------------------------------------------------- item 10


def test_a_kill_while_creating_leaves_a_folder_resume_refuses_and_runs_removes(tmp_path,
                                                                               capsys):
    """issue 26 item 10: `shoal run` killed while its run directory is made leaves a
    hidden `.<id>.creating` folder; `shoal resume` refuses it (it is not a run), and
    `shoal runs`, seeing that no process holds its lock, removes it and says so."""
    out = tmp_path / "runs"
    killed = run_cli(["run", str(small_config(tmp_path)), "--out", str(out), "--quiet"],
                     env={"SHOAL_FAULT": "creating:0"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (left,) = out.iterdir()
    assert left.name.startswith(".") and left.name.endswith(".creating")
    assert (left / "run.json").is_file()  # whole, but never renamed into place

    capsys.readouterr()
    assert main(["resume", str(left), "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{left}: not a run: a run directory whose making did not finish" in err
    assert main(["runs", str(out)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"no runs in {out}" in err
    assert f"removed {out}/{left.name}: a run directory whose making was stopped" in err
    assert not left.exists()


def test_a_folder_being_made_stays_while_its_maker_holds_the_lock(tmp_path, capsys):
    """issue 26 item 10: the lock, not the folder's age, tells a folder being made now
    from one left by a killed process: while held, `shoal runs` lists it as being made and
    keeps it; released (its process gone), it is removed. A new run in the folder removes
    such leftovers too."""
    out = tmp_path / "runs"
    making = out / ".busy-20260101-000000-abcdef.creating"
    making.mkdir(parents=True)
    (making / "config.yaml").write_text("name: busy\n")
    lock = lock_creation(making)
    try:
        assert clean_unfinished(out).in_progress == [making.name]
        assert main(["runs", str(out)]) == 0
        assert f"being made now: {out}/{making.name}" in " ".join(
            capsys.readouterr().err.split())
        assert making.is_dir()
    finally:
        os.close(lock)
    assert main(["run", str(small_config(tmp_path)), "--out", str(out), "--quiet",
                 "--executor", "local"]) == 0
    assert not making.exists()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def test_an_empty_young_folder_is_not_taken_for_a_leftover(tmp_path):
    """issue 26 item 10: an empty hidden folder may be one whose maker has not locked it
    yet (between its mkdir and its lock): kept while young, removed once old."""
    empty = tmp_path / ".fresh-20260101-000000-abcdef.creating"
    empty.mkdir()
    assert clean_unfinished(tmp_path).in_progress == [empty.name] and empty.is_dir()
    os.utime(empty, (0, 0))
    assert clean_unfinished(tmp_path).removed == [empty.name] and not empty.exists()


# ---------------------------------------------------------------------- item 11


def test_a_kill_after_the_last_checkpoint_is_finished_for_runs_and_resume(tmp_path, capsys):
    """issue 26 item 11: killed after its last round's checkpoint, a run's run.json still
    says running; `shoal runs` shows it finished (not interrupted), and `shoal resume`
    says there is nothing to resume and marks run.json finished."""
    out = tmp_path / "runs"
    killed = run_cli(["run", str(small_config(tmp_path)), "--out", str(out), "--quiet"],
                     env={"SHOAL_FAULT": f"after_checkpoint:{ROUNDS}"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (run,) = out.iterdir()
    assert json.loads((run / "run.json").read_text())["status"] == "running"

    capsys.readouterr()
    assert main(["runs", str(out)]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if run.name in ln]
    assert "finished" in line and "interrupted" not in line and f"{ROUNDS}/{ROUNDS}" in line
    assert main(["resume", str(run), "--quiet"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"all {ROUNDS} rounds are committed and checkpointed: marked finished" in err
    assert "nothing to resume" in err
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "finished" and meta["rounds_done"] == ROUNDS
    assert open_run(run).status == "finished"


# ---------------------------------------------------------------------- item 12


def damage(db: Path, how: str) -> None:
    """Damage a trajectory file as a disk, a copy or a hand can: cut to half its length,
    bytes flipped all through its middle half, or every byte zeroed."""
    data = bytearray(db.read_bytes())
    n = len(data)
    if how == "truncated":
        data = data[:n // 2]
    elif how == "flipped":
        for i in range(n // 4, 3 * n // 4, 512):
            data[i] ^= 0xFF
    else:
        data = bytearray(n)
    db.write_bytes(bytes(data))


COMMANDS = {
    "resume": lambda run, tmp: ["resume", str(run), "--quiet"],
    "report": lambda run, tmp: ["report", str(run), "--out", str(tmp / "r.html")],
    "inspect": lambda run, tmp: ["inspect", str(run), "--agent", "2", "--round", "2"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("how", ["truncated", "flipped", "zeros"])
def test_a_damaged_trajectory_is_exit_2_naming_the_file(finished, tmp_path, capsys, how,
                                                        command):
    """issue 26 item 12: resume, report and inspect of a run whose trajectory.duckdb was
    cut short, had bytes flipped or was zeroed exit 2, naming the file and saying it is
    damaged (no raw DuckDB text, no traceback); nothing of the run changes."""
    run = Path(shutil.copytree(finished, tmp_path / "runs" / finished.name))
    damage(run / "trajectory.duckdb", how)
    before = files(run)
    capsys.readouterr()
    assert main(COMMANDS[command](run, tmp_path)) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{run / 'trajectory.duckdb'}: damaged (" in err, err
    assert "Traceback" not in err and "internal error" not in err
    assert "IO Error" not in err and "stored checksum" not in err
    assert files(run) == before
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("how", ["truncated", "flipped", "zeros"])
def test_a_damaged_trajectory_in_runs_and_open_run(finished, tmp_path, capsys, how):
    """issue 26 item 12: `open_run` raises an InputError naming the damaged file (when it
    opens the run, or when a frame reads a damaged block); `shoal runs` lists the run as
    damaged with the file and why, and goes on listing the others (a file damaged only
    inside its blocks looks whole until a block is read: runs does not read them)."""
    run = Path(shutil.copytree(finished, tmp_path / "runs" / finished.name))
    damage(run / "trajectory.duckdb", how)
    with pytest.raises(InputError, match=f"{run / 'trajectory.duckdb'}: damaged"):
        open_run(run).beliefs  # noqa: B018
    capsys.readouterr()
    assert main(["runs", str(run.parent)]) == 0
    out = capsys.readouterr()
    (line,) = [ln for ln in out.out.splitlines() if run.name in ln]
    if how == "flipped":
        assert "finished" in line
    else:
        assert "damaged" in line
        assert f"{run / 'trajectory.duckdb'}: damaged (" in " ".join(out.err.split())


# ---------------------------------------------------------------------- item 17


def test_a_resumed_llm_run_counts_no_fallback_the_tables_do_not_hold(tmp_path):
    """issue 26 item 17: the calls of a round that stopped (exit 3: no answer at all) stay
    in `llm_calls` with outcome round_stopped; after the resume the summary counts the
    failures and fallbacks of the rounds that count (none: `actions` has no fallback row),
    and names the stopped round's requests apart."""
    from rich.console import Console

    from shoal.cli.summary import summarize
    from shoal.core.errors import ProviderDown
    from shoal.llm.server import serve_in_thread
    from shoal.runs.simulation import Simulation
    from tests.helpers import make_config, query

    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    data.update(rounds=4)
    data["population"]["size"] = 80
    first = serve_in_thread(seed=0)
    data["llm"]["providers"][0].update(base_urls=[first.url], max_retries=0, timeout_s=10)
    sim = Simulation.create(make_config(data, tmp_path))
    try:
        with pytest.raises(ProviderDown):
            sim.run(on_round=lambda s: first.stop() if s.round == 2 else None)
    finally:
        sim.close()
    second = serve_in_thread(port=first.port, seed=0)
    try:
        with Simulation.resume(sim.dir.root) as again:
            again.run()
    finally:
        second.stop()
    db = sim.dir.db
    stopped = query(db, "SELECT count(*) FROM llm_calls WHERE outcome = 'round_stopped'")
    assert stopped[0][0] > 0
    assert query(db, "SELECT count(*) FROM actions WHERE source::VARCHAR LIKE 'fallback%'"
                 ) == [(0,)]
    console = Console(width=400, record=True)
    console.print(summarize(sim.dir.root))
    text = " ".join(console.export_text().split())
    assert "0 failed" in text and "0 fell back" in text, text
    assert f"{stopped[0][0]:,} requests of round(s) 3, which got no answer" in text


def test_a_run_held_by_this_process_stays_locked_against_others(tmp_path):
    """While a resumed run is open here, another process cannot open it (a second
    `shoal resume` is refused as 'in use'), also after this process has looked its
    lineage up: reading the trajectory's header would close a descriptor of the file, and
    the kernel then drops DuckDB's lock on it."""
    from shoal.runs.simulation import Simulation
    from shoal.store.run_dir import open_run_dir

    out = tmp_path / "runs"
    killed = run_cli(["run", str(small_config(tmp_path)), "--out", str(out), "--quiet"],
                     env={"SHOAL_FAULT": "mid_round:2"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (run,) = out.iterdir()
    sim = Simulation.resume(run)
    try:
        sim.driver()  # (the engine looks up the run's lineage for its response cache)
        open_run_dir(run)  # a header check of a file this process holds
        second = run_cli(["resume", str(run), "--quiet"])
        assert second.returncode == 2, second.stderr
        assert "in use by" in second.stderr
        sim.run()
    finally:
        sim.close()
    assert run_cli(["resume", str(run), "--quiet"]).returncode == 0  # (finished: says so)


def test_a_run_missing_run_json_or_its_trajectory_is_named_so(finished, tmp_path, capsys):
    """A run directory that lost its run.json is listed by `shoal runs` as damaged (not
    passed over as no run), and resume names the missing file; so for a lost trajectory."""
    folder = tmp_path / "runs"
    for lost in ("run.json", "trajectory.duckdb"):
        shutil.rmtree(folder, ignore_errors=True)
        run = Path(shutil.copytree(finished, folder / finished.name))
        (run / lost).unlink()
        capsys.readouterr()
        assert main(["runs", str(folder)]) == 0
        listed = capsys.readouterr()
        if lost == "run.json":
            assert "damaged" in listed.out and "run.json: missing" in listed.err
        assert main(["resume", str(run), "--quiet"]) == 2
        assert f"{lost}: missing" in capsys.readouterr().err


def test_shoal_runs_of_a_run_directory_lists_that_run(finished, capsys):
    """`shoal runs RUN` (a run directory, not the folder of runs) lists that run."""
    capsys.readouterr()
    assert main(["runs", str(finished)]) == 0
    out = capsys.readouterr().out
    assert finished.name in out and "finished" in out

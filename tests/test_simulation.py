"""The in-memory `Simulation`: stepped cell by cell, looked at as DataFrames, forked in
memory, saved as a run directory; and the counterfactual forks its schedule edits allow."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from shoal import open_run
from shoal.cli.main import main
from shoal.core.errors import InputError
from shoal.runs.simulation import Simulation
from tests.conftest import CONFIGS, ROOT, write_config
from tests.golden import run_digests
from tests.helpers import declared

SMALL = ["population.size=150", "rounds=6"]


def frames_equal(a, b, table: str, drop: tuple[str, ...] = ()) -> bool:
    x = a.table(table).drop(columns=list(drop), errors="ignore")
    y = b.table(table).drop(columns=list(drop), errors="ignore")
    return x.reset_index(drop=True).equals(y.reset_index(drop=True))


@pytest.fixture
def on_disk(tmp_path) -> Path:
    """The small quick start run to the end in a run directory."""
    with Simulation.from_yaml(CONFIGS / "quickstart.yaml", out=tmp_path / "disk",
                              overrides=SMALL) as sim:
        sim.run()
    return sim.dir.root


def test_stepping_in_memory_writes_nothing_and_reads_like_a_run(tmp_path, monkeypatch,
                                                                 on_disk):
    monkeypatch.chdir(tmp_path)
    sim = Simulation.from_yaml(CONFIGS / "quickstart.yaml", out=None, overrides=SMALL)
    try:
        assert sim.round == 0 and sim.dir is None
        assert sim.step().round == 1
        sim.run(2)
        assert sim.round == 3
        beliefs = sim.state.beliefs
        assert len(beliefs) == 150 * 2 and beliefs["position"].between(-1, 1).all()
        posts = sim.state.posts
        assert len(posts) == sim.world.posts.n and set(posts["platform"]) <= {"twitter",
                                                                            "reddit"}
        assert {"platform", "follower", "followee"} <= set(sim.state.follows.columns)
        assert sorted(open_run(sim).beliefs["round"].unique()) == [0, 1, 2, 3]
        sim.run()
        run = open_run(sim)
        disk = open_run(on_disk)
        for spec in declared(on_disk / "trajectory.duckdb").values():
            if spec.lineage != "none" and spec.name != "run":  # (its ids and times differ)
                assert frames_equal(run, disk, spec.name, spec.volatile), spec.name
        assert run.status == "finished"
    finally:
        sim.close()
    assert list(tmp_path.iterdir()) == [tmp_path / "disk"]  # nothing but the fixture's


def test_a_fork_in_memory_carries_its_history_and_saves_as_a_run(tmp_path, on_disk):
    sim = Simulation.from_yaml(CONFIGS / "quickstart.yaml", out=None, overrides=SMALL)
    try:
        sim.run()
        same = sim.fork(3)
        changed = sim.fork(3, sets=["policy.post_rate=0.6"])
        for fork in (same, changed):
            fork.run()
        parent, twin, other = open_run(sim), open_run(same), open_run(changed)
        assert frames_equal(parent, twin, "beliefs")  # nothing changed: the same rounds
        b = other.beliefs
        assert b[b["round"] <= 3].reset_index(drop=True).equals(
            parent.beliefs[parent.beliefs["round"] <= 3].reset_index(drop=True))
        assert len(other.posts) != len(parent.posts)
        saved = changed.save(tmp_path / "saved")
        for fork in (same, changed):
            fork.close()
    finally:
        sim.close()
    reread = open_run(saved)
    assert reread.status == "finished" and len(reread.posts) == len(other.posts)
    # a saved run is a normal run directory: it forks like one
    assert main(["fork", str(saved), "--round", "4", "--out", str(tmp_path / "f"),
                 "--quiet"]) == 0


def test_a_saved_unfinished_simulation_resumes_to_the_same_tables(tmp_path, on_disk):
    with Simulation.from_yaml(CONFIGS / "quickstart.yaml", out=None, overrides=SMALL) as sim:
        sim.run(3)
        path = sim.save(tmp_path / "half")
    assert main(["resume", str(path), "--quiet"]) == 0
    a, b = run_digests(path / "trajectory.duckdb"), run_digests(on_disk / "trajectory.duckdb")
    assert sorted(t for t in a.keys() | b.keys() if a.get(t) != b.get(t)) == []


def test_step_after_the_last_round_and_reading_a_closed_memory_run_are_errors():
    sim = Simulation.from_yaml(CONFIGS / "quickstart.yaml", out=None,
                               overrides=["population.size=50", "rounds=1"])
    sim.run()
    with pytest.raises(InputError, match="all 1 rounds have run"):
        sim.step()
    sim.close()
    with pytest.raises(InputError, match="save it before closing"):
        open_run(sim)


# ---------------------------------------------------------------------- schedule edits

NEWS = {"kind": "event", "name": "news", "round": 6, "text": "BREAKING: the levy doubles",
        "stance": {"carbon_tax": -0.8}, "duration": 2}
SEEDED = {"kind": "post", "round": 0, "platform": "twitter", "text": "A seeded post",
          "stance": {"carbon_tax": 0.5}}


@pytest.fixture
def with_news(tmp_path, quickstart_dict) -> tuple[dict, Path]:
    data = {**quickstart_dict, "rounds": 9, "population": {**quickstart_dict["population"],
                                                           "size": 200},
            "interventions": [SEEDED, NEWS]}
    path = write_config(tmp_path / "news.yaml", data)
    assert main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    return data, run


def _run_of(tmp_path: Path, data: dict, name: str) -> Path:
    path = write_config(tmp_path / f"{name}.yaml", data)
    assert main(["run", str(path), "--out", str(tmp_path / name), "--quiet"]) == 0
    (run,) = (tmp_path / name).iterdir()
    return run


def _after(run: Path, k: int) -> dict[str, pd.DataFrame]:
    r = open_run(run)
    out = {s.name: r.table(s.name) for s in declared(run / "trajectory.duckdb").values()
           if s.round_key == "round"}
    return {t: df[df["round"] > k].drop(columns=list(declared(run / "trajectory.duckdb")[t]
                                                      .volatile)).reset_index(drop=True)
            for t, df in out.items()}


def _same_after(a: Path, b: Path, k: int) -> bool:
    x, y = _after(a, k), _after(b, k)
    return all(x[t].equals(y[t]) for t in x)


@pytest.mark.parametrize("how", [["--drop", "news"], ["--drop", "1"],
                                 ["--set", f"interventions={yaml.safe_dump([])}"]])
@pytest.mark.slow
def test_a_fork_without_the_news_is_the_run_configured_without_it(with_news, tmp_path, how):
    data, run = with_news
    assert main(["fork", str(run), "--round", "4", *how, "--out", str(tmp_path / "f"),
                 "--quiet"]) == 0
    (fork,) = (tmp_path / "f").iterdir()
    without = _run_of(tmp_path, {**data, "interventions": [SEEDED]}, "without")
    assert _same_after(fork, without, 4)
    assert open_run(fork).interventions["kind"].tolist() == ["post"]  # round 0's, inherited


@pytest.mark.slow
def test_the_herd_effect_counterfactual_the_natural_way(tmp_path):
    """The herd-effect study as a user first writes it: the upvoted posts scheduled in the
    config itself. Forking before they arrive and dropping them gives exactly the run
    configured without them; with them, the rounds after differ."""
    base = yaml.safe_load((CONFIGS / "herd_effect.yaml").read_text())
    base["rounds"] = 13
    posts = yaml.safe_load((CONFIGS / "herd_effect" / "up.yaml").read_text())
    with_votes = _run_of(tmp_path, {**base, "interventions": [{**posts[0], "name": "votes"}]},
                         "with")
    assert main(["fork", str(with_votes), "--round", "10", "--drop", "votes", "--out",
                 str(tmp_path / "f"), "--quiet"]) == 0
    (fork,) = (tmp_path / "f").iterdir()
    without = _run_of(tmp_path, base, "without")
    assert _same_after(fork, without, 10)
    assert not _same_after(with_votes, without, 10)


@pytest.mark.slow
def test_moving_the_news_is_the_run_configured_with_it_later(with_news, tmp_path, capsys):
    data, run = with_news
    assert main(["fork", str(run), "--round", "4", "--move", "news=8", "--out",
                 str(tmp_path / "f"), "--quiet"]) == 0
    assert "round 8: event (news)" in " ".join(capsys.readouterr().err.split())
    (fork,) = (tmp_path / "f").iterdir()
    later = _run_of(tmp_path, {**data, "interventions": [SEEDED, {**NEWS, "round": 8}]},
                    "later")
    assert _same_after(fork, later, 4)


def test_history_cannot_be_edited(with_news, tmp_path, capsys):
    _, run = with_news
    for args, words in ((["--drop", "0"], "fired at round 0"),
                        (["--move", "news=3"], "only schedule rounds after 4"),
                        (["--drop", "nothing"], "no such intervention")):
        capsys.readouterr()
        code = main(["fork", str(run), "--round", "4", *args, "--out", str(tmp_path / "x")])
        assert code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())


def test_a_kill_while_the_directory_is_made_leaves_no_run(tmp_path):
    out = tmp_path / "runs"
    env = {**os.environ, "SHOAL_FAULT": "creating:0"}
    proc = subprocess.run([sys.executable, "-m", "shoal.cli", "run",
                           str(CONFIGS / "quickstart.yaml"), "--set", "population.size=50",
                           "--out", str(out), "--quiet"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == []
    assert main(["runs", str(out)]) == 0  # "no runs", and no half-made one listed


def test_phases_are_timed(on_disk):
    rounds = open_run(on_disk).rounds
    for phase in ("schedule", "observe", "context", "decide", "apply", "update", "log"):
        assert (rounds[f"ms_{phase}"] >= 0).all() and np.isfinite(rounds[f"ms_{phase}"]).all()


def test_resuming_a_finished_run_changes_no_byte(on_disk, capsys):
    """`shoal resume` of a finished run says so and leaves every file as it was (run.json
    keeps status "finished")."""
    import hashlib

    def digest() -> dict[str, str]:
        return {str(p.relative_to(on_disk)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(on_disk.rglob("*")) if p.is_file()}

    before = digest()
    assert main(["resume", str(on_disk), "--quiet"]) == 0
    assert "is finished" in capsys.readouterr().err.replace("\n", " ")
    assert digest() == before


def test_a_closed_simulation_says_so_when_stepped(tmp_path):
    """issue 26 item 18: `sim.step()` or `sim.run()` after `close()` is an InputError that
    says the simulation is closed and how to go on, not "Event loop is closed" with a
    coroutine never awaited."""
    import warnings

    sim = Simulation.from_yaml(CONFIGS / "quickstart.yaml", out=None, overrides=SMALL)
    sim.step()
    sim.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (a never-awaited coroutine would warn)
        with pytest.raises(InputError, match="is closed, and it was held in memory"):
            sim.step()
        with pytest.raises(InputError, match="is closed"):
            sim.run(2)
    with Simulation.from_yaml(CONFIGS / "quickstart.yaml", out=tmp_path,
                              overrides=SMALL) as disk:
        disk.step()
    with pytest.raises(InputError, match=r"is closed: Simulation.resume\("):
        disk.step()


def test_running_past_the_last_round_warns_and_returns_a_short_value(recwarn):
    """issue 26 item 18: `sim.run(100)` with 6 rounds left runs them, warns that only 6
    were left (RoundsWarning), and returns the rounds' stats as a list shown in one line
    (not a screenful in a notebook cell); once finished, `run(n)` warns that nothing is
    left; a negative count is an InputError."""
    from shoal.runs.simulation import RoundsWarning

    with Simulation.from_yaml(CONFIGS / "quickstart.yaml", out=None, overrides=SMALL) as sim:
        with pytest.warns(RoundsWarning, match=r"has 6 round\(s\) left of its 6; running "
                                               r"rounds 1\.\.6"):
            stats = sim.run(100)
        assert sim.finished and [s.round for s in stats] == [1, 2, 3, 4, 5, 6]
        shown = repr(stats)
        assert shown.startswith("<6 round(s) run: 1..6, ") and "\n" not in shown
        assert len(shown) < 80
        with pytest.warns(RoundsWarning, match="nothing to run"):
            assert sim.run(1) == []
        assert sim.run() == []  # to the end: already there, nothing to say
        with pytest.raises(InputError, match="whole number >= 0"):
            sim.run(-1)


def test_a_closed_simulation_on_disk_forks_in_memory(tmp_path, on_disk):
    """`fork()` on a simulation that was closed reads its history from its directory (it
    used to fail reading the closed run)."""
    with Simulation.resume(on_disk) as sim:
        pass
    fork = sim.fork(3)
    try:
        fork.run()
        assert open_run(fork).beliefs["round"].max() == fork.cfg.rounds
    finally:
        fork.close()


def test_the_notebook_api_names_wrong_argument_types():
    """Arguments of the wrong kind are InputErrors naming the argument: a round as text or
    a float, one string where a list of strings goes (it would be read as its
    characters), a path where interventions go, no runs at all; a numpy round is a
    round."""
    from shoal import open_runs

    quick = CONFIGS / "quickstart.yaml"
    sim = Simulation.from_yaml(quick, out=None, overrides=["rounds=2", "population.size=50"])
    try:
        sim.run()
        for call, said in (
                (lambda: sim.fork("2"), "fork at '2': a round is a whole number"),
                (lambda: sim.fork(1.0), "fork at 1.0: a round is a whole number"),
                (lambda: sim.fork(1, sets="policy.post_rate=0.3"), "sets: a list of strings"),
                (lambda: sim.fork(1, interventions="x.yaml"), "interventions: a list of"),
                (lambda: Simulation.from_yaml(quick, overrides="rounds=3"), "overrides: a list"),
                (lambda: Simulation.from_dict(None), "from_dict: the config must be a mapping"),
                (lambda: open_runs([]), "open_runs: no runs given")):
            with pytest.raises(InputError, match=re.escape(said)):
                call()
        fork = sim.fork(np.int64(1), sets=["policy.post_rate=0.3"])
        assert fork.round == 1
        fork.close()
    finally:
        sim.close()

"""The command line: exit codes, messages, and nothing left behind by bad input."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from shoal.cli.main import main
from tests.conftest import CONFIGS, write_config


def _bad_configs(tmp_path, base: dict) -> dict[str, tuple[str, str]]:
    """name -> (config path, text the error must contain)."""
    cases = {}

    def add(name: str, data: dict | str, expect: str) -> None:
        path = tmp_path / f"{name}.yaml"
        if isinstance(data, str):
            path.write_text(data)
        else:
            write_config(path, data)
        cases[name] = (str(path), expect)

    add("unknown_key", {**base, "rounds_total": 3}, "rounds_total: unknown field")
    add("wrong_type", {**base, "rounds": [1, 2]}, "rounds: must be an integer")
    add("negative_size", {**base, "population": {"size": -3}},
        "population.size: must be > 0, got -3")
    add("missing_profiles", {**base, "population": {"file": "missing.csv"}},
        "population.file: file not found: missing.csv")
    bad_rec = copy.deepcopy(base)
    bad_rec["platforms"]["reddit"]["recommender"] = {"kind": "trending"}
    add("unknown_recommender", bad_rec, "platforms.reddit.recommender: unknown kind 'trending'")
    add("malformed_yaml", "rounds: [1, 2\ntopics: a\n", "malformed YAML")
    add("karate_mismatch", {**base, "graph": {"kind": "networkx", "name": "karate_club_graph"}},
        "karate_club_graph has 34 nodes but population.size is 1000")
    (tmp_path / "edges.txt").write_text("0 1\n1 x\n")
    add("bad_edge", {**base, "graph": {"kind": "edgelist", "file": "edges.txt"}},
        "edges.txt:2: agent id must be an integer")
    return cases


@pytest.mark.parametrize("case", ["unknown_key", "wrong_type", "negative_size",
                                  "missing_profiles", "unknown_recommender", "malformed_yaml",
                                  "karate_mismatch", "bad_edge"])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, quickstart_dict, capsys, case):
    """Each bad config exits 2 with a message naming the problem; no run directory."""
    path, expect = _bad_configs(tmp_path, quickstart_dict)[case]
    out = tmp_path / "runs"
    code = main(["run", path, "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert expect in " ".join(err.split())
    assert not out.exists() or not any(out.iterdir())


def test_check_prints_the_resolved_config(capsys):
    """`shoal check` validates and prints every field, defaults included."""
    assert main(["check", str(CONFIGS / "quickstart.yaml"), "--seed", "9"]) == 0
    captured = capsys.readouterr()
    assert "seed: 9" in captured.out
    assert "novelty_new: 1.5" in captured.out  # a default the file does not set
    assert "is valid" in captured.err


def test_check_takes_every_override_flag_of_run(capsys):
    """docs/config.md: `shoal check` takes the same override flags as `shoal run`, so a
    command line can be checked before it is run (`--name` was missing)."""
    args = ["--seed", "9", "--rounds", "4", "--name", "checked", "--out", "elsewhere",
            "--set", "population.size=50", "--executor", "local", "--shards", "2"]
    assert main(["check", str(CONFIGS / "quickstart.yaml"), *args]) == 0
    out = capsys.readouterr().out
    assert "name: checked" in out and "rounds: 4" in out and "dir: elsewhere" in out


def test_karate_club_config_runs(tmp_path, quickstart_dict):
    """A networkx built-in graph works when the population matches its size."""
    data = {**quickstart_dict, "rounds": 3, "population": {"size": 34},
            "graph": {"kind": "networkx", "name": "karate_club_graph"}}
    path = write_config(tmp_path / "k.yaml", data)
    assert main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"]) == 0


def test_console_script_end_to_end(tmp_path):
    """The installed `shoal` entry point runs a config and exits 0 (subprocess)."""
    result = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "run", str(CONFIGS / "quickstart.yaml"),
         "--rounds", "3", "--out", str(tmp_path), "--quiet"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "agent-steps/s" in result.stdout
    assert len(list(tmp_path.iterdir())) == 1


def test_internal_error_is_one_line_exit_1(tmp_path, quickstart_dict, capsys, monkeypatch):
    """An unexpected exception is exit 1 with a one-line message (no traceback)."""

    def boom(self):
        raise RuntimeError("simulated failure\nsecond line")

    import shoal.engine.driver

    monkeypatch.setattr(shoal.engine.driver.RoundDriver, "step", boom)
    path = write_config(tmp_path / "c.yaml", {**quickstart_dict, "rounds": 2})
    assert main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: simulated failure" in " ".join(err.split())
    assert "second line" not in err and "Traceback" not in err


def test_debug_works_after_the_command_too(tmp_path, quickstart_dict, capsys, monkeypatch):
    """issue 26 item 18: the hint says "run with --debug"; `shoal run X --debug` takes it
    as `shoal --debug run X` does (the traceback is shown), and without it there is none."""

    def boom(self):
        raise RuntimeError("simulated failure")

    import shoal.engine.driver

    monkeypatch.setattr(shoal.engine.driver.RoundDriver, "step", boom)
    path = write_config(tmp_path / "c.yaml", {**quickstart_dict, "rounds": 2,
                                              "population": {"size": 50}})
    for argv in (["run", str(path), "--quiet", "--debug"],
                 ["--debug", "run", str(path), "--quiet"],
                 ["run", str(path), "--quiet"]):
        assert main([*argv, "--out", str(tmp_path / "runs")]) == 1
        err = capsys.readouterr().err
        assert ("Traceback" in err) == ("--debug" in argv), argv
        assert "RuntimeError: simulated failure" in err
    assert main(["runs", str(tmp_path / "runs"), "--debug"]) == 0


def test_run_takes_a_name(tmp_path, quickstart_dict, capsys):
    """issue 26 item 18: `shoal run --name NAME`, as `shoal fork` has: the run id's prefix
    and the run's recorded name."""
    import json

    path = write_config(tmp_path / "c.yaml", {**quickstart_dict, "rounds": 2,
                                              "population": {"size": 50}})
    out = tmp_path / "runs"
    assert main(["run", str(path), "--name", "what_if", "--out", str(out), "--quiet"]) == 0
    (run,) = out.iterdir()
    assert run.name.startswith("what_if-")
    assert json.loads((run / "run.json").read_text())["name"] == "what_if"


def test_a_folder_beyond_the_basic_plane_runs_and_forks(tmp_path, quickstart_dict, capsys):
    """An --out with a character beyond U+FFFF (an emoji): the run and a fork of it (which
    writes into its parent's folder) both work; a name with one is refused by name, shown
    as typed (JSON's escapes would reach YAML as two broken surrogate halves)."""
    path = write_config(tmp_path / "c.yaml", {**quickstart_dict, "rounds": 2,
                                              "population": {"size": 50}})
    out = tmp_path / "runs\U0001f41f"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    (run,) = out.iterdir()
    assert main(["fork", str(run), "--round", "1", "--quiet"]) == 0
    assert len(list(out.iterdir())) == 2
    capsys.readouterr()
    assert main(["run", str(path), "--name", "fish\U0001f41f", "--quiet", "--out",
                 str(out)]) == 2
    assert "got 'fish\U0001f41f'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_ray_run_prints_none_of_rays_own_notices(tmp_path, quickstart_dict):
    """issue 26 item 18: Shoal's own Ray start keeps Ray's token-authentication notice and
    its "Started a local Ray instance" line out of the command's output."""
    path = write_config(tmp_path / "c.yaml", {**quickstart_dict, "rounds": 2,
                                              "population": {"size": 50}})
    result = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "run", str(path), "--executor", "ray",
         "--shards", "1", "--out", str(tmp_path / "runs"), "--quiet"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    for noise in ("Token authentication", "Started a local Ray instance", "INFO worker"):
        assert noise not in result.stderr + result.stdout, result.stderr


def test_a_damage_error_no_library_named_is_still_exit_2(tmp_path, capsys, monkeypatch):
    """issue 26 item 12: a DuckDB error saying a file is damaged that reaches the command
    line unnamed (a read outside the lineage readers) is exit 2 naming the run's
    trajectory file, not an internal error with DuckDB's checksum text."""
    import duckdb

    def damaged_read(*args, **kwargs):
        raise duckdb.Error("Corrupt database file: computed checksum 1 does not match "
                           "stored checksum 2 in block at location 3")

    import shoal.analysis.report

    monkeypatch.setattr(shoal.analysis.report, "write_report", damaged_read)
    (tmp_path / "run").mkdir()
    assert main(["report", str(tmp_path / "run")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{tmp_path / 'run' / 'trajectory.duckdb'}: damaged (a block's checksum" in err
    assert "stored checksum" not in err and "internal error" not in err


def test_ctrl_c_while_duckdb_runs_a_statement_is_an_interruption(capsys):
    """DuckDB turns Ctrl-C during a statement (a run's file being made, a table read)
    into its own exception: the command says `interrupted` and exits 130, as for any
    Ctrl-C, not `internal error`."""
    import argparse

    import duckdb

    from shoal.cli.main import _guarded

    def interrupted(args) -> int:
        raise duckdb.InterruptException("Query interrupted")

    assert _guarded(interrupted, argparse.Namespace(), False) == 130
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    assert "interrupted" in shown and "internal error" not in shown


@pytest.mark.parametrize("error", [
    OSError(28, "No space left on device"),  # (a write names no file: a report's page)
    "duckdb.IOException",  # (a scenario's graph, written by DuckDB)
])
def test_a_full_disk_met_by_any_command_is_a_user_error(error, capsys, tmp_path):
    """A full disk met by a write no check foresaw (`shoal report --out`, `shoal init`,
    `shoal fork --out` on a full disk) says so, naming the --out, and exits 2; it was an
    internal error (exit 1)."""
    import argparse

    import duckdb

    from shoal.cli.main import _guarded

    if error == "duckdb.IOException":
        error = duckdb.IOException('IO Error: Could not write file "x.parquet.tmp": No '
                                   "space left on device")

    def full(args) -> int:
        raise error

    out = tmp_path / "report.html"
    assert _guarded(full, argparse.Namespace(out=str(out)), False) == 2
    shown = " ".join("".join(capsys.readouterr()).split())
    assert f"no space left on the device of {out}" in shown, shown
    assert "internal error" not in shown


def test_a_ctrl_c_after_the_command_has_ended_does_not_change_its_exit_status(tmp_path):
    """A second Ctrl-C while a run closes, or one during the interpreter's exit, came after
    the command had said how it ended: the process exits with the command's status, not
    as killed by SIGINT."""
    script = ("import os, signal, sys, time\n"
              "from shoal.cli.main import main\n"
              f"sys.argv = ['shoal', 'runs', {str(tmp_path / 'none')!r}]\n"
              "code = main()\n"
              "os.kill(os.getpid(), signal.SIGINT)\n"
              "time.sleep(0.5)\n"
              "sys.exit(code)\n")
    done = _python(script)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "KeyboardInterrupt" not in done.stderr


def test_a_ctrl_c_while_the_program_loads_ends_it_quietly():
    """The console script's `run` imports the program itself: a Ctrl-C while Python loads
    it (here raised by the import of shoal.cli.main) exits 130 saying `interrupted`, with
    no traceback."""
    script = ("import builtins\n"
              "real = builtins.__import__\n"
              "def loading(name, *args, **kwargs):\n"
              "    if name == 'shoal.cli.main':\n"
              "        raise KeyboardInterrupt\n"
              "    return real(name, *args, **kwargs)\n"
              "builtins.__import__ = loading\n"
              "from shoal.cli import run\n"
              "run()\n")
    done = _python(script)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "interrupted"


def _python(script: str):
    """`script` run by this Python in a process of its own: its exit status and output."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)


def test_check_prints_yaml_that_reads_back_whatever_its_lines(tmp_path):
    """`shoal check CONFIG > file` gives the resolved config as YAML that reads back to
    the same values, a token longer than a terminal line included (rich wrapped it)."""
    import yaml

    label = "see https://example.org/" + "x" * 120
    path = write_config(tmp_path / "c.yaml", {
        "rounds": 2, "population": {"size": 5},
        "topics": [{"name": "a", "label": label, "keywords": ["k" * 100]}]})
    done = subprocess.run([sys.executable, "-m", "shoal", "check", str(path)],
                          capture_output=True, text=True, check=True)
    topic = yaml.safe_load(done.stdout)["topics"][0]
    assert topic["label"] == label and topic["keywords"] == ["k" * 100]


def test_the_open_hint_is_python_whatever_the_path():
    """The "open it:" line is valid Python for a folder with a quote or a newline."""
    import ast
    from pathlib import Path

    from shoal.cli.summary import open_hint

    root = Path("/tmp/it's\nhere")
    call = ast.parse(open_hint(root).removeprefix("open it: ")).body[0].value
    assert ast.literal_eval(call.args[0]) == str(root / "trajectory.duckdb")

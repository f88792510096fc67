"""The command line: exit codes, messages, and nothing left behind by bad input."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from sim.cli.main import main
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


def test_karate_club_config_runs(tmp_path, quickstart_dict):
    """A networkx built-in graph works when the population matches its size."""
    data = {**quickstart_dict, "rounds": 3, "population": {"size": 34},
            "graph": {"kind": "networkx", "name": "karate_club_graph"}}
    path = write_config(tmp_path / "k.yaml", data)
    assert main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"]) == 0


def test_console_script_end_to_end(tmp_path):
    """The installed `shoal` entry point runs a config and exits 0 (subprocess)."""
    result = subprocess.run(
        [sys.executable, "-m", "sim.cli", "run", str(CONFIGS / "quickstart.yaml"),
         "--rounds", "3", "--out", str(tmp_path), "--quiet"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "agent-steps/s" in result.stdout
    assert len(list(tmp_path.iterdir())) == 1


def test_internal_error_is_one_line_exit_1(tmp_path, quickstart_dict, capsys, monkeypatch):
    """An unexpected exception is exit 1 with a one-line message (no traceback)."""
    import sim.engine.driver

    def boom(self):
        raise RuntimeError("simulated failure\nsecond line")

    monkeypatch.setattr(sim.engine.driver.RoundDriver, "step", boom)
    path = write_config(tmp_path / "c.yaml", {**quickstart_dict, "rounds": 2})
    assert main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: simulated failure" in " ".join(err.split())
    assert "second line" not in err and "Traceback" not in err

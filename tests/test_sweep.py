"""`shoal sweep`: seed ensembles (and grids) of real runs on Ray, their layout, summary
statistics and reading them back; bad input exits 2 and writes nothing."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from shoal.analysis.notebook import open_sweep
from shoal.analysis.sweeps import SUMMARY_FILE, SWEEP_FILE, seed_stats, summarize_members
from shoal.cli.main import main
from shoal.core.errors import InputError
from shoal.runs import sweep as sweeps
from shoal.runs.simulation import Simulation
from shoal.runs.sweep import parse_grid, plan_sweep, reopen_sweep, run_sweep
from tests.conftest import write_config
from tests.helpers import make_config, query, run_config, tables_differ

SMALL = ["--set", "population.size=200", "--rounds", "5"]


@pytest.fixture
def quickstart_file(tmp_path, quickstart_dict):
    return write_config(tmp_path / "quickstart.yaml", quickstart_dict)


def _only_dir(folder):
    (root,) = [p for p in folder.iterdir() if p.is_dir()]
    return root


@pytest.mark.slow
def test_eight_seeds_of_the_quick_start_run_on_ray_with_intervals(ray_session, tmp_path,
                                                                  quickstart_file, capsys):
    """The issue's check: 8 seeds of the (shrunk) quick start on Ray; 8 finished members,
    each a normal run directory, and every metric has a finite, non-zero 95% interval."""
    out = tmp_path / "sweeps"
    assert main(["sweep", str(quickstart_file), "--seeds", "8", *SMALL, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    root = _only_dir(out)
    spec = json.loads((root / SWEEP_FILE).read_text())
    assert spec["status"] == "finished" and spec["seeds"] == list(range(8))
    assert [m["seed"] for m in spec["members"]] == list(range(8))
    assert all(m["status"] == "finished" for m in spec["members"])
    for m in spec["members"]:
        run = root / m["run"]
        assert (run / "run.json").is_file() and (run / "trajectory.duckdb").is_file()
        assert json.loads((run / "run.json").read_text())["executor"] == "local"
    assert len({m["run"] for m in spec["members"]}) == 8

    rows = list(csv.DictReader((root / SUMMARY_FILE).open()))
    assert len(rows) == 1 and rows[0]["n"] == "8"
    metrics = [c[:-5] for c in rows[0] if c.endswith(".mean")]
    assert set(metrics) == {f"{m}.{t}" for m in ("belief_mean", "belief_sd", "polarization")
                            for t in ("carbon_tax", "nuclear_power")} | {"activity",
                                                                          "engagement"}
    for m in metrics:
        mean, low, high = (float(rows[0][f"{m}.{s}"]) for s in ("mean", "ci95_low",
                                                                "ci95_high"))
        assert math.isfinite(low) and math.isfinite(high) and low < mean < high, m
    # the printed table shows each metric as mean ± half-width
    assert "95% t-interval" in printed.out and "engagement" in printed.out
    assert "8/8 members" in printed.err

    # the analysis side reads the sweep like a run: members' frames, labelled
    sweep = open_sweep(root)
    assert len(sweep.members) == 8 and len(sweep.summary) == 1
    beliefs = sweep.beliefs
    assert list(beliefs.columns[:2]) == ["run", "seed"]
    assert beliefs.groupby("seed")["run"].nunique().eq(1).all()
    assert sorted(beliefs["seed"].unique()) == list(range(8))
    assert len(beliefs) == 8 * 200 * 2 * 6  # seeds x agents x topics x rounds 0..5
    pol = sweep.polarization()  # the notebook API's metrics, per member, labelled
    assert list(pol.columns[:2]) == ["run", "seed"] and pol["seed"].nunique() == 8
    final = pol[(pol["round"] == 5) & (pol["topic"] == "carbon_tax")].sort_values("seed")
    members = sweep.members.sort_values("seed")
    assert np.allclose(final["bimodality"], members["polarization.carbon_tax"])
    from shoal import open_runs  # the notebook entry point opens a sweep folder the same way

    assert open_runs(root).beliefs.equals(beliefs)


@pytest.mark.slow
def test_a_grid_gives_one_summary_row_per_point_and_members_are_normal_runs(
        ray_session, tmp_path, quickstart_dict, quickstart_file):
    """2 grid points x 2 seeds: 2 summary rows with the grid values; a member is the same
    trajectory as a plain run of its config and seed."""
    plan = plan_sweep(quickstart_file, seeds=2, seed_base=5,
                      grid=["policy.post_rate=0.05,0.4"],
                      sets=["population.size=200", "rounds=5"], out=tmp_path / "sweeps")
    assert [(m.point, m.seed) for m in plan.members] == [(0, 5), (0, 6), (1, 5), (1, 6)]
    result = run_sweep(plan, parallel=2)
    assert not result.failed
    summary = result.summary
    assert list(summary["policy.post_rate"]) == [0.05, 0.4]
    assert list(summary["n"]) == [2, 2]
    assert summary.loc[1, "engagement.mean"] > summary.loc[0, "engagement.mean"]

    sweep = open_sweep(result.root)
    posts = sweep.posts
    assert list(posts.columns[:3]) == ["run", "seed", "policy.post_rate"]
    assert set(posts["policy.post_rate"]) == {0.05, 0.4}

    member = next(m for m in result.members if m["point"] == 1 and m["seed"] == 6)
    data = {**quickstart_dict, "seed": 6, "rounds": 5,
            "population": {**quickstart_dict["population"], "size": 200},
            "policy": {"post_rate": 0.4}}
    plain = run_config(make_config(data, tmp_path / "plain"))
    differ = tables_differ(result.root / member["run"] / "trajectory.duckdb", plain.dir.db)
    assert differ in ([], ["run"])  # (the run row's name is the sweep member's)
    assert query(result.root / member["run"] / "trajectory.duckdb",
                 "SELECT seed, topics, fork_round FROM run") == query(
        plain.dir.db, "SELECT seed, topics, fork_round FROM run")


@pytest.mark.slow
def test_a_stopped_sweep_resumes_its_members_where_they_stopped(ray_session, tmp_path,
                                                                quickstart_file):
    """A sweep stopped with one member part-way (its run directory left at round 2) and
    one not started: `--resume` continues the first in its own directory, runs the
    second, and writes the summary; the resumed member equals an uninterrupted run of its
    config, and the sweep's record is read from sweep.json, not from the config file
    (changed meanwhile)."""
    plan = plan_sweep(quickstart_file, seeds=2, sets=["population.size=200", "rounds=5"],
                      out=tmp_path / "sweeps")
    # the state a Ctrl-C leaves: the folder, sweep.json, member 0's run stopped at round 2
    plan.root.mkdir(parents=True)
    spec = sweeps._spec(plan, [sweeps._record(m) for m in plan.members])
    spec["status"], spec["members"][0]["status"] = "interrupted", "interrupted"
    sweeps.write_json(plan.root / SWEEP_FILE, spec)
    with Simulation.from_dict(plan.members[0].config) as stopped:
        stopped.run(2)
    quickstart_file.write_text("this: is no longer the sweep's config\n")

    assert main(["sweep", "--resume", str(plan.root), "--quiet"]) == 0
    _, record, kept = reopen_sweep(plan.root)
    assert kept == 2 and record["status"] == "finished"
    assert record["members"][0]["run"] == stopped.run_id
    assert (plan.root / "summary.csv").is_file() and open_sweep(plan.root).summary["n"][0] == 2
    plain = run_config(make_config(plan.members[0].config, tmp_path / "plain"))
    assert tables_differ(plan.root / stopped.run_id / "trajectory.duckdb", plain.dir.db) == []


def test_resume_refuses_what_is_not_a_sweep_and_extra_arguments(tmp_path, capsys):
    assert main(["sweep", "--resume", str(tmp_path)]) == 2
    assert "not a sweep directory (no sweep.json)" in capsys.readouterr().err
    (tmp_path / SWEEP_FILE).write_text("[1, 2]")
    assert main(["sweep", "--resume", str(tmp_path)]) == 2
    assert "is not a sweep's record" in capsys.readouterr().err
    assert main(["sweep", "--resume", str(tmp_path), "--seeds", "2"]) == 2
    assert "give no CONFIG, --seeds" in capsys.readouterr().err
    assert main(["sweep"]) == 2
    assert "give a CONFIG and --seeds N, or --resume DIR" in capsys.readouterr().err


@pytest.mark.parametrize("args, expect", [
    (["--grid", "policy.post_rate"], "expected key=value1,value2"),
    (["--grid", "policy.post_rate="], "expected key=value1,value2"),
    (["--grid", "policy..post_rate=1,2"], "is not a config field path"),
    (["--grid", "policy.post_rate=0.1,,0.2"], "an empty value"),
    (["--grid", "policy.post_rate=[0.1,0.2"], "unbalanced"),
    (["--grid", "seed=1,2"], "use --seeds"),
    (["--grid", "policy.post_rate=0.1", "--grid", "policy.post_rate=0.2"], "given twice"),
    (["--grid", "policy.post_rate=0.1,0.1"], "repeated"),
    (["--grid", "policy.post_rat=0.1,0.2"], "policy.post_rat"),
    (["--grid", "policy.post_rate=0.1,7"], "policy.post_rate"),
    (["--set", "rounds_total=3"], "rounds_total"),
    (["--seeds", "0"], "at least one seed"),
    (["--parallel", "0"], "--parallel 0: must be >= 1"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, quickstart_file, capsys, args, expect):
    """Bad --grid syntax, unknown or invalid config keys, no seeds: exit 2, a message
    naming the problem, no sweep directory (Ray is never started)."""
    out = tmp_path / "sweeps"
    argv = ["sweep", str(quickstart_file), "--out", str(out)]
    if "--seeds" not in args:
        argv += ["--seeds", "2"]
    assert main(argv + args) == 2
    assert expect in " ".join(capsys.readouterr().err.split())
    assert not out.exists()


def test_parse_grid_values_are_yaml_and_brackets_keep_commas():
    grid = parse_grid(["policy.post_rate=0.1,0.2", "output.live_parquet=true,false",
                       "initial_stances.default=[1, 2],{dist: uniform, low: -1}",
                       'beliefs.update="social_influence",bounded_confidence'])
    assert grid == {"policy.post_rate": [0.1, 0.2], "output.live_parquet": [True, False],
                    "initial_stances.default": [[1, 2], {"dist": "uniform", "low": -1}],
                    "beliefs.update": ["social_influence", "bounded_confidence"]}
    with pytest.raises(InputError, match="not a parameter"):
        parse_grid(["output.dir=a,b"])


def test_seed_statistics_by_hand():
    """Mean, sd and the 95% t-interval of a known sample (t(0.975, 3) = 3.182446)."""
    mean, sd, low, high = seed_stats(np.array([1.0, 2.0, 3.0, 4.0, np.nan]))
    half = 3.182446 * math.sqrt(5 / 3) / 2
    assert (mean, sd) == pytest.approx((2.5, math.sqrt(5 / 3)))
    assert (low, high) == pytest.approx((2.5 - half, 2.5 + half), rel=1e-6)
    assert seed_stats(np.array([1.0]))[0] == 1.0
    assert all(math.isnan(v) for v in seed_stats(np.array([1.0]))[1:])
    assert seed_stats(np.array([2.0, 2.0, 2.0]))[2:] == (2.0, 2.0)  # no spread, no width


def test_summary_groups_by_point_and_skips_failed_members():
    members = pd.DataFrame({
        "member": range(5), "point": [0, 0, 0, 1, 1], "run": list("abcde"),
        "seed": [0, 1, 2, 0, 1], "status": ["finished"] * 4 + ["failed"],
        "seconds": 1.0, "k": [1, 1, 1, 2, 2], "m": [1.0, 2.0, 3.0, 5.0, np.nan]})
    s = summarize_members(members, ["k"])
    assert list(s["point"]) == [0, 1] and list(s["k"]) == [1, 2] and list(s["n"]) == [3, 1]
    assert s.loc[0, "m.mean"] == 2.0
    assert s.loc[0, "m.ci95_high"] - 2.0 == pytest.approx(4.302653 * 1 / math.sqrt(3))
    assert s.loc[1, "m.mean"] == 5.0 and math.isnan(s.loc[1, "m.ci95_low"])
    assert list(s["m.n"]) == [3, 1]


def test_a_metric_undefined_in_some_members_says_how_many_its_interval_rests_on():
    """Three finished members, one with the metric NaN (a consensus's bimodality): the
    statistics are over the other two, mean 1.5, sd √0.5, half-width t(0.975, 1)·√0.5/√2
    = 12.7062/2 = 6.3531, and they say n = 2, where the row's n (and the printed header)
    said 3 with nothing to tell the cell apart."""
    from shoal.cli.sweep import summary_table

    members = pd.DataFrame({
        "member": range(3), "point": 0, "run": list("abc"), "seed": [0, 1, 2],
        "status": "finished", "seconds": 1.0, "m": [1.0, 2.0, np.nan], "full": 1.0})
    s = summarize_members(members, [])
    assert s.loc[0, "n"] == 3 and s.loc[0, "m.n"] == 2 and s.loc[0, "full.n"] == 3
    assert s.loc[0, "m.mean"] == 1.5
    assert s.loc[0, "m.ci95_high"] - 1.5 == pytest.approx(6.353102, rel=1e-6)
    console = Console(width=120, record=True)
    console.print(summary_table(s, []))
    printed = console.export_text()
    assert "1.500 ± 6.353 (n = 2)" in printed
    assert "1.000 ± 0.000" in printed and "0.000 (n" not in printed

"""`shoal experiment`: arms compared in pairs over replicates, forked from one base run per
replicate; bad input names its field and writes nothing; an arm without changes differs
from the control by exactly 0 (common random numbers); the effect statistics by hand; a
killed experiment resumes to the tables of an uninterrupted one; the HTML page."""

from __future__ import annotations

import contextlib
import io
import json
import math
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from sim import open_experiment
from sim.analysis.experiments import (
    EFFECTS_FILE,
    EXPERIMENT_FILE,
    REPORT_FILE,
    bootstrap_interval,
    outcomes,
    paired_effects,
)
from sim.analysis.metrics import student_t_quantile
from sim.analysis.sweeps import member_metrics
from sim.cli.main import main
from sim.store.run_dir import open_run_dir
from tests.conftest import ROOT, write_config
from tests.helpers import run_cli, tables_differ

TOPICS = ("carbon_tax", "nuclear_power")


def small_experiment(quickstart: dict) -> dict:
    """The quick start shrunk (60 agents, 6 rounds) with breaking news at round 4, and an
    experiment of 2 replicates branching at round 2: the control, an arm with no change,
    and an arm without the news."""
    data = {**quickstart, "rounds": 6}
    data["population"] = {**data["population"], "size": 60}
    data["interventions"] = [{"kind": "event", "name": "news", "round": 4,
                              "text": "BREAKING: parliament passes the carbon levy",
                              "stance": {"carbon_tax": 0.8}, "duration": 2}]
    data["experiment"] = {"branch_round": 2, "replicates": 2, "seed_base": 5,
                          "arms": {"control": None, "same": {},
                                   "no_news": {"interventions": {"remove": ["news"]}}}}
    return data


def _only_dir(folder: Path) -> Path:
    (root,) = [p for p in folder.iterdir() if p.is_dir()]
    return root


@pytest.fixture(scope="module")
def finished(ray_session, tmp_path_factory):
    """One uninterrupted experiment of the small config: (config file, experiment dir,
    what it printed)."""
    tmp = tmp_path_factory.mktemp("experiment")
    quickstart = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    config = write_config(tmp / "small.yaml", small_experiment(quickstart))
    out = tmp / "out"
    err, std = io.StringIO(), io.StringIO()  # (capsys is per test; rich writes to sys.*)
    with contextlib.redirect_stdout(std), contextlib.redirect_stderr(err):
        code = main(["experiment", str(config), "--out", str(out)])
    assert code == 0, err.getvalue()
    return config, _only_dir(out), std.getvalue()


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize("change, expect", [
    (lambda e: e["arms"]["no_news"].update(overrides={"foo": 1}),
     "experiment.arms.no_news.overrides.foo: unknown field 'foo'"),
    (lambda e: e["arms"]["no_news"].update(overrides={"population.size": 10}),
     "experiment.arms.no_news.overrides.population.size: an arm cannot change this"),
    (lambda e: e["arms"]["no_news"].update(overrides={"seed": 3}),
     "experiment.arms.no_news.overrides.seed: an arm cannot change seed"),
    (lambda e: e["arms"]["no_news"].update(overrides={"policy.post_rate": -1}),
     "experiment.arms.no_news.overrides: policy.post_rate: must be >= 0"),
    (lambda e: e["arms"]["no_news"].update(interventions={"remove": ["nosuch"]}),
     "experiment.arms.no_news.interventions.remove.0: nosuch: no such intervention"),
    (lambda e: e["arms"]["no_news"].update(interventions={"move": {"news": 2}}),
     "experiment.arms.no_news.interventions.move.news: round 2 is not after the branch "
     "round (2)"),
    (lambda e: e["arms"]["no_news"].update(interventions={"add": [
        {"kind": "beliefs", "round": 5, "topic": "nope", "shift": 0.1}]}),
     "experiment.arms.no_news.interventions.add: entry 0"),
    (lambda e: e.update(control="treated"), "experiment.control: 'treated' is not an arm"),
    (lambda e: e.update(metrics=["belief_mean.nope"]),
     "experiment.metrics.0: unknown metric 'belief_mean.nope'"),
    (lambda e: e.update(branch_round=6), "experiment.branch_round: 6 leaves no round"),
    (lambda e: [e["arms"].pop(arm) for arm in ("same", "no_news")],
     "experiment.arms: an experiment needs at least two arms"),
])
def test_bad_input_exits_2_names_the_field_and_writes_nothing(tmp_path, quickstart_dict,
                                                              capsys, change, expect):
    data = small_experiment(quickstart_dict)
    change(data["experiment"])
    config = write_config(tmp_path / "bad.yaml", data)
    out = tmp_path / "out"
    assert main(["experiment", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert expect in " ".join(err.split()), err
    assert not out.exists()


def test_a_config_without_an_experiment_and_a_plain_run_of_one(tmp_path, quickstart_dict,
                                                               capsys):
    """`shoal experiment` needs the section; `shoal run` ignores it (and a config without
    one keeps its resolved form: no `experiment` key)."""
    plain = write_config(tmp_path / "plain.yaml", {**quickstart_dict, "rounds": 2})
    assert main(["experiment", str(plain), "--out", str(tmp_path / "x")]) == 2
    assert "has no experiment section" in capsys.readouterr().err
    data = small_experiment(quickstart_dict)
    data["population"]["size"] = 30
    config = write_config(tmp_path / "exp.yaml", data)
    assert main(["run", str(config), "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    assert main(["check", str(plain)]) == 0
    assert "experiment" not in capsys.readouterr().out


# ---------------------------------------------------------------------- statistics


def test_paired_effects_by_hand():
    """Two arms, three replicates, one metric: the paired differences' mean, sd, t and
    bootstrap intervals and the pairing variances, computed here by hand."""
    values = pd.DataFrame({
        "arm": ["c", "c", "c", "t", "t", "t"], "replicate": [0, 1, 2, 0, 1, 2],
        "metric": "m", "value": [1.0, 2.0, 4.0, 1.5, 2.0, 5.0]})
    (row,) = paired_effects(values, "c", ["c", "t"], ["m"]).to_dict("records")
    d = np.array([0.5, 0.0, 1.0])  # t − c per replicate
    assert row["n"] == 3 and row["mean_diff"] == pytest.approx(0.5)
    assert row["sd_diff"] == pytest.approx(0.5)  # sqrt(((0)^2 + 0.5^2 + 0.5^2) / 2)
    half = student_t_quantile(0.975, 2) * 0.5 / math.sqrt(3)
    assert student_t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-6)
    assert (row["t_low"], row["t_high"]) == pytest.approx((0.5 - half, 0.5 + half))
    # the bootstrap: 2000 resamples of the replicates, drawn by default_rng(0)
    rng = np.random.default_rng(0)
    means = [d[rng.integers(0, 3, size=3)].mean() for _ in range(2000)]
    assert (row["boot_low"], row["boot_high"]) == pytest.approx(
        tuple(np.quantile(means, [0.025, 0.975])))
    assert 0.0 <= row["boot_low"] < 0.5 < row["boot_high"] <= 1.0
    # var(c) = (16/9 + 1/9 + 25/9) / 2 = 7/3 (mean 7/3); var(t) = (16/9 + 25/36 + 169/36)
    # / 2 = 43/12 (mean 17/6); var(d) = 0.25
    assert row["var_control"] == pytest.approx(7 / 3)
    assert row["var_treatment"] == pytest.approx(43 / 12)
    assert row["var_paired"] == pytest.approx(0.25)
    assert row["var_unpaired"] == pytest.approx(7 / 3 + 43 / 12)
    assert row["pairing_ratio"] == pytest.approx(0.25 / (7 / 3 + 43 / 12))
    # a replicate missing in one arm leaves the pair out
    (short,) = paired_effects(values.drop(index=5), "c", ["c", "t"], ["m"]).to_dict("records")
    assert short["n"] == 2 and short["mean_diff"] == pytest.approx(0.25)


def test_end_values_and_small_samples():
    """Belief metrics end at the last round, rates are the mean over rounds 1..R; with one
    replicate the intervals are undefined."""
    per_round = pd.DataFrame({"arm": "a", "replicate": 0, "round": [0, 1, 2, 1, 2],
                              "metric": ["belief_mean.x"] * 3 + ["engagement"] * 2,
                              "value": [0.1, 0.2, 0.3, 4.0, 6.0]})
    end = outcomes(per_round, ["arm", "replicate"]).set_index("metric")["value"]
    assert end["belief_mean.x"] == 0.3 and end["engagement"] == 5.0
    assert all(math.isnan(v) for v in bootstrap_interval(np.array([1.0])))
    assert bootstrap_interval(np.array([1.0, 1.0])) == (1.0, 1.0)


# ---------------------------------------------------------------------- real experiments


def test_an_arm_without_changes_differs_from_the_control_by_exactly_zero(finished):
    """Common random numbers: the arms of a replicate fork one base run, so an arm with no
    change reproduces the control exactly, every metric at every round; the treatment
    (no news at round 4) changes nothing before round 4 and beliefs from round 4 on."""
    _, root, printed = finished
    exp = open_experiment(root)
    assert exp.control == "control" and exp.treatments == ["same", "no_news"]
    assert (exp.units["status"] == "finished").all() and len(exp.units) == 2 + 2 * 3
    same = exp.effects_by_round[exp.effects_by_round["arm"] == "same"]
    assert set(same["metric"]) == {f"{m}.{t}" for m in ("belief_mean", "belief_sd",
                                                        "polarization") for t in TOPICS} \
        | {"activity", "engagement"}
    assert len(same) == 6 * 7 + 2 * 6 and (same["n"] == 2).all()  # rounds 0..6, 1..6
    for col in ("mean_diff", "sd_diff", "boot_low", "boot_high", "t_low", "t_high",
                "var_paired"):
        assert (same[col] == 0).all(), col
    end = exp.effects.set_index(["arm", "metric"])
    assert (end.loc["same", "mean_diff"] == 0).all()
    news = exp.effects_by_round[(exp.effects_by_round["arm"] == "no_news")
                                & (exp.effects_by_round["metric"] == "belief_mean.carbon_tax")]
    assert (news[news["round"] < 4]["mean_diff"] == 0).all()
    assert (news[news["round"] >= 4]["mean_diff"] < 0).all()  # the news pushed beliefs up
    assert end.loc[("no_news", "belief_mean.carbon_tax"), "pairing_ratio"] < 1

    # the runs: each replicate's base stopped at round 2, each arm a fork of it at 2
    for unit in exp.units.itertuples():
        meta = open_run_dir(root / unit.run).read_meta()
        if unit.kind == "base":
            assert meta["status"] == "stopped" and meta["rounds_done"] == 2
            assert meta["run_id"].startswith(f"quickstart-r{unit.replicate}-")
        else:
            base = exp.units[(exp.units["kind"] == "base")
                             & (exp.units["replicate"] == unit.replicate)]["run"].iloc[0]
            assert meta["lineage"]["fork_round"] == 2
            assert meta["lineage"]["parent_run_id"] == Path(base).name
            assert meta["status"] == "finished"
    # end values are what a sweep reports for the same run
    run = exp.units[exp.units["unit"] == "r1-no_news"]["run"].iloc[0]
    ours = exp.outcomes[(exp.outcomes["arm"] == "no_news") & (exp.outcomes["replicate"] == 1)]
    assert dict(zip(ours["metric"], ours["value"], strict=True)) == pytest.approx(
        member_metrics(root / run))

    # what the command printed and wrote
    assert "pairing variance ratio" in printed and "no_news" in printed
    assert pd.read_csv(root / EFFECTS_FILE)["arm"].tolist() == exp.effects["arm"].tolist()
    page = (root / REPORT_FILE).read_text()
    assert "Content-Security-Policy" in page and "data:image/png;base64," in page
    assert "Effects at the end" in page and "no_news" in page
    assert "http://" not in page and "https://" not in page and "<script" not in page


def test_a_killed_experiment_resumes_to_the_tables_of_an_uninterrupted_one(finished,
                                                                          ray_session,
                                                                          tmp_path):
    """SIGKILL the command once it has recorded its third unit (one at a time, so the next
    is under way), then `--resume`: the finished units are kept, the others redone, and
    the effects and every run's tables equal those of the experiment that was never
    interrupted."""
    config, reference, _ = finished
    out = tmp_path / "out"
    address = ray_session.get_runtime_context().gcs_address
    killed = run_cli(["experiment", str(config), "--out", str(out), "--parallel", "1",
                      "--address", address, "--quiet"],
                     env={"SHOAL_FAULT": "experimenting:3"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    root = _only_dir(out)
    spec = json.loads((root / EXPERIMENT_FILE).read_text())
    assert spec["status"] == "running"
    assert 3 <= sum(u["status"] == "finished" for u in spec["units"]) < len(spec["units"])

    assert main(["experiment", "--resume", str(root)]) == 0
    resumed, ref = open_experiment(root), open_experiment(reference)
    assert (resumed.units["status"] == "finished").all()
    pd.testing.assert_frame_equal(resumed.effects, ref.effects, check_exact=True)
    pd.testing.assert_frame_equal(resumed.effects_by_round, ref.effects_by_round,
                                  check_exact=True)
    pd.testing.assert_frame_equal(resumed.metrics, ref.metrics, check_exact=True)
    assert pd.read_csv(root / EFFECTS_FILE).equals(pd.read_csv(reference / EFFECTS_FILE))
    for a, b in zip(resumed.units.itertuples(), ref.units.itertuples(), strict=True):
        assert a.unit == b.unit
        assert tables_differ(root / a.run / "trajectory.duckdb",
                             reference / b.run / "trajectory.duckdb") == [], a.unit
        assert len([p for p in (root / a.unit).iterdir() if p.is_dir()]) == 1  # no leftovers

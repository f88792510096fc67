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

from shoal import open_experiment
from shoal.analysis.experiments import (
    EFFECTS_FILE,
    EXPERIMENT_FILE,
    MIN_BOOTSTRAP,
    REPORT_FILE,
    bootstrap_interval,
    outcomes,
    paired_effects,
    render_report,
    small_sample_warnings,
)
from shoal.analysis.metrics import student_t_quantile
from shoal.analysis.sweeps import member_metrics
from shoal.cli.main import main
from shoal.store.run_dir import open_run_dir
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
    what it printed: stdout, then stderr)."""
    tmp = tmp_path_factory.mktemp("experiment")
    quickstart = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    config = write_config(tmp / "small.yaml", small_experiment(quickstart))
    out = tmp / "out"
    err, std = io.StringIO(), io.StringIO()  # (capsys is per test; rich writes to sys.*)
    with contextlib.redirect_stdout(std), contextlib.redirect_stderr(err):
        code = main(["experiment", str(config), "--out", str(out)])
    assert code == 0, err.getvalue()
    return config, _only_dir(out), std.getvalue() + err.getvalue()


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
    (lambda e: e["arms"]["no_news"].update(interventions={"add": [
        {"kind": "beliefs", "round": 5, "topic": "carbon_tax", "shift": 0.1,
         "target": {"ids": [3, 60]}}]}),
     "experiment.arms.no_news.interventions.add: entry 0: interventions.1.target.ids: no "
     "agent 60 (the population has 60 agents, ids 0..59)"),
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


def test_the_errors_docs_experiments_md_shows_are_what_its_edits_give(tmp_path, monkeypatch,
                                                                      capsys):
    """docs/experiments.md shows the errors of four edits of a copy of
    configs/experiments/news.yaml, with their lines: the page and the shipped file agree
    (the page's line numbers had fallen behind the file's)."""
    page = (ROOT / "docs" / "experiments.md").read_text()
    shown = [line for line in page.splitlines() if line.startswith("error: news.yaml:")]
    source = (ROOT / "configs" / "experiments" / "news.yaml").read_text()
    move = "      interventions: {move: {news: 5}}"
    line = next(x for x in source.splitlines() if x.startswith(move))
    edits = [source.replace(line, line + "\n      overrides: {foo: 1}"),
             source.replace(line, line + "\n      overrides: {population.size: 10}"),
             source.replace("{move: {news: 5}}", "{move: {news: 3}}"),
             source.replace("{remove: [news]}", "{remove: [levy]}")]
    assert len(shown) == len(edits) and all(e != source for e in edits)
    monkeypatch.chdir(tmp_path)
    for text, expect in zip(edits, shown, strict=True):
        Path("news.yaml").write_text(text)
        assert main(["experiment", "news.yaml", "--out", "out"]) == 2
        assert capsys.readouterr().err.strip() == expect
        assert not Path("out").exists()


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
    # t − c per replicate: 0.5, 0, 1
    assert row["n"] == 3 and row["mean_diff"] == pytest.approx(0.5)
    assert row["sd_diff"] == pytest.approx(0.5)  # sqrt(((0)^2 + 0.5^2 + 0.5^2) / 2)
    half = student_t_quantile(0.975, 2) * 0.5 / math.sqrt(3)
    assert student_t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-6)
    assert (row["t_low"], row["t_high"]) == pytest.approx((0.5 - half, 0.5 + half))
    # three pairs are too few for a bootstrap interval (issue 26 item 18)
    assert math.isnan(row["boot_low"]) and math.isnan(row["boot_high"])
    assert row["note"] == f"bootstrap n/a (n = 3; it needs {MIN_BOOTSTRAP})"
    # the bootstrap from five pairs: 2000 resamples of the replicates, by default_rng(0)
    five = pd.concat([values, pd.DataFrame({"arm": ["c", "c", "t", "t"],
                                            "replicate": [3, 4, 3, 4], "metric": "m",
                                            "value": [0.0, 1.0, 0.25, 0.5]})])
    (boot,) = paired_effects(five, "c", ["c", "t"], ["m"]).to_dict("records")
    d5 = np.array([0.5, 0.0, 1.0, 0.25, -0.5])
    rng = np.random.default_rng(0)
    means = [d5[rng.integers(0, 5, size=5)].mean() for _ in range(2000)]
    assert (boot["boot_low"], boot["boot_high"]) == pytest.approx(
        tuple(np.quantile(means, [0.025, 0.975])))
    assert -0.5 <= boot["boot_low"] < 0.25 < boot["boot_high"] <= 1.0
    assert boot["n"] == MIN_BOOTSTRAP and boot["note"] == ""
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


def test_a_metric_undefined_in_every_pair_is_said_so():
    """A metric NaN in every replicate of both arms (the bimodality coefficient of a
    consensus) leaves no pair: n = 0, every statistic NaN, and the note and the warning
    say so instead of speaking of one pair ("n = 0: ... (one pair shows no spread)", and
    "rows with n = 1 paired replicate" for a table with no such row)."""
    values = pd.DataFrame({"arm": ["c", "c", "t", "t"], "replicate": [0, 1, 0, 1],
                           "metric": "m", "value": math.nan})
    effects = paired_effects(values, "c", ["c", "t"], ["m"])
    (row,) = effects.to_dict("records")
    assert row["n"] == 0 and math.isnan(row["mean_diff"]) and math.isnan(row["t_low"])
    assert row["note"] == ("n = 0: no mean, sd, interval or variance ratio (the metric is "
                           "undefined, NaN, in every pair)")
    (warning,) = small_sample_warnings(effects)
    assert warning.startswith("rows with n = 0: the metric is undefined (NaN) in every pair")


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


@pytest.mark.slow
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
    for col in ("mean_diff", "sd_diff", "t_low", "t_high", "var_paired"):
        assert (same[col] == 0).all(), col
    assert same["boot_low"].isna().all() and same["boot_high"].isna().all()  # (n = 2)
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


@pytest.mark.slow
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
    again = run_cli(["experiment", "--resume", str(root), "--quiet"])  # (all finished)
    assert again.returncode == 0, again.stderr
    total = len(spec["units"])
    said = again.stdout + again.stderr
    assert f"{total} of {total} runs finished; nothing is left to run" in said


@pytest.mark.slow
def test_degenerate_statistics_are_said_in_words(finished):
    """Issue 26 item 18: with n = 2 replicates the bootstrap interval is not estimated:
    "n/a (n = 2)" in the printed table, a warning when planned and with the effects, NaN
    in the frames, empty in effects.csv with the reason in its `note` column; and the
    report's runs table shows words for what a unit does not have, never "nan"."""
    _, root, printed = finished
    flat = " ".join(printed.split())
    assert "n/a (n = 2)" in flat and "nan" not in printed
    assert "experiment.replicates: 2 replicate(s) give no bootstrap interval (it needs at " \
           "least 5)" in flat
    assert "n = 2 paired replicates: no bootstrap interval (n/a; it needs at least 5)" in flat
    written = pd.read_csv(root / EFFECTS_FILE)
    assert written["boot_low"].isna().all() and written["t_low"].notna().all()
    assert set(written["note"]) == {"bootstrap n/a (n = 2; it needs 5)"}
    exp = open_experiment(root)
    page = render_report(exp)
    assert ">nan<" not in page and "(base run)" in page
    assert "n/a (n = 2)" in page and "t band (too few pairs for a bootstrap band)" in page
    # a unit that failed and one never run: their missing fields in words
    exp.units.loc[0, ["status", "run", "seconds", "error"]] = ["failed", None, None, "boom"]
    exp.units.loc[1, ["status", "run", "seconds"]] = ["pending", None, None]
    page = render_report(exp)
    assert ">nan<" not in page and ">None<" not in page
    assert "(not run)" in page and "(none)" in page and "boom" in page


def test_parallel_below_one_is_refused_before_anything_is_written(tmp_path,
                                                                  quickstart_dict, capsys):
    """`--parallel 0` is named before the experiment's folder is made (it was checked only
    once the folder and experiment.json were written)."""
    config = write_config(tmp_path / "exp.yaml", small_experiment(quickstart_dict))
    out = tmp_path / "out"
    assert main(["experiment", str(config), "--parallel", "0", "--out", str(out)]) == 2
    assert "--parallel 0: must be >= 1" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_the_notebook_names_what_an_experiment_has(finished):
    """`exp.run` of an arm or replicate the experiment does not have lists those it has;
    `plot_effects` takes one metric by name (not its letters as 22 panels) and refuses one
    not measured; open_run and open_runs of the experiment folder point to
    open_experiment instead of saying there is no run."""
    from shoal import open_run, open_runs
    from shoal.core.errors import InputError

    _, root, _ = finished
    exp = open_experiment(root)
    assert exp.run("no_news", np.int64(1)).last_round == 6
    with pytest.raises(InputError, match="no arm 'base'; arms: control, same, no_news"):
        exp.run("base", 0)
    with pytest.raises(InputError, match=r"no replicate 2; replicates: 0\.\.1"):
        exp.run("no_news", 2)
    assert len(exp.plot_effects("belief_mean.carbon_tax").axes) == 1
    with pytest.raises(InputError, match="'nosuch' not measured; metrics: belief_mean"):
        exp.plot_effects(["nosuch"])
    with pytest.raises(InputError, match="interval='x'"):
        exp.plot_effects(interval="x")
    for opener in (open_run, open_runs):
        with pytest.raises(InputError, match=r"an experiment directory.*open_experiment"):
            opener(root)

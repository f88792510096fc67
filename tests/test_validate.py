"""`shoal validate`'s framework: the registry, the runner on Ray, the results it writes,
the LLM overlay and the CLI. Three small cases registered here (as a plug-in or a notebook
would) run real simulations: one that holds, one whose target cannot be met, one that
breaks. The built-in cases have their own test files (tests/test_validation_*.py)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from shoal.analysis.notebook import open_run
from shoal.core.errors import InputError
from shoal.runs.simulation import Simulation
from shoal.validation import CASES, Case, CaseContext, CaseResult, Check, mean_interval
from shoal.validation.runner import llm_overlay, validate
from tests.helpers import run_cli

SMALL = {"name": "toy", "rounds": 3, "population": {"size": 40},
         "topics": [{"name": "carbon_tax", "keywords": ["carbon tax"]}],
         "platforms": {"twitter": {"feed_size": 6}, "reddit": {"enabled": False}}}


def _final_sd(ctx: CaseContext) -> tuple[list[int], list[float]]:
    """The sd of carbon-tax positions at the last round of each replicate."""
    seeds, sds = ctx.seeds(2, 3), []
    for seed in seeds:
        with Simulation.from_dict(ctx.scenario(SMALL, f"s{seed}"), seed=seed) as sim:
            sim.run()
        beliefs = open_run(sim.dir.root).beliefs
        last = beliefs[beliefs["round"] == beliefs["round"].max()]
        sds.append(float(last[last["topic"] == "carbon_tax"]["position"].std()))
    return seeds, sds


@CASES.register("toy_stability")
class ToyStability(Case):
    title = "Toy: positions stay spread over three rounds"
    source = "a test of the framework <not a study>"

    def run(self, ctx: CaseContext) -> CaseResult:
        seeds, sds = _final_sd(ctx)
        mean, interval = mean_interval(sds)
        fig = Figure(figsize=(3, 2))
        fig.add_subplot().plot(seeds, sds, "o")
        fig.savefig(ctx.out / "sd.png")
        check = Check("sd of positions at the last round", mean, 0.5,
                      "the mean is within 0.3 of 0.5", abs(mean - 0.5) <= 0.3, interval)
        return self.result("toy_stability", ctx, [check], seeds, "40 agents × 3 rounds",
                           plots=["sd.png"])


@CASES.register("toy_impossible")
class ToyImpossible(Case):
    title = "Toy: a target no run can meet"
    source = "a test of the framework"

    def run(self, ctx: CaseContext) -> CaseResult:
        seeds, sds = _final_sd(ctx)
        mean, interval = mean_interval(sds)
        return self.result("toy_impossible", ctx, [Check(
            "sd of positions at the last round", mean, 5.0, "at least 5", mean >= 5.0,
            interval)], seeds, "40 agents × 3 rounds")


@CASES.register("toy_broken")
class ToyBroken(Case):
    title = "Toy: a case whose data is gone"
    source = "a test of the framework"

    def run(self, ctx: CaseContext) -> CaseResult:
        raise InputError("toy.csv: the data is gone")


TOYS = ["toy_stability", "toy_impossible", "toy_broken"]


@pytest.fixture(scope="module")
def toys(ray_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("validation")
    seen: list[tuple[str, str, int, int]] = []
    done = validate(TOYS, out, quick=True, seed=3,
                    on_case=lambda r, i, n: seen.append((r.case, r.verdict, i, n)))
    return done, seen


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_each_case_gets_its_verdict(toys):
    """A case that holds passes, one that cannot meet its target fails, one that raises
    is an error naming why, and the others still run; progress is reported per case."""
    done, seen = toys
    verdicts = {r.case: r.verdict for r in done.results}
    assert verdicts == {"toy_stability": "pass", "toy_impossible": "fail",
                        "toy_broken": "error"}
    assert not done.passed
    assert sorted(s[:2] for s in seen) == sorted(verdicts.items())
    assert sorted(s[2] for s in seen) == [1, 2, 3] and {s[3] for s in seen} == {3}
    broken = next(r for r in done.results if r.case == "toy_broken")
    assert broken.error == "toy.csv: the data is gone" and broken.checks == []


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_seeds_and_replicates_are_the_ones_stated(toys):
    """Quick size: the case's quick replicate count, from the first seed on; the runs
    of a case are in its own folder."""
    done, _ = toys
    stable = next(r for r in done.results if r.case == "toy_stability")
    assert stable.seeds == [3, 4]
    runs = sorted(p.parent.parent.name for p in
                  (done.out / "toy_stability-rule").glob("s*/*/trajectory.duckdb"))
    assert runs == ["s3", "s4"]
    (check,) = stable.checks
    assert check.interval is not None and check.interval[0] <= check.simulated <= \
        check.interval[1]


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_results_table_json_and_page(toys):
    """results.csv has a row per check (and one per error), results.json round-trips,
    and index.html is self-contained: the plot embedded, no external reference, the
    case's text escaped."""
    done, _ = toys
    table = pd.read_csv(done.out / "results.csv")
    assert list(table["case"]) == TOYS
    assert list(table["verdict"]) == ["pass", "fail", "error"]
    assert table.loc[0, "target"] == 0.5 and bool(table.loc[0, "passed"])
    assert np.isfinite(table.loc[1, "simulated"]) and not bool(table.loc[1, "passed"])
    data = json.loads((done.out / "results.json").read_text())
    assert data["quick"] is True
    again = [CaseResult.from_dict(c) for c in data["cases"]]
    assert [r.verdict for r in again] == ["pass", "fail", "error"]
    page = (done.out / "index.html").read_text()
    assert "1 of 3 case runs pass" in page and "data:image/png;base64," in page
    assert "&lt;not a study&gt;" in page and "<not a study>" not in page
    assert "http://" not in page and "https://" not in page and "<script" not in page


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_llm_agents_run_the_same_case_beside_the_rule_agents(ray_session, tmp_path):
    """`--llm CONFIG`: every case runs twice, the second time with the config's `llm`
    section laid over its scenario, so its runs make LLM calls (to the loopback server
    here); the page shows both."""
    provider = tmp_path / "provider.yaml"
    provider.write_text("llm:\n  providers:\n    - base_urls: [loopback]\n"
                        "      model: shoal-loopback\n  agents: {fraction: 0.5}\n")
    done = validate(["toy_stability"], tmp_path / "out", quick=True, replicates=1,
                    llm=provider)
    assert [(r.case, r.agents) for r in done.results] == [
        ("toy_stability", "rule"), ("toy_stability", "llm")]
    calls = {}
    for agents in ("rule", "llm"):
        (db,) = (tmp_path / "out" / f"toy_stability-{agents}").glob("*/*/trajectory.duckdb")
        with duckdb.connect(str(db), read_only=True) as con:
            calls[agents] = con.execute("SELECT count(*) FROM llm_calls").fetchone()[0]
    assert calls["rule"] == 0 and calls["llm"] > 0
    page = (tmp_path / "out" / "index.html").read_text()
    assert "rule agents" in page and "llm agents" in page


def test_llm_overlay_keeps_only_the_llm_sections(tmp_path):
    """The overlay takes `llm` and `memory` and nothing else (a whole config may be
    given: its population is the case's, not the file's)."""
    path = tmp_path / "whole.yaml"
    path.write_text("name: x\nrounds: 9\npopulation: {size: 7}\ntopics: [t]\n"
                    "llm:\n  providers: [{base_urls: [loopback], model: m}]\n"
                    "memory:\n  context: {budget_tokens: 3000}\n")
    assert sorted(llm_overlay(path)) == ["llm", "memory"]


def test_cli_lists_cases_and_says_where_results_went(tmp_path):
    """`shoal validate --list` names every built-in case with its source."""
    proc = run_cli(["validate", "--list"])
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    for name in ("cascades", "herd_effect", "backfire", "group_polarization"):
        assert name in flat


def test_a_context_builds_scenarios_under_its_folder(tmp_path: Path):
    """`ctx.scenario` writes runs under the case's folder and leaves the mapping given
    untouched; rule agents get no LLM section even when an overlay is known."""
    ctx = CaseContext(out=tmp_path, llm={"llm": {"providers": []}})
    data = ctx.scenario(SMALL, "a")
    assert data["output"]["dir"] == str(tmp_path / "a") and "output" not in SMALL
    assert "llm" not in data
    assert "llm" in CaseContext(out=tmp_path, agents="llm", llm={"llm": {}}).scenario(SMALL)


@pytest.mark.slow  # runs simulations (the quick tier leaves it out)
def test_a_builtin_case_runs_with_llm_agents_against_the_loopback_server(ray_session,
                                                                        tmp_path):
    """A shipped case (the smallest, group_polarization) under `--llm`: its LLM runs
    talk to the loopback server, its rule runs do not, and both give finite checks."""
    provider = tmp_path / "provider.yaml"
    provider.write_text("llm:\n  providers:\n    - base_urls: [loopback]\n"
                        "      model: shoal-loopback\n  agents: {fraction: 0.2}\n")
    done = validate(["group_polarization"], tmp_path / "out", quick=True, replicates=1,
                    llm=provider)
    assert [r.agents for r in done.results] == ["rule", "llm"]
    for r in done.results:
        assert r.error is None and r.checks
        assert all(np.isfinite(c.simulated) for c in r.checks)
    calls = {}
    for agents in ("rule", "llm"):
        total = 0
        for db in (tmp_path / "out" / f"group_polarization-{agents}").rglob(
                "trajectory.duckdb"):
            with duckdb.connect(str(db), read_only=True) as con:
                total += con.execute("SELECT count(*) FROM llm_calls").fetchone()[0]
        calls[agents] = total
    assert calls["rule"] == 0 and calls["llm"] > 0


def test_shipped_data_is_read_only_when_its_hash_checks(tmp_path, monkeypatch):
    """A data file that changed (one byte) or went missing is refused with its path and
    why; the shipped copies all check."""
    from shoal.validation import data
    from shoal.validation.case import load_cases

    load_cases()
    assert data.FILES
    for name in data.FILES:
        assert data.path(name).is_file()
    name = sorted(data.FILES)[0]
    copy = tmp_path / name
    copy.write_bytes(data.path(name).read_bytes() + b" ")
    monkeypatch.setattr(data, "FOLDER", tmp_path)
    with pytest.raises(InputError, match="is not the published file's"):
        data.path(name)
    copy.unlink()
    with pytest.raises(InputError, match="the validation data file is missing"):
        data.path(name)
    with pytest.raises(InputError, match=r"no validation data file 'nope\.csv'"):
        data.path("nope.csv")

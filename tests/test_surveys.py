"""Surveys: a questionnaire never changes the run, the response model answers as documented,
scale statistics match a hand computation, and LLM agents answer through the interview
path over real HTTP (the loopback server)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from shoal import open_run
from shoal.cli.main import main
from shoal.cli.survey import _print
from shoal.config import parse_config
from shoal.core.errors import ConfigError
from shoal.runs.simulation import Simulation
from shoal.surveys.config import Survey
from shoal.surveys.responses import rule_responses
from shoal.surveys.scores import scale_summary, wave_change
from tests.conftest import CONFIGS, write_config
from tests.golden import run_digests
from tests.helpers import closed_port, make_config, run_config

SURVEY = {
    "name": "panel", "waves": [0, 3, 6], "sample": {"size": 150},
    "items": [
        {"id": "good", "kind": "likert", "topic": "carbon_tax", "scale": "ct",
         "text": "The carbon tax is a good idea."},
        {"id": "hurts", "kind": "likert", "topic": "carbon_tax", "scale": "ct",
         "reverse": True, "text": "The carbon tax will hurt people like me."},
        {"id": "fair", "kind": "likert", "topic": "carbon_tax", "scale": "ct",
         "text": "The carbon tax is fair."},
        {"id": "pay", "kind": "numeric", "topic": "carbon_tax", "range": [0, 50],
         "text": "How much a month would you pay?"},
        {"id": "vote", "kind": "single", "topic": "carbon_tax", "text": "Your vote?",
         "options": [{"label": "against", "position": -0.6},
                     {"label": "abstain", "position": 0},
                     {"label": "for", "position": 0.6}]},
        {"id": "why", "kind": "text", "text": "Why?"},
    ]}


def _quickstart(tmp_path, surveys: list | None):
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    if surveys is not None:
        data["surveys"] = surveys
    cfg = make_config(data, tmp_path, rounds=6,
                      population={**data["population"], "size": 300})
    return run_config(cfg).dir.root


@pytest.fixture(scope="module")
def surveyed(tmp_path_factory):
    base = tmp_path_factory.mktemp("surveys")
    return _quickstart(base / "with", [SURVEY]), _quickstart(base / "without", None)


def test_a_survey_never_changes_the_run(surveyed):
    with_, without = surveyed
    a, b = (run_digests(run / "trajectory.duckdb") for run in (with_, without))
    # (the run row's config differs by the survey itself: a volatile column anyway)
    assert a.keys() == b.keys()
    assert sorted(t for t in a if a[t] != b[t]) == ["survey_responses"]
    responses = open_run(with_).survey_responses
    # 150 respondents × 5 items answered by rule agents (text is for LLM agents) × 3 waves
    assert len(responses) == 150 * 5 * 3
    assert sorted(responses["round"].unique()) == [0, 3, 6]
    panel = responses.groupby("wave")["agent"].apply(lambda a: tuple(sorted(set(a))))
    assert panel.nunique() == 1  # the same respondents every wave
    assert open_run(without).survey_responses.empty


def test_alpha_and_scores_match_a_hand_computation(surveyed):
    run = open_run(surveyed[0])
    r = run.survey_responses
    wave0 = r[(r["wave"] == 0) & r["item"].isin(["good", "hurts", "fair"])]
    wide = wave0.pivot_table(index="agent", columns="item", values="value")
    wide["hurts"] = 6 - wide["hurts"]  # reverse-coded on 5 points
    wide = wide.dropna()
    k = 3
    items_var = sum(np.var(wide[c].to_numpy(), ddof=1) for c in ("good", "hurts", "fair"))
    total_var = np.var(wide.sum(axis=1).to_numpy(), ddof=1)
    alpha = k / (k - 1) * (1 - items_var / total_var)
    scales = run.survey_scales().set_index("wave")
    assert scales.loc[0, "alpha"] == pytest.approx(alpha, rel=1e-12)
    assert scales.loc[0, "n"] == len(wide)
    assert scales.loc[0, "mean"] == pytest.approx(wide.mean(axis=1).mean(), rel=1e-12)
    # the items measure one position: the scale is reliable
    assert alpha > 0.6
    change = run.survey_change()
    assert list(zip(change["from_wave"], change["to_wave"], strict=True)) == [(0, 1), (1, 2)]
    ab = run.survey_abstention()
    assert ((ab["rate"] > 0) & (ab["rate"] < 0.2)).all()


def test_the_response_model_gives_the_ordered_logit_probabilities():
    survey = Survey(**SURVEY)
    n = 40_000
    agents = np.arange(n)
    position = np.full((n, 1), 0.3)
    confidence = np.full((n, 1), 0.5)
    rows = pd.DataFrame(rule_responses(survey, 0, 4, agents, position, confidence,
                                       {"carbon_tax": 0}, seed=11))
    m = survey.response
    s = m.floor + (m.noise - m.floor) * 0.5
    assert rows[rows["item"] == "good"]["abstained"].mean() == pytest.approx(
        m.abstain * 0.25, abs=0.01)
    cuts = -1 + 2 * np.arange(1, 5) / 5

    def expected(x: float) -> np.ndarray:
        cdf = np.r_[0, 1 / (1 + np.exp(-(cuts - x) / s)), 1]
        return np.diff(cdf)

    for item, x in (("good", 0.3), ("hurts", -0.3)):
        answered = rows[(rows["item"] == item) & ~rows["abstained"]]["value"]
        seen = answered.value_counts(normalize=True).reindex([1, 2, 3, 4, 5], fill_value=0)
        assert np.abs(seen.to_numpy() - expected(x)).max() < 0.01, item
    # the same keys give the same answers; another seed gives others
    again = pd.DataFrame(rule_responses(survey, 0, 4, agents[:50], position[:50],
                                        confidence[:50], {"carbon_tax": 0}, seed=11))
    assert again.equals(rows[rows["agent"] < 50].reset_index(drop=True))
    other = pd.DataFrame(rule_responses(survey, 0, 4, agents[:50], position[:50],
                                        confidence[:50], {"carbon_tax": 0}, seed=12))
    assert not other["value"].equals(again["value"])


@pytest.mark.slow
def test_llm_agents_answer_through_the_interview_path(tmp_path):
    data = yaml.safe_load((CONFIGS / "llm_quickstart.yaml").read_text())
    data["surveys"] = [{**SURVEY, "waves": [1, 2], "sample": {}}]
    data["interventions"] = []
    cfg = make_config(data, tmp_path, rounds=2,
                      population={**data["population"], "size": 60})
    run = run_config(cfg).dir.root
    r = open_run(run).survey_responses
    assert set(r["source"]) == {"rule"}
    # an endpoint that does not answer: exit 3, nothing stored (not abstentions), so the
    # same command asks again once one does
    with closed_port() as closed:
        assert main(["survey", str(run), "--base-url", f"http://127.0.0.1:{closed}/v1",
                     "--model", "m"]) == 3
    assert set(open_run(run).survey_responses["source"]) == {"rule"}
    assert main(["survey", str(run)]) == 0
    r = open_run(run).survey_responses
    llm = r[r["source"] == "llm"]
    agents = set(llm["agent"])
    assert agents and not agents & set(r[r["source"] == "rule"]["agent"])
    assert len(llm) == len(agents) * 2 * len(SURVEY["items"])
    likert = llm[llm["kind"] == "likert"]
    assert likert["value"].between(1, 5).all() and not likert["abstained"].any()
    assert llm[llm["kind"] == "text"]["text"].str.startswith("I ").all()
    assert main(["survey", str(run)]) == 0  # the waves are answered: nothing asked again
    assert len(open_run(run).survey_responses) == len(r)


@pytest.mark.parametrize("change, problem", [
    ({"waves": [0, 99]}, "surveys.0.waves.1: round 99 is outside the run"),
    ({"items": [{"id": "a", "kind": "likert", "topic": "nope", "text": "x"}]},
     "surveys.0.items.0.topic: unknown topic 'nope'"),
    ({"items": [{"id": "a", "kind": "single", "topic": "carbon_tax", "text": "x",
                 "options": [{"label": "one", "position": 0}]}]}, "at least 2 options"),
    ({"items": [{"id": "a", "kind": "text", "text": "x"},
                {"id": "a", "kind": "text", "text": "y"}]}, "'a' is used twice"),
])
def test_bad_surveys_name_the_field(change, problem, tmp_path):
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data["surveys"] = [{**SURVEY, **change}]
    data["output"] = {"dir": str(tmp_path)}
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert problem in str(err.value)


def _small(tmp_path, survey: dict, population: dict | None = None) -> dict:
    """The quick start at 300 agents and 3 rounds (activists: 10%, 30 agents) with one
    survey."""
    data = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    data.update(rounds=3, surveys=[survey], output={"dir": str(tmp_path / "runs")})
    data["population"] = population or {**data["population"], "size": 300}
    return data


LIKERT = {"id": "good", "kind": "likert", "topic": "carbon_tax", "text": "Good idea?"}


def test_a_sample_naming_an_unknown_group_fails_validation_before_anything_is_written(
        tmp_path, capsys):
    """Issue 26 item 15: a survey sample of a group the population does not have is a
    config error (exit 2 with the field's path and line) for `shoal check` and `shoal run`
    alike, not a DuckDB error once the run directory is being written; the same for an
    id outside the population, and for a profile file's groups (known only once the
    population is read, still before anything is written)."""
    survey = {"name": "panel", "waves": [0, 2], "items": [LIKERT],
              "sample": {"select": {"groups": ["commuters"]}, "size": 20}}
    config = tmp_path / "cfg.yaml"
    config.write_text(yaml.safe_dump(_small(tmp_path, survey), sort_keys=False))
    line = next(i for i, text in enumerate(config.read_text().splitlines(), start=1)
                if "commuters" in text) - 1  # (the selector's `groups:` key line)
    for argv in (["check", str(config)], ["run", str(config), "--quiet"]):
        assert main(argv) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert (f"cfg.yaml:{line}: surveys.0.sample.select.groups: unknown groups "
                "['commuters']; population.groups defines ['activists', 'media']") in err
        assert "CHECKPOINT" not in err and "internal error" not in err
    assert not (tmp_path / "runs").exists()

    survey["sample"] = {"select": {"ids": [5, 300]}}
    with pytest.raises(ConfigError, match=r"surveys\.0\.sample\.select\.ids: no agent 300 "
                                          r"\(the population has 300 agents, ids 0\.\.299\)"):
        parse_config(_small(tmp_path, survey))

    profiles = tmp_path / "profiles.csv"
    profiles.write_text("name,username,group\n" + "".join(
        f"P{i},p{i},{'cyclists' if i % 2 else 'drivers'}\n" for i in range(12)))
    survey["sample"] = {"select": {"groups": ["commuters"]}}
    config.write_text(yaml.safe_dump(_small(tmp_path, survey, {"file": str(profiles)}),
                                     sort_keys=False))
    assert main(["run", str(config), "--quiet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "surveys.0.sample.select.groups: unknown groups ['commuters']; the population " \
           "has ['drivers', 'cyclists']" in err and "CHECKPOINT" not in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_sample_larger_than_its_pool_warns_and_records_the_size_used(tmp_path, capsys):
    """Issue 26 item 18: `size: 500` of the 30 activists is known to be too large before
    the run (`shoal check` warns, naming the line); the run warns too, asks all 30, and
    records the size asked for, the pool and the number drawn in run.json, which `shoal
    survey` shows. With a seeded fraction the pool is only known when the run starts."""
    survey = {"name": "panel", "waves": [0, 3], "items": [LIKERT],
              "sample": {"select": {"groups": ["activists"]}, "size": 500}}
    config = write_config(tmp_path / "cfg.yaml", _small(tmp_path, survey))
    assert main(["check", str(config)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "warning: " in err and "surveys.0.sample.size: 500 respondents asked for, but " \
        "only 30 agents can be drawn (known before the run); the sample is all 30 of them" \
        in err
    assert "cfg.yaml:" in err.split("surveys.0.sample.size")[0].rsplit("warning: ", 1)[1]

    assert main(["run", str(config), "--quiet"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "surveys.0.sample.size: 500 respondents asked for, but only 30 agents can be " \
           "drawn (when the run started)" in err
    (run,) = (tmp_path / "runs").iterdir()
    meta = json.loads((run / "run.json").read_text())
    assert meta["surveys"] == [{"survey": "panel", "size": 500, "pool": 30, "drawn": 30}]
    responses = open_run(run).survey_responses
    assert responses.groupby("wave")["agent"].nunique().tolist() == [30, 30]
    assert main(["survey", str(run), "--results-only"]) == 0
    printed = capsys.readouterr()
    assert "samples (drawn when the run started)" in printed.out
    assert "only 30 agents could be drawn" in " ".join(printed.err.split())

    survey["sample"] = {"select": {"fraction": 0.1}, "size": 200}
    cfg = make_config(_small(tmp_path, survey), tmp_path / "more")
    assert cfg.notes() == []  # (how many the fraction draws is not known before the run)
    with Simulation.create(cfg, out=None) as sim:
        (note,) = sim.notes
    assert note.startswith("surveys.0.sample.size: 200 respondents asked for, but only ")


def test_survey_statistics_say_what_cannot_be_estimated(capsys, tmp_path):
    """Issue 26 item 18: a scale answered by one respondent has no alpha, no sd and no
    change interval: NaN in the frames with a note saying why, and "n/a" where `shoal
    survey` prints them, never "nan"."""
    surveys = [{"name": "s", "items": [
        {"id": "a", "kind": "likert", "scale": "x", "points": 5},
        {"id": "b", "kind": "likert", "scale": "x", "points": 5}]}]
    responses = pd.DataFrame({
        "round": [0, 0, 3, 3], "survey": "s", "wave": [0, 0, 1, 1], "agent": 7,
        "item": ["a", "b", "a", "b"], "kind": "likert", "value": [4.0, 5.0, 2.0, 3.0],
        "choice": None, "text": None, "abstained": False, "source": "rule"})
    scales = scale_summary(responses, surveys)
    assert scales["alpha"].isna().all() and scales["sd"].isna().all()
    assert scales["note"].tolist() == ["alpha n/a (n = 1); sd n/a (n = 1)"] * 2
    (change,) = wave_change(responses, surveys).to_dict("records")
    assert change["mean_change"] == -2.0 and np.isnan(change["ci_low"])
    assert change["note"] == "interval n/a (n = 1)"
    _print("change", wave_change(responses, surveys))
    printed = capsys.readouterr().out
    assert "n/a" in printed and "nan" not in printed


def test_an_item_nobody_answered_leaves_its_scale_without_scores_or_alpha():
    """Three items a, b (reverse-coded), c on 5 points; four respondents answer a and b
    in both waves, c in wave 0 only (every wave-1 answer to c is an abstention, as an
    LLM's answers that do not fit the item are).

    Wave 0 (b reverse-coded to 6 − b): rows (1, 1, 2), (2, 2, 3), (4, 4, 4), (5, 5, 5);
    item variances (n − 1) 10/3, 10/3, 5/3, Σ = 25/3; sums 4, 7, 12, 15, variance 73/3;
    alpha = 3/2 · (1 − 25/73) = 72/73. No respondent answered every item in wave 1, so
    it has no score and no alpha (it was alpha over a and b alone, 2 · (1 − 47/91) =
    88/91, reported with items = 2 for a scale of 3 nobody was scored on); and with c
    abstained in every wave, the scores were a KeyError."""
    surveys = [{"name": "s", "items": [
        {"id": "a", "kind": "likert", "scale": "x", "points": 5},
        {"id": "b", "kind": "likert", "scale": "x", "points": 5, "reverse": True},
        {"id": "c", "kind": "likert", "scale": "x", "points": 5}]}]
    answers = {0: [(1, 5, 2), (2, 4, 3), (4, 2, 4), (5, 1, 5)],
               1: [(2, 4, 2), (3, 3, 3), (5, 1, 5), (5, 2, 4)]}
    rows = [{"round": 3 * wave, "survey": "s", "wave": wave, "agent": agent, "item": item,
             "kind": "likert", "value": float(value), "choice": None, "text": None,
             "abstained": wave == 1 and item == "c", "source": "rule"}
            for wave, people in answers.items() for agent, values in enumerate(people)
            for item, value in zip("abc", values, strict=True)]
    responses = pd.DataFrame(rows)
    scales = scale_summary(responses, surveys).set_index("wave")
    assert scales.loc[0, "alpha"] == pytest.approx(72 / 73)
    assert scales.loc[0, "n"] == 4 and scales.loc[0, "mean"] == pytest.approx(38 / 12)
    assert scales.loc[1, "n"] == 0 and np.isnan(scales.loc[1, "alpha"])
    assert scales.loc[1, "items"] == 3
    assert scales.loc[1, "note"] == "alpha n/a (n = 0); sd n/a (n = 0)"
    assert wave_change(responses, surveys).empty  # nobody scored in wave 1
    never = responses.assign(abstained=responses["item"] == "c")
    assert scale_summary(never, surveys)["n"].tolist() == [0, 0]
    assert wave_change(never, surveys).empty


def test_the_questionnaires_schema_has_each_items_kind_of_answer():
    """What a json_schema provider is sent with the questionnaire: every item required,
    each as its kind is answered (the parsing of replies reads the same shapes)."""
    from shoal.surveys.asking import answer_schema
    from shoal.surveys.config import Survey

    survey = Survey.model_validate({"name": "s", "waves": [0], "items": [
        {"id": "good", "kind": "likert", "points": 7, "topic": "carbon_tax",
         "text": "Good?"},
        {"id": "cost", "kind": "numeric", "range": [10, 0], "topic": "carbon_tax",
         "text": "Cost?"},
        {"id": "vote", "kind": "single", "topic": "carbon_tax", "text": "Vote?",
         "options": [{"label": "yes", "position": 1}, {"label": "no", "position": -1}]},
        {"id": "why", "kind": "text", "text": "Why?"}]})
    schema = answer_schema(survey)
    assert schema["required"] == ["good", "cost", "vote", "why"]
    assert schema["properties"] == {
        "good": {"type": "integer", "minimum": 1, "maximum": 7},
        "cost": {"type": "number", "minimum": 0, "maximum": 10},
        "vote": {"type": "string", "enum": ["yes", "no"]},
        "why": {"type": "string"}}

"""`shoal import miroshark|mirofish`: a simulation folder becomes a scenario that checks and
runs, IMPORT.md accounts for every source field, and bad input exits 2 naming the file."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from sim import open_run
from sim.cli.main import main

DATA = Path(__file__).parent / "data" / "import"
CASES = [("miroshark", "miroshark_sim", 15), ("mirofish", "mirofish_sim", 12)]


def _leaf_paths(value, prefix: str = "") -> set[str]:
    """Key paths of a JSON value, computed here independently of the importer: `a.b`, and
    `a[].b` for the objects of a list."""
    if isinstance(value, dict):
        out: set[str] = set()
        for k, v in value.items():
            out |= _leaf_paths(v, f"{prefix}.{k}" if prefix else k)
        return out
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        return set().union(*(_leaf_paths(v, f"{prefix}[]") for v in value if isinstance(v, dict)))
    return {prefix}


def _section(text: str, title: str) -> str:
    """The body of the `## title` section of IMPORT.md."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"IMPORT.md has no section {title!r}"
    return match.group(1)


def _import(source: str, folder: str, out: Path) -> int:
    return main(["import", source, str(DATA / folder), "--out", str(out)])


@pytest.mark.parametrize(("source", "folder", "agents"), CASES)
def test_import_checks_and_runs(tmp_path, capsys, source, folder, agents):
    scenario = tmp_path / "scenario"
    assert _import(source, folder, scenario) == 0
    assert main(["check", str(scenario / "config.yaml")]) == 0
    assert "is valid" in capsys.readouterr().err
    assert main(["run", str(scenario / "config.yaml"), "--out", str(tmp_path / "runs"),
                 "--quiet"]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    run = open_run(run_dir)
    assert len(run.agents) == agents
    assert run.config["population"]["format"] == "twitter_csv"
    assert "llm" not in run.config or run.config["llm"] is None  # rule-based, no model


@pytest.mark.parametrize(("source", "folder", "agents"), CASES)
def test_import_md_accounts_for_every_source_field(tmp_path, source, folder, agents):
    assert _import(source, folder, tmp_path / "s") == 0
    text = (tmp_path / "s" / "IMPORT.md").read_text()
    src = DATA / folder
    sim = json.loads((src / "simulation_config.json").read_text())
    section = _section(text, "simulation_config.json")
    missing = sorted(p for p in _leaf_paths(sim) if f"`{p}`" not in section)
    assert not missing, f"IMPORT.md does not account for {missing}"
    with open(src / "twitter_profiles.csv", newline="") as f:
        header = next(csv.reader(f))
    records = json.loads((src / "reddit_profiles.json").read_text())
    expected = {"twitter_profiles.csv": header,
                "reddit_profiles.json": sorted({k for r in records for k in r})}
    if (src / "polymarket_profiles.json").exists():
        poly = json.loads((src / "polymarket_profiles.json").read_text())
        expected["polymarket_profiles.json"] = sorted({k for r in poly for k in r})
    for file, columns in expected.items():
        body = _section(text, file)
        missing = [c for c in columns if f"`{c}`" not in body]
        assert not missing, f"IMPORT.md: {file} columns not accounted for: {missing}"
    # Every row says what happened to the field.
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows and all(re.search(r"\| (used|approximated|dropped) \|", r) for r in rows)


def test_miroshark_mapping(tmp_path):
    """Time, activity, stances, events, posts and platforms land where IMPORT.md says."""
    import yaml

    out = tmp_path / "s"
    assert _import("miroshark", "miroshark_sim", out) == 0
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert (cfg["rounds"], cfg["minutes_per_round"]) == (24, 60)  # 24 h of 60-minute rounds
    assert [t["name"] for t in cfg["topics"]] == ["port_expansion", "dredging", "marine_life"]
    assert cfg["activity"]["hourly"][3] == 0.05 and cfg["activity"]["hourly"][20] == 1.5
    assert cfg["activity"]["max_active"] == 9  # ceil(6 agents per hour * peak 1.5)
    tw = cfg["platforms"]["twitter"]["recommender"]
    assert (tw["kind"], tw["stance_weight"], tw["popularity_weight"]) == ("personalized", 0.5,
                                                                          0.3)
    events = [iv for iv in cfg["interventions"] if iv["kind"] == "event"]
    assert [(e["round"], e.get("duration")) for e in events] == [(15, None), (21, 3)]
    (posts,) = [iv for iv in cfg["interventions"] if iv["kind"] == "posts"]
    assert posts["round"] == 0
    assert {(p["platform"], p["author"]) for p in posts["items"]} == {
        ("twitter", 1), ("reddit", 1), ("twitter", 8), ("reddit", 8)}
    # Agent 0 (council: supportive, bias 0.3): 0.6 + 0.2 * 0.3, confidence 0.4 + 0.4 * 0.3.
    with open(out / "stances.csv", newline="") as f:
        rows = {(r["agent_id"], r["topic"]): r for r in csv.DictReader(f)}
    assert float(rows["0", "dredging"]["position"]) == pytest.approx(0.66)
    assert float(rows["0", "dredging"]["confidence"]) == pytest.approx(0.52)
    # The council is active 9-17 only: its hourly curve is 0 elsewhere.
    with open(out / "profiles.csv", newline="") as f:
        council = next(csv.DictReader(f))
    curve = json.loads(council["activity_level_frequency"])
    assert [h for h, v in enumerate(curve) if v > 0] == list(range(9, 18))
    text = (out / "IMPORT.md").read_text()
    assert "Polymarket" in _section(text, "polymarket_profiles.json")


def test_imported_agents_keep_their_active_hours(tmp_path):
    """In the run, every agent acts only in its MiroShark `active_hours`."""
    out = tmp_path / "s"
    assert _import("miroshark", "miroshark_sim", out) == 0
    assert main(["run", str(out / "config.yaml"), "--out", str(tmp_path / "runs"),
                 "--quiet"]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    acts = open_run(run_dir).actions
    assert len(acts) > 0
    sim = json.loads((DATA / "miroshark_sim" / "simulation_config.json").read_text())
    hours_of = {c["agent_id"]: set(c["active_hours"]) for c in sim["agent_configs"]}
    for agent, rounds in acts.groupby("agent")["round"]:
        acted = {(r - 1) % 24 for r in rounds}  # round r starts at hour r - 1 (midnight start)
        assert acted <= hours_of[agent], (agent, sorted(acted - hours_of[agent]))


def test_bad_inputs_exit_2_naming_the_file(tmp_path, capsys):
    def err(source_dir: Path) -> str:
        assert main(["import", "miroshark", str(source_dir), "--out",
                     str(tmp_path / "out")]) == 2
        assert not (tmp_path / "out").exists()  # nothing written
        return capsys.readouterr().err

    assert "no such folder" in err(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "simulation_config.json: not found" in err(empty)

    only_config = tmp_path / "only_config"
    only_config.mkdir()
    shutil.copy(DATA / "miroshark_sim" / "simulation_config.json", only_config)
    assert "twitter_profiles.csv: not found" in err(only_config)

    broken = tmp_path / "broken"
    shutil.copytree(DATA / "miroshark_sim", broken)
    (broken / "simulation_config.json").write_text('{"time_config": {"minutes_per_round": 60,\n')
    assert "simulation_config.json:2: malformed JSON" in err(broken)

    broken_profiles = tmp_path / "broken_profiles"
    shutil.copytree(DATA / "miroshark_sim", broken_profiles)
    (broken_profiles / "reddit_profiles.json").write_text("[{\"user_id\": 0,]")
    assert "reddit_profiles.json:1: malformed JSON" in err(broken_profiles)


def test_non_empty_out_is_refused_unless_force(tmp_path, capsys):
    out = tmp_path / "s"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert _import("miroshark", "miroshark_sim", out) == 2
    message = capsys.readouterr().err
    assert "not empty" in message and "--force" in message
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert main(["import", "miroshark", str(DATA / "miroshark_sim"), "--out", str(out),
                 "--force"]) == 0
    assert (out / "config.yaml").is_file() and (out / "notes.txt").read_text() == "mine"
    # Importing again over an import also needs --force.
    assert _import("mirofish", "mirofish_sim", out) == 2


def test_a_miroshark_preset_template_imports_through_init(tmp_path, capsys):
    """A preset (seed document + simulation requirement, MiroShark's preset_templates
    schema): its requirement heads the scenario and ranks what it names first, its sizes
    and platforms are used, and SCENARIO.md says what became of every field."""
    import yaml

    preset = DATA / "preset" / "harbour_toll.json"
    data = json.loads(preset.read_text())
    out = tmp_path / "scenario"
    assert main(["init", str(preset), "--out", str(out)]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["rounds"] == data["estimated_rounds"]
    assert len(yaml.safe_load((out / "personas.yaml").read_text())) == data[
        "estimated_agents"]
    assert config["platforms"]["reddit"] == {"enabled": False}
    assert config["platforms"]["market"]["markets"][0]["topic"] == config["topics"][0]["name"]
    header = (out / "config.yaml").read_text().splitlines()[1]
    assert data["simulation_requirement"][:60] in header
    report = (out / "SCENARIO.md").read_text()
    for field in data:
        assert f"| `{field}` |" in report, field
    # The requirement names the union, the Chamber of Commerce and commuters: they lead.
    groups = re.findall(r"^\| `(\w+)` \| \d+ \|", report, re.MULTILINE)
    assert groups[:3] == ["harbour_workers_union", "chamber_of_commerce", "commuters"]
    assert main(["run", str(out / "config.yaml"), "--out", str(tmp_path / "runs"),
                 "--quiet"]) == 0
    # Asked about commuters alone, the same document puts the commuters first.
    steered = tmp_path / "commuters.json"
    steered.write_text(json.dumps({**data, "simulation_requirement":
                                   "How do commuters take the toll?"}))
    assert main(["init", str(steered), "--out", str(tmp_path / "steered")]) == 0
    report = (tmp_path / "steered" / "SCENARIO.md").read_text()
    groups = re.findall(r"^\| `(\w+)` \| \d+ \|", report, re.MULTILINE)
    assert groups[0] == "commuters"

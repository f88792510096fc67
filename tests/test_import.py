"""`shoal import miroshark|mirofish`: a simulation folder becomes a scenario that checks and
runs, IMPORT.md accounts for every source field, and bad input exits 2 naming the file."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from shoal import open_run
from shoal.cli.main import main

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

    # an input's name on a folder is a mistake, not a missing input (it was imported
    # from the reddit file alone, without a word)
    foldered = tmp_path / "foldered"
    shutil.copytree(DATA / "miroshark_sim", foldered)
    (foldered / "twitter_profiles.csv").unlink()
    (foldered / "twitter_profiles.csv").mkdir()
    assert "twitter_profiles.csv: a folder, not a file; an input file is expected there" \
        in err(foldered)


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


def test_a_run_directory_is_refused_even_with_force(tmp_path, capsys):
    """`--force` overwrites imported files, never a run: a folder holding run.json or a
    trajectory is refused by name and keeps its files byte for byte (a hostile-input
    sweep found its config.yaml replaced and scenario files added, the run still listed
    as finished)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"run_id": "run", "status": "finished"}')
    (run / "config.yaml").write_text("name: mine\n")
    for argv in (["import", "miroshark", str(DATA / "miroshark_sim")],
                 ["init", str(DATA / "preset" / "harbour_toll.json")]):
        assert main([*argv, "--out", str(run), "--force"]) == 2, argv
        assert "is a run directory" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "run.json"]
    assert (run / "config.yaml").read_text() == "name: mine\n"


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


# --------------------------------------------------------------------------- hardening


def _copy(folder: str, to: Path) -> Path:
    """A writable copy of a sample folder."""
    shutil.copytree(DATA / folder, to)
    return to


def _listing(folder: Path) -> dict[str, bytes | str]:
    """Every entry under `folder` (links not followed): file bytes, or what a link points
    to, or "folder"."""
    out: dict[str, bytes | str] = {}
    for p in sorted(folder.rglob("*")):
        key = str(p.relative_to(folder))
        out[key] = (f"-> {p.readlink()}" if p.is_symlink() else
                    "folder" if p.is_dir() else p.read_bytes())
    return out


def test_a_dangling_symlink_in_out_is_refused_and_nothing_is_written_outside(tmp_path,
                                                                             capsys):
    """issue 26 item 8: a dangling `follows.csv` link in `--out` plus `--force` must not
    create the link's target elsewhere; a link in the output folder is refused (exit 2,
    naming it) and nothing is written anywhere."""
    out, elsewhere = tmp_path / "s", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "follows.csv").symlink_to(elsewhere / "planted.csv")
    (out / "notes.txt").write_text("mine")
    before = _listing(tmp_path)
    assert main(["import", "miroshark", str(DATA / "miroshark_sim"), "--out", str(out),
                 "--force"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "follows.csv" in err and "symbolic link" in err
    assert not (elsewhere / "planted.csv").exists()
    assert _listing(tmp_path) == before


def test_a_symlink_anywhere_in_out_or_out_itself_being_a_link_is_refused(tmp_path, capsys):
    """issue 26 item 8: no write ever goes through a link: a link to a real file in
    `--out` (even one the import would replace) and an `--out` that is itself a link are
    refused, and the link targets keep their bytes."""
    target = tmp_path / "precious.csv"
    target.write_text("keep me")
    out = tmp_path / "s"
    out.mkdir()
    (out / "profiles.csv").symlink_to(target)
    assert main(["import", "miroshark", str(DATA / "miroshark_sim"), "--out", str(out),
                 "--force"]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert target.read_text() == "keep me"
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert main(["import", "miroshark", str(DATA / "miroshark_sim"), "--out",
                 str(tmp_path / "link")]) == 2
    assert "symbolic link" in capsys.readouterr().err
    assert not any(real.iterdir())


def test_a_symlinked_input_from_another_folder_is_imported_with_a_note(tmp_path, capsys):
    """issue 26 item 8: a profile file that links to another folder is read, and the import
    says so (a note naming the file and where it points)."""
    src = _copy("miroshark_sim", tmp_path / "src")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (src / "reddit_profiles.json").rename(elsewhere / "reddit_profiles.json")
    (src / "reddit_profiles.json").symlink_to(elsewhere / "reddit_profiles.json")
    assert main(["import", "miroshark", str(src), "--out", str(tmp_path / "s")]) == 0
    captured = capsys.readouterr()
    out = " ".join((captured.out + captured.err).split())
    assert "reddit_profiles.json" in out and "symbolic link" in out
    assert str(elsewhere / "reddit_profiles.json") in out
    assert "symbolic link" in (tmp_path / "s" / "IMPORT.md").read_text()


def test_a_failed_import_leaves_no_partial_folder(tmp_path, monkeypatch):
    """issue 26 item 6: the scenario is built in a hidden temporary sibling of `--out`
    and renamed into place; a failure while writing (here: the written config does not
    validate) leaves no `--out` and no temporary folder."""
    import shoal.runs.importer as importer
    from shoal.core.errors import InputError

    def broken(path, *args, **kwargs):
        raise InputError(f"{path}: broken on purpose")

    monkeypatch.setattr(importer, "load_config", broken)
    assert main(["import", "miroshark", str(DATA / "miroshark_sim"), "--out",
                 str(tmp_path / "s")]) == 2
    assert list(tmp_path.iterdir()) == []


def test_a_failed_forced_import_leaves_the_earlier_import_as_it_was(tmp_path, monkeypatch):
    """issue 26 item 6: `--force` over an earlier import either replaces all of its files
    or none: a failure leaves the earlier import byte for byte (no mixture), and a
    success leaves no stale file of the earlier import (the user's own files stay)."""
    import shoal.runs.importer as importer
    from shoal.core.errors import InputError

    out = tmp_path / "s"
    assert _import("miroshark", "miroshark_sim", out) == 0
    (out / "notes.txt").write_text("mine")
    before = _listing(tmp_path)
    real = importer.load_config

    def broken(path, *args, **kwargs):
        raise InputError(f"{path}: broken on purpose")

    monkeypatch.setattr(importer, "load_config", broken)
    assert main(["import", "mirofish", str(DATA / "mirofish_sim"), "--out", str(out),
                 "--force"]) == 2
    assert _listing(tmp_path) == before
    monkeypatch.setattr(importer, "load_config", real)
    src = _copy("mirofish_sim", tmp_path / "src")
    sim = json.loads((src / "simulation_config.json").read_text())
    del sim["agent_configs"]  # no stances: this import writes no stances.csv
    (src / "simulation_config.json").write_text(json.dumps(sim))
    assert main(["import", "mirofish", str(src), "--out", str(out), "--force"]) == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert not (out / "stances.csv").exists()  # the earlier import's, not this one's
    assert "stances.csv" not in (out / "config.yaml").read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_event_config_that_is_not_an_object_exits_2_naming_file_and_field(tmp_path, capsys):
    """issue 26 item 12: `event_config: [1]` exits 2 (not 1) naming the file and field."""
    src = _copy("miroshark_sim", tmp_path / "src")
    sim = json.loads((src / "simulation_config.json").read_text())
    sim["event_config"] = [1]
    (src / "simulation_config.json").write_text(json.dumps(sim))
    assert main(["import", "miroshark", str(src), "--out", str(tmp_path / "s")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "simulation_config.json" in err and "event_config" in err, err
    assert "internal error" not in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("file", ["simulation_config.json", "reddit_profiles.json"])
def test_deeply_nested_json_exits_2_naming_the_file(tmp_path, capsys, file):
    """issue 26 item 12: JSON nested 100,000 deep (which exhausts Python's stack) exits 2
    naming the file, not 1."""
    src = _copy("miroshark_sim", tmp_path / "src")
    deep = "[" * 100_000 + "]" * 100_000
    if file == "simulation_config.json":
        sim = json.loads((src / file).read_text())
        sim["extra"] = "@@"
        (src / file).write_text(json.dumps(sim).replace('"@@"', deep))
    else:
        (src / file).write_text(deep)
    assert main(["import", "miroshark", str(src), "--out", str(tmp_path / "s")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert file in err and "nested too deeply" in err, err
    assert not (tmp_path / "s").exists()


def _bench():
    """bench/import.py as a module (its folder generator)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_import", Path(__file__).parents[1] / "bench" / "import.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_import_work_grows_linearly_with_agents(tmp_path):
    """issue 26 item 6: the import's work is linear in the number of profiles. Counted,
    not timed: the function calls (Python and C) of a whole import of 2,000 generated
    profiles are at most 13 times those of 200 (the old follow graph drew a random number
    for every pair of agents: 100 times)."""
    import sys

    from shoal.runs.importer import import_simulation

    bench = _bench()
    folders = {n: bench.generate(n, tmp_path / f"src{n}") for n in (200, 2000)}
    import_simulation("miroshark", folders[200], tmp_path / "warm")  # lazy imports
    calls = {}
    for n, src in folders.items():
        count = [0]

        def tally(frame, event, arg, count=count):
            if event in ("call", "c_call"):
                count[0] += 1

        sys.setprofile(tally)
        try:
            import_simulation("miroshark", src, tmp_path / f"out{n}")
        finally:
            sys.setprofile(None)
        calls[n] = count[0]
    assert calls[2000] <= 13 * calls[200], calls


def test_a_terminated_import_leaves_nothing(tmp_path, monkeypatch):
    """issue 26 item 6: an import stopped by SIGTERM (`timeout`, a scheduler) while it
    writes removes its temporary folder and exits 143: no partial files anywhere."""
    import os
    import signal

    import shoal.runs.importer as importer

    class Stopped(Exception):
        """What this test's own handler raises (the code before the fix installed none)."""

    def stop(signum, frame):
        raise Stopped()

    def terminate(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(importer, "load_config", terminate)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises((SystemExit, Stopped)) as info:
            importer.import_simulation("miroshark", DATA / "miroshark_sim", tmp_path / "s")
        assert signal.getsignal(signal.SIGTERM) is stop  # the importer's handler is gone
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert list(tmp_path.iterdir()) == []
    assert isinstance(info.value, SystemExit) and info.value.code == 143


def test_the_influence_graph_draws_each_pair_with_its_probability():
    """issue 26 item 6: the linear follow graph keeps the distribution IMPORT.md states:
    i follows j with probability min(1, 20 · w_j / (Σw − w_i)), including a follower with
    half of all the weight and agents of weight 0 (never followed). Seeded: the same
    weights give the same graph."""
    import numpy as np

    from shoal.runs.importer import influence_follows

    n, degree = 400, 20
    w = np.random.default_rng(5).lognormal(0, 1.5, n)
    w[:3] = 0
    w[3] = w.sum()  # half of the total weight
    p = np.minimum(1, degree * w[None, :] / (w.sum() - w[:, None]))
    np.fill_diagonal(p, 0)
    counts = np.zeros((n, n))
    draws = 100
    for seed in range(draws):
        i, j = influence_follows(w, degree, np.random.default_rng(seed))
        assert len(set(zip(i.tolist(), j.tolist(), strict=True))) == len(i)  # no repeats
        counts[i, j] += 1
    assert counts[:, :3].sum() == 0 and np.trace(counts) == 0
    for axis in (0, 1):  # in-degrees and out-degrees, each within 5 standard deviations
        mean = counts.sum(axis) / draws
        expected, var = p.sum(axis), (p * (1 - p)).sum(axis) / draws
        z = np.abs(mean - expected)[var > 0] / np.sqrt(var[var > 0])
        assert z.max() < 5, (axis, z.max())
    a, b = (influence_follows(w, degree, np.random.default_rng(1)) for _ in range(2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize(("source", "folder"), [("miroshark", "miroshark_sim"),
                                                ("mirofish", "mirofish_sim")])
def test_the_example_folders_import_and_check(tmp_path, capsys, source, folder):
    """issue 26 item 19: the sample folders docs/migrating.md points at import and check."""
    example = Path(__file__).parents[1] / "examples" / "import" / folder
    assert main(["import", source, str(example), "--out", str(tmp_path / "s")]) == 0
    assert main(["check", str(tmp_path / "s" / "config.yaml")]) == 0
    docs = (Path(__file__).parents[1] / "docs" / "migrating.md").read_text()
    assert f"shoal import {source} examples/import/{folder} --out" in docs


def test_import_md_says_shoal_has_a_market_and_offers_the_section(tmp_path):
    """issue 27: IMPORT.md no longer says Shoal has no market: their markets become a
    `platforms.market` section (emitted as YAML, not formatted into text) that validates
    when added to the imported config."""
    import yaml

    from shoal.config import parse_config

    out = tmp_path / "s"
    assert _import("miroshark", "miroshark_sim", out) == 0
    text = (out / "IMPORT.md").read_text()
    assert "does not have" not in text and "no market" not in text
    snippet = re.search(r"## Prediction markets\n.*?```yaml\n(.*?)```", text, re.S).group(1)
    config = yaml.safe_load((out / "config.yaml").read_text())
    config["platforms"].update(yaml.safe_load(snippet)["platforms"])
    config["population"]["file"] = str(out / "profiles.csv")
    config["initial_stances"]["file"] = str(out / "stances.csv")
    config["graph"]["file"] = str(out / "follows.csv")
    market = parse_config(config).platforms.market
    assert market.markets[0].question.startswith("Will Harbour City approve")


def test_source_data_cannot_inject_yaml_or_markdown(tmp_path):
    """Data from an import stays data: a topic, a model name and a field name made to look
    like YAML or a Markdown table row come out as the same text, not as structure."""
    import yaml

    src = _copy("miroshark_sim", tmp_path / "src")
    sim = json.loads((src / "simulation_config.json").read_text())
    sim["event_config"]["hot_topics"] = ["port\nrounds: 1", "a: [b"]
    sim["llm_model"] = "m]\n  agents: {fraction: 0}\n#"
    sim["x|y`z"] = 1
    (src / "simulation_config.json").write_text(json.dumps(sim))
    out = tmp_path / "s"
    assert main(["import", "miroshark", str(src), "--out", str(out)]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["rounds"] == 24
    assert [t["label"] for t in config["topics"]] == ["port rounds: 1", "a: [b"]
    text = (out / "IMPORT.md").read_text()
    llm = re.search(r"## LLM agents\n.*?```yaml\n(.*?)```", text, re.S).group(1)
    assert yaml.safe_load(llm)["llm"]["providers"][0]["model"] == sim["llm_model"]
    assert yaml.safe_load(llm)["llm"]["agents"] == {"fraction": 1.0}
    (row,) = [line for line in text.splitlines() if "y" in line and line.startswith("| ``")]
    assert row.count(" | ") == 2  # still three cells: the pipe is escaped


def test_a_forced_import_that_fails_while_moving_files_in_puts_the_earlier_one_back(
        tmp_path, monkeypatch):
    """issue 26 item 6: if moving the new files into `--out` fails half way (here: the
    third file), the files already moved go back and the earlier import is restored byte
    for byte: never a mixture of two imports."""
    import os

    import shoal.runs.importer as importer

    out = tmp_path / "s"
    assert _import("miroshark", "miroshark_sim", out) == 0
    (out / "notes.txt").write_text("mine")
    before = _listing(tmp_path)
    real, moved = os.rename, []

    def rename(src, dst):
        if ".importing" in str(src):
            moved.append(Path(dst).name)
            if len(moved) == 3:
                raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(importer.os, "rename", rename)
    with pytest.raises(OSError):
        importer.import_simulation("mirofish", DATA / "mirofish_sim", out, force=True)
    monkeypatch.undo()
    assert len(moved) == 3
    assert _listing(tmp_path) == before


def test_an_existing_empty_out_even_the_current_folder_is_filled_in_place(tmp_path,
                                                                           monkeypatch):
    """`--out .` in an empty folder works, and the folder stays the same folder (a
    shell's current folder is not swapped for another)."""
    here = tmp_path / "here"
    here.mkdir()
    inode = here.stat().st_ino
    monkeypatch.chdir(here)
    assert main(["import", "miroshark", str(DATA / "miroshark_sim"), "--out", "."]) == 0
    assert here.stat().st_ino == inode
    assert sorted(p.name for p in here.iterdir()) == sorted(
        ["config.yaml", "profiles.csv", "stances.csv", "follows.csv", "IMPORT.md"])
    assert [p.name for p in tmp_path.iterdir()] == ["here"]


def test_64_bit_user_ids_stay_distinct(tmp_path, capsys):
    """Twitter-style 19-digit user ids are read exactly: through a float, 1234567890123456789
    and ...788 both became 1234567890123456768 ("repeats an earlier row")."""
    src = _copy("miroshark_sim", tmp_path / "src")
    ids = [1234567890123456789, 1234567890123456788]
    lines = (src / "twitter_profiles.csv").read_text().split("\n")
    for row, uid in zip((1, 2), ids, strict=True):
        lines[row] = str(uid) + lines[row][len(str(row - 1)):]
    (src / "twitter_profiles.csv").write_text("\n".join(lines))
    assert main(["import", "miroshark", str(src), "--out", str(tmp_path / "s")]) == 0, \
        capsys.readouterr().err
    with open(tmp_path / "s" / "profiles.csv", newline="", encoding="utf-8") as f:
        kept = [int(row["user_id"]) for row in csv.DictReader(f)]
    assert set(ids) <= set(kept)


@pytest.mark.parametrize(("file", "edit", "message"), [
    ("simulation_config.json",
     lambda text: '{"time_config": {}, "time_config": {"minutes_per_round": 5}}',
     "simulation_config.json: an object gives the key 'time_config' twice"),
    ("reddit_profiles.json",
     lambda text: text.replace('"karma": 8000', '"karma": 8000, "karma": 3', 1),
     "reddit_profiles.json: an object gives the key 'karma' twice"),
    ("twitter_profiles.csv",
     lambda text: text.replace("username", "name", 1),
     "twitter_profiles.csv: row 1: column 'name' appears twice"),
])
def test_a_key_or_column_given_twice_exits_2_naming_it(tmp_path, capsys, file, edit, message):
    """A JSON key or a CSV column given twice is named: it was read silently, the last one
    counting."""
    src = _copy("miroshark_sim", tmp_path / "src")
    (src / file).write_text(edit((src / file).read_text()))
    assert main(["import", "miroshark", str(src), "--out", str(tmp_path / "s")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert message in err and "internal error" not in err, err
    assert not (tmp_path / "s").exists()

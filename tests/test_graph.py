"""Graph memory: `shoal init` from a brief (offline and through the loopback LLM), a run
that reads its activity into the graph (provenance, kill and resume, forks), withdrawal
honoured by every reader, and the "What you know" context section."""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import duckdb
import pandas as pd
import pytest
import yaml

from shoal import open_run
from shoal.cli.main import main
from shoal.engine.agent_context import context_for
from shoal.memory.knowledge.communities import detect
from shoal.memory.knowledge.extract import OfflineExtractor
from shoal.memory.knowledge.ingest import ingest_document
from shoal.memory.knowledge.model import KnowledgeGraph
from shoal.memory.knowledge.retrieval import FactIndex
from shoal.runs.simulation import Simulation
from shoal.store.lineage import graph_reader
from tests.conftest import ROOT, write_config
from tests.helpers import (
    fork_and_run,
    kill_then_resume,
    query,
    read_table,
    serve_http,
    tables_differ,
)

BRIEF = ROOT / "examples" / "carbon_levy.md"
TOLL = ROOT / "tests" / "data" / "graph" / "toll.md"
WITHDRAWN = "The Harbour Workers' Union opposes the toll"  # contradicted later in TOLL
ROUNDS = 8


def _init(tmp: Path, brief: Path = BRIEF, *extra: str) -> Path:
    out = tmp / "scenario"
    assert main(["init", str(brief), "--out", str(out), "--agents", "80", "--rounds",
                 str(ROUNDS), *extra]) == 0
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_init_is_deterministic_grounded_and_runs(tmp_path):
    a = _init(tmp_path / "a")
    b = _init(tmp_path / "b")
    assert _files(a) == _files(b)  # same brief, seed and extractor: the same bytes
    text = BRIEF.read_text()
    graph = graph_reader(a)
    relations = graph.relations()
    assert len(relations) >= 6
    for fact, source in relations[["fact", "source_id"]].itertuples(index=False):
        name, start, end = re.fullmatch(r"(.+):(\d+)-(\d+)", source).groups()
        assert name == BRIEF.name
        assert " ".join(text[int(start):int(end)].split()) == fact  # the span states it
    personas = yaml.safe_load((a / "personas.yaml").read_text())
    ids = set(relations["relation_id"])
    assert all(p["facts"] and set(p["facts"]) <= ids for p in personas)
    assert all(f"[fact {i}]" in p["persona"] for p in personas for i in p["facts"])
    config = yaml.safe_load((a / "config.yaml").read_text())
    assert config["topics"][0]["name"] == "carbon_levy"
    groups = {p["group"] for p in personas}
    assert {"national_farmers_union", "public"} <= groups and len(groups) >= 4
    assert main(["check", str(a / "config.yaml")]) == 0
    assert main(["run", str(a / "config.yaml"), "--out", str(tmp_path / "runs"),
                 "--quiet"]) == 0


def test_init_through_the_loopback_llm(tmp_path):
    folder = _init(tmp_path, BRIEF, "--llm", "loopback")
    calls = duckdb.sql(f"SELECT status, outcome, platform FROM "
                       f"'{folder / 'graph' / 'llm_calls.parquet'}'").fetchall()
    paragraphs = len([p for p in re.split(r"\n\s*\n", BRIEF.read_text()) if p.strip()])
    assert len(calls) == 2 * paragraphs  # two readings of every paragraph (topics, then all)
    assert {c for c in calls} == {("ok", "record_facts", "graph")}
    assert len(graph_reader(folder).relations()) > 0


@pytest.fixture(scope="module")
def graph_dict() -> dict:
    return {
        "name": "graphrun", "seed": 5, "rounds": ROUNDS, "population": {"size": 150},
        "topics": [{"name": "toll", "label": "the toll", "keywords": ["toll", "bridge toll"]}],
        "memory": {"context": {"build_for": "all"},
                   "graph": {"enabled": True, "documents": [str(TOLL)],
                             "communities_every": 4}},
    }


@pytest.fixture(scope="module")
def graph_run(tmp_path_factory, graph_dict) -> Path:
    out = tmp_path_factory.mktemp("graph")
    path = write_config(out / "c.yaml", graph_dict)
    assert main(["run", str(path), "--out", str(out / "runs"), "--quiet"]) == 0
    (run,) = (out / "runs").iterdir()
    return run


def test_activity_relations_cite_posts_of_their_round(graph_run):
    db = graph_run / "trajectory.duckdb"
    rows = query(db, "SELECT relation_id, source_id, valid_from, kind FROM graph_relations "
                     "WHERE source_type = 'post'")
    assert len(rows) > 50 and {k for *_, k in rows} <= {"belief", "observation"}
    posts = dict(query(db, "SELECT post_id, round FROM posts"))
    for _, source, valid_from, _ in rows:
        ids = [int(x) for x in source.removeprefix("posts ").split(",")]
        assert all(i in posts and posts[i] <= valid_from for i in ids), source
    # One episode per posting agent and round, with that agent's post ids.
    episodes = query(db, "SELECT at_round, agent, post_ids FROM graph_episodes "
                         "WHERE kind = 'activity'")
    authors = dict(query(db, "SELECT post_id, author FROM posts"))
    assert all({authors[p] for p in ids} == {agent} for _, agent, ids in episodes)
    assert len({(r, a) for r, a, _ in episodes}) == len(episodes)
    gens = query(db, "SELECT DISTINCT generation, round FROM graph_communities ORDER BY 1")
    assert gens == [(1, 4), (2, 8)]


@pytest.mark.slow
def test_kill_and_resume_gives_identical_graph_tables(graph_run, graph_dict, tmp_path):
    path = write_config(tmp_path / "c.yaml", graph_dict)
    run = kill_then_resume(path, tmp_path / "runs", "mid_round:6")
    assert tables_differ(graph_run / "trajectory.duckdb", run / "trajectory.duckdb") == []


def test_a_fork_keeps_the_graph_up_to_its_round(graph_run, tmp_path):
    fork = fork_and_run(graph_run, 4, out=tmp_path, seed=99)
    parent, child = open_run(graph_run).graph(), open_run(fork).graph()
    own = ["relation_id", "subject", "predicate", "object", "fact", "kind", "source_id",
           "valid_from"]  # (not the withdrawal: that may come later, in one branch only)
    upto = [t.query("round <= 4")[own].reset_index(drop=True) for t in (
        parent.relations(include_withdrawn=True), child.relations(include_withdrawn=True))]
    assert len(upto[0]) > 0 and upto[0].equals(upto[1])
    assert parent.relations(as_of=4).equals(child.relations(as_of=4))
    after = [t.query("round > 4") for t in (parent.relations(), child.relations())]
    assert not after[0][["fact"]].reset_index(drop=True).equals(
        after[1][["fact"]].reset_index(drop=True))


def test_withdrawal_is_honoured_by_every_reader(graph_run, tmp_path, capsys):
    """The brief's union first opposes the toll, then supports it: the first relation is
    withdrawn (round 0). Search, context retrieval, persona building, communities, the
    report, `shoal graph` and the notebook leave it out; asked for, it is there, with its
    withdrawal."""
    graph = KnowledgeGraph()
    ingest_document(graph, TOLL.name, TOLL.read_text(), OfflineExtractor())
    (old,) = [r for r in range(graph.n_relations) if graph.withdrawn.get(r) == 0]
    assert graph.hit(old).fact.startswith(WITHDRAWN)
    # search
    hits = FactIndex(graph).search("Harbour Workers' Union toll", 10)
    assert hits and old not in [h.relation_id for h in hits]
    # communities
    summary = " ".join(detect(graph, 1, 0).summaries)
    assert WITHDRAWN not in summary
    # context retrieval, in a run that read the brief
    cfg_run = open_run(graph_run)
    with Simulation.resume(graph_run) as sim:
        for agent in range(20):
            shown = context_for(sim.world, agent, ROUNDS, "twitter").assembled.system
            assert "What you know" in shown and WITHDRAWN not in shown
    # persona building
    scenario = _init(tmp_path, TOLL)
    assert WITHDRAWN not in (scenario / "personas.yaml").read_text()
    # the notebook and `shoal graph`
    visible = cfg_run.graph_relations()
    assert not visible["fact"].str.startswith(WITHDRAWN).any()
    every = cfg_run.graph_relations(include_withdrawn=True)
    row = every[every["fact"].str.startswith(WITHDRAWN)].iloc[0]
    assert row["invalid_at"] == 0 and "contradicted by relation" in row["reason"]
    capsys.readouterr()
    assert main(["graph", "relations", str(scenario), "--limit", "500"]) == 0
    out = capsys.readouterr().out
    assert "Chamber of Commerce" in out and "opposes" not in out
    assert main(["graph", "relations", str(scenario), "--withdrawn"]) == 0
    assert "contradicted" in capsys.readouterr().out
    # the report
    assert main(["report", str(graph_run), "--out", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert 'id="graph"' in html and WITHDRAWN not in html


def test_as_of_reads_history(graph_run):
    """An agent's stance relation withdrawn at round R (its posts changed sides) is
    visible as of R − 1 and not as of R."""
    run = open_run(graph_run)
    every = run.graph_relations(include_withdrawn=True)
    later = every[every["invalid_at"] > 0].iloc[0]
    r, rid = int(later["invalid_at"]), int(later["relation_id"])
    assert rid in set(run.graph_relations(as_of=r - 1)["relation_id"])
    assert rid not in set(run.graph_relations(as_of=r)["relation_id"])
    assert rid not in set(run.graph_relations()["relation_id"])


def test_graph_command_as_of_episodes_and_communities(graph_run, capsys):
    """`shoal graph episodes|communities --as-of R` show the graph as it was at the end of
    round R: the episodes admitted by then, the newest generation built by then."""
    db = graph_run / "trajectory.duckdb"
    (early,) = query(db, "SELECT count(*) FROM graph_episodes WHERE round <= 2")[0]
    (every,) = query(db, "SELECT count(*) FROM graph_episodes")[0]
    assert 0 < early < every
    for as_of, rows in (("2", early), (None, every)):
        capsys.readouterr()
        assert main(["graph", "episodes", str(graph_run),
                     *(["--as-of", as_of] if as_of else [])]) == 0
        assert f"episodes ({rows} rows)" in capsys.readouterr().out
    # generation 1 was built at round 4, generation 2 at round 8 (above)
    sizes = dict(query(db, "SELECT generation, count(*) FROM graph_communities GROUP BY 1"))
    for as_of, generation in (("3", None), ("5", 1), ("8", 2), (None, 2)):
        capsys.readouterr()
        assert main(["graph", "communities", str(graph_run),
                     *(["--as-of", as_of] if as_of else [])]) == 0
        rows = sizes[generation] if generation else 0
        assert f"communities ({rows} rows)" in capsys.readouterr().out, as_of


def test_what_you_know_in_inspect_within_budget(graph_run, capsys):
    assert main(["inspect", str(graph_run), "--agent", "3", "--round", "5",
                 "--platform", "twitter"]) == 0
    shown = capsys.readouterr().out
    assert "What you know" in shown
    section = shown.split("## What you know", 1)[1].split("## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.strip().startswith("- ")]
    assert lines and all(re.search(r"\((document|belief|observation), ", ln) for ln in lines)
    db = graph_run / "trajectory.duckdb"
    budget = query(db, "SELECT max(tokens), min(budget) FROM context WHERE section = "
                       "'total'")[0]
    assert budget[0] <= budget[1]
    knowledge = read_table(db, "context").query("section == 'knowledge'")
    assert len(knowledge) > 0 and (knowledge["tokens"] <= 250).all()


def _pdf(path: Path, lines: list[str]) -> Path:
    """A one-page PDF with real text (matplotlib writes it; pypdf reads it back)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3))
    for i, line in enumerate(lines):
        fig.text(0.02, 0.9 - 0.15 * i, line, fontsize=9)
    fig.savefig(path, format="pdf")
    return path


def test_a_graph_write_stopped_between_its_steps_leaves_one_whole_graph(tmp_path, capsys):
    """A scenario's graph is written whole or not at all: a write stopped while it filled
    `graph.next/` leaves the old graph (the next add clears the rest away); one stopped
    between its renames (no `graph/`, the old one set aside) is read as the new graph.
    Files beside the tables (the extraction's LLM calls) are carried over; a second
    `graph add` while one holds the scenario is refused, not lost."""
    import fcntl
    import os
    import shutil

    folder = tmp_path / "scenario"
    assert main(["graph", "add", str(TOLL), "--into", str(folder), "--new"]) == 0
    graph, before = folder / "graph", graph_reader(folder).relations()
    (graph / "llm_calls.parquet").write_bytes((graph / "graph_aliases.parquet").read_bytes())
    # stopped while writing: a partial graph.next/ beside the old graph
    (folder / "graph.next").mkdir()
    shutil.copy(graph / "graph_entities.parquet", folder / "graph.next")
    assert graph_reader(folder).relations().equals(before)
    doc = tmp_path / "more.md"
    doc.write_text("The Ferry Company opposes the toll.\n")
    assert main(["graph", "add", str(doc), "--into", str(folder)]) == 0
    after = graph_reader(folder).relations()
    assert len(after) > len(before) and not (folder / "graph.next").exists()
    assert (graph / "llm_calls.parquet").is_file()
    # stopped between the renames: the old graph set aside, the new one whole beside it
    os.replace(graph, folder / "graph.next")
    shutil.copytree(folder / "graph.next", folder / "graph.old")
    (folder / "graph.old" / "graph_relations.parquet").unlink()
    assert graph_reader(folder).relations().equals(after)
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("graph")) == ["graph"]
    # two adds at once: the second is refused while the first holds the scenario
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        capsys.readouterr()
        assert main(["graph", "add", str(doc), "--into", str(folder)]) == 2
        assert "another `shoal graph add` is writing this scenario's graph" in \
            capsys.readouterr().err
    finally:
        os.close(fd)
    assert graph_reader(folder).relations().equals(after)


def test_graph_add_reads_markdown_and_pdf_into_a_scenario(tmp_path, capsys):
    folder = tmp_path / "scenario"
    assert main(["graph", "add", str(TOLL), "--into", str(folder), "--new"]) == 0
    pdf = _pdf(tmp_path / "memo.pdf", ["The Ferry Company opposes the toll.",
                                       "The City Council supports the ferry subsidy."])
    assert main(["graph", "add", str(pdf), "--into", str(folder)]) == 0
    graph = graph_reader(folder)
    sources = set(graph.relations()["source_id"].str.split(":").str[0])
    assert sources == {"toll.md", "memo.pdf"}
    assert set(graph.communities()["generation"]) == {2}  # a new generation, the old kept
    assert set(duckdb.sql(f"SELECT DISTINCT generation FROM "
                          f"'{folder / 'graph' / 'graph_communities.parquet'}'").fetchall()) \
        == {(1,), (2,)}
    capsys.readouterr()
    for action in (["entities"], ["episodes"], ["communities"], ["search", "ferry toll"],
                   ["neighbourhood", "Ferry Company"], ["history", "0"]):
        assert main(["graph", action[0], str(folder), *action[1:]]) == 0
    out = capsys.readouterr().out
    assert "Ferry Company" in out and "memo.pdf" in out


@pytest.mark.parametrize("content, message", [
    (None, "no such document"),
    (b"", "the brief is empty"),
    (b"\xff\xfe caf\xe9", "not UTF-8 text"),
    (b"%PDF-1.4 broken", "not a readable PDF"),
])
def test_bad_briefs_name_the_file(tmp_path, capsys, content, message):
    brief = tmp_path / ("brief.pdf" if content and content.startswith(b"%PDF") else "brief.md")
    if content is not None:
        brief.write_bytes(content)
    assert main(["init", str(brief), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and str(brief) in err
    assert not (tmp_path / "out" / "config.yaml").exists()


def test_a_byte_order_mark_is_not_part_of_a_documents_text(tmp_path):
    from shoal.world.knowledge import read_document

    memo = tmp_path / "memo.md"
    memo.write_bytes("\ufeffFerry Company raises the toll.".encode())
    assert read_document(memo) == "Ferry Company raises the toll."


def test_a_document_too_large_or_a_looping_link_is_refused_by_name(tmp_path, capsys):
    """A document over the size limit is refused before it is read (a sparse file: no
    disk used), and a loop of links is said to be one, not a missing file."""
    from shoal.world.knowledge import MAX_DOCUMENT_BYTES

    huge = tmp_path / "huge.md"
    with huge.open("wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)
    (tmp_path / "a.md").symlink_to(tmp_path / "b.md")
    (tmp_path / "b.md").symlink_to(tmp_path / "a.md")
    for doc, message in ((huge, "the file is over 16 MB"),
                         (tmp_path / "a.md", "a symbolic link that leads to no file")):
        assert main(["graph", "add", str(doc), "--into", str(tmp_path / "s"), "--new"]) == 2
        err = capsys.readouterr().err
        assert message in err and str(doc) in err, err
    assert not (tmp_path / "s" / "graph").exists()


def test_graph_frames_without_rows_have_the_dtypes_of_frames_with_rows(graph_run):
    """Every graph reader gives the same columns and dtypes with rows as without (DuckDB
    gives text columns `object` when there are none, and a withdrawal's columns a dtype
    that depends on how many are NULL): frames of several runs concatenate as they are."""
    from shoal.store.knowledge import GraphReader

    run = open_run(graph_run)
    full, empty = run.graph(), GraphReader({})
    text = pd.Series(["x"]).dtype
    first = full.relations().iloc[0]
    for name, args in (("relations", ()), ("entities", ()), ("episodes", ()),
                       ("communities", ()), ("members", ()),
                       ("neighbourhood", (first["subject"],)),
                       ("history", (int(first["relation_id"]),))):
        rows, none = getattr(full, name)(*args), getattr(empty, name)(*args)
        assert len(rows) and none.empty, name
        assert none.dtypes.to_dict() == rows.dtypes.to_dict(), name
    assert run.graph_entities()["name"].dtype == text == empty.entities()["name"].dtype
    visible, every = run.graph_relations(), run.graph_relations(include_withdrawn=True)
    assert every["invalid_at"].notna().any() and visible["invalid_at"].isna().all()
    assert visible.dtypes.to_dict() == every.dtypes.to_dict()
    assert run.graph().neighbourhood("nobody").dtypes.to_dict() == visible.dtypes.to_dict()


def test_bad_graph_config_names_the_field(tmp_path, capsys, graph_dict):
    data = {**graph_dict, "memory": {"graph": {"enabled": True,
                                               "documents": ["missing.md"],
                                               "scenario": "nowhere"}}}
    path = write_config(tmp_path / "c.yaml", data)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "memory.graph.documents.0: file not found: missing.md" in err
    assert "memory.graph.scenario: nowhere: no graph/ folder" in err
    data["memory"]["graph"] = {"enabled": True, "extractor": {"kind": "llm"}}
    assert main(["check", str(write_config(tmp_path / "d.yaml", data))]) == 2
    assert "memory.graph.extractor: 'llm' needs an llm section" in capsys.readouterr().err


def _run_with_llm_extractor(graph_dict, tmp_path, rounds: int, **provider) -> Path:
    """Run (CLI) a 40-agent config whose graph memory reads TOLL with the LLM extractor
    against the loopback server (`provider`: more of the provider's fields); its
    trajectory file."""
    data = {**graph_dict, "rounds": rounds, "population": {"size": 40},
            "llm": {"providers": [{"name": "default", "base_urls": ["loopback"],
                                   "model": "shoal-loopback", **provider}],
                    "agents": {"ids": [0]}},
            "memory": {"graph": {"enabled": True, "documents": [str(TOLL)],
                                 "extractor": {"kind": "llm"}}}}
    path = write_config(tmp_path / "c.yaml", data)
    assert main(["run", str(path), "--out", str(tmp_path / "runs"), "--quiet"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    return run / "trajectory.duckdb"


def test_a_run_with_the_llm_extractor_logs_every_call(graph_dict, tmp_path):
    """Activity read by the LLM extractor (loopback server, real HTTP): every extraction
    call is a row of llm_calls (platform `graph`), one per posting agent and round."""
    db = _run_with_llm_extractor(graph_dict, tmp_path, rounds=3)
    calls = query(db, "SELECT round, count(*), count(*) FILTER (WHERE status = 'ok') "
                      "FROM llm_calls WHERE platform = 'graph' GROUP BY ALL ORDER BY 1")
    posting = query(db, "SELECT at_round, count(*) FROM graph_episodes WHERE kind = "
                        "'activity' GROUP BY ALL ORDER BY 1")
    paragraphs = len([p for p in re.split(r"\n\s*\n", TOLL.read_text()) if p.strip()])
    assert calls[0] == (0, paragraphs, paragraphs)  # the document, at round 0
    assert [(r, n, n) for r, n in posting] == calls[1:]


def test_the_llm_extractor_asks_in_the_output_mode_the_run_resolved(graph_dict, tmp_path):
    """`output: auto` against a model without tool calls (the loopback server refusing
    tools): the run resolves JSON, and extraction asks for JSON as the agents do, from the
    round-0 documents on; asked with tools, every extraction call was refused (400)."""
    db = _run_with_llm_extractor(graph_dict, tmp_path, rounds=2, output="auto",
                                 loopback={"reject_tools": True})
    assert query(db, "SELECT DISTINCT output FROM llm_calls WHERE agent IS NOT NULL") == [
        ("json_schema",)]
    calls = query(db, "SELECT round, status, count(*) FROM llm_calls WHERE platform = "
                      "'graph' GROUP BY ALL ORDER BY ALL")
    assert [r for r, *_ in calls] == [0, 1, 2] and {s for _, s, _ in calls} == {"ok"}


# --------------------------------------------------------------------------- issue 26

BIKE = ROOT / "examples" / "bike_lanes.md"
# A preset's `name` as the tester wrote it, and one that would run against a real URL.
PRESET_NAME = "Harbour\noutput: {dir: …}\nllm: {providers: [...]}\n#"
PRESET_NAME_REAL = ("Harbour\noutput: {dir: EVIL}\nllm: {providers: [{name: default, "
                    "base_urls: ['http://127.0.0.1:9/v1'], model: m}], agents: {fraction: "
                    "1.0}}\n#")
CONFIG_KEYS = {"name", "seed", "rounds", "minutes_per_round", "population", "topics",
               "initial_stances", "graph", "platforms", "memory", "interventions"}


def _emitted(path: Path) -> dict:
    """The YAML file's data, after checking that the file is comments of one line and
    then exactly what the emitter writes for that data: nothing a text could add."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    head = 0
    while lines[head].startswith("# "):
        head += 1
    data = yaml.safe_load(text)
    assert "\n".join(lines[head:]) == yaml.safe_dump(data, sort_keys=False,
                                                      allow_unicode=True)
    return data


def _only_data(folder: Path, capsys) -> dict:
    """The scenario's config, checked to hold only Shoal's keys and to pass `shoal check`
    (the YAML files are the emitter's; SCENARIO.md has no line a payload opened)."""
    config = _emitted(folder / "config.yaml")
    assert set(config) <= CONFIG_KEYS  # no `output`, no `llm`: the brief's text added none
    _emitted(folder / "personas.yaml")
    assert not [ln for ln in (folder / "SCENARIO.md").read_text().splitlines()
                if ln.startswith(("output:", "llm:"))]
    capsys.readouterr()
    assert main(["check", str(folder / "config.yaml")]) == 0
    out = capsys.readouterr().out
    assert "EVIL" not in out and "127.0.0.1:9" not in out
    return config


@pytest.mark.parametrize("name", [PRESET_NAME, PRESET_NAME_REAL])
def test_a_preset_name_cannot_write_yaml_into_the_config(tmp_path, capsys, name):
    """issue 26 item 1: a MiroShark preset whose `name` holds newlines and YAML makes a
    config.yaml whose keys are only Shoal's (the name is in one comment line), which
    `shoal check` accepts with no output folder or LLM of the preset's choosing."""
    preset = tmp_path / "harbour.json"
    preset.write_text(json.dumps({"id": "harbour", "name": name,
                                  "seed_document": BIKE.read_text()}))
    folder = tmp_path / "scenario"
    assert main(["init", str(preset), "--out", str(folder), "--agents", "20"]) == 0
    config = _only_data(folder, capsys)
    first = (folder / "config.yaml").read_text().splitlines()[0]
    assert first.startswith("# Harbour output: {dir:") and "llm: {providers:" in first
    assert (folder / "SCENARIO.md").read_text().startswith("# Harbour output: {dir:")
    assert config["name"].startswith("harbour_output")


def test_a_briefs_file_name_cannot_write_yaml_into_the_config(tmp_path, capsys):
    """issue 26 item 1: a brief whose file name holds a newline and YAML (and a byte
    that is not UTF-8) makes the same clean config."""
    brief = tmp_path / "brief\noutput: {dir: EVIL}\n#\udcff.md"
    brief.write_text(BIKE.read_text())
    folder = tmp_path / "scenario"
    assert main(["init", str(brief), "--out", str(folder), "--agents", "20"]) == 0
    _only_data(folder, capsys)
    sources = {s.rsplit(":", 1)[0] for s in graph_reader(folder).relations()["source_id"]}
    assert sources == {"brief output: {dir: EVIL} #.md"}  # one line of text


def _pdf_bomb(path: Path) -> Path:
    """A one-page PDF whose content stream inflates past pypdf's 75 MB limit."""
    import zlib

    data = zlib.compress(b" " * 80_000_000, 9)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font "
               b"<< /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >> "
               b"/Contents 4 0 R >>",
               b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data
               + b"\nendstream"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def test_a_pdf_bomb_is_an_input_error_naming_the_file(tmp_path, capsys):
    """issue 26 item 5: a PDF that inflates past pypdf's limits exits 2 naming the file
    (not 1 with LimitReachedError), for `shoal init` and `shoal graph add`; nothing is
    written."""
    bomb = _pdf_bomb(tmp_path / "bomb.pdf")
    assert main(["init", str(bomb), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert str(bomb) in err and "safety limits" in err and "Traceback" not in err
    assert main(["graph", "add", str(bomb), "--into", str(tmp_path / "g"), "--new"]) == 2
    assert str(bomb) in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.pdf"]


def _one_paragraph(n: int) -> str:
    """A brief of one paragraph with `n` sentences, every one naming a new organisation
    and a new thing it takes a side on (so entities, facts and contested things all grow
    with the text)."""
    def word(i: int) -> str:
        letters = "bcdfghjklmnprstvz"
        out = ""
        while True:
            out += letters[i % len(letters)] + "aeiou"[i % 5]
            i //= len(letters)
            if not i:
                return out
    verbs = ["supports", "opposes", "backs", "rejects"]
    return "# One paragraph\n" + " ".join(
        f"The {word(i).title()} Association {verbs[i % 4]} the {word(i + 7)} plan."
        for i in range(n))


def _work(text: str, tmp: Path, monkeypatch) -> dict[str, int]:
    """What `init_scenario` does with a brief, counted without a clock: Python lines run
    in graph memory and `shoal init`, characters through `key()` (C-speed string work),
    and elements of the validity masks made."""
    import sys

    from shoal.memory.knowledge import ingest, model, resolve
    from shoal.runs import scenario_init

    counts = {"lines": 0, "key_chars": 0, "mask_elements": 0}
    plain_key, plain_visible = model.key, model.KnowledgeGraph.visible

    def key(name: str) -> str:
        counts["key_chars"] += len(name)
        return plain_key(name)

    def visible(self, as_of=None):
        mask = plain_visible(self, as_of)
        counts["mask_elements"] += len(mask)
        return mask

    ours = (str(ROOT / "memory" / "graph"), str(ROOT / "sim" / "runs" / "scenario_init"))

    def trace(frame, event, arg):
        if not frame.f_code.co_filename.startswith(ours):
            return None
        counts["lines"] += event == "line"
        return trace

    tmp.mkdir()
    brief = tmp / "brief.md"
    brief.write_text(text)
    with monkeypatch.context() as patch:
        for module in (model, resolve, ingest, scenario_init):
            patch.setattr(module, "key", key)
        patch.setattr(model.KnowledgeGraph, "visible", visible)
        before = sys.gettrace()  # (a coverage tracer, say: put back afterwards)
        sys.settrace(trace)
        try:
            scenario_init.init_scenario(brief, tmp / "out", OfflineExtractor(),
                                        scenario_init.InitOptions(agents=20))
        finally:
            sys.settrace(before)
    return counts


@pytest.mark.parametrize("punctuated", [True, False])
def test_init_work_grows_linearly_with_a_paragraph(tmp_path, monkeypatch, punctuated):
    """issue 26 item 5: `shoal init` on a brief that is one long paragraph does work in
    proportion to its length: doubling the paragraph (with or without full stops) at
    most ~doubles the lines run, the characters resolved and the masks built (the
    requirement was the whole paragraph, matched against every entity; a paragraph
    without full stops was one sentence, scanned per verb)."""
    texts = [_one_paragraph(n) for n in (150, 300)]
    if not punctuated:
        texts = [t.replace(".", ",") for t in texts]
    small, large = (_work(t, tmp_path / str(i), monkeypatch) for i, t in enumerate(texts))
    ratios = {k: large[k] / small[k] for k in small}
    assert all(r < 2.5 for r in ratios.values()), (ratios, small, large)


def test_graph_add_refuses_a_folder_that_is_not_a_scenario(tmp_path, capsys):
    """issue 26 item 18: `shoal graph add DOC --into typo` exits 2 naming the folder and
    how to make a scenario, and creates nothing; `--new` starts one explicitly (in a new
    or empty folder only)."""
    typo = tmp_path / "typo"
    assert main(["graph", "add", str(TOLL), "--into", str(typo)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--into {typo}: not a scenario folder" in err and "shoal init" in err
    assert "--new" in err and not typo.exists()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    assert main(["graph", "add", str(TOLL), "--into", str(tmp_path / "notes"),
                 "--new"]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "notes").iterdir()) == ["a.txt"]
    assert main(["graph", "add", str(TOLL), "--into", str(typo), "--new"]) == 0
    assert main(["graph", "add", str(TOLL), "--into", str(typo)]) == 0  # now a scenario


@pytest.mark.parametrize("requirement, rounds, minutes", [
    ("Simulate the debate in the two weeks after the announcement.", 42, 480),
    ("Simulate the month of public consultation before the council votes.", 30, 1440),
    ("What happens when a four-day week is trialled? Simulate the trial's first month.",
     30, 1440),
    ("Simulate the first 48 hours after the leak.", 48, 60),
    ("Simulate the next three hours.", 12, 15),
    ("Unlike last year, the vote is close. Simulate a year of campaigning.", 27, 20160),
    ("Simulate the reaction to the announcement.", 24, 60),  # no span: the default
])
def test_init_covers_the_time_span_the_brief_states(tmp_path, requirement, rounds,
                                                     minutes):
    """issue 26 item 19: a time span the brief's requirement states is covered by
    rounds × minutes_per_round (the finest round length that needs at most 48 rounds);
    SCENARIO.md says where it came from; none: 24 rounds of an hour."""
    text = BIKE.read_text().split("\n\n", 2)
    brief = tmp_path / "brief.md"
    brief.write_text("\n\n".join([text[0], requirement, text[2]]))
    folder = tmp_path / "scenario"
    assert main(["init", str(brief), "--out", str(folder), "--agents", "20"]) == 0
    config = yaml.safe_load((folder / "config.yaml").read_text())
    assert (config["rounds"], config["minutes_per_round"]) == (rounds, minutes)
    time = (folder / "SCENARIO.md").read_text().split("## Time\n\n", 1)[1].split("\n")[0]
    if (rounds, minutes) == (24, 60):
        assert time.startswith("The requirement states no time span")
    else:
        assert time.startswith("The requirement says \u201c")


def test_init_stretches_given_rounds_over_the_span(tmp_path):
    """issue 26 item 19: with --rounds, the round length grows to cover the brief's span
    (carbon_levy.md: "the two weeks after the announcement")."""
    folder = _init(tmp_path)  # --rounds 8
    config = yaml.safe_load((folder / "config.yaml").read_text())
    assert config["rounds"] == ROUNDS
    assert config["rounds"] * config["minutes_per_round"] >= 14 * 24 * 60
    assert "\u201ctwo weeks\u201d" in (folder / "SCENARIO.md").read_text()


def test_a_scenario_that_cannot_be_written_whole_leaves_no_folder(tmp_path):
    """A write that fails part-way (here a file size limit, as a full disk would) leaves
    no half-written scenario folder behind; the error goes on to the caller."""
    import subprocess
    import sys

    out = tmp_path / "scenario"
    script = (
        "import resource, signal, sys\n"
        "from shoal.memory.knowledge.extract import OfflineExtractor\n"
        "from shoal.runs.scenario_init import init_scenario\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (the write fails instead)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "try:\n"
        "    init_scenario(sys.argv[1], sys.argv[2], OfflineExtractor())\n"
        "except OSError as exc:\n"
        "    print('failed:', exc)\n")
    done = subprocess.run([sys.executable, "-c", script, str(ROOT / "examples" / "bike_lanes.md"),
                           str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "failed:" in done.stdout and "File too large" in done.stdout, done.stdout + done.stderr
    assert not out.exists()


def test_an_agent_holds_one_visible_position_per_topic(graph_run):
    """An agent's belief relations on a topic supersede each other: at every round at
    most one is visible ("is undecided about" then "opposes" is not two current facts),
    and the one visible is the latest."""
    run = open_run(graph_run)
    every = run.graph_relations(include_withdrawn=True)
    beliefs = every[every["kind"] == "belief"]
    assert beliefs["predicate"].nunique() == 3  # undecided, supports and opposes occur
    for r in range(1, ROUNDS + 1):
        now = run.graph_relations(as_of=r)
        now = now[now["kind"] == "belief"]
        assert not now.duplicated(["subject", "object"]).any(), r
        latest = beliefs[beliefs["valid_from"] <= r].sort_values("relation_id") \
            .groupby(["subject", "object"])["relation_id"].last()
        assert set(now["relation_id"]) == set(latest), r


class _NoToolsHandler(BaseHTTPRequestHandler):
    """A chat model that cannot call tools (a small local model: docs/llm.md): asked with
    tools it writes prose; asked for a JSON object, it writes one, pretty-printed."""

    def log_message(self, *args) -> None:  # (quiet)
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        _NoToolsHandler.asked.append(body)
        content = "I read about the toll today." if body.get("tools") else json.dumps({
            "entities": [{"name": "Harbour Workers' Union", "type": "organisation"},
                         {"name": "toll", "type": "topic"}],
            "facts": [{"subject": "Harbour Workers' Union", "predicate": "supports",
                       "object": "toll", "sentence": "The Harbour Workers' Union supports "
                                                     "the toll."}]}, indent=2)
        answer = json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 40}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    asked: ClassVar[list[dict]] = []


@pytest.mark.parametrize("output", ["json_schema", "text"])
def test_the_llm_extractor_asks_a_model_without_tools_for_json(output):
    """A provider set to `output: json_schema` or `text` (a model that cannot write a tool
    call) is asked for the facts as one JSON object, bounded by the schema with
    `json_schema`, and its answer gives facts: asked with tools, every text gave none."""
    from shoal.config.llm import ProviderConfig
    from shoal.memory.knowledge.llm_extractor import LLMExtractor

    _NoToolsHandler.asked = []
    for root in serve_http(_NoToolsHandler):
        extractor = LLMExtractor(ProviderConfig(base_urls=[root + "/v1"], model="m",
                                                max_retries=0, output=output))
        try:
            (found,) = extractor.extract(["The Harbour Workers' Union supports the toll."],
                                         {})
        finally:
            extractor.close()
    (asked,) = _NoToolsHandler.asked
    assert "tools" not in asked and ("response_format" in asked) == (output == "json_schema")
    assert extractor.lost == 0 and [(f.subject.name, f.predicate, f.object.name)
                                    for f in found.facts] == [
        ("Harbour Workers' Union", "supports", "toll")]
